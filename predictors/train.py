# SPDX-License-Identifier: Apache-2.0
"""The training recipe: seeded search over (target, hyper-parameters), the evaluation protocol
on every split for XGBoost and the baselines, and the final model fitted on all rows.

1. Search: the primary split's training rows are cut into inner train and validation (the
   largest 10% plus a ninth of the other shapes, see `search`; on small sets, several inner
   folds);
   each of ``n_configs`` seeded hyper-parameter draws is fitted for both plain targets (and,
   for families measured as curves, the anchored one) with early stopping, scored by MAPE in
   seconds on the inner validation rows. The lowest best MAPE picks the target; the reason is
   recorded.
2. Protocol (`predictors.splits`): for each split, XGBoost (chosen target and parameters, early
   stopping on 10% of the split's training rows), the interpolation baseline, the table
   baseline (curve families) and the random forest are fitted on the training rows and scored
   on the test rows.
3. The final model is fitted on all rows with the tree count found on the random split.
Large sets are subsampled (seeded) to `TrainConfig.max_train_rows` training rows per fit, the
same for XGBoost and the baselines; test rows are never subsampled.
Tracking lives in `predictors.tracking`; nothing here touches MLflow or the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from analytical.errors import LlmsimError
from analytical.hardware import HardwareSpec
from analytical.ops import AttentionSpec, CollectiveSpec, GemmSpec, OpSpec
from predictors.anchor import AnchorTable, has_anchor
from predictors.baselines import InterpolationBaseline, RandomForestBaseline, TableBaseline
from predictors.dataset import TrainingData
from predictors.domain import training_domain
from predictors.evaluate import ErrorMetrics, MapeGap, error_metrics, mape_gap
from predictors.features import MONOTONE_FEATURES, feature_matrix, monotone_constraints
from predictors.model import (
    HyperParams,
    LatencyModel,
    Target,
    base_targets,
    encode_target,
    fit_booster,
    normaliser_seconds,
    predict_on_curve,
    size_column,
)
from predictors.splits import (
    PRIMARY_SPLIT,
    RANDOM,
    KeyFn,
    ShapeKey,
    Split,
    evaluation_splits,
    region_axes,
    shape_key,
)

if TYPE_CHECKING:  # imported where used: xgboost is an optional extra
    import xgboost as xgb

XGB = "xgb"
MODEL_NAMES = (XGB, InterpolationBaseline.name, RandomForestBaseline.name, TableBaseline.name)
# An anchored booster needs this many training rows that lie inside a measured curve.
MIN_ANCHORED_ROWS = 20
# How much of the anchored trees' correction to apply, chosen on the search's on-curve rows:
# on dense, noisy tables the trees can only add noise to the interpolated table (weight 0).
ANCHOR_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
# The search's random validation is one ninth of the non-largest rows; at most this many
# disjoint ninths (folds) are scored when one holds fewer than `TrainConfig.search_valid_rows`.
MAX_SEARCH_FOLDS = 9

# The search space: each draw picks one value per axis (seeded). Keys are `HyperParams` field
# names, so each tuple holds that field's type (int, float or str): ``Any`` for the mix.
SEARCH_SPACE: dict[str, tuple[Any, ...]] = {
    "max_depth": (6, 8, 10, 12, 14),
    "learning_rate": (0.03, 0.05, 0.1),
    "min_child_weight": (1.0, 3.0, 10.0),
    "subsample": (0.7, 0.85, 1.0),
    "colsample_bytree": (0.6, 0.8, 1.0),
    "reg_lambda": (0.1, 1.0, 10.0),
    "objective": ("squarederror", "absoluteerror"),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    seed: int = 0
    nthread: int = 2  # fixed: XGBoost hist is deterministic for a given thread count
    n_configs: int = 10
    search_rows: int = 20_000  # inner-train rows used by the search (subsampled, seeded)
    # random validation rows the search wants: a small set is scored over several inner folds
    # so that a choice between targets rests on this many rows, not on one ninth of a table
    search_valid_rows: int = 400
    max_train_rows: int = 80_000  # training rows per protocol/final fit (subsampled, seeded)
    max_rounds: int = 3000
    early_stopping_rounds: int = 30
    rf_trees: int = 50
    baselines: bool = True
    target: Target | None = None  # None: picked by the search; else forced (params still searched)


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchChoice:
    """What the search picked, and why."""

    target: Target
    params: HyperParams
    extrapolator_params: HyperParams | None  # gated and anchored targets only
    anchor_weight: float  # anchored target only (else 1.0): see `ANCHOR_WEIGHTS`
    reason: str
    table: list[dict[str, object]]  # one row per (config, target) scored


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitResult:
    split: Split
    metrics: dict[str, ErrorMetrics]  # model name -> metrics on the test rows
    groups: dict[str, dict[str, ErrorMetrics]]  # sub-group (e.g. prefill) -> model -> metrics
    measured_s: np.ndarray
    predicted_s: dict[str, np.ndarray]
    # baseline name -> XGBoost's MAPE minus the baseline's, bootstrapped over held-out shapes
    gaps: dict[str, MapeGap] = field(default_factory=dict)


@dataclass(kw_only=True)
class TrainingResult:
    data: TrainingData
    config: TrainConfig
    target: Target
    target_reason: str
    params: HyperParams
    extrapolator_params: HyperParams | None  # the gated target's ratio booster, else None
    search: list[dict[str, object]]
    splits: dict[str, SplitResult]
    model: LatencyModel  # fitted on all rows: what is served
    heldout_model: LatencyModel  # fitted without the primary split's test rows: for promotion
    extra: dict[str, object] = field(default_factory=dict)


def search_configs(n: int, seed: int) -> list[HyperParams]:
    """``n`` distinct seeded draws from `SEARCH_SPACE` (the first is the library default)."""
    rng = np.random.default_rng(seed)
    configs = [HyperParams()]
    seen = {configs[0]}
    while len(configs) < n:
        draw = HyperParams(**{k: v[int(rng.integers(len(v)))] for k, v in SEARCH_SPACE.items()})
        if draw not in seen:
            seen.add(draw)
            configs.append(draw)
    return configs[:n]


def _cap(rows: np.ndarray, limit: int, seed: int) -> np.ndarray:
    """At most ``limit`` of ``rows`` (seeded sample, sorted); test rows are never capped."""
    if len(rows) <= limit:
        return rows
    return np.sort(np.random.default_rng(seed).choice(rows, size=limit, replace=False))


def _inner_split(indices: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(indices)
    n_valid = max(1, int(round(len(order) * fraction)))
    return np.sort(order[n_valid:]), np.sort(order[:n_valid])


def _fit(x: np.ndarray, latency: np.ndarray, family: str, hardware: str, train: np.ndarray,
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
            monotone_constraints=_constraints(family, base, own)))
    if target != Target.GATED:
        return LatencyModel(booster=boosters[0], family=family, hardware=hardware,
                            target=target, params=params)
    return LatencyModel(booster=boosters[0], extrapolator=boosters[1], family=family,
                        hardware=hardware, target=target, params=params,
                        extrapolator_params=extrapolator_params,
                        gate_log2_size=float(size_column(family, x[train]).max()))


def _constraints(family: str, base: Target, params: HyperParams) -> str | None:
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
    """The anchored booster (`_fit_anchored_booster`) on the table of ``anchor_rows``; the
    roofline-ratio extrapolator on every training row."""
    table = AnchorTable.build(family, x[anchor_rows], latency[anchor_rows])
    booster = _fit_anchored_booster(table, set(anchor_rows.tolist()), x, latency, train, valid,
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


def _fit_anchored_booster(table: AnchorTable, in_table: set[int], x: np.ndarray,
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


def search(ops: Sequence[OpSpec], x: np.ndarray, latency: np.ndarray, train_rows: np.ndarray,
           family: str, hardware: str, config: TrainConfig
           ) -> SearchChoice:
    """Pick (target, params) by inner-validation MAPE.

    The inner validation rows are the largest 10% (by the split's size measure) of
    ``train_rows`` plus the rows of a seeded ninth of the other shapes (`_search_folds`: the
    shapes `heldout_shape` holds out, e.g. message sizes, and for attention a ninth of the
    kv_len values too), so the choice rewards extrapolation to bigger shapes as well as
    interpolation to unseen ones (a random-row validation favours
    log_latency, which cannot extrapolate, and for collectives the ratio trees, which read a
    held-out size off the other configurations measured at that very size). The largest 10%
    lie beyond every inner-train size, so the gated model prices them with its extrapolator
    and the other shapes with its log-latency booster; each booster's params are the best draw
    on its own part (one criterion, two parts). Log-latency draws are scored free and
    monotone in the family's work features (search rows ``config`` n..2n-1 are draws 0..n-1
    with ``monotone``): where latency is smooth in size the constraint keeps trees from
    dipping between measured shapes (A100 attention); where kernel choice makes it jump, free
    trees win (H100 attention). The validation decides, per model.
    """
    sizes = size_column(family, x[train_rows])
    order = train_rows[np.argsort(sizes, kind="stable")]
    n_large = max(1, len(order) // 10)
    folds = _search_folds(ops, order[-n_large:], np.sort(order[:-n_large]), config)
    # every fold's validation rows, end to end: a row's prediction comes from its own fold
    measured = np.concatenate([latency[valid] for _, valid in folds])
    beyond = np.concatenate([size_column(family, x[valid]) > size_column(family, x[train]).max()
                             for train, valid in folds])
    parts = {"all": np.ones(len(measured), dtype=bool), "inside": ~beyond, "beyond": beyond}
    # with two held-out axes (attention: head configuration and kv_len), "inside" is the mean
    # of each axis's MAPE, so the axis with more rows does not choose the params alone
    axes = region_axes(family)
    unseen = [_unseen_in_fold(ops, folds, key) & ~beyond for key, _ in axes] \
        if len(axes) > 1 else []

    def mape(predicted: np.ndarray) -> dict[str, float]:
        """MAPE on all inner-validation rows and on each side of the gate (0 when empty)."""
        out = {part: _masked_mape(measured, predicted, mask) for part, mask in parts.items()}
        if unseen:
            out["inside"] = float(np.mean([_masked_mape(measured, predicted, m)
                                           for m in unseen if m.any()]))
        return out

    configs = [_with_rounds(p, config.max_rounds)
               for p in search_configs(config.n_configs, config.seed)]
    # per base target, the params it is scored with: log-latency trees every draw twice, free
    # and non-decreasing in the family's work features (`features.MONOTONE_FEATURES`)
    candidates = {Target.LOG_LATENCY: configs, Target.LOG_ROOFLINE_RATIO: configs}
    if MONOTONE_FEATURES.get(family):
        candidates[Target.LOG_LATENCY] = configs + [replace(p, monotone=True) for p in configs]
    table: list[dict[str, object]] = []
    predicted: dict[tuple[Target, int], np.ndarray] = {}
    scored: dict[tuple[Target, int], dict[str, float]] = {}
    for i in range(len(candidates[Target.LOG_LATENCY])):
        for target in base_targets():
            if i >= len(candidates[target]):
                continue
            params = candidates[target][i]
            models = [_fit(x, latency, family, hardware, train, valid, target, params, config)
                      for train, valid in folds]
            predicted[target, i] = np.concatenate([
                model.predict_features(x[valid])
                for model, (_, valid) in zip(models, folds, strict=True)])
            score = scored[target, i] = mape(predicted[target, i])
            table.append({"config": i, "target": target.value, "valid_mape": score["all"],
                          "valid_mape_inside": score["inside"],
                          "valid_mape_beyond": score["beyond"],
                          "trees": round(float(np.mean([m.n_trees for m in models]))),
                          **_params_dict(params)})

    def best_config(target: Target, part: str, monotone: bool | None = None) -> int:
        """The best-scoring candidate on ``part`` (of those with ``monotone`` if given)."""
        pool = [i for i, p in enumerate(candidates[target])
                if monotone is None or p.monotone == monotone]
        return min(pool, key=lambda i: (scored[target, i][part], i))

    best = {t: best_config(t, "all") for t in base_targets()}
    inside = best_config(Target.LOG_LATENCY, "inside")
    outside = best_config(Target.LOG_ROOFLINE_RATIO, "beyond")
    gated = mape(np.where(beyond, predicted[Target.LOG_ROOFLINE_RATIO, outside],
                          predicted[Target.LOG_LATENCY, inside]))
    table.append({"config": f"{inside}+{outside}", "target": Target.GATED.value,
                  "valid_mape": gated["all"], "valid_mape_inside": gated["inside"],
                  "valid_mape_beyond": gated["beyond"]})
    scores = {**{t: scored[t, best[t]]["all"] for t in base_targets()},
              Target.GATED: gated["all"]}
    picks = {Target.GATED: (inside, outside)}
    if has_anchor(family):
        found = _search_anchored(x, latency, family, hardware, folds, measured, configs,
                                 {i: predicted[Target.LOG_ROOFLINE_RATIO, i]
                                  for i in range(len(configs))}, config)
        if found is not None:
            (on, off), anchor_weight, anchored_score, row = found
            scores[Target.ANCHORED], picks[Target.ANCHORED] = anchored_score, (on, off)
            table.append(row)
    targets = tuple(scores)  # the order of `Target`; anchored only where it could be fitted
    if config.target is not None and config.target not in scores:
        raise LlmsimError(f"{hardware}/{family}: target {config.target.value} cannot be fitted "
                          f"here; possible: {', '.join(t.value for t in targets)}")
    target = config.target or min(targets, key=lambda t: (scores[t], t.value))
    others = ", ".join(f"{t.value} {scores[t]:.3f}%" for t in targets if t != target)
    how = "forced by --target; " if config.target else ""
    over = f", {len(folds)} inner folds" if len(folds) > 1 else ""
    reason = (f"{target.value}: {how}inner-validation MAPE {scores[target]:.3f}% vs {others} "
              f"(best of {config.n_configs} configs each{over})")
    weight = 1.0
    if target == Target.ANCHORED:
        weight = anchor_weight
        reason += f"; trees' correction applied with weight {weight:g}"
    if target in (Target.LOG_LATENCY, Target.GATED) \
            and len(candidates[Target.LOG_LATENCY]) > len(configs):
        part = "inside" if target == Target.GATED else "all"
        free, bound = (scored[Target.LOG_LATENCY, best_config(Target.LOG_LATENCY, part, m)][part]
                       for m in (False, True))
        chosen = picks[target][0] if target in picks else best[target]
        what = "monotone" if candidates[Target.LOG_LATENCY][chosen].monotone else "free"
        reason += (f"; log-latency trees {what} in work: {part} MAPE {bound:.3f}% monotone "
                   f"vs {free:.3f}% free")
    if target in picks:  # two boosters: gated's first is a log-latency candidate, anchored's
        first, second = picks[target]  # a ratio draw; both extrapolate with a ratio draw
        pool = candidates[Target.LOG_LATENCY] if target == Target.GATED else configs
        return SearchChoice(target=target, params=pool[first],
                            extrapolator_params=configs[second], anchor_weight=weight,
                            reason=reason, table=table)
    return SearchChoice(target=target, params=candidates[target][best[target]],
                        extrapolator_params=None,
                        anchor_weight=weight, reason=reason, table=table)


def _masked_mape(measured: np.ndarray, predicted: np.ndarray, mask: np.ndarray) -> float:
    """MAPE (%) on the ``mask`` rows; 0 when there are none."""
    return error_metrics(measured[mask], predicted[mask]).mape if mask.any() else 0.0


def _unseen_in_fold(ops: Sequence[OpSpec], folds: list[tuple[np.ndarray, np.ndarray]],
                    key: KeyFn) -> np.ndarray:
    """Per validation row (in fold order): is its ``key`` value absent from its fold's train?"""
    flags: list[bool] = []
    for train, valid in folds:
        seen = {key(ops[i]) for i in train.tolist()}
        flags.extend(key(ops[i]) not in seen for i in valid.tolist())
    return np.array(flags, dtype=bool)


def _search_folds(ops: Sequence[OpSpec], large: np.ndarray, rest: np.ndarray,
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


def _search_anchored(x: np.ndarray, latency: np.ndarray, family: str, hardware: str,
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
    on-curve MAPE for the chosen booster; the lightest weight wins a tie."""
    tables = [(AnchorTable.build(family, x[train], latency[train]), train, valid)
              for train, valid in folds]
    log_anchors = [curves.log_anchor(x[valid]) for curves, _, valid in tables]
    on_curve = np.concatenate([~np.isnan(a) for a in log_anchors])

    def part_mape(predicted: np.ndarray, mask: np.ndarray) -> float:
        return _masked_mape(measured, predicted, mask)

    anchored: dict[int, np.ndarray] = {}
    for i, params in enumerate(configs):
        parts = []
        for (curves, train, valid), log_anchor in zip(tables, log_anchors, strict=True):
            try:
                booster = _fit_anchored_booster(curves, set(train.tolist()), x, latency, train,
                                                valid, params, config, None,
                                                where=f"{hardware}/{family}")
            except LlmsimError:
                return None
            part = np.full(len(valid), np.nan)  # off-curve rows: the ratio booster
            on = ~np.isnan(log_anchor)
            part[on] = predict_on_curve(booster, curves, x[valid][on], log_anchor[on])
            parts.append(part)
        anchored[i] = np.concatenate(parts)
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


def _params_dict(params: HyperParams) -> dict[str, object]:
    return {k: getattr(params, k) for k in (*SEARCH_SPACE, "monotone")}


def _with_rounds(params: HyperParams, rounds: int) -> HyperParams:
    return replace(params, max_rounds=rounds)


def _group_of(op: OpSpec) -> str | None:
    if isinstance(op, AttentionSpec):
        return str(op.phase)
    if isinstance(op, CollectiveSpec):
        return str(op.kind)
    if isinstance(op, GemmSpec):
        return str(op.dtype)
    return None


def _evaluate_split(split: Split, data: TrainingData, x: np.ndarray, choice: SearchChoice,
                    config: TrainConfig) -> tuple[SplitResult, LatencyModel]:
    latency = data.latency_s
    train_rows = _cap(split.train, config.max_train_rows, config.seed + 4)
    inner_train, inner_valid = _inner_split(train_rows, 0.1, config.seed + 3)
    model = _fit(x, latency, data.family, data.hardware, inner_train, inner_valid, choice.target,
                 choice.params, config, extrapolator_params=choice.extrapolator_params,
                 anchor_rows=train_rows, anchor_weight=choice.anchor_weight)
    predicted = {XGB: model.predict_features(x[split.test])}
    if config.baselines:
        train_ops = [data.ops[i] for i in train_rows]
        test_ops = [data.ops[i] for i in split.test]
        interp = InterpolationBaseline().fit(train_ops, latency[train_rows])
        predicted[InterpolationBaseline.name] = interp.predict(test_ops)
        if has_anchor(data.family):
            predicted[TableBaseline.name] = TableBaseline(data.family).fit(
                x[train_rows], latency[train_rows]).predict(
                    x[split.test], predicted[InterpolationBaseline.name])
        forest = RandomForestBaseline(seed=config.seed, nthread=config.nthread,
                                      n_estimators=config.rf_trees)
        predicted[RandomForestBaseline.name] = forest.fit(x[train_rows],
                                                          latency[train_rows]).predict(
                                                              x[split.test])
    measured = latency[split.test]
    metrics = {name: error_metrics(measured, p) for name, p in predicted.items()}
    labels = np.array([_group_of(data.ops[i]) or "" for i in split.test])
    groups: dict[str, dict[str, ErrorMetrics]] = {}
    distinct = sorted(set(labels.tolist()) - {""})
    if len(distinct) > 1:
        for label in distinct:
            mask = labels == label
            groups[label] = {name: error_metrics(measured[mask], p[mask])
                             for name, p in predicted.items()}
    key = shape_key(data.family)
    index: dict[ShapeKey, int] = {}
    shapes = np.array([index.setdefault(key(data.ops[i]), len(index)) for i in split.test])
    gaps = {name: mape_gap(measured, predicted[XGB], p, shapes, seed=config.seed)
            for name, p in predicted.items() if name != XGB}
    model.domain = training_domain(data.ops[i] for i in train_rows)
    return SplitResult(split=split, metrics=metrics, groups=groups, measured_s=measured,
                       predicted_s=predicted, gaps=gaps), model


def train_predictor(data: TrainingData, hw: HardwareSpec,
                    config: TrainConfig | None = None) -> TrainingResult:
    """Search, evaluate on every split, fit the final model. Deterministic for a seed."""
    config = config or TrainConfig()
    x = feature_matrix(data.family, data.ops, hw)
    splits = evaluation_splits(data.ops, seed=config.seed)
    # the search sees only the primary split's training rows: no row the acceptance figure
    # is measured on takes part in choosing the target or the hyper-parameters
    primary_rows = next(s for s in splits if s.name == PRIMARY_SPLIT).train
    choice = search(data.ops, x, data.latency_s, primary_rows, data.family, data.hardware,
                    config)
    results: dict[str, SplitResult] = {}
    models: dict[str, LatencyModel] = {}
    for split in splits:
        results[split.name], models[split.name] = _evaluate_split(split, data, x, choice, config)
    everything = _cap(np.arange(len(data)), config.max_train_rows, config.seed + 4)
    final = _fit(x, data.latency_s, data.family, data.hardware, everything, None, choice.target,
                 choice.params, config, rounds=models[RANDOM].tree_counts,
                 extrapolator_params=choice.extrapolator_params,
                 anchor_weight=choice.anchor_weight)
    final.domain = training_domain(data.ops[i] for i in everything)
    return TrainingResult(data=data, config=config, target=choice.target,
                          target_reason=choice.reason, params=choice.params,
                          extrapolator_params=choice.extrapolator_params, search=choice.table,
                          splits=results, model=final,
                          heldout_model=models[PRIMARY_SPLIT])
