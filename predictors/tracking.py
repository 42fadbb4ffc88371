# SPDX-License-Identifier: Apache-2.0
"""MLflow: one run per training, one registered model per (hardware, family), alias `champion`.

Tracking URI: the argument, else `analytical.paths.default_tracking_uri()` (``$MLFLOW_TRACKING_URI``
or SQLite under ``$LLMSIM_HOME``). With a local store, artifacts go under
``$LLMSIM_HOME/mlartifacts``. A run's artifacts: ``model/`` and ``heldout_model/`` (``model.ubj``
+ ``schema.json``, never pickle), ``heldout_test.parquet`` (the primary split's test rows, so a
later `promote` re-scores models on exactly those rows), ``metrics.json``, ``search.json`` and
``predicted_vs_measured.png``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analytical.errors import LlmsimError
from analytical.ops import op_to_dict
from analytical.paths import default_artifact_root, default_tracking_uri
from predictors.evaluate import plot_predicted_vs_measured
from predictors.features import schema_version
from predictors.model import HyperParams, LatencyModel
from predictors.splits import PRIMARY_SPLIT
from predictors.train import XGB, TrainingResult

if TYPE_CHECKING:  # mlflow is imported where used (it is slow to import)
    from mlflow.entities.model_registry import ModelVersion
    from mlflow.tracking import MlflowClient

EXPERIMENT = "llmsim-predictors"
ALIAS = "champion"
MODEL_DIR = "model"
HELDOUT_MODEL_DIR = "heldout_model"
HELDOUT_TEST_FILE = "heldout_test.parquet"


@dataclass(frozen=True, slots=True, kw_only=True)
class LoggedRun:
    run_id: str
    name: str  # registered model name
    version: str


def registered_name(hardware: str, family: str) -> str:
    return f"llmsim-{hardware}-{family}"


def client_for(tracking_uri: str | None = None) -> MlflowClient:
    """An `MlflowClient` on ``tracking_uri`` (default store created on first use)."""
    # Artifact downloads draw progress bars on stderr in the middle of `llmsim simulate` output.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri or default_tracking_uri()
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(uri)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _experiment_id(client: MlflowClient) -> str:
    found = client.get_experiment_by_name(EXPERIMENT)
    if found is not None:
        return found.experiment_id
    uri = client.tracking_uri
    location = None
    if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
        root = default_artifact_root()
        root.mkdir(parents=True, exist_ok=True)
        location = root.resolve().as_uri()
    return client.create_experiment(EXPERIMENT, artifact_location=location)


def metrics_dict(result: TrainingResult) -> dict[str, float]:
    """Flat metric names ``<split>.<model>[.<group>].<metric>`` (model: xgb, interp, table,
    rf), and ``<split>.xgb_vs_<baseline>.<gap|low|high|clusters>`` (`evaluate.MapeGap`)."""
    out: dict[str, float] = {}
    for split_name, split in result.splits.items():
        for baseline, gap in split.gaps.items():
            out.update({f"{split_name}.xgb_vs_{baseline}.{k}": float(v)
                        for k, v in asdict(gap).items()})
        for model, m in split.metrics.items():
            out.update({f"{split_name}.{model}.{k}": float(v) for k, v in m.as_dict().items()})
        for group, models in split.groups.items():
            for model, m in models.items():
                out.update({f"{split_name}.{model}.{group}.{k}": float(v)
                            for k, v in m.as_dict().items()})
    return out


def _tags(result: TrainingResult) -> dict[str, str]:
    data = result.data
    tags = {"hardware": data.hardware, "family": data.family, "provenance": data.provenance,
            "data_fingerprint": str(data.fingerprint), "data_rows": str(data.fingerprint.rows),
            "data_sha256": data.fingerprint.sha256, "duplicates_folded":
            str(data.duplicates_folded), "schema_version": str(schema_version(data.family)),
            "target": result.target.value, "target_reason": result.target_reason,
            "seed": str(result.config.seed), "nthread": str(result.config.nthread),
            "primary_split": PRIMARY_SPLIT}
    for name, split in result.splits.items():
        tags[f"split.{name}"] = split.split.description
    return tags


def _heldout_frame(result: TrainingResult) -> pd.DataFrame:
    split = result.splits[PRIMARY_SPLIT]
    rows = [{**op_to_dict(result.data.ops[i]), "op_key": result.data.ops[i].key,
             "latency_s": float(result.data.latency_s[i])} for i in split.split.test]
    return pd.DataFrame(rows)


def log_training(result: TrainingResult, *, tracking_uri: str | None = None) -> LoggedRun:
    """Log one training result as a run and register its model as a new version."""
    import mlflow

    client = client_for(tracking_uri)
    experiment_id = _experiment_id(client)
    data = result.data
    name = registered_name(data.hardware, data.family)
    params = {**{k: str(v) for k, v in vars_of(result.params).items()},
              "n_trees": str(result.model.n_trees), "n_configs": str(result.config.n_configs),
              "search_rows": str(result.config.search_rows),
              "search_valid_rows": str(result.config.search_valid_rows), "rf_trees":
              str(result.config.rf_trees)}
    if result.extrapolator_params is not None:
        params |= {f"extrapolator.{k}": str(v)
                   for k, v in vars_of(result.extrapolator_params).items()}
        params["extrapolator.n_trees"] = str(result.model.tree_counts[1])
    if result.model.anchor is not None:
        anchor = result.model.anchor
        params |= {"anchor_weight": str(result.model.anchor_weight),
                   "anchor_interpolation": anchor.interpolation,
                   **{f"anchor_loo_mape.{name}": f"{mape:.3f}"
                      for name, mape in anchor.loo_mape.items()}}
    with mlflow.start_run(experiment_id=experiment_id,
                          run_name=f"{data.hardware}-{data.family}") as run:
        mlflow.log_params(params)
        mlflow.set_tags(_tags(result))
        metrics = metrics_dict(result)
        mlflow.log_metrics({k: v for k, v in metrics.items() if v == v})
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            result.model.save(folder / MODEL_DIR)
            result.heldout_model.save(folder / HELDOUT_MODEL_DIR)
            _heldout_frame(result).to_parquet(folder / HELDOUT_TEST_FILE, index=False)
            (folder / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True))
            (folder / "search.json").write_text(json.dumps(result.search, indent=2))
            series = {s: (r.measured_s, r.predicted_s[XGB]) for s, r in result.splits.items()}
            plot_predicted_vs_measured(folder / "predicted_vs_measured.png", series,
                                       title=f"{name} ({data.provenance}, {data.fingerprint})")
            mlflow.log_artifacts(str(folder))
        run_id = run.info.run_id
    try:
        client.get_registered_model(name)
    except Exception:  # noqa: BLE001 - mlflow raises its own RestException subclasses
        client.create_registered_model(name, tags={"hardware": data.hardware,
                                                   "family": data.family})
    source = f"{client.get_run(run_id).info.artifact_uri}/{MODEL_DIR}"
    version = client.create_model_version(name, source=source, run_id=run_id,
                                          tags={"provenance": data.provenance})
    return LoggedRun(run_id=run_id, name=name, version=str(version.version))


def vars_of(params: HyperParams) -> dict[str, object]:
    from dataclasses import asdict

    return asdict(params)


class NoChampionError(LlmsimError):
    """No version of a registered model holds the alias `champion`: the engine chain asks the
    next engine, by design. Any other failure to load a registered champion (its artifacts
    gone, a schema this release cannot read) is not this error, and is said (`say_unusable`)."""


_SAID_UNUSABLE: set[str] = set()


def say_unusable(name: str, exc: BaseException) -> None:
    """Say once per process, on stderr, that the registered champion ``name`` exists but cannot
    be used, and why: its operators then go to the next engine of the chain, and a user who
    trained it must not find that out from a number alone."""
    if name in _SAID_UNUSABLE:
        return
    _SAID_UNUSABLE.add(name)
    print(f"note: registered champion {name!r} cannot be used ({exc}); its operators go to "
          "the next engine. Retrain it, or point the tracking store's artifact paths at "
          "where its files are", file=sys.stderr)


def champion_version(client: MlflowClient, name: str) -> ModelVersion | None:
    """The version behind alias `champion`, or None."""
    try:
        return client.get_model_version_by_alias(name, ALIAS)
    except Exception:  # noqa: BLE001 - no such model or alias
        return None


def run_of(version: ModelVersion) -> str:
    """The run a registered version was logged from (llmsim registers every version from a
    run; MLflow allows versions without one)."""
    if version.run_id is None:
        raise LlmsimError(f"{version.name} version {version.version}: no run recorded; "
                          "llmsim registers versions from a training run")
    return version.run_id


def download_model(client: MlflowClient, run_id: str, subdir: str = MODEL_DIR) -> LatencyModel:
    """Fetch a run's saved model folder and load it (schema checked)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_id, subdir, tmp)
        except Exception as exc:  # noqa: BLE001
            raise LlmsimError(f"run {run_id}: cannot fetch artifact {subdir!r}: {exc}") from None
        return LatencyModel.load(path)


def download_heldout_rows(client: MlflowClient, run_id: str) -> pd.DataFrame:
    with tempfile.TemporaryDirectory() as tmp:
        path = client.download_artifacts(run_id, HELDOUT_TEST_FILE, tmp)
        return pd.read_parquet(path)
