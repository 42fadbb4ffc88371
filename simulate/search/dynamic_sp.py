# SPDX-License-Identifier: Apache-2.0
"""Dynamic sequence parallelism (Charon's case): a per-request SP degree for a batch of
sequences of different lengths, against one fixed SP degree for all.

A request of length s on a group of d GPUs runs ring attention with the zigzag split (each rank
holds chunks i and 2d-1-i, so causal work is balanced, as in Megatron-Core context parallel):
per rank the attention work is C(s)/d, done in d steps; step 0 is local, each of the other d-1
steps computes C(s)/d^2 while the next KV block (s/d tokens) travels one ring hop, so a step
costs max(C(s)/d^2, hop). Time t(s, d) = C(s)/d^2 + (d-1) * max(C(s)/d^2, hop(s/d)).

The GPU budget G is split into groups of power-of-two sizes; each group runs its requests one
after another; the batch's attention latency is the slowest group's total. Fixed SP uses G/d
groups of one size d (requests assigned longest-first to the group that finishes them first).
Dynamic SP gives each request its own degree and takes the better of two plans: (a) one split
of G into groups of mixed power-of-two sizes, all running at once; (b) phases, one per degree
used, each a fixed-SP run of the requests given that degree, run one after another (every
degree per distinct length is tried). Both contain the fixed plans, so dynamic is never worse.
Memory per GPU is not checked here.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.ops import AttentionSpec, CollectiveKind, CollectiveSpec

__all__ = ["SpPlan", "ring_attention_time", "plan_fixed_sp", "plan_dynamic_sp",
           "model_time_fn", "compare_sp"]

TimeFn = Callable[[int, int], float]  # (sequence length, SP degree) -> seconds


@dataclass(frozen=True, slots=True, kw_only=True)
class SpPlan:
    """Groups (their SP degrees), which requests each runs, and the batch latency."""

    groups: tuple[int, ...]  # group sizes (concurrent), or the degree of each phase (phased)
    assignment: tuple[tuple[int, ...], ...]  # request indices per group / per phase
    latency_s: float
    phased: bool = False

    def degree_per_request(self, n: int) -> list[int]:
        """SP degree of each of the ``n`` requests under this plan."""
        out = [0] * n
        for size, members in zip(self.groups, self.assignment, strict=True):
            for i in members:
                out[i] = size
        return out


def ring_attention_time(compute_s: float, hop_s: float, degree: int) -> float:
    """t = C/d^2 + (d-1) * max(C/d^2, hop): zigzag ring attention on ``degree`` ranks."""
    step = compute_s / degree**2
    return step + (degree - 1) * max(step, hop_s)


def _partitions(total: int, largest: int) -> list[tuple[int, ...]]:
    """Splits of ``total`` into powers of two <= ``largest``, non-increasing."""
    if total == 0:
        return [()]
    out = []
    part = largest
    while part >= 1:
        if part <= total:
            out += [(part, *rest) for rest in _partitions(total - part, part)]
        part //= 2
    return out


def _assign(lengths: Sequence[int], groups: Sequence[int], time_fn: TimeFn) -> SpPlan:
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    load = [0.0] * len(groups)
    members: list[list[int]] = [[] for _ in groups]
    for i in order:
        g = min(range(len(groups)), key=lambda j: (load[j] + time_fn(lengths[i], groups[j]), j))
        load[g] += time_fn(lengths[i], groups[g])
        members[g].append(i)
    return SpPlan(groups=tuple(groups), assignment=tuple(tuple(m) for m in members),
                  latency_s=max(load))


def _check(lengths: Sequence[int], gpus: int) -> None:
    if not lengths or any(s < 1 for s in lengths):
        raise SpecError("sequences", "needs at least one length >= 1")
    if gpus < 1 or gpus & (gpus - 1):
        raise SpecError("num_gpus", f"must be a power of two, got {gpus}")


def plan_fixed_sp(lengths: Sequence[int], gpus: int, time_fn: TimeFn) -> tuple[int, SpPlan]:
    """The best single SP degree for every request: (degree, plan)."""
    _check(lengths, gpus)
    best: tuple[int, SpPlan] | None = None
    d = 1
    while d <= gpus:
        plan = _assign(lengths, [d] * (gpus // d), time_fn)
        if best is None or plan.latency_s < best[1].latency_s:
            best = (d, plan)
        d *= 2
    assert best is not None
    return best


MAX_PHASE_PLANS = 4096  # degree combinations tried for the phased plan


def _phased(lengths: Sequence[int], gpus: int, time_fn: TimeFn) -> SpPlan | None:
    distinct = sorted(set(lengths), reverse=True)
    degrees = [1 << i for i in range(gpus.bit_length())]
    if len(degrees) ** len(distinct) > MAX_PHASE_PLANS:
        return None
    best: SpPlan | None = None
    for combo in itertools.product(degrees, repeat=len(distinct)):
        chosen = dict(zip(distinct, combo, strict=True))
        total, groups, members = 0.0, [], []
        for d in sorted(set(combo), reverse=True):
            idx = [i for i, s in enumerate(lengths) if chosen[s] == d]
            plan = _assign([lengths[i] for i in idx], [d] * (gpus // d), time_fn)
            total += plan.latency_s
            groups.append(d)
            members.append(tuple(idx))
        if best is None or total < best.latency_s:
            best = SpPlan(groups=tuple(groups), assignment=tuple(members), latency_s=total,
                          phased=True)
    return best


def plan_dynamic_sp(lengths: Sequence[int], gpus: int, time_fn: TimeFn) -> SpPlan:
    """The best per-request SP degrees (see module doc): concurrent mixed groups or phases."""
    _check(lengths, gpus)
    best = _phased(lengths, gpus, time_fn)
    for groups in _partitions(gpus, gpus):
        if len(groups) > len(lengths):
            continue  # an idle group never helps
        plan = _assign(lengths, groups, time_fn)
        if best is None or plan.latency_s < best.latency_s:
            best = plan
    assert best is not None
    return best


def model_time_fn(model, estimate: Callable[[list], list[float]], *, gpus_per_node: int,
                  dtype: DType = DType.BF16, backward: bool = True) -> TimeFn:
    """t(s, d) for ``model``: every layer's causal attention (forward, and backward when
    ``backward``) from ``estimate`` (op list -> seconds), KV hops as send/recv of s/d tokens of
    K and V (inside a node when d <= gpus_per_node)."""
    kv_bytes_per_token = 2 * model.kv_heads * model.head_dim * dtype.bytes

    @functools.cache
    def time_fn(seq_len: int, degree: int) -> float:
        att = dict(batch=1, q_len=seq_len, kv_len=seq_len, heads=model.heads,
                   kv_heads=model.kv_heads, head_dim=model.head_dim, causal=True, dtype=dtype)
        ops = [AttentionSpec(**att)] + ([AttentionSpec(backward=True, **att)] if backward else [])
        hop = CollectiveSpec(kind=CollectiveKind.SEND_RECV,
                             size_bytes=max(1, int(seq_len // degree * kv_bytes_per_token)),
                             group_size=2, ranks_per_node=2 if degree <= gpus_per_node else 1)
        times = estimate([*ops, hop])
        compute = sum(times[:-1])
        # backward sends the KV block and returns its gradient: twice the hops' bytes
        hop_s = times[-1] * (3 if backward else 1)
        return model.layers * ring_attention_time(compute, hop_s, degree)

    return time_fn


def compare_sp(lengths: Sequence[int], gpus: int, time_fn: TimeFn) -> dict:
    """Fixed vs dynamic SP for one batch: latencies, the plans and the saving (fraction)."""
    degree, fixed = plan_fixed_sp(lengths, gpus, time_fn)
    dynamic = plan_dynamic_sp(lengths, gpus, time_fn)
    return {
        "num_gpus": gpus, "sequences": list(lengths),
        "fixed": {"degree": degree, "latency_s": fixed.latency_s},
        "dynamic": {"plan": "phased" if dynamic.phased else "concurrent",
                    "groups": list(dynamic.groups), "latency_s": dynamic.latency_s,
                    "degree_per_request": dynamic.degree_per_request(len(lengths))},
        "saving": 1.0 - dynamic.latency_s / fixed.latency_s,
    }
