# SPDX-License-Identifier: Apache-2.0
"""The store's DuckDB file: connecting, naming why a file cannot be opened, its storage version.

Why a file cannot be opened is read from DuckDB's exception type and its exact message, never
from a loose substring ("block" contains "lock"): another process holding the file's lock is
an `duckdb.IOException` "Could not set lock on file"; a checksum failure is "Corrupt database
file"; a file from a newer DuckDB is "Trying to read a database file with version number".

New stores are written in DuckDB storage format `STORAGE_VERSION`, so every DuckDB (library or
command-line tool) from that release on opens them, whichever newer library wrote them
(https://duckdb.org/docs/stable/internals/storage, "Storage compatibility"; the setting is
``storage_compatibility_version``). A file keeps the format it was created with.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import duckdb

from profiler.measurement import StoreError

# The oldest DuckDB release that reads the files we create; pyproject.toml's lower bound.
STORAGE_VERSION = "v1.2.0"
CRASH_ENV = "LLMSIM_TEST_CRASH_AT"
_crash_hits: dict[str, int] = {}


def crash_point(phase: str) -> None:
    """Kill this process with SIGKILL when ``$LLMSIM_TEST_CRASH_AT`` names ``phase``.

    For the interruption tests only: ``phase`` crashes at its first pass, ``phase@N`` at its
    N-th. Nothing happens when the variable is unset (the normal case).
    """
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition("@")
    if name != phase:
        return
    _crash_hits[phase] = _crash_hits.get(phase, 0) + 1
    if _crash_hits[phase] >= (int(nth) if nth.isdigit() else 1):
        os.kill(os.getpid(), signal.SIGKILL)


def check_magic(path: Path) -> None:
    """Refuse a non-DuckDB file before DuckDB touches it (magic "DUCK" at byte 8)."""
    if path.is_dir():
        raise StoreError(f"{path}: a directory, not a store file")
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with path.open("rb") as handle:
            header = handle.read(12)
    except OSError as exc:
        raise StoreError(f"{path}: cannot read the store file: {exc.strerror or exc}") from None
    if len(header) < 12 or header[8:12] != b"DUCK":
        raise StoreError(f"{path}: not a DuckDB database (corrupt or another format); "
                         "the file was left untouched")


def connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A connection to ``path``; any failure is a `StoreError` naming the file and the cause."""
    check_magic(path)
    try:
        return duckdb.connect(str(path), read_only=read_only,
                              config={"storage_compatibility_version": STORAGE_VERSION})
    except duckdb.Error as exc:
        raise open_error(path, exc) from None


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def is_lock_error(exc: BaseException) -> bool:
    """Another process holds the file (DuckDB allows one writer, or many readers)."""
    return isinstance(exc, duckdb.IOException) and "Could not set lock on file" in str(exc)


def is_corrupt_error(exc: BaseException) -> bool:
    """A checksum or format failure inside the file."""
    text = str(exc)
    return "Corrupt database file" in text or "is not a valid DuckDB database file" in text


def open_error(path: Path, exc: BaseException) -> StoreError:
    """The one-line `StoreError` for a DuckDB error raised while opening or reading ``path``."""
    message = _first_line(exc)
    if is_lock_error(exc):
        pid = re.search(r"\(PID (\d+)\)", str(exc))
        return StoreError(f"{path} is locked by another process (pid {pid.group(1) if pid else '?'})"
                          "; DuckDB allows one writer per file: wait, or write a shard and "
                          "`llmsim db merge` it")
    if is_corrupt_error(exc):
        return StoreError(f"{path}: corrupt store file ({message}); restore it from a copy or "
                          "re-import it (llmsim db import-parquet)")
    if "Trying to read a database file with version number" in str(exc):
        return StoreError(f"{path}: written in a newer DuckDB storage format than this DuckDB "
                          f"{duckdb.__version__} reads ({message}); upgrade duckdb")
    return StoreError(f"{path}: cannot open the store: {message}")


def storage_info(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """The DuckDB library version and the storage format of the connection's main file.

    ``storage_version`` is DuckDB's own tag, e.g. ``v1.2.0+``: the oldest DuckDB that opens it.
    """
    version = "unknown"
    try:
        rows = con.execute("SELECT tags FROM duckdb_databases() "
                           "WHERE database_name = current_database()").fetchall()
        if rows and rows[0][0]:
            version = str(dict(rows[0][0]).get("storage_version", "unknown"))
    except duckdb.Error:
        version = "unknown (this DuckDB does not report it)"
    return {"duckdb_library": duckdb.__version__, "storage_version": version}


def shard_fault(path: Path) -> StoreError | None:
    """Why the file ``path`` cannot be read through, or None: every table is scanned to its
    last row in a connection of its own, so a merge that failed names the shard when the fault
    is the shard's (DuckDB's corrupt-block message does not say which attached file)."""
    try:
        con = connect(path, read_only=True)
    except StoreError as exc:
        return exc
    try:
        tables = [row[0] for row in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()]
        for table in tables:
            result = con.execute(f'SELECT * FROM "{table}"')
            while result.fetchmany(10_000):
                pass
    except duckdb.Error as exc:
        return open_error(path, exc)
    finally:
        con.close()
    return None
