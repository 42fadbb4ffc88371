# SPDX-License-Identifier: Apache-2.0
"""One transformer layer's forward operators on one rank: the one model every package asks.

`layer_ops` returns the forward `Node`s of one dense or MoE layer (GQA or MLA attention) under
tp/sp/cp/ep. Training (`simulate.graph`) derives backward and recompute from them
(`analytical.layer_backward`), inference (`simulate.inference.layer_ops`) sums them per step,
and the profiler's model sweeps (`profiler.sweep_model`) measure exactly their shapes.

Layout: Megatron-LM (Shoeybi et al. 2019, sec. 3): QKV and MLP-up column-parallel, output and
MLP-down row-parallel, one all-reduce after each pair; with sequence parallelism an all-gather
in and a reduce-scatter out, norms and residuals on tokens/tp rows (Korthikanti et al. 2022,
sec. 4.2.2). Shapes: T = tokens on this rank, h = hidden, d = head dim, f = MLP width.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from analytical.attention_span import AttentionKind
from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.layer_spec import (
    CP_ROTATE_GATHER,
    LORA_TARGETS,
    CpAlgorithm,
    LayerPhase,
    LoraSpec,
    Node,
    Param,
    Precision,
    Sharding,
    Stream,
    TokenBatch,
    heads_per_rank,
    lora_dims,
)
from analytical.model_spec import ModelSpec
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    Phase,
)

# Weight-only int4 kernels (AWQ/GPTQ in vLLM) dequantise to a bf16 copy and call the dense GEMM
# once a step has this many tokens; below it a fused kernel hides dequantisation in the memory
# time of the weights (vLLM's awq layer switches at 256 tokens; we take that threshold).
INT4_DEQUANT_MIN_TOKENS = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class Ctx:
    """One `layer_ops` call, with the per-rank sizes every block needs."""

    model: ModelSpec
    sh: Sharding
    batch: TokenBatch
    phase: LayerPhase
    prec: Precision
    lora: LoraSpec | None
    flash: bool
    attention: AttentionKind = AttentionKind.FULL

    @property
    def tokens(self) -> int:
        """T: this rank's tokens (sequences split by context parallelism)."""
        return self.batch.seqs * (self.batch.q_len // self.sh.cp)

    @property
    def rows(self) -> int:
        """Rows of norms, dropout and residuals: T/tp with sequence parallelism."""
        return self.tokens // self.sh.tp if self.sh.sp else self.tokens

    @property
    def dropout(self) -> bool:
        """GPT-style (LayerNorm) models train with dropout; Llama-style ones have p = 0, and so
        has Nemotron (LayerNorm1p: ``hidden_dropout`` and ``attention_dropout`` 0.0 in
        NeMo-Framework-Launcher 24.07, 8325688d, ``conf/training/nemotron/*.yaml``)."""
        return self.phase == LayerPhase.TRAIN and self.model.norm == "layernorm"


# ---- node helpers ------------------------------------------------------------------------------

def gemm(name: str, m: int, n: int, k: int, dtype: DType, *, batch: int = 1,
         param: Param = Param.BASE) -> list[Node]:
    """[batch, m, k] @ [batch, k, n]; a weight-only int4 GEMM of many tokens also dequantises."""
    nodes = [Node(name=name, op=GemmSpec(m=m, n=n, k=k, dtype=dtype, batch=batch), param=param)]
    if dtype == DType.INT4 and batch == 1 and m >= INT4_DEQUANT_MIN_TOKENS:
        nodes.append(Node(name=f"{name}.dequant",
                          op=MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=k, cols=n,
                                             dtype=DType.BF16)))
    return nodes


def mem(name: str, kind: MemoryOpKind, rows: int, cols: int, dtype: DType) -> Node:
    return Node(name=name, op=MemoryBoundSpec(kind=kind, rows=rows, cols=cols, dtype=dtype))


def coll(name: str, kind: CollectiveKind, size: float, group: int, rpn: int, stream: Stream,
         dtype: DType, count: float = 1.0) -> Node:
    spec = CollectiveSpec(kind=kind, size_bytes=max(1, int(size)), group_size=group,
                          ranks_per_node=rpn, dtype=dtype)
    return Node(name=name, op=spec, stream=stream, count=count)


def mlp_activation_kind(model: ModelSpec) -> MemoryOpKind:
    """The MLP activation's element-wise op. Squared ReLU (relu2) is priced as GELU: one
    fused kernel (Megatron-Core ``squared_relu``, ``@jit_fuser``, megatron/core/activations.py
    at NVIDIA/Megatron-LM 1296a819) with GELU's traffic, one read and one write forward, the
    input and output gradient read and one write backward; memory-bound either way."""
    return MemoryOpKind.SWIGLU if model.gated_mlp else MemoryOpKind.GELU


def norm_kind(model: ModelSpec) -> MemoryOpKind:
    """The config's normalisation (Llama/Qwen/DeepSeek: RMSNorm; GPT-2/3: LayerNorm)."""
    return MemoryOpKind.RMSNORM if model.norm == "rmsnorm" else MemoryOpKind.LAYERNORM


def _tp_enter(c: Ctx, tag: str) -> list[Node]:
    if not c.sh.sp:
        return []
    return [coll(f"{tag}.sp_all_gather", CollectiveKind.ALL_GATHER,
                 c.tokens * c.model.hidden * c.prec.act.bytes, c.sh.tp, c.sh.tp_rpn, Stream.TP,
                 c.prec.act)]


def _tp_exit(c: Ctx, tag: str) -> list[Node]:
    if c.sh.tp == 1:
        return []
    size = c.tokens * c.model.hidden * c.prec.act.bytes
    if c.sh.sp:
        return [coll(f"{tag}.sp_reduce_scatter", CollectiveKind.REDUCE_SCATTER, size, c.sh.tp,
                     c.sh.tp_rpn, Stream.TP, c.prec.act)]
    return [coll(f"{tag}.tp_all_reduce", CollectiveKind.ALL_REDUCE, size, c.sh.tp, c.sh.tp_rpn,
                 Stream.TP, c.prec.act)]


def _residual(c: Ctx, tag: str) -> list[Node]:
    out = []
    if c.dropout:  # GPT-style blocks apply dropout before the residual add
        out.append(mem(f"{tag}_dropout", MemoryOpKind.DROPOUT, c.rows, c.model.hidden,
                       c.prec.act))
    out.append(mem(f"{tag}_residual", MemoryOpKind.ADD, c.rows, c.model.hidden, c.prec.act))
    return out


def _lora(c: Ctx, targets: tuple[str, ...]) -> list[Node]:
    """x @ A [in, r] then @ B [r, out] per targeted projection (Hu et al. 2021), in the
    activation dtype. Under TP the adapter follows its base weight: column-parallel targets
    split B's out, row-parallel ones A's in (PEFT on Megatron layers, vLLM's LoRA layers)."""
    if c.lora is None:
        return []
    out: list[Node] = []
    t, r, tp = c.tokens, c.lora.rank, c.sh.tp
    for target in (x for x in LORA_TARGETS if x in targets and x in c.lora.targets):
        d_in, d_out, column = lora_dims(c.model, target)
        if target in ("k", "v"):
            d_out = heads_per_rank(c.model, tp)[1] * c.model.head_dim
        elif column:
            d_out //= tp
        else:
            d_in //= tp
        out += gemm(f"lora.{target}.a", t, r, d_in, c.prec.act, param=Param.ADAPTER)
        out += gemm(f"lora.{target}.b", t, d_out, r, c.prec.act, param=Param.ADAPTER)
    return out


# ---- attention ---------------------------------------------------------------------------------

def attention_core(model: ModelSpec, sh: Sharding, batch: TokenBatch, phase: LayerPhase,
                   dtype: DType, *, flash: bool = True, dropout: bool = False,
                   attention: AttentionKind = AttentionKind.FULL) -> list[Node]:
    """Scores and values of one layer, fused (flash) or Megatron-LM's unfused core.

    With CP each rank holds 2 chunks of s/(2cp) (load-balanced causal split): the local block is
    causal and each of the cp-1 remote blocks is s_local/2 x s_local non-causal, so the score
    pairs add up to (s^2/2)/cp (Megatron-Core context parallelism, ring attention).
    A sliding-window or chunked layer (``attention``) computes only the pairs its mask keeps
    (`windowed_blocks`); the unfused core and CP price it as full attention (they compute
    every score and mask afterwards, or split the sequence without regard to the window).
    """
    heads, kv_heads = heads_per_rank(model, sh.tp)
    qk_dim, v_dim = model.qk_head_dim, model.value_head_dim
    q, kv = batch.q_len // sh.cp, batch.context // sh.cp
    if not flash:
        return _unfused_core(batch.seqs * heads, q, kv, qk_dim, v_dim, dtype, dropout)
    att: dict[str, Any] = dict(
        heads=heads, kv_heads=kv_heads, head_dim=qk_dim, dtype=dtype,
        phase=Phase.DECODE if phase == LayerPhase.DECODE else Phase.PREFILL)
    if model.is_mla and phase == LayerPhase.DECODE:
        att.update(kv_heads=1, head_dim=mla_decode_head_dim(model))
    span = model.attention_span(attention)
    if sh.cp == 1 and span and kv > span:
        return [Node(name="attention", op=AttentionSpec(batch=batch.seqs * n, q_len=bq,
                                                        kv_len=bkv, causal=causal, **att),
                     core=True) for n, bq, bkv, causal in windowed_blocks(attention, q, kv, span)]
    att["batch"] = batch.seqs
    nodes = [Node(name="attention", op=AttentionSpec(q_len=q, kv_len=kv, causal=True, **att),
                  core=True)]
    if sh.cp == 1:
        return nodes
    remote = AttentionSpec(q_len=max(1, q // 2), kv_len=kv, causal=False, **att)
    nodes.append(Node(name="attention.cp_block", op=remote, count=sh.cp - 1, core=True))
    sent_heads = heads if sh.cp_torch else kv_heads  # torchtitan rotates the repeated K/V
    kv_bytes = batch.seqs * kv * sent_heads * (qk_dim + v_dim) * dtype.bytes
    if sh.cp_algorithm == CpAlgorithm.RING:  # one KV block per ring step
        nodes.append(coll("cp_ring_kv", CollectiveKind.SEND_RECV, kv_bytes, 2,
                          2 if sh.cp_rpn > 1 else 1, Stream.CP, dtype, sh.cp - 1))
    else:
        name = CP_ROTATE_GATHER if sh.cp_torch else "cp_all_gather_kv"
        nodes.append(coll(name, CollectiveKind.ALL_GATHER, kv_bytes * sh.cp, sh.cp,
                          sh.cp_rpn, Stream.CP, dtype))
    return nodes


def mla_decode_head_dim(model: ModelSpec) -> int:
    """Head size that prices MLA decode as the serving engines run it: attention in the latent
    space (the up-projections absorbed into the query and the output), every query head against
    one cached row of kv_lora_rank + qk_rope_head_dim elements per token, whose first
    kv_lora_rank are also the values (vllm-project/vllm vllm/v1/attention/backends/mla/common.py:
    decode "simulates a multi-head attention, while the compute is similar to multi-query
    attention"; FlashMLA, deepseek-ai/FlashMLA, reads the 576-element row once per token). One KV
    head of half the row makes the spec's K + V traffic the row's bytes exactly (decode is
    bound by that traffic at a few heads per rank); the FLOPs it counts are 576 / 1,088 of the
    real ones."""
    return max(1, (model.kv_lora_rank + model.qk_rope_head_dim) // 2)


def windowed_blocks(kind: AttentionKind, q: int, kv: int,
                    span: int) -> list[tuple[int, int, int, bool]]:
    """The attention of ``q`` queries (the last ``q`` of ``kv`` positions) under a sliding
    window or chunk mask of ``span``, as (count, q_len, kv_len, causal) blocks whose score pairs
    add up exactly to the mask's: query p (1-based) sees min(p, W) keys when sliding (Mistral 7B,
    Jiang et al. 2023 sec. 2) and the keys of its own C-block up to itself when chunked (Llama 4,
    transformers ``attention_chunk_size``). FlashAttention skips the tiles the mask removes
    (``window_size``), so the kernel is these blocks, not the full square."""
    first = kv - q + 1  # position of the first query
    if kind is AttentionKind.SLIDING:
        blocks: list[tuple[int, int, int, bool]] = []
        head = max(0, span - first + 1)  # queries at p <= W see p keys: a causal W block
        if head:
            blocks.append((1, head, span, True))
        rest = q - head  # each sees exactly W keys
        full, tail = divmod(rest, span)
        if full:
            blocks.append((full, span, span, span == 1))
        if tail:
            blocks.append((1, tail, span, tail == 1))  # q_len 1: a decode step
        return blocks
    out: dict[tuple[int, int, bool], int] = {}
    p = first
    while p <= kv:  # one causal block per chunk the queries touch
        start = (p - 1) // span * span + 1
        end = min(kv, start + span - 1)
        key = (end - p + 1, end - start + 1, True)
        out[key] = out.get(key, 0) + 1
        p = end + 1
    return [(n, bq, bkv, causal) for (bq, bkv, causal), n in out.items()]


def _unfused_core(rows: int, q: int, kv: int, qk_dim: int, v_dim: int, dtype: DType,
                  dropout: bool) -> list[Node]:
    """QK^T as a batched GEMM over b*a heads, scale-mask-softmax (and dropout) over [q, kv],
    then PV (Korthikanti et al. 2022, fig. 5)."""
    nodes = [*gemm("core.qk", q, kv, qk_dim, dtype, batch=rows, param=Param.NONE),
             mem("core.softmax", MemoryOpKind.SOFTMAX, rows * q, kv, dtype)]
    if dropout:
        nodes.append(mem("core.dropout", MemoryOpKind.DROPOUT, rows * q, kv, dtype))
    nodes += gemm("core.pv", q, v_dim, kv, dtype, batch=rows, param=Param.NONE)
    return [Node(name=n.name, op=n.op, core=True, param=n.param) for n in nodes]


def _mla_projections(c: Ctx, heads: int) -> list[Node]:
    """DeepSeek MLA (DeepSeek-V2 paper sec. 2.1; HF modeling_deepseek): q = W_UQ(norm(W_DQ x))
    (or W_Q x), [c_KV, k_rope] = W_DKV x, [k_nope, v] = W_UKV norm(c_KV). The down-projections
    are replicated over TP; q_a_layernorm and kv_a_layernorm are RMSNorms."""
    m, t, g = c.model, c.tokens, c.prec.gemm
    nodes: list[Node] = []
    if m.q_lora_rank:
        nodes += gemm("q_down", t, m.q_lora_rank, m.hidden, g)
        nodes.append(mem("q_down_norm", MemoryOpKind.RMSNORM, t, m.q_lora_rank, c.prec.act))
        nodes += gemm("q_up", t, heads * m.qk_head_dim, m.q_lora_rank, g)
    else:
        nodes += gemm("q_proj", t, heads * m.qk_head_dim, m.hidden, g)
    nodes += gemm("kv_down", t, m.kv_lora_rank + m.qk_rope_head_dim, m.hidden, g)
    nodes.append(mem("kv_down_norm", MemoryOpKind.RMSNORM, t, m.kv_lora_rank, c.prec.act))
    nodes += gemm("kv_up", t, heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, g)
    return nodes


def _attention(c: Ctx) -> list[Node]:
    """Norm, (SP gather), projections, rotary, core, out-projection, TP reduce, residual."""
    m, t, act = c.model, c.tokens, c.prec.act
    heads, kv_heads = heads_per_rank(m, c.sh.tp)
    nodes = [mem("attn_norm", norm_kind(m), c.rows, m.hidden, act), *_tp_enter(c, "attn")]
    if m.is_mla:
        nodes += _mla_projections(c, heads)
        # rotary only on the qk_rope_head_dim part: every query head and the one shared k_pe
        # head (HF DeepseekV3Attention: apply_rotary_pos_emb(q_pe, k_pe)).
        rotary_cols = (heads + 1) * m.qk_rope_head_dim
    else:
        nodes += gemm("qkv_proj", t, (heads + 2 * kv_heads) * m.head_dim, m.hidden, c.prec.gemm)
        nodes += _lora(c, ("q", "k", "v"))
        if m.qk_norm:  # Qwen3: RMSNorm over each q and k head before rotary
            nodes.append(mem("qk_norm", MemoryOpKind.RMSNORM, t * (heads + kv_heads),
                             m.head_dim, act))
        rotary_cols = (heads + kv_heads) * m.head_dim
    if m.position == "rope":
        nodes.append(mem("rotary", MemoryOpKind.ROTARY, t, rotary_cols, act))
    nodes += attention_core(m, c.sh, c.batch, c.phase, c.prec.attn, flash=c.flash,
                            dropout=c.dropout, attention=c.attention)
    nodes += gemm("out_proj", t, m.hidden, heads * m.value_head_dim, c.prec.gemm)
    nodes += _lora(c, ("o",))
    return nodes + _tp_exit(c, "attn") + _residual(c, "attn")


# ---- MLP ---------------------------------------------------------------------------------------

def dense_mlp(c: Ctx, width: int, tag: str, *, lora: bool) -> list[Node]:
    """Up (and gate, one fused GEMM), activation, down; width split over tp."""
    m, t = c.model, c.tokens
    f = width // c.sh.tp
    up = 2 * f if m.gated_mlp else f
    nodes = gemm(f"{tag}.up_gate" if m.gated_mlp else f"{tag}.up", t, up, m.hidden, c.prec.gemm)
    nodes += _lora(c, ("gate", "up")) if lora else []
    nodes.append(mem(f"{tag}.act", mlp_activation_kind(m), t, f, c.prec.act))
    nodes += gemm(f"{tag}.down", t, m.hidden, f, c.prec.gemm)
    nodes += _lora(c, ("down",)) if lora else []
    return nodes


def layer_ops(model: ModelSpec, sharding: Sharding, batch: TokenBatch, phase: LayerPhase, *,
              moe: bool = False, precision: Precision | None = None, lora: LoraSpec | None = None,
              flash: bool = True, attention: AttentionKind = AttentionKind.FULL
              ) -> tuple[Node, ...]:
    """Forward nodes of one layer (attention block, then dense-MLP or MoE block) on one rank;
    ``attention``: the layer's kind (`ModelSpec.layer_kinds`), whose window sets the core."""
    from analytical.layer_moe import moe_block  # noqa: PLC0415 - it imports this module

    if moe and not model.is_moe:
        raise SpecError("moe", f"{model.name} has no routed experts")
    if batch.q_len % sharding.cp:
        raise SpecError("parallel.cp", f"q_len={batch.q_len} is not divisible by cp="
                        f"{sharding.cp}")
    c = Ctx(model=model, sh=sharding, batch=batch, phase=phase, prec=precision or Precision(),
            lora=lora, flash=flash, attention=attention)
    nodes = _attention(c)
    nodes.append(mem("mlp_norm", norm_kind(model), c.rows, model.hidden, c.prec.act))
    if moe:
        nodes += moe_block(c)
    else:
        nodes += [*_tp_enter(c, "mlp"), *dense_mlp(c, model.ffn_hidden, "mlp", lora=True),
                  *_tp_exit(c, "mlp")]
    return tuple(nodes + _residual(c, "mlp"))
