# SPDX-License-Identifier: Apache-2.0
"""Kernels the PyTorch-native frameworks (torchtitan, Composer, DeepSpeed) run outside the fused
paths that the operator graph assumes.

Eager mode (`training.compile: false`): without torch.compile, a module written as several
tensor expressions runs one ATen kernel per expression, each reading and writing a full tensor.
The graph counts each memory-bound operator as one fused pass; `eager_traffic` is how many times
that traffic the eager composite moves, counted from the modules' code (bytes per element, the
fused pass being one bf16 read per input and one bf16 write per output):

- RMSNorm: torchtitan's `nn.RMSNorm` (`build_norm`, torchtitan/models/norms.py at 9dec370) and
  Hugging Face's `LlamaRMSNorm` call the composite `rms_norm` (aten/src/ATen/native/
  layer_norm.cpp, torch 2.4-2.7): upcast to fp32 (2 -> 4 bytes), pow (4 -> 4), mean (4), times
  the rsqrt (4 -> 4), type_as (4 -> 2), times the weight (2 -> 2): 36 bytes against the fused
  4, 9x. Its autograd runs the backward of each of them plus the sum of the two gradient paths
  into the upcast input: ~68 bytes against the fused 6 (read x and dy, write dx), ~11x.
- rotary: torchtitan's `apply_rotary_emb` (torchtitan/models/llama/model.py at 9dec370): upcast
  (2 -> 4), complex multiply by `freqs_cis` (4 -> 4), type_as (4 -> 2): 20 bytes against 4, 5x;
  its backward runs the same three in reverse, 5x.
- SwiGLU: `w2(F.silu(w1(x)) * w3(x))` (torchtitan `FeedForward`; HF `LlamaMLP`): silu (2 -> 2)
  then the product (4 -> 2): 10 bytes against the fused 6; backward: the product's two
  gradients (4 -> 2 each) and silu's (4 -> 2), 18 bytes against the fused 10.
LayerNorm, GELU, dropout, residual adds and softmax are single ATen kernels in eager mode too
(1x). Compiled (the default), the graph's fused passes stand, with `efficiency.
reduction_fraction` for Inductor's reductions. Megatron-Core and NeMo run Transformer Engine /
Apex fused kernels either way. Per-kernel launch cost is not added: at the corpus' micro-batches
(>= 16k tokens per rank) each kernel runs for tens of microseconds or more, so the GPU, not the
CPU's dispatch, is the bottleneck.

fp8 rowwise (`training.fp8_recipe: rowwise`, torchao `Float8LinearConfig.from_recipe_name(
"rowwise")`): each of input, weight and output gradient is scaled along the axis its GEMM
contracts, so the backward casts the input and the weight again along their other axis and the
output gradient a second time (torchao/float8/float8_linear.py, `matmul_with_hp_or_float8_args`
at eab345c, 2024-12); and the backward GEMMs, which run without fast accumulation, take cuBLAS's
tensorwise kernel with unit scales followed by a separate multiply of the output by the row and
column scales, because "the rowwise CUTLASS-based kernel is so slow without fast-accum"
(torchao/float8/float8_python_api.py, pytorch/ao#1325, merged 2024-12): one more pass over the
input-gradient and weight-gradient outputs. The forward CUTLASS rowwise GEMM is left at the
tensorwise rate ("most shapes are within 90-100% of tensor-wise efficiency", pytorch/pytorch
#147971). Transformer Engine's recipes cast once per tensor, as tensorwise.

llm-foundry's flash path (`attn_impl: flash`, Composer): `flash_attn_fn` hands FlashAttention's
variable-length kernel unpadded tokens, gathered with flash_attn.bert_padding's
`index_first_axis` (q, k and v each: a gather read and write) and scattered back with
`pad_input` (a zero fill and a scatter); their autograd runs the mirror images (the gathers'
backward: zero fill and scatter; the pad's: a gather). `unpad_nodes` counts a zero fill plus a
scatter as 1.5 copies. The Triton path (`flash-triton`) passes q, k, v as strided views: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from analytical.dtypes import DType
from analytical.layer_spec import Node, Param
from analytical.memory import Framework
from analytical.ops import AttentionSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind

__all__ = ["Fp8Recipe", "copy_pass", "eager_traffic", "rowwise_backward", "rowwise_nodes", "unpad_nodes"]

PYTORCH_NATIVE = frozenset({Framework.TORCHTITAN, Framework.COMPOSER, Framework.DEEPSPEED})

# (forward, backward) traffic of the eager composite over the fused pass (module docstring).
EAGER_TRAFFIC: dict[MemoryOpKind, tuple[float, float]] = {
    MemoryOpKind.RMSNORM: (36 / 4, 68 / 6),
    MemoryOpKind.ROTARY: (20 / 4, 20 / 4),
    MemoryOpKind.SWIGLU: (10 / 6, 18 / 10),
}


class Fp8Recipe(StrEnum):
    TENSORWISE = "tensorwise"  # one scale per tensor (torchao default; TE's recipes)
    ROWWISE = "rowwise"  # torchao: one scale per row of each GEMM operand


def eager_traffic(framework: str, compiled: bool, kind: MemoryOpKind, *, backward: bool
                  ) -> float:
    """How many times the fused pass's traffic ``kind`` moves when ``framework`` runs it eagerly
    (1.0 when compiled, for fused-kernel frameworks and for single-kernel ops)."""
    if compiled or Framework(framework) not in PYTORCH_NATIVE:
        return 1.0
    return EAGER_TRAFFIC.get(kind, (1.0, 1.0))[int(backward)]


def copy_pass(name: str, rows: int, cols: int, count: float = 1.0,
              dtype: DType = DType.BF16) -> Node:
    """A [rows, cols] read-and-write pass in ``dtype`` (a cast to fp8 with its amax, a rescale,
    a gather, an eager element-wise expression), ``count`` times."""
    return Node(name=name, op=MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=rows, cols=cols,
                                              dtype=dtype), count=count)


UNPAD_FRAMEWORKS = frozenset({Framework.COMPOSER})  # llm-foundry's flash_attn_fn


def unpad_nodes(fwd: Sequence[Node], framework: str, attention: str
                ) -> tuple[list[Node], list[Node]]:
    """Forward and backward passes of the unpad / pad around a layer's attention when the
    framework feeds FlashAttention unpadded tokens (module docstring); none otherwise."""
    if attention != "flash" or Framework(framework) not in UNPAD_FRAMEWORKS:
        return [], []
    out_f: list[Node] = []
    out_b: list[Node] = []
    for n in fwd:
        op = n.op
        if isinstance(op, AttentionSpec):
            t, q, kv = op.batch * op.q_len, op.heads * op.head_dim, op.kv_heads * op.head_dim
            out_f += [copy_pass("unpad_q", t, q), copy_pass("unpad_kv", t, kv, 2.0),
                      copy_pass("pad_out", t, q, 1.5)]
            out_b += [copy_pass("unpad_q.bwd", t, q, 1.5), copy_pass("unpad_kv.bwd", t, kv, 3.0),
                      copy_pass("pad_out.bwd", t, q)]
    return out_f, out_b


def rowwise_nodes(gemm_name: str, op: GemmSpec) -> list[Node]:
    """The backward passes rowwise scaling adds to one fp8 linear layer ([rows, k] @ [k, n]):
    the input, weight and output gradient cast along their second axis, and the rescale of the
    input-gradient and weight-gradient outputs (module docstring)."""
    rows = op.m * op.batch
    return [copy_pass(f"{gemm_name}.fp8_rowwise_cast_input_t", rows, op.k),
            copy_pass(f"{gemm_name}.fp8_rowwise_cast_weight_t", op.k, op.n),
            copy_pass(f"{gemm_name}.fp8_rowwise_cast_grad_t", rows, op.n),
            copy_pass(f"{gemm_name}.fp8_rowwise_rescale_dgrad", rows, op.k),
            copy_pass(f"{gemm_name}.fp8_rowwise_rescale_wgrad", op.k, op.n)]


def rowwise_backward(fwd: Sequence[Node]) -> list[Node]:
    """`rowwise_nodes` of every fp8 weight GEMM in a layer's forward nodes."""
    return [p for n in fwd if isinstance(n.op, GemmSpec) and n.op.dtype == DType.FP8
            and n.param != Param.NONE for p in rowwise_nodes(n.name, n.op)]
