# SPDX-License-Identifier: Apache-2.0
"""NCCL's topology search reduced to what its cost model reads from a graph: channels and
bandwidth per channel (NVIDIA/nccl v2.29.2-1, src/graph/search.cc ``ncclTopoCompute``,
``ncclTopoDupChannels``, ``ncclTopoSearchTryNvls``, ``ncclTopoCompareGraphs``; src/graph/topo.h
link bandwidths), on a hardware file's `analytical.hardware_topology.Topology`.

The search tries per-channel speeds from an array chosen by compute capability, starting at the
highest one that fits the GPU's fastest path (``maxBw``) and its total bandwidth (``totalBw``),
and keeps the graph with the most ``nChannels x speed``; one GPU-to-NVSwitch (or bridge) link
carries every ring channel once each way, so ``floor(total / speed)`` channels fit. It walks down
the array while the next speed is above 0.49 of the best, stops at a graph that uses the whole
link, doubles the channels of a fast graph (halving their speed), then tries faster speeds at
that channel count. NVLS pulls one channel per GPU, each GPU's link carrying every channel once
and its own twice, so ``(nGPUs + 1) x speed`` must fit; its ``bwInter`` then rises to twice
``bwIntra`` or the array's top. H100 SXM: ring 12 x 30 GB/s (the 18 x 20.6 links), NVLS on 8
GPUs 8 x 40 intra / 60 inter; B200 ring 16 x 45, NVLS 8 x 80 / 90; A100 ring 12 x 20; PCIe Gen4
x16 (24 GB/s) 2 x 12.

Not reproduced: searches across nodes (channels per NIC; `analytical.nccl` bounds a multi-node
graph by the NICs instead), split-NVLink (two sockets) layouts, and the search's timeouts.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from analytical.hardware_topology import Topology

# topo.h: NCCL's bandwidth of one NVLink by compute capability (GB/s per direction).
_NVLINK_GBPS = ((100, 40.1), (90, 20.6), (87, 20.0), (86, 12.0), (80, 20.0), (70, 20.0),
                (60, 18.0))
# search.cc: speedArrayIntra / sm90SpeedArrayIntra / sm100SpeedArrayIntra (one node).
_SPEEDS = {
    0: (40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0),
    90: (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0),
    100: (90.0, 80.0, 70.0, 60.0, 50.0, 45.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0),
}
RING_MAX_CHANNELS = 32  # init.cc: ringGraph->maxChannels = MAXCHANNELS / 2
NVLS_MAX_ARITY = 32  # device.h NCCL_MAX_NVLS_ARITY


@dataclass(frozen=True, slots=True, kw_only=True)
class Graph:
    """A searched graph: ``n_channels`` channels of ``bw_intra`` GB/s each (``bw_inter`` for
    NVLS's pull side), over NVLink (NCCL's ``typeIntra == LINK_NVL``) or PCIe."""

    n_channels: int
    bw_intra: float
    bw_inter: float
    nvlink: bool

    @property
    def bus_gbps(self) -> float:
        return self.n_channels * self.bw_intra


def nvlink_gbps(cc: int) -> float:
    """NCCL's bandwidth of one NVLink (``SM*_NVLINK_BW``) for compute capability ``cc``."""
    return next(bw for floor, bw in _NVLINK_GBPS if cc >= floor)


def _speeds(cc: int) -> tuple[float, ...]:
    return _SPEEDS[100 if cc >= 100 else 90 if cc >= 90 else 0]


def node_link_gbps(t: Topology, group_in_node: int) -> tuple[float, bool]:
    """(GB/s of a GPU's path to its peers as NCCL's topology sets it, NVLink or not): all its
    NVLinks to the switches, or to its bridged peer for a pair; else its PCIe link."""
    if t.nvlink_links and (t.nvswitch or group_in_node == 2):
        return t.nvlink_links * nvlink_gbps(t.compute_capability), True
    return t.pcie_gb_per_s, False


@functools.cache
def ring_graph(t: Topology, group_in_node: int) -> Graph:
    """The ring (and tree: same channels) graph of ``group_in_node`` GPUs of one node. Cached:
    `analytical.nccl` asks for it once per protocol, cap and link check of every collective."""
    total, nvlink = node_link_gbps(t, group_in_node)
    speeds = _speeds(t.compute_capability)
    i = next((k for k, s in enumerate(speeds) if s <= total), len(speeds) - 1)
    n, bw = 0, 0.0
    while True:  # pass 1: walk down the speeds
        fits = min(RING_MAX_CHANNELS, math.floor(total / speeds[i] + 1e-9))
        if fits * speeds[i] > n * bw:
            n, bw = fits, speeds[i]
        if n * bw >= total or i + 1 >= len(speeds) or (n and speeds[i + 1] / bw <= 0.49):
            break
        i += 1
    if n == 0:
        return Graph(n_channels=1, bw_intra=0.1, bw_inter=0.1, nvlink=False)
    if bw >= 25.0 and not (t.compute_capability > 80 and bw < 50.0 and n > 4):  # dup channels
        dup = min(2 * n, RING_MAX_CHANNELS)
        n, bw = dup, bw / math.ceil(dup / n)
    faster = [s for s in speeds if s > bw and n * s <= total]  # pass 2 at the same channels
    if faster:
        bw = max(faster)
    return Graph(n_channels=n, bw_intra=bw, bw_inter=bw, nvlink=nvlink)


@functools.cache
def nvls_graph(t: Topology, group_in_node: int) -> Graph | None:
    """The NVLS graph of ``group_in_node`` GPUs on NVLink-SHARP switches, None where NCCL has
    none (no NVLS switches, before Hopper, one GPU). Cached like `ring_graph`."""
    if not (t.nvls and t.nvswitch and t.compute_capability >= 90 and group_in_node >= 2):
        return None
    total, _ = node_link_gbps(t, group_in_node)
    n = min(NVLS_MAX_ARITY, group_in_node)
    speeds = _speeds(t.compute_capability)
    ok = [s for s in speeds if s * n <= total * n / (n - 1) and (n + 1) * s <= total]
    if not ok:
        return None
    bw_intra = max(ok)
    up = [s for s in speeds if s > bw_intra]
    bw_inter = bw_intra
    for s in reversed(up):  # pass 2 raises bwInter while it is under twice bwIntra
        if bw_inter >= 2 * bw_intra:
            break
        bw_inter = s
    return Graph(n_channels=n, bw_intra=bw_intra, bw_inter=bw_inter, nvlink=True)
