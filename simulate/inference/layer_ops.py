# SPDX-License-Identifier: Apache-2.0
"""Forward operators of one inference step on one tensor-parallel rank.

`step_ops` lists every operator except the attention core (whose cost depends on each
sequence's context, see `step_cost`) for `tokens` new tokens through the model, each with the
number of times it runs (identical layers are listed once with their count). Sharding follows
Megatron/vLLM: QKV and gate/up column-parallel, O and down row-parallel, one all-reduce after
each; KV heads are replicated when tp > kv_heads; experts split over `ep` ranks with expert
tensor parallelism tp // ep.
"""

from __future__ import annotations

from dataclasses import dataclass

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.model import ModelSpec
from analytical.ops import (
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    MoEOpKind,
    MoESpec,
    OpSpec,
)

# Weight-only int4 kernels (AWQ/GPTQ in vLLM) dequantise to a bf16 copy and call the dense GEMM
# once a step has this many tokens; below it a fused kernel hides dequantisation in the memory
# time of the weights (vLLM's awq layer switches at 256 tokens; we take that threshold).
INT4_DEQUANT_MIN_TOKENS = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class Sharding:
    """How one model instance is laid out for inference."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    ranks_per_node: int = 8  # GPUs per node, to place TP/EP groups

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"inference.parallel.{name}", f"must be an int >= 1, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class LoraSpec:
    """LoRA adapters of rank `rank` on the named projections (qkv, o, gate_up, down)."""

    rank: int
    targets: tuple[str, ...] = ("qkv", "o", "gate_up", "down")


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
        if shard.tp % shard.ep and shard.ep % shard.tp:
            raise SpecError("inference.parallel.ep", f"ep={shard.ep} must divide tp={shard.tp} "
                            "(experts are spread over the tensor-parallel ranks)")


def heads_per_rank(model: ModelSpec, tp: int) -> tuple[int, int]:
    """(query heads, kv heads) on one TP rank; kv heads are replicated when tp > kv_heads."""
    return model.heads // tp, max(model.kv_heads // tp, 1)


def _gemm(tokens: int, n: int, k: int, dtype: DType) -> list[OpSpec]:
    ops: list[OpSpec] = [GemmSpec(m=tokens, n=n, k=k, dtype=dtype)]
    if dtype == DType.INT4 and tokens >= INT4_DEQUANT_MIN_TOKENS:
        ops.append(MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=k, cols=n, dtype=DType.BF16))
    return ops


def _lora(tokens: int, n: int, k: int, lora: LoraSpec | None, target: str) -> list[OpSpec]:
    """x @ A (k -> r) then @ B (r -> n), in bf16 (Hu et al. 2021)."""
    if lora is None or target not in lora.targets:
        return []
    return [GemmSpec(m=tokens, n=lora.rank, k=k), GemmSpec(m=tokens, n=n, k=lora.rank)]


def _allreduce(tokens: int, model: ModelSpec, shard: Sharding, act: DType) -> list[OpSpec]:
    if shard.tp == 1:
        return []
    return [CollectiveSpec(kind=CollectiveKind.ALL_REDUCE,
                           size_bytes=int(tokens * model.hidden * act.bytes),
                           group_size=shard.tp, ranks_per_node=min(shard.tp, shard.ranks_per_node),
                           dtype=act)]


def attention_block_ops(model: ModelSpec, tokens: int, shard: Sharding, wdtype: DType,
                        act: DType, lora: LoraSpec | None) -> list[OpSpec]:
    """Norm, QKV (or MLA down/up projections), rotary, O projection, all-reduce, residual."""
    h, g = heads_per_rank(model, shard.tp)
    norm_kind = MemoryOpKind.RMSNORM if model.norm == "rmsnorm" else MemoryOpKind.LAYERNORM
    ops: list[OpSpec] = [MemoryBoundSpec(kind=norm_kind, rows=tokens, cols=model.hidden, dtype=act)]
    if model.is_mla:
        qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
        if model.q_lora_rank:
            ops += _gemm(tokens, model.q_lora_rank, model.hidden, wdtype)
            ops += _gemm(tokens, h * qk_dim, model.q_lora_rank, wdtype)
        else:
            ops += _gemm(tokens, h * qk_dim, model.hidden, wdtype)
        ops += _gemm(tokens, model.kv_lora_rank + model.qk_rope_head_dim, model.hidden, wdtype)
        ops += _gemm(tokens, h * (model.qk_nope_head_dim + model.v_head_dim),
                     model.kv_lora_rank, wdtype)
        o_in = h * model.v_head_dim
        rotary_cols = (h + 1) * model.qk_rope_head_dim
    else:
        qkv = (h + 2 * g) * model.head_dim
        ops += _gemm(tokens, qkv, model.hidden, wdtype)
        ops += _lora(tokens, qkv, model.hidden, lora, "qkv")
        o_in = h * model.head_dim
        rotary_cols = (h + g) * model.head_dim
    if model.position == "rope":
        ops.append(MemoryBoundSpec(kind=MemoryOpKind.ROTARY, rows=tokens, cols=rotary_cols,
                                   dtype=act))
    ops += _gemm(tokens, model.hidden, o_in, wdtype)
    ops += _lora(tokens, model.hidden, o_in, lora, "o")
    ops += _allreduce(tokens, model, shard, act)
    ops.append(MemoryBoundSpec(kind=MemoryOpKind.ADD, rows=tokens, cols=model.hidden, dtype=act))
    return ops


def dense_mlp_ops(model: ModelSpec, tokens: int, ffn: int, tp: int, wdtype: DType, act: DType,
                  lora: LoraSpec | None) -> list[OpSpec]:
    """Gated (SwiGLU) or plain (GELU) MLP of width `ffn`, column then row parallel."""
    width = ffn // tp
    ops: list[OpSpec] = []
    if model.gated_mlp:
        ops += _gemm(tokens, 2 * width, model.hidden, wdtype)
        ops += _lora(tokens, 2 * width, model.hidden, lora, "gate_up")
        ops.append(MemoryBoundSpec(kind=MemoryOpKind.SWIGLU, rows=tokens, cols=width, dtype=act))
    else:
        ops += _gemm(tokens, width, model.hidden, wdtype)
        ops += _lora(tokens, width, model.hidden, lora, "gate_up")
        ops.append(MemoryBoundSpec(kind=MemoryOpKind.GELU, rows=tokens, cols=width, dtype=act))
    ops += _gemm(tokens, model.hidden, width, wdtype)
    ops += _lora(tokens, model.hidden, width, lora, "down")
    return ops


def moe_ops(model: ModelSpec, tokens: int, shard: Sharding, wdtype: DType,
            act: DType) -> list[OpSpec]:
    """Router, dispatch, (all-to-all), grouped expert GEMMs, (all-to-all), combine, shared
    experts. Routing is taken as balanced: every expert gets tokens * top_k / experts."""
    experts_local = model.num_experts // shard.ep
    etp = max(shard.tp // shard.ep, 1)
    routed = tokens * model.top_k
    per_expert = max(-(-routed // model.num_experts), 1)
    width = model.moe_ffn_hidden // etp
    ops: list[OpSpec] = [
        GemmSpec(m=tokens, n=model.num_experts, k=model.hidden, dtype=act),
        MoESpec(kind=MoEOpKind.DISPATCH, tokens=tokens, hidden=model.hidden,
                experts=model.num_experts, top_k=model.top_k, dtype=act),
    ]
    a2a = []
    if shard.ep > 1:
        a2a = [CollectiveSpec(kind=CollectiveKind.ALL_TO_ALL,
                              size_bytes=int(routed * model.hidden * act.bytes / shard.ep),
                              group_size=shard.ep,
                              ranks_per_node=min(shard.ep, shard.ranks_per_node), dtype=act)]
    ops += a2a
    up = 2 * width if model.gated_mlp else width
    ops.append(GemmSpec(m=per_expert, n=up, k=model.hidden, dtype=wdtype, batch=experts_local))
    ops.append(MemoryBoundSpec(kind=MemoryOpKind.SWIGLU if model.gated_mlp else MemoryOpKind.GELU,
                               rows=per_expert * experts_local, cols=width, dtype=act))
    ops.append(GemmSpec(m=per_expert, n=model.hidden, k=width, dtype=wdtype, batch=experts_local))
    ops += a2a
    ops.append(MoESpec(kind=MoEOpKind.COMBINE, tokens=tokens, hidden=model.hidden,
                       experts=model.num_experts, top_k=model.top_k, dtype=act))
    if model.shared_ffn_hidden:
        ops += dense_mlp_ops(model, tokens, model.shared_ffn_hidden, shard.tp, wdtype, act, None)
    return ops


def step_ops(model: ModelSpec, *, tokens: int, shard: Sharding, weight_dtype: DType,
             act_dtype: DType = DType.BF16,
             lora: LoraSpec | None = None) -> list[tuple[OpSpec, int]]:
    """(operator, count) for `tokens` new tokens through all layers of one pipeline replica on
    one TP rank, excluding the attention core and the LM head."""
    act = act_dtype
    attn = attention_block_ops(model, tokens, shard, weight_dtype, act, lora)
    norm_kind = MemoryOpKind.RMSNORM if model.norm == "rmsnorm" else MemoryOpKind.LAYERNORM
    post_norm = [MemoryBoundSpec(kind=norm_kind, rows=tokens, cols=model.hidden, dtype=act)]
    tail = _allreduce(tokens, model, shard, act) + [
        MemoryBoundSpec(kind=MemoryOpKind.ADD, rows=tokens, cols=model.hidden, dtype=act)]
    out: list[tuple[OpSpec, int]] = []
    dense_layers = model.layers - model.moe_layers
    if dense_layers:
        dense = attn + post_norm + dense_mlp_ops(model, tokens, model.ffn_hidden, shard.tp,
                                                 weight_dtype, act, lora) + tail
        out += [(op, dense_layers) for op in dense]
    if model.moe_layers:
        moe = attn + post_norm + moe_ops(model, tokens, shard, weight_dtype, act) + tail
        out += [(op, model.moe_layers) for op in moe]
    embed = [MemoryBoundSpec(kind=MemoryOpKind.EMBEDDING, rows=tokens, cols=model.hidden,
                             dtype=act)] + _allreduce(tokens, model, shard, act)
    final_norm = MemoryBoundSpec(kind=norm_kind, rows=tokens, cols=model.hidden, dtype=act)
    out += [(op, 1) for op in embed] + [(final_norm, 1)]
    return out


def lm_head_ops(model: ModelSpec, rows: int, shard: Sharding, weight_dtype: DType,
                act_dtype: DType = DType.BF16) -> list[OpSpec]:
    """Logits for the `rows` positions that sample a token; vocab split over TP, then gathered."""
    vocab = -(-model.vocab // shard.tp)
    ops: list[OpSpec] = [GemmSpec(m=rows, n=vocab, k=model.hidden,
                                  dtype=act_dtype if weight_dtype == DType.INT4 else weight_dtype)]
    if shard.tp > 1:
        ops.append(CollectiveSpec(kind=CollectiveKind.ALL_GATHER,
                                  size_bytes=int(rows * vocab * shard.tp * 4), group_size=shard.tp,
                                  ranks_per_node=min(shard.tp, shard.ranks_per_node),
                                  dtype=DType.FP32))
    return ops
