# SPDX-License-Identifier: Apache-2.0
"""What simulate uses: the champion predictor for (hardware, family), fetched once and cached.

`load_champion` reads the registered model ``llmsim-<hardware>-<family>`` at alias `champion`
from MLflow; `load_predictor_dir` reads a model folder on disk (tests, offline use).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from analytical.hardware import HardwareSpec, get_hardware
from analytical.ops import OpSpec
from analytical.paths import default_tracking_uri
from predictors.model import LatencyModel


@dataclass(frozen=True, slots=True, kw_only=True)
class PredictorInfo:
    name: str  # registered model name, or the folder
    version: str | None
    run_id: str | None
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


class Predictor:
    """A loaded latency model for one (hardware, family); `predict` returns seconds."""

    def __init__(self, model: LatencyModel, hw: HardwareSpec, info: PredictorInfo) -> None:
        self.model = model
        self.hw = hw
        self.info = info

    @property
    def hardware(self) -> str:
        return self.model.hardware

    @property
    def family(self) -> str:
        return self.model.family

    def predict(self, ops: Sequence[OpSpec]) -> np.ndarray:
        """Latency in seconds per op, in one batched call."""
        return self.model.predict(ops, self.hw)

    def outside_domain(self, op: OpSpec) -> str | None:
        """Why the model should not answer ``op`` (a categorical value it never saw in
        training, e.g. ``"kind=send_recv"``), or None."""
        return self.model.outside_domain(op)


def load_predictor_dir(folder: str | Path, *, hw: HardwareSpec | None = None) -> Predictor:
    """A predictor from a folder written by `LatencyModel.save`."""
    model = LatencyModel.load(folder)
    return Predictor(model, hw or get_hardware(model.hardware),
                     PredictorInfo(name=str(folder), version=None, run_id=None))


def load_champion(hardware: str, family: str, *, tracking_uri: str | None = None) -> Predictor:
    """The champion for (hardware, family), cached per tracking URI; clear error if none."""
    return _load_champion(hardware, family, tracking_uri or default_tracking_uri())


def clear_cache() -> None:
    _load_champion.cache_clear()


@functools.lru_cache(maxsize=64)
def _load_champion(hardware: str, family: str, tracking_uri: str) -> Predictor:
    from predictors.tracking import (
        NoChampionError,
        champion_version,
        client_for,
        download_model,
        registered_name,
        run_of,
    )

    client = client_for(tracking_uri)
    name = registered_name(hardware, family)
    version = champion_version(client, name)
    if version is None:
        raise NoChampionError(
            f"no champion predictor for hardware {hardware!r}, family {family!r} "
            f"(registered model {name!r} in {tracking_uri}); train one with "
            f"`llmsim train run --hardware {hardware} --op {family}`")
    model = download_model(client, run_of(version))
    run = client.get_run(run_of(version))
    info = PredictorInfo(name=name, version=str(version.version), run_id=version.run_id,
                         metrics=dict(run.data.metrics), tags=dict(run.data.tags))
    return Predictor(model, get_hardware(hardware), info)
