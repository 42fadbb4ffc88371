# SPDX-License-Identifier: Apache-2.0
"""Collective and point-to-point communication time from link bandwidth and latency.

The alpha-beta (Hockney) model: a step that moves ``x`` bytes over a link costs
``alpha + x / B``, where alpha is the link's start-up latency and B its bandwidth times the
achievable efficiency from the hardware file. Each algorithm below sums its steps (Thakur,
Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH", IJHPCA 2005;
Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms", JPDC 2009). Message sizes follow the
nccl-tests convention of `analytical.ops.CollectiveSpec`. Measured collective latencies live in
the profiler's store; this is the fallback.

Algorithms (the registry `COLLECTIVE_ALGORITHMS`; each returns seconds, or None where it does not
apply to the collective or layout):

- ``ring``: flat ring over all ranks. B is the bottleneck link of the ring: NVLink when the group
  fits in one node, else the network share of one GPU (``hw.inter_node``).
- ``tree``: double binary tree all-reduce (Sanders, Speck & Traeff, Parallel Computing 2009; NCCL
  2.4): 2*ceil(log2 n) latency steps, and each rank sends 2S in total (S in the reduce, S in the
  broadcast, half per tree), so it wins for small messages and loses slightly for large ones.
- ``hierarchical``: intra-node reduce-scatter over NVLink, inter-node ring among the ranks with
  the same local index (one per node, each on its own NIC share) over S / ranks_per_node, then
  intra-node all-gather. The bandwidth that NCCL's multi-channel rings reach across nodes.
- ``pairwise``: all-to-all as n-1 exchange steps, and send/recv.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import HardwareSpec, Link
from analytical.ops import CollectiveKind, CollectiveSpec

CK = CollectiveKind


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveEstimate:
    """Time of one collective and the algorithm that gives it."""

    latency_s: float
    algorithm: str
    candidates: tuple[tuple[str, float], ...]  # every applicable (algorithm, seconds)


def _bandwidth(link: Link, efficiency: float) -> float:
    return link.bandwidth_bytes_per_s * efficiency


def _intra(hw: HardwareSpec) -> tuple[float, float]:
    """(alpha seconds, B bytes/s) of the intra-node link."""
    return hw.intra_node.latency_s, _bandwidth(hw.intra_node, hw.efficiency.intra_node)


def _inter(hw: HardwareSpec) -> tuple[float, float]:
    """(alpha seconds, B bytes/s) of one GPU's share of the node network."""
    return hw.inter_node.latency_s, _bandwidth(hw.inter_node, hw.efficiency.inter_node)


def _bottleneck(spec: CollectiveSpec, hw: HardwareSpec) -> tuple[float, float]:
    """The slowest link a flat algorithm crosses: intra-node if the group fits in one node."""
    return _intra(hw) if spec.nodes == 1 else _inter(hw)


def ring_all_reduce_time(n: int, size_bytes: float, alpha_s: float, bw: float) -> float:
    """Ring all-reduce: reduce-scatter then all-gather, 2(n-1) steps of S/n bytes each:
    2(n-1)*alpha + 2(n-1)/n * S / B (Patarasuk & Yuan 2009)."""
    return 2 * (n - 1) * alpha_s + 2 * (n - 1) / n * size_bytes / bw


def ring_gather_time(n: int, size_bytes: float, alpha_s: float, bw: float) -> float:
    """Ring all-gather or reduce-scatter of an S-byte buffer: (n-1)*alpha + (n-1)/n * S / B."""
    return (n - 1) * alpha_s + (n - 1) / n * size_bytes / bw


def _ring(spec: CollectiveSpec, hw: HardwareSpec) -> float | None:
    n, size = spec.group_size, float(spec.size_bytes)
    alpha, bw = _bottleneck(spec, hw)
    if spec.kind == CK.ALL_REDUCE:
        return ring_all_reduce_time(n, size, alpha, bw)
    if spec.kind in (CK.ALL_GATHER, CK.REDUCE_SCATTER):
        return ring_gather_time(n, size, alpha, bw)
    if spec.kind == CK.BROADCAST:
        # Pipelined chain: n-1 hops of start-up, then the whole buffer streams at B.
        return 0.0 if n == 1 else (n - 1) * alpha + size / bw
    return None


def _tree(spec: CollectiveSpec, hw: HardwareSpec) -> float | None:
    if spec.kind != CK.ALL_REDUCE:
        return None
    n, size = spec.group_size, float(spec.size_bytes)
    if n == 1:
        return 0.0
    alpha, bw = _bottleneck(spec, hw)
    return 2 * math.ceil(math.log2(n)) * alpha + 2 * size / bw


def _hierarchical(spec: CollectiveSpec, hw: HardwareSpec) -> float | None:
    if spec.kind not in (CK.ALL_REDUCE, CK.ALL_GATHER, CK.REDUCE_SCATTER):
        return None
    local, nodes = spec.ranks_per_node, spec.nodes
    if nodes == 1 or local == 1:
        return None  # degenerates to the flat ring
    size = float(spec.size_bytes)
    alpha_i, bw_i = _intra(hw)
    alpha_e, bw_e = _inter(hw)
    intra = ring_gather_time(local, size, alpha_i, bw_i)  # reduce-scatter or all-gather
    if spec.kind == CK.ALL_REDUCE:
        return 2 * intra + ring_all_reduce_time(nodes, size / local, alpha_e, bw_e)
    return intra + ring_gather_time(nodes, size / local, alpha_e, bw_e)


def _pairwise(spec: CollectiveSpec, hw: HardwareSpec) -> float | None:
    n, size = spec.group_size, float(spec.size_bytes)
    if spec.kind == CK.SEND_RECV:
        return p2p_time(size, hw, same_node=spec.nodes == 1)
    if spec.kind != CK.ALL_TO_ALL:
        return None
    if n == 1:
        return 0.0
    # Each rank sends S/n to every other rank: (local-1) peers over NVLink, (n-local) over the
    # network, concurrently; the slower share bounds the time: (n-1)*alpha + (n-1)/n * S / B
    # within one node.
    local = spec.ranks_per_node
    alpha_i, bw_i = _intra(hw)
    intra_s = (local - 1) / n * size / bw_i
    if spec.nodes == 1:
        return (n - 1) * alpha_i + intra_s
    alpha_e, bw_e = _inter(hw)
    inter_s = (n - local) / n * size / bw_e
    return (n - 1) * max(alpha_i, alpha_e) + max(intra_s, inter_s)


CollectiveAlgorithm = Callable[[CollectiveSpec, HardwareSpec], "float | None"]

COLLECTIVE_ALGORITHMS: dict[str, CollectiveAlgorithm] = {
    "ring": _ring,
    "tree": _tree,
    "hierarchical": _hierarchical,
    "pairwise": _pairwise,
}


def p2p_time(size_bytes: float, hw: HardwareSpec, *, same_node: bool) -> float:
    """One message between two ranks: alpha + S / B over NVLink or the network (seconds)."""
    if size_bytes < 0:
        raise SpecError("size_bytes", f"must be >= 0, got {size_bytes}")
    alpha, bw = _intra(hw) if same_node else _inter(hw)
    return alpha + size_bytes / bw


def collective_estimate(spec: CollectiveSpec, hw: HardwareSpec,
                        algorithm: str | None = None) -> CollectiveEstimate:
    """Time of ``spec`` on ``hw`` with ``algorithm``, or with the fastest applicable one (what
    NCCL's tuner does) when None. Raises UnknownNameError / SpecError for a bad algorithm."""
    if algorithm is not None:
        if algorithm not in COLLECTIVE_ALGORITHMS:
            raise UnknownNameError("collective algorithm", algorithm, list(COLLECTIVE_ALGORITHMS))
        time_s = COLLECTIVE_ALGORITHMS[algorithm](spec, hw)
        if time_s is None:
            raise SpecError("algorithm", f"{algorithm} does not apply to {spec.kind} over "
                            f"{spec.group_size} ranks ({spec.ranks_per_node} per node)")
        return CollectiveEstimate(latency_s=time_s, algorithm=algorithm,
                                  candidates=((algorithm, time_s),))
    candidates = tuple((name, t) for name, fn in COLLECTIVE_ALGORITHMS.items()
                       if (t := fn(spec, hw)) is not None)
    name, time_s = min(candidates, key=lambda item: item[1])
    return CollectiveEstimate(latency_s=time_s, algorithm=name, candidates=candidates)


def collective_time(spec: CollectiveSpec, hw: HardwareSpec, algorithm: str | None = None) -> float:
    """Seconds for ``spec`` on ``hw`` (see `collective_estimate`)."""
    return collective_estimate(spec, hw, algorithm).latency_s
