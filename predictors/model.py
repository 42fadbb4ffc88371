# SPDX-License-Identifier: Apache-2.0
"""One XGBoost latency model: fit, predict (seconds), save and load in XGBoost's own UBJ format.

A saved model is a folder: ``model.ubj`` (``Booster.save_model``, never pickle),
``extrapolator.ubj`` for the gated and anchored targets, ``anchor.json`` (the measured curves)
for the anchored one, and ``schema.json`` (feature schema version and ordered names, the
target, the gate and the hardware/family the model is for). Loading checks
the schema against `predictors.features` and raises a clear `LlmsimError` on a mismatch.
Training strategy (search, splits) lives in `predictors.train`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analytical.errors import LlmsimError
from analytical.hardware import HardwareSpec
from analytical.ops import OpSpec
from predictors.anchor import ANCHOR_FEATURE, ANCHOR_FILE, AnchorTable
from predictors.domain import Domain, outside_domain, stand_in
from predictors.features import (
    FEATURE_SCHEMA,
    feature_matrix,
    feature_names,
    roofline_seconds,
    schema_document,
)
from predictors.features import schema_version as family_schema_version
from predictors.splits import BYTES_SIZED_FAMILIES

if TYPE_CHECKING:  # imported where used: xgboost is an optional extra
    import xgboost as xgb

MODEL_FILE = "model.ubj"
EXTRAPOLATOR_FILE = "extrapolator.ubj"  # gated/anchored: the roofline-ratio booster
SCHEMA_FILE = "schema.json"
# The size measure of the gate: `predictors.splits.size_of` as a log2 feature column (a
# collective's bytes are its bus bytes).
SIZE_FEATURE = {family: ("log2_flops" if family not in BYTES_SIZED_FAMILIES else
                         "log2_bus_bytes" if family == "collective" else "log2_bytes")
                for family in FEATURE_SCHEMA}


class Target(StrEnum):
    """What the regressor learns; predictions are always mapped back to seconds."""

    LOG_LATENCY = "log_latency"  # ln(latency_s)
    LOG_ROOFLINE_RATIO = "log_roofline_ratio"  # ln(latency_s / roofline_s)
    # log_latency up to the largest size seen in training, log_roofline_ratio beyond it. Trees
    # are piecewise constant: on log-latency they interpolate well but predict the largest
    # training latency for any bigger op; on the roofline ratio they carry the last efficiency
    # forward, which extrapolates, but the ratio spans 1000x at launch-bound sizes, where it
    # interpolates worse. The gate takes each where it is good.
    GATED = "gated"
    # Families measured as 1-D curves (`predictors.anchor`): trees learn ln(latency / table
    # interpolated along the curve) where a row lies on a measured curve, the roofline-ratio
    # booster prices the rest (unseen configurations, sizes beyond the measured range).
    ANCHORED = "anchored"


def base_targets() -> tuple[Target, Target]:
    """The targets a booster is fitted on (`Target.GATED` combines the two)."""
    return (Target.LOG_LATENCY, Target.LOG_ROOFLINE_RATIO)


def size_column(family: str, features: np.ndarray) -> np.ndarray:
    """The log2 size measure of each row (FLOPs, or bytes for data-movement families)."""
    return features[:, feature_names(family).index(SIZE_FEATURE[family])]


def normaliser_seconds(target: Target, family: str, features: np.ndarray) -> np.ndarray:
    """What the target divides the latency by before the log (ones for log_latency)."""
    if target == Target.LOG_LATENCY:
        return np.ones(features.shape[0])
    if target in (Target.GATED, Target.ANCHORED):
        raise LlmsimError(f"the {target.value} target has two normalisers; use LatencyModel")
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
    # squared error fits the mean log error; absolute error its median, which resists the
    # outliers of integer-microsecond or noisy small-message measurements
    objective: str = "squarederror"
    # log-latency boosters only: non-decreasing in the family's work features
    # (`features.MONOTONE_FEATURES`); the search scores every draw both ways
    monotone: bool = False

    def xgb_params(self, *, seed: int, nthread: int) -> dict[str, object]:
        return {"objective": f"reg:{self.objective}", "tree_method": "hist", "seed": seed,
                "nthread": nthread, "max_depth": self.max_depth, "eta": self.learning_rate,
                "min_child_weight": self.min_child_weight, "subsample": self.subsample,
                "colsample_bytree": self.colsample_bytree, "lambda": self.reg_lambda,
                "eval_metric": "rmse"}


def encode_target(latency_s: np.ndarray, normaliser_s: np.ndarray) -> np.ndarray:
    target: np.ndarray = np.log(latency_s / normaliser_s)
    return target


def decode_target(value: np.ndarray, normaliser_s: np.ndarray) -> np.ndarray:
    seconds: np.ndarray = np.exp(value) * normaliser_s
    return seconds


def fit_booster(features: np.ndarray, target_values: np.ndarray, params: HyperParams, *,
                seed: int, nthread: int, rounds: int | None = None,
                valid: tuple[np.ndarray, np.ndarray] | None = None,
                early_stopping_rounds: int = 50, monotone_constraints: str | None = None
                ) -> xgb.Booster:
    """Train with hist on ``nthread`` threads; with ``valid`` stop early and keep the best
    trees only; ``monotone_constraints`` (XGBoost's "(1,0,...)") bounds the trees' slopes.
    Returns the booster (its ``num_boosted_rounds`` is the kept tree count)."""
    import xgboost as xgb

    xgb_params = params.xgb_params(seed=seed, nthread=nthread)
    if monotone_constraints is not None:
        xgb_params["monotone_constraints"] = monotone_constraints
    dtrain = xgb.DMatrix(features, label=target_values, nthread=nthread)
    kwargs: dict[str, object] = {}
    if valid is not None:
        dvalid = xgb.DMatrix(valid[0], label=valid[1], nthread=nthread)
        kwargs = {"evals": [(dvalid, "valid")], "early_stopping_rounds": early_stopping_rounds,
                  "verbose_eval": False}
    booster = xgb.train(xgb_params, dtrain,
                        num_boost_round=rounds or params.max_rounds, **kwargs)
    if valid is not None:
        booster = booster[: booster.best_iteration + 1]
    return booster


def predict_on_curve(booster: xgb.Booster, anchor: AnchorTable, features: np.ndarray,
                     log_anchor: np.ndarray, weight: float = 1.0) -> np.ndarray:
    """Seconds from an anchored booster for rows on a measured curve (ln anchor given): the
    anchor times exp(``weight`` x the trees' correction)."""
    import xgboost as xgb

    matrix = xgb.DMatrix(anchor.anchor_feature(features, log_anchor), nthread=1)
    seconds: np.ndarray = np.exp(weight * booster.predict(matrix).astype(np.float64) + log_anchor)
    return seconds


class LatencyModel:
    """A fitted booster plus what it needs to turn op specs into seconds.

    With `Target.GATED`, ``booster`` is the log-latency booster, ``extrapolator`` the
    roofline-ratio one and ``gate_log2_size`` the largest training size: rows above it are
    priced by the extrapolator. With `Target.ANCHORED`, ``booster`` learns ln(latency /
    anchor) on rows that lie on a curve of ``anchor`` (the training table), applied with
    ``anchor_weight`` (0: the table as measured, 1: the trees' full correction; chosen by the
    search), and the roofline-ratio ``extrapolator`` prices the others.
    """

    def __init__(self, *, booster: xgb.Booster, family: str, hardware: str, target: Target,
                 params: HyperParams, schema_version: int | None = None,
                 extrapolator: xgb.Booster | None = None, gate_log2_size: float | None = None,
                 extrapolator_params: HyperParams | None = None,
                 anchor: AnchorTable | None = None, anchor_weight: float = 1.0,
                 domain: Domain | None = None) -> None:
        self.booster = booster
        self.domain = domain  # categorical values of the training rows (None: not recorded)
        self.family = family
        self.hardware = hardware
        self.target = Target(target)
        self.params = params
        self.schema_version = (family_schema_version(family) if schema_version is None
                               else schema_version)
        self.extrapolator = extrapolator
        self.gate_log2_size = gate_log2_size
        self.anchor = anchor
        self.anchor_weight = float(anchor_weight)
        self.extrapolator_params = extrapolator_params or (params if extrapolator else None)
        gated, anchored = self.target == Target.GATED, self.target == Target.ANCHORED
        if gated != (gate_log2_size is not None) or anchored != (anchor is not None) \
                or (gated or anchored) != (extrapolator is not None):
            raise LlmsimError("a gated model needs an extrapolator and a gate, an anchored one "
                              "an extrapolator and an anchor table; other targets neither")

    @property
    def n_trees(self) -> int:
        return int(self.booster.num_boosted_rounds())

    @property
    def tree_counts(self) -> tuple[int, ...]:
        """Trees per booster (primary, then extrapolator): what a refit on all rows reuses."""
        if self.extrapolator is None:
            return (self.n_trees,)
        return (self.n_trees, int(self.extrapolator.num_boosted_rounds()))

    def predict_features(self, features: np.ndarray) -> np.ndarray:
        """Seconds for a feature matrix built by `predictors.features.feature_matrix`."""
        import xgboost as xgb

        if features.shape[0] == 0:
            return np.empty(0)
        if self.target == Target.ANCHORED:
            return self._predict_anchored(features)
        matrix = xgb.DMatrix(features, nthread=1)
        raw = self.booster.predict(matrix).astype(np.float64)
        if self.target != Target.GATED:
            return decode_target(raw, self.normaliser_s(features))
        out = decode_target(raw, np.ones(features.shape[0]))
        # __init__ checked that a gated model has both
        assert self.gate_log2_size is not None and self.extrapolator is not None
        beyond = size_column(self.family, features) > self.gate_log2_size
        if beyond.any():
            ratio = self.extrapolator.predict(matrix).astype(np.float64)[beyond]
            out[beyond] = decode_target(ratio, roofline_seconds(self.family, features[beyond]))
        return out

    def _predict_anchored(self, features: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        # __init__ checked that an anchored model has both
        assert self.anchor is not None and self.extrapolator is not None
        log_anchor = self.anchor.log_anchor(features)
        on_curve = ~np.isnan(log_anchor)
        out = np.empty(features.shape[0])
        if on_curve.any():
            out[on_curve] = predict_on_curve(self.booster, self.anchor, features[on_curve],
                                             log_anchor[on_curve], self.anchor_weight)
        if (~on_curve).any():
            rest = features[~on_curve]
            ratio = self.extrapolator.predict(xgb.DMatrix(rest, nthread=1)).astype(np.float64)
            out[~on_curve] = decode_target(ratio, roofline_seconds(self.family, rest))
        return out

    def outside_domain(self, op: OpSpec) -> str | None:
        """Why ``op`` is outside what this model was trained on (e.g. ``"kind=send_recv"``),
        or None (`predictors.domain`)."""
        return outside_domain(self.domain, op, self.hardware)

    def normaliser_s(self, features: np.ndarray) -> np.ndarray:
        return normaliser_seconds(self.target, self.family, features)

    def predict(self, ops: Sequence[OpSpec], hw: HardwareSpec) -> np.ndarray:
        """Seconds for each op (batched); an op of an unseen dtype may be asked in a seen one
        (`predictors.domain.stand_in`)."""
        ops = [stand_in(self.domain, op, self.hardware) for op in ops]
        return self.predict_features(feature_matrix(self.family, ops, hw))

    def model_bytes(self) -> bytes:
        raw = bytes(self.booster.save_raw(raw_format="ubj"))
        if self.extrapolator is not None:
            raw += bytes(self.extrapolator.save_raw(raw_format="ubj"))
        if self.anchor is not None:
            raw += self.anchor.to_json().encode() + self.anchor_weight.hex().encode()
        return raw

    def save(self, folder: str | Path) -> Path:
        """Write ``model.ubj`` and ``schema.json`` into ``folder`` (created)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(folder / MODEL_FILE))
        doc = {**schema_document(self.family), "hardware": self.hardware,
               "target": self.target.value, "params": asdict(self.params),
               "n_trees": self.n_trees}
        if self.domain is not None:
            doc["domain"] = self.domain
        if self.extrapolator is not None:
            assert self.extrapolator_params is not None  # set by __init__ with the extrapolator
            self.extrapolator.save_model(str(folder / EXTRAPOLATOR_FILE))
            doc |= {"n_trees_extrapolator": self.tree_counts[1],
                    "extrapolator_params": asdict(self.extrapolator_params)}
        if self.gate_log2_size is not None:
            # float.hex: the gate survives the JSON round trip bit for bit
            doc["gate_log2_size"] = float(self.gate_log2_size).hex()
        if self.anchor is not None:
            self.anchor.save(folder)
            doc |= {"anchor_file": ANCHOR_FILE, "anchor_feature": ANCHOR_FEATURE,
                    "anchor_weight": self.anchor_weight.hex()}
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
        extrapolator, gate, extrapolator_params, anchor = None, None, None, None
        anchor_weight = 1.0  # anchored models saved before the weight existed applied it fully
        if doc["target"] in (Target.GATED, Target.ANCHORED):
            extrapolator_path = folder / EXTRAPOLATOR_FILE
            if not extrapolator_path.exists():
                raise LlmsimError(f"{extrapolator_path}: missing (a {doc['target']} model has "
                                  "two boosters)")
            extrapolator = xgb.Booster()
            extrapolator.load_model(str(extrapolator_path))
            extrapolator_params = HyperParams(**doc.get("extrapolator_params", doc["params"]))
        if doc["target"] == Target.GATED:
            if "gate_log2_size" not in doc:
                raise LlmsimError(f"{schema_path}: gate_log2_size: missing for a gated model")
            gate = float.fromhex(doc["gate_log2_size"])
        if doc["target"] == Target.ANCHORED:
            if doc.get("anchor_feature") != ANCHOR_FEATURE:
                raise LlmsimError(f"{schema_path}: anchor_feature: {doc.get('anchor_feature')!r}"
                                  f", this llmsim's anchored booster uses {ANCHOR_FEATURE!r}")
            anchor = AnchorTable.load(folder, doc["family"])
            if "anchor_weight" in doc:
                try:
                    anchor_weight = float.fromhex(doc["anchor_weight"])
                except (TypeError, ValueError):
                    raise LlmsimError(f"{schema_path}: anchor_weight: {doc['anchor_weight']!r} "
                                      "is not a float.hex string") from None
        return cls(booster=booster, family=doc["family"], hardware=doc["hardware"],
                   target=Target(doc["target"]), params=HyperParams(**doc["params"]),
                   schema_version=doc["schema_version"], extrapolator=extrapolator,
                   gate_log2_size=gate, extrapolator_params=extrapolator_params, anchor=anchor,
                   anchor_weight=anchor_weight, domain=_domain_of(doc, schema_path))


def _domain_of(doc: dict[str, Any], path: Path) -> Domain | None:
    """The training domain in a schema.json; None for a model saved before it was recorded."""
    domain = doc.get("domain")
    if domain is None:
        return None
    if not isinstance(domain, dict) or not all(isinstance(v, list) for v in domain.values()):
        raise LlmsimError(f"{path}: domain: expected a mapping of field -> list of values")
    return domain


def check_schema(doc: dict[str, Any], *, source: str) -> None:
    """Raise a clear error unless ``doc`` (a schema.json) matches the current feature schema."""
    version = doc.get("schema_version")
    family = doc.get("family")
    if family not in FEATURE_SCHEMA:
        raise LlmsimError(f"{source}: family: {family!r} is not one of {sorted(FEATURE_SCHEMA)}")
    expected = family_schema_version(family)
    if version != expected:
        raise LlmsimError(f"{source}: {family} feature schema version {version} but this llmsim "
                          f"uses version {expected}; retrain with `llmsim train run --hardware "
                          f"{doc.get('hardware', 'H')} --op {family}`")
    names = [f.get("name") for f in doc.get("features", [])]
    if names != feature_names(family):
        raise LlmsimError(f"{source}: feature names differ from schema version {expected} "
                          f"for family {family!r}; the file was edited or written by another "
                          "build; retrain the model")
    for key in ("hardware", "target", "params"):
        if key not in doc:
            raise LlmsimError(f"{source}: {key}: missing")
    if doc["target"] not in {t.value for t in Target}:
        raise LlmsimError(f"{source}: target: {doc['target']!r} is not one of "
                          f"{[t.value for t in Target]}")
