# SPDX-License-Identifier: Apache-2.0
"""The training recipe: seeded search over (target, hyper-parameters), the evaluation protocol
on every split for XGBoost and the baselines, and the final model fitted on all rows.

1. Search: the random split's training rows are cut into inner train and validation (the
   largest 10% plus a random 10%, see `search`);
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

from dataclasses import dataclass, field

import numpy as np

from analytical.errors import LlmsimError
from analytical.hardware import HardwareSpec
from analytical.ops import OpSpec
from predictors.anchor import AnchorTable, has_anchor
from predictors.baselines import InterpolationBaseline, RandomForestBaseline, TableBaseline
from predictors.dataset import TrainingData
from predictors.evaluate import ErrorMetrics, error_metrics
from predictors.features import feature_matrix
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
from predictors.splits import PRIMARY_SPLIT, RANDOM, Split, evaluation_splits

XGB = "xgb"
MODEL_NAMES = (XGB, InterpolationBaseline.name, RandomForestBaseline.name, TableBaseline.name)
# An anchored booster needs this many training rows that lie inside a measured curve.
MIN_ANCHORED_ROWS = 20

# The search space: each draw picks one value per axis (seeded).
SEARCH_SPACE: dict[str, tuple] = {
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
    max_train_rows: int = 80_000  # training rows per protocol/final fit (subsampled, seeded)
    max_rounds: int = 3000
    early_stopping_rounds: int = 30
    rf_trees: int = 50
    baselines: bool = True
    target: Target | None = None  # None: picked by the search; else forced (params still searched)


@dataclass(frozen=True, slots=True, kw_only=True)
class SplitResult:
    split: Split
    metrics: dict[str, ErrorMetrics]  # model name -> metrics on the test rows
    groups: dict[str, dict[str, ErrorMetrics]]  # sub-group (e.g. prefill) -> model -> metrics
    measured_s: np.ndarray
    predicted_s: dict[str, np.ndarray]


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
         anchor_rows: np.ndarray | None = None) -> LatencyModel:
    """Fit on ``train`` rows, early-stopping on ``valid`` rows (or ``rounds`` trees per
    booster: one, or two for the gated and anchored targets, whose extrapolator may have its
    own params). ``anchor_rows`` (anchored only, default ``train``): the rows of the table."""
    if target == Target.ANCHORED:
        return _fit_anchored(x, latency, family, hardware, train, valid, params, config, rounds,
                             extrapolator_params or params,
                             train if anchor_rows is None else anchor_rows)
    targets = base_targets() if target == Target.GATED else (target,)
    extrapolator_params = extrapolator_params or params
    boosters = []
    for i, base in enumerate(targets):
        y = encode_target(latency, normaliser_seconds(base, family, x))
        boosters.append(fit_booster(
            x[train], y[train], params if i == 0 else extrapolator_params, seed=config.seed,
            nthread=config.nthread,
            rounds=None if rounds is None else rounds[i],
            valid=None if valid is None else (x[valid], y[valid]),
            early_stopping_rounds=config.early_stopping_rounds))
    if target != Target.GATED:
        return LatencyModel(booster=boosters[0], family=family, hardware=hardware,
                            target=target, params=params)
    return LatencyModel(booster=boosters[0], extrapolator=boosters[1], family=family,
                        hardware=hardware, target=target, params=params,
                        extrapolator_params=extrapolator_params,
                        gate_log2_size=float(size_column(family, x[train]).max()))


def _fit_anchored(x: np.ndarray, latency: np.ndarray, family: str, hardware: str,
                  train: np.ndarray, valid: np.ndarray | None, params: HyperParams,
                  config: TrainConfig, rounds: tuple[int, ...] | None,
                  extrapolator_params: HyperParams, anchor_rows: np.ndarray) -> LatencyModel:
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
                        extrapolator_params=extrapolator_params, anchor=table)


def _fit_anchored_booster(table: AnchorTable, in_table: set[int], x: np.ndarray,
                          latency: np.ndarray, train: np.ndarray, valid: np.ndarray | None,
                          params: HyperParams, config: TrainConfig, rounds: int | None, *,
                          where: str):
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


def search(ops, x: np.ndarray, latency: np.ndarray, train_rows: np.ndarray,
           family: str, hardware: str, config: TrainConfig
           ) -> tuple[Target, HyperParams, HyperParams | None, str, list[dict[str, object]]]:
    """Pick (target, params) by inner-validation MAPE; returns the target, its params, the
    extrapolator's params (gated and anchored targets only), the reason and the table.

    The inner validation rows are the largest 10% (by the split's size measure) of
    ``train_rows`` plus a seeded random 10% of the rest, so the choice rewards extrapolation
    to bigger shapes as well as interpolation (a random-only validation favours log_latency,
    which cannot extrapolate). The largest 10% lie beyond every inner-train size, so the gated
    model prices them with its extrapolator and the random 10% with its log-latency booster;
    each booster's params are the best draw on its own part (one criterion, two parts).
    """
    sizes = size_column(family, x[train_rows])
    order = train_rows[np.argsort(sizes, kind="stable")]
    n_large = max(1, len(order) // 10)
    large, rest = order[-n_large:], order[:-n_large]
    inner_train, random_valid = _inner_split(np.sort(rest), 1 / 9, config.seed + 1)
    inner_valid = np.sort(np.concatenate([large, random_valid]))
    if len(inner_train) > config.search_rows:
        rng = np.random.default_rng(config.seed + 2)
        inner_train = np.sort(rng.choice(inner_train, size=config.search_rows, replace=False))
    measured = latency[inner_valid]
    beyond = size_column(family, x[inner_valid]) > size_column(family, x[inner_train]).max()
    parts = {"all": np.ones(len(inner_valid), dtype=bool), "inside": ~beyond, "beyond": beyond}

    def mape(predicted: np.ndarray) -> dict[str, float]:
        """MAPE on all inner-validation rows and on each side of the gate (0 when empty)."""
        return {part: error_metrics(measured[mask], predicted[mask]).mape if mask.any() else 0.0
                for part, mask in parts.items()}

    configs = [_with_rounds(p, config.max_rounds)
               for p in search_configs(config.n_configs, config.seed)]
    table: list[dict[str, object]] = []
    predicted: dict[tuple[Target, int], np.ndarray] = {}
    scored: dict[tuple[Target, int], dict[str, float]] = {}
    for i, params in enumerate(configs):
        for target in base_targets():
            model = _fit(x, latency, family, hardware, inner_train, inner_valid, target, params,
                         config)
            predicted[target, i] = model.predict_features(x[inner_valid])
            score = scored[target, i] = mape(predicted[target, i])
            table.append({"config": i, "target": target.value, "valid_mape": score["all"],
                          "valid_mape_inside": score["inside"],
                          "valid_mape_beyond": score["beyond"], "trees": model.n_trees,
                          **_params_dict(params)})

    def best_config(target: Target, part: str) -> int:
        return min(range(len(configs)), key=lambda i: (scored[target, i][part], i))

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
        found = _search_anchored(x, latency, family, hardware, inner_train, inner_valid, configs,
                                 {i: predicted[Target.LOG_ROOFLINE_RATIO, i]
                                  for i in range(len(configs))}, config)
        if found is not None:
            (on, off), score, row = found
            scores[Target.ANCHORED], picks[Target.ANCHORED] = score, (on, off)
            table.append(row)
    targets = tuple(scores)  # the order of `Target`; anchored only where it could be fitted
    if config.target is not None and config.target not in scores:
        raise LlmsimError(f"{hardware}/{family}: target {config.target.value} cannot be fitted "
                          f"here; possible: {', '.join(t.value for t in targets)}")
    target = config.target or min(targets, key=lambda t: (scores[t], t.value))
    others = ", ".join(f"{t.value} {scores[t]:.3f}%" for t in targets if t != target)
    how = "forced by --target; " if config.target else ""
    reason = (f"{target.value}: {how}inner-validation MAPE {scores[target]:.3f}% vs {others} "
              f"(best of {config.n_configs} configs each)")
    if target in picks:
        first, second = picks[target]
        return target, configs[first], configs[second], reason, table
    return target, configs[best[target]], None, reason, table


def _search_anchored(x: np.ndarray, latency: np.ndarray, family: str, hardware: str,
                     inner_train: np.ndarray, inner_valid: np.ndarray,
                     configs: list[HyperParams], ratio_predicted: dict[int, np.ndarray],
                     config: TrainConfig
                     ) -> tuple[tuple[int, int], float, dict[str, object]] | None:
    """Score the anchored target like the gated one: the anchored booster's params are the
    best draw on the inner-validation rows inside a measured curve (of the inner-train table),
    the extrapolator's the best roofline-ratio draw on the rows outside (the search's own
    ratio fits: an anchored model's extrapolator is that booster). None when the data has too
    few rows on curves to fit it."""
    curves = AnchorTable.build(family, x[inner_train], latency[inner_train])
    in_table = set(inner_train.tolist())
    log_anchor = curves.log_anchor(x[inner_valid])
    on_curve = ~np.isnan(log_anchor)
    measured = latency[inner_valid]

    def part_mape(predicted: np.ndarray, mask: np.ndarray) -> float:
        return error_metrics(measured[mask], predicted[mask]).mape if mask.any() else 0.0

    anchored: dict[int, np.ndarray] = {}
    for i, params in enumerate(configs):
        try:
            booster = _fit_anchored_booster(curves, in_table, x, latency, inner_train,
                                            inner_valid, params, config, None,
                                            where=f"{hardware}/{family}")
        except LlmsimError:
            return None
        anchored[i] = np.full(len(inner_valid), np.nan)  # off-curve rows: the ratio booster
        anchored[i][on_curve] = predict_on_curve(booster, curves, x[inner_valid][on_curve],
                                                 log_anchor[on_curve])
    on = min(anchored, key=lambda i: (part_mape(anchored[i], on_curve), i))
    off = min(ratio_predicted, key=lambda i: (part_mape(ratio_predicted[i], ~on_curve), i))
    combined = np.where(on_curve, anchored[on], ratio_predicted[off])
    score = error_metrics(measured, combined).mape
    row = {"config": f"{on}+{off}", "target": Target.ANCHORED.value, "valid_mape": score,
           "valid_mape_on_curve": part_mape(combined, on_curve),
           "valid_mape_off_curve": part_mape(combined, ~on_curve)}
    return (on, off), score, row


def _params_dict(params: HyperParams) -> dict[str, object]:
    return {k: getattr(params, k) for k in SEARCH_SPACE}


def _with_rounds(params: HyperParams, rounds: int) -> HyperParams:
    return HyperParams(**{**_params_dict(params), "max_rounds": rounds})


def _group_of(op: OpSpec) -> str | None:
    if op.family == "attention":
        return str(op.phase)
    if op.family == "collective":
        return str(op.kind)
    if op.family == "gemm":
        return str(op.dtype)
    return None


def _evaluate_split(split: Split, data: TrainingData, x: np.ndarray, target: Target,
                    params: HyperParams, config: TrainConfig,
                    extrapolator_params: HyperParams | None = None
                    ) -> tuple[SplitResult, LatencyModel]:
    latency = data.latency_s
    train_rows = _cap(split.train, config.max_train_rows, config.seed + 4)
    inner_train, inner_valid = _inner_split(train_rows, 0.1, config.seed + 3)
    model = _fit(x, latency, data.family, data.hardware, inner_train, inner_valid, target, params,
                 config, extrapolator_params=extrapolator_params, anchor_rows=train_rows)
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
    return SplitResult(split=split, metrics=metrics, groups=groups, measured_s=measured,
                       predicted_s=predicted), model


def train_predictor(data: TrainingData, hw: HardwareSpec,
                    config: TrainConfig | None = None) -> TrainingResult:
    """Search, evaluate on every split, fit the final model. Deterministic for a seed."""
    config = config or TrainConfig()
    x = feature_matrix(data.family, data.ops, hw)
    splits = evaluation_splits(data.ops, seed=config.seed)
    random_rows = next(s for s in splits if s.name == RANDOM).train
    target, params, extrapolator_params, reason, table = search(
        data.ops, x, data.latency_s, random_rows, data.family, data.hardware, config)
    results: dict[str, SplitResult] = {}
    models: dict[str, LatencyModel] = {}
    for split in splits:
        results[split.name], models[split.name] = _evaluate_split(
            split, data, x, target, params, config, extrapolator_params)
    everything = _cap(np.arange(len(data)), config.max_train_rows, config.seed + 4)
    final = _fit(x, data.latency_s, data.family, data.hardware, everything, None, target, params,
                 config, rounds=models[RANDOM].tree_counts,
                 extrapolator_params=extrapolator_params)
    return TrainingResult(data=data, config=config, target=target, target_reason=reason,
                          params=params, extrapolator_params=extrapolator_params, search=table,
                          splits=results, model=final,
                          heldout_model=models[PRIMARY_SPLIT])
