# SPDX-License-Identifier: Apache-2.0
"""Megatron-Core's eager passes for biased and clamped experts (`simulate.moe_kernels`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analytical.attention_span import AttentionKind
from analytical.layer_spec import Sharding
from analytical.memory import Framework
from analytical.model import load_model
from simulate.graph import TrainStep, layer_block
from simulate.moe_kernels import BIAS_PASSES, CLAMP_PASSES


def _nodes(model, framework: Framework = Framework.NEMO) -> dict[str, object]:
    step = TrainStep(sharding=Sharding(ep=8, ep_rpn=8), micro_batch=1, seq_len=4096,
                     framework=framework)
    block = layer_block(model, step, moe=True, attention=AttentionKind.FULL,
                        layer_params_per_rank=1)
    return {n.name: n for n in (*block.fwd, *block.bwd)}


def test_gpt_oss_reads_its_clamp_and_biased_experts():
    model = load_model("gpt-oss-120b")
    assert model.glu_clamp == pytest.approx(7.0) and model.mlp_bias
    assert load_model("qwen3-30b-a3b").glu_clamp == 0.0


def test_biased_clamped_experts_add_passes_over_the_routed_tensors():
    nodes = _nodes(load_model("gpt-oss-120b"))
    down, up = nodes["experts.down"].op, nodes["experts.up_gate"].op
    bias, clamp = nodes["experts.down_bias"], nodes["experts.act_clamp"]
    # the bias pass covers the FC2 output, the clamp the FC1 output, every routed token
    assert (bias.op.rows, bias.op.cols) == (down.m * down.batch, down.n)
    assert (clamp.op.rows, clamp.op.cols) == (up.m * up.batch, up.n)
    assert bias.count == BIAS_PASSES[0] and nodes["experts.down_bias.bwd"].count == BIAS_PASSES[1]
    assert clamp.count == CLAMP_PASSES[0]
    assert nodes["experts.act_clamp.bwd"].count == CLAMP_PASSES[1]


def test_only_megatron_and_only_biased_or_clamped_experts():
    gpt_oss = load_model("gpt-oss-120b")
    assert not any("down_bias" in n or "act_clamp" in n
                   for n in _nodes(gpt_oss, Framework.TORCHTITAN))
    plain = _nodes(load_model("qwen3-30b-a3b"))
    assert not any("down_bias" in n or "act_clamp" in n for n in plain)
    no_clamp = _nodes(replace(gpt_oss, glu_clamp=0.0))
    assert "experts.down_bias" in no_clamp and "experts.act_clamp" not in no_clamp


def test_clamped_experts_keep_the_clamped_copy_for_backward():
    from analytical.activations import activation_bytes_per_layer
    from analytical.parallel import ParallelConfig

    gpt_oss = load_model("gpt-oss-120b")
    par = ParallelConfig(tp=1, pp=1, dp=8, ep=8, etp=1)

    def stored(model) -> float:
        return activation_bytes_per_layer(model, par, micro_batch=1, seq_len=4096, moe_layer=True)

    extra = stored(gpt_oss) - stored(replace(gpt_oss, glu_clamp=0.0))
    # top_k copies of a [tokens, 2 x moe_ffn] bf16 tensor
    assert extra == pytest.approx(4096 * gpt_oss.top_k * 2 * gpt_oss.moe_ffn_hidden * 2.0)


def test_fused_grouped_mlp_folds_the_eager_passes_and_the_activation_into_the_gemms():
    gpt_oss = load_model("gpt-oss-120b")
    step = TrainStep(sharding=Sharding(ep=8, ep_rpn=8), micro_batch=1, seq_len=4096,
                     framework=Framework.NEMO)
    eager, fused = (layer_block(gpt_oss, replace(step, fused_expert_mlp=f), moe=True,
                                layer_params_per_rank=1) for f in (False, True))
    names = {n.name for n in (*fused.fwd, *fused.bwd)}
    assert not names & {"experts.act", "experts.act.bwd", "experts.down_bias",
                        "experts.act_clamp", "experts.down_bias.bwd", "experts.act_clamp.bwd"}
    # the grouped GEMMs themselves are unchanged
    gemms = {n.name: n.op for n in eager.fwd if n.name.startswith("experts.")}
    assert {k: v for k, v in gemms.items() if k in ("experts.up_gate", "experts.down")} == {
        n.name: n.op for n in fused.fwd if n.name in ("experts.up_gate", "experts.down")}
    assert len(fused.fwd) < len(eager.fwd) and len(fused.bwd) < len(eager.bwd)


def test_the_fused_mlp_column_reaches_the_scenario_and_names_its_recipe():
    import simulate.validate.published as pub
    from simulate.scenario import parse_scenario

    rows = [r for r in pub.load_corpus() if r["moe_fused_mlp"]]
    assert {r["model"] for r in rows} == {"gpt-oss-120b"} and len(rows) == 4
    for r in rows:
        assert r["precision"] == "fp8" and r["gpu"] in ("gb200", "gb300")
        assert "moe_fused_mlp from Megatron-Bridge" in r["notes"]
    scenario = pub.row_scenario(rows[0], "row")
    assert scenario["training"]["moe_fused_mlp"] is True
    assert parse_scenario(scenario).training.moe_fused_mlp
    unfused = pub.row_scenario(next(r for r in pub.load_corpus() if not r["moe_fused_mlp"]), "r")
    assert "moe_fused_mlp" not in unfused["training"]
