# SPDX-License-Identifier: Apache-2.0
"""Data-parallel passes over a traced single-device graph: DDP (ZeRO-1/2) and FSDP.

A traced graph knows its trainable parameters and which recorded calls read each of them, so
the collectives that data parallelism adds can be placed where their data is ready:

- DDP (zero 0): gradients are all-reduced in buckets, filled in reverse registration order
  (PyTorch DDP: ``bucket_cap_mb=25`` MiB, first bucket 1 MiB), each right after the call that
  completes its last gradient (recorded by the tracer with post-accumulate-grad hooks).
- ZeRO-1/2: the same buckets are reduce-scattered, and the updated parameters all-gathered
  after the step.
- FSDP (zero 3 / ``fsdp``): one unit per repeated block (the parameter-name prefix up to its
  first numeric component, e.g. ``model.layers.3``; the rest is the root unit). Each unit is
  all-gathered before its first forward use, again before its first backward use (non-root
  units, ``reshard_after_forward``), and its gradients reduce-scattered once all are
  complete. Collective sizes follow nccl-tests (all_gather: the gathered output;
  reduce_scatter: the full input).

Collectives are inserted into the call order as `TracedOp`s of category ``collective``;
whether they overlap with compute is for the timeline that prices the graph to decide.

NOT supported for traced graphs: tensor, pipeline, context and expert parallelism (tp, pp, cp,
ep > 1). They need the model's structure (which GEMM is column- or row-parallel, where stages
and experts split), which an aten trace does not carry; `apply_parallel` raises
`UnsupportedParallelismError` for them. Use the analytical model graph for those layouts.
"""

from __future__ import annotations

from collections.abc import Sequence

from analytical.dtypes import DType
from analytical.errors import LlmsimError, SpecError
from analytical.ops import CollectiveKind, CollectiveSpec
from analytical.parallel import ParallelConfig
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import ParamInfo, TracedGraph, TracedOp, TracePhase

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024  # torch DDP bucket_cap_mb=25 (MiB)
DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024  # torch DDP's first (smaller) bucket

_DTYPES = {"float32": DType.FP32, "bfloat16": DType.BF16, "float16": DType.FP16}


class UnsupportedParallelismError(LlmsimError, NotImplementedError):
    """A parallel layout that the traced-graph passes cannot express (tp, pp, cp, ep > 1)."""


def gradient_buckets(params: Sequence[ParamInfo], *, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                     first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES
                     ) -> list[tuple[int, ...]]:
    """DDP-style buckets of parameter indices, filled in reverse order.

    A bucket closes once it holds at least its cap (the first one ``first_bucket_bytes``, the
    others ``bucket_bytes``), so one large parameter makes a bucket of its own.
    """
    if bucket_bytes <= 0 or first_bucket_bytes <= 0:
        raise SpecError("bucket_bytes", "bucket caps must be positive")
    buckets: list[tuple[int, ...]] = []
    current: list[int] = []
    size = 0
    for index in reversed(range(len(params))):
        current.append(index)
        size += params[index].nbytes
        if size >= (first_bucket_bytes if not buckets else bucket_bytes):
            buckets.append(tuple(current))
            current, size = [], 0
    if current:
        buckets.append(tuple(current))
    return buckets


def fsdp_units(params: Sequence[ParamInfo]) -> dict[str, tuple[int, ...]]:
    """Parameter indices per FSDP unit: name prefix through its first numeric part, or root."""
    units: dict[str, list[int]] = {}
    for index, param in enumerate(params):
        parts = param.name.split(".")
        cut = next((i for i, part in enumerate(parts) if part.isdigit()), None)
        key = ".".join(parts[:cut + 1]) if cut is not None else ""
        units.setdefault(key, []).append(index)
    return {key: tuple(value) for key, value in units.items()}


def _collective(kind: CollectiveKind, members: tuple[int, ...], traced: TracedGraph,
                phase: TracePhase, dp: int, ranks_per_node: int) -> TracedOp:
    params = [traced.params[i] for i in members]
    size = sum(p.nbytes for p in params)
    dtype = _DTYPES.get(params[0].dtype, DType.FP32)
    spec = CollectiveSpec(kind=kind, size_bytes=size, group_size=dp,
                          ranks_per_node=ranks_per_node, dtype=dtype)
    return TracedOp(index=0, aten=f"c10d.{kind}", phase=phase, spec=spec,
                    in_shapes=((size // max(1, params[0].itemsize),),), out_shapes=(),
                    dtype=params[0].dtype, category=Category.COLLECTIVE, bytes=size,
                    params=frozenset(members))


class _Placer:
    """Collects ops to insert before/after positions of the original graph."""

    def __init__(self, traced: TracedGraph) -> None:
        self.traced = traced
        self.before: dict[int, list[TracedOp]] = {}
        self.after: dict[int, list[TracedOp]] = {}
        self.at_end: list[TracedOp] = []
        self.first_backward = next((op.index for op in traced.ops
                                    if op.phase == TracePhase.BACKWARD), len(traced.ops))

    def ready(self, members: tuple[int, ...]) -> int | None:
        """Index of the call after which all of ``members``' gradients are complete."""
        wanted = set(members)
        seen: set[int] = set()
        for op in self.traced.ops:
            seen |= op.grads_ready & wanted
            if seen == wanted:
                return op.index
        uses = self.uses(members, TracePhase.BACKWARD)  # no hook information: last reader
        return uses[-1] if uses else None

    def uses(self, members: tuple[int, ...], phase: TracePhase) -> list[int]:
        wanted = set(members)
        return [op.index for op in self.traced.ops
                if op.phase == phase and op.category != Category.COLLECTIVE and op.params & wanted]

    def build(self) -> TracedGraph:
        ops: list[TracedOp] = []
        for op in self.traced.ops:
            ops.extend(self.before.get(op.index, []))
            ops.append(op)
            ops.extend(self.after.get(op.index, []))
        return self.traced.with_ops(ops + self.at_end)


def _check(traced: TracedGraph, dp: int, ranks_per_node: int | None) -> int:
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise SpecError("parallel.dp", f"must be an integer >= 1, got {dp!r}")
    rpn = dp if ranks_per_node is None else ranks_per_node
    if rpn < 1 or rpn > dp or dp % rpn:
        raise SpecError("ranks_per_node", f"{rpn} must divide dp={dp}")
    return rpn


def data_parallel(traced: TracedGraph, *, dp: int, ranks_per_node: int | None = None,
                  zero: int = 0, bucket_bytes: int = DEFAULT_BUCKET_BYTES,
                  first_bucket_bytes: int = DEFAULT_FIRST_BUCKET_BYTES) -> TracedGraph:
    """Add DDP gradient all-reduces (zero 0) or ZeRO-1/2 reduce-scatter + all-gather.

    A forward-only graph, or dp == 1, is returned unchanged (there is nothing to reduce).
    ``ranks_per_node`` defaults to dp (one node).
    """
    rpn = _check(traced, dp, ranks_per_node)
    if zero not in (0, 1, 2):
        raise SpecError("parallel.zero", f"data_parallel takes zero 0-2, got {zero!r}; "
                        "zero 3 is fsdp()")
    if dp == 1 or not traced.backward or not traced.params:
        return traced
    placer = _Placer(traced)
    kind = CollectiveKind.ALL_REDUCE if zero == 0 else CollectiveKind.REDUCE_SCATTER
    buckets = gradient_buckets(traced.params, bucket_bytes=bucket_bytes,
                               first_bucket_bytes=first_bucket_bytes)
    for bucket in buckets:
        op = _collective(kind, bucket, traced, TracePhase.BACKWARD, dp, rpn)
        ready = placer.ready(bucket)
        if ready is not None:
            placer.after.setdefault(ready, []).append(op)
        else:
            placer.at_end.append(op)
    graph = placer.build()
    if zero:
        gathers = [_collective(CollectiveKind.ALL_GATHER, bucket, traced, TracePhase.BACKWARD,
                               dp, rpn) for bucket in buckets]
        graph = graph.with_ops(graph.ops + tuple(gathers))
    return graph


def fsdp(traced: TracedGraph, *, dp: int, ranks_per_node: int | None = None,
         reshard_after_forward: bool = True) -> TracedGraph:
    """Add FSDP parameter all-gathers (forward, backward) and gradient reduce-scatters."""
    rpn = _check(traced, dp, ranks_per_node)
    if dp == 1 or not traced.params:
        return traced
    placer = _Placer(traced)
    for unit, members in fsdp_units(traced.params).items():
        forward_uses = placer.uses(members, TracePhase.FORWARD)
        gather = _collective(CollectiveKind.ALL_GATHER, members, traced, TracePhase.FORWARD,
                             dp, rpn)
        placer.before.setdefault(forward_uses[0] if forward_uses else 0, []).append(gather)
        if not traced.backward:
            continue
        backward_uses = placer.uses(members, TracePhase.BACKWARD)
        if backward_uses and reshard_after_forward and unit:
            regather = _collective(CollectiveKind.ALL_GATHER, members, traced,
                                   TracePhase.BACKWARD, dp, rpn)
            placer.before.setdefault(backward_uses[0], []).append(regather)
        scatter = _collective(CollectiveKind.REDUCE_SCATTER, members, traced,
                              TracePhase.BACKWARD, dp, rpn)
        ready = placer.ready(members)
        if ready is not None:
            placer.after.setdefault(ready, []).append(scatter)
        else:
            placer.at_end.append(scatter)
    return placer.build()


def apply_parallel(traced: TracedGraph, parallel: ParallelConfig, *,
                   ranks_per_node: int | None = None) -> TracedGraph:
    """The collectives of ``parallel``'s data-parallel part; other degrees must be 1.

    Raises:
        UnsupportedParallelismError: tp, pp, cp or ep > 1 (see the module docstring).
    """
    unsupported = [f"{name}={getattr(parallel, name)}" for name in ("tp", "pp", "cp", "ep")
                   if getattr(parallel, name) > 1]
    if unsupported:
        raise UnsupportedParallelismError(
            f"parallel: {', '.join(unsupported)} is not supported for traced graphs (only dp, "
            "zero and fsdp are); use the analytical model graph for tp/pp/cp/ep")
    if parallel.zero_stage == 3:
        return fsdp(traced, dp=parallel.dp, ranks_per_node=ranks_per_node)
    return data_parallel(traced, dp=parallel.dp, ranks_per_node=ranks_per_node,
                         zero=parallel.zero_stage)
