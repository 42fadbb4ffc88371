# SPDX-License-Identifier: Apache-2.0
"""The hyper-parameter and target search: `search` picks (target, params) by inner-validation
MAPE on the folds of `predictors.search_folds`, over ``n_configs`` seeded draws from
`SEARCH_SPACE`. Fitting is `predictors.fit`; the protocol that uses the choice is
`predictors.train`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from analytical.errors import LlmsimError
from analytical.ops import OpSpec
from predictors.anchor import has_anchor
from predictors.features import MONOTONE_FEATURES
from predictors.fit import FIT_UNIT, fit_model
from predictors.model import HyperParams, Target, base_targets, size_column
from predictors.search_folds import masked_mape, search_anchored, search_folds, unseen_in_fold
from predictors.splits import region_axes
from predictors.train_config import TrainConfig
from profiler.progress import advance, expect

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
class SearchChoice:
    """What the search picked, and why."""

    target: Target
    params: HyperParams
    extrapolator_params: HyperParams | None  # gated and anchored targets only
    anchor_weight: float  # anchored target only (else 1.0): see `search_folds.ANCHOR_WEIGHTS`
    reason: str
    table: list[dict[str, object]]  # one row per (config, target) scored


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


def search_steps(family: str, config: TrainConfig) -> int:
    """How many candidates `search` scores, each fitted on every inner fold."""
    n = config.n_configs
    log_latency = 2 * n if MONOTONE_FEATURES.get(family) else n
    return log_latency + n + (n if has_anchor(family) else 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Validation:
    """The search's inner folds; validation rows of every fold end to end, so a row's
    prediction comes from its own fold."""

    folds: list[tuple[np.ndarray, np.ndarray]]
    measured: np.ndarray
    parts: dict[str, np.ndarray]  # "all", "inside" / "beyond" the inner-train sizes
    unseen: list[np.ndarray]  # two held-out axes: per axis, the inside rows unseen on it

    def mape(self, predicted: np.ndarray) -> dict[str, float]:
        """MAPE on all inner-validation rows and on each side of the gate (0 when empty).
        With two held-out axes (attention: head configuration and kv_len), "inside" is the
        mean of each axis's MAPE, so the axis with more rows does not choose the params
        alone."""
        out = {part: masked_mape(self.measured, predicted, mask)
               for part, mask in self.parts.items()}
        if self.unseen:
            out["inside"] = float(np.mean([masked_mape(self.measured, predicted, m)
                                           for m in self.unseen if m.any()]))
        return out


def _validation(ops: Sequence[OpSpec], x: np.ndarray, latency: np.ndarray,
                train_rows: np.ndarray, family: str, config: TrainConfig) -> _Validation:
    """The largest 10% of ``train_rows`` plus the held-out ninths of `search_folds`."""
    sizes = size_column(family, x[train_rows])
    order = train_rows[np.argsort(sizes, kind="stable")]
    n_large = max(1, len(order) // 10)
    folds = search_folds(ops, order[-n_large:], np.sort(order[:-n_large]), config)
    measured = np.concatenate([latency[valid] for _, valid in folds])
    beyond = np.concatenate([size_column(family, x[valid]) > size_column(family, x[train]).max()
                             for train, valid in folds])
    parts = {"all": np.ones(len(measured), dtype=bool), "inside": ~beyond, "beyond": beyond}
    axes = region_axes(family)
    unseen = [unseen_in_fold(ops, folds, key) & ~beyond for key, _ in axes] \
        if len(axes) > 1 else []
    return _Validation(folds=folds, measured=measured, parts=parts, unseen=unseen)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Scores:
    """Every (base target, candidate) fitted on the folds: predictions and MAPE per part."""

    configs: list[HyperParams]  # the seeded draws
    candidates: dict[Target, list[HyperParams]]  # per base target, the params it is scored with
    predicted: dict[tuple[Target, int], np.ndarray]
    scored: dict[tuple[Target, int], dict[str, float]]
    table: list[dict[str, object]]

    def best(self, target: Target, part: str, monotone: bool | None = None) -> int:
        """The best-scoring candidate on ``part`` (of those with ``monotone`` if given)."""
        pool = [i for i, p in enumerate(self.candidates[target])
                if monotone is None or p.monotone == monotone]
        return min(pool, key=lambda i: (self.scored[target, i][part], i))


def _score_candidates(x: np.ndarray, latency: np.ndarray, family: str, hardware: str,
                      valid: _Validation, config: TrainConfig) -> _Scores:
    """Fit and score every draw for both base targets. Log-latency trees are scored with
    every draw twice, free and non-decreasing in the family's work features
    (`features.MONOTONE_FEATURES`): candidates n..2n-1 are draws 0..n-1 with ``monotone``."""
    configs = [replace(p, max_rounds=config.max_rounds)
               for p in search_configs(config.n_configs, config.seed)]
    candidates = {Target.LOG_LATENCY: configs, Target.LOG_ROOFLINE_RATIO: configs}
    if MONOTONE_FEATURES.get(family):
        candidates[Target.LOG_LATENCY] = configs + [replace(p, monotone=True) for p in configs]
    scores = _Scores(configs=configs, candidates=candidates, predicted={}, scored={}, table=[])
    for i in range(len(candidates[Target.LOG_LATENCY])):
        for target in base_targets():
            if i >= len(candidates[target]):
                continue
            params = candidates[target][i]
            models = [fit_model(x, latency, family, hardware, train, rows, target, params, config)
                      for train, rows in valid.folds]
            predicted = scores.predicted[target, i] = np.concatenate([
                model.predict_features(x[rows])
                for model, (_, rows) in zip(models, valid.folds, strict=True)])
            score = scores.scored[target, i] = valid.mape(predicted)
            scores.table.append({
                "config": i, "target": target.value, "valid_mape": score["all"],
                "valid_mape_inside": score["inside"], "valid_mape_beyond": score["beyond"],
                "trees": round(float(np.mean([m.n_trees for m in models]))),
                **{k: getattr(params, k) for k in (*SEARCH_SPACE, "monotone")}})
            free = "monotone " if params.monotone else ""
            advance(len(valid.folds), unit=FIT_UNIT,
                    label=f"search: {target.value} {free}draw {i % len(configs)}")
    return scores


def search(ops: Sequence[OpSpec], x: np.ndarray, latency: np.ndarray, train_rows: np.ndarray,
           family: str, hardware: str, config: TrainConfig) -> SearchChoice:
    """Pick (target, params) by inner-validation MAPE.

    The inner validation rows are the largest 10% (by the split's size measure) of
    ``train_rows`` plus the rows of a seeded ninth of the other shapes (`search_folds`: the
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
    trees win (H100 attention). The validation decides, per model. Each fit is reported to
    the progress bar (`fit.FIT_UNIT`).
    """
    valid = _validation(ops, x, latency, train_rows, family, config)
    expect(search_steps(family, config) * len(valid.folds), unit=FIT_UNIT)
    s = _score_candidates(x, latency, family, hardware, valid, config)
    inside = s.best(Target.LOG_LATENCY, "inside")
    outside = s.best(Target.LOG_ROOFLINE_RATIO, "beyond")
    gated = valid.mape(np.where(valid.parts["beyond"],
                                s.predicted[Target.LOG_ROOFLINE_RATIO, outside],
                                s.predicted[Target.LOG_LATENCY, inside]))
    s.table.append({"config": f"{inside}+{outside}", "target": Target.GATED.value,
                    "valid_mape": gated["all"], "valid_mape_inside": gated["inside"],
                    "valid_mape_beyond": gated["beyond"]})
    scores = {**{t: s.scored[t, s.best(t, "all")]["all"] for t in base_targets()},
              Target.GATED: gated["all"]}
    picks = {Target.GATED: (inside, outside)}
    anchor_weight = 1.0
    if has_anchor(family):
        found = search_anchored(x, latency, family, hardware, valid.folds, valid.measured,
                                s.configs, {i: s.predicted[Target.LOG_ROOFLINE_RATIO, i]
                                            for i in range(len(s.configs))}, config)
        if found is not None:
            (on, off), anchor_weight, anchored_score, row = found
            scores[Target.ANCHORED], picks[Target.ANCHORED] = anchored_score, (on, off)
            s.table.append(row)
    return _choose(s, scores, picks, anchor_weight, len(valid.folds), family, hardware, config)


def _choose(s: _Scores, scores: dict[Target, float], picks: dict[Target, tuple[int, int]],
            anchor_weight: float, n_folds: int, family: str, hardware: str,
            config: TrainConfig) -> SearchChoice:
    """The target with the lowest score (or the forced one), its params, and the reason."""
    targets = tuple(scores)  # the order of `Target`; anchored only where it could be fitted
    if config.target is not None and config.target not in scores:
        raise LlmsimError(f"{hardware}/{family}: target {config.target.value} cannot be fitted "
                          f"here; possible: {', '.join(t.value for t in targets)}")
    target = config.target or min(targets, key=lambda t: (scores[t], t.value))
    others = ", ".join(f"{t.value} {scores[t]:.3f}%" for t in targets if t != target)
    how = "forced by --target; " if config.target else ""
    over = f", {n_folds} inner folds" if n_folds > 1 else ""
    reason = (f"{target.value}: {how}inner-validation MAPE {scores[target]:.3f}% vs {others} "
              f"(best of {config.n_configs} configs each{over})")
    weight = 1.0
    if target == Target.ANCHORED:
        weight = anchor_weight
        reason += f"; trees' correction applied with weight {weight:g}"
    if target in (Target.LOG_LATENCY, Target.GATED) \
            and len(s.candidates[Target.LOG_LATENCY]) > len(s.configs):
        part = "inside" if target == Target.GATED else "all"
        free, bound = (s.scored[Target.LOG_LATENCY, s.best(Target.LOG_LATENCY, part, m)][part]
                       for m in (False, True))
        chosen = picks[target][0] if target in picks else s.best(target, "all")
        what = "monotone" if s.candidates[Target.LOG_LATENCY][chosen].monotone else "free"
        reason += (f"; log-latency trees {what} in work: {part} MAPE {bound:.3f}% monotone "
                   f"vs {free:.3f}% free")
    if target in picks:  # two boosters: gated's first is a log-latency candidate, anchored's
        first, second = picks[target]  # a ratio draw; both extrapolate with a ratio draw
        pool = s.candidates[Target.LOG_LATENCY] if target == Target.GATED else s.configs
        return SearchChoice(target=target, params=pool[first],
                            extrapolator_params=s.configs[second], anchor_weight=weight,
                            reason=reason, table=s.table)
    return SearchChoice(target=target, params=s.candidates[target][s.best(target, "all")],
                        extrapolator_params=None, anchor_weight=weight, reason=reason,
                        table=s.table)
