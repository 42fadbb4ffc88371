# SPDX-License-Identifier: Apache-2.0
"""Map one recorded aten call onto the operator vocabulary (`analytical.ops`).

`ATEN_MAP` is the registry: aten overload-packet name (``mm``, ``add_``, ...) -> a function of
an `AtenCall` returning a `Mapped` (category + spec, spec None for free ops). Calls with no
entry, or whose entry cannot cost them (an unsupported dtype, a varlen layout), are kept as
``unknown`` with a *proxy* spec: a COPY sized to their real input + output bytes, so the engine
chain still gives them a (roofline-like) time and `unknown_ops_report` can list them.

Choice of `MemoryOpKind` (the kinds cannot be extended here), by memory traffic:
- ``add``/``sub`` of two full-size tensors -> ADD, ``mul``/``div`` -> MUL (2 reads, 1 write);
  with a scalar or broadcast operand they read one tensor, so -> COPY (1 read, 1 write).
- unary math (exp, tanh, rsqrt, pow, neg, ...), casts, clone, cat, copy_ -> COPY.
- norms, softmax/log_softmax, gelu, silu, embedding -> their own kind (+ backward=True for the
  explicit ``*_backward`` kernels only; a plain ``mul`` run by autograd is a forward MUL).
- reductions, fills, nll_loss, index/scatter ops: a COPY sized to their true read + write bytes
  (COPY of N elements moves 2*N*e bytes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from analytical.dtypes import DType
from analytical.ops import (
    AttentionSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    OpSpec,
    Phase,
)


class Category(StrEnum):
    GEMM = "gemm"
    ATTENTION = "attention"
    MEMORY = "memory"
    VIEW = "view"  # free: no kernel, no traffic
    UNKNOWN = "unknown"  # no mapping: a COPY proxy sized to its bytes
    COLLECTIVE = "collective"  # added by the graph passes, never by the tracer


@dataclass(frozen=True, slots=True)
class TensorMeta:
    """Shape and element type of one tensor seen by the recorder."""

    shape: tuple[int, ...]
    dtype: str  # torch spelling without "torch.", e.g. "float32"
    itemsize: int  # bytes per element

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(frozen=True, slots=True, kw_only=True)
class AtenCall:
    """One aten call: arguments bound to their schema names, tensors replaced by `TensorMeta`."""

    name: str  # overload packet, e.g. "mm", "add_"
    params: Mapping[str, Any]
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]

    def tensor(self, name: str) -> TensorMeta | None:
        value = self.params.get(name)
        return value if isinstance(value, TensorMeta) else None

    @property
    def bytes(self) -> int:
        return sum(t.nbytes for t in self.inputs) + sum(t.nbytes for t in self.outputs)


@dataclass(frozen=True, slots=True)
class Mapped:
    category: Category
    spec: OpSpec | None


FREE = Mapped(Category.VIEW, None)

_TORCH_DTYPES: dict[str, DType] = {
    "float32": DType.FP32,
    "bfloat16": DType.BF16,
    "float16": DType.FP16,
    "float8_e4m3fn": DType.FP8,
    "float8_e5m2": DType.FP8,
    "float8_e4m3fnuz": DType.FP8,
    "float8_e5m2fnuz": DType.FP8,
    "int8": DType.INT8,
    "uint8": DType.INT8,
}


def dtype_of(meta: TensorMeta) -> DType | None:
    """Our `DType` for a torch dtype name; None where the vocabulary has none (int64, bool)."""
    return _TORCH_DTYPES.get(meta.dtype)


def _rows_cols(numel: int, last: int) -> tuple[int, int]:
    cols = max(1, last)
    return max(1, numel // cols), cols


def copy_proxy(total_bytes: float, like: TensorMeta | None = None) -> MemoryBoundSpec | None:
    """A COPY moving ``total_bytes`` (read + write), in ``like``'s dtype where we have one."""
    dtype = (dtype_of(like) if like is not None else None) or DType.FP32
    elements = math.ceil(total_bytes / (2.0 * dtype.bytes))
    if elements <= 0:
        return None
    last = like.shape[-1] if like is not None and like.shape and like.shape[-1] > 0 else elements
    cols = min(last, elements)
    rows = math.ceil(elements / cols)
    return MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=rows, cols=cols, dtype=dtype)


def unknown(call: AtenCall) -> Mapped:
    """The fallback for unmapped calls: a COPY proxy of their input + output bytes."""
    like = max(call.inputs + call.outputs, key=lambda t: t.nbytes, default=None)
    return Mapped(Category.UNKNOWN, copy_proxy(call.bytes, like))


def _memory(kind: MemoryOpKind, ref: TensorMeta | None, *, backward: bool = False) -> Mapped:
    """A [numel // last_dim, last_dim] MemoryBoundSpec over ``ref``; free if it is empty."""
    if ref is None or ref.numel == 0:
        return FREE
    dtype = dtype_of(ref)
    if dtype is None:  # integer/bool tensors: same bytes through an fp32 COPY proxy
        spec = copy_proxy(2.0 * ref.nbytes, ref)
        return Mapped(Category.MEMORY, spec) if spec else FREE
    rows, cols = _rows_cols(ref.numel, ref.shape[-1] if ref.shape else 1)
    return Mapped(Category.MEMORY, MemoryBoundSpec(kind=kind, rows=rows, cols=cols, dtype=dtype,
                                                   backward=backward))


def _traffic(call: AtenCall) -> Mapped:
    """Reductions, fills, gathers: a COPY sized to the true read + write bytes."""
    ref = max(call.inputs + call.outputs, key=lambda t: t.nbytes, default=None)
    spec = copy_proxy(call.bytes, ref)
    return Mapped(Category.MEMORY, spec) if spec else FREE


def _first_float(call: AtenCall) -> TensorMeta | None:
    for t in call.outputs + call.inputs:
        if dtype_of(t) is not None:
            return t
    return call.outputs[0] if call.outputs else None


def _out(call: AtenCall) -> TensorMeta | None:
    return call.outputs[0] if call.outputs else None


def _unary(call: AtenCall) -> Mapped:
    return _memory(MemoryOpKind.COPY, _out(call))


def _binary(kind: MemoryOpKind) -> Callable[[AtenCall], Mapped]:
    def fn(call: AtenCall) -> Mapped:
        out = _out(call)
        if out is None:
            return FREE
        full = [t for t in call.inputs if t.numel == out.numel]
        return _memory(kind if len(full) >= 2 else MemoryOpKind.COPY, out)
    return fn


def _kind_of(kind: MemoryOpKind, arg: str | None = None,
             backward: bool = False) -> Callable[[AtenCall], Mapped]:
    def fn(call: AtenCall) -> Mapped:
        ref = call.tensor(arg) if arg else _out(call)
        return _memory(kind, ref, backward=backward)
    return fn


# --- GEMMs -------------------------------------------------------------------------------


def _gemm(m: int, n: int, k: int, batch: int, like: TensorMeta, call: AtenCall) -> Mapped:
    dtype = dtype_of(like)
    if dtype is None or min(m, n, k, batch) <= 0:
        return unknown(call)
    return Mapped(Category.GEMM, GemmSpec(m=m, n=n, k=k, batch=batch, dtype=dtype))


def _mm(a: str, b: str) -> Callable[[AtenCall], Mapped]:
    def fn(call: AtenCall) -> Mapped:
        x, w = call.tensor(a), call.tensor(b)
        if x is None or w is None or len(x.shape) != 2 or len(w.shape) != 2:
            return unknown(call)
        return _gemm(x.shape[0], w.shape[1], x.shape[1], 1, x, call)
    return fn


def _bmm(a: str, b: str) -> Callable[[AtenCall], Mapped]:
    def fn(call: AtenCall) -> Mapped:
        x, w = call.tensor(a), call.tensor(b)
        if x is None or w is None or len(x.shape) != 3 or len(w.shape) != 3:
            return unknown(call)
        return _gemm(x.shape[1], w.shape[2], x.shape[2], x.shape[0], x, call)
    return fn


def _linear(call: AtenCall) -> Mapped:
    x, w = call.tensor("input"), call.tensor("weight")
    if x is None or w is None or len(w.shape) != 2 or not x.shape:
        return unknown(call)
    return _gemm(x.numel // x.shape[-1], w.shape[0], x.shape[-1], 1, x, call)


def _matmul(call: AtenCall) -> Mapped:
    x, w, out = call.tensor("self"), call.tensor("other"), _out(call)
    if x is None or w is None or out is None or len(x.shape) < 2 or len(w.shape) < 2:
        return unknown(call)
    batch = out.numel // (out.shape[-2] * out.shape[-1]) if out.numel else 0
    return _gemm(out.shape[-2], out.shape[-1], x.shape[-1], batch, x, call)


def _grouped_mm(call: AtenCall) -> Mapped:
    """``_grouped_mm`` (MoE experts): one GEMM per group, assuming balanced groups.

    2D x 3D: [S, K] x [E, K, N], the S rows split over E experts -> batch E of ceil(S/E) x N x K.
    2D x 2D (weight gradients): [M, S] x [S, N] -> [E, M, N], K = S split over E groups.
    3D x 3D: a plain batched GEMM.
    """
    a, b = call.tensor("self"), call.tensor("mat2")
    if a is None or b is None:
        return unknown(call)
    if len(a.shape) == 2 and len(b.shape) == 3:
        groups = b.shape[0]
        return _gemm(math.ceil(a.shape[0] / groups), b.shape[2], a.shape[1], groups, a, call)
    if len(a.shape) == 2 and len(b.shape) == 2:
        out = _out(call)
        groups = out.shape[0] if out is not None and len(out.shape) == 3 else 1
        return _gemm(a.shape[0], b.shape[1], math.ceil(a.shape[1] / groups), groups, a, call)
    if len(a.shape) == 3 and len(b.shape) == 3:
        return _gemm(a.shape[1], b.shape[2], a.shape[2], a.shape[0], a, call)
    return unknown(call)


# --- attention -----------------------------------------------------------------------------


def _attention(*, heads_first: bool, backward: bool,
               causal_arg: str = "is_causal") -> Callable[[AtenCall], Mapped]:
    """SDPA-style kernels. ``heads_first``: q is [B, H, S, D] (SDPA) else [B, S, H, D] (flash).

    GQA comes from the shapes (key heads < query heads). Causality comes from the kernel's
    ``is_causal`` flag (or ``custom_mask_type`` != 0); an explicit mask counts as non-causal
    (every pair computed, which is what the kernel does). Decode = one query per sequence.
    """
    def fn(call: AtenCall) -> Mapped:
        q, k = call.tensor("query"), call.tensor("key")
        if q is None or k is None or len(q.shape) != 4 or len(k.shape) != 4:
            return unknown(call)
        if heads_first:
            (b, h, s, d), (g, t) = q.shape, (k.shape[1], k.shape[2])
        else:
            (b, s, h, d), (t, g) = q.shape, (k.shape[1], k.shape[2])
        causal = bool(call.params.get(causal_arg) or False)
        dtype = dtype_of(q)
        if dtype is None or s > t or g <= 0 or h % g:
            return unknown(call)
        phase = Phase.DECODE if s == 1 and t > 1 and not backward else Phase.PREFILL
        spec = AttentionSpec(batch=b, q_len=s, kv_len=t, heads=h, kv_heads=g, head_dim=d,
                             causal=causal, phase=phase, dtype=dtype, backward=backward)
        return Mapped(Category.ATTENTION, spec)
    return fn


# --- specific memory ops -------------------------------------------------------------------


def _embedding_backward(call: AtenCall) -> Mapped:
    """Dense embedding gradient: zero the [V, H] table grad, scatter-add T rows of H.

    Sized so EMBEDDING-backward bytes (1 read + 1 write of rows x H) equal V*H + 2*T*H elements.
    """
    grad, out = call.tensor("grad_output"), _out(call)
    if grad is None or out is None or dtype_of(out) is None or not out.shape:
        return _traffic(call)
    hidden = out.shape[-1]
    rows = math.ceil((out.numel + 2 * grad.numel) / (2 * hidden))
    spec = MemoryBoundSpec(kind=MemoryOpKind.EMBEDDING, rows=rows, cols=hidden,
                           dtype=dtype_of(out), backward=True)
    return Mapped(Category.MEMORY, spec)


def _free(call: AtenCall) -> Mapped:
    return FREE


AtenMapper = Callable[[AtenCall], Mapped]
ATEN_MAP: dict[str, AtenMapper] = {}


def register(names: str, fn: AtenMapper, *, inplace: bool = False) -> None:
    """Register ``fn`` for space-separated names (and their in-place ``name_`` if asked)."""
    for name in names.split():
        for key in (name, name + "_") if inplace else (name,):
            if key in ATEN_MAP:
                raise ValueError(f"aten op {key!r} registered twice")
            ATEN_MAP[key] = fn


register("mm", _mm("self", "mat2"))
register("addmm", _mm("mat1", "mat2"))
register("bmm", _bmm("self", "mat2"))
register("baddbmm", _bmm("batch1", "batch2"))
register("linear", _linear)
register("matmul", _matmul)
register("_grouped_mm", _grouped_mm)

register("_scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_flash_attention "
         "_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention",
         _attention(heads_first=True, backward=False))
register("_scaled_dot_product_flash_attention_for_cpu_backward "
         "_scaled_dot_product_flash_attention_backward "
         "_scaled_dot_product_efficient_attention_backward "
         "_scaled_dot_product_cudnn_attention_backward",
         _attention(heads_first=True, backward=True))
register("_flash_attention_forward", _attention(heads_first=False, backward=False))
register("_flash_attention_backward", _attention(heads_first=False, backward=True))
register("_efficient_attention_forward",
         _attention(heads_first=False, backward=False, causal_arg="custom_mask_type"))
register("_efficient_attention_backward",
         _attention(heads_first=False, backward=True, causal_arg="custom_mask_type"))

register("native_layer_norm", _kind_of(MemoryOpKind.LAYERNORM, "input"))
register("native_layer_norm_backward", _kind_of(MemoryOpKind.LAYERNORM, "grad_out", True))
register("rms_norm _fused_rms_norm", _kind_of(MemoryOpKind.RMSNORM, "input"))
register("_fused_rms_norm_backward", _kind_of(MemoryOpKind.RMSNORM, "grad_out", True))
register("_softmax _log_softmax _safe_softmax", _kind_of(MemoryOpKind.SOFTMAX, "self"))
register("_softmax_backward_data _log_softmax_backward_data",
         _kind_of(MemoryOpKind.SOFTMAX, "grad_output", True))
register("gelu", _kind_of(MemoryOpKind.GELU), inplace=True)
register("gelu_backward", _kind_of(MemoryOpKind.GELU, "grad_output", True))
register("silu", _kind_of(MemoryOpKind.SILU), inplace=True)
register("silu_backward", _kind_of(MemoryOpKind.SILU, "grad_output", True))
register("embedding", _kind_of(MemoryOpKind.EMBEDDING))
register("embedding_dense_backward", _embedding_backward)

register("add sub rsub", _binary(MemoryOpKind.ADD), inplace=True)
register("mul div", _binary(MemoryOpKind.MUL), inplace=True)
register("where maximum minimum floor_divide remainder fmod eq ne lt le gt ge logical_and logical_or masked_fill "
         "bitwise_and bitwise_or", _binary(MemoryOpKind.ADD), inplace=True)
register("neg exp log tanh rsqrt sqrt pow abs sigmoid reciprocal sin cos clamp clamp_min "
         "clamp_max relu erf log1p expm1 sign tanh_backward sigmoid_backward threshold_backward "
         "bitwise_not logical_not", _unary, inplace=True)
register("_to_copy clone copy cat stack constant_pad_nd slice_backward select_backward "
         "repeat alias_copy lift_fresh_copy tril triu", _unary, inplace=True)
register("sum mean amax amin max min var var_mean std argmax argmin cumsum norm "
         "linalg_vector_norm prod any all zeros ones full zeros_like ones_like full_like "
         "fill scalar_tensor arange new_zeros new_ones new_full index index_select gather "
         "scatter scatter_add index_add index_put index_copy sort topk one_hot histc bincount "
         "nll_loss_forward nll_loss_backward nll_loss2d_forward nll_loss2d_backward "
         "native_dropout native_dropout_backward bernoulli uniform normal "
         "_unsafe_index _unsafe_index_put", _traffic, inplace=True)
# Views, metadata and allocation without initialisation: no kernel, no traffic.
register("view _unsafe_view reshape _reshape_alias permute transpose t expand expand_as slice "
         "select detach unsqueeze squeeze alias as_strided split split_with_sizes chunk unbind "
         "narrow unflatten flatten view_as view_as_real view_as_complex diagonal lift_fresh "
         "empty empty_like empty_strided new_empty new_empty_strided resize "
         "_local_scalar_dense sym_size sym_stride sym_numel sym_storage_offset is_same_size "
         "_has_compatible_shallow_copy_type set_ contiguous", _free)
register("movedim numpy_T unfold", _free)


def map_call(call: AtenCall) -> Mapped:
    """Category and spec of one call; unmapped or uncostable calls come back as UNKNOWN."""
    fn = ATEN_MAP.get(call.name)
    return fn(call) if fn is not None else unknown(call)
