# SPDX-License-Identifier: Apache-2.0
"""The measurement store: one DuckDB file, typed rows per operator family.

Every row is keyed by a point key hashed from (op key, fingerprint, backend, provenance), so a
resumed sweep skips finished points and importing or merging twice stores nothing twice.
DuckDB allows one writer per file: cluster workers write shards (`shard_path`) and `Store.merge`
folds them in. The schema is in `profiler.store_schema`; Parquet export/import in
`profiler.store_parquet`; external data sets in `profiler.importers`.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from analytical.errors import SpecError
from analytical.paths import default_db_path
from profiler.fingerprint import FINGERPRINT_FIELDS, Fingerprint
from profiler.measurement import Measurement, Status, StoreError, point_key, shard_path
from profiler.progress import advance, expect
from profiler.store_file import (
    check_magic,
    connect,
    crash_point,
    is_corrupt_error,
    is_lock_error,
    open_error,
    shard_fault,
    storage_info,
)
from profiler.store_queries import StoreQueries
from profiler.store_rows import RooflineCache, fill_roofline, measurement_table, utc_now
from profiler.store_schema import FAMILIES, SCHEMA_VERSION, ddl, family_columns

__all__ = ["Measurement", "Status", "Store", "StoreError", "open_for_reading", "point_key",
           "shard_path"]

class Store(StoreQueries):
    """A DuckDB measurement store; use as a context manager. Writing is here, the read
    queries in `profiler.store_queries`."""

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path).expanduser() if path is not None else default_db_path()
        self.read_only = read_only
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path}: no store at this path")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and self.path.stat().st_size == 0:
                self.path.unlink()  # an empty placeholder (a temp file): DuckDB creates a store
        self._con = connect(self.path, read_only)
        self.roofline = RooflineCache()
        try:
            self._ensure_schema()
        except duckdb.Error as exc:
            self._con.close()
            raise open_error(self.path, exc) from None
        except BaseException:
            self._con.close()
            raise

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._con.close()

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        """The open DuckDB connection (for `profiler.store_parquet` and tests)."""
        return self._con

    def _ensure_schema(self) -> None:
        tables = {row[0] for row in self._con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
        ).fetchall()}
        if "schema_version" not in tables:
            if tables:
                raise StoreError(f"{self.path}: not an llmsim store (tables: "
                                 f"{', '.join(sorted(tables))})")
            if self.read_only:
                raise StoreError(f"{self.path}: empty file, not an llmsim store")
            self._con.execute("BEGIN TRANSACTION")
            for statement in ddl():
                self._con.execute(statement)
            self._con.execute("INSERT INTO schema_version VALUES (?)", [SCHEMA_VERSION])
            self._con.execute("COMMIT")
            return
        rows = self._con.execute("SELECT max(version) FROM schema_version").fetchall()
        version = rows[0][0] if rows else None
        if version != SCHEMA_VERSION:
            raise StoreError(f"{self.path}: schema version {version}, this llmsim reads "
                             f"version {SCHEMA_VERSION}; export with the llmsim that wrote it")

    # -- writing ---------------------------------------------------------------------------

    def start_run(self, *, command: str, sweep: str, fingerprint: Fingerprint) -> str:
        """Record a run (a sweep invocation) and return its id."""
        run_id = f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
        self.transaction(lambda: (
            self._insert_fingerprints([fingerprint]),
            self._con.execute("INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
                              [run_id, command, sweep, fingerprint.id, utc_now()]),
        ), phase="start_run")
        return run_id

    def insert(self, measurements: Iterable[Measurement]) -> int:
        """Store measurements in one transaction; returns the number of rows written.

        A point key stored with status ok is kept (skipped); one stored with another status
        (error, timeout, oom, unsupported) is replaced by a row of another run, so a failed
        point can be measured again. On any error nothing is written.
        """
        by_family: dict[str, list[Measurement]] = {}
        for m in measurements:
            if not isinstance(m, Measurement):
                raise SpecError("measurement", f"expected a Measurement, got {type(m).__name__}")
            by_family.setdefault(m.op.family, []).append(m)
        if not by_family:
            return 0
        tables = {family: measurement_table(family, rows, self.roofline)
                  for family, rows in by_family.items()}
        fingerprints = {m.fingerprint.id: m.fingerprint for rows in by_family.values()
                        for m in rows}
        inserted = 0

        def work() -> None:
            nonlocal inserted
            self._insert_fingerprints(fingerprints.values())
            for family, table in tables.items():
                inserted += self._insert_arrow(family, table)

        self.transaction(work, phase="insert")
        return inserted

    def existing_keys(self, keys: Iterable[str], *, status: str | None = None) -> set[str]:
        """The subset of ``keys`` (point keys) already stored (with ``status``, if given)."""
        wanted = pa.table({"point_key": pa.array(list(dict.fromkeys(keys)), pa.string())})
        if wanted.num_rows == 0:
            return set()
        self._con.register("_wanted_keys", wanted)
        try:
            union = " UNION ALL ".join(
                f'SELECT t.point_key FROM "{family}" t JOIN _wanted_keys w USING (point_key)'
                + ("" if status is None else f" WHERE t.status = '{Status(status).value}'")
                for family in FAMILIES)
            return {row[0] for row in self._read(union).fetchall()}
        finally:
            self._con.unregister("_wanted_keys")

    def ok_keys(self, keys: Iterable[str]) -> set[str]:
        """The subset of ``keys`` stored with status ok: the points a resumed sweep skips."""
        return self.existing_keys(keys, status="ok")

    def merge(self, shard_paths: Iterable[str | Path]) -> tuple[int, int]:
        """Fold worker shards into this store; returns (inserted, skipped). Idempotent.

        Each shard is one transaction, so an interrupted merge leaves whole shards merged and a
        rerun completes it; a shard that cannot be read is named (not this store).
        """
        inserted = skipped = 0
        shard_paths = list(shard_paths)
        expect(len(shard_paths), unit="files")
        for index, shard in enumerate(shard_paths):
            shard = Path(shard).expanduser()
            if shard.resolve() == self.path.resolve():
                raise StoreError(f"{shard}: cannot merge a store into itself")
            if not shard.exists():
                raise StoreError(f"{shard}: no shard at this path")
            check_magic(shard)
            alias = f"_shard{index}"
            try:
                self._con.execute(f"ATTACH '{_sql_text(str(shard))}' AS {alias} (READ_ONLY)")
            except duckdb.Error as exc:
                raise open_error(shard, exc) from None
            try:
                got, total = self._merge_attached(alias, shard)
            except StoreError:
                self._con.execute(f"DETACH {alias}")
                alias = ""
                fault = shard_fault(shard)
                if fault is not None:
                    raise fault from None
                raise
            finally:
                if alias:
                    self._con.execute(f"DETACH {alias}")
            inserted += got
            skipped += total - got
            advance(1, unit="files", label=shard.name)
            crash_point("merge.between_shards")
        self.fill_roofline()  # shard rows stored before the catalog knew their hardware
        return inserted, skipped

    def _merge_attached(self, alias: str, shard: Path) -> tuple[int, int]:
        try:
            version = self._con.execute(f"SELECT max(version) FROM {alias}.schema_version"
                                        ).fetchall()[0][0]
        except duckdb.Error as exc:
            if is_corrupt_error(exc):
                raise open_error(shard, exc) from None
            raise StoreError(f"{shard}: not an llmsim store") from None
        if version != SCHEMA_VERSION:
            raise StoreError(f"{shard}: schema version {version}, expected {SCHEMA_VERSION}")
        counts = [0, 0]

        def work() -> None:
            for table in ("fingerprints", "runs"):
                self._con.execute(f'INSERT OR IGNORE INTO "{table}" SELECT * FROM {alias}."{table}"')
            for family in FAMILIES:
                counts[1] += self._con.execute(f'SELECT count(*) FROM {alias}."{family}"'
                                               ).fetchall()[0][0]
                counts[0] += self.upsert(family, f'{alias}."{family}"')

        self.transaction(work, phase="merge")
        return counts[0], counts[1]

    def transaction(self, work: Callable[[], object], *, phase: str = "write") -> None:
        """Run ``work()`` inside one transaction; roll back on any error.

        ``phase`` names the crash points `<phase>.before_commit` / `<phase>.after_commit` of
        the interruption tests (`profiler.store_file.crash_point`).
        """
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only")
        self._con.execute("BEGIN TRANSACTION")
        try:
            work()
            crash_point(f"{phase}.before_commit")
        except BaseException as exc:
            self._con.execute("ROLLBACK")
            if isinstance(exc, duckdb.Error):
                if is_corrupt_error(exc) or is_lock_error(exc):
                    raise open_error(self.path, exc) from None
                raise StoreError(f"{self.path}: write failed, nothing stored: "
                                 f"{str(exc).splitlines()[0]}") from None
            raise
        self._con.execute("COMMIT")
        crash_point(f"{phase}.after_commit")

    def _insert_fingerprints(self, fingerprints: Iterable[Fingerprint]) -> None:
        rows = [[fp.id, *(getattr(fp, name) for name in FINGERPRINT_FIELDS)]
                for fp in fingerprints]
        if rows:
            self._con.executemany(
                f"INSERT OR IGNORE INTO fingerprints VALUES ({', '.join('?' * len(rows[0]))})",
                rows)

    def _insert_arrow(self, family: str, table: pa.Table) -> int:
        """`_upsert` an Arrow table holding exactly the family's columns."""
        self._con.register("_batch", table)
        try:
            return self.upsert(family, "_batch")
        finally:
            self._con.unregister("_batch")

    def upsert(self, family: str, source: str) -> int:
        """Insert ``source``'s rows (a table or view with the family's columns); returns rows
        written. A stored ok row is kept; a stored non-ok row is replaced by a row of another
        run (a re-measured point), and kept when the same run's row comes again (merging or
        importing twice). Runs inside the caller's transaction."""
        cols = ", ".join(f'"{name}"' for name, _ in family_columns(family))
        self._con.execute(
            f'DELETE FROM "{family}" AS t USING (SELECT point_key, run_id FROM {source}) s '
            "WHERE t.point_key = s.point_key AND t.status <> 'ok' "
            "AND t.run_id IS DISTINCT FROM s.run_id")
        return self._con.execute(f'INSERT OR IGNORE INTO "{family}" ({cols}) '
                                 f"SELECT {cols} FROM {source}").fetchall()[0][0]

    def fill_roofline(self) -> int:
        """Compute missing roofline columns for hardware now in the catalog; returns rows set."""
        counts = []
        self.transaction(lambda: counts.extend(
            fill_roofline(self._con, family, self.roofline) for family in FAMILIES),
            phase="fill_roofline")
        return sum(counts)

    def storage_info(self) -> dict[str, str]:
        """The DuckDB library version and this file's storage format (`store_file`)."""
        return {"db": str(self.path), **storage_info(self._con)}


_NOTED_MISSING: set[Path] = set()


def open_for_reading(path: str | Path | None = None, *, required: bool = False,
                     missing_hint: str = "pass --no-store to run without measurements"
                     ) -> Store | None:
    """The one way llmsim opens a store to read it (close it, or use it as a context manager).

    A ``path`` given (``--db``, a ``store_path`` argument) is a store used: missing, locked by
    another process, corrupt, or not an llmsim store is a `StoreError` naming the file and the
    cause. ``path=None`` is the default store (`default_db_path`: ``$LLMSIM_DB``, else
    ``$LLMSIM_HOME/llmsim.duckdb``): present, the same rules; missing, None, said once per
    process on stderr, unless ``required`` (the command cannot work without one). Only the
    caller's ``use_store=False`` (``--no-store``) skips the store.
    """
    named = path is not None
    target = Path(path).expanduser() if named else default_db_path()
    if not target.exists():
        if named or required:
            raise StoreError(f"{target}: no measurement store at this path; {missing_hint}")
        if target not in _NOTED_MISSING:
            _NOTED_MISSING.add(target)
            print(f"note: no measurement store at {target} (the default); using the learned "
                  "predictors and the roofline (--no-store silences this)", file=sys.stderr)
        return None
    return Store(target, read_only=True)


def _sql_text(text: str) -> str:
    return text.replace("'", "''")
