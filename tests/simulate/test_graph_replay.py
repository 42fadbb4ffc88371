# SPDX-License-Identifier: Apache-2.0
"""CUDA-graph replay of a step's dense part: the measuring stack's per-call timer cost comes off
each kernel up to the engine's largest captured size, and nothing else moves."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.model import load_model
from simulate.engines import Estimate
from simulate.inference.graph_replay import TIMER_OVERHEAD_S, graph_replay_seconds
from simulate.inference.layer_ops import inference_sharding, step_ops
from simulate.inference.step_cost import DenseCost

US = 1e-6


def test_only_a_stack_whose_timer_adds_a_per_call_cost_is_corrected():
    assert graph_replay_seconds(20 * US, "profiled") == pytest.approx(
        20 * US - TIMER_OVERHEAD_S["profiled"])
    for stack in ("trtllm", "vidur", "nccl", ""):
        assert graph_replay_seconds(20 * US, stack) == 20 * US
    assert graph_replay_seconds(4 * US, "profiled") >= 2 * US  # never below half


class _Stacked:
    def __init__(self, stack: str) -> None:
        self.stack = stack

    def estimate_many(self, ops):
        return [Estimate(latency_s=20 * US, engine="xgboost", stack=self.stack) for _ in ops]


@pytest.mark.parametrize("stack", ["profiled", "trtllm"])
def test_dense_steps_up_to_the_graph_size_are_replayed(stack):
    model = load_model("llama-3-8b")
    shard = inference_sharding(tp=1, gpus_per_node=8)
    eager = DenseCost(model, shard, DType.BF16, _Stacked(stack), None)
    graphed = DenseCost(model, shard, DType.BF16, _Stacked(stack), None, graph_max_tokens=64)
    kernels = sum(n for _, n in step_ops(model, tokens=64, shard=shard, weight_dtype=DType.BF16))
    saved = TIMER_OVERHEAD_S.get(stack, 0.0) * kernels
    assert eager.get("dense", 64)[0] - graphed.get("dense", 64)[0] == pytest.approx(saved)
    assert graphed.get("dense", 65)[0] == eager.get("dense", 65)[0]  # above it: eager
    seconds, engines = graphed.get("dense", 8)
    assert sum(engines.values()) == pytest.approx(seconds)
