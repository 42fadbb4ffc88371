# SPDX-License-Identifier: Apache-2.0
"""Memory model: ZeRO Figure 1, Korthikanti Table 2, KV cache sizes, pipeline in-flight factors,
weight quantisation, capacity and rejected layouts."""

from __future__ import annotations

import pytest

from analytical.activations import activation_bytes_per_layer
from analytical.dtypes import DType
from analytical.errors import InfeasibleError, SpecError, UnknownNameError
from analytical.hardware import hardware_from_dict
from analytical.inference_memory import (
    INT4_GROUP_SIZE,
    kv_cache_bytes,
    kv_cache_capacity_tokens,
    weight_bytes,
)
from analytical.memory import model_states_bytes, training_memory
from analytical.model_spec import ModelSpec
from analytical.parallel import ParallelConfig, Recompute, Schedule
from analytical.stage import stage_layers, stage_params

KIB = 1024


def _model(**kw) -> ModelSpec:
    """A ModelSpec from kwargs, Llama-style defaults for the fields a test does not care about."""
    args = dict(family="llama", max_seq_len=4096, activation="swiglu", norm="rmsnorm",
                position="rope", tied_embeddings=False)
    args.update(kw)
    return ModelSpec(**args)


LLAMA2_7B = _model(name="llama-2-7b", hidden=4096, layers=32, heads=32, kv_heads=32,
                   head_dim=128, ffn_hidden=11008, vocab=32000)
LLAMA3_8B = _model(name="llama-3-8b", hidden=4096, layers=32, heads=32, kv_heads=8,
                   head_dim=128, ffn_hidden=14336, vocab=128256)
# GPT-3 175B shape (Brown et al. 2020): h=12288, a=96, 96 layers, 4h GELU MLP.
GPT3 = _model(name="gpt3-175b", family="gpt3", hidden=12288, layers=96, heads=96, kv_heads=96,
              head_dim=128, ffn_hidden=4 * 12288, vocab=50257, max_seq_len=2048,
              activation="gelu", norm="layernorm", position="learned", tied_embeddings=True)
MIXTRAL = _model(name="mixtral-8x7b", hidden=4096, layers=32, heads=32, kv_heads=8,
                 head_dim=128, ffn_hidden=14336, vocab=32000, num_experts=8, top_k=2,
                 moe_ffn_hidden=14336)

H100 = hardware_from_dict({
    "name": "h100-mem-test", "vendor": "nvidia", "kind": "gpu",
    "peak_dense_tflops": {"fp32": 67, "bf16": 989, "fp8": 1979},
    "memory": {"capacity_gib": 80, "bandwidth_gb_per_s": 3350},
    "compute_units": 132, "l2_mb": 50,
    "interconnect": {"intra_node": {"bandwidth_gb_per_s": 450},
                     "pcie": {"bandwidth_gb_per_s": 64},
                     "inter_node": {"bandwidth_gb_per_s": 50}},
    "efficiency": {"gemm": 0.7, "attention": 0.6, "memory": 0.85, "intra_node": 0.8,
                   "inter_node": 0.8},
})


def test_llama2_7b_count() -> None:
    assert LLAMA2_7B.params_total == pytest.approx(6.74e9, rel=5e-3)


# --- ZeRO (Rajbhandari et al. 2020, Figure 1: Psi = 7.5B, Nd = 64, K = 12) -------------------

@pytest.mark.parametrize(("stage", "gb"), [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)])
def test_zero_figure_1(stage: int, gb: float) -> None:
    psi, nd = 7.5e9, 64
    parts = model_states_bytes(psi, zero_stage=stage, shard=nd)
    assert round(sum(parts) / 1e9, 1) == gb
    closed = {0: 16 * psi, 1: 4 * psi + 12 * psi / nd, 2: 2 * psi + 14 * psi / nd,
              3: 16 * psi / nd}[stage]
    assert sum(parts) == pytest.approx(closed, rel=1e-12)


def test_model_states_fp32_grads_and_unknown_optimizer() -> None:
    w, g, o = model_states_bytes(1e9, zero_stage=0, shard=1, grad_dtype_bytes=4)
    assert (w, g, o) == (2e9, 4e9, 12e9)
    w, g, o = model_states_bytes(1e9, zero_stage=0, shard=1, param_dtype_bytes=4)
    assert o == 8e9  # fp32 training: no separate master copy
    with pytest.raises(UnknownNameError, match="adam"):
        model_states_bytes(1e9, zero_stage=0, shard=1, optimizer="lion9")


# --- Korthikanti et al. 2022, Table 2 (GPT-3 175B shape, s=2048, b=1, t=8) -------------------

S, B, T = 2048, 1, 8
H, A = GPT3.hidden, GPT3.heads
TABLE_2 = {
    "no parallelism": (ParallelConfig(), Recompute.NONE, S * B * H * (34 + 5 * A * S / H)),
    "tensor parallel": (ParallelConfig(tp=T), Recompute.NONE,
                        S * B * H * (10 + 24 / T + 5 * A * S / (H * T))),
    "tensor + sequence parallel": (ParallelConfig(tp=T, sp=True), Recompute.NONE,
                                   S * B * H / T * (34 + 5 * A * S / H)),
    "tp + selective recompute": (ParallelConfig(tp=T), Recompute.SELECTIVE,
                                 S * B * H * (10 + 24 / T)),
    "tp + sp + selective recompute": (ParallelConfig(tp=T, sp=True), Recompute.SELECTIVE,
                                      34 * S * B * H / T),
    "full recompute": (ParallelConfig(tp=T), Recompute.FULL, 2 * S * B * H),
}


@pytest.mark.parametrize("row", list(TABLE_2))
def test_korthikanti_table_2(row: str) -> None:
    parallel, recompute, expected = TABLE_2[row]
    got = activation_bytes_per_layer(GPT3, parallel, micro_batch=B, seq_len=S,
                                     recompute=recompute, flash_attention=False, dropout=True)
    assert got == pytest.approx(expected, rel=1e-12)


def test_flash_attention_equals_selective_and_no_dropout_drops_masks() -> None:
    tpsp = ParallelConfig(tp=T, sp=True)
    flash = activation_bytes_per_layer(GPT3, tpsp, micro_batch=B, seq_len=S, dropout=True)
    assert flash == pytest.approx(34 * S * B * H / T)
    # No dropout: two 1-byte masks per token go, 34 -> 32.
    plain = activation_bytes_per_layer(GPT3, tpsp, micro_batch=B, seq_len=S)
    assert plain == pytest.approx(32 * S * B * H / T)


def test_gqa_swiglu_and_context_parallel() -> None:
    m = LLAMA3_8B  # h=4096, q=4096, kv=1024, f=14336, no dropout, flash
    h, f, kv = 4096, 14336, 8 * 128
    per_token = 2 * h * 4 + 2 * (h + kv + kv) + 2 * h + 3 * f * 2
    got = activation_bytes_per_layer(m, ParallelConfig(), micro_batch=2, seq_len=4096)
    assert got == pytest.approx(per_token * 2 * 4096)
    # CP splits the stored sequence evenly.
    cp2 = activation_bytes_per_layer(m, ParallelConfig(cp=2, dp=1), micro_batch=2, seq_len=4096)
    assert cp2 == pytest.approx(got / 2)
    # Unfused attention with CP: (s/cp) queries against all s keys, 2 bytes of softmax each.
    core = activation_bytes_per_layer(m, ParallelConfig(cp=2), micro_batch=2, seq_len=4096,
                                      flash_attention=False) - cp2
    assert core == pytest.approx(2 * 32 * (2 * 4096 / 2) * 4096)


def test_moe_layer_stores_top_k_copies() -> None:
    h, f, e = 4096, 14336, 8
    dense_part = 2 * h * 4 + 2 * (h + 1024 + 1024) + 2 * h
    moe_part = 4 * e + 2 * 2 * (h + 3 * f + h)  # router probs; top_k=2 x (input, 3f, output)
    got = activation_bytes_per_layer(MIXTRAL, ParallelConfig(), micro_batch=1, seq_len=1024)
    assert got == pytest.approx((dense_part + moe_part) * 1024)
    top1 = activation_bytes_per_layer(_replace(MIXTRAL, top_k=1), ParallelConfig(),
                                      micro_batch=1, seq_len=1024)
    assert got - top1 == pytest.approx(2 * (h + 3 * f + h) * 1024)


def _replace(model: ModelSpec, **changes: int) -> ModelSpec:
    from dataclasses import replace
    return replace(model, **changes)


# --- Training totals ---------------------------------------------------------------------------

def _train(model, parallel, **kw):
    args = dict(micro_batch=1, seq_len=4096, recompute=Recompute.NONE,
                schedule=Schedule.ONE_F_ONE_B, num_microbatches=8)
    args.update(kw)
    return training_memory(model, parallel, **args)


def test_pipeline_in_flight_microbatches() -> None:
    par = ParallelConfig(pp=4)
    per_mb = sum(activation_bytes_per_layer(LLAMA2_7B, par, micro_batch=1, seq_len=4096)
                 for _ in range(8))
    one_f = _train(LLAMA2_7B, par).activations_bytes
    assert one_f == pytest.approx(4 * per_mb)  # first stage: 8 layers x pp=4 micro-batches
    gpipe = _train(LLAMA2_7B, par, schedule=Schedule.GPIPE).activations_bytes
    assert gpipe == pytest.approx(8 * per_mb)
    inter = _train(LLAMA2_7B, ParallelConfig(pp=4, vpp=2),
                   schedule=Schedule.INTERLEAVED).activations_bytes
    assert inter == pytest.approx(4 * per_mb * (1 + 3 / 8))
    few = _train(LLAMA2_7B, par, num_microbatches=2).activations_bytes
    assert few == pytest.approx(2 * per_mb)


def test_interleaved_stage_layers() -> None:
    assert stage_layers(32, pp=4, vpp=2, stage=0) == [0, 1, 2, 3, 16, 17, 18, 19]
    assert stage_layers(61, pp=4, stage=3) == list(range(48, 61))


def test_training_model_states_follow_zero_and_tp() -> None:
    m = LLAMA2_7B
    base = _train(m, ParallelConfig(dp=8))
    n = m.params_total
    assert base.weights_bytes == pytest.approx(2 * n)
    assert base.gradients_bytes == pytest.approx(2 * n)
    assert base.optimizer_bytes == pytest.approx(12 * n)
    z3 = _train(m, ParallelConfig(dp=8, zero=3))
    assert z3.weights_bytes + z3.gradients_bytes + z3.optimizer_bytes == pytest.approx(16 * n / 8)
    assert z3.other_bytes > 0  # gathered-layer buffers
    fsdp = _train(m, ParallelConfig(dp=8, fsdp=True))
    assert fsdp.total_bytes == pytest.approx(z3.total_bytes)
    # TP splits every matrix, norms replicated: (n - norms) / 2 + norms.
    tp2 = _train(m, ParallelConfig(tp=2))
    norms = 32 * 2 * 4096 + 4096
    assert tp2.weights_bytes == pytest.approx(2 * ((n - norms) / 2 + norms))


def test_full_recompute_adds_one_layer_working_set() -> None:
    par = ParallelConfig()
    kw = dict(micro_batch=1, seq_len=4096)
    full_layer = activation_bytes_per_layer(LLAMA2_7B, par, recompute=Recompute.FULL, **kw)
    none_layer = activation_bytes_per_layer(LLAMA2_7B, par, **kw)
    head = 2 * 2 * 4096 * 4096 + 4 * 32000 * 4096  # final norm + LM head inputs, fp32 logits
    got = _train(LLAMA2_7B, par, recompute=Recompute.FULL).activations_bytes
    assert got == pytest.approx(32 * full_layer + head + none_layer - full_layer)


def test_moe_training_shards_experts_over_ep() -> None:
    m = MIXTRAL
    ep1 = stage_params(m, tp=1, ep=1)
    ep8 = stage_params(m, tp=1, ep=8)
    assert ep1.expert == pytest.approx(8 * ep8.expert)
    assert ep1.dense == ep8.dense
    mem = _train(m, ParallelConfig(dp=8, ep=8, zero=1))
    dense_opt, expert_opt = 12 * ep8.dense / 8, 12 * ep8.expert / 1
    assert mem.optimizer_bytes == pytest.approx(dense_opt + expert_opt)


def test_lora_freezes_base_weights() -> None:
    m = LLAMA2_7B
    lora = _train(m, ParallelConfig(), lora_params=20_000_000)
    assert lora.weights_bytes == pytest.approx(2 * m.params_total + 2 * 20e6)
    assert lora.gradients_bytes == pytest.approx(2 * 20e6)
    assert lora.optimizer_bytes == pytest.approx(12 * 20e6)


def test_an_fp8_lora_base_is_one_byte_per_linear_weight_under_every_zero_stage() -> None:
    """The frozen base's block matmul weights (routed experts included) in fp8 keep 1 byte each
    whether or not ZeRO-3 shards them; embeddings and norms keep 2 (`_model_states`)."""
    for m, par in ((LLAMA2_7B, ParallelConfig(dp=8, zero=3)),
                   (MIXTRAL, ParallelConfig(dp=8, ep=8, zero=3)),
                   (MIXTRAL, ParallelConfig(dp=8, ep=8, zero=1))):
        bf16 = _train(m, par, lora_params=0)
        fp8 = _train(m, par, lora_params=0, lora_base_bytes=1.0)
        st = stage_params(m, tp=1, ep=par.ep)
        dense_shard = 8 if par.zero_stage >= 3 else 1  # experts: dp 8 / ep 8 = 1 either way
        saved = (st.linear - st.expert) / dense_shard + st.expert
        assert bf16.weights_bytes - fp8.weights_bytes == pytest.approx(saved, rel=1e-9)


@pytest.mark.parametrize(("model", "parallel", "kw", "field"), [
    (LLAMA2_7B, ParallelConfig(tp=3), {}, "parallel.tp"),
    (LLAMA3_8B, ParallelConfig(tp=16), {}, None),  # kv heads replicate: accepted
    (MIXTRAL, ParallelConfig(dp=3, ep=3), {}, "parallel.ep"),
    (MIXTRAL, ParallelConfig(dp=4, ep=8), {}, "parallel.ep"),
    (LLAMA2_7B, ParallelConfig(ep=2, dp=2), {}, "parallel.ep"),
    (LLAMA2_7B, ParallelConfig(pp=4), {"schedule": Schedule.INTERLEAVED}, "training.schedule"),
    (LLAMA2_7B, ParallelConfig(pp=64), {}, "parallel.pp"),
    (LLAMA2_7B, ParallelConfig(cp=3), {}, "training.seq_len"),
    (LLAMA2_7B, ParallelConfig(), {"micro_batch": 0}, "training.micro_batch"),
])
def test_impossible_training_layouts(model, parallel, kw, field) -> None:
    if field is None:
        assert _train(model, parallel, **kw).total_bytes > 0
        return
    with pytest.raises(SpecError) as err:
        _train(model, parallel, **kw)
    assert err.value.field == field


# --- Inference ---------------------------------------------------------------------------------

def test_kv_cache_published_sizes() -> None:
    # Llama-2-7B fp16: 2 (K,V) * 32 layers * 4096 * 2 B = 512 KiB per token.
    assert kv_cache_bytes(LLAMA2_7B, tokens=1, kv_dtype=DType.FP16) == 512 * KIB
    # Llama-3-8B GQA, 8 kv heads of 128: 2 * 32 * 1024 * 2 B = 128 KiB per token.
    assert kv_cache_bytes(LLAMA3_8B, tokens=1, kv_dtype=DType.BF16) == 128 * KIB
    assert kv_cache_bytes(LLAMA3_8B, tokens=1000, kv_dtype=DType.FP8) == 1000 * 64 * KIB


def test_kv_cache_tp_pp_split_and_replication() -> None:
    assert kv_cache_bytes(LLAMA3_8B, tokens=1, kv_dtype=DType.BF16, tp=8) == 16 * KIB
    # tp=16 > 8 kv heads: each rank still keeps one whole kv head.
    assert kv_cache_bytes(LLAMA3_8B, tokens=1, kv_dtype=DType.BF16, tp=16) == 16 * KIB
    assert kv_cache_bytes(LLAMA3_8B, tokens=1, kv_dtype=DType.BF16, pp=2) == 64 * KIB
    with pytest.raises(SpecError) as err:
        kv_cache_bytes(LLAMA3_8B, tokens=1, kv_dtype=DType.BF16, tp=3)
    assert err.value.field == "parallel.tp"


def test_mla_kv_cache_is_the_latent() -> None:
    dsv3 = _model(name="mla", family="deepseek_v3", hidden=7168, layers=61, heads=128, kv_heads=128, head_dim=192,
                  ffn_hidden=18432, vocab=129280, q_lora_rank=1536, kv_lora_rank=512,
                  qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    assert kv_cache_bytes(dsv3, tokens=1, kv_dtype=DType.BF16, tp=8) == 61 * (512 + 64) * 2


def test_weight_bytes_bf16_int4_fp8() -> None:
    m = LLAMA2_7B
    n = m.params_total
    assert weight_bytes(m, dtype=DType.BF16) == pytest.approx(2 * n)
    linear = 32 * (m.attention_params_per_layer + m.dense_mlp_params)
    rest = n - linear  # embeddings, LM head, norms stay bf16
    int4 = weight_bytes(m, dtype=DType.INT4)
    assert int4 == pytest.approx(linear * (0.5 + 2.5 / INT4_GROUP_SIZE) + 2 * rest)
    assert weight_bytes(m, dtype=DType.FP8) == pytest.approx(linear + 2 * rest)
    # pp=2: the heavier of the first (embedding) and last (LM head + final norm) stages.
    half = 16 * (m.attention_params_per_layer + m.dense_mlp_params + 2 * 4096)
    assert weight_bytes(m, dtype=DType.BF16, pp=2) == pytest.approx(
        2 * (half + 32000 * 4096 + 4096))


def test_kv_capacity_closed_form_and_infeasible() -> None:
    usable = 80 * 2**30 * 0.9
    free = usable - 2 * LLAMA3_8B.params_total - 2 * 2**30
    got = kv_cache_capacity_tokens(LLAMA3_8B, H100, weight_dtype=DType.BF16,
                                   kv_dtype=DType.BF16, activation_reserve_bytes=2 * 2**30)
    assert got == int(free // (128 * KIB))
    big = _replace(LLAMA2_7B, layers=400, name="too-big")
    with pytest.raises(InfeasibleError) as err:
        kv_cache_capacity_tokens(big, H100, weight_dtype=DType.BF16, kv_dtype=DType.BF16)
    assert err.value.details["weights_bytes"] > err.value.details["usable_bytes"]


def test_catalog_models_kv_cache() -> None:
    """The shipped configs give the published per-token KV sizes (bf16/fp16)."""
    from analytical.model import load_model

    try:
        l2, l3 = load_model("llama-2-7b"), load_model("llama-3-8b")
    except UnknownNameError:
        pytest.skip("model catalog not present")
    assert kv_cache_bytes(l2, tokens=1, kv_dtype=DType.FP16) == 512 * KIB
    assert kv_cache_bytes(l3, tokens=1, kv_dtype=DType.BF16) == 128 * KIB
    assert kv_cache_bytes(l3, tokens=1, kv_dtype=DType.BF16) == l3.kv_cache_bytes_per_token(2)
