# SPDX-License-Identifier: Apache-2.0
"""One call per CLI command: store -> training data -> train -> MLflow run -> promotion.

`train_and_log` trains one (hardware, family) predictor; `trainable_groups` lists every
(hardware, family) whose training group has enough shapes for `llmsim train all`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analytical.errors import LlmsimError
from analytical.hardware import get_hardware
from predictors.dataset import load_frame, open_store, pick_provenance, training_data
from predictors.features import FEATURE_SCHEMA
from predictors.promote import Promotion, promote
from predictors.tracking import LoggedRun, log_training
from predictors.train import TrainConfig, TrainingResult, train_predictor
from predictors.train_config import MIN_ROWS


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainOutcome:
    result: TrainingResult
    logged: LoggedRun
    promotion: Promotion | None


def train_frame(frame: pd.DataFrame, *, hardware: str, family: str,
                provenance: str | None = None, config: TrainConfig | None = None,
                tracking_uri: str | None = None, auto_promote: bool = True) -> TrainOutcome:
    """Train on a store frame, log the run, register a version and (optionally) promote it."""
    data = training_data(frame, hardware=hardware, family=family, provenance=provenance)
    if len(data) < MIN_ROWS:
        raise LlmsimError(f"{hardware}/{family} ({data.provenance}): {len(data)} distinct shapes, "
                          f"need at least {MIN_ROWS} to train and evaluate")
    result = train_predictor(data, get_hardware(hardware), config)
    logged = log_training(result, tracking_uri=tracking_uri)
    promotion = None
    if auto_promote:
        promotion = promote(hardware, family, version=logged.version, tracking_uri=tracking_uri)
    return TrainOutcome(result=result, logged=logged, promotion=promotion)


def train_and_log(hardware: str, family: str, *, db: str | Path | None = None,
                  provenance: str | None = None, dtype: str | None = None,
                  config: TrainConfig | None = None, tracking_uri: str | None = None,
                  auto_promote: bool = True) -> TrainOutcome:
    """`train_frame` on the store's ok rows for (hardware, family[, dtype, provenance])."""
    if family not in FEATURE_SCHEMA:
        raise LlmsimError(f"unknown operator family {family!r}; known: {', '.join(FEATURE_SCHEMA)}")
    with open_store(db) as store:
        frame = load_frame(store, hardware, family, dtype=dtype, provenance=provenance)
    if frame.empty:
        raise LlmsimError(f"no ok rows for hardware {hardware!r}, family {family!r} in the store")
    return train_frame(frame, hardware=hardware, family=family, provenance=provenance,
                       config=config, tracking_uri=tracking_uri, auto_promote=auto_promote)


def trainable_groups(db: str | Path | None = None, *, min_rows: int = MIN_ROWS
                     ) -> list[tuple[str, str, int]]:
    """(hardware, family, distinct shapes of the group training would use) with at least
    ``min_rows`` shapes. The group is `pick_provenance`'s (coverage first, then rows), the
    same one `train_and_log` trains on, so a store whose best-covering group is small is
    skipped rather than failing halfway through `llmsim train all`."""
    out: list[tuple[str, str, int]] = []
    with open_store(db) as store:
        for family in FEATURE_SCHEMA:
            hardware_names = store.query(
                f'SELECT DISTINCT hardware FROM "{family}" WHERE status = \'ok\'')["hardware"]
            for hardware in sorted(map(str, hardware_names)):
                frame = load_frame(store, hardware, family)
                chosen = pick_provenance(frame, family=family)
                shapes = int(frame.loc[frame["provenance"] == chosen, "op_key"].nunique())
                if shapes >= min_rows:
                    out.append((hardware, family, shapes))
    return sorted(out)
