# SPDX-License-Identifier: Apache-2.0
"""Interruption: a ``db import-parquet``, ``db merge`` or ``profile run`` process killed with
SIGKILL at each phase (``$LLMSIM_TEST_CRASH_AT``, `profiler.store_file.crash_point`) leaves a
store that the next, uninterrupted run completes exactly: every row once, none lost, derived
roofline columns filled; and a failed point does not block measuring it again."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analytical.dtypes import DType
from analytical.ops import GemmSpec
from profiler.fingerprint import Fingerprint
from profiler.store import Measurement, Status, Store
from profiler.store_file import CRASH_ENV
from profiler.store_parquet import export_parquet, import_parquet
from profiler.store_schema import FAMILIES
from profiler.timing import summarize

ROOT = Path(__file__).resolve().parents[2]
CURATED = ROOT / "datasets" / "measurements"
# Two published files with no roofline columns stored: the import fills them (catalog h100-sxm).
SOURCES = {"collective": CURATED / "aiconfigurator" / "h100-sxm" / "collective.parquet",
           "memory": CURATED / "vidur" / "h100-sxm" / "memory.parquet"}
CPU = Fingerprint(hardware="cpu", device_name="Test CPU", device_count=2)
H100 = Fingerprint(hardware="h100-sxm", device_name="NVIDIA H100 80GB HBM3", device_count=1)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_DB", raising=False)
    monkeypatch.delenv(CRASH_ENV, raising=False)


def _cli(*args: str, crash: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    env["PYTHONPATH"] = str(ROOT)
    if crash is not None:
        env[CRASH_ENV] = crash
    return subprocess.run([sys.executable, "-m", "simulate.cli.main", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def _killed(*args: str, crash: str) -> None:
    done = _cli(*args, crash=crash)
    assert done.returncode == -signal.SIGKILL, (crash, done.returncode, done.stderr[-2000:])


def _contents(db: Path, *, drop: tuple[str, ...] = ("measured_at",)) -> dict[str, pd.DataFrame]:
    """Every family table, sorted by point key (``drop``: columns that differ by design)."""
    with Store(db, read_only=True) as store:
        return {family: store.query(f'SELECT * FROM "{family}" ORDER BY point_key')
                .drop(columns=list(drop)) for family in FAMILIES}


def _assert_same(got: dict[str, pd.DataFrame], want: dict[str, pd.DataFrame]) -> None:
    for family in FAMILIES:
        assert got[family]["point_key"].is_unique, family
        pd.testing.assert_frame_equal(got[family], want[family], check_exact=True, obj=family)


def _source_dir(tmp_path: Path) -> Path:
    for family, file in SOURCES.items():
        if not file.is_file():
            pytest.skip(f"{file} not in this checkout")
        target = tmp_path / "src" / "h100-sxm" / f"{family}.parquet"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(file, target)
    return tmp_path / "src"


# import-parquet: collective.parquet is one transaction, then memory.parquet, then the fill.
@pytest.mark.parametrize("phase", [
    "import.before_commit",  # first file's rows written, not committed
    "import.after_commit",  # first file committed
    "import.between_files",
    "import.after_commit@2",  # both files committed, roofline not yet filled
    "import.before_fill",
    "fill_roofline.before_commit",
])
def test_import_killed_at_any_phase_is_completed_by_the_next(tmp_path: Path, phase: str) -> None:
    src = _source_dir(tmp_path)
    reference = tmp_path / "reference.duckdb"
    with Store(reference) as store:
        total = sum(import_parquet(store, src))
    want = _contents(reference)
    assert want["memory"]["roofline_s"].notna().all()  # the fill is part of the result

    db = tmp_path / "killed.duckdb"
    _killed("db", "import-parquet", str(src), "--db", str(db), crash=phase)
    partial = _contents(db)
    stored = sum(len(frame) for frame in partial.values())
    assert stored in (0, len(want["collective"]), total)  # whole files only
    if phase == "import.before_fill":  # the case: rows in, roofline columns empty
        assert stored == total and partial["memory"]["roofline_s"].isna().all()
    done = _cli("db", "import-parquet", str(src), "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert f"{total - stored:,} rows inserted, {stored:,} already stored" in done.stdout
    _assert_same(_contents(db), want)


def _shard(path: Path, sizes: range, run: str) -> Path:
    with Store(path) as store:
        rows = [Measurement(op=GemmSpec(m=s, n=s, k=s, dtype=DType.BF16), fingerprint=H100,
                            backend="torch.matmul", status=Status.OK,
                            timing=summarize([s * 1e-7, s * 2e-7]), run_id=run) for s in sizes]
        store.insert(rows)
        # rows stored before the catalog knew their hardware: the merge fills them
        store.connection.execute("UPDATE gemm SET roofline_s = NULL, fraction_of_roofline = NULL")
    return path


@pytest.mark.parametrize("phase", [
    "merge.before_commit", "merge.after_commit", "merge.between_shards",
    "merge.after_commit@2", "fill_roofline.before_commit",
])
def test_merge_killed_at_any_phase_is_completed_by_the_next(tmp_path: Path, phase: str) -> None:
    shards = [_shard(tmp_path / "w0.duckdb", range(1, 41), "r0"),
              _shard(tmp_path / "w1.duckdb", range(30, 71), "r1")]
    reference = tmp_path / "reference.duckdb"
    with Store(reference) as store:
        assert store.merge(shards) == (70, 11)
    want = _contents(reference, drop=())
    assert want["gemm"]["roofline_s"].notna().all()

    db = tmp_path / "killed.duckdb"
    _killed("db", "merge", *map(str, shards), "--db", str(db), crash=phase)
    stored = len(_contents(db)["gemm"])
    assert stored in (0, 40, 70)  # whole shards only
    done = _cli("db", "merge", *map(str, shards), "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert f"{70 - stored:,} rows inserted, {11 + stored:,} already stored" in done.stdout
    _assert_same(_contents(db, drop=()), want)


SWEEP = """\
name: tiny
device: cpu
budget: {warmup_ms: 1, measure_ms: 2, min_reps: 2, max_reps: 5}
families:
  - family: gemm
    dtypes: [fp32]
    shapes:
      grid: {m: [16, 32], n: [16], k: [16, 32]}
"""


@pytest.mark.slow
@pytest.mark.parametrize("phase", [
    "start_run.after_commit",  # run recorded, nothing measured
    "insert.before_commit@2",  # the second point's row written, not committed
    "insert.after_commit@3",
])
def test_profile_run_killed_at_any_phase_is_completed_by_the_next(tmp_path: Path,
                                                                   phase: str) -> None:
    sweep = tmp_path / "tiny.yaml"
    sweep.write_text(SWEEP, encoding="utf-8")
    args = ("profile", "run", str(sweep), "--threads", "1", "--no-progress", "--json")
    reference = tmp_path / "reference.duckdb"
    assert _cli(*args, "--db", str(reference)).returncode == 0
    want = _contents(reference)["gemm"]
    assert len(want) == 4 and set(want["status"]) == {"ok"}

    db = tmp_path / "killed.duckdb"
    _killed(*args, "--db", str(db), crash=phase)
    stored = len(_contents(db)["gemm"])
    assert stored == {"start_run.after_commit": 0, "insert.before_commit@2": 1,
                      "insert.after_commit@3": 3}[phase]
    done = _cli(*args, "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert f'"skipped": {stored}' in done.stdout and f'"measured": {4 - stored}' in done.stdout
    got = _contents(db)["gemm"]
    assert got["point_key"].is_unique and set(got["status"]) == {"ok"}
    assert list(got["point_key"]) == list(want["point_key"])  # the same points, each once


def test_an_error_row_does_not_block_measuring_the_point_again(tmp_path: Path) -> None:
    from profiler.fingerprint import current_fingerprint
    from profiler.runner import run_sweep
    from profiler.sweep import parse_sweep

    sweep = parse_sweep({"name": "again", "device": "cpu",
                         "budget": {"warmup_ms": 1, "measure_ms": 2, "min_reps": 2,
                                    "max_reps": 5},
                         "families": [{"family": "gemm", "dtypes": ["fp32"],
                                       "shapes": {"list": [{"m": 16, "n": 16, "k": 16}]}}]})
    fingerprint = current_fingerprint("cpu")
    db = tmp_path / "s.duckdb"
    first = run_sweep(sweep, db, progress=False, threads=1, fingerprint=fingerprint)
    assert first.statuses == {"ok": 1}
    # make the stored row what an invalid input (a NaN time budget) left behind
    with Store(db) as store:
        store.connection.execute(
            "UPDATE gemm SET status = 'error', error = 'time budget is NaN', median_s = NULL, "
            "min_s = NULL, max_s = NULL, mean_s = NULL, p10_s = NULL, p90_s = NULL, "
            "std_s = NULL, fraction_of_roofline = NULL, run_id = 'old'")
    again = run_sweep(sweep, db, progress=False, threads=1, fingerprint=fingerprint)
    assert (again.skipped, again.measured, again.inserted) == (0, 1, 1)
    with Store(db, read_only=True) as store:
        rows = store.frame("gemm", status=None)
    assert list(rows["status"]) == ["ok"] and rows["median_s"].iloc[0] > 0
    assert rows["run_id"].iloc[0] == again.run_id
    done = run_sweep(sweep, db, progress=False, threads=1, fingerprint=fingerprint)
    assert (done.skipped, done.measured) == (1, 0)  # an ok row is final


def test_ok_rows_are_never_replaced_and_same_run_rows_are_idempotent(tmp_path: Path) -> None:
    op = GemmSpec(m=8, n=8, k=8, dtype=DType.FP32)
    failed = Measurement(op=op, fingerprint=CPU, backend="torch.matmul", status=Status.ERROR,
                         timing=None, error="oom-like failure", run_id="r1")
    good = Measurement(op=op, fingerprint=CPU, backend="torch.matmul", status=Status.OK,
                       timing=summarize([1e-6]), run_id="r2")
    shard = tmp_path / "shard.duckdb"
    with Store(shard) as store:
        assert store.insert([failed]) == 1
        assert store.insert([failed]) == 0  # the same run's row again: kept, not rewritten
    with Store(tmp_path / "main.duckdb") as store:
        assert store.merge([shard]) == (1, 0)
        assert store.merge([shard]) == (0, 1)  # merging twice stores nothing twice
        assert store.insert([good]) == 1  # another run's ok row replaces the error row
        assert store.merge([shard]) == (0, 1)  # and the shard's error row cannot undo it
        export_parquet(store, tmp_path / "pq")
        rows = store.frame("gemm", status=None)
    assert list(rows["status"]) == ["ok"] and math.isclose(rows["median_s"].iloc[0], 1e-6)
    with Store(tmp_path / "copy.duckdb") as copy:
        copy.insert([failed])
        assert import_parquet(copy, tmp_path / "pq") == (1, 0)  # the ok row wins on import too
        assert list(copy.frame("gemm", status=None)["status"]) == ["ok"]
