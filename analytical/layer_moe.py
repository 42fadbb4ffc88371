# SPDX-License-Identifier: Apache-2.0
"""The routed-expert block of one MoE layer on one rank (part of `analytical.layers`).

Routing is taken as balanced and uniform: every expert is equally likely to be picked. With few
tokens (decode) not every expert gets one: `experts_touched` is the expected number of distinct
experts the tokens reach, and only their weights are read (fused-MoE kernels launch thread blocks
only for experts that received tokens, see `experts_touched`); with many tokens it is all of them
and every touched expert gets tokens * top_k / experts. Two token layouts:

* Tokens split over TP (sequence parallelism; or tp = 1): Megatron-Core's all-to-all token
  dispatcher (megatron/core/transformer/moe/token_dispatcher.py): permute, all-to-all over the
  ``ep`` ranks, all-gather over the expert-TP group when etp > 1, grouped expert GEMMs of width
  f/etp, reduce-scatter over expert TP, all-to-all back, un-permute. Shared experts are a TP MLP
  with SP (megatron/core/transformer/moe/shared_experts.py): all-gather in, reduce-scatter out.
  With EP > 1 and several local experts the received tokens arrive grouped by source rank and
  are re-sorted by local expert, and un-sorted before the combine ("permutation 2",
  ``sort_chunks_by_idxs`` in MoEAlltoAllTokenDispatcher, Megatron-LM d98e8a64): one more read
  and write of every routed copy each way.
* Tokens replicated over TP (inference without SP): vLLM's FusedMoE
  (vllm/model_executor/layers/fused_moe/layer.py): the TP ranks hold E/ep experts each, split
  over etp = tp/ep ranks; no all-to-all (data parallel 1), one all-reduce over TP sums routed
  and shared expert outputs.
"""

from __future__ import annotations

import math
from typing import Any

from analytical.errors import SpecError
from analytical.layer_spec import LayerPhase, Node, Stream
from analytical.layers import Ctx, coll, dense_mlp, gemm, mem, mlp_activation_kind
from analytical.ops import CollectiveKind, MemoryOpKind, MoEOpKind, MoESpec


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def experts_touched(tokens: int, top_k: int, experts: int, local: int) -> int:
    """Expected number of this rank's `local` experts (of `experts` in all) that at least one of
    `tokens` tokens is routed to, each token picking `top_k` distinct experts uniformly:
    local * (1 - (1 - top_k/experts)^tokens), rounded up, in [1, local].

    The fused-MoE kernels read only those experts' weights: vLLM's and SGLang's Triton
    `fused_moe_kernel` run over the token-expert pairs sorted and padded per expert by
    `moe_align_block_size` (grid = padded pairs / BLOCK_SIZE_M x N / BLOCK_SIZE_N; an expert
    with no tokens gets no block, so its weight tiles are never loaded):
    vllm-project/vllm vllm/model_executor/layers/fused_moe/fused_moe.py,
    sgl-project/sglang python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py. At decode
    with a few requests this is far below `local` (Qwen3-235B-A22B, 128 experts, top-8: 8 at
    one token, 61 at 10, all 128 from about 100).
    """
    if tokens <= 0 or local <= 0:
        return max(local, 1)
    untouched = (1.0 - top_k / experts) ** tokens
    return min(local, max(1, math.ceil(local * (1.0 - untouched) - 1e-9)))


def _experts(c: Ctx, tokens: int) -> list[Node]:
    """Grouped expert GEMMs over the experts `tokens` (entering this rank's experts) touch."""
    m, sh = c.model, c.sh
    local = m.num_experts // sh.ep
    touched = experts_touched(tokens, m.top_k, m.num_experts, local)
    # routed rows reaching this rank's experts (balanced) spread over the touched experts
    per_expert = max(1, _ceil_div(tokens * m.top_k * local, m.num_experts * touched))
    local = touched
    f = m.moe_ffn_hidden // sh.expert_tp
    up = 2 * f if m.gated_mlp else f
    return [*gemm("experts.up_gate" if m.gated_mlp else "experts.up", per_expert, up, m.hidden,
                  c.prec.gemm, batch=local),
            mem("experts.act", mlp_activation_kind(m), per_expert * local, f, c.prec.act),
            *gemm("experts.down", per_expert, m.hidden, f, c.prec.gemm, batch=local)]


def _check(c: Ctx, split: bool) -> None:
    m, sh = c.model, c.sh
    if m.num_experts % sh.ep:
        raise SpecError("parallel.ep", f"num_experts={m.num_experts} is not divisible by "
                        f"ep={sh.ep}")
    if m.moe_ffn_hidden % sh.expert_tp:
        raise SpecError("parallel.etp", f"moe_ffn_hidden={m.moe_ffn_hidden} is not divisible "
                        f"by the expert tensor-parallel degree {sh.expert_tp}")
    if not split and sh.ep * sh.expert_tp != sh.tp:
        raise SpecError("parallel.ep", f"with tokens replicated over tp={sh.tp}, ep={sh.ep} x "
                        f"expert tp={sh.expert_tp} must equal tp (experts live on the TP ranks)")


def moe_block(c: Ctx) -> list[Node]:
    """Router, dispatch, (communication), grouped expert GEMMs, (communication), combine,
    shared experts; the MLP-side TP collective for replicated tokens."""
    m, sh, act = c.model, c.sh, c.prec.act
    split = sh.sp or sh.tp == 1
    _check(c, split)
    rows = c.rows if split else c.tokens  # tokens entering the router on this rank
    h, k, e = m.hidden, m.top_k, m.num_experts
    moe: dict[str, Any] = dict(tokens=rows, hidden=h, experts=e, top_k=k, dtype=act)
    nodes = [*gemm("router", rows, e, h, act),  # routers stay in high precision
             Node(name="dispatch", op=MoESpec(kind=MoEOpKind.DISPATCH, **moe))]
    routed_bytes = rows * k * h * act.bytes
    etp = sh.expert_tp
    comm_in: list[Node] = []
    comm_out: list[Node] = []
    if split:
        if sh.ep > 1:
            a2a = coll("ep_all_to_all", CollectiveKind.ALL_TO_ALL, routed_bytes, sh.ep,
                       sh.ep_rpn, Stream.EP, act)
            comm_in.append(a2a)
            comm_out.append(a2a)
        if etp > 1:
            comm_in.append(coll("experts.etp_all_gather", CollectiveKind.ALL_GATHER,
                                routed_bytes * etp, etp, sh.etp_rpn, Stream.EP, act))
            comm_out.insert(0, coll("experts.etp_reduce_scatter", CollectiveKind.REDUCE_SCATTER,
                                    routed_bytes * etp, etp, sh.etp_rpn, Stream.EP, act))
        routed_tokens = rows * sh.ep * etp
        if sh.ep > 1 and e // sh.ep > 1 and c.phase == LayerPhase.TRAIN:  # Megatron-Core
            comm_in.append(mem("dispatch.sort_chunks", MemoryOpKind.COPY, rows * k * etp, h, act))
            comm_out.insert(0, mem("combine.sort_chunks", MemoryOpKind.COPY, rows * k * etp, h,
                                   act))
    else:
        routed_tokens = rows
    nodes += comm_in + _experts(c, routed_tokens) + comm_out
    nodes.append(Node(name="combine", op=MoESpec(kind=MoEOpKind.COMBINE, **moe)))
    if m.shared_ffn_hidden:
        shared = dense_mlp(c, m.shared_ffn_hidden, "shared_expert", lora=False)
        if sh.sp:
            size = c.tokens * h * act.bytes
            shared = [coll("shared_expert.sp_all_gather", CollectiveKind.ALL_GATHER, size, sh.tp,
                           sh.tp_rpn, Stream.TP, act), *shared,
                      coll("shared_expert.sp_reduce_scatter", CollectiveKind.REDUCE_SCATTER,
                           size, sh.tp, sh.tp_rpn, Stream.TP, act)]
        nodes += shared
    if not split:
        nodes.append(coll("mlp.tp_all_reduce", CollectiveKind.ALL_REDUCE, c.tokens * h * act.bytes,
                          sh.tp, sh.tp_rpn, Stream.TP, act))
    return nodes
