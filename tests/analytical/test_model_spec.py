# SPDX-License-Identifier: Apache-2.0
"""ModelSpec FLOPs and KV-cache closed forms, config.json parsing, and rejected inputs."""

from __future__ import annotations

import json

import pytest

from analytical.errors import SpecError, UnknownNameError
from analytical.model import load_model, load_model_file, model_from_hf_config
from analytical.model_spec import ModelSpec

# Meta-Llama-3-8B config.json (the keys llmsim reads)
LLAMA3_8B = {
    "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": False,
}


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))


def test_training_flops_are_six_n_plus_attention():
    model = load_model("llama-3-8b")
    h, vocab, layers = 4096, 128256, 32
    # N = every weight matrix: all params minus the embedding lookup and 2L+1 RMSNorm vectors;
    # the untied LM head (V x h) is a matmul and stays in.
    n_matmul = 8_030_261_248 - vocab * h - (2 * layers + 1) * h
    assert model.matmul_params_active == n_matmul
    for seq in (1, 2048, 8192):
        attention = model.attention_flops_per_token(seq, training=True)
        assert model.flops_per_token(seq, training=True) - attention == 6 * n_matmul
        assert model.flops_per_token(seq, training=False) == pytest.approx(
            2 * n_matmul + attention / 3)
    assert model.flops_per_token(0) == 6 * n_matmul


def test_attention_flops_by_hand():
    model = load_model("llama-3-8b")
    # QK^T and PV: 2 matmuls x 2 FLOP/MAC x L x a x d x S, the average causal token sees S/2.
    by_hand = 2 * 2 * 32 * 32 * 128 * 4096 / 2
    assert by_hand == 1_073_741_824
    assert model.attention_flops_per_token(4096, training=False) == by_hand
    assert model.attention_flops_per_token(4096, training=False, causal=False) == 2 * by_hand
    assert model.attention_flops_per_token(4096, training=True) == 3 * by_hand
    # MLA scores use nope + rope = 192 dims, values 128: 2 x L x a x (192 + 128) x S / 2.
    ds = load_model("deepseek-v3")
    assert ds.attention_flops_per_token(1000, training=False) == 2 * 61 * 128 * 320 * 500


def test_tied_lm_head_still_costs_a_matmul():
    model = load_model("gpt2")
    h, vocab = 768, 50257
    # 12 layers x 12 h^2 weights (qkv 3h^2, out h^2, MLP 8h^2) + the (tied) LM head.
    assert model.matmul_params_active == 12 * 12 * h * h + vocab * h
    assert model.lm_head_params == 0
    assert model.embedding_params == (vocab + 1024) * h


def test_moe_active_matmul_counts_top_k_experts_and_router():
    model = load_model("mixtral-8x7b")
    h, f, experts, top_k = 4096, 14336, 8, 2
    attention = h * h * 2 + h * 1024 * 2
    per_layer = attention + top_k * 3 * h * f + h * experts
    assert model.matmul_params_active == 32 * per_layer + 32000 * h
    assert model.params_active == model.params_total - 32 * (experts - top_k) * 3 * h * f


def test_kv_cache_bytes_per_token():
    assert load_model("llama-3-70b").kv_cache_bytes_per_token(2) == 80 * 2 * 8 * 128 * 2
    assert load_model("llama-2-7b").kv_cache_bytes_per_token(1) == 32 * 2 * 32 * 128
    assert load_model("deepseek-v2-lite").kv_cache_bytes_per_token(0.5) == 27 * 576 * 0.5
    with pytest.raises(SpecError, match="dtype_bytes"):
        load_model("gpt2").kv_cache_bytes_per_token(0)


def test_hf_defaults_and_qwen_specifics():
    minimal = {k: v for k, v in LLAMA3_8B.items()
               if k not in ("num_key_value_heads", "tie_word_embeddings")}
    model = model_from_hf_config(minimal, name="m")
    assert model.kv_heads == model.heads == 32  # MHA when num_key_value_heads is absent
    assert not model.tied_embeddings
    qwen2 = model_from_hf_config({**LLAMA3_8B, "model_type": "qwen2"}, name="q")
    # Qwen2 biases q, k and v (not o): (32 + 2 * 8) * 128 per layer.
    assert qwen2.params_total - load_model("llama-3-8b").params_total == 32 * 48 * 128
    qwen3 = model_from_hf_config({**LLAMA3_8B, "model_type": "qwen3"}, name="q3")
    assert qwen3.norm_params_per_layer == 2 * 4096 + 2 * 128  # q_norm and k_norm
    gpt = model_from_hf_config({"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4,
                                "n_positions": 32, "vocab_size": 100}, name="tiny")
    assert gpt.tied_embeddings and gpt.ffn_hidden == 256 and gpt.norm == "layernorm"


def test_load_by_path_names_the_model(tmp_path):
    folder = tmp_path / "My-Llama"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA3_8B))
    assert load_model(str(folder / "config.json")).name == "My-Llama"
    assert load_model_file(folder).params_total == 8_030_261_248
    other = tmp_path / "other.json"
    other.write_text(json.dumps(LLAMA3_8B))
    assert load_model(str(other)).name == "other"


def _error(config: dict, **kwargs) -> SpecError:
    with pytest.raises(SpecError) as info:
        model_from_hf_config(config, name="x", source="cfg.json", **kwargs)
    assert "cfg.json" in str(info.value)
    return info.value


def test_missing_key_is_named():
    config = {k: v for k, v in LLAMA3_8B.items() if k != "hidden_size"}
    assert _error(config).field == "hidden_size"
    assert _error({k: v for k, v in LLAMA3_8B.items() if k != "model_type"}).field == "model_type"


def test_unknown_model_type_lists_supported():
    err = _error({**LLAMA3_8B, "model_type": "falcon"})
    assert err.field == "model_type"
    assert "falcon" in err.reason and "llama" in err.reason and "deepseek_v3" in err.reason


@pytest.mark.parametrize("value", ["32", 32.0, True, -4])
def test_non_int_value_is_named(value):
    assert _error({**LLAMA3_8B, "num_hidden_layers": value}).field == "num_hidden_layers"


def test_inconsistent_shapes_are_named():
    assert _error({**LLAMA3_8B, "num_key_value_heads": 5}).field == "kv_heads"
    assert _error({**LLAMA3_8B, "hidden_size": 4100}).field == "num_attention_heads"
    moe = {**LLAMA3_8B, "model_type": "mixtral", "num_local_experts": 8,
           "num_experts_per_tok": 9}
    assert _error(moe).field == "top_k"
    qwen_moe = {**LLAMA3_8B, "model_type": "qwen3_moe", "num_experts": 8,
                "num_experts_per_tok": 2, "moe_intermediate_size": 64, "decoder_sparse_step": 64}
    assert _error(qwen_moe).field == "decoder_sparse_step"  # 64 > 32 layers: no MoE layer
    assert _error({**LLAMA3_8B, "tie_word_embeddings": "no"}).field == "tie_word_embeddings"
    assert _error({**LLAMA3_8B, "llmsim_family": "gpt3"}).field == "llmsim_family"


def test_bad_files_and_names():
    with pytest.raises(UnknownNameError) as info:
        load_model("llama-9-1t")
    assert "llama-3-8b" in str(info.value)
    with pytest.raises(SpecError, match="no such file"):
        load_model("/nonexistent/config.json")


def test_invalid_json_file_is_named(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(SpecError, match="broken.json"):
        load_model_file(path)
    path.write_text("[1, 2]")
    with pytest.raises(SpecError, match="JSON object"):
        load_model_file(path)


def test_spec_validates_its_own_fields():
    base = load_model("llama-3-8b")
    values = {name: getattr(base, name) for name in base.__dataclass_fields__}
    with pytest.raises(SpecError, match="activation"):
        ModelSpec(**{**values, "activation": "relu"})
    with pytest.raises(SpecError, match="hidden"):
        ModelSpec(**{**values, "hidden": 0})
    with pytest.raises(SpecError, match="seq_len"):
        base.flops_per_token(-1)
