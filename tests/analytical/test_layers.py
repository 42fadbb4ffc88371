# SPDX-License-Identifier: Apache-2.0
"""The one layer builder: shapes against each model's real computation (closed forms)."""

from __future__ import annotations

from collections import Counter

import pytest

from analytical.errors import SpecError
from analytical.layer_backward import backward_nodes, recompute_nodes
from analytical.layer_spec import (
    LayerPhase,
    Param,
    Sharding,
    TokenBatch,
    heads_per_rank,
)
from analytical.layers import layer_ops
from analytical.model import load_model
from analytical.ops import AttentionSpec, CollectiveKind, GemmSpec
from analytical.parallel import Recompute

TRAIN, PREFILL = LayerPhase.TRAIN, LayerPhase.PREFILL


def _by_name(nodes):
    return {n.name: n for n in nodes}


def test_mla_rotary_is_only_the_rope_part_and_latent_norms_exist():
    """DeepSeek-V3 at tp=8: rotary on 16 local q heads + the one shared k_pe head, 64 wide each
    (HF DeepseekV3Attention); q_a_layernorm / kv_a_layernorm are RMSNorms of the latents."""
    m = load_model("deepseek-v3")
    nodes = _by_name(layer_ops(m, Sharding(tp=8), TokenBatch(seqs=1, q_len=4096), TRAIN,
                               moe=True))
    assert nodes["rotary"].op.cols == (128 // 8 + 1) * 64 == 1088
    assert (nodes["q_down_norm"].op.cols, nodes["kv_down_norm"].op.cols) == (1536, 512)
    assert nodes["q_up"].op.n == 16 * 192 and nodes["kv_up"].op.n == 16 * (128 + 128)
    assert nodes["out_proj"].op.k == 16 * 128  # v_head_dim
    assert nodes["attn_norm"].op.kind == "rmsnorm"


def test_mla_decode_reads_the_latent_row_once_and_prefill_the_decompressed_heads():
    """DeepSeek-V3 at tp=8, 16 local heads: decode attends in the latent space (absorbed MLA,
    vLLM's mla/common.py, FlashMLA), so its K + V traffic per cached token is one
    kv_lora_rank + rope row (576 bf16 elements), not 16 heads of 192 + 128; prefill keeps
    the decompressed heads."""
    m = load_model("deepseek-v3")
    decode = _by_name(layer_ops(m, Sharding(tp=8), TokenBatch(seqs=4, q_len=1, kv_len=4096),
                                LayerPhase.DECODE, moe=True))["attention"].op
    assert (decode.heads, decode.kv_heads) == (16, 1)
    q_and_out = 2 * 4 * 16 * decode.head_dim * 2
    assert decode.bytes - q_and_out == pytest.approx(4 * 4096 * (512 + 64) * 2)
    prefill = _by_name(layer_ops(m, Sharding(tp=8), TokenBatch(seqs=1, q_len=512), PREFILL,
                                 moe=True))["attention"].op
    assert (prefill.kv_heads, prefill.head_dim) == (16, 192)


def test_gpt_layernorm_learned_positions_and_dropout_only_in_training():
    m = load_model("gpt2")
    batch = TokenBatch(seqs=2, q_len=512)
    train = _by_name(layer_ops(m, Sharding(), batch, TRAIN))
    infer = _by_name(layer_ops(m, Sharding(), batch, PREFILL))
    assert train["attn_norm"].op.kind == "layernorm" and "rotary" not in train
    assert {"attn_dropout", "mlp_dropout"} <= set(train)
    assert not any("dropout" in name for name in infer)
    assert train["mlp.up"].op.n == 3072 and train["mlp.act"].op.kind == "gelu"


@pytest.mark.parametrize(("tp", "kv_local"), [(1, 8), (2, 4), (8, 1), (16, 1)])
def test_gqa_kv_heads_split_then_replicated(tp, kv_local):
    m = load_model("llama-3-8b")  # 32 heads, 8 KV heads, d=128
    assert heads_per_rank(m, tp) == (32 // tp, kv_local)
    nodes = _by_name(layer_ops(m, Sharding(tp=tp), TokenBatch(seqs=1, q_len=64), PREFILL))
    assert nodes["qkv_proj"].op.n == (32 // tp + 2 * kv_local) * 128
    assert nodes["attention"].op.kv_heads == kv_local


def test_qk_norm_per_head():
    m = load_model("qwen3-8b")  # 32 heads, 8 KV heads, d=128, q_norm and k_norm per head
    nodes = _by_name(layer_ops(m, Sharding(tp=2), TokenBatch(seqs=1, q_len=100), PREFILL))
    assert (nodes["qk_norm"].op.rows, nodes["qk_norm"].op.cols) == (100 * (16 + 4), 128)


def test_bad_tp_names_the_field():
    with pytest.raises(SpecError, match="parallel.tp"):
        layer_ops(load_model("llama-3-8b"), Sharding(tp=3), TokenBatch(seqs=1, q_len=8), PREFILL)
    with pytest.raises(SpecError, match="parallel.sp"):
        Sharding(tp=1, sp=True)


def _expert_flops(nodes):
    return sum(n.op.flops for n in nodes if n.name.startswith("experts.") and
               isinstance(n.op, GemmSpec))


def test_moe_expert_tp_defaults_to_tp_with_same_flops():
    """Mixtral, tp=2 + SP, ep=4: Megatron-Core's default etp = tp gathers the routed tokens over
    the expert-TP group and halves the expert width; etp=1 keeps experts whole. Same FLOPs."""
    m = load_model("mixtral-8x7b")  # 8 experts, top-2, expert width 14336
    batch = TokenBatch(seqs=1, q_len=4096)
    default = _by_name(layer_ops(m, Sharding(tp=2, sp=True, ep=4), batch, TRAIN, moe=True))
    whole = _by_name(layer_ops(m, Sharding(tp=2, sp=True, ep=4, etp=1), batch, TRAIN, moe=True))
    up = default["experts.up_gate"].op
    assert (up.batch, up.m, up.n) == (2, 4096 * 2 * 4 // 8, 2 * 14336 // 2)
    assert whole["experts.up_gate"].op.m == 2048 * 2 * 4 // 8
    assert whole["experts.up_gate"].op.n == 2 * 14336
    assert _expert_flops(default.values()) == pytest.approx(_expert_flops(whole.values()))
    assert default["experts.etp_all_gather"].op.size_bytes == 2048 * 2 * 4096 * 2 * 2
    assert "experts.etp_all_gather" not in whole
    assert default["ep_all_to_all"].op.size_bytes == 2048 * 2 * 4096 * 2


def test_moe_inference_experts_on_tp_ranks_no_all_to_all():
    """vLLM FusedMoE: tokens replicated over TP, E/ep local experts of width f/(tp/ep), one
    all-reduce after the MoE; no all-to-all with data parallel 1."""
    m = load_model("mixtral-8x7b")
    nodes = layer_ops(m, Sharding(tp=4, ep=4, etp=1), TokenBatch(seqs=1, q_len=1000), PREFILL,
                      moe=True)
    named = _by_name(nodes)
    assert not any(n.op.family == "collective" and n.op.kind == CollectiveKind.ALL_TO_ALL
                   for n in nodes)
    assert (named["experts.up_gate"].op.batch, named["experts.up_gate"].op.m) == (2, 250)
    assert named["mlp.tp_all_reduce"].op.size_bytes == 1000 * 4096 * 2
    with pytest.raises(SpecError, match="parallel.ep"):
        layer_ops(m, Sharding(tp=4, ep=2, etp=1), TokenBatch(seqs=1, q_len=8), PREFILL, moe=True)


def test_backward_is_twice_forward_for_gemms_and_sp_collectives():
    """Every GEMM has dgrad and wgrad of its FLOPs; SP gives 2 all-gathers and 1 reduce-scatter
    per block in backward (Korthikanti et al. 2022, sec. 4.2.2)."""
    m = load_model("llama-3-8b")
    fwd = layer_ops(m, Sharding(tp=4, sp=True), TokenBatch(seqs=1, q_len=2048), TRAIN)
    bwd = backward_nodes(fwd)
    gemm_flops = [sum(n.op.flops for n in nodes if isinstance(n.op, GemmSpec))
                  for nodes in (fwd, bwd)]
    assert gemm_flops[1] == pytest.approx(2 * gemm_flops[0])
    kinds = Counter(n.op.kind for n in bwd if n.op.family == "collective")
    assert kinds == {CollectiveKind.ALL_GATHER: 4, CollectiveKind.REDUCE_SCATTER: 2}
    attn = [n.op for n in bwd if isinstance(n.op, AttentionSpec)]
    assert len(attn) == 1 and attn[0].backward
    frozen = backward_nodes(fwd, frozen_base=True)
    assert not [n for n in frozen if n.name.endswith(".wgrad") and n.param == Param.BASE]


def test_recompute_selective_repeats_core_full_repeats_all():
    m = load_model("llama-3-8b")
    fwd = layer_ops(m, Sharding(tp=2, cp=2, cp_rpn=2), TokenBatch(seqs=1, q_len=4096), TRAIN)
    assert [n.name for n in recompute_nodes(fwd, Recompute.SELECTIVE)] == [
        "recompute.attention", "recompute.attention.cp_block"]
    assert len(recompute_nodes(fwd, Recompute.FULL)) == len(fwd)
    assert recompute_nodes(fwd, Recompute.NONE) == ()


def test_per_op_recompute_is_every_second_matmul_and_no_attention():
    """torchtitan's per-op SAC: of a block's matmuls every second is recomputed, SDPA never,
    the cheap elementwise operators always."""
    m = load_model("llama-3-8b")
    fwd = layer_ops(m, Sharding(), TokenBatch(seqs=1, q_len=4096), TRAIN)
    chosen = recompute_nodes(fwd, Recompute.SELECTIVE, per_op=True)
    gemms = [n for n in fwd if isinstance(n.op, GemmSpec)]
    again = [n for n in chosen if isinstance(n.op, GemmSpec)]
    assert [n.name for n in again] == [f"recompute.{n.name}" for n in gemms[1::2]]
    assert not [n for n in chosen if isinstance(n.op, AttentionSpec)]
    assert len(chosen) > len(again)  # norms, activation, rotary, residuals


@pytest.mark.parametrize("cp", [2, 4])
def test_cp_score_pairs_add_up_to_a_share_of_the_causal_square(cp):
    m = load_model("llama-3-8b")
    s = 8192
    fwd = layer_ops(m, Sharding(cp=cp), TokenBatch(seqs=1, q_len=s), TRAIN)
    pairs = sum(n.count * n.op.score_pairs for n in fwd if isinstance(n.op, AttentionSpec))
    assert pairs == pytest.approx(s * s / 2 / cp, rel=2 / s * cp)


def test_sharding_expert_tp_default():
    assert Sharding(tp=4).expert_tp == 4 and Sharding(tp=4, etp=1).expert_tp == 1
