# SPDX-License-Identifier: Apache-2.0
"""The CPU validation loop: exact shape collection, resumable profiling, a well-formed report."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.ops import CollectiveKind, CollectiveSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind
from analytical.roofline import roofline_time
from simulate.engines import EngineChain
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracedGraph, TracedOp, TracePhase
from simulate.frontend.price import overlap_timeline, price_traced
from simulate.validate.cache import CacheRule
from simulate.validate.loop import (
    FAST_BUDGET,
    LoopConfig,
    needed_ops,
    needed_sweep,
    run_validation,
)
from simulate.validate.models import trace_validation_model, validation_model
from simulate.validate.report import ValidationReport, ValidationRow


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")


def _op(index: int, spec, category: Category) -> TracedOp:
    return TracedOp(index=index, aten="aten.x", phase=TracePhase.FORWARD, spec=spec,
                    in_shapes=(), out_shapes=(), dtype="float32", category=category,
                    bytes=int(spec.bytes) if spec is not None else 0)


def test_needed_ops_are_the_distinct_known_shapes() -> None:
    spec = validation_model("gpt2-small-test")
    traces = [trace_validation_model(spec, "forward"), trace_validation_model(spec, "train_step")]
    ops = needed_ops(traces)
    keys = [op.key for op in ops]
    assert len(keys) == len(set(keys))
    expected = {op.spec.key for t in traces for op in t.ops
                if op.spec is not None and op.category != Category.UNKNOWN}
    assert set(keys) == expected
    # forward shapes are a subset of the training step's: dedupe across traces
    assert len(ops) == len({op.spec.key for op in traces[1].ops if op.spec is not None}
                           | {op.spec.key for op in traces[0].ops if op.spec is not None})
    sweep = needed_sweep(ops, budget=FAST_BUDGET)
    points = sweep.points("cpu")
    assert [p.op.key for p in points] == sorted(keys, key=[p.op.key for p in points].index)
    assert {p.op.key for p in points} == set(keys) and len(points) == len(keys)


def test_unknown_calls_are_not_profiled_but_priced_by_the_roofline() -> None:
    hw = get_hardware("cpu")
    gemm = GemmSpec(m=64, n=64, k=64, dtype=DType.FP32)
    proxy = MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=8, cols=1024, dtype=DType.FP32)
    graph = TracedGraph(ops=(_op(0, gemm, Category.GEMM), _op(1, proxy, Category.UNKNOWN),
                             _op(2, None, Category.VIEW)), params=(), backward=False)
    assert [op.key for op in needed_ops([graph])] == [gemm.key]
    chain = EngineChain(hw, use_store=False, use_predictors=False)
    pred = price_traced(graph, chain, hw)
    expected = roofline_time(gemm, hw) + roofline_time(proxy, hw)
    assert pred.serial_s == pytest.approx(expected, rel=1e-12)
    assert pred.engine_share["roofline"] == pytest.approx(1.0)
    assert pred.ops == 2 and pred.overlap_s is None
    (row,) = pred.unknown
    assert row.count == 1 and row.share == pytest.approx(roofline_time(proxy, hw) / expected)


def test_overlap_timeline_closed_form() -> None:
    # compute 1, all-reduce 1 (ready at 1), compute 1, all-reduce 1 (ready at 2) -> ends at 3
    assert overlap_timeline([1.0, 1.0, 1.0, 1.0], [False, True, False, True]) == 3.0
    # a long all-reduce is exposed: 1 + 5 after the first compute op
    assert overlap_timeline([1.0, 5.0, 1.0], [False, True, False]) == 6.0
    hw = get_hardware("cpu")
    reduce = CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=1 << 20, group_size=2,
                            ranks_per_node=2, dtype=DType.FP32)
    gemm = GemmSpec(m=256, n=256, k=256, dtype=DType.FP32)
    graph = TracedGraph(ops=(_op(0, gemm, Category.GEMM), _op(1, reduce, Category.COLLECTIVE),
                             _op(2, gemm, Category.GEMM)), params=(), backward=True)
    pred = price_traced(graph, EngineChain(hw, use_store=False, use_predictors=False), hw)
    g, c = roofline_time(gemm, hw), roofline_time(reduce, hw)
    assert pred.overlap_s == pytest.approx(max(2 * g, g + c))
    assert pred.serial_s == pytest.approx(2 * g + c)


def test_report_summary_median_and_worst() -> None:
    def row(model: str, mode: str, predicted: float) -> ValidationRow:
        return ValidationRow(model=model, mode=mode, ops=1, distinct_ops=1,
                             predicted_s=predicted, measured_s=1.0, measured_spread=0.0,
                             engine_share={"store": 1.0}, composition_s=predicted,
                             composition_missing=0)

    report = ValidationReport(rows=(row("a", "train_step", 1.05), row("b", "train_step", 0.8),
                                    row("c", "train_step", 1.1), row("a", "forward", 3.0)),
                              unknown=(), hardware="cpu", threads=1)
    assert report.median_abs_error_pct("train_step") == pytest.approx(10.0)
    assert report.worst("train_step").model == "b"
    assert report.worst().mode == "forward"
    assert report.summary()["worst_fwd_bwd"]["error_pct"] == pytest.approx(-20.0)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(SpecError, match="modes"):
        LoopConfig(modes=("backward",))
    with pytest.raises(SpecError, match="repeats"):
        LoopConfig(repeats=0)
    with pytest.raises(Exception, match="no-such-model"):
        LoopConfig(models=("no-such-model",))


@pytest.mark.slow
def test_loop_on_one_model_fast(tmp_path: Path) -> None:
    db = tmp_path / "validate.duckdb"
    config = LoopConfig(models=("gpt2-small-test",), modes=("forward", "train_step"),
                        store_path=db, threads=1, warmup=1, repeats=2, budget=FAST_BUDGET,
                        train=False, cache=CacheRule.FIT)
    report = run_validation(config)
    assert [(r.model, r.mode) for r in report.rows] == [("gpt2-small-test", "forward"),
                                                        ("gpt2-small-test", "train_step")]
    profile = report.stages["profile"]
    assert profile["measured"] == profile["shapes"] and profile["skipped"] == 0
    assert profile["statuses"] == {"ok": profile["shapes"]}
    for row in report.rows:
        for value in (row.predicted_s, row.measured_s, row.error_pct, row.composition_s,
                      row.predictor_s):
            assert value is not None and math.isfinite(value)
        assert row.predicted_s > 0 and row.measured_s > 0
        # every shape was profiled into a fresh store: the store served all of it, so the
        # prediction IS the composition of the stored medians plus the host term
        assert row.engine_share["store"] == pytest.approx(1.0)
        assert row.composition_missing == 0
        assert row.predicted_s == pytest.approx(row.composition_s + row.host_s, rel=1e-9)
    host = report.stages["host"]
    assert set(host["probes"]) == {"gpt-neox-probe", "phi3-probe"}
    assert host["per_call_us"] > 0.0
    fwd, train = report.rows
    assert train.ops > fwd.ops and train.predicted_s > fwd.predicted_s
    assert report.median_abs_error_pct("train_step") == pytest.approx(abs(train.error_pct))
    # a rerun profiles nothing new (exact keys, same fingerprint)
    again = run_validation(LoopConfig(models=("gpt2-small-test",), modes=("forward",),
                                      store_path=db, threads=1, warmup=1, repeats=1,
                                      budget=FAST_BUDGET, train=False, cache=CacheRule.FIT))
    assert again.stages["profile"]["measured"] == 0
    assert again.stages["profile"]["skipped"] == again.stages["profile"]["shapes"]


@pytest.mark.slow
def test_loop_trains_predictors_fast(tmp_path: Path) -> None:
    config = LoopConfig(models=("gpt2-small-test",), store_path=tmp_path / "v.duckdb",
                        threads=1, warmup=1, repeats=1, budget=FAST_BUDGET, fast_train=True,
                        cache=CacheRule.FIT)
    report = run_validation(config)
    train = report.stages["train"]
    assert set(train) == {"gemm", "memory", "attention"}
    # gpt2's three modes need > 40 distinct memory-bound shapes: enough for a model; it becomes
    # champion only if it beats the baselines on its held-out shapes (a fast search on ~44
    # noisy CPU shapes may not), and the reason says which
    memory = train["memory"]
    assert memory["status"] == "trained"
    assert memory["promoted"] == any(why in memory["reason"] for why in (
        "beats every baseline", "beats or ties every baseline"))
    assert train["attention"]["status"] == "skipped"  # a handful of shapes
    for row in report.rows:  # without the store: XGBoost answers exactly when promoted
        assert (row.predictor_xgb_share > 0) == memory["promoted"]
        assert math.isfinite(row.predictor_s)


@pytest.mark.slow
def test_a_model_that_fits_the_llc_is_priced_from_the_llc_warm_store(tmp_path: Path) -> None:
    db = tmp_path / "validate.duckdb"
    base = {"models": ("mixtral-small-test",), "modes": ("forward",), "store_path": db,
            "threads": 1, "warmup": 1, "repeats": 1, "budget": FAST_BUDGET, "train": False,
            "cache": CacheRule.FIT}
    report = run_validation(LoopConfig(**base, llc_bytes=256 * 2**20))  # it fits
    (row,) = report.rows
    assert row.cache == "llc-warm" and row.working_set_bytes > 0
    assert (tmp_path / "validate-llc.duckdb").is_file()
    warm = report.stages["profile_llc"]
    assert warm["measured"] == warm["shapes"] == report.stages["profile"]["shapes"]
    assert report.stages["cache"]["warm_flush_mb"] >= 1.0
    # the prediction is the composition of the WARM store's medians plus the host term
    assert row.engine_share["store"] == pytest.approx(1.0)
    assert row.predicted_s == pytest.approx(row.composition_s + row.host_s, rel=1e-9)
    assert row.composition_cold_s is not None and row.composition_cold_s != row.composition_s
    # an LLC too small for the model: the cold store, nothing profiled warm
    cold = run_validation(LoopConfig(**base, llc_bytes=1, profile=False))
    (cold_row,) = cold.rows
    assert cold_row.cache == "cold" and "profile_llc" not in cold.stages
    assert cold_row.composition_s == pytest.approx(row.composition_cold_s, rel=1e-9)
    assert cold_row.predicted_s == pytest.approx(cold_row.composition_s + cold_row.host_s,
                                                 rel=1e-9)
