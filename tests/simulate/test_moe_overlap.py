# SPDX-License-Identifier: Apache-2.0
"""EP all-to-all hidden by Megatron-Core's combined 1F1B schedule (`simulate.moe_overlap`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulate import run
from simulate.moe_overlap import paired_fraction

SCENARIO = Path(__file__).resolve().parents[2] / "datasets/scenarios/mixtral-8x7b-ep-train-h100.yaml"


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")


def test_paired_fraction_leaves_the_warmup_unpaired():
    assert paired_fraction(8, 1, 1) == pytest.approx(7 / 8)  # one forward, one backward alone
    assert paired_fraction(8, 4, 1) == pytest.approx(4 / 8)  # pp - 1 warm-up, plus one
    assert paired_fraction(8, 4, 2) == pytest.approx((16 - 11) / 16)  # interleaved: 6 + 4 + 1
    assert paired_fraction(1, 1, 1) == 0.0


def _result(moe_a2a: bool):
    out = run(SCENARIO, overrides=[f"training.overlap.moe_a2a={str(moe_a2a).lower()}"],
              use_store=False, use_predictors=False)
    return out.training


def test_overlap_hides_part_of_the_exposed_all_to_all_and_nothing_else():
    base, hidden = _result(False), _result(True)
    saved = base.iteration_time_s - hidden.iteration_time_s
    assert saved > 0
    # never more than the communication the schedule exposed, never the compute
    assert saved <= base.breakdown_s["exposed_communication"]
    assert hidden.breakdown_s["compute"] == pytest.approx(base.breakdown_s["compute"])
