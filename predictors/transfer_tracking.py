# SPDX-License-Identifier: Apache-2.0
"""MLflow for the transfer predictor: one run per training, registered model
``llmsim.transfer.<family>``, alias `champion` (what the engine chain asks).

The name does not start with ``llmsim-``, so the per-(hardware, family) report and promotion
(`predictors.report`, `predictors.promote`) never mistake it for one of theirs. A new version
takes the alias only with evidence that it beats what the chain would otherwise use on a GPU
it never saw: a leave-one-GPU-out evaluation ran (``--loo`` or ``--leave-out``) and the median
over held-out GPUs of its MAPE is below the roofline's on the same rows (`gate`); and it was
trained on
at least as many GPUs as the current champion (a ``--leave-out`` model does not replace the full
one). Run
artifacts: ``model/`` (``model.ubj`` + ``schema.json``) and, when the leave-one-GPU-out
evaluation ran, ``leave_one_out.json``.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from analytical.errors import LlmsimError
from analytical.paths import default_tracking_uri
from predictors.tracking import (
    ALIAS,
    LoggedRun,
    NoChampionError,
    _experiment_id,
    champion_version,
    client_for,
    run_of,
)
from predictors.transfer import TransferConfig, TransferModel
from predictors.transfer_data import TransferData
from predictors.transfer_eval import ALL, FoldResult
from predictors.transfer_features import TRANSFER_SCHEMA_VERSION

MODEL_DIR = "model"


def registered_transfer_name(family: str) -> str:
    return f"llmsim.transfer.{family}"


def fold_metrics(folds: Sequence[FoldResult]) -> dict[str, float]:
    """``loo.<gpu>.<stack>.<transfer|roofline|denominator>.<metric>`` for every fold."""
    out: dict[str, float] = {}
    for fold in folds:
        for stack, metrics in fold.transfer.items():
            engines = [("transfer", metrics), ("roofline", fold.roofline[stack])]
            if stack in fold.denominator:
                engines.append(("denominator", fold.denominator[stack]))
            for engine, m in engines:
                out |= {f"loo.{fold.heldout}.{stack}.{engine}.{k}": float(v)
                        for k, v in m.as_dict().items() if v == v}
    return out


def gate(folds: Sequence[FoldResult]) -> tuple[bool, str]:
    """(passes, why): over the held-out GPUs, the median of the transfer model's MAPE beats
    the median of the roofline's on the same rows. Each held-out GPU stands for one unseen GPU
    and counts once, whatever its rows: pooled over rows, one GPU whose YAML link does not
    describe the measured machine (A100 PCIe collectives, 3,000 rows 384% off for the link
    model) decided the verdict for all the others."""
    scored = [f for f in folds if f.transfer[ALL].n > 0]
    if not folds:
        return False, "no leave-one-GPU-out evaluation (run with --loo)"
    if not scored:
        return False, "no held-out row could be scored"
    ours = float(np.median([f.transfer[ALL].mape for f in scored]))
    roof = float(np.median([f.roofline[ALL].mape for f in scored]))
    n = sum(f.transfer[ALL].n for f in scored)
    verdict = "beats" if ours < roof else "does not beat"
    return ours < roof, (f"median held-out MAPE over {len(scored)} GPUs ({n} rows) {ours:.1f}% "
                         f"{verdict} the roofline's {roof:.1f}%")


def _tags(model: TransferModel, data: TransferData, config: TransferConfig) -> dict[str, str]:
    return {"kind": "transfer", "family": model.family, "gpus": ",".join(model.gpus),
            "stacks": ",".join(model.stacks), "default_stack": model.default_stack,
            "schema_version": str(TRANSFER_SCHEMA_VERSION),
            "data_fingerprint": str(data.fingerprint), "seed": str(config.seed),
            "nthread": str(config.nthread), "rows_per_gpu_cap": str(data.cap),
            "skipped_gpus": ",".join(f"{k} ({v})" for k, v in data.skipped.items()),
            "floor_cycles": repr(model.floor_cycles),
            **{f"provenance.{n}": ",".join(g.provenances) for n, g in data.gpus.items()}}


def log_transfer(model: TransferModel, data: TransferData, config: TransferConfig, *,
                 folds: Sequence[FoldResult] = (),
                 tracking_uri: str | None = None) -> tuple[LoggedRun, bool]:
    """Log one transfer model as a run, register it; returns (run, took the champion alias)."""
    import mlflow

    client = client_for(tracking_uri)
    experiment_id = _experiment_id(client)
    name = registered_transfer_name(model.family)
    params = {**{k: str(v) for k, v in asdict(model.params).items()},
              "n_trees": str(model.n_trees), "rows": str(model.rows)}
    with mlflow.start_run(experiment_id=experiment_id,
                          run_name=f"transfer-{model.family}") as run:
        mlflow.log_params(params)
        mlflow.set_tags(_tags(model, data, config) | {"gate": gate(folds)[1]})
        mlflow.log_metrics(fold_metrics(folds))
        with tempfile.TemporaryDirectory() as tmp:
            model.save(Path(tmp) / MODEL_DIR)
            if folds:
                (Path(tmp) / "leave_one_out.json").write_text(
                    json.dumps([f.as_dict() for f in folds], indent=2))
            mlflow.log_artifacts(tmp)
        run_id = run.info.run_id
    try:
        client.get_registered_model(name)
    except Exception:  # noqa: BLE001 - mlflow raises its own RestException subclasses
        client.create_registered_model(name, tags={"kind": "transfer", "family": model.family})
    source = f"{client.get_run(run_id).info.artifact_uri}/{MODEL_DIR}"
    version = client.create_model_version(name, source=source, run_id=run_id,
                                          tags={"gpus": ",".join(model.gpus)})
    current = champion_version(client, name)
    held = 0 if current is None else len((current.tags or {}).get("gpus", "").split(","))
    promoted = gate(folds)[0] and len(model.gpus) >= held
    if promoted:
        client.set_registered_model_alias(name, ALIAS, version.version)
    clear_cache()
    return LoggedRun(run_id=run_id, name=name, version=str(version.version)), promoted


def load_transfer(family: str, *, tracking_uri: str | None = None) -> TransferModel:
    """The champion transfer model of ``family``, cached per tracking URI (its absence too:
    the engine chain asks once per batch of new shapes); clear error if there is none."""
    uri = tracking_uri or default_tracking_uri()
    model = _load(family, uri)
    if model is None:
        raise NoChampionError(f"no transfer predictor for {family!r} in {uri}; train one with "
                          f"`llmsim train transfer --op {family} --loo`")
    return model


def clear_cache() -> None:
    _load.cache_clear()


@functools.lru_cache(maxsize=16)
def _load(family: str, tracking_uri: str) -> TransferModel | None:
    client = client_for(tracking_uri)
    version = champion_version(client, registered_transfer_name(family))
    if version is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        try:
            path = client.download_artifacts(run_of(version), MODEL_DIR, tmp)
        except Exception as exc:  # noqa: BLE001
            raise LlmsimError(f"run {version.run_id}: cannot fetch {MODEL_DIR!r}: {exc}") from None
        return TransferModel.load(path)
