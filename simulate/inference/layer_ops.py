# SPDX-License-Identifier: Apache-2.0
"""Forward operators of one inference step on one tensor-parallel rank, from the one layer
builder (`analytical.layers`).

`step_ops` lists every operator except the attention core (whose cost depends on each
sequence's context, see `step_cost`) for `tokens` new tokens through the model, each with the
number of times it runs (identical layers are listed once with their count). Layout follows
vLLM: Megatron-style TP without sequence parallelism (one all-reduce after attention and after
the MLP); KV heads replicated when tp > kv_heads; MoE experts spread over the TP ranks
(FusedMoE: ``ep`` ranks of experts, each expert split over tp // ep), no all-to-all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from analytical.attention_span import AttentionKind
from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.layer_edges import embedding_ops, final_norm_op
from analytical.layer_edges import lm_head_ops as _lm_head_nodes
from analytical.layer_spec import (
    LayerPhase,
    LoraSpec,
    Node,
    Precision,
    Sharding,
    TokenBatch,
    heads_per_rank,
    ranks_per_node,
)
from analytical.layers import INT4_DEQUANT_MIN_TOKENS, attention_core, layer_ops
from analytical.model import ModelSpec
from analytical.ops import AttentionSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind, OpSpec

__all__ = ["INT4_DEQUANT_MIN_TOKENS", "MOE_FUSED_NODES", "Fusions", "LoraSpec", "Sharding",
           "act_quant_pass",
           "attention_specs", "check_sharding", "heads_per_rank", "inference_sharding",
           "lm_head_ops", "step_ops"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Fusions:
    """Which of a layer's operators an engine runs inside another kernel (the engine's
    ``datasets/engines/<engine>.yaml`` entries of the same names, each citing its code). A fused
    operator is no kernel of its own: no launch, no per-kernel time, no extra pass over memory.

    - ``act_quant_bytes``: traffic per input element of the kernel that quantizes an fp8 linear
      layer's bf16 input where no producer writes fp8 (`engine_presets.ActQuant`).
    - ``act_quant_launches``: that quantization runs as a kernel of its own whose time the
      GEMM's measured price already holds (`engine_presets.ActQuant.IN_GEMM`): no pass is
      priced, but an eager step still launches it (`DenseCost.kernels`).
    - ``add_into_norm``: the residual add runs inside the next RMSNorm (fused add + RMSNorm:
      one kernel reads x and the residual, writes both).
    - ``attention_fp8_out``: the attention kernel writes the output projection's fp8 input.
    - ``quant_into_producer``: the RMSNorm and the gated activation write the fp8 input of the
      GEMMs they feed (qkv, MLP up/gate; MLP down), as one generated kernel each.
    - ``allreduce_norm_families`` / ``allreduce_norm_min_hidden``: for a model of one of these
      families with hidden >= the minimum, at tp > 1, the all-reduce kernel also adds the
      residual, runs the RMSNorm and writes the next GEMM's fp8 input (the engine's model code
      decides, per family), while the bf16 message fits ``allreduce_norm_workspace_bytes``;
      a larger one runs NCCL, then a fused add + RMSNorm kernel and a quantization pass.
    - ``fused_moe``: the routed experts run as one measured kernel priced apart
      (`fused_moe.FusedMoeTable`, set per token count by `DenseCost`): the nodes it replaces
      (`MOE_FUSED_NODES`, and every ``experts.*`` node) are left out here.
    """

    act_quant_bytes: float = 0.0
    act_quant_launches: bool = False
    add_into_norm: bool = False
    attention_fp8_out: bool = False
    quant_into_producer: bool = False
    allreduce_norm_families: tuple[str, ...] = ()
    allreduce_norm_min_hidden: int = 0
    allreduce_norm_workspace_bytes: float = float("inf")
    fused_moe: bool = False

    def allreduce_norm(self, model: ModelSpec, shard: Sharding, tokens: int = 0) -> bool:
        """True where the all-reduce of a step of ``tokens`` tokens (0: any size) carries
        residual + RMSNorm + quantization."""
        return (shard.tp > 1 and model.family in self.allreduce_norm_families
                and model.hidden >= self.allreduce_norm_min_hidden
                and tokens * model.hidden * 2 <= self.allreduce_norm_workspace_bytes)


NO_FUSIONS = Fusions()
_NORMS = ("attn_norm", "mlp_norm")
_RESIDUALS = ("attn_residual", "mlp_residual")
# fp8 GEMMs whose input a fused producer writes: the norm (qkv, MLP up) or attention (out)
_NORM_FED = ("qkv_proj", "mlp.up_gate")
_ACT_FED = ("mlp.down",)  # the gated activation (SwiGLU) feeds the MLP down projection
# a fused MoE kernel's part of `analytical.layer_moe.moe_block` besides the ``experts.*`` nodes
# (the router GEMM, shared expert and all-reduce stay outside it)
MOE_FUSED_NODES = ("dispatch", "combine")


def inference_sharding(*, tp: int = 1, pp: int = 1, ep: int = 1, gpus_per_node: int = 8
                       ) -> Sharding:
    """vLLM's layout of one instance: experts on the TP ranks, so expert TP = tp // ep
    (with ``enable_expert_parallel`` vLLM sets ep = tp and leaves experts unsplit)."""
    for name, value in (("tp", tp), ("pp", pp), ("ep", ep)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(f"inference.parallel.{name}", f"must be an int >= 1, got {value!r}")
    if tp % ep:
        raise SpecError("inference.parallel.ep", f"ep={ep} must divide tp={tp} (experts are "
                        "spread over the tensor-parallel ranks)")
    return Sharding(tp=tp, pp=pp, ep=ep, etp=tp // ep, tp_rpn=ranks_per_node(tp, 1, gpus_per_node),
                    ep_rpn=ranks_per_node(ep, 1, gpus_per_node))


def check_sharding(model: ModelSpec, shard: Sharding) -> None:
    """Reject layouts the model cannot be split into; errors name the field."""
    if model.heads % shard.tp:
        raise SpecError("inference.parallel.tp",
                        f"{model.name} has {model.heads} heads, not divisible by tp={shard.tp}")
    if model.kv_heads % shard.tp and shard.tp % model.kv_heads:
        raise SpecError("inference.parallel.tp",
                        f"kv_heads={model.kv_heads} and tp={shard.tp}: neither divides the other")
    if model.layers % shard.pp:
        raise SpecError("inference.parallel.pp",
                        f"{model.layers} layers not divisible by pp={shard.pp}")
    if shard.ep > 1:
        if not model.is_moe:
            raise SpecError("inference.parallel.ep", f"{model.name} is dense; ep must be 1")
        if model.num_experts % shard.ep:
            raise SpecError("inference.parallel.ep",
                            f"{model.num_experts} experts not divisible by ep={shard.ep}")


def _precision(weight_dtype: DType, act_dtype: DType) -> Precision:
    return Precision(gemm=weight_dtype, act=act_dtype)


def step_ops(model: ModelSpec, *, tokens: int, shard: Sharding, weight_dtype: DType,
             act_dtype: DType = DType.BF16, lora: LoraSpec | None = None,
             act_quant_bytes: float = 0.0, fusions: Fusions | None = None
             ) -> list[tuple[OpSpec, float]]:
    """(operator, count) for `tokens` new tokens through all layers of one pipeline replica on
    one TP rank, excluding the attention core and the LM head, composed as the engine runs
    them (`fusions`; None: every operator a kernel of its own). `act_quant_bytes` (without
    `fusions`): memory traffic per input element of quantizing each fp8 linear layer's bf16
    input, a kernel of its own (the engine's `fp8_activation_quant`)."""
    fusions = fusions or Fusions(act_quant_bytes=act_quant_bytes)
    prec = _precision(weight_dtype, act_dtype)
    batch = TokenBatch(seqs=1, q_len=tokens)
    out: list[tuple[OpSpec, float]] = []
    for moe, count in ((False, model.dense_layers), (True, model.moe_layers)):
        if count:
            nodes = layer_ops(model, shard, batch, LayerPhase.PREFILL, moe=moe, precision=prec,
                              lora=lora)
            out += [(op, count * n) for op, n in _compose(nodes, fusions, model, shard, tokens)]
    edges = [*embedding_ops(model, shard, tokens, prec), final_norm_op(model, shard, tokens, prec)]
    return out + [(n.op, n.count) for n in edges]


def _compose(nodes: list[Node], fusions: Fusions, model: ModelSpec, shard: Sharding,
             tokens: int) -> list[tuple[OpSpec, float]]:
    """One layer's kernels (attention core left out) under `fusions`, quantization passes
    after the GEMMs they feed."""
    fused_ar = fusions.allreduce_norm(model, shard, tokens)
    # past the workspace the fused all-reduce falls back to NCCL + fused add/RMSNorm + quant
    add_norm = fusions.add_into_norm or fusions.allreduce_norm(model, shard)
    dropped = {*_RESIDUALS, *_NORMS} if fused_ar else set(_RESIDUALS) if add_norm else set()
    fed = {*(_NORM_FED if fused_ar or fusions.quant_into_producer else ()),
           *(_ACT_FED if fusions.quant_into_producer else ()),
           *(("out_proj",) if fusions.attention_fp8_out else ())}
    ops: list[tuple[OpSpec, float]] = []
    quant: list[tuple[OpSpec, float]] = []
    for node in nodes:
        if node.core or node.name in dropped or (fusions.fused_moe and (
                node.name in MOE_FUSED_NODES or node.name.startswith("experts."))):
            continue
        op = node.op
        if add_norm and not fused_ar and node.name in _NORMS:
            assert isinstance(op, MemoryBoundSpec)
            op = replace(op, cols=2 * op.cols)  # reads x and the residual, writes both
        ops.append((op, node.count))
        if (fusions.act_quant_bytes > 0 and isinstance(op, GemmSpec) and op.dtype == DType.FP8
                and op.batch == 1 and node.name not in fed):
            quant.append((act_quant_pass(op, fusions.act_quant_bytes), node.count))
    return ops + quant


def act_quant_pass(gemm: GemmSpec, bytes_per_element: float) -> MemoryBoundSpec:
    """The quantization pass over an fp8 GEMM's [m, k] bf16 input, as a bf16 copy of the same
    traffic (a copy moves 4 bytes per element)."""
    cols = max(1, round(gemm.k * bytes_per_element / 4))
    return MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=gemm.m, cols=cols, dtype=DType.BF16)


def lm_head_ops(model: ModelSpec, rows: int, shard: Sharding, weight_dtype: DType,
                act_dtype: DType = DType.BF16) -> list[OpSpec]:
    """Logits for the `rows` positions that sample a token; vocab split over TP, then gathered."""
    return [n.op for n in _lm_head_nodes(model, shard, rows, LayerPhase.PREFILL,
                                         _precision(weight_dtype, act_dtype))]


def attention_specs(model: ModelSpec, shard: Sharding, batch: TokenBatch, phase: LayerPhase,
                    dtype: DType, attention: AttentionKind = AttentionKind.FULL
                    ) -> list[tuple[AttentionSpec, float]]:
    """(kernel, count) of the attention core of one ``attention``-kind layer for ``batch``
    (the nodes `layer_ops` leaves to `step_cost`; a windowed prefill is several blocks)."""
    out = []
    for node in attention_core(model, shard, batch, phase, dtype, attention=attention):
        assert isinstance(node.op, AttentionSpec)
        out.append((node.op, node.count))
    return out
