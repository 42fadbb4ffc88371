# SPDX-License-Identifier: Apache-2.0
"""``llmsim db compare``: run-to-run agreement of two measurements of the same operators."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from analytical.dtypes import DType
from analytical.ops import GemmSpec
from profiler.fingerprint import Fingerprint
from profiler.measurement import StoreError
from profiler.repeatability import compare_runs, load_ok_rows
from profiler.store import Measurement, Status, Store
from profiler.timing import summarize
from simulate.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CPU = Fingerprint(hardware="cpu", device_name="Test CPU", device_count=1)


def _rows(latencies: dict[str, float], backend: str = "torch.matmul") -> pd.DataFrame:
    return pd.DataFrame({"hardware": "cpu", "family": "gemm", "op_key": list(latencies),
                         "backend": backend, "median_s": list(latencies.values())})


def test_differences_are_percent_of_the_first_run_per_band():
    first = _rows({"a": 5e-6, "b": 5e-6, "c": 200e-6, "d": 1e-3})
    # a: +10%, b: -2%, c: +50%, d: unmatched in the second set
    second = _rows({"a": 5.5e-6, "b": 4.9e-6, "c": 300e-6, "e": 1e-3})
    rows = {(a.family, a.band_us): a for a in compare_runs(first, second)}
    every = rows["gemm", "all"]
    assert every.n == 3
    assert every.mean_pct == pytest.approx((10 + 2 + 50) / 3)
    assert every.median_pct == pytest.approx(10)
    assert every.max_pct == pytest.approx(50)
    assert every.over_10_pct == pytest.approx(100 / 3)  # only c is over 10% (a is exactly 10)
    assert every.median_ratio == pytest.approx(1.1)
    assert rows["gemm", "[0, 10)"].n == 2 and rows["gemm", "[100, 1000)"].n == 1
    assert ("gemm", "[10, 20)") not in rows  # empty bands are left out


def test_repeated_rows_fold_to_their_median_and_backends_stay_apart():
    first = pd.concat([_rows({"a": 1e-3}), _rows({"a": 3e-3}), _rows({"a": 2e-3}),
                       _rows({"a": 9e-3}, backend="other")])
    second = pd.concat([_rows({"a": 2e-3}), _rows({"a": 9e-3}, backend="other")])
    (every, *_) = compare_runs(first, second)
    assert every.n == 2 and every.max_pct == pytest.approx(0.0)
    with pytest.raises(StoreError, match="share no operator"):
        compare_runs(first, _rows({"z": 1e-3}))


def test_two_stacks_match_across_backends_and_the_ratio_says_which_is_slower():
    ours = _rows({"a": 1e-3, "b": 2e-3}, backend="torch.matmul")
    theirs = _rows({"a": 2e-3, "b": 3e-3, "c": 1e-3}, backend="trtllm")
    with pytest.raises(StoreError, match="share no operator"):
        compare_runs(ours, theirs)  # one run's rows never match another backend's by default
    (every, *_) = compare_runs(ours, theirs, across_backends=True)
    assert every.n == 2
    assert every.median_ratio == pytest.approx((2.0 + 1.5) / 2)  # theirs / ours
    assert every.mean_pct == pytest.approx((100 + 50) / 2)


def test_one_stack_on_two_gpus_matches_across_hardware():
    h100 = _rows({"a": 1e-3, "b": 2e-3})
    h200 = _rows({"a": 0.5e-3, "b": 2e-3}).assign(hardware="h200")
    with pytest.raises(StoreError, match="share no operator"):
        compare_runs(h100, h200)  # two GPUs never match by default
    (every, *_) = compare_runs(h100, h200, across_hardware=True)
    assert every.n == 2 and every.median_ratio == pytest.approx((0.5 + 1.0) / 2)
    other = h200.assign(backend="trtllm")
    with pytest.raises(StoreError, match="share no operator"):
        compare_runs(h100, other, across_hardware=True)  # the backend still has to match
    with pytest.raises(StoreError, match="not both"):
        compare_runs(h100, h200, across_hardware=True, across_backends=True)


def test_store_files_and_parquet_folders_load_alike(tmp_path: Path):
    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        store.insert(Measurement(op=GemmSpec(m=s, n=s, k=s, dtype=DType.FP32), fingerprint=CPU,
                                 backend="torch.matmul", status=Status.OK,
                                 timing=summarize([s * 1e-6])) for s in (8, 16))
        store.insert([Measurement(op=GemmSpec(m=4, n=4, k=4, dtype=DType.FP32), fingerprint=CPU,
                                  backend="torch.matmul", status=Status.OOM, timing=None,
                                  error="OOM")])
    assert main(["db", "export", "--parquet", str(tmp_path / "pq"), "--db", str(db)]) == 0
    from_store, from_parquet = load_ok_rows(db), load_ok_rows(tmp_path / "pq")
    assert len(from_store) == 2  # the OOM row is not a latency
    pd.testing.assert_frame_equal(from_store.sort_values("op_key").reset_index(drop=True),
                                  from_parquet.sort_values("op_key").reset_index(drop=True),
                                  check_dtype=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="no rows with status ok"):
        load_ok_rows(tmp_path / "empty")


def test_committed_h100_repeat_agrees_with_the_measured_set(capsys):
    """The committed H100 sweep and its repeat on the same machine (datasets/repeatability):
    every operator matches, and the GEMM and memory medians agree within a few percent."""
    code = main(["db", "compare", str(ROOT / "datasets/measurements/llmsim"),
                 str(ROOT / "datasets/repeatability"), "--json"])
    rows = {(r["family"], r["band_us"]): r for r in json.loads(capsys.readouterr().out)}
    assert code == 0
    assert rows["gemm", "all"]["n"] == 2480 and rows["memory", "all"]["n"] == 196
    assert rows["attention", "all"]["n"] == 1507
    assert rows["gemm", "all"]["median_pct"] < 2 and rows["memory", "all"]["median_pct"] < 1
    # the shortest kernels disagree most: the noise floor is not one number
    assert rows["attention", "[10, 20)"]["p90_pct"] > rows["attention", "[1000, inf)"]["p90_pct"]
