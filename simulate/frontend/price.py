# SPDX-License-Identifier: Apache-2.0
"""Price a traced graph through the engine chain (``llmsim simulate-torch`` and the loop).

Known calls go through `EngineChain` (store -> XGBoost -> roofline / link model); unknown aten
calls get the roofline of their COPY proxy and are listed with the share of the time they got.
The step time is the sum over the calls in order on one device (``serial_s``). With the DDP
collectives of `passes.data_parallel`, ``overlap_s`` also runs them on a second stream: a
bucket's all-reduce starts once its gradients are ready and the stream is free, and the step
ends when both streams are done. FSDP gathers block compute, so they stay serial.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analytical.hardware import HardwareSpec
from analytical.ops import CollectiveKind
from analytical.roofline import roofline_time
from simulate.engines import ENGINE_ORDER, EngineChain
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracedGraph

__all__ = ["TracedPrediction", "UnknownCost", "overlap_timeline", "price_traced"]


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownCost:
    aten: str
    count: int
    bytes: int
    time_s: float  # roofline of the COPY proxies
    share: float  # of serial_s


@dataclass(frozen=True, slots=True, kw_only=True)
class TracedPrediction:
    serial_s: float  # every costed call one after the other
    overlap_s: float | None  # DDP all-reduces on a second stream (None: no all-reduce)
    per_engine_s: dict[str, float] = field(hash=False)
    per_category_s: dict[str, float] = field(hash=False)
    ops: int  # costed calls
    distinct_ops: int
    flops: float
    unknown: tuple[UnknownCost, ...] = ()

    @property
    def engine_share(self) -> dict[str, float]:
        """Fraction of ``serial_s`` per engine, in `ENGINE_ORDER` (sums to 1)."""
        total = self.serial_s
        return {e: self.per_engine_s.get(e, 0.0) / total if total else 0.0
                for e in ENGINE_ORDER}

    def to_dict(self) -> dict[str, object]:
        return {"serial_s": self.serial_s, "overlap_s": self.overlap_s, "ops": self.ops,
                "distinct_ops": self.distinct_ops, "flops": self.flops,
                "engine_share": self.engine_share, "per_engine_s": self.per_engine_s,
                "per_category_s": self.per_category_s,
                "unknown_ops": [{"aten": u.aten, "count": u.count, "bytes": u.bytes,
                                 "time_s": u.time_s, "share": u.share} for u in self.unknown]}


def overlap_timeline(durations: list[float], on_comm_stream: list[bool]) -> float:
    """Step time with flagged ops on a second stream, each starting when both the compute
    issued before it and the previous comm op are done."""
    compute_end = comm_end = 0.0
    for seconds, comm in zip(durations, on_comm_stream, strict=True):
        if comm:
            comm_end = max(comm_end, compute_end) + seconds
        else:
            compute_end += seconds
    return max(compute_end, comm_end)


def price_traced(traced: TracedGraph, chain: EngineChain, hw: HardwareSpec) -> TracedPrediction:
    """Price every costed call of ``traced`` (see the module docstring)."""
    costed = [op for op in traced.ops if op.spec is not None]
    known = [op for op in costed if op.category != Category.UNKNOWN]
    estimates = dict(zip((id(op) for op in known),
                         chain.estimate_many([op.spec for op in known]), strict=True))
    durations: list[float] = []
    per_engine: dict[str, float] = {}
    per_category: dict[str, float] = {}
    unknown: dict[str, list[float]] = {}
    for op in costed:
        if op.category == Category.UNKNOWN:
            seconds, engine = roofline_time(op.spec, hw), "roofline"
            entry = unknown.setdefault(op.aten, [0, 0, 0.0])
            entry[0] += 1
            entry[1] += op.bytes
            entry[2] += seconds
        else:
            estimate = estimates[id(op)]
            seconds, engine = estimate.latency_s, estimate.engine
        durations.append(seconds)
        per_engine[engine] = per_engine.get(engine, 0.0) + seconds
        per_category[str(op.category)] = per_category.get(str(op.category), 0.0) + seconds
    serial = sum(durations)
    all_reduce = [op.category == Category.COLLECTIVE
                  and getattr(op.spec, "kind", None) == CollectiveKind.ALL_REDUCE
                  for op in costed]
    overlap = overlap_timeline(durations, all_reduce) if any(all_reduce) else None
    rows = tuple(sorted((UnknownCost(aten=aten, count=int(c), bytes=int(b), time_s=t,
                                     share=t / serial if serial else 0.0)
                         for aten, (c, b, t) in unknown.items()), key=lambda u: -u.time_s))
    return TracedPrediction(serial_s=serial, overlap_s=overlap, per_engine_s=per_engine,
                            per_category_s=per_category, ops=len(costed),
                            distinct_ops=len({op.spec.key for op in costed}),
                            flops=sum(op.spec.flops for op in costed), unknown=rows)
