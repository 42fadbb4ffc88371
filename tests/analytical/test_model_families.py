# SPDX-License-Identifier: Apache-2.0
"""Gemma 2/3, Phi-3/4, Qwen2/3-MoE, DeepSeek-V2, GPT-OSS, Mixtral and Llama 4 from config.json:
published parameter counts, exact agreement with transformers, and the attention layouts."""

from __future__ import annotations

import json

import pytest

from analytical.attention_span import AttentionKind, cached_tokens, mean_keys
from analytical.errors import SpecError
from analytical.model import MODELS_DIR, load_model, model_from_hf_config

FULL, SLIDING, CHUNKED = AttentionKind.FULL, AttentionKind.SLIDING, AttentionKind.CHUNKED

# (model, which count, published value, relative tolerance, source). "total" = params_total;
# "non_embedding" = params_non_embedding; "active" = params_active; "active_no_embedding" =
# params_active less the input embedding table (how DeepSeek, OpenAI and Meta count "active").
# A figure published with 2 significant digits ("14B") can be 3.6% off by rounding alone.
PUBLISHED = [
    ("gemma-2-2b", "non_embedding", 2_024_517_888, 1e-9,
     "Gemma 2 report (arXiv:2408.00118), parameter-count table: 2,024,517,888 non-embedding"),
    ("gemma-2-9b", "non_embedding", 8_324_201_984, 1e-9, "same table: 8,324,201,984"),
    ("gemma-2-27b", "non_embedding", 26_047_480_320, 1e-9, "same table: 26,047,480,320"),
    # The paper's embedding counts use a 256,128-row table; the released vocab_size is 256,000.
    ("gemma-2-2b", "total", 590_118_912 + 2_024_517_888, 0.001, "same table, embedding + non"),
    ("gemma-3-1b", "non_embedding", 698e6, 0.001,
     "Gemma 3 report (arXiv:2503.19786) table 1: 1B, 698M non-embedding (rounded to 1M)"),
    ("gemma-3-27b", "non_embedding", 25_600e6, 0.001, "same table: 27B, 25,600M non-embedding"),
    ("phi-3-mini-4k", "total", 3.8e9, 0.02,
     "Phi-3 report (arXiv:2404.14219) abstract: phi-3-mini, 3.8 billion parameters"),
    ("phi-3-medium-4k", "total", 14e9, 0.02, "same report: phi-3-medium, 14B parameters"),
    ("phi-4", "total", 14.7e9, 0.005,
     "huggingface.co/microsoft/phi-4 safetensors: 14.7B params (the report rounds to 14B)"),
    ("phi-4-mini", "total", 3.8e9, 0.02,
     "Phi-4-Mini report (arXiv:2503.01743) abstract: 3.8-billion-parameter"),
    ("qwen2-57b-a14b", "total", 57e9, 0.01, "Qwen2 report (arXiv:2407.10671) table 1: 57B"),
    ("qwen2-57b-a14b", "active", 14e9, 0.036, "same table: 14B activated"),
    ("llama-3.1-8b", "total", 8.03e9, 0.005, "huggingface.co/meta-llama/Llama-3.1-8B: 8.03B params"),
    ("llama-3.1-70b", "total", 70.6e9, 0.005, "huggingface.co/meta-llama/Llama-3.1-70B: 70.6B params"),
    ("qwen3-14b", "total", 14.8e9, 0.005, "Qwen3-14B model card: 14.8B parameters"),
    ("qwen3-14b", "non_embedding", 13.2e9, 0.005, "same card: 13.2B non-embedding"),
    ("qwen3-32b", "total", 32.8e9, 0.005, "Qwen3-32B model card: 32.8B parameters"),
    ("qwen3-32b", "non_embedding", 31.2e9, 0.005, "same card: 31.2B non-embedding"),
    ("qwen3-235b-a22b", "total", 235e9, 0.005, "Qwen3-235B-A22B model card: 235B in total"),
    ("qwen3-235b-a22b", "active", 22e9, 0.02, "same card: 22B activated"),
    ("qwen3-235b-a22b", "non_embedding", 234e9, 0.005, "same card: 234B non-embedding"),
    ("deepseek-v2", "total", 236e9, 0.005,
     "DeepSeek-V2 report (arXiv:2405.04434) abstract: 236B total parameters"),
    ("deepseek-v2", "active_no_embedding", 21e9, 0.02, "same: 21B activated for each token"),
    ("gpt-oss-120b", "total", 116.83e9, 0.001,
     "gpt-oss-120b & gpt-oss-20b model card (arXiv:2508.10925) table 1: 116.83B total"),
    ("gpt-oss-120b", "active_no_embedding", 5.13e9, 0.002, "same table: 5.13B active"),
    ("gpt-oss-20b", "total", 20.91e9, 0.001, "same table: 20.91B total"),
    ("gpt-oss-20b", "active_no_embedding", 3.61e9, 0.002, "same table: 3.61B active"),
    ("mixtral-8x22b", "total", 141e9, 0.005,
     "mistral.ai/news/mixtral-8x22b (2024-04-17): 39B active parameters out of 141B"),
    ("mixtral-8x22b", "active", 39e9, 0.01, "same post: 39B active"),
    # Meta's totals include the vision encoder, which llmsim does not count: text only here.
    ("llama-4-scout", "total", 109e9, 0.02,
     "Llama-4-Scout-17B-16E model card: 17B activated, 109B total"),
    ("llama-4-scout", "active", 17e9, 0.02, "same card: 17B activated"),
    ("llama-4-maverick", "total", 400e9, 0.005,
     "Llama-4-Maverick-17B-128E model card: 17B activated, 400B total"),
    ("llama-4-maverick", "active", 17e9, 0.02, "same card: 17B activated"),
]


def _count(name: str, which: str) -> int:
    model = load_model(name)
    if which == "active_no_embedding":
        return model.params_active - model.vocab * model.hidden
    return getattr(model, f"params_{which}")


@pytest.mark.parametrize(("name", "which", "published", "rel", "source"), PUBLISHED,
                         ids=[f"{row[0]}-{row[1]}" for row in PUBLISHED])
def test_published_parameter_counts(name, which, published, rel, source):
    assert _count(name, which) == pytest.approx(published, rel=rel), source


NEW = ["gemma-2-2b", "gemma-2-9b", "gemma-2-27b", "gemma-3-1b", "gemma-3-27b", "phi-3-mini-4k",
       "phi-3-medium-4k", "phi-4", "phi-4-mini", "qwen2-57b-a14b", "qwen3-14b", "qwen3-32b",
       "qwen3-235b-a22b", "deepseek-v2", "llama-3.1-8b", "llama-3.1-70b", "gpt-oss-20b", "gpt-oss-120b", "llama-4-scout", "llama-4-maverick"]
_HF_KINDS = {"full_attention": FULL, "sliding_attention": SLIDING, "chunked_attention": CHUNKED}


def _hf_model(config: dict):
    """transformers' own model on the meta device (no weights, no hub access)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = {k: v for k, v in config.items() if not k.startswith(("_", "llmsim"))}
    hf_config = transformers.AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    return hf_config, sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", NEW)
def test_counts_and_layouts_equal_transformers(name):
    hf_config, hf_params = _hf_model(json.loads((MODELS_DIR / f"{name}.json").read_text()))
    model = load_model(name)
    assert model.params_total == hf_params
    layer_types = getattr(hf_config, "layer_types", None)
    if layer_types is not None and getattr(hf_config, "sliding_window", 0) is not None:
        assert model.layer_kinds == tuple(_HF_KINDS[t] for t in layer_types)
    moe_layers = getattr(hf_config, "moe_layers", None)  # Llama 4
    if moe_layers is not None:
        assert model.moe_layer_indices == tuple(moe_layers)


def test_layouts_by_family():
    gemma3 = load_model("gemma-3-27b")
    assert gemma3.layer_kinds.count(FULL) == 10 and gemma3.sliding_window == 1024  # 5:1
    assert gemma3.layer_kinds[5] is FULL and gemma3.layer_kinds[0] is SLIDING
    oss = load_model("gpt-oss-120b")
    assert oss.layer_kinds[:2] == (SLIDING, FULL) and oss.sliding_window == 128
    assert oss.attention_sinks and oss.router_bias and oss.mlp_bias
    maverick = load_model("llama-4-maverick")
    assert maverick.moe_layer_indices == tuple(range(1, 48, 2))  # interleave_moe_layer_step 2
    assert maverick.ffn_hidden == 16384 and maverick.moe_ffn_hidden == 8192
    assert maverick.layer_kinds[:4] == (CHUNKED, CHUNKED, CHUNKED, FULL)  # NoPE every 4th
    assert load_model("llama-4-scout").moe_layers == 48
    assert set(load_model("mistral-7b").layer_kinds) == {SLIDING}  # sliding_window 4096
    assert set(load_model("phi-4").layer_kinds) == {FULL}  # sliding_window null
    assert set(load_model("mixtral-8x7b").layer_kinds) == {FULL}


def _brute_mean(kind: AttentionKind, seq_len: int, span: int) -> float:
    """Discrete mean keys per query (positions 1..S), to check the closed forms against."""
    total = 0
    for pos in range(1, seq_len + 1):
        if kind is FULL:
            total += pos
        elif kind is SLIDING:
            total += min(pos, span)
        else:
            total += (pos - 1) % span + 1
    return total / seq_len


@pytest.mark.parametrize(("kind", "seq_len", "span"), [
    (FULL, 4096, 0), (SLIDING, 4096, 128), (SLIDING, 3000, 4096), (SLIDING, 32768, 1024),
    (CHUNKED, 20000, 8192), (CHUNKED, 8192, 8192), (CHUNKED, 100, 8192)])
def test_mean_keys_matches_a_discrete_count(kind, seq_len, span):
    # The closed forms integrate, so they sit half a key below the discrete mean.
    assert mean_keys(kind, seq_len, span) == pytest.approx(_brute_mean(kind, seq_len, span),
                                                           abs=0.51)


def test_windows_cut_attention_flops_and_kv_cache():
    mistral = load_model("mistral-7b")
    full = {**json.loads((MODELS_DIR / "mistral-7b.json").read_text()), "sliding_window": None}
    dense = model_from_hf_config(full, name="mistral-full")
    # Up to the 4096 window nothing changes; at 32k each query sees at most 4096 keys.
    assert mistral.attention_flops_per_token(4096) == dense.attention_flops_per_token(4096)
    ratio = (mistral.attention_flops_per_token(32768) / dense.attention_flops_per_token(32768))
    assert ratio == pytest.approx((4096 - 4096**2 / (2 * 32768)) / (32768 / 2))
    gemma = load_model("gemma-3-27b")
    per_token_layer = 2 * gemma.kv_heads * gemma.head_dim * 2  # bf16 keys and values
    assert gemma.kv_cache_bytes(32768, 2) == (10 * 32768 + 52 * 1024) * per_token_layer
    assert gemma.kv_cache_bytes_per_token(2) == 62 * per_token_layer  # no cap per token
    assert cached_tokens(CHUNKED, 20000, 8192) == 8192


def test_qwen_moe_sparse_step_and_mlp_only_layers_are_modelled():
    base = json.loads((MODELS_DIR / "qwen3-30b-a3b.json").read_text())
    small = {**base, "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    model = model_from_hf_config(small, name="q")
    assert model.moe_layer_indices == (1, 5)  # (i + 1) % 2 == 0, minus layer 3
    _, hf_params = _hf_model(small)
    assert model.params_total == hf_params


def _error(config: dict) -> SpecError:
    with pytest.raises(SpecError) as info:
        model_from_hf_config(config, name="x", source="cfg.json")
    assert "cfg.json" in str(info.value)
    return info.value


def test_unmodelled_features_are_refused_by_name():
    gemma = json.loads((MODELS_DIR / "gemma-3-27b.json").read_text())
    wrapper = {"model_type": "gemma3", "text_config": gemma, "vision_config": {"hidden_size": 8}}
    assert _error(wrapper).field == "vision_config"
    assert model_from_hf_config({"model_type": "gemma3", "text_config": gemma},
                                name="g").params_total == load_model("gemma-3-27b").params_total
    assert _error({**gemma, "use_bidirectional_attention": True}).field == \
        "use_bidirectional_attention"
    layer_types = ["linear_attention"] * gemma["num_hidden_layers"]
    assert _error({**gemma, "layer_types": layer_types}).field == "layer_types"
    assert _error({**gemma, "layer_types": ["full_attention"]}).field == "layer_types"
    scout = json.loads((MODELS_DIR / "llama-4-scout.json").read_text())
    assert _error({**scout, "interleave_moe_layer_step": 64}).field == "interleave_moe_layer_step"
    assert _error({"model_type": "llama4", "text_config": {**scout, "hidden_size": "x"}}).field \
        == "text_config.hidden_size"
    assert _error({**gemma, "hidden_activation": "relu"}).field == "hidden_activation"
