# SPDX-License-Identifier: Apache-2.0
"""Step phases and the caching allocator's reserved memory (`analytical.step_peak`), and
torchtitan's fp32 FSDP2 states: each rule checked on its own."""

from __future__ import annotations

import pytest

from analytical.activations import eager_llama_extra_bytes
from analytical.memory import Framework, training_memory
from analytical.model import load_model
from analytical.offload import LayerBytes, Offload, offloaded_memory
from analytical.optimizer_states import model_states_bytes, second_moment_bytes
from analytical.parallel import ParallelConfig, Recompute, Schedule
from analytical.stage import stage_params
from analytical.step_peak import (
    LOSS_FREE_BLOCK_BYTES,
    TrainingMemory,
    adam_step_temporary_bytes,
    reserved_bytes,
)

LLAMA = load_model("llama-3-8b")
# Llama-3.2-1B, whose whole training state fits one GPU (our own runs, gpu-step/README.md)
SMALL = load_model("datasets/validation/gpu-step/configs/llama-3.2-1b.json")
PARAMS = stage_params(LLAMA, tp=1, pp=1, stage=0).total


def _mem(framework=Framework.TORCHTITAN, dp=8, m=1, seq=8192, model=LLAMA, **kw):
    par = ParallelConfig(dp=dp, fsdp=True)
    return training_memory(model, par, micro_batch=1, seq_len=seq, recompute=Recompute.NONE,
                           schedule=Schedule.ONE_F_ONE_B, num_microbatches=m,
                           framework=framework, **kw)


def test_torchtitan_keeps_fp32_params_and_grads_and_no_master_copy():
    """FSDP2 mixed precision: fp32 shards are the optimizer's weights: 4 + 4 + 8 bytes."""
    mem = _mem(dp=8)
    assert mem.weights_bytes == pytest.approx(4 * PARAMS / 8)
    assert mem.gradients_bytes == pytest.approx(4 * PARAMS / 8)
    assert mem.optimizer_bytes == pytest.approx(8 * PARAMS / 8)
    megatron = _mem(Framework.MEGATRON, dp=8)
    assert megatron.weights_bytes == pytest.approx(2 * PARAMS / 8)


def test_torchtitan_forward_has_no_gradients_without_accumulation():
    """zero_grad(set_to_none) before the forward; accumulation keeps them from micro-batch 2."""
    one = _mem(m=1)
    assert one.gradients_freed_bytes == one.gradients_bytes
    assert one.forward_bytes == pytest.approx(one.weights_bytes + one.optimizer_bytes
                                              + one.activations_bytes + one.other_bytes)
    assert _mem(m=2).gradients_freed_bytes == 0.0
    assert _mem(Framework.MEGATRON).gradients_freed_bytes == 0.0


def test_foreach_adamw_step_holds_a_copy_of_the_second_moments():
    """torchtitan's foreach AdamW: _foreach_sqrt(exp_avg_sqs) is 4 bytes per parameter;
    Megatron's fused Adam none."""
    mem = _mem(dp=1)
    assert mem.optimizer_step_bytes == pytest.approx(4 * PARAMS)
    assert mem.step_bytes == pytest.approx(20 * PARAMS)
    assert _mem(Framework.MEGATRON).optimizer_step_bytes == 0.0
    assert adam_step_temporary_bytes(8.0, foreach=False) == 0.0


def test_allocated_peak_is_the_larger_phase():
    long = _mem(seq=8192)  # activations and the 12-byte loss dominate
    assert long.allocated_bytes == long.forward_bytes > long.step_bytes
    short = _mem(dp=1, seq=128)  # 8B states at 128 tokens: the optimizer step dominates
    assert short.allocated_bytes == short.step_bytes > short.forward_bytes
    # the step's default-stream segments then cover the forward's: nothing spare
    assert short.allocator_bytes == 0.0


def test_reserved_adds_the_reduce_scatter_gradients_and_the_loss_block():
    """World size 1: the sharded grads' reduce-scatter-stream segments are free but reserved in
    the forward, and the eager fp32 loss leaves the bf16 logits block unused (2 B/logit)."""
    eager = _mem(dp=1, model=SMALL)
    assert eager.allocated_bytes == eager.forward_bytes
    assert eager.allocator_bytes == pytest.approx(eager.gradients_bytes
                                                  + LOSS_FREE_BLOCK_BYTES * 8192 * SMALL.vocab)
    assert eager.total_bytes == eager.allocated_bytes + eager.allocator_bytes
    compiled = _mem(dp=1, model=SMALL, compiled_loss=True)  # Inductor fuses the loss
    assert compiled.allocator_bytes == pytest.approx(compiled.gradients_bytes)


def test_reserved_adds_the_all_gather_buffers_over_several_ranks():
    one = _mem(dp=1, model=SMALL, compiled_loss=True)
    two = _mem(dp=2, model=SMALL, compiled_loss=True)
    largest = stage_params(SMALL, tp=1, pp=1, stage=0).largest_layer
    assert two.allocator_bytes == pytest.approx(two.gradients_bytes + 2 * largest * 2)
    assert one.allocator_bytes == pytest.approx(one.gradients_bytes)


def test_accumulated_gradients_are_in_use_so_only_the_loss_block_is_spare():
    acc = _mem(dp=1, m=2, model=SMALL)
    assert acc.allocator_bytes == pytest.approx(LOSS_FREE_BLOCK_BYTES * 8192 * SMALL.vocab)


def test_other_frameworks_have_no_allocator_term():
    assert _mem(Framework.MEGATRON).allocator_bytes == 0.0
    assert _mem(Framework.COMPOSER).allocator_bytes == 0.0


def test_reserved_bytes_rules():
    # default-stream phases 10 (forward, 2 of them side-stream grads live) and 7 (step with
    # 3 side grads): segments = max(10 - 2 + 1, 7 - 3) + 3 + 0.5
    assert reserved_bytes(forward_bytes=10, step_bytes=7, side_gradients_bytes=3,
                          forward_side_gradients_bytes=2, side_buffers_bytes=0.5,
                          loss_free_bytes=1) == pytest.approx(12.5)
    # all on the default stream: the larger phase
    assert reserved_bytes(forward_bytes=4, step_bytes=9) == 9


def test_offloaded_optimizer_takes_its_step_temporaries_along():
    mem = TrainingMemory(weights_bytes=4.0, gradients_bytes=4.0, optimizer_bytes=8.0,
                         activations_bytes=1.0, other_bytes=0.0, gradients_freed_bytes=4.0,
                         optimizer_step_bytes=4.0, allocator_bytes=1.0)
    layer = LayerBytes(weights=1.0, gradients=1.0, optimizer=2.0, activations=0.25,
                       working=0.0)
    out = offloaded_memory(mem, layer, 4, Offload(optimizer=True))  # 2 of 4 layers stay
    assert out.optimizer_step_bytes == pytest.approx(2.0)
    assert out.gradients_freed_bytes == pytest.approx(2.0)
    assert out.allocator_bytes == 1.0


def test_torchtitan_eager_blocks_store_fp32_norms_repeated_kv_and_the_silu_input():
    """Llama-3.2-1B (h 2048, 32 query / 8 KV heads of 64, SwiGLU 8192): two norms x (4 + 2 - 2)
    h, K and V at the query width 2 x (2 x 2048 - 2 x 512), the SiLU input 2 x 8192 bytes per
    token: 19 h beyond Korthikanti's count, only eager and only without recompute."""
    par = ParallelConfig(dp=1, fsdp=True)
    kw = dict(micro_batch=1, seq_len=8192)
    assert eager_llama_extra_bytes(SMALL, par, **kw) == pytest.approx(19 * 2048 * 8192)
    eager = _mem(dp=1, model=SMALL, compiled=False)
    compiled = _mem(dp=1, model=SMALL, compiled=True)
    layers = SMALL.layers
    assert eager.activations_bytes - compiled.activations_bytes == pytest.approx(
        layers * eager_llama_extra_bytes(SMALL, par, **kw))
    megatron = (_mem(Framework.MEGATRON, dp=1, model=SMALL, compiled=False).activations_bytes
                - _mem(Framework.MEGATRON, dp=1, model=SMALL, compiled=True).activations_bytes)
    assert megatron == 0.0


def test_second_moment_is_the_variance_share_of_the_optimizer_states() -> None:
    """exp_avg_sq is 4 bytes per parameter whatever else the optimizer keeps: 4 of 8 with fp32
    weights (torchtitan), 4 of 12 with a master copy (bf16 weights), none for SGD."""
    params = 1e9
    for stored, per_param in ((4.0, 8.0), (2.0, 12.0)):
        _, _, opt = model_states_bytes(params, zero_stage=3, shard=8, param_dtype_bytes=stored,
                                       optimizer="adamw")
        assert opt == params * per_param / 8
        assert second_moment_bytes(opt, optimizer="adamw",
                                   param_dtype_bytes=stored) == params * 4.0 / 8
    _, _, sgd = model_states_bytes(params, zero_stage=1, shard=8, optimizer="sgd")
    assert second_moment_bytes(sgd, optimizer="sgd", param_dtype_bytes=2.0) == 0.0
