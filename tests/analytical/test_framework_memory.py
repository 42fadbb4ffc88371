# SPDX-License-Identifier: Apache-2.0
"""Framework memory semantics: Megatron's fp32 main grads, torchtitan's per-op selective
checkpointing and FSDP2 resharding under PP, and each framework's loss working set."""

from __future__ import annotations

import pytest

from analytical.activations import activation_bytes_per_layer, op_sac_bytes_per_layer
from analytical.memory import (
    FP32_CROSS_ENTROPY_BYTES,
    FUSED_BF16_CROSS_ENTROPY_BYTES,
    LOGITS_BYTES,
    Framework,
    framework_grad_bytes,
    training_memory,
)
from analytical.model import load_model
from analytical.parallel import ParallelConfig, Recompute, Schedule
from analytical.stage import stage_params

LLAMA = load_model("llama-3-8b")


def _mem(parallel, framework, recompute=Recompute.NONE, seq=8192, mb=1, **kw):
    return training_memory(LLAMA, parallel, micro_batch=mb, seq_len=seq, recompute=recompute,
                           schedule=Schedule.ONE_F_ONE_B, num_microbatches=8,
                           framework=framework, **kw)


def test_megatron_distributed_optimizer_is_six_plus_twelve_over_d():
    """dist_optimizer.md: bf16 params with fp32 grads take 6 + 12/d bytes per parameter."""
    par = ParallelConfig(dp=8, zero=1)
    grads = framework_grad_bytes(Framework.MEGATRON)
    mem = _mem(par, Framework.MEGATRON, grad_dtype_bytes=grads)
    params = stage_params(LLAMA, tp=1, pp=1, stage=0).total
    states = mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes
    assert states == pytest.approx(params * (6 + 12 / 8))
    assert framework_grad_bytes(Framework.TORCHTITAN) == 2.0
    assert framework_grad_bytes(Framework.MEGATRON, param_dtype_bytes=4.0) == 4.0


def test_torchtitan_op_sac_between_full_and_none():
    par = ParallelConfig(dp=8, fsdp=True)
    kw = dict(micro_batch=2, seq_len=8192)
    sac = op_sac_bytes_per_layer(LLAMA, par, **kw)
    none = activation_bytes_per_layer(LLAMA, par, recompute=Recompute.NONE, **kw)
    full = activation_bytes_per_layer(LLAMA, par, recompute=Recompute.FULL, **kw)
    assert full < sac < none
    # input + wq + wv + sdpa out + w1 + w2 out = 4096+4096+1024+4096+14336+4096 elements
    assert sac == pytest.approx(2 * 31744 * 2 * 8192)
    titan = _mem(par, Framework.TORCHTITAN, Recompute.SELECTIVE, mb=2)
    megatron = _mem(par, Framework.MEGATRON, Recompute.SELECTIVE, mb=2)
    assert titan.activations_bytes < megatron.activations_bytes


def test_torchtitan_keeps_the_stage_unsharded_under_pp():
    par = ParallelConfig(pp=4, dp=2, fsdp=True)
    stage = stage_params(LLAMA, tp=1, pp=4, stage=0)
    titan = _mem(par, Framework.TORCHTITAN, Recompute.FULL)
    other = _mem(par, Framework.MEGATRON, Recompute.FULL)
    assert titan.other_bytes == pytest.approx(stage.total * (2 + 4))  # bf16 params, fp32 grads
    assert other.other_bytes == pytest.approx(2 * stage.largest_layer * 2)


def test_loss_working_set_per_framework():
    par = ParallelConfig(dp=8, fsdp=True)
    logits = LLAMA.vocab * 8192  # one micro-batch of 8k tokens, pp = 1 (last stage is first)
    base = _mem(par, Framework.MEGATRON, Recompute.FULL).activations_bytes
    for framework, per_logit in ((Framework.TORCHTITAN, FP32_CROSS_ENTROPY_BYTES),
                                 (Framework.COMPOSER, FUSED_BF16_CROSS_ENTROPY_BYTES)):
        got = _mem(par, framework, Recompute.FULL).activations_bytes
        assert got - base == pytest.approx((per_logit - LOGITS_BYTES) * logits)


def test_transformer_engine_fp8_saves_linear_inputs_in_one_byte():
    """QKV, output-projection, fc1 and fc2 inputs at 1 byte instead of 2 (Megatron/NeMo only)."""
    par = ParallelConfig(tp=2, dp=4, sp=True, zero=1)
    bf16 = _mem(par, Framework.MEGATRON, Recompute.SELECTIVE)
    fp8 = _mem(par, Framework.MEGATRON, Recompute.SELECTIVE, fp8=True)
    layers = stage_params(LLAMA, tp=2, pp=1, stage=0).layer_is_moe
    per_token = LLAMA.hidden / 2 + LLAMA.hidden / 2 + LLAMA.hidden / 2 + LLAMA.ffn_hidden / 2
    assert bf16.activations_bytes - fp8.activations_bytes == pytest.approx(
        len(layers) * per_token * 8192)
    titan = _mem(par, Framework.TORCHTITAN, Recompute.SELECTIVE)
    assert _mem(par, Framework.TORCHTITAN, Recompute.SELECTIVE, fp8=True) == titan
    # full recompute stores bf16 layer inputs; only the one re-run layer saves fp8 inputs
    full = _mem(par, Framework.MEGATRON, Recompute.FULL)
    fp8_full = _mem(par, Framework.MEGATRON, Recompute.FULL, fp8=True)
    assert full.activations_bytes - fp8_full.activations_bytes == pytest.approx(per_token * 8192)
