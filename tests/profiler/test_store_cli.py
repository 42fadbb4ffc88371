# SPDX-License-Identifier: Apache-2.0
"""``llmsim db``: info, query, merge, export, import-parquet, and the curated data sets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.ops import GemmSpec
from profiler.fingerprint import Fingerprint
from profiler.store import Measurement, Status, Store, shard_path
from profiler.timing import summarize
from simulate.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CURATED = ROOT / "datasets" / "measurements"
CPU = Fingerprint(hardware="cpu", device_name="Test CPU", device_count=2)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_DB", raising=False)


def _fill(path: Path, sizes: range) -> None:
    with Store(path) as store:
        store.insert(Measurement(op=GemmSpec(m=s, n=s, k=s, dtype=DType.FP32), fingerprint=CPU,
                                 backend="torch.matmul", status=Status.OK,
                                 timing=summarize([s * 1e-6])) for s in sizes)


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_info_json_counts_rows_and_fingerprints(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    _fill(db, range(1, 6))
    code, out, _ = _run(capsys, "db", "info", "--db", str(db), "--json")
    assert code == 0
    info = json.loads(out)
    assert info["rows"] == 5
    assert info["counts"] == [{"provenance": "profiled", "hardware": "cpu", "family": "gemm",
                               "status": "ok", "rows": 5}]
    assert [fp["fingerprint_id"] for fp in info["fingerprints"]] == [CPU.id]


def test_llmsim_db_env_selects_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "env.duckdb"
    _fill(db, range(1, 3))
    monkeypatch.setenv("LLMSIM_DB", str(db))
    code, out, _ = _run(capsys, "db", "query", "SELECT count(*) AS n FROM gemm", "--csv")
    assert (code, out) == (0, "n\n2\n")


def test_query_json_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.duckdb"
    _fill(db, range(1, 4))
    code, out, _ = _run(capsys, "db", "query", "SELECT m, median_s FROM gemm ORDER BY m",
                        "--db", str(db), "--json")
    assert code == 0
    assert json.loads(out) == [{"m": 1, "median_s": 1e-6}, {"m": 2, "median_s": 2e-6},
                               {"m": 3, "median_s": 3e-6}]
    code, _, err = _run(capsys, "db", "query", "SELECT * FROM nowhere", "--db", str(db))
    assert code == 2 and "s.duckdb" in err and err.count("\n") == 1
    code, _, err = _run(capsys, "db", "query", "DELETE FROM gemm", "--db", str(db))
    assert code == 2
    with Store(db, read_only=True) as store:
        assert len(store.frame("gemm")) == 3


def test_corrupt_store_exits_2_naming_it(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"x" * 4096)
    code, _, err = _run(capsys, "db", "info", "--db", str(bad))
    assert code == 2 and "bad.duckdb" in err and "not a DuckDB database" in err


def test_merge_export_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "main.duckdb"
    a, b = shard_path(db, "w0"), shard_path(db, "w1")
    _fill(a, range(1, 5))
    _fill(b, range(3, 9))
    code, out, _ = _run(capsys, "db", "merge", str(a), str(b), "--db", str(db))
    assert code == 0 and "8 rows inserted, 2 already stored" in out
    code, out, _ = _run(capsys, "db", "export", "--parquet", str(tmp_path / "pq"), "--db", str(db))
    assert code == 0 and (tmp_path / "pq" / "cpu" / "gemm.parquet").is_file()
    copy = tmp_path / "copy.duckdb"
    code, out, _ = _run(capsys, "db", "import-parquet", str(tmp_path / "pq"), "--db", str(copy))
    assert code == 0 and "8 rows inserted, 0 already stored" in out
    code, out, _ = _run(capsys, "db", "import-parquet", str(tmp_path / "pq"), "--db", str(copy))
    assert code == 0 and "0 rows inserted, 8 already stored" in out


@pytest.mark.skipif(not (CURATED / "aiconfigurator" / "h100-sxm" / "gemm.parquet").is_file(),
                    reason="curated measurements not written")
def test_curated_h100_data_loads_without_shared_data(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "fresh.duckdb"
    for family in ("gemm", "collective"):
        code, _, _ = _run(capsys, "db", "import-parquet",
                          str(CURATED / "aiconfigurator" / "h100-sxm" / f"{family}.parquet"),
                          "--db", str(db))
        assert code == 0
    gemm = GemmSpec(m=8192, n=8192, k=8192, dtype=DType.BF16)
    with Store(db, read_only=True) as store:
        median = store.lookup_medians([gemm.key], "h100-sxm")[gemm.key]
        frame = store.frame("collective", hardware="h100-sxm")
    assert 600 < gemm.flops / median / 1e12 < 989  # dense bf16 peak 989 TFLOP/s
    row = frame[(frame.kind == "all_reduce") & (frame.group_size == 8) & (frame.dtype == "fp16")
                & (frame.size_bytes == 1 << 29)]
    busbw = (row["bytes"] / row["median_s"] / 1e9).tolist()
    assert busbw and all(350 < bw < 480 for bw in busbw)


def test_our_h100_and_h200_measurements_load_with_their_fingerprints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """datasets/measurements/llmsim: measured by this project on one H100 SXM and one H200 (the
    same sweeps). The large GEMMs run near the vendor's dense peaks (bf16 989, fp8 1979
    TFLOP/s, the same die) and a copy near each HBM's bandwidth (3.35 and 4.8 TB/s); every row
    carries the fingerprint of the machine and stack that measured it, and each GPU's GEMM,
    attention and memory rows are a group `llmsim train all` (the quickstart) trains."""
    from predictors.pipeline import trainable_groups

    db = tmp_path / "ours.duckdb"
    code, out, _ = _run(capsys, "db", "import-parquet", str(CURATED / "llmsim"), "--db", str(db))
    assert code == 0 and "10,238 rows inserted" in out  # per GPU 5,015 ok + 104 unsupported
    for gpu, device, hbm_gb_s in (("h100-sxm", "NVIDIA H100 80GB HBM3", 3350),
                                  ("h200", "NVIDIA H200", 4800)):
        with Store(db, read_only=True) as store:
            gemm = store.frame("gemm", hardware=gpu)
            memory = store.frame("memory", hardware=gpu)
        assert set(gemm["provenance"]) == {"profiled"}
        assert set(gemm["device_name"]) == {device}
        assert set(gemm["torch"]) == {"2.11.0+cu130"} and gemm["fingerprint_id"].nunique() == 1
        big = gemm[(gemm.m == 8192) & (gemm.n == 8192) & (gemm.k == 8192)].set_index("dtype")
        tflops = big["flops"] / big["median_s"] / 1e12
        assert 600 < tflops["bf16"] < 989 and 1000 < tflops["fp8"] < 1979
        copy = memory[memory.kind == "copy"]
        assert 0.6 * hbm_gb_s < (copy["bytes"] / copy["median_s"]).max() / 1e9 < hbm_gb_s
    groups = {(hw, family) for hw, family, _ in trainable_groups(db)}
    assert groups == {(hw, f) for hw in ("h100-sxm", "h200") for f in ("attention", "gemm", "memory")}
