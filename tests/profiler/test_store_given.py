# SPDX-License-Identifier: Apache-2.0
"""A store given is a store used: every command that reads a store exits 2 naming the file and
the true cause when the store named by ``--db`` is missing, locked by another process or
corrupt; only ``--no-store`` skips it; the default store missing is said once on stderr."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.ops import GemmSpec
from profiler.fingerprint import Fingerprint
from profiler.store import Measurement, Status, Store, open_for_reading
from profiler.store_file import STORAGE_VERSION, shard_fault
from profiler.timing import summarize
from simulate.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "datasets" / "scenarios" / "gpt2-dp8-a100.yaml"
SEARCH = ROOT / "datasets" / "scenarios" / "search" / "llama3-70b-1024-h100.yaml"
SWEEP = ROOT / "datasets" / "sweeps" / "cpu-smoke.yaml"
CPU = Fingerprint(hardware="cpu", device_name="Test CPU", device_count=2)
BLOCK = 262_144  # DuckDB's block size; the file starts with three 4 KiB headers


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.delenv("LLMSIM_DB", raising=False)


def _store(path: Path, rows: int = 300) -> Path:
    with Store(path) as store:
        store.insert(Measurement(op=GemmSpec(m=s, n=s, k=s, dtype=DType.FP32), fingerprint=CPU,
                                 backend="torch.matmul", status=Status.OK,
                                 timing=summarize([s * 1e-6, s * 2e-6]))
                     for s in range(1, rows + 1))
    return path


def _corrupt_first_block(path: Path) -> Path:
    """A checksum failure in the first block: DuckDB says "Corrupt database file ... in block"."""
    with path.open("r+b") as handle:
        handle.seek(3 * 4096 + 100)
        handle.write(b"\x5a" * 64)
    return path


def _corrupt_a_data_block(path: Path) -> Path:
    """Damage a block that opening and the schema check never read, only a full scan."""
    pristine = path.read_bytes()
    for start in range(3 * 4096 + BLOCK, len(pristine), BLOCK):
        damaged = bytearray(pristine)
        damaged[start + 100:start + 164] = b"\x5a" * 64
        path.write_bytes(bytes(damaged))
        try:
            with Store(path, read_only=True) as store:
                store.info()
        except Exception:  # noqa: BLE001 - a block opening reads: try the next one
            continue
        if shard_fault(path) is not None:
            return path
    raise AssertionError("no data block whose damage only a full scan finds")


class _Holder:
    """Another process with the store open for writing (DuckDB's exclusive lock)."""

    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(f"""
                import sys
                from profiler.store import Store
                store = Store({str(path)!r})
                print("ready", flush=True)
                sys.stdin.read()
            """)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def release(self) -> None:
        self.proc.communicate("", timeout=60)


def _readers(db: Path, tmp_path: Path) -> list[list[str]]:
    """Every command that reads a store, with ``--db db``."""
    return [
        ["simulate", str(SCENARIO), "--db", str(db)],
        ["search", str(SEARCH), "--db", str(db)],
        ["suite", "--db", str(db)],
        ["simulate-torch", "nomodule:make", "--db", str(db)],
        ["validate", "cpu", "--skip-profile", "--db", str(db)],
        ["train", "run", "--hardware", "h100-sxm", "--op", "gemm", "--db", str(db)],
        ["train", "all", "--db", str(db)],
        ["db", "info", "--db", str(db)],
        ["db", "query", "SELECT 1", "--db", str(db)],
        ["db", "export", "--parquet", str(tmp_path / "pq"), "--db", str(db)],
    ]


def _writers(db: Path, tmp_path: Path) -> list[list[str]]:
    """Commands that read and write a store (a missing one is created)."""
    shard = _store(tmp_path / "shard.duckdb", rows=3)
    return [
        ["profile", "run", str(SWEEP), "--db", str(db), "--no-progress"],
        ["db", "merge", str(shard), "--db", str(db)],
        ["db", "import-parquet", str(ROOT / "datasets" / "measurements" / "llmsim"), "--db",
         str(db)],
    ]


def _exit_2_naming(capsys, args: list[str], db: Path, cause: str) -> str:
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, (args, err)
    assert str(db) in err and cause in err, (args, err)
    assert err.count("\n") == 1, (args, err)  # one line
    return err


def test_a_missing_named_store_exits_2_and_only_no_store_skips_it(tmp_path, capsys):
    typo = tmp_path / "typo.duckdb"
    for args in _readers(typo, tmp_path):
        _exit_2_naming(capsys, args, typo, "no measurement store at this path")
    assert not typo.exists()  # nothing created by a reader
    assert main(["simulate", str(SCENARIO), "--db", str(typo), "--no-store", "--json"]) == 0
    capsys.readouterr()


def test_a_locked_store_exits_2_naming_it_and_the_holder(tmp_path, capsys):
    db = _store(tmp_path / "locked.duckdb")
    holder = _Holder(db)
    try:
        for args in _readers(db, tmp_path) + _writers(db, tmp_path):
            _exit_2_naming(capsys, args, db, f"is locked by another process (pid "
                                             f"{holder.proc.pid})")
    finally:
        holder.release()
    assert main(["db", "info", "--db", str(db)]) == 0  # released: usable again


def test_a_corrupt_store_is_called_corrupt_not_locked(tmp_path, capsys):
    db = _corrupt_first_block(_store(tmp_path / "damaged.duckdb"))
    before = db.read_bytes()
    for args in _readers(db, tmp_path) + _writers(db, tmp_path):
        err = _exit_2_naming(capsys, args, db, "corrupt store file (Corrupt database file")
        assert "in block" in err and "locked" not in err
    assert db.read_bytes() == before  # left untouched


def test_merge_names_the_corrupt_shard_not_the_target(tmp_path, capsys):
    target = _store(tmp_path / "main.duckdb", rows=5)
    shard = _corrupt_a_data_block(_store(tmp_path / "w0.duckdb", rows=3000))
    err = _exit_2_naming(capsys, ["db", "merge", str(shard), "--db", str(target)], shard,
                         "corrupt store file")
    assert "main.duckdb" not in err
    with Store(target, read_only=True) as store:  # nothing of the shard stored
        assert store.info()["rows"].sum() == 5


def test_the_default_store_missing_is_said_once(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLMSIM_HOME": str(tmp_path / "fresh")}
    env.pop("LLMSIM_DB", None)
    done = subprocess.run([sys.executable, "-m", "simulate.cli.main", "suite", "--json",
                           "--no-predictors"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    note = f"note: no measurement store at {tmp_path / 'fresh' / 'llmsim.duckdb'} (the default)"
    assert done.stderr.count(note) == 1, done.stderr
    assert not (tmp_path / "fresh" / "llmsim.duckdb").exists()


def test_open_for_reading_and_the_storage_version(tmp_path, capsys):
    assert open_for_reading(None) is None  # default missing: fine
    with pytest.raises(Exception, match="no measurement store"):
        open_for_reading(None, required=True)
    db = _store(tmp_path / "s.duckdb", rows=2)
    with open_for_reading(db) as store:
        info = store.storage_info()
    assert info["storage_version"] == f"{STORAGE_VERSION}+"
    assert main(["db", "info", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"storage format {STORAGE_VERSION}+" in out and "DuckDB library" in out
    copy = tmp_path / "copy.duckdb"
    shutil.copy(db, copy)
    assert main(["db", "info", "--db", str(copy), "--json"]) == 0
    assert f'"storage_version": "{STORAGE_VERSION}+"' in capsys.readouterr().out
