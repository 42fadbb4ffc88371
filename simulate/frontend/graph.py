# SPDX-License-Identifier: Apache-2.0
"""The traced operator graph: what `trace_module` returns and the passes transform.

A `TracedGraph` is the ordered list of aten calls one training step (or forward) issued, each
mapped onto an `analytical.ops` spec (or marked free), plus the trainable parameters (needed by
the data-parallel passes). Costing is not done here: `graph_ops` hands the costed specs, in
order, to whoever prices them (the engine chain), and `unknown_ops_report` says how much of
that price went to calls the mapping did not know.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from analytical.ops import OpSpec
from simulate.frontend.aten_map import Category


class TracePhase(StrEnum):
    FORWARD = "forward"
    BACKWARD = "backward"  # everything issued after ``loss.backward()`` started


@dataclass(frozen=True, slots=True, kw_only=True)
class TracedOp:
    """One recorded aten call (or a collective added by a pass)."""

    index: int  # position in the graph, 0-based
    aten: str  # overload, e.g. "aten.mm.default"
    phase: TracePhase
    spec: OpSpec | None  # None: free (views) or an unknown call moving no bytes
    in_shapes: tuple[tuple[int, ...], ...]
    out_shapes: tuple[tuple[int, ...], ...]
    dtype: str  # torch dtype of the call's first floating tensor, e.g. "bfloat16"
    category: Category
    bytes: int = 0  # real input + output tensor bytes of the call
    params: frozenset[int] = frozenset()  # indices into TracedGraph.params read by the call
    grads_ready: frozenset[int] = frozenset()  # params whose gradient is complete after it


@dataclass(frozen=True, slots=True, kw_only=True)
class ParamInfo:
    """One trainable parameter of the traced module, in registration order."""

    name: str
    numel: int
    dtype: str
    itemsize: int

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True, slots=True, kw_only=True)
class TracedGraph:
    ops: tuple[TracedOp, ...]
    params: tuple[ParamInfo, ...]
    backward: bool  # whether a backward pass was traced

    @property
    def param_bytes(self) -> int:
        return sum(p.nbytes for p in self.params)

    def select(self, category: Category | None = None,
               phase: TracePhase | None = None) -> list[TracedOp]:
        return [op for op in self.ops if (category is None or op.category == category)
                and (phase is None or op.phase == phase)]

    def count(self, category: Category, phase: TracePhase | None = None) -> int:
        """Operator count: recorded calls of one category (views and unknowns have their own)."""
        return len(self.select(category, phase))

    def flops(self, category: Category | None = None, phase: TracePhase | None = None) -> float:
        return sum(op.spec.flops for op in self.select(category, phase) if op.spec is not None)

    def with_ops(self, ops: Iterable[TracedOp]) -> TracedGraph:
        """A copy holding ``ops`` re-indexed in the given order."""
        return replace(self, ops=tuple(replace(op, index=i) for i, op in enumerate(ops)))


def graph_ops(traced: TracedGraph) -> list[OpSpec]:
    """The costed specs in call order: free views dropped, unknown calls as their COPY proxy."""
    return [op.spec for op in traced.ops if op.spec is not None]


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownOpRow:
    """Unknown calls of one aten overload: how many, their bytes and time share."""

    aten: str
    count: int
    bytes: int
    time_s: float | None  # summed latency of their proxies, when a latency function is given
    share: float  # of the graph's total time (or of its total bytes without latency_s)


def unknown_ops_report(traced: TracedGraph,
                       latency_s: Callable[[OpSpec], float] | None = None) -> list[UnknownOpRow]:
    """Unknown aten calls grouped by overload, largest share first.

    Args:
        traced: the graph.
        latency_s: prices one spec in seconds (the engine chain, or a roofline); the share is
            then the fraction of the graph's summed time spent in unknown proxies. Without it
            the share is of the bytes moved by all costed calls.
    """
    groups: dict[str, list[TracedOp]] = {}
    for op in traced.select(Category.UNKNOWN):
        groups.setdefault(op.aten, []).append(op)
    if latency_s is not None:
        cache: dict[OpSpec, float] = {}

        def price(spec: OpSpec) -> float:
            if spec not in cache:
                cache[spec] = latency_s(spec)
            return cache[spec]

        total = sum(price(spec) for spec in graph_ops(traced))
    else:
        total = float(sum(op.bytes for op in traced.ops if op.spec is not None))
    rows = []
    for aten, ops in groups.items():
        nbytes = sum(op.bytes for op in ops)
        time_s = (sum(price(op.spec) for op in ops if op.spec is not None)
                  if latency_s is not None else None)
        part = time_s if time_s is not None else float(sum(op.bytes for op in ops if op.spec))
        rows.append(UnknownOpRow(aten=aten, count=len(ops), bytes=nbytes, time_s=time_s,
                                 share=part / total if total else 0.0))
    return sorted(rows, key=lambda r: (-r.share, r.aten))
