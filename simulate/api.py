# SPDX-License-Identifier: Apache-2.0
"""The Python API behind ``llmsim simulate``: `run(scenario)` -> `SimulationOutput`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from analytical.errors import InfeasibleError
from analytical.hardware import get_hardware
from simulate.engines import EngineChain, EngineOptions
from simulate.inference.outputs import serving_trace
from simulate.inference.result import InferenceMode, InferenceResult, RunHead
from simulate.report import missing_sweep, result_to_dict
from simulate.scenario import Scenario, load_scenario
from simulate.trace import chrome_trace
from simulate.training import TrainingResult, run_training


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationOutput:
    """What one scenario predicts: a training or an inference result (exactly one is set)."""

    scenario: Scenario
    training: TrainingResult | None = None
    inference: InferenceResult | None = None
    missing_sweep: dict[str, Any] | None = None
    trace: dict[str, Any] | None = None

    @property
    def data(self) -> dict[str, Any]:
        """The JSON object the CLI prints (built from the result on each call)."""
        if self.training is not None:
            return result_to_dict(self.training)
        assert self.inference is not None
        return self.inference.to_dict()

    @property
    def latencies(self) -> Mapping[str, Any] | None:
        """Per-request arrays of a serving run (for CDFs), when the run recorded them."""
        return self.inference.latencies if self.inference is not None else None

    @property
    def fits(self) -> bool:
        return self.training.fits if self.training is not None else bool(
            self.inference and self.inference.fits)


def run(scenario: str | Path | Mapping[str, Any] | Scenario, *, overrides: Sequence[str] = (),
        store_path: str | Path | None = None, tracking_uri: str | None = None,
        use_store: bool = True, use_predictors: bool = True, trace: bool = False,
        latencies: bool = False, options: EngineOptions | None = None) -> SimulationOutput:
    """Predict a scenario (file path, mapping or parsed `Scenario`), training or inference.

    ``options`` say which engines answer; without them the four engine keywords do.
    ``latencies`` keeps a serving run's per-request arrays without recording its steps or
    building the trace (``trace`` does all three).
    """
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario, overrides)
    hw = get_hardware(sc.cluster.gpu)
    if options is None:
        options = EngineOptions(store_path=None if store_path is None else str(store_path),
                                use_store=use_store, use_predictors=use_predictors,
                                tracking_uri=tracking_uri)
    chain = EngineChain.from_options(hw, options)
    if sc.training is not None:
        result = run_training(sc, chain=chain, record=trace)
        trace_obj = chrome_trace(result.records, name=sc.name) if trace and result.fits else None
        return SimulationOutput(scenario=sc, training=result, trace=trace_obj,
                                missing_sweep=_missing(chain, sc.name))
    inference = _inference(sc, chain, record=trace, latencies=latencies)
    steps = inference.step_records
    trace_obj = serving_trace(steps, name=sc.name) if trace and steps else None
    return SimulationOutput(scenario=sc, inference=inference,
                            missing_sweep=_missing(chain, sc.name), trace=trace_obj)


def _missing(chain: EngineChain, name: str) -> dict[str, Any]:
    return missing_sweep(chain.ops_served_by(("xgboost", "xgboost-transfer", "roofline")), name)


def _inference(sc: Scenario, chain: EngineChain, *, record: bool,
               latencies: bool = False) -> InferenceResult:
    """Inference/serving prediction; a model that does not fit gets a verdict, no latency."""
    from analytical.model import load_model
    from simulate.inference.predict import predict_colocated, predict_inference

    num_gpus = sc.cluster.num_gpus
    head = RunHead(name=sc.name, model=sc.model, hardware=chain.hardware.name, num_gpus=num_gpus)
    try:
        if sc.colocate:
            result = predict_colocated(sc.colocate, hw=chain.hardware, num_gpus=num_gpus,
                                       estimator=chain, base_dir=sc.base_dir)
        else:
            assert sc.inference is not None  # parse_scenario: exactly one mode
            result = predict_inference(sc.inference, model=load_model(sc.model),
                                       hw=chain.hardware, num_gpus=num_gpus, estimator=chain,
                                       base_dir=sc.base_dir, record_steps=record,
                                       keep_latencies=latencies)
    except InfeasibleError as exc:
        return InferenceResult(mode=InferenceMode.DOES_NOT_FIT, reason=str(exc),
                               memory=exc.details, head=head)
    return replace(result, head=head)
