# SPDX-License-Identifier: Apache-2.0
"""The unfused attention-output bias add of Megatron-Bridge's GPT-OSS (`simulate.bias_kernels`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analytical.attention_span import AttentionKind
from analytical.errors import SpecError
from analytical.layer_spec import Sharding
from analytical.memory import Framework
from analytical.model import load_model
from simulate.bias_kernels import ATTN_BIAS_PASSES
from simulate.graph import TrainStep, layer_block
from simulate.scenario import parse_training
from simulate.validate.published import load_corpus, row_scenario


def _block(model, framework: Framework = Framework.NEMO, sharding: Sharding | None = None,
           fused: bool = False):
    step = TrainStep(sharding=sharding or Sharding(ep=8, ep_rpn=8), micro_batch=2,
                     seq_len=4096, framework=framework, bias_dropout_fusion=fused)
    return layer_block(model, step, moe=True, attention=AttentionKind.FULL,
                       layer_params_per_rank=1)


def _names(block) -> set[str]:
    return {n.name for n in (*block.fwd, *block.bwd)}


def test_gpt_oss_adds_its_attention_bias_in_a_pass_between_projection_and_residual():
    gpt_oss = load_model("gpt-oss-120b")
    assert gpt_oss.attn_out_bias
    block = _block(gpt_oss)
    fwd = [n.name for n in block.fwd]
    bwd = [n.name for n in block.bwd]
    # inside the attention part: after the output projection, before the residual add
    assert fwd.index("out_proj") < fwd.index("attn_bias_add") < fwd.index("attn_residual")
    assert bwd.index("attn_residual.bwd") < bwd.index("attn_bias_add.bwd") < bwd.index(
        "out_proj.dgrad")
    nodes = {n.name: n for n in (*block.fwd, *block.bwd)}
    proj = nodes["out_proj"].op
    add = nodes["attn_bias_add"]
    assert (add.op.rows, add.op.cols) == (2 * 4096, gpt_oss.hidden) == (proj.m, proj.n)
    assert add.count == ATTN_BIAS_PASSES[0]
    assert nodes["attn_bias_add.bwd"].count == ATTN_BIAS_PASSES[1]


def test_sequence_parallel_adds_the_bias_to_its_shard():
    block = _block(load_model("gpt-oss-120b"), sharding=Sharding(tp=2, sp=True, ep=8, ep_rpn=8))
    add = next(n for n in block.fwd if n.name == "attn_bias_add")
    assert add.op.rows == 2 * 4096 // 2


def test_only_unfused_megatron_core_and_only_a_biased_attention_output():
    gpt_oss = load_model("gpt-oss-120b")
    assert "attn_bias_add" in _names(_block(gpt_oss, Framework.MEGATRON))
    assert "attn_bias_add" not in _names(_block(gpt_oss, fused=True))
    assert "attn_bias_add" not in _names(_block(gpt_oss, Framework.TORCHTITAN))
    assert "attn_bias_add" not in _names(_block(replace(gpt_oss, attn_out_bias=False)))
    assert "attn_bias_add" not in _names(_block(load_model("qwen3-30b-a3b")))


def test_the_scenario_fuses_unless_told_and_rejects_a_non_boolean():
    block = {"parallel": {"tp": 1, "pp": 1, "dp": 8}, "global_batch": 8, "micro_batch": 1,
             "seq_len": 4096}
    assert parse_training(block).bias_dropout_fusion
    assert not parse_training({**block, "bias_dropout_fusion": False}).bias_dropout_fusion
    with pytest.raises(SpecError, match="bias_dropout_fusion"):
        parse_training({**block, "bias_dropout_fusion": "sometimes"})


def test_validate_turns_it_off_for_megatron_bridge_gpt_oss_rows_only():
    seen: dict[tuple[str, str], set[bool]] = {}
    for i, row in enumerate(load_corpus()):
        training = row_scenario(row, f"r{i}")["training"]
        bridge = "megatron-bridge" in row["framework_version"].lower()
        seen.setdefault((row["model"].startswith("gpt-oss"), str(bridge)), set()).add(
            training.get("bias_dropout_fusion", True))
    assert seen[(True, "True")] == {False}  # every Bridge GPT-OSS row runs it unfused
    assert all(v == {True} for k, v in seen.items() if k != (True, "True"))
