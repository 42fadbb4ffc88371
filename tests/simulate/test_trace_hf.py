# SPDX-License-Identifier: Apache-2.0
"""Hugging Face models from configs: weights-free builds, lookups, and traced generate."""

from __future__ import annotations

import json

import pytest
import torch

from analytical.errors import SpecError, UnknownNameError
from simulate.frontend.aten_map import Category
from simulate.frontend.hf import build_hf_model, load_hf_config_dict, trace_hf

pytest.importorskip("transformers")

H, L, V, FFN, HEADS, KV, D = 128, 2, 1000, 256, 4, 2, 32
LLAMA = {"model_type": "llama", "hidden_size": H, "num_hidden_layers": L, "vocab_size": V,
         "num_attention_heads": HEADS, "num_key_value_heads": KV, "intermediate_size": FFN,
         "tie_word_embeddings": False}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def test_meta_build_has_the_closed_form_parameter_count() -> None:
    model = build_hf_model(LLAMA, device="meta")
    assert {p.device.type for p in model.parameters()} == {"meta"}
    per_layer = 2 * H * H + 2 * H * KV * D + 3 * H * FFN + 2 * H  # q, o, k, v, mlp, 2 norms
    expected = V * H + L * per_layer + H + H * V  # embed, layers, final norm, lm head
    assert sum(p.numel() for p in model.parameters()) == expected


def test_cpu_build_is_seeded_and_typed() -> None:
    a = build_hf_model(LLAMA, device="cpu", dtype="bf16", seed=3)
    b = build_hf_model(LLAMA, device="cpu", dtype="bfloat16", seed=3)
    assert {p.dtype for p in a.parameters()} == {torch.bfloat16}
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters(), strict=True))
    assert torch.get_default_dtype() == torch.float32


def test_config_sources_and_errors(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA))
    assert load_hf_config_dict(path)["hidden_size"] == H
    with pytest.raises(UnknownNameError, match="no-such-model"):
        load_hf_config_dict("no-such-model")
    with pytest.raises(SpecError, match="model_type"):
        load_hf_config_dict({"hidden_size": 4})
    path.write_text("{not json")
    with pytest.raises(SpecError, match="config.json"):
        load_hf_config_dict(path)
    with pytest.raises(SpecError, match="mode"):
        trace_hf(LLAMA, mode="serve", batch=1, seq_len=4)
    with pytest.raises(SpecError, match="dtype"):
        build_hf_model(LLAMA, dtype="int4")


def test_traced_generate_is_one_prefill_then_cached_decode_steps() -> None:
    batch, prompt, new = 2, 16, 4
    graph = trace_hf(LLAMA, mode="generate", batch=batch, seq_len=prompt, new_tokens=new)
    attn = [op.spec for op in graph.select(Category.ATTENTION)]
    assert len(attn) == L * new
    assert [(a.q_len, a.kv_len, a.phase.value) for a in attn[::L]] == [
        (16, 16, "prefill"), (1, 17, "decode"), (1, 18, "decode"), (1, 19, "decode")]
    # decode GEMMs run one token per sequence; the LM head only on the last position
    head = [op.spec for op in graph.select(Category.GEMM) if op.spec.n == V]
    assert [g.m for g in head] == [batch] * new
    assert not graph.backward and not graph.select(Category.UNKNOWN)
