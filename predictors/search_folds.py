# SPDX-License-Identifier: Apache-2.0
"""The search's validation (`search_folds`: which rows each inner fold trains and validates
on) and its scoring of the anchored target (`search_anchored`); `predictors.param_search`
scores the other targets on the same folds."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analytical.errors import LlmsimError
from analytical.ops import OpSpec
from predictors.anchor import AnchorTable
from predictors.evaluate import error_metrics
from predictors.fit import FIT_UNIT, fit_anchored_booster
from predictors.model import HyperParams, Target, predict_on_curve
from predictors.splits import KeyFn, region_axes
from predictors.train_config import TrainConfig
from profiler.progress import advance

# The search's random validation is one ninth of the non-largest rows; at most this many
# disjoint ninths (folds) are scored when one holds fewer than `TrainConfig.search_valid_rows`.
MAX_SEARCH_FOLDS = 9
# How much of the anchored trees' correction to apply, chosen on the search's on-curve rows:
# on dense, noisy tables the trees can only add noise to the interpolated table (weight 0).
ANCHOR_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)


def masked_mape(measured: np.ndarray, predicted: np.ndarray, mask: np.ndarray) -> float:
    """MAPE (%) on the ``mask`` rows; 0 when there are none."""
    return error_metrics(measured[mask], predicted[mask]).mape if mask.any() else 0.0


def unseen_in_fold(ops: Sequence[OpSpec], folds: list[tuple[np.ndarray, np.ndarray]],
                    key: KeyFn) -> np.ndarray:
    """Per validation row (in fold order): is its ``key`` value absent from its fold's train?"""
    flags: list[bool] = []
    for train, valid in folds:
        seen = {key(ops[i]) for i in train.tolist()}
        flags.extend(key(ops[i]) not in seen for i in valid.tolist())
    return np.array(flags, dtype=bool)


def search_folds(ops: Sequence[OpSpec], large: np.ndarray, rest: np.ndarray,
                  config: TrainConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    """(inner train, inner validation) per fold. Validation: the ``large`` rows plus the
    ``rest`` rows that hold one seeded ninth of the values of a held-out axis
    (`splits.region_axes`: the shape, and for attention also kv_len; interior values where
    the split takes interior ones); train: the other ``rest`` rows (capped at
    ``config.search_rows``). As many disjoint ninths as it takes to score
    ``config.search_valid_rows`` rows besides the large ones, up to `MAX_SEARCH_FOLDS`: on a
    table of a few hundred rows one ninth is a few dozen, and the choice of target a coin
    toss."""
    family = ops[rest[0]].family
    rng = np.random.default_rng(config.seed + 1)
    axes: list[tuple[np.ndarray, list[np.ndarray]]] = []  # per axis: (candidate index of each rest row or -1, the ninths of candidates)
    for key, interior in region_axes(family):
        keys = [key(ops[i]) for i in rest.tolist()]
        distinct = sorted(set(keys))
        candidates = distinct[1:-1] if interior and len(distinct) > 2 else distinct
        position = {k: i for i, k in enumerate(candidates)}
        of_row = np.array([position.get(k, -1) for k in keys])
        order = rng.permutation(len(candidates))
        if len(candidates) >= 2 or not axes:  # an axis of one value cannot be held out
            axes.append((of_row, np.array_split(order, min(MAX_SEARCH_FOLDS,
                                                           len(candidates)))))
    folds, validated = [], 0
    for f in range(min(len(ninths) for _, ninths in axes)):
        held = np.zeros(len(rest), dtype=bool)
        for of_row, ninths in axes:
            held |= np.isin(of_row, ninths[f])
        train = rest[~held]
        if len(train) == 0:
            raise LlmsimError(f"{family}: every row is held out by the search's first fold; "
                              "it needs rows of another shape to train on")
        if len(train) > config.search_rows:
            train = np.sort(np.random.default_rng(config.seed + 2).choice(
                train, size=config.search_rows, replace=False))
        folds.append((train, np.sort(np.concatenate([large, rest[held]]))))
        validated += int(held.sum())
        if validated >= config.search_valid_rows:
            break
    return folds


def search_anchored(x: np.ndarray, latency: np.ndarray, family: str, hardware: str,
                     folds: list[tuple[np.ndarray, np.ndarray]], measured: np.ndarray,
                     configs: list[HyperParams], ratio_predicted: dict[int, np.ndarray],
                     config: TrainConfig
                     ) -> tuple[tuple[int, int], float, float, dict[str, object]] | None:
    """Score the anchored target like the gated one: the anchored booster's params are the
    best draw on the inner-validation rows inside a measured curve (of the fold's inner-train
    table), the extrapolator's the best roofline-ratio draw on the rows outside (the search's
    own ratio fits: an anchored model's extrapolator is that booster). None when the data has
    too few rows on curves to fit it. Rows (and ``measured``) in fold order, as in `search`.
    The weight of the trees' correction (`ANCHOR_WEIGHTS`) is the one with the lowest
    on-curve MAPE for the chosen booster; the lightest weight wins a tie. Each fit is
    reported to the progress bar; stopping early reports the fits it skips."""
    tables = [(AnchorTable.build(family, x[train], latency[train]), train, valid)
              for train, valid in folds]
    log_anchors = [curves.log_anchor(x[valid]) for curves, _, valid in tables]
    on_curve = np.concatenate([~np.isnan(a) for a in log_anchors])

    def part_mape(predicted: np.ndarray, mask: np.ndarray) -> float:
        return masked_mape(measured, predicted, mask)

    anchored: dict[int, np.ndarray] = {}
    for i, params in enumerate(configs):
        parts = []
        for (curves, train, valid), log_anchor in zip(tables, log_anchors, strict=True):
            try:
                booster = fit_anchored_booster(curves, set(train.tolist()), x, latency, train,
                                               valid, params, config, None,
                                               where=f"{hardware}/{family}")
            except LlmsimError:
                advance((len(configs) - i) * len(folds), unit=FIT_UNIT)
                return None
            part = np.full(len(valid), np.nan)  # off-curve rows: the ratio booster
            on = ~np.isnan(log_anchor)
            part[on] = predict_on_curve(booster, curves, x[valid][on], log_anchor[on])
            parts.append(part)
        anchored[i] = np.concatenate(parts)
        advance(len(folds), unit=FIT_UNIT, label=f"search: anchored draw {i}")
    on = min(anchored, key=lambda i: (part_mape(anchored[i], on_curve), i))
    off = min(ratio_predicted, key=lambda i: (part_mape(ratio_predicted[i], ~on_curve), i))
    log_table = np.concatenate(log_anchors)
    correction = np.log(anchored[on]) - log_table  # NaN off the curves

    def weighted(weight: float) -> np.ndarray:
        return np.where(on_curve, np.exp(log_table + weight * correction), ratio_predicted[off])

    by_weight = {w: part_mape(weighted(w), on_curve) for w in ANCHOR_WEIGHTS}
    weight = min(ANCHOR_WEIGHTS, key=lambda w: (by_weight[w], w))
    combined = weighted(weight)
    score = error_metrics(measured, combined).mape
    row = {"config": f"{on}+{off}", "target": Target.ANCHORED.value, "valid_mape": score,
           "valid_mape_on_curve": part_mape(combined, on_curve),
           "valid_mape_off_curve": part_mape(combined, ~on_curve), "anchor_weight": weight,
           **{f"valid_mape_on_curve_weight_{w:g}": m for w, m in by_weight.items()}}
    return (on, off), weight, score, row

