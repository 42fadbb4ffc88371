# SPDX-License-Identifier: Apache-2.0
"""Nemotron (HF ``model_type: nemotron``): published parameter counts, exact agreement with
transformers, the squared-ReLU MLP (two matrices, not gated) and LayerNorm1p without dropout."""

from __future__ import annotations

import json

import pytest

from analytical.errors import SpecError
from analytical.layer_spec import LayerPhase, Sharding, TokenBatch
from analytical.layers import layer_ops
from analytical.model import MODELS_DIR, load_model, model_from_hf_config
from analytical.model_spec import ModelSpec
from analytical.ops import MemoryOpKind

NEMOTRON = ["nemotron-8b", "nemotron-15b", "nemotron-22b", "nemotron-340b"]


def _config(name: str) -> dict:
    return json.loads((MODELS_DIR / f"{name}.json").read_text())


def test_published_parameter_counts():
    # Nemotron-4 340B report (arXiv:2406.11704) table 1: 9.4B embedding, 331.6B non-embedding
    big = load_model("nemotron-340b")
    assert big.params_non_embedding == pytest.approx(331.6e9, rel=0.0005)
    assert big.params_total - big.params_non_embedding == pytest.approx(9.4e9, rel=0.005)
    assert big.params_total == pytest.approx(341e9, rel=0.001)
    # Nemotron-4 15B report (arXiv:2402.16819) table 1: 3.2B embedding, 12.5B non-embedding
    small = load_model("nemotron-15b")
    assert small.params_non_embedding == pytest.approx(12.5e9, rel=0.005)
    assert small.params_total - small.params_non_embedding == pytest.approx(3.2e9, rel=0.02)


@pytest.mark.parametrize("name", NEMOTRON)
def test_counts_equal_transformers(name):
    """sum(p.numel()) of transformers' NemotronForCausalLM on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = {k: v for k, v in _config(name).items() if not k.startswith("_")}
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**config))
    assert load_model(name).params_total == sum(p.numel() for p in hf.parameters())


def test_relu2_mlp_is_two_matrices_and_not_gated():
    m = load_model("nemotron-8b")
    assert (m.family, m.activation, m.norm) == ("nemotron", "relu2", "layernorm1p")
    assert not m.gated_mlp
    assert m.dense_mlp_params == 2 * 4096 * 16384
    nodes = {n.name: n for n in layer_ops(m, Sharding(tp=2), TokenBatch(seqs=1, q_len=4096),
                                          LayerPhase.TRAIN)}
    assert nodes["mlp.up"].op.n == 16384 // 2  # no gate half
    assert "mlp.up_gate" not in nodes
    assert nodes["mlp.act"].op.kind == MemoryOpKind.GELU  # one read, one write: GELU's traffic
    assert nodes["attn_norm"].op.kind == MemoryOpKind.LAYERNORM


def test_layernorm1p_trains_without_dropout():
    """NeMo-Framework-Launcher 24.07 conf/training/nemotron/*.yaml: hidden_dropout 0.0."""
    train = layer_ops(load_model("nemotron-8b"), Sharding(), TokenBatch(seqs=1, q_len=512),
                      LayerPhase.TRAIN)
    assert not any("dropout" in n.name for n in train)
    gpt = layer_ops(load_model("gpt2"), Sharding(), TokenBatch(seqs=1, q_len=512),
                    LayerPhase.TRAIN)
    assert any("dropout" in n.name for n in gpt)


def test_unknown_activation_and_norm_are_refused():
    config = _config("nemotron-8b")
    with pytest.raises(SpecError) as err:
        model_from_hf_config({**config, "hidden_act": "silu"}, name="x")
    assert err.value.field == "hidden_act"
    spec = load_model("nemotron-8b")
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    for key, bad in (("activation", "relu3"), ("norm", "layernorm2p")):
        with pytest.raises(SpecError) as err:
            ModelSpec(**{**fields, key: bad})
        assert err.value.field == key
