# SPDX-License-Identifier: Apache-2.0
"""Move the `champion` alias only when a candidate earns it.

Two gates, in order. First the baselines: on its run's primary held-out split the candidate's
XGBoost MAPE must be below that of every baseline scored on the same rows (interpolation, table,
random forest: `predictors.baselines`), or tie it within the noise of the held-out shapes while
beating it on the largest sizes (`ties`), so a model worse than a lookup never becomes
champion, not even the first one. Then the current champion, if any: both versions are re-scored on the
same rows, the candidate run's primary held-out split (``heldout_test.parquet``), restricted to
rows the champion's own held-out model never saw either (its held-out rows), so neither side is
scored on its training data. Each side is scored with its ``heldout_model`` (fitted without its
held-out rows). A champion whose schema no longer loads cannot be scored and is replaced.
``force`` promotes whatever the gates say; the reason still carries their verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from analytical.errors import LlmsimError
from analytical.hardware import get_hardware
from analytical.ops import op_fields, op_from_dict
from predictors.evaluate import ErrorMetrics, error_metrics
from predictors.splits import HELDOUT_LARGE, PRIMARY_SPLIT
from predictors.tracking import (
    ALIAS,
    HELDOUT_MODEL_DIR,
    champion_version,
    client_for,
    download_heldout_rows,
    download_model,
    registered_name,
    run_of,
)

if TYPE_CHECKING:  # mlflow is imported where used (it is slow to import)
    from mlflow.entities.model_registry import ModelVersion
    from mlflow.tracking import MlflowClient


@dataclass(frozen=True, slots=True, kw_only=True)
class Promotion:
    name: str
    candidate_version: str
    champion_version: str | None  # before the decision
    promoted: bool
    reason: str
    candidate: ErrorMetrics | None
    champion: ErrorMetrics | None


def _latest_version(client: MlflowClient, name: str) -> str:
    versions = client.search_model_versions(f"name = '{name}'")
    if not versions:
        raise LlmsimError(f"no registered model {name!r}; train one with `llmsim train run`")
    return str(max(int(v.version) for v in versions))


BASELINES = ("interp", "table", "rf")  # the baselines a run logs (`predictors.train`)
PROMOTION_TAG = "promotion"  # on each model version: the last decision and why
# A tie on the primary split needs this many held-out shapes under its bootstrap interval
# (`evaluate.mape_gap`): with fewer, the interval is a point or two and says nothing.
MIN_TIE_SHAPES = 4


def _interval(metrics: Mapping[str, float], split: str, baseline: str
              ) -> tuple[float, float, int] | None:
    """(low, high, shapes) of XGBoost's MAPE minus ``baseline``'s on ``split``, if logged."""
    keys = [f"{split}.xgb_vs_{baseline}.{k}" for k in ("low", "high", "clusters")]
    values = [metrics.get(k, math.nan) for k in keys]
    if not all(math.isfinite(v) for v in values):
        return None
    return float(values[0]), float(values[1]), int(values[2])


def ties(metrics: Mapping[str, float], baseline: str, split: str = PRIMARY_SPLIT,
         beyond: str = HELDOUT_LARGE) -> str | None:
    """Why XGBoost ties ``baseline`` on ``split`` and is worth more than it, or None.

    A tie: the 95% interval of the MAPE gap, resampling held-out shapes whole, straddles 0
    over at least `MIN_TIE_SHAPES` shapes, i.e. the held-out set cannot tell the two apart.
    Worth more: on ``beyond`` (sizes past every training size) XGBoost is better with the
    whole interval below 0. A lookup that ties inside the measured range but cannot
    extrapolate is no reason to keep a model out; one that is significantly better on the
    primary split (interval above 0) still is."""
    inside, past = _interval(metrics, split, baseline), _interval(metrics, beyond, baseline)
    if inside is None or past is None:
        return None
    low, high, shapes = inside
    if shapes < MIN_TIE_SHAPES or not low <= 0.0 <= high or past[1] >= 0.0:
        return None
    return (f"ties {baseline} on {split} ({metrics[f'{split}.xgb_vs_{baseline}.gap']:+.2f} "
            f"points [{low:+.2f}, {high:+.2f}], {shapes} shapes) and beats it on {beyond} "
            f"({metrics[f'{beyond}.xgb_vs_{baseline}.gap']:+.2f} [{past[0]:+.2f}, "
            f"{past[1]:+.2f}])")


def beats_baselines(metrics: Mapping[str, float], split: str = PRIMARY_SPLIT
                    ) -> tuple[bool, str]:
    """Whether the run's XGBoost MAPE on ``split`` is below every logged baseline's, or ties
    those it does not beat (`ties`), and why."""
    xgb = metrics.get(f"{split}.xgb.mape")
    scored = {b: float(metrics[f"{split}.{b}.mape"]) for b in BASELINES
              if math.isfinite(metrics.get(f"{split}.{b}.mape", math.nan))}
    if xgb is None or not math.isfinite(xgb):
        return False, f"the run logged no {split} score"
    if not scored:
        return False, f"no baseline was scored on {split}, so nothing shows the model is useful"
    best = min(scored, key=lambda b: (scored[b], b))
    n = int(metrics.get(f"{split}.xgb.n", 0))
    versus = f"{split} MAPE on {n} rows: XGBoost {xgb:.2f}% vs best baseline {best} " \
             f"{scored[best]:.2f}%"
    if xgb < scored[best]:
        return True, f"beats every baseline ({versus})"
    tied = {b: ties(metrics, b, split) for b in sorted(scored) if xgb >= scored[b]}
    if all(tied.values()):
        return True, f"beats or ties every baseline ({versus}; " + "; ".join(
            str(why) for why in tied.values()) + ")"
    return False, f"does not beat the baselines ({versus})"


def promote(hardware: str, family: str, *, version: str | None = None,
            tracking_uri: str | None = None, force: bool = False) -> Promotion:
    """Move the alias to ``version`` (default: latest) if it beats the baselines on its held-out
    split and the champion on shared held-out rows; ``force`` moves it regardless."""
    client = client_for(tracking_uri)
    name = registered_name(hardware, family)
    candidate_v = str(version) if version is not None else _latest_version(client, name)
    try:
        candidate_mv = client.get_model_version(name, candidate_v)
    except Exception:  # noqa: BLE001
        raise LlmsimError(f"{name}: no version {candidate_v}") from None
    current = champion_version(client, name)

    def decide(promoted: bool, reason: str, cand: ErrorMetrics | None = None,
               champ: ErrorMetrics | None = None) -> Promotion:
        if force and not promoted:
            promoted, reason = True, f"forced (--force); the gates said: {reason}"
        if promoted:
            client.set_registered_model_alias(name, ALIAS, candidate_v)
        client.set_model_version_tag(name, candidate_v, PROMOTION_TAG,
                                     f"{'promoted' if promoted else 'not promoted'}: {reason}")
        if not promoted:
            reason += (f"; to promote it anyway: llmsim train promote --hardware {hardware} "
                       f"--op {family} --version {candidate_v} --force")
        return Promotion(name=name, candidate_version=candidate_v,
                         champion_version=None if current is None else str(current.version),
                         promoted=promoted, reason=reason, candidate=cand, champion=champ)

    if current is not None and str(current.version) == candidate_v:
        return Promotion(name=name, candidate_version=candidate_v, champion_version=candidate_v,
                         promoted=False, reason=f"version {candidate_v} already is the champion",
                         candidate=None, champion=None)
    ok, why = beats_baselines(client.get_run(run_of(candidate_mv)).data.metrics)
    why = f"v{candidate_v} {why}"
    if current is None:
        return decide(ok, f"no champion yet; {why}" if ok else why)
    if not ok and not force:
        return decide(False, why)
    beat, verdict, cand, champ = _against_champion(client, hardware, family, candidate_v,
                                                   candidate_mv, current)
    return decide(ok and beat, verdict if ok else f"{why}; {verdict}", cand, champ)


def _against_champion(client: MlflowClient, hardware: str, family: str, candidate_v: str,
                      candidate_mv: ModelVersion, current: ModelVersion
                      ) -> tuple[bool, str, ErrorMetrics, ErrorMetrics | None]:
    """The second gate: candidate and champion re-scored on the same held-out rows; returns
    (candidate wins, verdict, candidate metrics, champion metrics)."""
    rows = download_heldout_rows(client, run_of(candidate_mv))
    try:
        champion_rows = download_heldout_rows(client, run_of(current))
        both = rows[rows["op_key"].isin(set(champion_rows["op_key"]))]
    except Exception:  # noqa: BLE001 - an older run without held-out rows
        both = rows.iloc[0:0]
    note = ""
    if both.empty:
        both = rows
        note = " (no rows unseen by both; champion may have trained on some)"
    hw = get_hardware(hardware)
    fields = list(op_fields(family))
    ops = [op_from_dict(family, {str(k): (v.item() if hasattr(v, "item") else v)
                                 for k, v in r.items()}, field="heldout_row")
           for r in both[fields].to_dict("records")]
    measured = both["latency_s"].to_numpy(dtype=np.float64)
    cand_model = download_model(client, run_of(candidate_mv), HELDOUT_MODEL_DIR)
    cand = error_metrics(measured, cand_model.predict(ops, hw))
    try:
        champ_model = download_model(client, run_of(current), HELDOUT_MODEL_DIR)
    except LlmsimError as exc:
        return True, f"champion v{current.version} cannot be scored ({exc})", cand, None
    champ = error_metrics(measured, champ_model.predict(ops, hw))
    verdict = (f"held-out MAPE on {cand.n} rows{note}: candidate v{candidate_v} "
               f"{cand.mape:.3f}% vs champion v{current.version} {champ.mape:.3f}%")
    return cand.mape < champ.mape, verdict, cand, champ
