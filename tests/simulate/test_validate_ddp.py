# SPDX-License-Identifier: Apache-2.0
"""The DDP check: two gloo ranks measured under torchrun against the traced DDP prediction."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from analytical.errors import SpecError
from profiler.timers import Budget
from simulate.frontend.passes import gradient_buckets
from simulate.frontend.trace import trace_module
from simulate.validate.ddp import DdpConfig, build_mlp, run_ddp_check


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def test_mlp_parameters_and_buckets_closed_form() -> None:
    width, depth = 256, 2
    model = build_mlp(width, depth)
    per_block = (width * 4 * width + 4 * width) + (4 * width * width + width)
    assert sum(p.numel() for p in model.parameters()) == depth * per_block
    traced = trace_module(lambda: build_mlp(width, depth),
                          lambda: (torch.randn(8, width),), backward=True)
    assert sum(p.nbytes for p in traced.params) == depth * per_block * 4
    # 2.1 MB of fp32 gradients: the 1 MiB first bucket, then the rest (< 25 MiB)
    assert len(gradient_buckets(traced.params)) == 2


def test_config_errors_name_the_field() -> None:
    with pytest.raises(SpecError, match="batch"):
        DdpConfig(batch=0)


@pytest.mark.slow
@pytest.mark.distributed
def test_ddp_check_two_gloo_ranks(tmp_path: Path) -> None:
    config = DdpConfig(width=256, depth=2, batch=32, warmup=2, repeats=5,
                       budget=Budget(warmup_s=0.0, measure_s=0.005, min_reps=3, max_reps=5),
                       store_path=tmp_path / "ddp.duckdb", timeout_s=50)
    check = run_ddp_check(config)
    per_block = (256 * 1024 + 1024) + (1024 * 256 + 256)
    assert check.grad_bytes == 2 * per_block * 4  # every gradient all-reduced once
    assert check.buckets == 2
    assert check.profile["collective_shapes"] == 2
    assert check.profile["collective_measured"] == 2  # gloo all-reduce sizes, from torchrun
    assert check.profile["compute_measured"] == check.profile["compute_shapes"]
    assert check.engine_share["store"] == pytest.approx(1.0)  # all profiled
    for value in (check.measured_s, check.predicted_s, check.serial_s, check.error_pct):
        assert math.isfinite(value)
    assert 0 < check.compute_s < check.serial_s and check.comm_s > 0
    assert check.predicted_s <= check.serial_s + 1e-12  # overlap never beats serial
    assert check.predicted_s >= max(check.compute_s, check.comm_s) - 1e-12
