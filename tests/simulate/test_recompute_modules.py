# SPDX-License-Identifier: Apache-2.0
"""Megatron-Core's selective ``recompute_modules``: what each frees (memory) and re-runs (time)."""

from __future__ import annotations

import pytest

from analytical.attention_span import AttentionKind
from analytical.errors import SpecError
from analytical.layer_spec import Sharding
from analytical.memory import Framework
from analytical.model import load_model
from analytical.parallel import ParallelConfig, Recompute, RecomputeModule
from simulate.graph import TrainStep, layer_block
from simulate.scenario import parse_training

LN, ACT, MLP = RecomputeModule.LAYERNORM, RecomputeModule.MOE_ACT, RecomputeModule.MLP


def _recomputed(model, modules, *, moe: bool = True) -> set[str]:
    step = TrainStep(sharding=Sharding(ep=8 if moe else 1, ep_rpn=8), micro_batch=1,
                     seq_len=4096, framework=Framework.NEMO, recompute=Recompute.SELECTIVE,
                     recompute_modules=tuple(modules))
    block = layer_block(model, step, moe=moe, attention=AttentionKind.FULL)
    return {n.name.removeprefix("recompute.") for n in block.bwd
            if n.name.startswith("recompute.")}


def test_layernorm_and_moe_act_rerun_the_separate_norm_and_the_activation_only():
    gpt_oss = load_model("gpt-oss-120b")
    assert _recomputed(gpt_oss, (LN, ACT)) == {"mlp_norm", "experts.act", "experts.act_clamp"}
    # the attention norm is fused into TE's LayerNormLinear: not its own module, not re-run
    assert _recomputed(gpt_oss, (LN,)) == {"mlp_norm"}
    assert _recomputed(gpt_oss, (RecomputeModule.CORE_ATTN,)) == {"attention"}


def test_mlp_reruns_a_dense_layers_mlp_and_not_an_moe_layer():
    model = load_model("deepseek-v3")
    dense = _recomputed(model, (MLP,), moe=False)
    assert {"mlp_norm", "mlp.up_gate", "mlp.act", "mlp.down"} <= dense
    assert _recomputed(model, (MLP,), moe=True) == set()
    assert {"q_up", "kv_up"} <= _recomputed(model, (RecomputeModule.MLA_UP_PROJ,))


def _stored(model, modules, *, moe: bool = True, fp8: bool = False) -> float:
    from analytical.memory import _LayerActivations

    layer = _LayerActivations(model=model, parallel=ParallelConfig(dp=8, ep=8, etp=1),
                              micro_batch=1, seq_len=4096, flash_attention=True, dropout=False,
                              framework=Framework.NEMO, fp8=fp8, modules=tuple(modules))
    return layer.stored(moe, Recompute.SELECTIVE)


def test_layernorm_moe_act_free_the_norm_output_activation_output_and_clamped_copy():
    gpt_oss = load_model("gpt-oss-120b")
    h, w, k = gpt_oss.hidden, gpt_oss.moe_ffn_hidden, gpt_oss.top_k
    freed = _stored(gpt_oss, ()) - _stored(gpt_oss, (LN, ACT))
    # bf16: the pre-MLP norm output, top_k activation outputs and top_k clamped [2 x ffn] copies
    assert freed == pytest.approx(4096 * 2.0 * (h + k * w + k * 2 * w))
    # under fp8 the activation output is kept as TE's fp8 copy: one byte per element freed
    freed_fp8 = _stored(gpt_oss, (), fp8=True) - _stored(gpt_oss, (LN, ACT), fp8=True)
    assert freed_fp8 == pytest.approx(4096 * (2.0 * h + k * w + 2.0 * k * 2 * w))
    assert _stored(gpt_oss, (MLP,)) == _stored(gpt_oss, ())  # mlp: dense layers only


def test_recompute_modules_need_selective_and_known_names():
    block = {"parallel": {"dp": 8}, "global_batch": 8, "seq_len": 4096}
    spec = parse_training({**block, "recompute": "selective",
                           "recompute_modules": ["layernorm", "moe_act"]})
    assert spec.recompute_modules == (LN, ACT)
    with pytest.raises(SpecError, match="recompute_modules"):
        parse_training({**block, "recompute_modules": ["layernorm"]})
    with pytest.raises(SpecError, match="recompute_modules"):
        parse_training({**block, "recompute": "selective", "recompute_modules": ["attn"]})


def test_stated_grad_reduce_dtype_overrides_the_frameworks_gradient_buffer():
    block = {"parallel": {"dp": 8}, "global_batch": 8, "seq_len": 4096, "framework": "nemo"}
    assert parse_training(block).grad_buffer_bytes == 4.0  # Megatron/NeMo: fp32 main grads
    assert parse_training({**block, "grad_reduce_dtype": "bf16"}).grad_buffer_bytes == 2.0
    with pytest.raises(SpecError, match="grad_reduce_dtype"):
        parse_training({**block, "grad_reduce_dtype": "fp8"})
