# SPDX-License-Identifier: Apache-2.0
"""The operator vocabulary: one frozen spec per operator family.

Every package speaks these specs: the profiler measures them, the store keys rows by
``spec.key``, the predictors build features from their fields and the simulator composes them.
Each spec knows its FLOPs and the bytes it must move through memory (or over the wire, for
collectives). Shapes use B=batch, S=query length, T=key/value length, H=heads, G=kv heads,
D=head dim.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Union

from analytical.dtypes import DType, parse_dtype
from analytical.errors import SpecError, UnknownNameError
from analytical.op_kinds import (
    BUS_FACTOR,
    MEMORY_OP_COSTS,
    CollectiveKind,
    MemoryOpKind,
    MoEOpKind,
    Phase,
)

__all__ = [
    "MEMORY_OP_COSTS", "OP_FAMILIES", "AttentionSpec", "CollectiveKind", "CollectiveSpec",
    "GemmSpec", "MemoryBoundSpec", "MemoryOpKind", "MoEOpKind", "MoESpec",
    "OpSpec", "Phase", "arithmetic_intensity", "op_fields", "op_from_dict", "op_to_dict",
]


def _require_positive(spec: object, *names: str) -> None:
    for name in names:
        value = getattr(spec, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError(f"{type(spec).__name__}.{name}", f"must be a positive int, got {value!r}")


def _output_dtype(dtype: DType) -> DType:
    """GEMMs in fp8/int8/int4/fp4 write bf16 results; others write their own type."""
    return DType.BF16 if dtype in (DType.FP8, DType.INT8, DType.INT4, DType.FP4) else dtype


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmSpec:
    """One (batched) matrix multiply: [batch, m, k] @ [batch, k, n] -> [batch, m, n]."""

    m: int
    n: int
    k: int
    dtype: DType = DType.BF16
    batch: int = 1

    family = "gemm"

    def __post_init__(self) -> None:
        _require_positive(self, "m", "n", "k", "batch")

    @property
    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    @property
    def bytes(self) -> float:
        """Operands read once and the result written once (the compulsory traffic)."""
        inputs = self.batch * (self.m * self.k + self.k * self.n) * self.dtype.bytes
        return inputs + self.batch * self.m * self.n * _output_dtype(self.dtype).bytes

    @property
    def key(self) -> str:
        return f"gemm/{self.dtype}/b{self.batch}/{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AttentionSpec:
    """Scaled dot-product attention of S queries against T keys, per sequence.

    GQA/MQA via ``kv_heads`` < ``heads``. With ``causal`` the S queries are the last S positions
    of the T keys (prefill with a cache prefix, or decode). ``backward`` is the gradient pass.
    """

    batch: int
    q_len: int
    kv_len: int
    heads: int
    kv_heads: int
    head_dim: int
    causal: bool = True
    phase: Phase = Phase.PREFILL
    dtype: DType = DType.BF16
    backward: bool = False

    family = "attention"

    def __post_init__(self) -> None:
        _require_positive(self, "batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim")
        if self.heads % self.kv_heads:
            raise SpecError("AttentionSpec.kv_heads",
                            f"heads={self.heads} is not a multiple of kv_heads={self.kv_heads}")
        if self.q_len > self.kv_len:
            raise SpecError("AttentionSpec.q_len",
                            f"q_len={self.q_len} exceeds kv_len={self.kv_len}")
        if self.phase == Phase.DECODE and self.backward:
            raise SpecError("AttentionSpec.backward", "decode attention has no backward pass")

    @property
    def score_pairs(self) -> float:
        """Query-key pairs actually computed per sequence and head.

        Causal: query i (0-based) of the last S sees T - S + i + 1 keys, so the sum is
        S*(T-S) + S*(S+1)/2 (exactly T*(T+1)/2 when S == T).
        """
        s, t = self.q_len, self.kv_len
        if not self.causal:
            return float(s * t)
        return s * (t - s) + s * (s + 1) / 2.0

    @property
    def flops(self) -> float:
        """Forward: QK^T and PV, 2 FLOPs per multiply-add each -> 4*D per pair per head.

        Backward recomputes QK^T and does dV, dP, dS->dQ, dK: 5 matmuls against 2, so 2.5x
        (FlashAttention-2, Dao 2023, section 3.1 FLOP accounting).
        """
        forward = 4.0 * self.batch * self.heads * self.head_dim * self.score_pairs
        return 2.5 * forward if self.backward else forward

    @property
    def bytes(self) -> float:
        """Fused-kernel traffic: read Q, K, V (K/V at kv_heads), write O; backward also reads O,
        dO and writes dQ, dK, dV."""
        e = self.dtype.bytes
        q = self.batch * self.q_len * self.heads * self.head_dim * e
        kv = 2.0 * self.batch * self.kv_len * self.kv_heads * self.head_dim * e
        if self.backward:
            return 3.0 * q + 2.0 * kv + q + q  # Q, O, dO read + dQ write; K, V read + dK, dV
        return q + kv + q

    @property
    def key(self) -> str:
        flags = ("c" if self.causal else "n") + ("b" if self.backward else "f")
        return (f"attention/{self.phase}/{self.dtype}/b{self.batch}/s{self.q_len}/t{self.kv_len}/"
                f"h{self.heads}g{self.kv_heads}d{self.head_dim}/{flags}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSpec:
    """A collective over ``group_size`` ranks, ``ranks_per_node`` of them per node.

    ``size_bytes`` follows nccl-tests: the full buffer per rank (all_reduce: the tensor;
    all_gather: the gathered output; reduce_scatter: the input; all_to_all: the send buffer;
    send_recv: the message).
    """

    kind: CollectiveKind
    size_bytes: int
    group_size: int
    ranks_per_node: int
    dtype: DType = DType.BF16

    family = "collective"

    def __post_init__(self) -> None:
        _require_positive(self, "size_bytes", "group_size", "ranks_per_node")
        if self.kind == CollectiveKind.SEND_RECV and self.group_size != 2:
            raise SpecError("CollectiveSpec.group_size", "send_recv is between exactly 2 ranks")
        if self.ranks_per_node > self.group_size:
            raise SpecError("CollectiveSpec.ranks_per_node",
                            f"{self.ranks_per_node} exceeds group_size {self.group_size}")
        if self.group_size % self.ranks_per_node:
            raise SpecError("CollectiveSpec.ranks_per_node",
                            f"group_size {self.group_size} is not a multiple of "
                            f"ranks_per_node {self.ranks_per_node}")

    @property
    def nodes(self) -> int:
        return self.group_size // self.ranks_per_node

    @property
    def bus_factor(self) -> float:
        return BUS_FACTOR[self.kind](self.group_size)

    @property
    def flops(self) -> float:
        """Reduction arithmetic: (n-1)/n adds per element for all_reduce and reduce_scatter."""
        if self.kind in (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER):
            elements = self.size_bytes / self.dtype.bytes
            return elements * (self.group_size - 1) / self.group_size
        return 0.0

    @property
    def bytes(self) -> float:
        """Bytes each rank sends over its links (the bus volume)."""
        return self.bus_factor * self.size_bytes

    @property
    def key(self) -> str:
        return (f"collective/{self.kind}/{self.dtype}/n{self.group_size}/"
                f"r{self.ranks_per_node}/{self.size_bytes}")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBoundSpec:
    """An elementwise, normalisation or gather op over a [rows, cols] tensor."""

    kind: MemoryOpKind
    rows: int
    cols: int
    dtype: DType = DType.BF16
    backward: bool = False

    family = "memory"

    def __post_init__(self) -> None:
        _require_positive(self, "rows", "cols")
        if self.kind == MemoryOpKind.OPTIMIZER and self.backward:
            raise SpecError("MemoryBoundSpec.backward", "the optimizer step has no backward")

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def flops(self) -> float:
        factor = 2.0 if self.backward else 1.0
        return factor * MEMORY_OP_COSTS[self.kind].flops_per_element * self.elements

    @property
    def bytes(self) -> float:
        cost = MEMORY_OP_COSTS[self.kind]
        tensors = (cost.bwd_reads + cost.bwd_writes) if self.backward else (cost.reads + cost.writes)
        return tensors * self.elements * self.dtype.bytes

    @property
    def key(self) -> str:
        direction = "bwd" if self.backward else "fwd"
        return f"memory/{self.kind}/{self.dtype}/{self.rows}x{self.cols}/{direction}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MoESpec:
    """Local token permutation around expert computation (the all-to-all is a CollectiveSpec)."""

    kind: MoEOpKind
    tokens: int
    hidden: int
    experts: int
    top_k: int
    dtype: DType = DType.BF16

    family = "moe"

    def __post_init__(self) -> None:
        _require_positive(self, "tokens", "hidden", "experts", "top_k")
        if self.top_k > self.experts:
            raise SpecError("MoESpec.top_k", f"top_k={self.top_k} exceeds experts={self.experts}")

    @property
    def flops(self) -> float:
        if self.kind == MoEOpKind.COMBINE:
            return 2.0 * self.tokens * self.top_k * self.hidden  # weighted sum
        return 0.0

    @property
    def bytes(self) -> float:
        """Dispatch reads each token once and writes top_k copies; combine the reverse."""
        e = self.dtype.bytes
        return (1 + self.top_k) * self.tokens * self.hidden * e

    @property
    def key(self) -> str:
        return (f"moe/{self.kind}/{self.dtype}/t{self.tokens}/h{self.hidden}/"
                f"e{self.experts}k{self.top_k}")


OpSpec = Union[GemmSpec, AttentionSpec, CollectiveSpec, MemoryBoundSpec, MoESpec]

OP_FAMILIES: dict[str, type[OpSpec]] = {
    "gemm": GemmSpec,
    "attention": AttentionSpec,
    "collective": CollectiveSpec,
    "memory": MemoryBoundSpec,
    "moe": MoESpec,
}

_KIND_ENUM: dict[str, type[StrEnum]] = {
    "collective": CollectiveKind,
    "memory": MemoryOpKind,
    "moe": MoEOpKind,
}


def op_fields(family: str) -> tuple[str, ...]:
    """Field names of a family's spec, in declaration order (the store's typed columns)."""
    return tuple(f.name for f in fields(_family_class(family)))


def _family_class(family: str) -> type[OpSpec]:
    try:
        return OP_FAMILIES[family]
    except KeyError:
        raise UnknownNameError("operator family", family, list(OP_FAMILIES)) from None


def op_from_dict(family: str, values: Mapping[str, Any], *, field: str = "op",
                 source: str | None = None) -> OpSpec:
    """Build a spec from plain values (a sweep entry, a store row); errors name the field."""
    cls = _family_class(family)
    allowed = op_fields(family)
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise SpecError(f"{field}.{unknown[0]}",
                        f"unknown field for {family}; allowed: {', '.join(allowed)}", source=source)
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        path = f"{field}.{name}"
        if value is None:
            continue
        if name == "dtype":
            kwargs[name] = parse_dtype(value, field=path, source=source)
        elif name == "kind":
            enum = _KIND_ENUM[family]
            try:
                kwargs[name] = enum(str(value))
            except ValueError:
                known = ", ".join(m.value for m in enum)
                raise SpecError(path, f"unknown {family} kind {value!r}; known: {known}",
                                source=source) from None
        elif name == "phase":
            try:
                kwargs[name] = Phase(str(value))
            except ValueError:
                raise SpecError(path, f"unknown phase {value!r}; known: prefill, decode",
                                source=source) from None
        elif name in ("causal", "backward"):
            if not isinstance(value, bool):
                raise SpecError(path, f"expected true/false, got {value!r}", source=source)
            kwargs[name] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    isinstance(value, float) and not value.is_integer()):
                raise SpecError(path, f"expected an integer, got {value!r}", source=source)
            kwargs[name] = int(value)
    try:
        return cls(**kwargs)
    except SpecError as exc:
        raise SpecError(f"{field}.{exc.field.split('.', 1)[-1]}", exc.reason,
                        source=source) from None
    except TypeError as exc:  # a required field is missing
        missing = str(exc).split("argument", 1)[-1].strip(": '")
        raise SpecError(f"{field}.{missing}", f"missing for {family}", source=source) from None


def op_to_dict(op: OpSpec) -> dict[str, Any]:
    """Plain values of a spec (enums as strings), the inverse of `op_from_dict`."""
    out: dict[str, Any] = {}
    for f in fields(op):
        value = getattr(op, f.name)
        out[f.name] = value.value if isinstance(value, StrEnum) else value
    return out


def arithmetic_intensity(op: OpSpec) -> float:
    """FLOPs per byte moved (0 for pure data movement)."""
    return op.flops / op.bytes if op.bytes else math.inf
