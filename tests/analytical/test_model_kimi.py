# SPDX-License-Identifier: Apache-2.0
"""Kimi K2: its own ``model_type`` read as the DeepSeek-V3 architecture it ships."""

from __future__ import annotations

import json

import pytest

from analytical.model import MODELS_DIR, load_model
from analytical.model_hf import model_from_hf_config


def test_kimi_k2_reads_as_deepseek_v3_with_published_counts():
    # Kimi-K2 model card (moonshotai/Kimi-K2-Instruct, "Model Summary"): 1T total, 32B activated,
    # 61 layers of which 1 dense, 384 experts, 8 selected, 1 shared, 64 attention heads, MLA.
    # Published to one and two significant digits; the Kimi K2 report (arXiv:2507.20534) rounds
    # the total to 1.04T. llmsim counts 1026.4B / 32.9B (embedding table in the active count).
    model = load_model("kimi-k2")
    assert model.family == "deepseek_v3"
    assert (model.dense_layers, model.moe_layers, model.heads) == (1, 60, 64)
    assert (model.num_experts, model.top_k) == (384, 8)
    assert model.is_mla and model.is_moe
    assert model.params_total == pytest.approx(1.04e12, rel=0.015)
    assert model.params_active == pytest.approx(32e9, rel=0.03)


def test_kimi_k2_count_by_hand():
    """The total, summed from the config's shapes (DeepSeek-V3 block; ``noaux_tc`` bias)."""
    h, v, inter, moe, experts, heads = 7168, 163840, 18432, 2048, 384, 64
    q_lora, kv_lora, nope, rope, vdim = 1536, 512, 128, 64, 128
    attn = (h * q_lora + q_lora + q_lora * heads * (nope + rope)  # q_a, its norm, q_b
            + h * (kv_lora + rope) + kv_lora + kv_lora * heads * (nope + vdim)  # kv_a, norm, kv_b
            + heads * vdim * h)  # o_proj
    norms = 2 * h
    dense = attn + norms + 3 * h * inter
    moe_layer = attn + norms + 3 * h * moe * (experts + 1) + experts * h + experts
    total = dense + 60 * moe_layer + 2 * v * h + h
    assert load_model("kimi-k2").params_total == total


def test_kimi_model_type_equals_deepseek_v3_reader():
    config = json.loads((MODELS_DIR / "kimi-k2.json").read_text())
    as_v3 = model_from_hf_config({**config, "model_type": "deepseek_v3"}, name="kimi-k2")
    assert load_model("kimi-k2") == as_v3


def test_kimi_k2_equals_transformers_deepseek_v3_on_meta_device():
    """transformers has no ``kimi_k2`` config class; its DeepseekV3 model built from the same
    keys (the checkpoint's ``architectures``) has llmsim's count less the 60 x 384 router biases
    it keeps as buffers."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = json.loads((MODELS_DIR / "kimi-k2.json").read_text())
    config = {k: v for k, v in config.items() if k != "architectures"}
    hf_config = transformers.AutoConfig.for_model(**{**config, "model_type": "deepseek_v3"})
    with torch.device("meta"):
        hf_model = transformers.AutoModelForCausalLM.from_config(hf_config)
    model = load_model("kimi-k2")
    hf_params = sum(p.numel() for p in hf_model.parameters())
    assert model.params_total == hf_params + model.moe_layers * model.num_experts
