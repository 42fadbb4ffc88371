# SPDX-License-Identifier: Apache-2.0
"""Train the CPU predictors of the validation loop through the predictors package.

Per family: the store's ok rows for the hardware (`predictors.dataset`), the standard recipe
(`predictors.train.train_predictor`), an MLflow run and a new registered version
(`predictors.tracking.log_training`), then `predictors.promote.promote`, which moves the
``champion`` alias only if the new version beats the baselines on its held-out split and the
current champion on held-out rows.
A family with too few rows is skipped with the reason; the engine chain then falls through
to the roofline for shapes the store lacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from analytical.errors import LlmsimError
from analytical.hardware import get_hardware

__all__ = ["MIN_ROWS", "train_families"]

MIN_ROWS = 20  # below this a held-out split of 20% is a handful of shapes: not worth a model


def train_families(hardware: str, families: Sequence[str], *,
                   store_path: str | Path | None = None, tracking_uri: str | None = None,
                   fast: bool = False) -> dict[str, dict[str, object]]:
    """Train, log and (if better) promote one predictor per family; returns what happened.

    ``fast`` shrinks the hyper-parameter search (tests); the result then says so.
    """
    from predictors.dataset import load_frame, open_store, training_data  # noqa: PLC0415
    from predictors.loader import clear_cache  # noqa: PLC0415
    from predictors.promote import promote  # noqa: PLC0415
    from predictors.tracking import log_training  # noqa: PLC0415
    from predictors.train import TrainConfig, train_predictor  # noqa: PLC0415

    hw = get_hardware(hardware)
    config = (TrainConfig(n_configs=2, max_rounds=200, early_stopping_rounds=20, rf_trees=10)
              if fast else TrainConfig())
    out: dict[str, dict[str, object]] = {}
    with open_store(store_path) as store:
        frames = {family: load_frame(store, hw.name, family) for family in families}
    for family, frame in frames.items():
        try:
            data = training_data(frame, hardware=hw.name, family=family, provenance="profiled")
        except LlmsimError as exc:
            out[family] = {"status": "skipped", "reason": str(exc)}
            continue
        if len(data) < MIN_ROWS:
            out[family] = {"status": "skipped",
                           "reason": f"{len(data)} shapes < {MIN_ROWS}", "rows": len(data)}
            continue
        result = train_predictor(data, hw, config)
        logged = log_training(result, tracking_uri=tracking_uri)
        promotion = promote(hw.name, family, version=logged.version, tracking_uri=tracking_uri)
        out[family] = {"status": "trained", "rows": len(data), "version": logged.version,
                       "promoted": promotion.promoted, "reason": promotion.reason,
                       "target": result.target.value, "fast": fast}
    clear_cache()
    return out
