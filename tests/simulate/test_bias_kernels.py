# SPDX-License-Identifier: Apache-2.0
"""The unfused attention-output bias add of Megatron-Bridge's GPT-OSS (`simulate.bias_kernels`)."""

from __future__ import annotations

from dataclasses import replace

from analytical.attention_span import AttentionKind
from analytical.layer_spec import Sharding
from analytical.memory import Framework
from analytical.model import load_model
from simulate.bias_kernels import ATTN_BIAS_PASSES
from simulate.graph import TrainStep, layer_block


def _block(model, framework: Framework = Framework.NEMO, sharding: Sharding | None = None):
    step = TrainStep(sharding=sharding or Sharding(ep=8, ep_rpn=8), micro_batch=2,
                     seq_len=4096, framework=framework)
    return layer_block(model, step, moe=True, attention=AttentionKind.FULL,
                       layer_params_per_rank=1)


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


def test_only_nemo_and_only_a_biased_attention_output():
    gpt_oss = load_model("gpt-oss-120b")

    def names(model, framework=Framework.NEMO) -> set[str]:
        block = _block(model, framework)
        return {n.name for n in (*block.fwd, *block.bwd)}

    assert not any(n.startswith("attn_bias_add") for n in names(gpt_oss, Framework.MEGATRON))
    assert not any(n.startswith("attn_bias_add") for n in names(gpt_oss, Framework.TORCHTITAN))
    assert not any(n.startswith("attn_bias_add")
                   for n in names(replace(gpt_oss, attn_out_bias=False)))
    assert not any(n.startswith("attn_bias_add") for n in names(load_model("qwen3-30b-a3b")))
