# SPDX-License-Identifier: Apache-2.0
"""Operator graph of one training micro-batch on one rank, after TP/SP/CP/EP sharding.

Shapes use b = micro-batch, s = sequence, T = b*s/cp tokens on this rank, h = hidden, a/g =
query/kv heads per TP rank, d = head dim, f = MLP width per TP rank, E = experts. A forward
GEMM [T, k] @ [k, n] has two backward GEMMs: dgrad [T, n] @ [n, k] and wgrad [k, T] @ [T, n].
Each `Node` carries the stream it runs on: "compute", or the communication it is ("tp", "cp",
"ep", "fsdp"). Pipeline (send/recv), DP gradient sync and the optimizer live in
`simulate.training`; recompute and precision are applied here because they change the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from analytical.dtypes import DType
from analytical.model import ModelSpec
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    MoEOpKind,
    MoESpec,
    OpSpec,
)
from analytical.parallel import Recompute

COMM_STREAMS = ("tp", "cp", "ep", "fsdp")


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """One operator of a block: ``count`` identical instances on ``stream``."""

    name: str
    op: OpSpec
    stream: str = "compute"
    count: float = 1.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Block:
    """Forward and backward nodes of one layer (or of the embedding / head)."""

    name: str
    fwd: tuple[Node, ...]
    bwd: tuple[Node, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Sharding:
    """Per-rank sizes and communication groups; ``*_rpn`` = ranks of the group per node."""

    micro_batch: int
    seq_len: int
    tp: int
    cp: int
    ep: int
    sp: bool
    tp_rpn: int
    cp_rpn: int
    ep_rpn: int
    fsdp_group: int = 1  # > 1: ZeRO-3/FSDP gathers parameters per layer over this group
    fsdp_rpn: int = 1
    cp_algorithm: str = "ring"
    gemm_dtype: DType = DType.BF16  # fp8 under fp8 training
    act_dtype: DType = DType.BF16
    recompute: Recompute = Recompute.NONE
    flash_attention: bool = True  # False: unfused core (batched GEMMs + softmax over [s, s])

    @property
    def tokens(self) -> int:
        """T: tokens of one micro-batch on this rank (sequence split by CP)."""
        return self.micro_batch * (self.seq_len // self.cp)


def _gemm(name: str, m: int, n: int, k: int, dtype: DType, batch: int = 1
          ) -> tuple[list[Node], list[Node]]:
    fwd = GemmSpec(m=m, n=n, k=k, dtype=dtype, batch=batch)
    dgrad = GemmSpec(m=m, n=k, k=n, dtype=dtype, batch=batch)
    wgrad = GemmSpec(m=k, n=n, k=m, dtype=dtype, batch=batch)
    return [Node(name=name, op=fwd)], [Node(name=f"{name}.dgrad", op=dgrad),
                                        Node(name=f"{name}.wgrad", op=wgrad)]


def _mem(name: str, kind: MemoryOpKind, rows: int, cols: int, dtype: DType,
         count: float = 1.0) -> tuple[list[Node], list[Node]]:
    return ([Node(name=name, op=MemoryBoundSpec(kind=kind, rows=rows, cols=cols, dtype=dtype),
                  count=count)],
            [Node(name=f"{name}.bwd", op=MemoryBoundSpec(kind=kind, rows=rows, cols=cols,
                                                         dtype=dtype, backward=True),
                  count=count)])


def _coll(name: str, kind: CollectiveKind, size_bytes: float, group: int, rpn: int,
          stream: str, count: float = 1.0) -> Node:
    spec = CollectiveSpec(kind=kind, size_bytes=max(1, int(size_bytes)), group_size=group,
                          ranks_per_node=rpn)
    return Node(name=name, op=spec, stream=stream, count=count)


def _tp_in_out(sh: Sharding, rows: int, h: int, tag: str) -> tuple[list[Node], list[Node]]:
    """TP communication around one column->row parallel pair (attention or MLP).

    Without SP: one all-reduce of [T, h] after the row-parallel GEMM (forward) and one after
    the column-parallel dgrad (backward). With SP: all-gather in, reduce-scatter out, and the
    reverse in backward plus the all-gather again for wgrad (Korthikanti et al. 2022, sec. 4.2.2).
    """
    if sh.tp == 1:
        return [], []
    size = rows * h * sh.act_dtype.bytes
    ar, ag, rs = CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER
    if not sh.sp:
        return ([_coll(f"{tag}.tp_all_reduce", ar, size, sh.tp, sh.tp_rpn, "tp")],
                [_coll(f"{tag}.tp_all_reduce.bwd", ar, size, sh.tp, sh.tp_rpn, "tp")])
    fwd = [_coll(f"{tag}.sp_all_gather", ag, size, sh.tp, sh.tp_rpn, "tp"),
           _coll(f"{tag}.sp_reduce_scatter", rs, size, sh.tp, sh.tp_rpn, "tp")]
    bwd = [_coll(f"{tag}.sp_all_gather.bwd", ag, size, sh.tp, sh.tp_rpn, "tp", 2.0),
           _coll(f"{tag}.sp_reduce_scatter.bwd", rs, size, sh.tp, sh.tp_rpn, "tp")]
    return fwd, bwd


def _attention(model: ModelSpec, sh: Sharding) -> tuple[list[Node], list[Node], list[Node]]:
    """Attention block: norm, QKV, rotary, core (CP ring/all-gather), out-proj, residual.

    Returns (fwd, bwd, attention-core forward) - the last is what selective recompute repeats.
    """
    tokens, h, b = sh.tokens, model.hidden, sh.micro_batch
    s_local = sh.seq_len // sh.cp
    heads = model.heads // sh.tp
    kv_heads = max(1, model.kv_heads // sh.tp)  # replicated when tp > kv_heads (as vLLM does)
    qk_dim = (model.qk_nope_head_dim + model.qk_rope_head_dim) if model.is_mla else model.head_dim
    v_dim = model.v_head_dim if model.is_mla else model.head_dim
    norm_rows = tokens // sh.tp if sh.sp else tokens
    norm_kind = MemoryOpKind.RMSNORM if model.norm == "rmsnorm" else MemoryOpKind.LAYERNORM
    fwd: list[Node] = []
    bwd: list[Node] = []

    def add(pair: tuple[list[Node], list[Node]]) -> None:
        fwd.extend(pair[0])
        bwd[:0] = pair[1]  # backward runs in reverse order

    add(_mem("attn_norm", norm_kind, norm_rows, h, sh.act_dtype))
    tp_fwd, tp_bwd = _tp_in_out(sh, tokens, h, "attn")
    if sh.sp and tp_fwd:
        add(([tp_fwd[0]], [tp_bwd[0]]))
    if model.is_mla:  # DeepSeek MLA: low-rank q and kv projections (replicated down-projections)
        q_in = model.q_lora_rank or h
        if model.q_lora_rank:
            add(_gemm("q_down", tokens, model.q_lora_rank, h, sh.gemm_dtype))
        add(_gemm("q_up", tokens, heads * qk_dim, q_in, sh.gemm_dtype))
        add(_gemm("kv_down", tokens, model.kv_lora_rank + model.qk_rope_head_dim, h,
                  sh.gemm_dtype))
        add(_gemm("kv_up", tokens, heads * (model.qk_nope_head_dim + v_dim), model.kv_lora_rank,
                  sh.gemm_dtype))
        kv_heads = heads
    else:
        add(_gemm("qkv_proj", tokens, (heads + 2 * kv_heads) * qk_dim, h, sh.gemm_dtype))
    if model.position == "rope":
        add(_mem("rotary", MemoryOpKind.ROTARY, tokens, (heads + kv_heads) * qk_dim,
                 sh.act_dtype))
    att = dict(batch=b, heads=heads, kv_heads=kv_heads, head_dim=qk_dim, dtype=sh.act_dtype)
    if sh.flash_attention:
        add(_fused_core(sh, att, s_local, kv_heads, qk_dim, v_dim))
    else:
        add(_unfused_core(model, sh, heads, qk_dim, v_dim))
    add(_gemm("out_proj", tokens, h, heads * v_dim, sh.gemm_dtype))
    if tp_fwd:
        add(([tp_fwd[-1]], tp_bwd[-1:] if sh.sp else [tp_bwd[0]]))
    if model.norm == "layernorm":  # GPT-style blocks apply dropout before the residual add
        add(_mem("attn_dropout", MemoryOpKind.DROPOUT, norm_rows, h, sh.act_dtype))
    add(_mem("attn_residual", MemoryOpKind.ADD, norm_rows, h, sh.act_dtype))
    core = [n for n in fwd if n.name.startswith(("attention", "core."))]
    return fwd, bwd, core


def _unfused_core(model: ModelSpec, sh: Sharding, heads: int, qk_dim: int, v_dim: int
                  ) -> tuple[list[Node], list[Node]]:
    """Megatron-LM's unfused core attention (Korthikanti et al. 2022, fig. 5): QK^T as a
    batched GEMM over b*a heads, scale-mask-softmax and dropout over [s, s], then PV."""
    s, rows = sh.seq_len, sh.micro_batch * heads
    fwd: list[Node] = []
    bwd: list[Node] = []
    for f_nodes, b_nodes in (
        _gemm("core.qk", s, s, qk_dim, sh.act_dtype, batch=rows),
        _mem("core.softmax", MemoryOpKind.SOFTMAX, rows * s, s, sh.act_dtype),
        *([_mem("core.dropout", MemoryOpKind.DROPOUT, rows * s, s, sh.act_dtype)]
          if model.norm == "layernorm" else []),
        _gemm("core.pv", s, v_dim, s, sh.act_dtype, batch=rows),
    ):
        fwd.extend(f_nodes)
        bwd[:0] = b_nodes
    return fwd, bwd


def _fused_core(sh: Sharding, att: dict, s_local: int, kv_heads: int, qk_dim: int, v_dim: int
                ) -> tuple[list[Node], list[Node]]:
    """Fused (flash) attention, with the CP exchange around it.

    With CP each rank holds 2 chunks of s/(2cp) (load-balanced causal split); the local block is
    causal and each of the cp-1 remote blocks is s_local/2 x s_local non-causal, so the score
    pairs add up to (s^2/2)/cp (Megatron-Core context parallel, ring attention).
    """
    b = sh.micro_batch
    core_fwd = [Node(name="attention", op=AttentionSpec(q_len=s_local, kv_len=s_local,
                                                        causal=True, **att))]
    core_bwd = [Node(name="attention.bwd", op=AttentionSpec(q_len=s_local, kv_len=s_local,
                                                            causal=True, backward=True, **att))]
    if sh.cp > 1:
        half = max(1, s_local // 2)
        remote = dict(q_len=half, kv_len=s_local, causal=False, **att)
        core_fwd.append(Node(name="attention.cp_block", op=AttentionSpec(**remote),
                             count=sh.cp - 1))
        core_bwd.append(Node(name="attention.cp_block.bwd",
                             op=AttentionSpec(backward=True, **remote), count=sh.cp - 1))
        kv_bytes = b * s_local * kv_heads * (qk_dim + v_dim) * sh.act_dtype.bytes
        if sh.cp_algorithm == "ring":  # one KV block per step; backward also returns dKV
            core_fwd.append(_coll("cp_ring_kv", CollectiveKind.SEND_RECV, kv_bytes, 2,
                                  2 if sh.cp_rpn > 1 else 1, "cp", sh.cp - 1))
            core_bwd.append(_coll("cp_ring_kv.bwd", CollectiveKind.SEND_RECV, 2 * kv_bytes, 2,
                                  2 if sh.cp_rpn > 1 else 1, "cp", sh.cp - 1))
        else:  # all-gather KV before, reduce-scatter dKV after
            core_fwd.append(_coll("cp_all_gather_kv", CollectiveKind.ALL_GATHER,
                                  kv_bytes * sh.cp, sh.cp, sh.cp_rpn, "cp"))
            core_bwd.append(_coll("cp_all_gather_kv.bwd", CollectiveKind.ALL_GATHER,
                                  kv_bytes * sh.cp, sh.cp, sh.cp_rpn, "cp"))
            core_bwd.append(_coll("cp_reduce_scatter_dkv", CollectiveKind.REDUCE_SCATTER,
                                  kv_bytes * sh.cp, sh.cp, sh.cp_rpn, "cp"))
    return core_fwd, core_bwd


def _mlp(model: ModelSpec, sh: Sharding, ffn: int, tag: str, rows: int, tp: int
         ) -> tuple[list[Node], list[Node]]:
    """Dense MLP on ``rows`` tokens, width ``ffn`` split over ``tp``: up(+gate), act, down."""
    f = ffn // tp
    fwd: list[Node] = []
    bwd: list[Node] = []
    for f_nodes, b_nodes in (
        _gemm(f"{tag}.up_gate" if model.gated_mlp else f"{tag}.up", rows,
              2 * f if model.gated_mlp else f, model.hidden, sh.gemm_dtype),
        _mem(f"{tag}.act", MemoryOpKind.SWIGLU if model.gated_mlp else MemoryOpKind.GELU,
             rows, f, sh.act_dtype),
        _gemm(f"{tag}.down", rows, model.hidden, f, sh.gemm_dtype),
    ):
        fwd.extend(f_nodes)
        bwd[:0] = b_nodes
    return fwd, bwd


def _moe(model: ModelSpec, sh: Sharding) -> tuple[list[Node], list[Node]]:
    """Router, dispatch, all-to-all, grouped expert GEMMs, all-to-all back, combine.

    Tokens are split over TP (MoE with TP needs SP, as in Megatron-Core) and balanced over the
    experts: each of the E/ep local experts sees T_moe * top_k * ep / E tokens.
    """
    h, n_experts, k = model.hidden, model.num_experts, model.top_k
    rows = sh.tokens // sh.tp
    fwd: list[Node] = []
    bwd: list[Node] = []

    def add(pair: tuple[list[Node], list[Node]]) -> None:
        fwd.extend(pair[0])
        bwd[:0] = pair[1]

    add(_gemm("router", rows, n_experts, h, DType.BF16))
    moe = dict(tokens=rows, hidden=h, experts=n_experts, top_k=k, dtype=sh.act_dtype)
    add(([Node(name="dispatch", op=MoESpec(kind=MoEOpKind.DISPATCH, **moe))],
         [Node(name="dispatch.bwd", op=MoESpec(kind=MoEOpKind.COMBINE, **moe))]))
    a2a_bytes = rows * k * h * sh.act_dtype.bytes
    if sh.ep > 1:
        a2a = _coll("ep_all_to_all", CollectiveKind.ALL_TO_ALL, a2a_bytes, sh.ep, sh.ep_rpn, "ep")
        add(([a2a], [a2a]))
    local = n_experts // sh.ep
    per_expert = max(1, -(-rows * k * sh.ep // n_experts))
    f = model.moe_ffn_hidden
    for f_nodes, b_nodes in (
        _gemm("experts.up_gate" if model.gated_mlp else "experts.up", per_expert,
              2 * f if model.gated_mlp else f, h, sh.gemm_dtype, batch=local),
        _mem("experts.act", MemoryOpKind.SWIGLU if model.gated_mlp else MemoryOpKind.GELU,
             per_expert * local, f, sh.act_dtype),
        _gemm("experts.down", per_expert, h, f, sh.gemm_dtype, batch=local),
    ):
        add((f_nodes, b_nodes))
    if sh.ep > 1:
        add(([a2a], [a2a]))
    add(([Node(name="combine", op=MoESpec(kind=MoEOpKind.COMBINE, **moe))],
         [Node(name="combine.bwd", op=MoESpec(kind=MoEOpKind.DISPATCH, **moe))]))
    if model.shared_ffn_hidden:
        add(_mlp(model, sh, model.shared_ffn_hidden, "shared_expert", rows, 1))
    return fwd, bwd


def layer_block(model: ModelSpec, sh: Sharding, *, moe: bool,
                layer_params_per_rank: float = 0.0) -> Block:
    """One transformer layer: attention block then MLP (dense or MoE) block, fwd and bwd.

    Recompute: selective repeats the attention core forward in backward (Korthikanti et al.
    2022); full repeats the whole forward, its communication included.
    """
    fwd, bwd, core = _attention(model, sh)
    h, tokens = model.hidden, sh.tokens
    norm_rows = tokens // sh.tp if sh.sp else tokens
    norm_kind = MemoryOpKind.RMSNORM if model.norm == "rmsnorm" else MemoryOpKind.LAYERNORM
    mlp_fwd, mlp_bwd = _mem("mlp_norm", norm_kind, norm_rows, h, sh.act_dtype)
    if moe:
        f2, b2 = _moe(model, sh)
    else:
        tp_f, tp_b = _tp_in_out(sh, tokens, h, "mlp")
        f2, b2 = _mlp(model, sh, model.ffn_hidden, "mlp", tokens, sh.tp)
        if sh.sp and tp_f:
            f2 = [tp_f[0], *f2, tp_f[1]]
            b2 = [tp_b[1], *b2, tp_b[0]]
        elif tp_f:
            f2 = [*f2, tp_f[0]]
            b2 = [tp_b[0], *b2]
    mlp_fwd += f2
    mlp_bwd = b2 + mlp_bwd
    if model.norm == "layernorm":
        d_f, d_b = _mem("mlp_dropout", MemoryOpKind.DROPOUT, norm_rows, h, sh.act_dtype)
        mlp_fwd += d_f
        mlp_bwd = d_b + mlp_bwd
    r_f, r_b = _mem("mlp_residual", MemoryOpKind.ADD, norm_rows, h, sh.act_dtype)
    fwd = fwd + mlp_fwd + r_f
    bwd = r_b + mlp_bwd + bwd
    if sh.fsdp_group > 1 and layer_params_per_rank > 0:
        # ZeRO-3/FSDP: gather this layer's parameters before forward and again before backward,
        # reduce-scatter its gradients after backward (prefetched: overlapped with compute).
        size = layer_params_per_rank * sh.act_dtype.bytes
        ag = _coll("fsdp_all_gather", CollectiveKind.ALL_GATHER, size, sh.fsdp_group,
                   sh.fsdp_rpn, "fsdp")
        rs = _coll("fsdp_reduce_scatter", CollectiveKind.REDUCE_SCATTER, size, sh.fsdp_group,
                   sh.fsdp_rpn, "fsdp")
        fwd = [ag, *fwd]
        bwd = [ag, *bwd, rs]
    if sh.recompute == Recompute.SELECTIVE:
        bwd = [Node(name=f"recompute.{n.name}", op=n.op, count=n.count) for n in core] + bwd
    elif sh.recompute == Recompute.FULL:
        bwd = [Node(name=f"recompute.{n.name}", op=n.op, stream=n.stream, count=n.count)
               for n in fwd if n.stream != "fsdp"] + bwd
    return Block(name="moe_layer" if moe else "dense_layer", fwd=tuple(fwd), bwd=tuple(bwd))


def embedding_block(model: ModelSpec, sh: Sharding) -> Block:
    """Vocab-parallel embedding lookup: gather rows, then all-reduce (or reduce-scatter with SP)
    of the partial sums over TP."""
    tokens, h = sh.tokens, model.hidden
    fwd, bwd = _mem("embedding", MemoryOpKind.EMBEDDING, tokens, h, sh.act_dtype)
    if sh.tp > 1:
        kind = CollectiveKind.REDUCE_SCATTER if sh.sp else CollectiveKind.ALL_REDUCE
        fwd.append(_coll(f"embedding.tp_{kind}", kind, tokens * h * sh.act_dtype.bytes, sh.tp,
                         sh.tp_rpn, "tp"))
    return Block(name="embedding", fwd=tuple(fwd), bwd=tuple(bwd))


def head_block(model: ModelSpec, sh: Sharding) -> Block:
    """Final norm, vocab-parallel LM head GEMM (kept in bf16 under fp8, as Transformer Engine
    recipes do) and cross-entropy over the local vocab shard."""
    tokens, h = sh.tokens, model.hidden
    norm_rows = tokens // sh.tp if sh.sp else tokens
    norm_kind = MemoryOpKind.RMSNORM if model.norm == "rmsnorm" else MemoryOpKind.LAYERNORM
    vocab = -(-model.vocab // sh.tp)
    fwd: list[Node] = []
    bwd: list[Node] = []
    for f_nodes, b_nodes in (
        _mem("final_norm", norm_kind, norm_rows, h, sh.act_dtype),
        _gemm("lm_head", tokens, vocab, h, sh.act_dtype),
        _mem("cross_entropy", MemoryOpKind.CROSS_ENTROPY, tokens, vocab, DType.FP32),
    ):
        fwd.extend(f_nodes)
        bwd[:0] = b_nodes
    if sh.tp > 1 and sh.sp:
        size = tokens * h * sh.act_dtype.bytes
        fwd.insert(1, _coll("lm_head.sp_all_gather", CollectiveKind.ALL_GATHER, size, sh.tp,
                            sh.tp_rpn, "tp"))
        bwd.append(_coll("lm_head.sp_reduce_scatter", CollectiveKind.REDUCE_SCATTER, size,
                         sh.tp, sh.tp_rpn, "tp"))
    elif sh.tp > 1:
        bwd.append(_coll("lm_head.tp_all_reduce", CollectiveKind.ALL_REDUCE,
                         tokens * h * sh.act_dtype.bytes, sh.tp, sh.tp_rpn, "tp"))
    return Block(name="head", fwd=tuple(fwd), bwd=tuple(bwd))
