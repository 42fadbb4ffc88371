# SPDX-License-Identifier: Apache-2.0
"""Locked and corrupt files, worker shards and merging, Parquet round trips."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.ops import CollectiveKind, CollectiveSpec, GemmSpec
from profiler.fingerprint import Fingerprint
from profiler.store import Measurement, Status, Store, StoreError, shard_path
from profiler.store_parquet import export_parquet, import_parquet
from profiler.timing import summarize

ROOT = Path(__file__).resolve().parents[2]
CPU = Fingerprint(hardware="cpu", device_name="Test CPU", device_count=2)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_DB", raising=False)


def _gemms(sizes: range, fp: Fingerprint = CPU) -> list[Measurement]:
    return [Measurement(op=GemmSpec(m=s, n=s, k=s, dtype=DType.FP32), fingerprint=fp,
                        backend="torch.matmul", status=Status.OK,
                        timing=summarize([s * 1e-6, s * 2e-6])) for s in sizes]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_locked_file_names_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "locked.duckdb"
    with Store(path) as store:
        store.insert(_gemms(range(1, 4)))
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from profiler.store import Store
            store = Store({str(path)!r})
            print("ready", flush=True)
            sys.stdin.read()
        """)], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError) as err:
            Store(path)
        message = str(err.value)
        assert str(path) in message
        assert f"locked by another process (pid {holder.pid})" in message
        with pytest.raises(StoreError, match="locked"):
            Store(path, read_only=True)
    finally:
        holder.communicate("", timeout=60)
    with Store(path, read_only=True) as store:
        assert store.info()["rows"].sum() == 3


def test_corrupt_file_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.duckdb"
    path.write_bytes(b"\x00garbage, not a database\xff" * 500)
    before = _digest(path)
    for read_only in (False, True):
        with pytest.raises(StoreError, match=r"corrupt\.duckdb: not a DuckDB database"):
            Store(path, read_only=read_only)
    assert _digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.duckdb"]


def test_truncated_store_is_refused_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "cut.duckdb"
    with Store(path) as store:
        store.insert(_gemms(range(1, 50)))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    before = _digest(path)
    with Store(path, read_only=True) as store, pytest.raises(StoreError, match=r"cut\.duckdb"):
        store.info()
    assert _digest(path) == before


def test_two_shards_merged_twice_equal_their_union_once(tmp_path: Path) -> None:
    db = tmp_path / "main.duckdb"
    a, b = shard_path(db, "worker0"), shard_path(db, "worker1")
    assert a == tmp_path / "main.duckdb.shards" / "worker0.duckdb"
    other = Fingerprint(hardware="cpu", device_name="Test CPU", device_count=2, host="n1")
    with Store(a) as shard:
        shard.start_run(command="profile", sweep="s", fingerprint=CPU)
        shard.insert(_gemms(range(1, 11)))  # 10 points
    with Store(b) as shard:
        shard.insert(_gemms(range(6, 16)))  # 5 overlap with a
        shard.insert(_gemms(range(1, 3), fp=other))  # 2 on another host
    with Store(db) as store:
        assert store.merge([a, b]) == (17, 5)
        assert store.merge([a, b]) == (0, 22)
        assert store.info()["rows"].sum() == 17
        assert len(store.fingerprints()) == 2
        assert len(store.query("SELECT * FROM runs")) == 1
        expected = GemmSpec(m=15, n=15, k=15, dtype=DType.FP32).key
        assert store.lookup_medians([expected], "cpu") == {expected: pytest.approx(15 * 1.5e-6)}


def test_merge_refuses_a_corrupt_shard(tmp_path: Path) -> None:
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"nope" * 100)
    with Store(tmp_path / "main.duckdb") as store, pytest.raises(StoreError, match="bad.duckdb"):
        store.merge([bad])


def test_parquet_round_trip_is_idempotent(tmp_path: Path) -> None:
    gpu = Fingerprint(hardware="h100-sxm", device_name="NVIDIA H100 80GB HBM3", device_count=8,
                      nccl="2.21.5")
    coll = Measurement(op=CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=1 << 20,
                                         group_size=8, ranks_per_node=8),
                       fingerprint=gpu, backend="nccl", status=Status.OK,
                       timing=summarize([5e-5]), provenance="imported:test")
    with Store(tmp_path / "src.duckdb") as src:
        src.insert([*_gemms(range(1, 21)), coll])
        files = export_parquet(src, tmp_path / "out")
        original = src.frame("gemm").drop(columns=["measured_at"])
    assert sorted(p.relative_to(tmp_path / "out").as_posix() for p in files) == [
        "cpu/gemm.parquet", "h100-sxm/collective.parquet"]
    with Store(tmp_path / "dst.duckdb") as dst:
        assert import_parquet(dst, tmp_path / "out") == (21, 0)
        assert import_parquet(dst, tmp_path / "out") == (0, 21)
        copy = dst.frame("gemm").drop(columns=["measured_at"])
        assert copy.equals(original)
        fp = dst.fingerprints().set_index("fingerprint_id").loc[gpu.id]
        assert fp["nccl"] == "2.21.5" and fp["device_count"] == 8


def test_parquet_missing_column_names_file_and_column(tmp_path: Path) -> None:
    import duckdb

    bad = tmp_path / "in" / "gemm.parquet"
    bad.parent.mkdir()
    duckdb.sql(f"COPY (SELECT 1 AS m) TO '{bad}' (FORMAT parquet)")
    with Store(tmp_path / "s.duckdb") as store, \
            pytest.raises(StoreError, match=r"gemm\.parquet: missing column 'n'"):
        import_parquet(store, bad)
