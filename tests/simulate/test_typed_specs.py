# SPDX-License-Identifier: Apache-2.0
"""Typed all the way: closed choices are StrEnums that agree with their registries, a scenario
is parsed once into frozen specs (bad input names the field, exit 2), and an inference prediction
is an `InferenceResult` whose one `to_dict` is what the CLI prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from profiler.measurement import StoreError
from simulate.api import run
from simulate.cli.main import main as cli_main
from simulate.engines import EngineChain, EngineOptions
from simulate.inference.result import InferenceMode, InferenceResult
from simulate.inference.setup import ColocatedTenant, InferenceSetup
from simulate.inference.spec import parse_serving
from simulate.scenario import load_scenario
from simulate.search.worker import worker_chain
from simulate.search.worker_cache import RunScopedCache, new_run_id
from simulate.serving.arrival import ArrivalProcess, LognormalLength
from simulate.serving.choices import Preemption, Scheduler, ServingEngine
from simulate.serving.engine_presets import ENGINES_DIR
from simulate.serving.schedulers import SCHEDULERS

ARRIVAL = {"process": "burst", "num_requests": 2}
SCENARIOS = Path(__file__).resolve().parents[2] / "datasets" / "scenarios"


def test_enums_match_their_registries() -> None:
    assert {s.value for s in Scheduler} == set(SCHEDULERS)
    assert {e.value for e in ServingEngine} == {p.stem for p in ENGINES_DIR.glob("*.yaml")}


@pytest.mark.parametrize(("key", "value", "known"), [
    ("scheduler", "fifo", Scheduler),
    ("preemption", "drop", Preemption),
    ("engine", "tgi", ServingEngine),
])
def test_unknown_choice_names_field_and_lists_known(key: str, value: str, known: type) -> None:
    with pytest.raises(SpecError) as err:
        parse_serving({"arrival": ARRIVAL, key: value})
    assert err.value.field == f"serving.{key}"
    assert all(m.value in err.value.reason for m in known)


def test_choices_parse_to_members_and_print_as_strings() -> None:
    spec = parse_serving({"arrival": ARRIVAL, "scheduler": "chunked_prefill",
                          "preemption": "swap", "engine": "sglang"})
    assert spec.scheduler is Scheduler.CHUNKED_PREFILL
    assert spec.preemption is Preemption.SWAP
    assert spec.engine is ServingEngine.SGLANG
    assert json.dumps([spec.scheduler, spec.engine]) == '["chunked_prefill", "sglang"]'
    assert parse_serving({"arrival": ARRIVAL}).engine is None


# ---- a scenario is parsed once into typed specs; bad input exits 2 naming the field ----------

def _colocated(tmp_path: Path, fraction: float) -> Path:
    doc = yaml.safe_load((SCENARIOS / "colocated-two-7b-a100.yaml").read_text())
    doc["colocate"][1]["memory_fraction"] = fraction
    path = tmp_path / "colocated.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_scenario_holds_typed_inference_and_colocation_specs() -> None:
    served = load_scenario(SCENARIOS / "llama2-7b-continuous-qps2-a100.yaml")
    assert isinstance(served.inference, InferenceSetup) and served.training is None
    assert served.inference.serving is not None
    assert served.inference.serving.scheduler is Scheduler.CONTINUOUS
    arrival = served.inference.serving.arrival
    assert arrival.process is ArrivalProcess.POISSON and arrival.qps == 2.0
    assert served.inference.inference.input_len == LognormalLength(mean=512.0, sigma=0.6,
                                                                   max=3072)
    single = load_scenario(SCENARIOS / "llama2-7b-single-a100.yaml")
    assert single.inference is not None and single.inference.serving is None
    assert isinstance(single.inference.inference.input_len, int)
    assert not hasattr(served, "doc")
    co = load_scenario(SCENARIOS / "colocated-two-7b-a100.yaml")
    assert co.inference is None and [t.name for t in co.colocate] == ["chat", "code"]
    assert all(isinstance(t, ColocatedTenant) and t.memory_fraction == 0.45 for t in co.colocate)


@pytest.mark.parametrize(("overrides", "field"), [
    (["serving.scheduler=fifo"], "serving.scheduler"),
    (["serving.preemption=drop"], "serving.preemption"),
    (["inference.precision=fp64"], "inference.precision"),
    (["serving.slo.ttft_s=-1"], "serving.slo.ttft_s"),
    (["serving.arrival.qps=0"], "serving.arrival.qps"),
    (["serving.arrival.process=fifo"], "serving.arrival.process"),
    (["serving.arrival.warmup_requests=10000"], "serving.arrival.warmup_requests"),
    (["inference.input_len.dist=zipf"], "inference.input_len.dist"),
])
def test_bad_inference_field_fails_at_parse(overrides: list[str], field: str) -> None:
    with pytest.raises(SpecError) as err:
        load_scenario(SCENARIOS / "llama2-7b-continuous-qps2-a100.yaml", overrides)
    assert err.value.field == field


def test_colocated_fractions_are_checked_at_parse(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        load_scenario(_colocated(tmp_path, 1.5))
    assert err.value.field == "colocate[1].memory_fraction"
    with pytest.raises(SpecError, match="sum to 1.45"):
        load_scenario(_colocated(tmp_path, 1.0))


@pytest.mark.parametrize(("args", "words"), [
    (["--set", "serving.scheduler=fifo"], ["serving.scheduler", "chunked_prefill"]),
    (["--set", "serving.engine=tgi"], ["serving.engine", "sglang"]),
])
def test_cli_exits_2_naming_the_field(args: list[str], words: list[str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(["simulate", "--json", "--no-store", "--no-predictors",
                     str(SCENARIOS / "llama2-7b-continuous-qps2-a100.yaml"), *args])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert all(word in err for word in [*words, "llama2-7b-continuous-qps2-a100.yaml"])


# ---- InferenceResult: typed fields, one to_dict -----------------------------------------------

@pytest.mark.parametrize("scenario", ["llama2-7b-single-a100", "llama2-7b-continuous-qps2-a100",
                                      "spec-decode-llama2-70b-h100"])
def test_result_to_dict_is_json_ready_and_is_what_run_prints(scenario: str) -> None:
    out = run(SCENARIOS / f"{scenario}.yaml", use_store=False, use_predictors=False,
              overrides=["serving.arrival.num_requests=20"] if "qps" in scenario else (),
              trace=True)
    result = out.inference
    assert isinstance(result, InferenceResult) and result.fits
    data = result.to_dict()
    assert json.loads(json.dumps(data)) == data  # plain JSON types only
    assert data == out.data and data["mode"] == result.mode.value
    assert data["name"] == scenario and data["num_gpus"] == out.scenario.cluster.num_gpus
    assert result.step_records and result.latencies is not None  # recorded, typed ...
    assert not {"_steps", "_latencies", "step_records", "latencies"} & set(data)  # ... not JSON
    if result.mode is InferenceMode.SINGLE_BATCH:
        assert data["ttft_s"] == result.metrics.ttft_s.mean
    else:
        assert data["ttft_s"] == result.metrics.ttft_s.to_dict()
    assert (result.speculative is not None) == ("speculative" in data)


def test_does_not_fit_result_is_a_verdict() -> None:
    verdict = InferenceResult(mode=InferenceMode.DOES_NOT_FIT, reason="too big",
                              memory={"weights_gib": 130.0})
    data = verdict.to_dict()
    assert not verdict.fits and data["fits"] is False and data["mode"] == "inference"
    assert data["ttft_s"] is None and data["memory"] == {"weights_gib": 130.0}
    assert json.loads(json.dumps(data)) == data


# ---- EngineOptions: passed explicitly; worker caches scoped to one run ---------------------------

def test_engine_options_are_hashable_and_typed_not_a_keyword_mapping(tmp_path: Path) -> None:
    options = EngineOptions(use_store=False, use_predictors=False)
    assert len({options, EngineOptions(use_store=False, use_predictors=False),
                EngineOptions()}) == 2
    with pytest.raises(TypeError):
        EngineOptions(use_stroe=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        dict(options)  # type: ignore[call-overload]  # no longer a Mapping: pass it as itself
    chain = EngineChain.from_options(get_hardware("h100-sxm"), options)
    assert chain.options == options and not chain.available["store"]
    assert EngineChain(get_hardware("h100-sxm"), use_store=False,
                       use_predictors=False).options == options
    assert options.checked() == options  # no store asked: nothing to open
    with pytest.raises(StoreError, match="no measurement store"):
        EngineOptions(store_path=str(tmp_path / "missing.duckdb")).checked()


def test_worker_caches_are_scoped_to_one_run() -> None:
    made: list[int] = []
    cache = RunScopedCache()
    first = cache.get("run-a", "k", lambda: made.append(1) or object())
    assert cache.get("run-a", "k", object) is first and made == [1]
    assert cache.get("run-b", "k", lambda: made.append(2) or object()) is not first
    assert made == [1, 2]
    options = EngineOptions(use_store=False, use_predictors=False)
    run = new_run_id()
    chain = worker_chain("h100-sxm", options, run=run)
    assert worker_chain("h100-sxm", options, run=run) is chain
    assert worker_chain("h100-sxm", options, run=new_run_id()) is not chain


def test_every_stream_has_a_trace_track_and_records_carry_members() -> None:
    from analytical.layer_spec import COMM_STREAMS, Stream
    from simulate.trace import STREAM_TIDS
    from simulate.training import run_training

    assert set(STREAM_TIDS) == set(Stream) and len(set(STREAM_TIDS.values())) == len(Stream)
    assert set(COMM_STREAMS) < set(Stream) and Stream.COMPUTE not in COMM_STREAMS
    sc = load_scenario(SCENARIOS / "gpt3-175b-tp8-pp8-h100.yaml")
    result = run_training(sc, use_store=False, use_predictors=False, record=True)
    streams = {r.stream for r in result.records}
    assert all(isinstance(s, Stream) for s in streams)
    assert {Stream.COMPUTE, Stream.P2P, Stream.TP} <= streams


def test_transformer_engine_is_a_quoted_version() -> None:
    """``training.transformer_engine`` defaults to TE 2 and takes "1.8" or 1; an unquoted
    1.10 (YAML reads 1.1) is refused, naming the field."""
    doc = {"model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"parallel": {"tp": 1, "pp": 1, "dp": 8}, "global_batch": 8,
                        "seq_len": 4096}}
    spec = load_scenario(doc).training
    assert spec is not None and spec.transformer_engine == "2"
    for given, parsed in (("'1.8'", "1.8"), (1, "1")):
        t = load_scenario(doc, [f"training.transformer_engine={given}"]).training
        assert t is not None and t.transformer_engine == parsed
    for bad in ("1.10", "'v1'", "true"):
        with pytest.raises(SpecError, match="transformer_engine"):
            load_scenario(doc, [f"training.transformer_engine={bad}"])
