# SPDX-License-Identifier: Apache-2.0
"""`llmsim train`'s progress: a training run announces its fits and reports each one, so the
bar's ETA rests on a total that the run really reaches."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from rich.console import Console

from analytical.hardware import get_hardware
from predictors import param_search, search_folds, train
from predictors.dataset import training_data
from predictors.fit import FIT_UNIT
from predictors.param_search import search_steps
from predictors.splits import evaluation_splits
from profiler import progress


@pytest.fixture()
def reports(monkeypatch):
    """Every expect/advance of a training run, by the module that made it."""
    seen: dict[str, list] = {"expect": [], "advance": []}
    for module in (train, param_search, search_folds):
        if hasattr(module, "expect"):
            monkeypatch.setattr(module, "expect", lambda units, *, unit: seen["expect"].append(
                (units, unit)))
        monkeypatch.setattr(module, "advance", lambda units=1.0, *, unit, label=None: seen[
            "advance"].append((units, unit, label)))
    return seen


@pytest.fixture()
def tiny(fast_config):
    return replace(fast_config, n_configs=1, max_rounds=20, rf_trees=2, baselines=False)


def test_every_announced_fit_is_reported_once(gemm_frame, tiny, reports):
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    train.train_predictor(data, get_hardware("h100-sxm"), tiny)
    splits = len(evaluation_splits(data.ops, seed=0))
    # one inner fold (search_valid_rows=0): a candidate is one fit
    assert reports["expect"] == [(splits + 1, FIT_UNIT), (search_steps("gemm", tiny), FIT_UNIT)]
    assert {unit for _, unit, _ in reports["advance"]} == {FIT_UNIT}
    assert sum(u for u, *_ in reports["advance"]) == splits + 1 + search_steps("gemm", tiny)
    labels = [label for *_, label in reports["advance"]]
    assert labels[:2] == ["search: log_latency draw 0", "search: log_roofline_ratio draw 0"]
    assert "search: log_latency monotone draw 0" in labels and labels[-1] == "final model"


def test_an_open_bar_reaches_its_total(gemm_frame, tiny):
    """Through the real `profiler.progress` bar (a terminal console, drawn never), with a
    search over several inner folds."""
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    with progress.bar("train", unit=FIT_UNIT, console=console, delay_s=3600):
        train.train_predictor(data, get_hardware("h100-sxm"), replace(tiny, search_valid_rows=60))
        (entry,) = progress._OPEN.get()
        task = next(t for t in entry.display.progress.tasks if t.id == entry.task)
    at_least = len(evaluation_splits(data.ops, seed=0)) + 1 + 2 * search_steps("gemm", tiny)
    assert task.total is not None and task.completed == task.total >= at_least  # >= 2 folds


def test_each_split_scores_a_model_refitted_on_all_its_training_rows(gemm_frame, tiny,
                                                                      monkeypatch):
    """Early stopping holds 10% of a split's training rows out; the scored model is then
    refitted on all of them with the tree count found, as the baselines and the final model
    see every row."""
    calls = []
    real = train.fit_model

    def spy(x, latency, family, hardware, rows, valid, *args, **kwargs):
        model = real(x, latency, family, hardware, rows, valid, *args, **kwargs)
        calls.append((len(rows), valid is None, kwargs.get("rounds"), model.tree_counts))
        return model

    monkeypatch.setattr(train, "fit_model", spy)
    data = training_data(gemm_frame, hardware="h100-sxm", family="gemm")
    train.train_predictor(data, get_hardware("h100-sxm"), tiny)
    splits = evaluation_splits(data.ops, seed=0)
    protocol = calls[:-1]  # the last call is the final model
    assert len(protocol) == 2 * len(splits)
    pairs = zip(protocol[::2], protocol[1::2], strict=True)
    for split, (stopped, refit) in zip(splits, pairs, strict=True):
        assert stopped[1] is False and stopped[0] < len(split.train)
        assert refit[0] == len(split.train) and refit[1] is True
        assert refit[2] == stopped[3] == refit[3]
