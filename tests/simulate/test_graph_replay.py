# SPDX-License-Identifier: Apache-2.0
"""A step's dense part as a serving engine runs it: the measuring stack's per-call timer cost comes
off each kernel up to the engine's largest CUDA graph, and memory-bound ops timed as eager
composites are priced as the engine's fused kernel (the roofline); nothing else moves."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.roofline import roofline_time
from simulate.engines import Estimate
from simulate.inference.graph_replay import (
    EngineKernels,
    gemm_kernel_seconds,
    graph_replay_seconds,
    timer_overhead_s,
)
from simulate.inference.layer_ops import inference_sharding, step_ops
from simulate.inference.step_cost import DenseCost

US = 1e-6


def test_only_a_stack_whose_timer_adds_a_per_call_cost_is_corrected():
    assert 0 < timer_overhead_s(20 * US, "profiled") < 20 * US
    assert graph_replay_seconds(20 * US, "profiled") == pytest.approx(
        20 * US - timer_overhead_s(20 * US, "profiled"))
    for stack in ("trtllm", "vidur", "nccl", ""):
        assert timer_overhead_s(20 * US, stack) == 0.0
        assert graph_replay_seconds(20 * US, stack) == 20 * US
    assert graph_replay_seconds(4 * US, "profiled") >= 2 * US  # never below half


def test_the_profiled_timer_cost_grows_with_the_kernel_up_to_a_plateau():
    # the L2 flush's write-back slows a longer kernel more, until it ends
    small, mid, long, longer = (timer_overhead_s(t * US, "profiled") for t in (4, 15, 100, 1000))
    assert small == pytest.approx(3.04 * US)  # flat below the first point
    assert small < mid < long
    assert longer == long == pytest.approx(6.70 * US)


class _Stacked:
    """Every GEMM 20 us from a champion of ``stack``; memory-bound ops from ``memory_stack``."""

    def __init__(self, stack: str, memory_stack: str = "vidur") -> None:
        self.stack, self.memory_stack = stack, memory_stack

    def estimate_many(self, ops):
        return [Estimate(latency_s=20 * US, engine="xgboost",
                         stack=self.memory_stack if op.family == "memory" else self.stack)
                for op in ops]


def _dense(estimator, graph_max_tokens=None):
    model = load_model("llama-3-8b")
    shard = inference_sharding(tp=1, gpus_per_node=8)
    kernels = None if graph_max_tokens is None else EngineKernels(
        hw=get_hardware("h100-sxm"), graph_max_tokens=graph_max_tokens)
    ops = step_ops(model, tokens=64, shard=shard, weight_dtype=DType.BF16)
    return DenseCost(model, shard, DType.BF16, estimator, None, kernels=kernels), ops


@pytest.mark.parametrize("stack", ["profiled", "trtllm"])
def test_dense_steps_up_to_the_graph_size_are_replayed(stack):
    eager, ops = _dense(_Stacked(stack))
    graphed, _ = _dense(_Stacked(stack), graph_max_tokens=64)
    gemms = sum(n for op, n in ops if op.family == "gemm")
    saved = timer_overhead_s(20 * US, stack) * gemms
    assert eager.get("dense", 64)[0] - graphed.get("dense", 64)[0] == pytest.approx(saved)
    assert graphed.get("dense", 65)[0] == eager.get("dense", 65)[0]  # above it: eager
    seconds, engines = graphed.get("dense", 8)
    assert sum(engines.values()) == pytest.approx(seconds)


def test_eager_composite_memory_ops_are_the_engines_fused_kernel_at_any_step_size():
    engine, ops = _dense(_Stacked("trtllm", memory_stack="profiled"), graph_max_tokens=0)
    hw = get_hardware("h100-sxm")
    memory = sum(n * roofline_time(op, hw) for op, n in ops if op.family == "memory")
    others = 20 * US * sum(n for op, n in ops if op.family != "memory")
    seconds, engines = engine.get("dense", 64)
    assert seconds == pytest.approx(memory + others)
    assert engines["roofline"] == pytest.approx(memory)
    as_measured, _ = _dense(_Stacked("trtllm", memory_stack="profiled"))
    assert as_measured.get("dense", 64)[0] > seconds  # no engine: the champion's eager times


def test_an_engine_with_a_custom_all_reduce_prices_small_tp_all_reduces_with_it():
    from analytical.custom_allreduce import custom_all_reduce_time
    from analytical.ops import CollectiveKind, CollectiveSpec
    from simulate.serving.engine_presets import engine_preset

    hw = get_hardware("h100-sxm")
    small = CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=8192 * 2, group_size=4,
                           ranks_per_node=4)
    large = CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=2**24, group_size=4,
                           ranks_per_node=4)
    nccl = Estimate(latency_s=20 * US, engine="store", stack="nccl")
    for engine, tp, limit in (("vllm", 4, 2**23), ("sglang", 4, 2**23), ("trtllm", 2, 16e6),
                              ("trtllm", 4, 8e6)):
        preset = engine_preset(engine, memory_bytes=80 * 2**30, device="H100", tp=tp)
        assert preset.custom_all_reduce_bytes == limit
    preset = engine_preset("vllm", memory_bytes=80 * 2**30, device="H100", tp=4)
    kernels = EngineKernels(hw=hw, graph_max_tokens=512,
                            custom_all_reduce_bytes=preset.custom_all_reduce_bytes)
    assert kernels.seconds(nccl, small, 8) == (custom_all_reduce_time(small, hw), "roofline")
    assert kernels.seconds(nccl, large, 8) == (20 * US, "store")  # over the buffer: NCCL
    plain = EngineKernels(hw=hw, graph_max_tokens=512)
    assert plain.seconds(nccl, small, 8) == (20 * US, "store")


def test_an_fp8_gemm_row_that_timed_its_input_quantization_loses_it_under_an_engine():
    from analytical.ops import GemmSpec
    from simulate.inference.layer_ops import act_quant_pass

    hw = get_hardware("h100-sxm")
    fp8 = GemmSpec(m=1, n=4096, k=4096, dtype=DType.FP8)
    quant = roofline_time(act_quant_pass(fp8, 3.0), hw)
    assert gemm_kernel_seconds(20 * US, fp8, "trtllm", hw) == pytest.approx(20 * US - quant)
    assert gemm_kernel_seconds(20 * US, fp8, "profiled", hw) == 20 * US  # fp8 inputs timed
    bf16 = GemmSpec(m=1, n=4096, k=4096, dtype=DType.BF16)
    assert gemm_kernel_seconds(20 * US, bf16, "trtllm", hw) == 20 * US
    kernels = EngineKernels(hw=hw, graph_max_tokens=0)
    est = Estimate(latency_s=20 * US, engine="store", stack="trtllm")
    assert kernels.seconds(est, fp8, 1) == (pytest.approx(20 * US - quant), "store")
