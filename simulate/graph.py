# SPDX-License-Identifier: Apache-2.0
"""Operator graph of one training micro-batch on one rank: forward nodes from the one layer
builder (`analytical.layers`), backward and recompute derived from them
(`analytical.layer_backward`), plus the ZeRO-3/FSDP parameter gathers, the embedding and the
head. Each `Node` carries its `Stream`: compute, or the communication it is (TP, CP, EP,
FSDP). Pipeline (send/recv), DP gradient sync and the optimizer live in `simulate.training`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from analytical.activations import local_kv_heads
from analytical.attention_span import AttentionKind
from analytical.dtypes import DType
from analytical.layer_backward import backward_nodes, recompute_nodes
from analytical.layer_edges import embedding_ops, final_norm_op, lm_head_ops
from analytical.layer_spec import (
    LayerPhase,
    LoraSpec,
    Node,
    Precision,
    Sharding,
    Stream,
    TokenBatch,
)
from analytical.layers import coll, layer_ops
from analytical.memory import Framework
from analytical.model_spec import ModelSpec
from analytical.ops import CollectiveKind
from analytical.parallel import Recompute, RecomputeModule
from simulate.bias_kernels import attn_bias_add_nodes
from simulate.dtensor_tp import (
    dtensor_tp_backward,
    float8_tp_gathers,
    projection_grad_sums,
    separate_projections,
    sp_layout_copies,
)
from simulate.efficiency import fp8_cast_nodes, grad_reduce_dtype
from simulate.moe_kernels import expert_elementwise_nodes, fused_expert_mlp
from simulate.rope_kernels import unfused_rope_nodes
from simulate.torch_kernels import (
    fsdp_copy_nodes,
    loss_upcast_nodes,
    ring_merge_nodes,
    rowwise_forward,
    symm_mem_reduce_nodes,
    unfused_loss_nodes,
    unpad_nodes,
)

__all__ = ["Block", "Node", "TrainStep", "embedding_block", "head_block", "layer_block"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """Forward and backward nodes of one layer (or of the embedding / head)."""

    name: str
    fwd: tuple[Node, ...]
    bwd: tuple[Node, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainStep:
    """What one micro-batch runs through each layer on one rank."""

    sharding: Sharding
    micro_batch: int
    seq_len: int
    precision: Precision = Precision()
    recompute: Recompute = Recompute.NONE
    recompute_modules: tuple[RecomputeModule, ...] = ()  # Megatron-Core selective modules
    attention: str = "flash"  # a `scenario.ATTENTION_KERNELS` name
    lora: LoraSpec | None = None  # frozen base weights, trainable adapters
    framework: Framework = Framework.MEGATRON  # kernels and recompute policy it runs
    compiled: bool = True  # torch.compile'd (PyTorch-native frameworks; `torch_kernels`)
    fp8_recipe: str = "tensorwise"  # a `torch_kernels.Fp8Recipe` value
    ce_fusion: bool | None = None  # Megatron-Core fused cross entropy; None: the framework's
    tp_overlap: bool = False  # TP collectives overlapped (TE userbuffers / async TP)
    compiled_loss: bool = False  # torchtitan's loss under torch.compile (no separate upcast)
    router_fusion: bool = False  # Megatron-Core `--moe-router-fusion` (`simulate.moe_host`)
    fused_expert_mlp: bool = False  # the recipe's fused grouped MLP (`moe_kernels`)
    bias_dropout_fusion: bool = True  # Megatron-Core's fused bias-dropout-add (`bias_kernels`)

    @property
    def flash(self) -> bool:
        """Fused attention; False: unfused core (batched GEMMs + softmax over [s, s])."""
        return self.attention != "unfused"

    @property
    def batch(self) -> TokenBatch:
        return TokenBatch(seqs=self.micro_batch, q_len=self.seq_len)

    @property
    def tokens(self) -> int:
        """T: tokens of one micro-batch on this rank (sequence split by CP)."""
        return self.micro_batch * (self.seq_len // self.sharding.cp)


def _after(nodes: list[Node], name: str, extra: list[Node]) -> list[Node]:
    """``nodes`` with ``extra`` inserted right after the node called ``name`` (where the
    kernels run: inside the attention part that CUDA graphs and the host floor split on)."""
    if not extra:
        return nodes
    i = next(i for i, n in enumerate(nodes) if n.name == name) + 1
    return [*nodes[:i], *extra, *nodes[i:]]


def layer_block(model: ModelSpec, step: TrainStep, *, moe: bool,
                layer_params_per_rank: float = 0.0,
                attention: AttentionKind = AttentionKind.FULL) -> Block:
    """One transformer layer, forward and backward (with recompute in front of backward).

    ZeRO-3/FSDP gathers the layer's parameters before forward and again before backward and
    reduce-scatters its gradients after (prefetched: overlapped with compute).
    """
    sh = step.sharding
    fwd = fused_expert_mlp(layer_ops(model, sh, step.batch, LayerPhase.TRAIN, moe=moe,
                                     precision=step.precision, lora=step.lora, flash=step.flash,
                                     attention=attention), step.fused_expert_mlp)
    fwd = separate_projections(step.framework, fwd, *_projection_widths(model, sh.tp))
    bwd = [*dtensor_tp_backward(step.framework,
                                backward_nodes(fwd, frozen_base=step.lora is not None)),
           *projection_grad_sums(fwd)]
    cast_f, cast_b = fp8_cast_nodes(fwd, step.framework, step.fp8_recipe)
    fwd = rowwise_forward(step.framework, step.fp8_recipe, fwd)
    pad_f, pad_b = unpad_nodes(fwd, step.framework, step.attention)
    moe_f, moe_b = expert_elementwise_nodes(fwd, model, step.framework, step.precision.act,
                                            fused=step.fused_expert_mlp)
    bda_f, bda_b = attn_bias_add_nodes(fwd, model, step.framework, step.precision.act,
                                       fused=step.bias_dropout_fusion, tp=sh.tp, sp=sh.sp)
    sum_f = symm_mem_reduce_nodes(step.framework, step.tp_overlap, fwd, step.tokens)
    cp_f, cp_b = ring_merge_nodes(step.framework, fwd, sh.cp)
    rope_f, rope_b = unfused_rope_nodes(fwd, model, step.framework, sh.tp,
                                        step.batch.q_len // sh.cp, step.precision.act)
    fwd, bwd = _after(fwd, "rotary", rope_f), _after(bwd, "rotary.bwd", rope_b)
    fwd, bwd = _after(fwd, "out_proj", bda_f), _after(bwd, "attn_residual.bwd", bda_b)
    fwd, bwd = [*fwd, *cast_f, *pad_f, *moe_f, *sum_f, *cp_f], [*bwd, *cast_b, *pad_b, *moe_b, *cp_b]
    if sh.fsdp_group > 1 and layer_params_per_rank > 0:
        size = layer_params_per_rank * step.precision.act.bytes
        ag = coll("fsdp_all_gather", CollectiveKind.ALL_GATHER, size, sh.fsdp_group,
                  sh.fsdp_rpn, Stream.FSDP, step.precision.act)
        grad = grad_reduce_dtype(step.framework, step.precision.act)
        rs = coll("fsdp_reduce_scatter", CollectiveKind.REDUCE_SCATTER,
                  layer_params_per_rank * grad.bytes, sh.fsdp_group, sh.fsdp_rpn, Stream.FSDP, grad)
        fwd = [ag, *fwd]
        bwd = [ag, *bwd, rs]
    per_op = step.framework == Framework.TORCHTITAN
    bwd = [*recompute_nodes(fwd, step.recompute, per_op=per_op,
                            modules=step.recompute_modules), *bwd]
    if sh.fsdp_group > 1 and layer_params_per_rank > 0:  # after recompute: not repeated
        copy_f, copy_b = fsdp_copy_nodes(step.framework, layer_params_per_rank, model.hidden)
        fwd, bwd = [*fwd, *copy_f], [*bwd, *copy_b]
    fp8 = step.precision.gemm == DType.FP8  # torchtitan's float8 TP gathers in fp8
    fwd, bwd = (float8_tp_gathers(step.framework, step.fp8_recipe, fp8, n) for n in (fwd, bwd))
    fwd, bwd = _with_sp_copies(step, fwd, bwd)
    name = ("moe_layer" if moe else "dense_layer") + (
        "" if attention is AttentionKind.FULL else f".{attention.value}")
    return Block(name=f"{name}+lora" if step.lora else name, fwd=tuple(fwd), bwd=tuple(bwd))


def _projection_widths(model: ModelSpec, tp: int) -> tuple[int, int]:
    """Per-rank output columns of the query and of the key (or value) projection."""
    return model.heads // tp * model.head_dim, local_kv_heads(model.kv_heads, tp) * model.head_dim


def _with_sp_copies(step: TrainStep, fwd: list[Node], bwd: Sequence[Node]
                    ) -> tuple[list[Node], list[Node]]:
    """``fwd`` and ``bwd`` with the copies the framework's sequence-parallel layout adds
    (`dtensor_tp.sp_layout_copies`)."""
    def copies(nodes: Sequence[Node], backward: bool) -> list[Node]:
        return sp_layout_copies(step.framework, nodes, step.tokens, tp_overlap=step.tp_overlap,
                                backward=backward)
    return [*fwd, *copies(fwd, False)], [*bwd, *copies(bwd, True)]


def embedding_block(model: ModelSpec, step: TrainStep) -> Block:
    """Vocab-parallel embedding lookup; its backward is the scatter-add into the table."""
    fwd = embedding_ops(model, step.sharding, step.tokens, step.precision)
    fwd, bwd = _with_sp_copies(
        step, fwd, backward_nodes([n for n in fwd if n.stream == Stream.COMPUTE]))
    return Block(name="embedding", fwd=tuple(fwd), bwd=tuple(bwd))


def head_block(model: ModelSpec, step: TrainStep) -> Block:
    """Final norm, (SP gather), vocab-parallel LM head and cross-entropy over the local shard.

    Backward returns the input gradient of the column-parallel LM head to the sequence-parallel
    layout (reduce-scatter) or sums it over TP (all-reduce).
    """
    sh, act = step.sharding, step.precision.act
    tokens = step.tokens
    compute = [final_norm_op(model, sh, tokens, step.precision),
               *lm_head_ops(model, sh, tokens, LayerPhase.TRAIN, step.precision)]
    compute[-1:-1] = loss_upcast_nodes(step.framework, compute, step.compiled_loss)
    loss_f, loss_b = unfused_loss_nodes(step.framework, step.ce_fusion, compute)
    bwd = loss_b + list(backward_nodes(compute, frozen_base=step.lora is not None))
    fwd = compute + loss_f
    size = tokens * model.hidden * act.bytes
    if sh.tp > 1 and sh.sp:
        fwd.insert(1, coll("lm_head.sp_all_gather", CollectiveKind.ALL_GATHER, size, sh.tp,
                           sh.tp_rpn, Stream.TP, act))
        bwd.append(coll("lm_head.sp_reduce_scatter", CollectiveKind.REDUCE_SCATTER, size, sh.tp,
                        sh.tp_rpn, Stream.TP, act))
    elif sh.tp > 1:
        bwd.append(coll("lm_head.tp_all_reduce", CollectiveKind.ALL_REDUCE, size, sh.tp,
                        sh.tp_rpn, Stream.TP, act))
    fwd, bwd = _with_sp_copies(step, fwd, bwd)
    return Block(name="head", fwd=tuple(fwd), bwd=tuple(bwd))
