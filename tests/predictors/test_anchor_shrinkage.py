# SPDX-License-Identifier: Apache-2.0
"""The anchored model's shrinkage toward its measured table: the weight of the trees'
correction is the lightest the inner folds cannot tell from the best (`lightest_within_noise`),
chosen on the search's inner folds only, and applied by a loaded predictor."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from analytical.hardware import get_hardware
from predictors.dataset import training_data
from predictors.features import feature_matrix
from predictors.param_search import search
from predictors.search_folds import lightest_within_noise
from predictors.splits import PRIMARY_SPLIT, evaluation_splits

HW = get_hardware("h100-sxm")


def _off(measured: np.ndarray, shapes: np.ndarray, error: np.ndarray) -> np.ndarray:
    """``measured`` off by ``error[shape]`` (relative): rows of one shape share their error."""
    return measured * (1.0 + error[shapes])


SIGNS = np.random.default_rng(0).choice([-1.0, 1.0], size=16)


def test_a_gain_within_the_noise_of_the_shapes_keeps_the_table():
    shapes = np.repeat(np.arange(16), 12)
    measured = np.ones(len(shapes))
    table = _off(measured, shapes, 0.06 * SIGNS)
    # the trees gain 3 points on half the shapes and lose 2.5 on the others: 0.25 on average
    trees = _off(measured, shapes, np.where(np.arange(16) < 8, 0.03, 0.085) * SIGNS)
    predicted = {0.0: table, 1.0: trees}
    weight, lowest = lightest_within_noise(measured, predicted, shapes, seed=0)
    assert lowest == 1.0  # the trees are best on these rows ...
    assert weight == 0.0  # ... but not beyond the noise of 16 shapes: the table is kept


def test_a_gain_on_every_shape_keeps_the_trees():
    shapes = np.repeat(np.arange(16), 12)
    measured = np.ones(len(shapes))
    predicted = {w: _off(measured, shapes, e * SIGNS)
                 for w, e in ((0.0, 0.06), (0.5, 0.03), (1.0, 0.01))}
    assert lightest_within_noise(measured, predicted, shapes, seed=0) == (1.0, 1.0)


@pytest.fixture(scope="module")
def collective(collective_frame):
    data = training_data(collective_frame, hardware="h100-sxm", family="collective")
    x = feature_matrix("collective", data.ops, HW)
    split = next(s for s in evaluation_splits(data.ops, seed=0) if s.name == PRIMARY_SPLIT)
    return data, x, split


@pytest.mark.slow
def test_the_weight_is_chosen_on_the_inner_folds_only(collective, fast_config):
    """The held-out rows of the acceptance split take no part: scrambling their latencies
    leaves the search (its weight and every score it logged) unchanged."""
    data, x, split = collective
    config = replace(fast_config, n_configs=1, max_rounds=100)  # one inner fold
    first = search(data.ops, x, data.latency_s, split.train, "collective", "h100-sxm", config)
    scrambled = data.latency_s.copy()
    scrambled[split.test] *= np.random.default_rng(1).uniform(0.2, 5.0, size=len(split.test))
    again = search(data.ops, x, scrambled, split.train, "collective", "h100-sxm", config)
    row = next(r for r in first.table if r["target"] == "anchored")
    assert "anchor_weight_lowest_mape" in row
    assert again.anchor_weight == first.anchor_weight
    assert again.table == first.table
    # the control: the same scrambling of training rows does move the scores
    moved = data.latency_s.copy()
    moved[split.train] *= np.random.default_rng(1).uniform(0.2, 5.0, size=len(split.train))
    other = search(data.ops, x, moved, split.train, "collective", "h100-sxm", config)
    assert other.table != first.table
