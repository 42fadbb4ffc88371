# SPDX-License-Identifier: Apache-2.0
"""Fitting one latency model: the boosters of a target (one, or two for the gated and anchored
targets) on chosen rows, with early stopping on validation rows or a fixed tree count, and the
seeded row caps every fit shares. The search (`predictors.param_search`) and the protocol
(`predictors.train`) both fit through `fit_model`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from analytical.errors import LlmsimError
from predictors.anchor import AnchorTable
from predictors.features import monotone_constraints
from predictors.model import (
    HyperParams,
    LatencyModel,
    Target,
    base_targets,
    encode_target,
    fit_booster,
    normaliser_seconds,
    size_column,
)
from predictors.train_config import TrainConfig

if TYPE_CHECKING:  # imported where used: xgboost is an optional extra
    import xgboost as xgb

# An anchored booster needs this many training rows that lie inside a measured curve.
MIN_ANCHORED_ROWS = 20
# What a training run reports to the progress bar (`profiler.progress`) of ``llmsim train``:
# models fitted (a search candidate is one per inner fold), so the ETA weighs the search's
# fits and the protocol's alike.
FIT_UNIT = "fits"


def cap_rows(rows: np.ndarray, limit: int, seed: int) -> np.ndarray:
    """At most ``limit`` of ``rows`` (seeded sample, sorted); test rows are never capped."""
    if len(rows) <= limit:
        return rows
    return np.sort(np.random.default_rng(seed).choice(rows, size=limit, replace=False))


def inner_split(indices: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(indices)
    n_valid = max(1, int(round(len(order) * fraction)))
    return np.sort(order[n_valid:]), np.sort(order[:n_valid])


def fit_model(x: np.ndarray, latency: np.ndarray, family: str, hardware: str, train: np.ndarray,
         valid: np.ndarray | None, target: Target, params: HyperParams, config: TrainConfig,
         rounds: tuple[int, ...] | None = None,
         extrapolator_params: HyperParams | None = None,
         anchor_rows: np.ndarray | None = None, anchor_weight: float = 1.0) -> LatencyModel:
    """Fit on ``train`` rows, early-stopping on ``valid`` rows (or ``rounds`` trees per
    booster: one, or two for the gated and anchored targets, whose extrapolator may have its
    own params). ``anchor_rows`` (anchored only, default ``train``): the rows of the table."""
    if target == Target.ANCHORED:
        return _fit_anchored(x, latency, family, hardware, train, valid, params, config, rounds,
                             extrapolator_params or params,
                             train if anchor_rows is None else anchor_rows, anchor_weight)
    targets = base_targets() if target == Target.GATED else (target,)
    extrapolator_params = extrapolator_params or params
    boosters = []
    for i, base in enumerate(targets):
        y = encode_target(latency, normaliser_seconds(base, family, x))
        own = params if i == 0 else extrapolator_params
        boosters.append(fit_booster(
            x[train], y[train], own, seed=config.seed, nthread=config.nthread,
            rounds=None if rounds is None else rounds[i],
            valid=None if valid is None else (x[valid], y[valid]),
            early_stopping_rounds=config.early_stopping_rounds,
            monotone_constraints=booster_constraints(family, base, own)))
    if target != Target.GATED:
        return LatencyModel(booster=boosters[0], family=family, hardware=hardware,
                            target=target, params=params)
    return LatencyModel(booster=boosters[0], extrapolator=boosters[1], family=family,
                        hardware=hardware, target=target, params=params,
                        extrapolator_params=extrapolator_params,
                        gate_log2_size=float(size_column(family, x[train]).max()))


def booster_constraints(family: str, base: Target, params: HyperParams) -> str | None:
    """The monotone constraints of a booster fitted on ``base``: only a log-latency booster
    may have them (latency grows with work; its ratio to the roofline need not)."""
    if not params.monotone:
        return None
    if base != Target.LOG_LATENCY:
        raise LlmsimError(f"{family}: monotone constraints are for log-latency boosters, "
                          f"not {base.value}")
    return monotone_constraints(family)


def _fit_anchored(x: np.ndarray, latency: np.ndarray, family: str, hardware: str,
                  train: np.ndarray, valid: np.ndarray | None, params: HyperParams,
                  config: TrainConfig, rounds: tuple[int, ...] | None,
                  extrapolator_params: HyperParams, anchor_rows: np.ndarray,
                  anchor_weight: float) -> LatencyModel:
    """The anchored booster (`fit_anchored_booster`) on the table of ``anchor_rows``; the
    roofline-ratio extrapolator on every training row."""
    table = AnchorTable.build(family, x[anchor_rows], latency[anchor_rows])
    booster = fit_anchored_booster(table, set(anchor_rows.tolist()), x, latency, train, valid,
                                    params, config, None if rounds is None else rounds[0],
                                    where=f"{hardware}/{family}")
    ratio = encode_target(latency, normaliser_seconds(Target.LOG_ROOFLINE_RATIO, family, x))
    extrapolator = fit_booster(
        x[train], ratio[train], extrapolator_params, seed=config.seed, nthread=config.nthread,
        rounds=None if rounds is None else rounds[1],
        valid=None if valid is None else (x[valid], ratio[valid]),
        early_stopping_rounds=config.early_stopping_rounds)
    return LatencyModel(booster=booster, extrapolator=extrapolator, family=family,
                        hardware=hardware, target=Target.ANCHORED, params=params,
                        extrapolator_params=extrapolator_params, anchor=table,
                        anchor_weight=anchor_weight)


def fit_anchored_booster(table: AnchorTable, in_table: set[int], x: np.ndarray,
                          latency: np.ndarray, train: np.ndarray, valid: np.ndarray | None,
                          params: HyperParams, config: TrainConfig, rounds: int | None, *,
                          where: str) -> xgb.Booster:
    """Trees on ln(latency / anchor) for the training rows inside a measured curve. Rows of
    the table (``in_table``) are anchored leave-one-out, so the trees learn the error of
    interpolating a size the table lacks; early stopping on the ``valid`` rows on a curve."""

    def anchored(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(features + anchor, target) of the rows that lie on a curve."""
        loo = np.array([r in in_table for r in rows.tolist()], dtype=bool)
        log_anchor = np.full(len(rows), np.nan)
        if loo.any():
            log_anchor[loo] = table.log_anchor(x[rows[loo]], leave_one_out=True)
        if (~loo).any():
            log_anchor[~loo] = table.log_anchor(x[rows[~loo]])
        on = ~np.isnan(log_anchor)
        return (table.anchor_feature(x[rows[on]], log_anchor[on]),
                np.log(latency[rows[on]]) - log_anchor[on])

    features, target = anchored(train)
    if len(target) < MIN_ANCHORED_ROWS:
        raise LlmsimError(f"{where}: {len(target)} training rows lie inside a measured curve; "
                          f"the anchored target needs {MIN_ANCHORED_ROWS}")
    anchored_valid = None
    if valid is not None:
        anchored_valid = anchored(valid)
        if len(anchored_valid[1]) == 0:
            raise LlmsimError(f"{where}: no validation row lies inside a measured curve; "
                              "cannot early-stop the anchored booster")
    return fit_booster(features, target, params, seed=config.seed, nthread=config.nthread,
                       rounds=rounds, valid=anchored_valid,
                       early_stopping_rounds=config.early_stopping_rounds)
