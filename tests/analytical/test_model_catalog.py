# SPDX-License-Identifier: Apache-2.0
"""The shipped model catalog: published parameter counts, and exact agreement with transformers."""

from __future__ import annotations

import json

import pytest

from analytical.model import MODELS_DIR, load_model, model_names

# (model, published total, published active or None, relative tolerance, source)
PUBLISHED = [
    ("llama-2-7b", 6.74e9, None, 0.005, "Llama-2-7b-hf model card: 6.74B (HF param count)"),
    ("llama-3-8b", 8.03e9, None, 0.005, "Meta-Llama-3-8B safetensors: 8.03B params"),
    ("llama-3-70b", 70.6e9, None, 0.005, "Meta-Llama-3-70B safetensors: 70.6B params"),
    ("llama-3-405b", 405.9e9, None, 0.005, "Llama-3.1-405B safetensors: 406B params"),
    ("mistral-7b", 7.24e9, None, 0.005, "Mistral-7B-v0.1 safetensors: 7.24B params"),
    ("qwen2.5-7b", 7.62e9, None, 0.005, "Qwen2.5-7B model card: 7.61B total, 6.53B non-emb."),
    ("gpt2", 124e6, None, 0.005, "GPT-2 small, 124M with tied embeddings"),
    ("gpt3-175b", 175e9, None, 0.005, "Brown et al. 2020, table 2.1: 175.0B"),
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.005, "Jiang et al. 2024 (Mixtral): 46.7B / 12.9B active"),
    # Published with two significant digits ("37B", "3.3B"): rounding alone spans +-1.4%.
    ("deepseek-v3", 671e9, 37e9, 0.02, "DeepSeek-V3 report: 671B total, 37B activated"),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02, "Qwen3-30B-A3B model card: 30.5B / 3.3B activated"),
]


@pytest.mark.parametrize(("name", "total", "active", "rel", "source"), PUBLISHED,
                         ids=[row[0] for row in PUBLISHED])
def test_published_parameter_counts(name, total, active, rel, source):
    model = load_model(name)
    assert model.params_total == pytest.approx(total, rel=0.005), source
    if active is not None:
        assert model.params_active == pytest.approx(active, rel=rel), source
    else:
        assert model.params_active == model.params_total  # dense


def test_exact_counts_pinned():
    """Integer counts, equal to sum(p.numel()) of the Hugging Face models (see below)."""
    assert load_model("llama-2-7b").params_total == 6_738_415_616
    assert load_model("llama-3-8b").params_total == 8_030_261_248
    assert load_model("gpt2").params_total == 124_439_808
    assert load_model("mixtral-8x7b").params_total == 46_702_792_704


def test_non_embedding_counts():
    # Qwen3-30B-A3B card: 29.9B non-embedding; Qwen2.5-7B card: 6.53B non-embedding.
    assert load_model("qwen3-30b-a3b").params_non_embedding == pytest.approx(29.9e9, rel=0.005)
    assert load_model("qwen2.5-7b").params_non_embedding == pytest.approx(6.53e9, rel=0.005)


def test_deepseek_v3_layer_split_and_mla_kv_cache():
    model = load_model("deepseek-v3")
    assert (model.dense_layers, model.moe_layers) == (3, 58)
    assert model.is_mla and model.is_moe
    # MLA caches kv_lora_rank + qk_rope_head_dim = 576 values per layer (DeepSeek-V2 sec 2.1.2)
    assert model.kv_cache_bytes_per_token(2.0) == 61 * 576 * 2


def test_catalog_has_the_brief_models():
    expected = {"gpt2", "gpt2-medium", "gpt2-xl", "gpt3-175b", "llama-2-7b", "llama-2-13b",
                "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3-405b", "mistral-7b",
                "mixtral-8x7b", "mixtral-8x22b", "qwen2.5-7b", "qwen2.5-72b", "qwen3-8b",
                "qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "deepseek-v3"}
    assert expected <= set(model_names())
    for name in model_names():
        assert load_model(name).name == name


def test_gpt3_is_gpt2_shaped_but_its_own_family():
    model = load_model("gpt3-175b")
    assert model.family == "gpt3"
    assert (model.hidden, model.layers, model.heads, model.max_seq_len) == (12288, 96, 96, 2048)
    # 12 h^2 + 13 h per layer (Kaplan et al. 2020, eq. 2.1 plus biases and LayerNorms)
    h = 12288
    per_layer = 12 * h * h + 13 * h
    assert model.params_total == 96 * per_layer + (50257 + 2048) * h + 2 * h


# Meta-device construction needs no weights and no hub access.
HF_EXACT = [name for name in
            ("llama-3-8b", "mistral-7b", "qwen2.5-7b", "mixtral-8x7b", "gpt2", "qwen3-8b",
             "qwen3-30b-a3b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "deepseek-v3",
             "llama-2-70b", "gpt2-xl")]


@pytest.mark.parametrize("name", HF_EXACT)
def test_params_equal_transformers_on_meta_device(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = json.loads((MODELS_DIR / f"{name}.json").read_text())
    config = {k: v for k, v in config.items() if not k.startswith(("_", "llmsim"))}
    try:
        hf_config = transformers.AutoConfig.for_model(**config)
    except (KeyError, ValueError) as exc:
        pytest.skip(f"transformers has no config class for {config['model_type']}: {exc}")
    with torch.device("meta"):
        hf_model = transformers.AutoModelForCausalLM.from_config(hf_config)
    hf_params = sum(p.numel() for p in hf_model.parameters())
    model = load_model(name)
    if model.router_bias:
        # transformers keeps DeepSeek-V3's e_score_correction_bias as a buffer; the released
        # checkpoint stores it as a weight, which llmsim counts.
        hf_params += model.moe_layers * model.num_experts
    assert model.params_total == hf_params
