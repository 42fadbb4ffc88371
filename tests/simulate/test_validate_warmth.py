# SPDX-License-Identifier: Apache-2.0
"""The measured cache rule of the CPU validation: the warm fraction of a probe, its curve over
working sets, the blend of the two stores' prices, the cold flush and the CLI/JSON wiring."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from analytical.errors import SpecError
from profiler.timers import FLUSH_CHUNK_BYTES, flush_chunks
from simulate.cli.main import cli
from simulate.frontend.price import TracedPrediction
from simulate.validate.cache import (
    MAX_COLD_FLUSH_BYTES,
    MIN_COLD_FLUSH_BYTES,
    CacheRule,
    cold_flush_bytes,
)
from simulate.validate.loop import FAST_BUDGET, LoopConfig, run_validation
from simulate.validate.models import VALIDATION_MODELS
from simulate.validate.report import ValidationRow, row_dict
from simulate.validate.warmth import (
    WARMTH_PROBES,
    WarmthCurve,
    WarmthPoint,
    blend,
    fit_curve,
    non_increasing,
    warm_fraction,
)

MiB = 2**20


def test_warm_fraction_is_where_the_measured_model_sits_between_the_stores() -> None:
    # cold 10, warm 4, host 1: a model measured at 8 ran (10 - 7) / 6 = 0.5 of the way warm
    assert warm_fraction(10.0, 4.0, 8.0, 1.0) == pytest.approx(0.5)
    assert warm_fraction(10.0, 4.0, 11.0, 1.0) == pytest.approx(0.0)  # exactly cold
    assert warm_fraction(10.0, 4.0, 5.0, 1.0) == pytest.approx(1.0)  # exactly warm
    assert warm_fraction(10.0, 4.0, 20.0, 1.0) == 0.0  # slower than cold: clamped
    assert warm_fraction(10.0, 4.0, 2.0, 1.0) == 1.0  # faster than warm: clamped
    assert warm_fraction(4.0, 4.0, 3.0, 0.0) is None  # the stores agree: no information
    assert warm_fraction(3.0, 4.0, 3.0, 0.0) is None
    assert warm_fraction(math.nan, 4.0, 3.0, 0.0) is None


def _point(mode: str, mib: int, f: float) -> WarmthPoint:
    # cold 10 ms, warm 0, no host: measured = (1 - f) * 10 ms
    return WarmthPoint(probe="p", mode=mode, working_set_bytes=mib * MiB,
                       measured_s=(1 - f) * 0.010, cold_s=0.010, warm_s=0.0, host_s=0.0)


def test_curve_is_linear_in_log_working_set_and_constant_beyond() -> None:
    curve = fit_curve([_point("forward", 4, 1.0), _point("forward", 64, 0.0),
                       _point("generate", 8, 0.6), _point("generate", 8, 0.2)])
    assert curve.fraction("forward", 16 * MiB) == pytest.approx(0.5)  # log-midpoint of 4, 64
    assert curve.fraction("forward", 8 * MiB) == pytest.approx(0.75)
    assert curve.fraction("forward", 1 * MiB) == pytest.approx(1.0)  # below: first knot
    assert curve.fraction("forward", 2**40) == pytest.approx(0.0)  # beyond: last knot
    assert curve.fraction("generate", 100 * MiB) == pytest.approx(0.4)  # equal sizes averaged
    assert curve.fraction("train_step", 8 * MiB) == 0.0  # no knot: cold, the default
    # a point whose stores agree carries no fraction and makes no knot
    flat = WarmthPoint(probe="p", mode="train_step", working_set_bytes=MiB, measured_s=1.0,
                       cold_s=1.0, warm_s=1.0, host_s=0.0)
    assert fit_curve([flat]).knots == {}
    assert WarmthCurve(knots={}).to_dict() == {}


def test_the_curve_never_rises_with_the_working_set() -> None:
    assert non_increasing([0.9, 0.5, 0.0, 0.7, 0.68], [1.0] * 5) == pytest.approx(
        [0.9, 0.5, 0.46, 0.46, 0.46])
    assert non_increasing([0.2, 0.6], [3.0, 1.0]) == pytest.approx([0.3, 0.3])  # weighted
    assert non_increasing([1.0, 0.5, 0.0], [1.0] * 3) == [1.0, 0.5, 0.0]  # already in order
    curve = fit_curve([_point("forward", 4, 0.2), _point("forward", 64, 0.6)])
    assert curve.fraction("forward", 4 * MiB) == pytest.approx(0.4)
    assert curve.fraction("forward", 64 * MiB) == pytest.approx(0.4)


def _prediction(serial: float, store: float) -> TracedPrediction:
    return TracedPrediction(serial_s=serial, overlap_s=None,
                            per_engine_s={"store": store, "roofline": serial - store},
                            per_category_s={"gemm": serial}, ops=3, distinct_ops=2, flops=1.0)


def test_a_rows_price_moves_from_the_cold_store_to_the_warm_one_as_f_grows() -> None:
    warm, cold = _prediction(2.0, 2.0), _prediction(6.0, 5.0)
    prices = [blend(warm, cold, f).serial_s for f in (0.0, 0.25, 0.5, 1.0)]
    assert prices == pytest.approx([6.0, 5.0, 4.0, 2.0])
    half = blend(warm, cold, 0.5)
    assert half.per_engine_s == pytest.approx({"store": 3.5, "roofline": 0.5})
    assert half.per_category_s == pytest.approx({"gemm": 4.0})
    assert half.ops == cold.ops


def test_the_cold_flush_follows_the_llc() -> None:
    assert cold_flush_bytes(300 * MiB) == 600 * MiB  # the lent Xeon VM's L3
    assert cold_flush_bytes(32 * MiB) == 64 * MiB  # this EPYC: today's 64 MiB
    assert cold_flush_bytes(8 * MiB) == MIN_COLD_FLUSH_BYTES == 64 * MiB  # never less
    assert cold_flush_bytes(0) == MIN_COLD_FLUSH_BYTES  # unknown LLC
    assert cold_flush_bytes(2**40) == MAX_COLD_FLUSH_BYTES  # a buffer that fits in memory
    # a flush beyond one chunk is written by one thread per chunk, at most one per CPU
    assert flush_chunks(64 * MiB, cpus=16) == 1
    assert flush_chunks(600 * MiB, cpus=16) == -(-600 * MiB // FLUSH_CHUNK_BYTES) == 10
    assert flush_chunks(600 * MiB, cpus=2) == 2
    assert flush_chunks(600 * MiB, cpus=1) == 1


def test_probes_are_not_validation_models_and_span_the_caches() -> None:
    assert not set(WARMTH_PROBES) & set(VALIDATION_MODELS)
    assert len(WARMTH_PROBES) >= 4


def test_measured_is_the_default_rule_of_the_loop_and_the_cli() -> None:
    assert LoopConfig().cache == CacheRule.MEASURED
    with pytest.raises(SpecError, match="warmth_probes"):
        LoopConfig(warmth_probes=("gpt2-small-test",))  # a validation model is no probe
    help_text = CliRunner().invoke(cli, ["validate", "cpu", "--help"]).output
    assert "measured" in help_text and "[default: measured]" in help_text
    row = ValidationRow(model="m", mode="forward", ops=1, distinct_ops=1, predicted_s=0.011,
                        host_s=0.001, measured_s=0.010, measured_spread=0.0,
                        engine_share={"store": 1.0}, composition_s=0.010,
                        composition_missing=0, cache="measured", cache_fraction=0.25,
                        composition_cold_s=0.012, composition_fit_s=0.006)
    out = row_dict(row)
    assert out["cache"] == "measured" and out["cache_fraction"] == 0.25
    assert out["composition_fit_ms"] == pytest.approx(6.0)
    assert out["fit_error_pct"] == pytest.approx(-30.0)  # (0.011 - 0.010 + 0.006) vs 0.010
    assert out["error_pct"] == pytest.approx(10.0)


@pytest.mark.slow
def test_the_loop_prices_each_row_between_the_stores_by_the_measured_curve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulate.validate.loop as loop

    curve = WarmthCurve(knots={"forward": ((MiB, 0.25),)})
    monkeypatch.setattr(loop, "measure_warmth", lambda *a, **k: (curve, []))
    report = run_validation(LoopConfig(
        models=("mixtral-small-test",), modes=("forward",), store_path=tmp_path / "v.duckdb",
        threads=1, warmup=1, repeats=1, budget=FAST_BUDGET, train=False, llc_bytes=1))
    (row,) = report.rows
    assert row.cache == "measured" and row.cache_fraction == pytest.approx(0.25)
    # every shape profiled in both stores; an LLC of 1 byte: the fit rule says cold
    assert report.stages["profile_llc"]["shapes"] == report.stages["profile"]["shapes"]
    assert row.composition_fit_s == pytest.approx(row.composition_cold_s, rel=1e-9)
    warm = (row.composition_s - 0.75 * row.composition_cold_s) / 0.25
    assert 0 < warm != pytest.approx(row.composition_cold_s)
    assert row.predicted_s == pytest.approx(row.composition_s + row.host_s, rel=1e-9)
    assert report.stages["warmth"] == {"points": [], "curve": {"forward": [
        {"working_set_mb": 1.0, "f": 0.25}]}}


def test_a_chunked_flush_writes_every_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from profiler import timers

    monkeypatch.setattr(timers, "FLUSH_CHUNK_BYTES", MiB)
    monkeypatch.setattr(timers.os, "cpu_count", lambda: 3)
    monkeypatch.setattr(timers, "_flush_pool", [])  # a pool of this test's size, then dropped
    nbytes = 4 * MiB + 8
    assert timers.flush_chunks(nbytes) == 3
    buf = np.ones(nbytes // 8)
    monkeypatch.setitem(timers._cpu_flush_buffer, nbytes, buf)
    timers._cpu_flush(nbytes)
    assert not buf.any()  # the calling thread's chunk and the pool's
