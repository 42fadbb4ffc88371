# SPDX-License-Identifier: Apache-2.0
"""NCCL's own cost model of a collective, read from NVIDIA/nccl v2.29.2-1 (5067397's tuning
constants are the same): src/graph/tuning.cc (``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``,
``ncclTunerConstantsDefaults``) and, for a hardware file with ``interconnect.topology``, the
graphs its topology search finds (`analytical.nccl_graph`: channels x bandwidth per channel).

For each algorithm (ring; double binary tree for all_reduce; NVLS on NVLink-SHARP switches) and
protocol (LL, LL128, Simple) NCCL prices ``time = latency + bytes / bandwidth`` and runs the
fastest; `nccl_choice` does the same. Latency = the algorithm's base latency + per-step hop
latencies of the node's link class (NVLINK or PCI) and of the network (NET), in microseconds
(NVLS: 25 us, its NVLINK hop latency, and no base). Bandwidth = the graph's ``nChannels x
bwIntra`` times the protocol's share (LL: half, capped by ``llMaxBws``; LL128: 0.92, capped by
``nChannels x perChMaxRingLL128Bws``, only where the intra-node path is NVLink; tree: 0.92,
capped by ``nChannels x perChMaxTreeBws``; NVLS all_reduce: ``bwIntra x nvlsEfficiency x
(nCh-1)/nCh x 2`` per channel, at most ``bwInter``), converted to algorithm bandwidth by
nRanks / nsteps (ring, NVLS all_reduce) or 1/2 (tree). NVLS reduces only 16/32/64-bit types
(device.h ``ncclNvlsSupported``: not int8 or fp8) and runs on one node here.

Without a topology the graph is the YAML's vendor link times what NCCL's topology credits of
it: NVLink ``SM80/SM90/SM100_NVLINK_BW`` = 20 / 20.6 / 40.1 GB/s per link against the links'
25 / 25 / 50 GB/s per direction; PCIe 0.75 (``kvDictPciGen``: x16 Gen4 24 GB/s of 32), with no
per-channel caps and no NVLS. Across nodes the bound is the smaller of that and the GPU's
network share (ranks per node x the NIC share).

Not modelled (each named so that a gap is not mistaken for a fit): NVLS-tree and NVLS across
nodes, CollNet (needs SHARP switches), PAT (one GPU per node only), the tree search's simpler
pattern on Hopper (x 0.85 when it falls back to it), and what P2P-less PCIe does to bandwidth
(NCCL's model prices a path through the CPU as a PCI path, paths.cc ``addInterStep`` keeping the
smaller of its two PCI links: the store's L40S bus bandwidth falls from 20 GB/s on 2 GPUs to 5.2
on 4 and 1.4 on 8, which no term here reproduces; `intra_transport` names the transport, SHM
there, for the transfer predictor to tell such a box from one with PCIe switches). all_to_all and send_recv
are point-to-point sends outside the tuning model: priced as n-1 (one) ring steps of the same
link, protocol and latency classes; a send_recv inside a node over NVLink at that path's own
bandwidth (`_p2p_bandwidth`), not the ring graph's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from analytical.dtypes import DType
from analytical.hardware import HardwareSpec, Link
from analytical.hardware_kinds import Architecture, LinkFabric
from analytical.nccl_graph import Graph, nvls_graph, ring_graph
from analytical.ops import CollectiveKind, CollectiveSpec

CK = CollectiveKind


class NcclAlgorithm(StrEnum):
    RING = "ring"
    TREE = "tree"
    NVLS = "nvls"


class NcclTransport(StrEnum):
    """How NCCL moves a group's data inside a node (src/transport/{p2p,shm}.cc): P2P over
    NVLink, P2P over PCIe switches, or through host memory (SHM) where ``ncclTopoCheckP2p``
    refuses P2P (src/graph/paths.cc v2.29.2-1: beyond ``PATH_PXB`` by default, i.e. through a
    CPU host bridge; ``ncclTopoComputePaths`` then routes the GPU-to-GPU path via the CPU)."""

    NVLINK = "nvlink"
    PCIE_P2P = "pcie_p2p"
    SHM = "shm"


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
_NVLS_US = 25.0  # hwLatencies[NVLINK][NVLS][Simple]; baseLatencies[NVLS] = 0
# Per compute-capability index (Volta, Ampere, Hopper, Blackwell; Ada is compute capability 8.9,
# NCCL's Ampere index) and node-count index (1, 2, more), GB/s: llMaxBws (one node), and the
# per-channel caps perChMaxRingLL128Bws, perChMaxTreeBws, perChMaxTreeLL128Bws; nvlsEfficiency.
_LL_MAX_GBPS_ONE_NODE = (39.0, 87.7, 141.0, 282.0)
_PER_CH_RING_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7,) * 3, (34.5, 34.6, 34.5))
_PER_CH_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
_PER_CH_TREE_LL128 = ((20.0,) * 3, (20.0,) * 3, (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))
_NVLS_EFFICIENCY = (0.0, 0.0, 0.85, 0.74)
_NVLS_DTYPES = (DType.FP16, DType.BF16, DType.FP32)  # ncclNvlsSupported, of llmsim's dtypes
_ARCH_INDEX = {Architecture.AMPERE: 1, Architecture.ADA_LOVELACE: 1, Architecture.HOPPER: 2,
               Architecture.BLACKWELL: 3}  # Volta's row (0) is what NCCL falls back to
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


def intra_transport(spec: CollectiveSpec, hw: HardwareSpec) -> NcclTransport | None:
    """The transport of the group's intra-node hops: NVLink where the group's path is NVLink,
    else P2P over PCIe unless the hardware file's topology says GPUs reach each other only
    through the CPU (``pcie_p2p: false``), where NCCL falls back to SHM; None with one rank per
    node (every hop crosses the network)."""
    if spec.ranks_per_node == 1:
        return None
    if _intra_nvlink(spec, hw):
        return NcclTransport.NVLINK
    if hw.topology is not None and not hw.topology.pcie_p2p:
        return NcclTransport.SHM
    return NcclTransport.PCIE_P2P


def _cc_index(hw: HardwareSpec) -> int:
    """NCCL's compute-capability index (0 Volta, 1 Ampere/Ada, 2 Hopper, 3 Blackwell)."""
    if hw.topology is None:
        return _ARCH_INDEX.get(hw.architecture, 0)
    cc = hw.topology.compute_capability
    return 3 if cc >= 100 else 2 if cc >= 90 else 1 if cc >= 80 else 0


def ring_channels(spec: CollectiveSpec, hw: HardwareSpec) -> Graph | None:
    """The ring/tree graph NCCL's search finds for the group's GPUs in a node, None without a
    topology in the hardware file."""
    if hw.topology is None:
        return None
    return ring_graph(hw.topology, spec.ranks_per_node)


def _node_bandwidth(spec: CollectiveSpec, hw: HardwareSpec) -> float:
    """Bytes/s NCCL's topology credits the node's link with (all channels together)."""
    graph = ring_channels(spec, hw)
    if graph is not None:
        return graph.bus_gbps * 1e9
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
        return _LL_MAX_GBPS_ONE_NODE[_cc_index(hw)] * 1e9
    return _LL_MAX_GBPS_NODES[0 if spec.nodes == 2 else 1] * 1e9


def _per_channel_cap(spec: CollectiveSpec, hw: HardwareSpec,
                     table: tuple[tuple[float, ...], ...]) -> float:
    """nChannels x a per-channel cap (bytes/s); inf without a searched graph."""
    graph = ring_channels(spec, hw)
    if graph is None:
        return math.inf
    return graph.n_channels * table[_cc_index(hw)][min(spec.nodes, 3) - 1] * 1e9


def _intra_nvlink(spec: CollectiveSpec, hw: HardwareSpec) -> bool:
    """NCCL's ``typeIntra <= PATH_NVB``: the group's intra-node path is NVLink."""
    graph = ring_channels(spec, hw)
    return graph.nvlink if graph is not None else node_link(spec, hw)[1] == "nvlink"


def _ring(spec: CollectiveSpec, hw: HardwareSpec, p: int) -> tuple[float, float]:
    """(latency us, bus bandwidth bytes/s) of the ring with protocol index ``p``."""
    fabric = "nvlink" if _intra_nvlink(spec, hw) else "pcie"
    bw = graph_bandwidth(spec, hw) * (0.5, 0.92, 1.0)[p]
    if p == 0:
        bw = min(bw, _ll_max(spec, hw))
    elif p == 1:
        bw = min(bw, _per_channel_cap(spec, hw, _PER_CH_RING_LL128))
    steps, inter = ring_steps(spec)
    base = _BASE_US[NcclAlgorithm.RING][p]
    if spec.kind == CK.SEND_RECV and spec.nodes == 1 and fabric == "nvlink":
        bw = _p2p_bandwidth(spec, hw) * (0.5, 0.92, 1.0)[p]
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


def _p2p_bandwidth(spec: CollectiveSpec, hw: HardwareSpec) -> float:
    """Bytes/s of a send/recv between two GPUs of a node joined by NVLink: the path's own links
    (the bridge of a bridged pair, else the GPU's NVLink to the switches, per direction, as the
    hardware file states them). NCCL does not run point-to-point operations on the ring graph:
    it gives a peer two channels per NVLink of the path (src/graph/paths.cc v2.29.2-1,
    ``ncclTopoGetNchannels``: ``2 * (path->bw / nvlBw)`` for PATH_NVL / PATH_NVB; 24 on a
    12-link A100 bridge against the ring graph's 12), enough to fill the links. Vidur's
    send_recv tables measure 286-323 GB/s over A100 PCIe's 300 GB/s bridge between 16 and 64
    MB, where the ring graph's 240 GB/s had NCCL's model +50% too slow (signed median, n=993);
    over NVSwitch 228-258 (A100, 300 GB/s of links) and 314-348 GB/s (H100, 450)."""
    return node_link(spec, hw)[0].bandwidth_bytes_per_s


def _tree(spec: CollectiveSpec, hw: HardwareSpec, p: int) -> tuple[float, float]:
    """(latency us, bus bandwidth bytes/s) of the all_reduce double binary tree."""
    fabric = "nvlink" if _intra_nvlink(spec, hw) else "pcie"
    bw = min(graph_bandwidth(spec, hw) * 0.92, _per_channel_cap(spec, hw, _PER_CH_TREE))
    if p == 0:
        bw = min(bw / 3.8, _ll_max(spec, hw))
    elif p == 1:
        bw = min(bw * (7.0 / 9.0 if spec.nodes == 1 else 120.0 / 128.0),
                 _per_channel_cap(spec, hw, _PER_CH_TREE_LL128))
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


def _nvls(spec: CollectiveSpec, hw: HardwareSpec) -> NcclChoice | None:
    """NVLS (Simple only) where NCCL runs it: one node of NVLink-SHARP switches, all_reduce of
    a type the switches reduce, all_gather, reduce_scatter; at least 2 channels."""
    kinds = (CK.ALL_REDUCE, CK.ALL_GATHER, CK.REDUCE_SCATTER)
    if hw.topology is None or spec.nodes > 1 or spec.kind not in kinds:
        return None
    if spec.kind != CK.ALL_GATHER and spec.dtype not in _NVLS_DTYPES:
        return None
    graph = nvls_graph(hw.topology, spec.group_size)
    if graph is None or graph.n_channels < 2:
        return None
    n = graph.n_channels
    intra = graph.bw_intra * _NVLS_EFFICIENCY[_cc_index(hw)] * (n - 1) / n
    ppn = spec.ranks_per_node
    intra *= 2.0 if spec.kind == CK.ALL_REDUCE else (ppn - 1) / ppn
    bw = n * min(intra, graph.bw_inter) * 1e9
    # all_reduce converts by nRanks / nsteps (the bus bytes); all_gather / reduce_scatter not
    wire = spec.bytes / bw if spec.kind == CK.ALL_REDUCE else spec.size_bytes / bw
    return NcclChoice(algorithm=NcclAlgorithm.NVLS, protocol=NcclProtocol.SIMPLE,
                      latency_s=_NVLS_US * 1e-6, bus_bw_bytes_per_s=bw,
                      seconds=_NVLS_US * 1e-6 + wire)


def nccl_candidates(spec: CollectiveSpec, hw: HardwareSpec) -> list[NcclChoice]:
    """Every (algorithm, protocol) NCCL enables for ``spec`` on ``hw``, priced."""
    if spec.group_size == 1:
        return [NcclChoice(algorithm=NcclAlgorithm.RING, protocol=NcclProtocol.SIMPLE,
                           latency_s=0.0, bus_bw_bytes_per_s=math.inf, seconds=0.0)]
    nvlink = _intra_nvlink(spec, hw)
    nvls = _nvls(spec, hw)
    out = [] if nvls is None else [nvls]
    for algorithm, price in ((NcclAlgorithm.RING, _ring), (NcclAlgorithm.TREE, _tree)):
        if algorithm == NcclAlgorithm.TREE and spec.kind != CK.ALL_REDUCE:
            continue
        for p, protocol in enumerate(PROTOCOLS):
            if protocol == NcclProtocol.LL128 and not nvlink:
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
