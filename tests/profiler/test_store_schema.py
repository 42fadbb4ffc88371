# SPDX-License-Identifier: Apache-2.0
"""The DuckDB schema is a contract: predictors and the simulator read these columns by name."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from analytical.ops import op_fields
from profiler.store import Store, StoreError
from profiler.store_schema import SCHEMA_VERSION, table_columns

COMMON = [
    ("point_key", "VARCHAR"), ("op_key", "VARCHAR"), ("hardware", "VARCHAR"),
    ("fingerprint_id", "VARCHAR"), ("backend", "VARCHAR"), ("status", "VARCHAR"),
    ("error", "VARCHAR"), ("run_id", "VARCHAR"), ("provenance", "VARCHAR"),
    ("measured_at", "TIMESTAMP"), ("flops", "DOUBLE"), ("bytes", "DOUBLE"),
    ("median_s", "DOUBLE"), ("min_s", "DOUBLE"), ("max_s", "DOUBLE"), ("mean_s", "DOUBLE"),
    ("p10_s", "DOUBLE"), ("p90_s", "DOUBLE"), ("std_s", "DOUBLE"), ("n_samples", "INTEGER"),
    ("outliers", "INTEGER"), ("roofline_s", "DOUBLE"), ("fraction_of_roofline", "DOUBLE"),
]
FROZEN = {
    "gemm": [("m", "BIGINT"), ("n", "BIGINT"), ("k", "BIGINT"), ("dtype", "VARCHAR"),
             ("batch", "BIGINT"), *COMMON],
    "attention": [("batch", "BIGINT"), ("q_len", "BIGINT"), ("kv_len", "BIGINT"),
                  ("heads", "BIGINT"), ("kv_heads", "BIGINT"), ("head_dim", "BIGINT"),
                  ("causal", "BOOLEAN"), ("phase", "VARCHAR"), ("dtype", "VARCHAR"),
                  ("backward", "BOOLEAN"), *COMMON],
    "collective": [("kind", "VARCHAR"), ("size_bytes", "BIGINT"), ("group_size", "BIGINT"),
                   ("ranks_per_node", "BIGINT"), ("dtype", "VARCHAR"), *COMMON],
    "memory": [("kind", "VARCHAR"), ("rows", "BIGINT"), ("cols", "BIGINT"), ("dtype", "VARCHAR"),
               ("backward", "BOOLEAN"), *COMMON],
    "moe": [("kind", "VARCHAR"), ("tokens", "BIGINT"), ("hidden", "BIGINT"),
            ("experts", "BIGINT"), ("top_k", "BIGINT"), ("dtype", "VARCHAR"), *COMMON],
    "fingerprints": [("fingerprint_id", "VARCHAR"), ("hardware", "VARCHAR"),
                     ("device_name", "VARCHAR"), ("device_count", "INTEGER"),
                     ("driver", "VARCHAR"), ("cuda", "VARCHAR"), ("torch", "VARCHAR"),
                     ("nccl", "VARCHAR"), ("triton", "VARCHAR"), ("clocks_mhz", "VARCHAR"),
                     ("host", "VARCHAR")],
    "runs": [("run_id", "VARCHAR"), ("command", "VARCHAR"), ("sweep", "VARCHAR"),
             ("fingerprint_id", "VARCHAR"), ("started_at", "TIMESTAMP")],
    "schema_version": [("version", "INTEGER")],
}


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_DB", raising=False)


def test_schema_is_frozen_in_code() -> None:
    assert SCHEMA_VERSION == 1
    assert {name: list(cols) for name, cols in table_columns().items()} == FROZEN


def test_created_file_has_exactly_the_frozen_columns(tmp_path: Path) -> None:
    path = tmp_path / "s.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path), read_only=True)
    try:
        for table, columns in FROZEN.items():
            rows = con.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = ? ORDER BY ordinal_position", [table]).fetchall()
            assert rows == columns, table
        assert con.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
        pk = con.execute("SELECT constraint_column_names FROM duckdb_constraints() "
                         "WHERE table_name = 'gemm' AND constraint_type = 'PRIMARY KEY'"
                         ).fetchall()
        assert pk == [(["point_key"],)]
    finally:
        con.close()


def test_shape_columns_are_the_spec_fields() -> None:
    for family in ("gemm", "attention", "collective", "memory", "moe"):
        names = [name for name, _ in FROZEN[family]]
        assert tuple(names[:len(op_fields(family))]) == op_fields(family)


def test_default_path_is_under_llmsim_home(tmp_path: Path) -> None:
    with Store() as store:
        assert store.path == tmp_path / "home" / "llmsim.duckdb"
    assert (tmp_path / "home" / "llmsim.duckdb").exists()


def test_llmsim_db_overrides_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "other.duckdb"))
    with Store() as store:
        assert store.path == tmp_path / "other.duckdb"


def test_other_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    Store(path).close()
    con = duckdb.connect(str(path))
    con.execute("UPDATE schema_version SET version = 99")
    con.close()
    with pytest.raises(StoreError, match=r"old\.duckdb: schema version 99"):
        Store(path)


def test_foreign_duckdb_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "foreign.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    with pytest.raises(StoreError, match="foreign.duckdb: not an llmsim store"):
        Store(path)


def test_read_only_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="missing.duckdb: no store"):
        Store(tmp_path / "missing.duckdb", read_only=True)
