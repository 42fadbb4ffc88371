# SPDX-License-Identifier: Apache-2.0
"""`scripts/serving_step_ops.py`: its per-operator prices add up to the step price that
`DenseCost` memoises (the same engine pricing, graph replay and custom all-reduce included)."""

from __future__ import annotations

import pytest
from script_loader import load_script

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import Estimate
from simulate.inference.graph_replay import EngineKernels
from simulate.inference.layer_ops import inference_sharding
from simulate.inference.step_cost import DenseCost

serving_step_ops = load_script("serving_step_ops")


class _Estimator:
    def estimate_many(self, ops):
        return [Estimate(latency_s=2e-6 + op.flops / 1e15,
                         engine="store" if op.family == "gemm" else "xgboost") for op in ops]


@pytest.mark.parametrize("tokens", [1, 16, 300])
def test_op_prices_sum_to_the_memoised_step(tokens):
    h100 = get_hardware("h100-sxm")
    model = load_model("qwen3-235b-a22b")
    kernels = EngineKernels(hw=h100, graph_max_tokens=512, custom_all_reduce_bytes=8 * 2**20)
    dense = DenseCost(model, inference_sharding(tp=8, gpus_per_node=8), DType.BF16,
                      _Estimator(), None, kernels=kernels, hw=h100)
    rows = list(serving_step_ops.op_prices(dense, tokens))
    total = sum(n * each for _, n, each, _ in rows)
    expected = dense.get("dense", tokens)[0] + dense.get("lm", tokens)[0]
    assert total == pytest.approx(expected, rel=1e-12)
    # the TP all-reduce is priced as the engine's kernel, not the estimator's answer
    assert any("ALL_REDUCE" in name and engine == "roofline" for name, _, _, engine in rows)
