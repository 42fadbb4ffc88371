# SPDX-License-Identifier: Apache-2.0
"""Move the `champion` alias only when a candidate beats the current champion.

Both versions are re-scored on the same rows: the candidate run's primary held-out split
(``heldout_test.parquet``), restricted to rows the champion's own held-out model never saw
either (its held-out rows), so neither side is scored on its training data. Each side is scored
with its ``heldout_model`` (fitted without its held-out rows). A champion whose schema no longer
loads cannot be scored and is replaced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analytical.errors import LlmsimError
from analytical.hardware import get_hardware
from analytical.ops import op_fields, op_from_dict
from predictors.evaluate import ErrorMetrics, error_metrics
from predictors.tracking import (
    ALIAS,
    HELDOUT_MODEL_DIR,
    champion_version,
    client_for,
    download_heldout_rows,
    download_model,
    registered_name,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Promotion:
    name: str
    candidate_version: str
    champion_version: str | None  # before the decision
    promoted: bool
    reason: str
    candidate: ErrorMetrics | None
    champion: ErrorMetrics | None


def _latest_version(client, name: str) -> str:
    versions = client.search_model_versions(f"name = '{name}'")
    if not versions:
        raise LlmsimError(f"no registered model {name!r}; train one with `llmsim train run`")
    return str(max(int(v.version) for v in versions))


def promote(hardware: str, family: str, *, version: str | None = None,
            tracking_uri: str | None = None) -> Promotion:
    """Compare ``version`` (default: latest) with the champion and move the alias if better."""
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
        if promoted:
            client.set_registered_model_alias(name, ALIAS, candidate_v)
        return Promotion(name=name, candidate_version=candidate_v,
                         champion_version=None if current is None else str(current.version),
                         promoted=promoted, reason=reason, candidate=cand, champion=champ)

    if current is None:
        return decide(True, "no champion yet")
    if str(current.version) == candidate_v:
        return decide(False, f"version {candidate_v} already is the champion")

    rows = download_heldout_rows(client, candidate_mv.run_id)
    try:
        champion_rows = download_heldout_rows(client, current.run_id)
        both = rows[rows["op_key"].isin(set(champion_rows["op_key"]))]
    except Exception:  # noqa: BLE001 - an older run without held-out rows
        both = rows.iloc[0:0]
    note = ""
    if both.empty:
        both = rows
        note = " (no rows unseen by both; champion may have trained on some)"
    hw = get_hardware(hardware)
    fields = list(op_fields(family))
    ops = [op_from_dict(family, {k: (v.item() if hasattr(v, "item") else v)
                                 for k, v in r.items()}, field="heldout_row")
           for r in both[fields].to_dict("records")]
    measured = both["latency_s"].to_numpy(dtype=np.float64)
    cand_model = download_model(client, candidate_mv.run_id, HELDOUT_MODEL_DIR)
    cand = error_metrics(measured, cand_model.predict(ops, hw))
    try:
        champ_model = download_model(client, current.run_id, HELDOUT_MODEL_DIR)
    except LlmsimError as exc:
        return decide(True, f"champion v{current.version} cannot be scored ({exc})", cand)
    champ = error_metrics(measured, champ_model.predict(ops, hw))
    verdict = (f"held-out MAPE on {cand.n} rows{note}: candidate v{candidate_v} "
               f"{cand.mape:.3f}% vs champion v{current.version} {champ.mape:.3f}%")
    return decide(cand.mape < champ.mape, verdict, cand, champ)
