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
input-gradient and weight-gradient outputs. The forward CUTLASS rowwise GEMM runs at the
rate this project measured against the tensorwise one (`rowwise_fwd_ratio`; pytorch/pytorch
#147971 says "most shapes are within 90-100% of tensor-wise efficiency"). Transformer Engine's
recipes cast once per tensor, as tensorwise.

llm-foundry's flash path (`attn_impl: flash`, Composer): `flash_attn_fn` hands FlashAttention's
variable-length kernel unpadded tokens, gathered with flash_attn.bert_padding's
`index_first_axis` (q, k and v each: a gather read and write) and scattered back with
`pad_input` (a zero fill and a scatter); their autograd runs the mirror images (the gathers'
backward: zero fill and scatter; the pad's: a gather). `unpad_nodes` counts a zero fill plus a
scatter as 1.5 copies. The Triton path (`flash-triton`) passes q, k, v as strided views: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum
from typing import Any

from analytical.dtypes import DType
from analytical.layer_edges import unfused_loss_passes
from analytical.layer_spec import CpAlgorithm, Node, Param, Stream
from analytical.memory import Framework
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
)
from analytical.paths import REPO_ROOT
from simulate.inference.fp8_gemm import load_ratio_table, nearest_shape_ratio

__all__ = ["SHARED_INPUT", "SYMM_MEM_TP", "Fp8Recipe", "copy_pass", "cp_sharding", "eager_traffic",
           "fp8_weight_gemm", "fsdp_copy_nodes", "loss_upcast_nodes",
           "optimizer_traffic", "ring_merge_nodes", "rowwise_backward", "rowwise_forward", "rowwise_fwd_ratio",
           "rowwise_nodes", "symm_mem_reduce_nodes", "unfused_loss_nodes", "unpad_nodes"]

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


# The optimizer step as PyTorch-native frameworks run it, in fp32 passes over this rank's
# parameters (one read or one write of a [params] fp32 tensor each), against the 8 of the fused
# Adam kernel that `MemoryOpKind.OPTIMIZER` prices (read master, grad, m, v; write master, m, v;
# the store measures torch's fused AdamW):
# - torchtitan: `torch.optim.AdamW(foreach=True, weight_decay=0.1)` (build_optimizers,
#   torchtitan/optimizer.py at 9dec370: "foreach": not fused, fused defaults to False); the
#   multi-tensor path (torch/optim/adamw.py `_multi_tensor_adamw`) runs one kernel per step:
#   decay mul_ 2, lerp_ 3, mul_ 2, addcmul_ 3, sqrt 2, div_ 2, add_ 2, addcdiv_ 4: 20 passes.
# - Composer: `DecoupledAdamW` loops over parameters (composer/optim/decoupled_weight_decay.py,
#   `adamw`): exp_avg.mul_().add_() 2 + 3, exp_avg_sq.mul_().addcmul_() 2 + 3, denom = sqrt 2,
#   / 2, add_(eps) 2, param.addcdiv_ 4: 20 passes (llm-foundry's MPT yamls set weight_decay 0,
#   which skips the decay mul_).
# Both then clip the gradient norm every step, with no check of the norm first: a norm read
# and a scale (read and write) of every gradient, 3 passes (torchtitan `clip_grad_norm_(...,
# foreach=True)`, train.py; Composer's `gradient_clipping` algorithm calls FSDP's
# `clip_grad_norm_`, which multiplies by the clamped coefficient unconditionally). Megatron and
# NeMo keep the fused kernels (Apex / TE FusedAdam). Per-kernel launch time is not added.
FUSED_ADAM_PASSES = 8
OPTIMIZER_PASSES: dict[Framework, float] = {Framework.TORCHTITAN: 20 + 3,
                                            Framework.COMPOSER: 20 + 3}


def optimizer_traffic(framework: str) -> float:
    """The framework's optimizer step (with gradient clipping) over the fused Adam's traffic."""
    return OPTIMIZER_PASSES.get(Framework(framework), FUSED_ADAM_PASSES) / FUSED_ADAM_PASSES


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


# FSDP's own copies of a unit's unsharded parameters or gradients on the compute stream, one
# bf16 read-and-write pass each (the reduce-scatter's copy-in runs on the reduce-scatter stream,
# hidden with the collective):
# - FSDP2 (torchtitan): each all-gather's output is split into the per-parameter unsharded
#   tensors by `foreach_all_gather_copy_out` (torch.split_with_sizes_copy), which
#   `FSDPParamGroup.wait_for_unshard` runs on the current (compute) stream, in forward and again
#   after the backward all-gather (torch/distributed/_composable/fsdp/_fsdp_collectives.py,
#   _fsdp_param_group.py, torch 2.5-2.7).
# - FSDP1 (Composer, `use_orig_params: True`): the parameters are views split off the flat
#   parameter, so autograd's backward of the split concatenates their gradients into the flat
#   gradient that the reduce-scatter reads (torch/distributed/fsdp/_flat_param.py
#   `_get_unflat_views`: `flat_param.split(...)`; FSDP1 all-gathers straight into the flat
#   parameter, so its forward has no copy).
FSDP_COPY_OUT = frozenset({Framework.TORCHTITAN})
FSDP_GRAD_CAT = frozenset({Framework.COMPOSER})


def fsdp_copy_nodes(framework: str, params: float, hidden: int) -> tuple[list[Node], list[Node]]:
    """Forward and backward copy passes over one FSDP unit's ``params`` (as [params / hidden,
    hidden]) that the framework's FSDP makes on the compute stream (comment above)."""
    fw = Framework(framework)
    rows = max(1, round(params / hidden))
    out_f: list[Node] = []
    out_b: list[Node] = []
    if fw in FSDP_COPY_OUT:
        out_f.append(copy_pass("fsdp_copy_out", rows, hidden))
        out_b.append(copy_pass("fsdp_copy_out.bwd", rows, hidden))
    if fw in FSDP_GRAD_CAT:
        out_b.append(copy_pass("fsdp_grad_cat", rows, hidden))
    return out_f, out_b


# torchtitan's loss runs outside the per-block torch.compile: `cross_entropy(pred.flatten(0,
# 1).float(), labels.flatten(0, 1))` (train.py `loss_fn` at 9dec370; `apply_compile` compiles
# each TransformerBlock): the fp32 upcast of the bf16 logits (read 2, write 4 bytes) and, in
# backward, the cast of the fp32 logit gradient back to bf16 (read 4, write 2), each 1.5 bf16
# copy passes over the logits the cross entropy reads.
# torchtitan compiles the loss with the model since 2025-04 (torchtitan/components/loss.py
# `build_cross_entropy_loss`, bbb1b616): Inductor fuses the upcast into the cross entropy's
# kernels, so a compiled loss has no separate pass (`training.compile_loss`).
FP32_LOSS_UPCAST = frozenset({Framework.TORCHTITAN})


def loss_upcast_nodes(framework: str, head: Sequence[Node], compiled_loss: bool = False
                      ) -> list[Node]:
    """The logits' fp32 upcast in front of the head's cross entropy (its backward follows from
    `backward_nodes`), for frameworks that upcast outside a fused or compiled loss; none
    otherwise."""
    if Framework(framework) not in FP32_LOSS_UPCAST or compiled_loss:
        return []
    return [copy_pass("loss_upcast", n.op.rows, n.op.cols, 1.5) for n in head
            if isinstance(n.op, MemoryBoundSpec) and n.op.kind == MemoryOpKind.CROSS_ENTROPY]


# Megatron-Core's unfused vocab-parallel cross entropy (`analytical.layer_edges.
# unfused_loss_passes`, where the passes are counted) is Megatron-LM's default
# (`cross_entropy_loss_fusion` off: `--cross-entropy-loss-fusion` is store_true, megatron/
# training/arguments.py). Megatron-Bridge's `GPTModelProvider` turns the fusion on
# (`cross_entropy_loss_fusion: bool = True`), as a run's `training.cross_entropy_fusion: true`
# says; NeMo runs the same Megatron-Core code but its default is not read here (left at the
# graph's count unless a run states false); the PyTorch-native frameworks keep their own loss
# paths (`loss_upcast_nodes`).
MEGATRON_CORE_LOSS = frozenset({Framework.MEGATRON, Framework.NEMO})
UNFUSED_LOSS_DEFAULT = frozenset({Framework.MEGATRON})


def unfused_loss_nodes(framework: str, fusion: bool | None, head: Sequence[Node]
                       ) -> tuple[list[Node], list[Node]]:
    """The forward and backward passes Megatron-Core's unfused cross entropy adds over the
    head's logits; ``fusion`` None: the framework's default (unfused for Megatron-LM only)."""
    fw = Framework(framework)
    unfused = fw in UNFUSED_LOSS_DEFAULT if fusion is None else not fusion
    if not unfused or fw not in MEGATRON_CORE_LOSS:
        return [], []
    return unfused_loss_passes(head)


# torchtitan's async TP runs PyTorch's SymmetricMemory micro-pipelined matmul + reduce-scatter
# (torch/distributed/_symmetric_memory/__init__.py, `_fused_matmul_reduce_scatter_impl`, torch
# 2.5-2.7): the GEMM is cut into tp row chunks whose outputs go to their owners by all-to-all
# (`_pipelined_produce_and_all2all`, each chunk's transfer beside the next chunk's matmul, so the
# last 1/tp has none: `efficiency.tp_overlap_rs_splits`), and the received partials
# `stacked_partials` [tp, M/tp, N] are then summed by one `torch.sum(dim=0)` kernel on the
# compute stream: a read of the whole [M, N] output and a write of its 1/tp, work that NCCL's
# reduce-scatter does on its own stream in the vanilla path.
SYMM_MEM_TP = frozenset({Framework.TORCHTITAN})


def symm_mem_reduce_nodes(framework: str, tp_overlap: bool, fwd: Sequence[Node], rows: int
                          ) -> list[Node]:
    """The partial-sum kernel after each forward TP reduce-scatter that async TP micro-pipelines
    (comment above), over its ``rows`` (tokens) x hidden output; none for other frameworks or
    without TP overlap."""
    if not tp_overlap or Framework(framework) not in SYMM_MEM_TP:
        return []
    out: list[Node] = []
    for n in fwd:
        op = n.op
        if (n.stream == Stream.TP and isinstance(op, CollectiveSpec)
                and op.kind == CollectiveKind.REDUCE_SCATTER and op.group_size > 1):
            elements = int(op.size_bytes // op.dtype.bytes)  # the unscattered [M, N] output
            tp = op.group_size
            out.append(copy_pass(f"{n.name}.symm_mem_sum", rows, max(1, elements // rows),
                                 (1 + 1 / tp) / 2, op.dtype))
    return out


# PyTorch's context parallel (torchtitan's `context_parallel`, torch/distributed/tensor/
# experimental/_attention.py, torch 2.6-2.7) runs the ring of SDPA calls with eager PyTorch
# around each one, in fp32 (`_ContextParallelOptions.convert_to_f32 = True`). Forward
# (`_templated_ring_attention`, `_SDPAMerger`): each step's KV is concatenated for sending
# (`torch.cat([key.flatten(), value.flatten()])`, a bf16 copy of K and V); each remote block's
# output is upcast (read 2, write 4 bytes per element) and merged into the fp32 running output
# (`out - sigmoid(block_lse - lse) * (out - block_out)`: 12 + 8 + 12 bytes), the blocks that
# cover half the queries then re-concatenated into the whole output (`_partial_update`, read and
# write 4); the first block's upcast and the result's cast back (6 + 6 bytes per element).
# Backward (`_templated_ring_attention_backward`): per remote step the KV concatenation again,
# the fp32 dK/dV accumulations (`grad_key += grad_key_`: read 4 + 2, write 4, each of K and V)
# and their fp32 concatenation for the next rank (read 4, write 4 each), the fp32 dQ
# accumulation (10 bytes), and at the end dQ, dK, dV cast back to bf16 (6 bytes each). In bf16
# copy passes (4 bytes per element) over the local queries [tokens, heads x head dim] and one
# of K or V [tokens, heads x head dim: torchtitan repeats K/V to the query heads before SDPA];
# half the remote steps are partial (their merges over
# half the queries plus the 8-byte re-concatenation): (forward, backward) per remote step, and
# once per layer. Megatron-Core / NeMo run TE's fused CP attention instead.
RING_MERGE_PER_STEP = {"q": ((0.75 * 38 + 0.5 * 8) / 4, 10 / 4), "kv": (2 * 4 / 4, 2 * 22 / 4)}
RING_MERGE_ONCE = {"q": ((6 + 6) / 4, 6 / 4), "kv": (0.0, 2 * 6 / 4)}
TORCH_CP = frozenset({Framework.TORCHTITAN})
TORCHAO_FP8 = frozenset({Framework.TORCHTITAN})  # float8 linears from torchao's Float8Linear


def cp_sharding(framework: str, stated: str | None) -> dict[str, Any]:
    """`Sharding`'s CP fields: the exchange (the scenario's ``cp_algorithm`` where stated, else
    torchtitan's default rotate method "allgather", `--experimental.context_parallel_rotate_
    method` in torchtitan/config_manager.py at 9dec370, torch's `_cp_options.rotate_method`
    default `_RotateMethod.ALL_GATHER`; Megatron-Core's p2p ring for the others) and whether it
    is PyTorch's context parallel (``cp_torch``)."""
    torch_cp = Framework(framework) in TORCH_CP
    default = CpAlgorithm.ALL_GATHER if torch_cp else CpAlgorithm.RING
    return {"cp_algorithm": CpAlgorithm(stated) if stated is not None else default,
            "cp_torch": torch_cp}


def ring_merge_nodes(framework: str, fwd: Sequence[Node], cp: int
                     ) -> tuple[list[Node], list[Node]]:
    """The eager passes around PyTorch context parallel's ring of SDPA calls (comment above),
    forward and backward, for a layer's local attention block; none for other frameworks or
    without CP. Part of the SDPA op that selective checkpointing saves (``core``)."""
    if cp <= 1 or Framework(framework) not in TORCH_CP:
        return [], []
    local = [n.op for n in fwd if n.name == "attention" and isinstance(n.op, AttentionSpec)]
    out_f: list[Node] = []
    out_b: list[Node] = []
    for op in local:
        rows = op.batch * op.q_len
        cols = {"q": op.heads * op.head_dim, "kv": op.heads * op.head_dim}  # repeated K/V
        for part, width in cols.items():
            for phase, out in ((0, out_f), (1, out_b)):
                count = ((cp - 1) * RING_MERGE_PER_STEP[part][phase]
                         + RING_MERGE_ONCE[part][phase])
                if count:
                    name = f"cp_merge_{part}" + (".bwd" if phase else "")
                    out.append(replace(copy_pass(name, rows, width, count), core=True))
    return out_f, out_b


# torchtitan's split projections that read the input of the one before them (wk and wv after
# wq, w3 after w1; `dtensor_tp.separate_projections`): the same cast ops on the same tensor,
# which AOTAutograd's CSE (torch._functorch.config.cse) merges, so their input is cast once.
SHARED_INPUT = (".wk", ".wv", ".w3")


def rowwise_nodes(gemm_name: str, op: GemmSpec) -> list[Node]:
    """The backward passes rowwise scaling adds to one fp8 linear layer ([rows, k] @ [k, n]):
    the input, weight and output gradient cast along their second axis, and the rescale of the
    input-gradient and weight-gradient outputs (module docstring)."""
    rows = op.m * op.batch
    shared = gemm_name.endswith(SHARED_INPUT)  # its input's cast is its sibling's
    return [*([] if shared else [copy_pass(f"{gemm_name}.fp8_rowwise_cast_input_t", rows, op.k)]),
            copy_pass(f"{gemm_name}.fp8_rowwise_cast_weight_t", op.k, op.n),
            copy_pass(f"{gemm_name}.fp8_rowwise_cast_grad_t", rows, op.n),
            copy_pass(f"{gemm_name}.fp8_rowwise_rescale_dgrad", rows, op.k),
            copy_pass(f"{gemm_name}.fp8_rowwise_rescale_wgrad", op.k, op.n)]


def fp8_weight_gemm(n: Node) -> GemmSpec | None:
    """``n``'s GEMM if it multiplies by a weight in fp8 (what the fp8 recipes cast and
    rescale), else None."""
    op = n.op
    if isinstance(op, GemmSpec) and op.dtype == DType.FP8 and n.param != Param.NONE:
        return op
    return None


def rowwise_backward(fwd: Sequence[Node]) -> list[Node]:
    """`rowwise_nodes` of every fp8 weight GEMM in a layer's forward nodes."""
    return [p for n in fwd if (op := fp8_weight_gemm(n)) is not None
            for p in rowwise_nodes(n.name, op)]


# The forward GEMM of torchao's rowwise recipe (fast accumulation) is PyTorch's CUTLASS
# row-scaled `_scaled_mm` on sm90, the tensorwise one cuBLASLt. Their time ratio comes from this
# project's H100 measurement of both kernels on 29 linear-layer shapes at m = 1-16,384 tokens
# (`scripts/gpu_fp8_gemm.py`, torch 2.11; median 1.04-1.08 from 1,024 tokens, 1.49 at one;
# the H200 run gives 1.03-1.05 from 1,024): the nearest measured (n, k), interpolated in log m
# (`fp8_gemm.nearest_shape_ratio`, the reader vLLM's fp8 preset uses). The file is pinned by
# its SHA-256 prefix, as an engine preset pins it. The backward GEMMs run cuBLAS tensorwise with
# unit scales (module docstring), so only the forward (and its recompute) pays it.
ROWWISE_TABLE = REPO_ROOT / "datasets/measurements/llmsim/h100-sxm/fp8-gemm/fp8_gemm.csv"
ROWWISE_TABLE_FINGERPRINT = "95e6227ee749d96c"


def rowwise_fwd_ratio(op: GemmSpec) -> float:
    """CUTLASS rowwise over cuBLASLt tensorwise forward time for ``op`` (its token count
    ``m * batch``), from `ROWWISE_TABLE`."""
    shapes = load_ratio_table(ROWWISE_TABLE, fingerprint=ROWWISE_TABLE_FINGERPRINT,
                              bf16="fp8_tensorwise", fp8="fp8_rowwise")
    return nearest_shape_ratio(shapes, n=op.n, k=op.k, m=op.m * op.batch)


def rowwise_forward(framework: str, recipe: str, fwd: Sequence[Node]) -> list[Node]:
    """``fwd`` with each fp8 weight GEMM's time scaled by `rowwise_fwd_ratio` (as its node
    count) under torchao's rowwise recipe; unchanged otherwise."""
    if Fp8Recipe(recipe) != Fp8Recipe.ROWWISE or Framework(framework) not in TORCHAO_FP8:
        return list(fwd)
    out = []
    for n in fwd:
        if (op := fp8_weight_gemm(n)) is not None:
            n = replace(n, count=n.count * rowwise_fwd_ratio(op))
        out.append(n)
    return out
