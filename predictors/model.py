# SPDX-License-Identifier: Apache-2.0
"""One XGBoost latency model: fit, predict (seconds), save and load in XGBoost's own UBJ format.

A saved model is a folder: ``model.ubj`` (``Booster.save_model``, never pickle) and
``schema.json`` (feature schema version and ordered names, the target and the hardware/family
the model is for). Loading checks the schema against `predictors.features` and raises a clear
`LlmsimError` on a mismatch. Training strategy (search, splits) lives in `predictors.train`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

from analytical.errors import LlmsimError
from analytical.hardware import HardwareSpec
from analytical.ops import OpSpec
from predictors.features import (
    SCHEMA_VERSION,
    feature_matrix,
    feature_names,
    roofline_seconds,
    schema_document,
)

MODEL_FILE = "model.ubj"
SCHEMA_FILE = "schema.json"


class Target(StrEnum):
    """What the regressor learns; predictions are always mapped back to seconds."""

    LOG_LATENCY = "log_latency"  # ln(latency_s)
    LOG_ROOFLINE_RATIO = "log_roofline_ratio"  # ln(latency_s / roofline_s)


def normaliser_seconds(target: Target, family: str, features: np.ndarray) -> np.ndarray:
    """What the target divides the latency by before the log (ones for log_latency)."""
    if target == Target.LOG_LATENCY:
        return np.ones(features.shape[0])
    return roofline_seconds(family, features)


@dataclass(frozen=True, slots=True, kw_only=True)
class HyperParams:
    max_depth: int = 8
    learning_rate: float = 0.05
    min_child_weight: float = 1.0
    subsample: float = 0.8
    colsample_bytree: float = 0.8
    reg_lambda: float = 1.0
    max_rounds: int = 2000

    def xgb_params(self, *, seed: int, nthread: int) -> dict[str, object]:
        return {"objective": "reg:squarederror", "tree_method": "hist", "seed": seed,
                "nthread": nthread, "max_depth": self.max_depth, "eta": self.learning_rate,
                "min_child_weight": self.min_child_weight, "subsample": self.subsample,
                "colsample_bytree": self.colsample_bytree, "lambda": self.reg_lambda,
                "eval_metric": "rmse"}


def encode_target(latency_s: np.ndarray, normaliser_s: np.ndarray) -> np.ndarray:
    return np.log(latency_s / normaliser_s)


def decode_target(value: np.ndarray, normaliser_s: np.ndarray) -> np.ndarray:
    return np.exp(value) * normaliser_s


def fit_booster(features: np.ndarray, target_values: np.ndarray, params: HyperParams, *,
                seed: int, nthread: int, rounds: int | None = None,
                valid: tuple[np.ndarray, np.ndarray] | None = None,
                early_stopping_rounds: int = 50):
    """Train with hist on ``nthread`` threads; with ``valid`` stop early and keep the best
    trees only. Returns the booster (its ``num_boosted_rounds`` is the kept tree count)."""
    import xgboost as xgb

    dtrain = xgb.DMatrix(features, label=target_values, nthread=nthread)
    kwargs: dict[str, object] = {}
    if valid is not None:
        dvalid = xgb.DMatrix(valid[0], label=valid[1], nthread=nthread)
        kwargs = {"evals": [(dvalid, "valid")], "early_stopping_rounds": early_stopping_rounds,
                  "verbose_eval": False}
    booster = xgb.train(params.xgb_params(seed=seed, nthread=nthread), dtrain,
                        num_boost_round=rounds or params.max_rounds, **kwargs)
    if valid is not None:
        booster = booster[: booster.best_iteration + 1]
    return booster


class LatencyModel:
    """A fitted booster plus what it needs to turn op specs into seconds."""

    def __init__(self, *, booster, family: str, hardware: str, target: Target,
                 params: HyperParams, schema_version: int = SCHEMA_VERSION) -> None:
        self.booster = booster
        self.family = family
        self.hardware = hardware
        self.target = Target(target)
        self.params = params
        self.schema_version = schema_version

    @property
    def n_trees(self) -> int:
        return int(self.booster.num_boosted_rounds())

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        """Seconds for a feature matrix built by `predictors.features.feature_matrix`."""
        import xgboost as xgb

        if features.shape[0] == 0:
            return np.empty(0)
        raw = self.booster.predict(xgb.DMatrix(features, nthread=1))
        return decode_target(raw.astype(np.float64), self.normaliser_s(features))

    def normaliser_s(self, features: np.ndarray) -> np.ndarray:
        return normaliser_seconds(self.target, self.family, features)

    def predict(self, ops: Sequence[OpSpec], hw: HardwareSpec) -> np.ndarray:
        """Seconds for each op (batched)."""
        return self.predict_features(feature_matrix(self.family, ops, hw))

    def model_bytes(self) -> bytes:
        return bytes(self.booster.save_raw(raw_format="ubj"))

    def save(self, folder: str | Path) -> Path:
        """Write ``model.ubj`` and ``schema.json`` into ``folder`` (created)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(folder / MODEL_FILE))
        doc = {**schema_document(self.family), "hardware": self.hardware,
               "target": self.target.value, "params": asdict(self.params),
               "n_trees": self.n_trees}
        (folder / SCHEMA_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> LatencyModel:
        """Read a folder written by `save`; the schema must match this version of llmsim."""
        import xgboost as xgb

        folder = Path(folder)
        schema_path = folder / SCHEMA_FILE
        try:
            doc = json.loads(schema_path.read_text())
        except FileNotFoundError:
            raise LlmsimError(f"{schema_path}: missing; a model folder needs {MODEL_FILE} and "
                              f"{SCHEMA_FILE}") from None
        except json.JSONDecodeError as exc:
            raise LlmsimError(f"{schema_path}: not valid JSON ({exc})") from None
        check_schema(doc, source=str(schema_path))
        booster = xgb.Booster()
        model_path = folder / MODEL_FILE
        if not model_path.exists():
            raise LlmsimError(f"{model_path}: missing")
        booster.load_model(str(model_path))
        return cls(booster=booster, family=doc["family"], hardware=doc["hardware"],
                   target=Target(doc["target"]), params=HyperParams(**doc["params"]),
                   schema_version=doc["schema_version"])


def check_schema(doc: dict, *, source: str) -> None:
    """Raise a clear error unless ``doc`` (a schema.json) matches the current feature schema."""
    version = doc.get("schema_version")
    family = doc.get("family")
    if version != SCHEMA_VERSION:
        raise LlmsimError(f"{source}: feature schema version {version} but this llmsim uses "
                          f"version {SCHEMA_VERSION}; retrain with `llmsim train run --hardware "
                          f"{doc.get('hardware', 'H')} --op {family or 'FAMILY'}`")
    names = [f.get("name") for f in doc.get("features", [])]
    if family is None or names != feature_names(family):
        raise LlmsimError(f"{source}: feature names differ from schema version {SCHEMA_VERSION} "
                          f"for family {family!r}; the file was edited or written by another "
                          "build; retrain the model")
    for key in ("hardware", "target", "params"):
        if key not in doc:
            raise LlmsimError(f"{source}: {key}: missing")
