# SPDX-License-Identifier: Apache-2.0
"""MFU against the dense peak of the training precision (issue 21, item 5): an fp8 run divides
by the fp8 peak, so MFU stays below 1, and the JSON carries model TFLOP/s and tokens/s per GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from simulate import run

SCENARIO = Path(__file__).resolve().parents[2] / "datasets/scenarios/llama3-70b-fp8-h100.yaml"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))


@pytest.mark.parametrize("precision", ["fp8", "bf16"])
def test_mfu_uses_the_training_precision_peak(precision):
    data = run(SCENARIO, overrides=[f"training.precision={precision}"], use_store=False,
               use_predictors=False).data
    assert data["fits"]
    peak = get_hardware("h100-sxm").peak_flops(DType(precision))
    per_gpu = data["model_flops_per_iteration"] / data["iteration_time_s"] / data["num_gpus"]
    assert data["mfu"] == pytest.approx(per_gpu / peak, rel=1e-12)
    assert 0.0 < data["mfu"] < 1.0
    assert data["model_tflops_per_gpu"] == pytest.approx(per_gpu / 1e12, rel=1e-12)
    assert data["tokens_per_s_per_gpu"] == pytest.approx(data["tokens_per_s"] / data["num_gpus"],
                                                         rel=1e-12)
