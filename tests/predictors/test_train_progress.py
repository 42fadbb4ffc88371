# SPDX-License-Identifier: Apache-2.0
"""`llmsim train`'s progress: a training run announces its steps and reports each one, so the
bar's ETA rests on a total that the run really reaches."""

from __future__ import annotations

from dataclasses import replace

import pytest

from analytical.hardware import get_hardware
from predictors import train
from predictors.dataset import training_data
from predictors.param_search import search_steps
from predictors.splits import evaluation_splits
from profiler import progress


@pytest.fixture()
def reports(monkeypatch):
    seen: dict[str, list] = {"expect": [], "advance": []}
    monkeypatch.setattr(train, "expect", lambda units, *, unit: seen["expect"].append(
        (units, unit)))
    monkeypatch.setattr(train, "advance", lambda units=1.0, *, unit, label=None: seen[
        "advance"].append((units, unit, label)))
    return seen


def test_every_announced_step_is_reported_once(gemm_frame, fast_config, reports):
    config = replace(fast_config, n_configs=1, max_rounds=20, rf_trees=2, baselines=False)
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    train.train_predictor(data, get_hardware("h100-sxm"), config)
    total = search_steps("gemm", config) + len(evaluation_splits(data.ops, seed=0)) + 1
    assert reports["expect"] == [(total, train.STEP_UNIT)]
    # gemm: log-latency free and monotone, roofline ratio; no anchored search to stop early
    assert [u for u, *_ in reports["advance"]] == [1] * total
    assert {unit for _, unit, _ in reports["advance"]} == {train.STEP_UNIT}
    labels = [label for *_, label in reports["advance"]]
    assert labels[0].startswith("search: ") and labels[-1] == "final model"


def test_an_open_bar_counts_the_steps(gemm_frame, fast_config):
    """Through the real `profiler.progress` bar (a terminal console, drawn never)."""
    import io

    from rich.console import Console

    config = replace(fast_config, n_configs=1, max_rounds=20, rf_trees=2, baselines=False)
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with progress.bar("train", unit=train.STEP_UNIT, console=console, delay_s=3600):
        train.train_predictor(data, get_hardware("h100-sxm"), config)
        (entry,) = progress._OPEN.get()
        task = next(t for t in entry.display.progress.tasks if t.id == entry.task)
        assert task.total is not None and task.completed == task.total > 3
