# SPDX-License-Identifier: Apache-2.0
"""Training scenarios end to end: validation errors, the shipped files, outputs and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.ops import GemmSpec
from simulate import run
from simulate.engines import EngineChain
from simulate.scenario import apply_overrides
from simulate.trace import check_trace

SCENARIOS = Path(__file__).resolve().parents[2] / "datasets" / "scenarios"
TRAINING_FILES = sorted(p for p in SCENARIOS.glob("*.yaml")
                        if "training" in yaml.safe_load(p.read_text()))
CONTRACT_KEYS = {"iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu",
                 "memory_per_gpu_gib", "breakdown", "engine_coverage", "memory", "fits",
                 "num_microbatches", "bubble_fraction", "model_flops_per_iteration"}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")


def _doc(model="llama-3-8b", gpus=None, **training):
    base = {"parallel": {"tp": 2, "pp": 2, "dp": 2, "sp": True}, "global_batch": 16,
            "micro_batch": 1, "seq_len": 4096}
    base.update(training)
    if gpus is None:
        gpus = 1
        for k in ("tp", "pp", "dp", "cp"):
            gpus *= base["parallel"].get(k, 1)
    return {"name": "t", "model": model, "hardware": {"gpu": "h100-sxm", "num_gpus": gpus},
            "training": base}


def _run(doc, **kw):
    return run(doc, use_predictors=False, **kw)


def test_shipped_training_scenarios_cover_the_issue():
    names = {p.stem for p in TRAINING_FILES}
    assert {"gpt2-dp8-a100", "llama2-13b-tp4-a100", "gpt3-175b-tp8-pp8-h100",
            "llama3-70b-tp8-pp4-selective-h100", "llama3-405b-tp8-pp16-cp-16k-h100",
            "mixtral-8x7b-ep-train-h100", "llama3-8b-fsdp-h100", "llama3-70b-fp8-h100",
            "gpt3-175b-megatron-a100"} <= names


@pytest.mark.parametrize("path", TRAINING_FILES, ids=lambda p: p.stem)
def test_every_training_scenario_runs(path):
    data = _run(path).data
    assert CONTRACT_KEYS <= set(data)
    assert data["fits"] is True
    assert 0.0 < data["mfu"] < 1.0
    assert sum(data["engine_coverage"].values()) == pytest.approx(1.0)
    assert sum(data["breakdown"].values()) == pytest.approx(data["iteration_time_s"])


@pytest.mark.parametrize(("training", "field"), [
    ({"parallel": {"tp": 2, "pp": 2, "dp": 4}, "gpus": 8}, "training.parallel.dp"),
    ({"parallel": {"tp": 3, "pp": 1, "dp": 1}, "global_batch": 3}, "training.parallel.tp"),
    ({"parallel": {"tp": 1, "pp": 64, "dp": 1}}, "training.parallel.pp"),
    ({"parallel": {"tp": 2, "pp": 2, "dp": 2, "ep": 2}}, "training.parallel.ep"),
    ({"global_batch": 15}, "training.global_batch"),
    ({"global_batch": 2}, "training.global_batch"),  # 1 micro-batch < pp=2 under 1f1b
    ({"schedule": "interleaved"}, "training.parallel.vpp"),
    ({"parallel": {"tp": 2, "pp": 2, "dp": 2, "vpp": 2}}, "training.parallel.vpp"),
    ({"parallel": {"tp": 2, "pp": 2, "dp": 2, "vpp": 2}, "schedule": "interleaved",
      "global_batch": 6}, "training.global_batch"),
    ({"parallel": {"tp": 2, "pp": 2, "dp": 2, "bogus": 1}}, "training.parallel.bogus"),
    ({"recompute": "some"}, "training.recompute"),
    ({"precision": "int4"}, "training.precision"),
    ({"parallel": {"tp": 1, "pp": 1, "dp": 1, "sp": True}}, "training.parallel.sp"),
    ({"seq_len": 4095, "parallel": {"tp": 1, "pp": 1, "dp": 4, "cp": 2}},
     "training.seq_len"),
    ({"overlap": {"compute_slowdown": 0.5}}, "training.overlap.compute_slowdown"),
])
def test_bad_layouts_name_the_field(training, field):
    gpus = training.pop("gpus", None)
    with pytest.raises(SpecError) as info:
        _run(_doc(gpus=gpus, **training))
    assert info.value.field == field


def test_unknown_top_level_and_nested_keys():
    with pytest.raises(SpecError) as info:
        _run({**_doc(), "trainig": {}})
    assert info.value.field == "trainig"
    with pytest.raises(SpecError) as info:
        _run(_doc(overlap={"tp_com": True}))
    assert info.value.field == "training.overlap.tp_com"


def test_moe_rules():
    with pytest.raises(SpecError) as info:  # 8 experts over ep=3
        _run(_doc("mixtral-8x7b", gpus=6, parallel={"dp": 6, "ep": 3}, global_batch=12))
    assert info.value.field == "training.parallel.ep"
    with pytest.raises(SpecError) as info:  # MoE + TP without SP
        _run(_doc("mixtral-8x7b", gpus=16, parallel={"tp": 2, "dp": 8, "ep": 8},
                  global_batch=16))
    assert info.value.field == "training.parallel.sp"


def test_fp8_rejected_on_a100():
    doc = _doc(precision="fp8")
    doc["hardware"]["gpu"] = "a100-sxm-80gb"
    with pytest.raises(SpecError) as info:
        _run(doc)
    assert info.value.field == "training.precision"


def test_seq_len_beyond_model_is_a_warning():
    data = _run(_doc("gpt2", gpus=1, parallel={}, global_batch=2, seq_len=2048)).data
    assert any("max_seq_len" in w for w in data["warnings"])


def test_oom_verdict_has_memory_and_no_latency():
    data = _run(_doc("llama-3-70b", parallel={"tp": 8}, global_batch=8)).data
    assert data["fits"] is False
    assert data["memory"]["total_gib"] > data["memory"]["capacity_gib"]
    assert data["memory_per_gpu_gib"] > 80
    for key in ("iteration_time_s", "tokens_per_s", "tflops_per_gpu", "mfu", "breakdown"):
        assert data[key] is None


def test_same_input_gives_identical_json():
    a = json.dumps(_run(_doc()).data, sort_keys=True)
    b = json.dumps(_run(_doc()).data, sort_keys=True)
    assert a == b


def test_overrides():
    doc = apply_overrides(_doc(), ["training.parallel.tp=4", "training.parallel.dp=1",
                                   "training.overlap.tp_comm=true"])
    assert doc["training"]["parallel"]["tp"] == 4
    assert doc["training"]["overlap"] == {"tp_comm": True}
    with pytest.raises(SpecError):
        apply_overrides(_doc(), ["training.parallel"])


def test_tp_overlap_never_slower_than_exposed():
    exposed = _run(_doc()).data
    hidden = _run(_doc(overlap={"tp_comm": True})).data
    assert hidden["iteration_time_s"] < exposed["iteration_time_s"]
    assert hidden["breakdown"]["compute"] == pytest.approx(exposed["breakdown"]["compute"])


def test_trace_passes_schema_check():
    out = _run(_doc(), trace=True)
    check_trace(out.trace)
    tracks = {(e["pid"], e["tid"]) for e in out.trace["traceEvents"] if e["ph"] == "X"}
    assert {(0, 0), (1, 0), (0, 1), (1, 1), (0, 2)} <= tracks  # compute, p2p, dp per stage
    names = [e["name"] for e in out.trace["traceEvents"] if e["pid"] == 0 and e["tid"] == 0]
    assert names.count("optimizer") == 1
    with pytest.raises(SpecError):
        check_trace({"traceEvents": [{"name": "x", "ph": "X", "pid": 0, "tid": 0, "ts": -1,
                                      "dur": 1}]})


def test_store_answers_first():
    class FakeStore:
        def measured_by_key(self, family, hardware):  # our own timer measured k=128 only
            return {GemmSpec(m=128, n=128, k=128).key: (1.0, "profiled"),
                    GemmSpec(m=128, n=128, k=256).key:
                        (1.0, "imported:aiconfigurator-0.12.0/trtllm-1.3.0rc20")} \
                if family == "gemm" else {}

    chain = EngineChain(get_hardware("h100-sxm"), use_store=False, use_predictors=False)
    chain._store = FakeStore()
    ours, imported = chain.estimate_many([GemmSpec(m=128, n=128, k=128),
                                          GemmSpec(m=128, n=128, k=256)])
    assert (ours.engine, ours.latency_s, ours.stack) == ("store", 1.0, "profiled")
    assert (imported.engine, imported.stack) == ("store", "trtllm")  # graph-replayed rows


def test_predictor_answers_before_roofline():
    import numpy as np

    class FakePredictor:
        def predict(self, ops):
            return np.full(len(ops), 2.0)

        def outside_domain(self, op):
            return None if op.dtype == "bf16" else f"dtype={op.dtype}"

    chain = EngineChain(get_hardware("h100-sxm"), use_store=False, use_predictors=True)
    chain._predictors["gemm"] = FakePredictor()
    chain._predictors["memory"] = None
    gemm = GemmSpec(m=64, n=64, k=64)
    from analytical.dtypes import DType
    from analytical.ops import MemoryBoundSpec, MemoryOpKind

    mem = MemoryBoundSpec(kind=MemoryOpKind.ADD, rows=8, cols=8)
    fp8 = GemmSpec(m=64, n=64, k=64, dtype=DType.FP8)
    est = chain.estimate_many([gemm, mem, gemm, fp8])
    assert [e.engine for e in est] == ["xgboost", "roofline", "xgboost", "roofline"]
    assert est[0].latency_s == 2.0
    # a dtype the champion never saw is not asked of it: the roofline says why it answered
    assert est[3].detail == "roofline (gemm champion never trained on dtype=fp8)"
    assert chain.ops_served_by(("roofline",)) == [mem, fp8]


def test_emit_missing_is_a_valid_sweep(tmp_path):
    from profiler.sweep import parse_sweep

    out = _run(_doc())
    sweep = parse_sweep(out.missing_sweep, source="missing")
    families = {e.family for e in sweep.entries}
    assert {"gemm", "attention", "memory", "collective"} <= families
    assert sum(len(e.ops) for e in sweep.entries) > 20


def test_cli_json_trace_plot_and_missing(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(_doc()))
    trace, plot, missing = tmp_path / "t.json", tmp_path / "b.png", tmp_path / "m.yaml"
    proc = subprocess.run([sys.executable, "-m", "simulate.cli.main", "simulate", str(scenario),
                           "--json", "--no-predictors", "--trace", str(trace), "--plot",
                           str(plot), "--emit-missing", str(missing), "--set",
                           "training.global_batch=32"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["num_microbatches"] == 16
    check_trace(json.loads(trace.read_text()))
    assert plot.stat().st_size > 1000
    assert yaml.safe_load(missing.read_text())["device"] == "cuda"
    bad = subprocess.run([sys.executable, "-m", "simulate.cli.main", "simulate", str(scenario),
                          "--set", "training.parallel.tp=3"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2
    assert "training.parallel" in bad.stderr and "Traceback" not in bad.stderr
