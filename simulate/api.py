# SPDX-License-Identifier: Apache-2.0
"""The Python API behind ``llmsim simulate``: `run(scenario)` -> `SimulationOutput`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.errors import InfeasibleError
from analytical.hardware import get_hardware
from simulate.engines import EngineChain
from simulate.inference.outputs import serving_trace
from simulate.report import missing_sweep, result_to_dict
from simulate.scenario import Scenario, load_scenario
from simulate.trace import chrome_trace
from simulate.training import TrainingResult, run_training


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationOutput:
    """What one scenario predicts: ``data`` is the JSON object the CLI prints."""

    scenario: Scenario
    data: dict[str, Any]
    training: TrainingResult | None = None
    missing_sweep: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None
    latencies: dict[str, Any] | None = None  # per-request arrays of a serving run (for CDFs)

    @property
    def fits(self) -> bool:
        return bool(self.data.get("fits", True))


def run(scenario: str | Path | Mapping[str, Any] | Scenario, *, overrides: Sequence[str] = (),
        store_path: str | Path | None = None, tracking_uri: str | None = None,
        use_store: bool = True, use_predictors: bool = True, trace: bool = False
        ) -> SimulationOutput:
    """Predict a scenario (file path, mapping or parsed `Scenario`), training or inference."""
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario, overrides)
    hw = get_hardware(sc.cluster.gpu)
    chain = EngineChain(hw, store_path=store_path, use_store=use_store,
                        use_predictors=use_predictors, tracking_uri=tracking_uri)
    if sc.training is not None:
        result = run_training(sc, chain=chain, record=trace)
        data = result_to_dict(result)
        trace_obj = chrome_trace(result.records, name=sc.name) if trace and result.fits else None
        return SimulationOutput(scenario=sc, data=data, training=result, trace=trace_obj,
                                missing_sweep=_missing(chain, sc.name))
    data = _inference(sc, chain, record=trace)
    steps = data.pop("_steps", None)
    latencies = data.pop("_latencies", None)
    trace_obj = serving_trace(steps, name=sc.name) if trace and steps else None
    return SimulationOutput(scenario=sc, data=data, missing_sweep=_missing(chain, sc.name),
                            trace=trace_obj, latencies=latencies)


def _missing(chain: EngineChain, name: str) -> dict[str, Any]:
    return missing_sweep(chain.ops_served_by(("xgboost", "xgboost-transfer", "roofline")), name)


def _inference(sc: Scenario, chain: EngineChain, *, record: bool) -> dict[str, Any]:
    """Inference/serving prediction; a model that does not fit gets a verdict, no latency."""
    from analytical.model import load_model
    from simulate.inference.predict import predict_colocated, predict_inference

    def estimate(ops):
        return [(e.latency_s, e.engine) for e in chain.estimate_many(ops)]

    num_gpus = sc.cluster.num_gpus
    head = {"name": sc.name, "model": sc.model, "hardware": chain.hardware.name,
            "num_gpus": num_gpus}
    try:
        if "colocate" in sc.doc:
            data = predict_colocated(sc.doc, hw=chain.hardware, num_gpus=num_gpus,
                                     estimate=estimate, base_dir=sc.base_dir)
        else:
            data = predict_inference(sc.doc, model=load_model(sc.model), hw=chain.hardware,
                                     num_gpus=num_gpus, estimate=estimate, base_dir=sc.base_dir,
                                     record_steps=record)
    except InfeasibleError as exc:
        return {**head, "mode": "inference", "fits": False, "reason": str(exc),
                "memory": exc.details, "ttft_s": None, "tpot_s": None, "e2e_latency_s": None,
                "throughput_tokens_per_s": None, "requests_per_s": None}
    return {**head, **data}
