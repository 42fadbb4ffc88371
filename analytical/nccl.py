# SPDX-License-Identifier: Apache-2.0
"""NCCL's own cost model of a collective, read from NVIDIA/nccl at 5067397 (2.29):
src/graph/tuning.cc (``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``) and src/graph/topo.h,
topo.cc (the link bandwidths its topology search starts from).

For each algorithm (ring; double binary tree for all_reduce) and protocol (LL, LL128, Simple)
NCCL prices ``time = latency + bytes / bandwidth`` and runs the fastest; `nccl_choice` does the
same. Latency = the algorithm's base latency + per-step hop latencies of the node's link class
(NVLINK or PCI) and of the network (NET), all in microseconds from ``ncclTunerConstants``.
Bandwidth = the topology's bus bandwidth times the protocol's share (LL: half, capped by
``llMaxBws``; LL128: 0.92, only where every intra-node hop is NVLink), converted to algorithm
bandwidth by nRanks / nsteps (ring) or 1/2 (tree).

The topology's bus bandwidth is the YAML's vendor link (per GPU, per direction; the NVLink bridge
of a bridged pair, `HardwareSpec.pair_bridge`) times what NCCL's topology credits of it:
NVLink: ``SM80/SM90/SM100_NVLINK_BW`` = 20 / 20.6 / 40.1 GB/s per link against the links'
25 / 25 / 50 GB/s per direction; PCIe: width x lane rate / 80 (``kvDictPciGen``: x16 Gen4 24,
Gen5 48 GB/s against 32 and 64); network: the NIC's speed as reported (the YAML's share).
Across nodes the bound is the smaller of that and the GPU's network share.

Not modelled (each named so that a gap is not mistaken for a fit): NVLS and NVLS-tree (their
bandwidth comes from a topology search over speed arrays that a YAML does not reproduce, and
they need NVSwitch multicast; on the store's H100 SXM they lift fp16 8-GPU all_reduce to
~405 GB/s bus bandwidth against ~326 GB/s for int8, which NVLS cannot reduce), CollNet (needs
SHARP switches), PAT (one GPU per node only), and the per-channel bandwidth caps
(``perChMax*Bws``), which bind only above ~37 GB/s per channel. all_to_all and send_recv are
point-to-point sends outside the tuning model: priced as n-1 (one) ring steps of the same
link, protocol and latency classes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from analytical.hardware import HardwareSpec, Link
from analytical.hardware_kinds import Architecture, LinkFabric
from analytical.ops import CollectiveKind, CollectiveSpec

CK = CollectiveKind


class NcclAlgorithm(StrEnum):
    RING = "ring"
    TREE = "tree"


class NcclProtocol(StrEnum):
    LL = "LL"
    LL128 = "LL128"
    SIMPLE = "Simple"


PROTOCOLS = tuple(NcclProtocol)
# tuning.cc ncclTunerConstantsDefaults: baseLatencies and hwLatencies (us) per protocol
# (LL, LL128, Simple).
_BASE_US = {NcclAlgorithm.TREE: (6.8, 14.0, 8.4), NcclAlgorithm.RING: (6.6, 14.0, 8.4)}
_HW_US = {
    "nvlink": {NcclAlgorithm.TREE: (0.6, 1.25, 4.0), NcclAlgorithm.RING: (0.6, 1.9, 3.4)},
    "pcie": {NcclAlgorithm.TREE: (1.0, 1.9, 4.0), NcclAlgorithm.RING: (1.0, 2.5, 5.7)},
    "net": {NcclAlgorithm.TREE: (5.0, 8.5, 14.0), NcclAlgorithm.RING: (2.7, 4.0, 14.0)},
}
# llMaxBws (GB/s): one node by compute capability (Volta, Ampere, Hopper, Blackwell; Ada is
# compute capability 8.9, NCCL's Ampere index), several nodes by CPU (Intel: 2 nodes, more).
_LL_MAX_GBPS_ONE_NODE = {Architecture.AMPERE: 87.7, Architecture.ADA_LOVELACE: 87.7,
                         Architecture.HOPPER: 141.0, Architecture.BLACKWELL: 282.0}
_LL_MAX_GBPS_DEFAULT = 39.0  # Volta's row: the first index, what NCCL falls back to
_LL_MAX_GBPS_NODES = (39.0, 20.4)  # Intel-N2, Intel-N4
# NCCL's topology credit of a link (see the module docstring).
_NVLINK_CREDIT = {Architecture.AMPERE: 20.0 / 25.0, Architecture.HOPPER: 20.6 / 25.0,
                  Architecture.BLACKWELL: 40.1 / 50.0}
_NVLINK_CREDIT_DEFAULT = 0.8
_PCIE_CREDIT = 0.75
_NET_OVERHEAD_US = 1.0  # getNetOverhead on x86 Intel (AMD: 2.0); x3 for Simple
_RING_PLATEAU = 1.4  # multi-node Simple ring all_reduce, compute capability >= 8.0
_PLATEAU_CHANNELS = 16  # nChannels in the plateau test (NCCL's own count is not in a YAML)
# treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B .. 256 MB.
_TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0,
     1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9,
     1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9,
     .9))


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclChoice:
    """One (algorithm, protocol) priced by NCCL's model."""

    algorithm: NcclAlgorithm
    protocol: NcclProtocol
    latency_s: float  # the size-independent part
    bus_bw_bytes_per_s: float  # after the protocol's share, before the nRanks / nsteps ratio
    seconds: float

    @property
    def name(self) -> str:
        return f"{self.algorithm.value}/{self.protocol.value}"


def node_link(spec: CollectiveSpec, hw: HardwareSpec) -> tuple[Link, str]:
    """The link between the group's GPUs inside a node and NCCL's latency class of it
    (``nvlink`` or ``pcie``): the NVLink bridge for a bridged pair."""
    bridged = spec.nodes == 1 and spec.group_size == 2 and hw.pair_bridge is not None
    link = hw.pair_bridge if bridged and hw.pair_bridge is not None else hw.intra_node
    fabric = "nvlink" if link.fabric in (LinkFabric.NVLINK, LinkFabric.XGMI) else "pcie"
    return link, fabric


def _node_bandwidth(spec: CollectiveSpec, hw: HardwareSpec) -> float:
    """Bytes/s NCCL's topology credits the node's link with (all channels together)."""
    link, fabric = node_link(spec, hw)
    credit = (_NVLINK_CREDIT.get(hw.architecture, _NVLINK_CREDIT_DEFAULT)
              if fabric == "nvlink" else _PCIE_CREDIT)
    return link.bandwidth_bytes_per_s * credit


def graph_bandwidth(spec: CollectiveSpec, hw: HardwareSpec) -> float:
    """Bytes/s NCCL's topology gives the collective's ring or tree: the node's link, and across
    nodes at most ``nChannels x bwInter``, NCCL's channels spread over the NICs of the group's
    GPUs in a node (ranks_per_node x the GPU's network share; DGX A100 rings reach ~190 GB/s
    bus bandwidth over 8 x 25 GB/s)."""
    bw = _node_bandwidth(spec, hw)
    if spec.nodes == 1:
        return bw
    return min(bw, spec.ranks_per_node * hw.inter_node.bandwidth_bytes_per_s)


def ring_steps(spec: CollectiveSpec) -> tuple[int, int]:
    """(ring steps in all, steps that cross nodes): ``nsteps`` and ``nInterSteps``."""
    n, nodes = spec.group_size, spec.nodes
    if spec.kind == CK.ALL_REDUCE:
        return 2 * (n - 1), 2 * (nodes - 1)
    if spec.kind == CK.SEND_RECV:
        return 1, int(nodes > 1)
    if spec.kind == CK.BROADCAST:
        return n, nodes - 1
    return n - 1, nodes - 1


def _ll_max(spec: CollectiveSpec, hw: HardwareSpec) -> float:
    if spec.nodes == 1:
        return _LL_MAX_GBPS_ONE_NODE.get(hw.architecture, _LL_MAX_GBPS_DEFAULT) * 1e9
    return _LL_MAX_GBPS_NODES[0 if spec.nodes == 2 else 1] * 1e9


def _ring(spec: CollectiveSpec, hw: HardwareSpec, p: int) -> tuple[float, float]:
    """(latency us, bus bandwidth bytes/s) of the ring with protocol index ``p``."""
    _, fabric = node_link(spec, hw)
    bw = graph_bandwidth(spec, hw) * (0.5, 0.92, 1.0)[p]
    if p == 0:
        bw = min(bw, _ll_max(spec, hw))
    steps, inter = ring_steps(spec)
    base = _BASE_US[NcclAlgorithm.RING][p]
    if spec.kind in (CK.BROADCAST, CK.SEND_RECV):
        return base + _HW_US["net" if spec.nodes > 1 else fabric][NcclAlgorithm.RING][p], bw
    intra = _HW_US[fabric][NcclAlgorithm.RING][p]
    across = _HW_US["net"][NcclAlgorithm.TREE if spec.ranks_per_node == 1
                           else NcclAlgorithm.RING][p]
    if spec.nodes > 1:
        intra = max(intra, _NET_OVERHEAD_US * (3 if p == 2 else 1))
    latency = base + (steps - inter) * intra + inter * across
    if (p == 2 and spec.nodes > 1 and spec.kind == CK.ALL_REDUCE
            and spec.size_bytes / (_PLATEAU_CHANNELS * spec.group_size) >= 64):
        latency *= _RING_PLATEAU
    return latency, bw


def _tree(spec: CollectiveSpec, hw: HardwareSpec, p: int) -> tuple[float, float]:
    """(latency us, bus bandwidth bytes/s) of the all_reduce double binary tree."""
    _, fabric = node_link(spec, hw)
    bw = graph_bandwidth(spec, hw) * 0.92
    if p == 0:
        bw = min(bw / 3.8, _ll_max(spec, hw))
    elif p == 1:
        bw *= 7.0 / 9.0 if spec.nodes == 1 else 120.0 / 128.0
    log_size = int(math.log2(max(1, spec.size_bytes >> 6)))
    if 0 <= log_size < 23:
        bw *= _TREE_CORRECTION[p][log_size]
    hops = (spec.ranks_per_node - 1) * _HW_US[fabric][NcclAlgorithm.TREE][p]
    hops += int(math.log2(spec.nodes)) * _HW_US["net"][NcclAlgorithm.TREE][p]
    return _BASE_US[NcclAlgorithm.TREE][p] + 2 * hops, bw


def _wire_s(spec: CollectiveSpec, hw: HardwareSpec, algorithm: NcclAlgorithm,
            bw: float) -> float:
    """Size-dependent seconds at bus bandwidth ``bw``: ring nBytes x nsteps / nRanks (the
    nccl-tests bus bytes), tree 2 x nBytes; all_to_all across nodes sends (local-1)/n of the
    buffer over the node's link and (n-local)/n over the network at once, the slower bounds."""
    if algorithm == NcclAlgorithm.TREE:
        return 2.0 * spec.size_bytes / bw
    if spec.kind != CK.ALL_TO_ALL or spec.nodes == 1:
        return spec.bytes / bw
    share = bw / graph_bandwidth(spec, hw)  # the protocol's share of the links
    node_bw = _node_bandwidth(spec, hw) * share
    n, local = spec.group_size, spec.ranks_per_node
    return max((local - 1) / n * spec.size_bytes / node_bw,
               (n - local) / n * spec.size_bytes / (hw.inter_node.bandwidth_bytes_per_s * share))


def nccl_candidates(spec: CollectiveSpec, hw: HardwareSpec) -> list[NcclChoice]:
    """Every (algorithm, protocol) NCCL enables for ``spec`` on ``hw``, priced."""
    if spec.group_size == 1:
        return [NcclChoice(algorithm=NcclAlgorithm.RING, protocol=NcclProtocol.SIMPLE,
                           latency_s=0.0, bus_bw_bytes_per_s=math.inf, seconds=0.0)]
    _, fabric = node_link(spec, hw)
    out = []
    for algorithm, price in ((NcclAlgorithm.RING, _ring), (NcclAlgorithm.TREE, _tree)):
        if algorithm == NcclAlgorithm.TREE and spec.kind != CK.ALL_REDUCE:
            continue
        for p, protocol in enumerate(PROTOCOLS):
            if protocol == NcclProtocol.LL128 and fabric != "nvlink":
                continue  # LL128 only where the intra-node path is NVLink (typeIntra <= NVB)
            latency_us, bw = price(spec, hw, p)
            out.append(NcclChoice(algorithm=algorithm, protocol=protocol,
                                  latency_s=latency_us * 1e-6, bus_bw_bytes_per_s=bw,
                                  seconds=latency_us * 1e-6 + _wire_s(spec, hw, algorithm, bw)))
    return out


def nccl_choice(spec: CollectiveSpec, hw: HardwareSpec,
                algorithm: NcclAlgorithm | None = None) -> NcclChoice:
    """The fastest (algorithm, protocol) by NCCL's model, as NCCL's tuner picks it, among
    ``algorithm``'s protocols only when given. Raises ValueError if it does not apply."""
    options = [c for c in nccl_candidates(spec, hw)
               if algorithm is None or c.algorithm == algorithm or spec.group_size == 1]
    if not options:
        raise ValueError(f"{algorithm} does not apply to {spec.kind}")
    return min(options, key=lambda c: c.seconds)


def nccl_time(spec: CollectiveSpec, hw: HardwareSpec) -> float:
    """Seconds NCCL's model gives ``spec`` on ``hw`` (its fastest choice)."""
    return nccl_choice(spec, hw).seconds


def nccl_protocol_seconds(spec: CollectiveSpec, hw: HardwareSpec) -> list[float]:
    """Seconds per protocol (LL, LL128, Simple), the fastest algorithm of each; inf where NCCL
    disables the protocol."""
    best = dict.fromkeys(PROTOCOLS, math.inf)
    for c in nccl_candidates(spec, hw):
        best[c.protocol] = min(best[c.protocol], c.seconds)
    return [best[p] for p in PROTOCOLS]
