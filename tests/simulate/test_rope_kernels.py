# SPDX-License-Identifier: Apache-2.0
"""Megatron-Core's eager YaRN rotary (`simulate.rope_kernels`) and the YaRN factor it is
switched by (`HfConfig.yarn_attention_factor`)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from analytical.attention_span import AttentionKind
from analytical.layer_spec import Sharding
from analytical.memory import Framework
from analytical.model import load_model
from analytical.model_hf import model_from_hf_config
from simulate.graph import TrainStep, layer_block
from simulate.rope_kernels import ROPE_EXTRA_PASSES


def _block(model, framework: Framework = Framework.NEMO, tp: int = 1):
    step = TrainStep(sharding=Sharding(tp=tp, sp=tp > 1, ep=8, etp=1, ep_rpn=8), micro_batch=2,
                     seq_len=4096, framework=framework)
    return layer_block(model, step, moe=True, attention=AttentionKind.FULL,
                       layer_params_per_rank=1)


def _hf(scaling: dict | None) -> dict:
    return {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2,
            "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 1000,
            "max_position_embeddings": 4096, "rope_scaling": scaling}


def test_yarn_factor_follows_transformers():
    assert load_model("gpt-oss-120b").rope_attention_factor == pytest.approx(
        0.1 * math.log(32) + 1)
    # DeepSeek's mscale / mscale_all_dim ratio is 1; llama3-type scaling carries no factor
    assert load_model("deepseek-v3").rope_attention_factor == pytest.approx(1.0)
    assert load_model("llama-3.1-8b").rope_attention_factor == 1.0
    assert model_from_hf_config(_hf(None), name="x").rope_attention_factor == 1.0
    explicit = {"rope_type": "yarn", "factor": 4.0, "attention_factor": 1.25}
    assert model_from_hf_config(_hf(explicit), name="x").rope_attention_factor == 1.25
    legacy = {"type": "yarn", "factor": 4.0}
    assert model_from_hf_config(_hf(legacy), name="x").rope_attention_factor == pytest.approx(
        0.1 * math.log(4) + 1)


def test_yarn_rotary_runs_eager_passes_over_query_and_key():
    model = load_model("gpt-oss-120b")
    block = _block(model, tp=2)
    fwd = [n.name for n in block.fwd]
    nodes = {n.name: n for n in (*block.fwd, *block.bwd)}
    # right after the fused node, inside the attention part (before the pre-MLP norm)
    assert fwd[fwd.index("rotary") + 1] == "rotary.unfused_q"
    assert fwd.index("rotary.unfused_k") < fwd.index("mlp_norm")
    tokens = nodes["rotary"].op.rows
    q, k = nodes["rotary.unfused_q"], nodes["rotary.unfused_k"]
    assert (q.op.rows, q.op.cols) == (tokens, model.heads // 2 * model.head_dim)
    assert (k.op.rows, k.op.cols) == (tokens, model.kv_heads // 2 * model.head_dim)
    assert q.count == ROPE_EXTRA_PASSES[0]
    assert nodes["rotary.unfused_q.bwd"].count == ROPE_EXTRA_PASSES[1]
    bwd = [n.name for n in block.bwd]
    assert bwd[bwd.index("rotary.bwd") + 1].startswith("rotary.unfused_")


def test_only_megatron_and_only_scaled_rope():
    model = load_model("gpt-oss-120b")
    assert not any(n.name.startswith("rotary.") for n in _block(model, Framework.TORCHTITAN).fwd)
    plain = replace(model, rope_attention_factor=1.0)
    assert not any(n.name.startswith("rotary.") for n in _block(plain).fwd)
    assert not any(n.name.startswith("rotary.") for n in _block(load_model("qwen3-30b-a3b")).fwd)
