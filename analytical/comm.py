# SPDX-License-Identifier: Apache-2.0
"""Collective and point-to-point communication time.

Collectives are priced the way NCCL prices them (`analytical.nccl`: its tuning model's base and
per-hop latencies, bandwidth shares per algorithm x protocol, and its choice of the fastest), on
the hardware file's links. ``all_to_all`` is n-1 pairwise sends and ``send_recv`` one: NCCL runs
them as point-to-point operations outside its tuning model, priced here with the same classes.
Message sizes follow the nccl-tests convention of `analytical.ops.CollectiveSpec`. Measured
collective latencies live in the profiler's store; this is the fallback.

A point-to-point message outside a collective (`p2p_time`: pipeline-parallel activations, a
KV-cache hand-off) is the alpha-beta (Hockney) model: ``alpha + x / B``, alpha the link's
start-up latency and B its bandwidth times the achievable efficiency from the hardware file.
"""

from __future__ import annotations

from dataclasses import dataclass

from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import HardwareSpec
from analytical.nccl import NcclAlgorithm, nccl_candidates, nccl_choice
from analytical.ops import CollectiveSpec

COLLECTIVE_ALGORITHMS = tuple(a.value for a in NcclAlgorithm)


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveEstimate:
    """Time of one collective and the NCCL algorithm/protocol that gives it."""

    latency_s: float
    algorithm: str  # "ring/LL", "tree/Simple", ...
    candidates: tuple[tuple[str, float], ...]  # every enabled (algorithm/protocol, seconds)


def p2p_time(size_bytes: float, hw: HardwareSpec, *, same_node: bool) -> float:
    """One message between two ranks: alpha + S / B over NVLink or the network (seconds)."""
    if size_bytes < 0:
        raise SpecError("size_bytes", f"must be >= 0, got {size_bytes}")
    link = hw.intra_node if same_node else hw.inter_node
    eff = hw.efficiency.intra_node if same_node else hw.efficiency.inter_node
    return link.latency_s + size_bytes / (link.bandwidth_bytes_per_s * eff)


def collective_estimate(spec: CollectiveSpec, hw: HardwareSpec,
                        algorithm: str | None = None) -> CollectiveEstimate:
    """Time of ``spec`` on ``hw`` with ``algorithm`` (``ring`` or ``tree``, its fastest
    protocol), or with NCCL's own choice when None. Raises UnknownNameError / SpecError for a
    bad algorithm."""
    if algorithm is not None and algorithm not in COLLECTIVE_ALGORITHMS:
        raise UnknownNameError("collective algorithm", algorithm, list(COLLECTIVE_ALGORITHMS))
    try:
        best = nccl_choice(spec, hw, None if algorithm is None else NcclAlgorithm(algorithm))
    except ValueError:
        raise SpecError("algorithm", f"{algorithm} does not apply to {spec.kind} over "
                        f"{spec.group_size} ranks ({spec.ranks_per_node} per node)") from None
    candidates = tuple((c.name, c.seconds) for c in nccl_candidates(spec, hw))
    return CollectiveEstimate(latency_s=best.seconds, algorithm=best.name, candidates=candidates)


def collective_time(spec: CollectiveSpec, hw: HardwareSpec, algorithm: str | None = None) -> float:
    """Seconds for ``spec`` on ``hw`` (see `collective_estimate`)."""
    return collective_estimate(spec, hw, algorithm).latency_s
