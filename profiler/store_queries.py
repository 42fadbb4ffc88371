# SPDX-License-Identifier: Apache-2.0
"""The measurement store's read queries (row counts, fingerprints, frames, medians by op key),
kept apart from opening, schema and writing in `profiler.store`."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from analytical.errors import UnknownNameError
from analytical.ops import OP_FAMILIES
from profiler.measurement import StoreError
from profiler.store_file import is_corrupt_error, is_lock_error, open_error
from profiler.store_schema import FAMILIES, FINGERPRINT_COLUMNS

__all__ = ["StoreQueries"]

_FP_SELECT = ", ".join(f'f."{name}"' for name, _ in FINGERPRINT_COLUMNS
                       if name not in ("fingerprint_id", "hardware"))


class StoreQueries:
    """Reads over an open DuckDB connection; `profiler.store.Store` opens it and writes."""

    path: Path
    _con: duckdb.DuckDBPyConnection

    def _read(self, sql: str, params: list[object] | None = None) -> duckdb.DuckDBPyConnection:
        """Execute a read; DuckDB errors (a damaged file, bad SQL) become StoreError."""
        try:
            return self._con.execute(sql, params or [])
        except duckdb.Error as exc:
            if is_corrupt_error(exc) or is_lock_error(exc):
                raise open_error(self.path, exc) from None
            raise StoreError(f"{self.path}: {str(exc).splitlines()[0]}") from None

    def query(self, sql: str) -> pd.DataFrame:
        """Run any SQL and return the result as a DataFrame."""
        return self._read(sql).df()

    def info(self) -> pd.DataFrame:
        """Row counts per provenance, hardware, family and status."""
        union = " UNION ALL ".join(
            f"SELECT provenance, hardware, '{family}' AS family, status FROM \"{family}\""
            for family in FAMILIES)
        return self._read(
            f"SELECT provenance, hardware, family, status, count(*) AS rows FROM ({union}) "
            "GROUP BY ALL ORDER BY provenance, hardware, family, status").df()

    def fingerprints(self) -> pd.DataFrame:
        """Every fingerprint with the number of rows that carry it."""
        union = " UNION ALL ".join(f'SELECT fingerprint_id FROM "{family}"' for family in FAMILIES)
        return self._read(
            f"SELECT f.*, coalesce(c.rows, 0) AS rows FROM fingerprints f LEFT JOIN "
            f"(SELECT fingerprint_id, count(*) AS rows FROM ({union}) GROUP BY ALL) c "
            "USING (fingerprint_id) ORDER BY f.hardware, f.fingerprint_id").df()

    def frame(self, family: str, *, hardware: str | None = None, dtype: str | None = None,
              provenance: str | None = None, status: str | None = "ok") -> pd.DataFrame:
        """One row per measurement of ``family``: shape columns, stats and fingerprint columns.

        Filters are exact; ``status=None`` returns every status.
        """
        if family not in OP_FAMILIES:
            raise UnknownNameError("operator family", family, list(OP_FAMILIES))
        where, params = [], []
        for column, value in (("hardware", hardware), ("dtype", dtype),
                              ("provenance", provenance), ("status", status)):
            if value is not None:
                where.append(f't."{column}" = ?')
                params.append(str(value))
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        return self._read(
            f'SELECT t.*, {_FP_SELECT} FROM "{family}" t LEFT JOIN fingerprints f '
            f"USING (fingerprint_id) {clause} ORDER BY t.op_key, t.point_key", params).df()

    def measured_by_key(self, family: str, hardware: str) -> dict[str, tuple[float, str]]:
        """Every op key of ``family`` measured on ``hardware`` -> (its median latency (s), whose
        rows give it), in one query for callers that look up many shapes. The median follows
        `lookup_medians`' rule (our own ``profiled`` rows win); the provenance is ``profiled``
        where they exist, else the imported provenance when all the key's rows share one, else
        "" (mixed). A caller pricing a CUDA-graph replay corrects by it
        (`simulate.inference.graph_replay`)."""
        if family not in OP_FAMILIES:
            return {}
        rows = self._read(
            f"SELECT t.op_key, coalesce(median(t.median_s) FILTER "
            f"(WHERE t.provenance = 'profiled'), median(t.median_s)), "
            f"bool_or(t.provenance = 'profiled'), min(t.provenance), max(t.provenance) "
            f'FROM "{family}" t '
            f"WHERE t.hardware = ? AND t.status = 'ok' AND t.median_s IS NOT NULL "
            f"GROUP BY t.op_key", [hardware]).fetchall()
        return {key: (float(value), "profiled" if ours else lo if lo == hi else "")
                for key, value, ours, lo, hi in rows}

    def lookup_medians(self, op_keys: Iterable[str], hardware: str) -> dict[str, float]:
        """Median latency (s) per exact op key on ``hardware`` (status ok).

        Profiled rows win over imported ones; several rows of the same kind give the median
        of their medians. Keys with no row are absent from the result.
        """
        by_family: dict[str, list[str]] = {}
        for key in dict.fromkeys(op_keys):
            family = key.split("/", 1)[0]
            if family in OP_FAMILIES:
                by_family.setdefault(family, []).append(key)
        result: dict[str, float] = {}
        for family, keys in by_family.items():
            self._con.register("_lookup_keys", pa.table({"op_key": pa.array(keys, pa.string())}))
            try:
                rows = self._read(
                    f"SELECT t.op_key, coalesce(median(t.median_s) FILTER "
                    f"(WHERE t.provenance = 'profiled'), median(t.median_s)) "
                    f'FROM "{family}" t JOIN _lookup_keys k USING (op_key) '
                    f"WHERE t.hardware = ? AND t.status = 'ok' AND t.median_s IS NOT NULL "
                    f"GROUP BY t.op_key", [hardware]).fetchall()
            finally:
                self._con.unregister("_lookup_keys")
            result.update({key: float(value) for key, value in rows})
        return result
