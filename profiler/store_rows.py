# SPDX-License-Identifier: Apache-2.0
"""Rows for the store: measurements -> typed Arrow tables, and the roofline column.

`roofline_s` comes from `analytical.roofline.roofline_time` on the catalog hardware named by the
fingerprint; it stays NULL when the hardware is not in the catalog (or the device lacks the
dtype). `fill_roofline` computes it afterwards for rows loaded from Parquet or written before
the catalog knew their hardware.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import duckdb
import pyarrow as pa

from analytical.errors import LlmsimError
from analytical.ops import OpSpec, op_from_dict, op_to_dict
from profiler.measurement import Measurement, point_key
from profiler.store_schema import family_columns, shape_columns

_MAX_CACHED = 200_000  # roofline times kept; bounded so a million-row import stays small
_STAT_FIELDS = ("median_s", "min_s", "max_s", "mean_s", "p10_s", "p90_s", "std_s")
ARROW_TYPES = {"VARCHAR": pa.string(), "BIGINT": pa.int64(), "INTEGER": pa.int32(),
               "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(), "TIMESTAMP": pa.timestamp("us")}


def utc_now() -> datetime:
    """Naive UTC timestamp (DuckDB TIMESTAMP has no zone)."""
    return datetime.now(UTC).replace(tzinfo=None)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


class RooflineCache:
    """Roofline times per (op key, hardware), with the catalog looked up once per name."""

    def __init__(self) -> None:
        self._hardware: dict[str, Any] = {}
        self._times: dict[tuple[str, str], float | None] = {}

    def hardware(self, name: str) -> Any:
        """The catalog `HardwareSpec` for ``name``, or None if the catalog lacks it."""
        if name not in self._hardware:
            try:
                from analytical.hardware import get_hardware  # noqa: PLC0415 - optional

                self._hardware[name] = get_hardware(name)
            except (ImportError, LlmsimError, OSError):
                self._hardware[name] = None
        return self._hardware[name]

    def time_s(self, op: OpSpec, hardware: str) -> float | None:
        """Roofline latency of ``op`` on ``hardware`` in seconds, or None."""
        cache_key = (op.key, hardware)
        if cache_key in self._times:
            return self._times[cache_key]
        hw = self.hardware(hardware)
        value = None
        if hw is not None:
            try:
                from analytical.roofline import roofline_time  # noqa: PLC0415 - optional

                value = _finite(roofline_time(op, hw))
            except (ImportError, LlmsimError, ArithmeticError, KeyError, NotImplementedError):
                value = None
        if len(self._times) >= _MAX_CACHED:
            self._times.clear()
        self._times[cache_key] = value
        return value


def measurement_table(family: str, rows: list[Measurement], roofline: RooflineCache) -> pa.Table:
    """An Arrow table with exactly the family table's columns, one row per measurement."""
    columns = family_columns(family)
    data: dict[str, list[Any]] = {name: [] for name, _ in columns}
    shapes = [name for name, _ in shape_columns(family)]
    now = utc_now()
    for m in rows:
        values = op_to_dict(m.op)
        for name in shapes:
            data[name].append(values[name])
        timing = m.timing
        roofline_s = roofline.time_s(m.op, m.fingerprint.hardware)
        data["point_key"].append(point_key(m.op, m.fingerprint, m.backend, m.provenance))
        data["op_key"].append(m.op.key)
        data["hardware"].append(m.fingerprint.hardware)
        data["fingerprint_id"].append(m.fingerprint.id)
        data["backend"].append(m.backend)
        data["status"].append(m.status.value)
        data["error"].append(m.error)
        data["run_id"].append(m.run_id)
        data["provenance"].append(m.provenance)
        data["measured_at"].append(now)
        data["flops"].append(float(m.op.flops))
        data["bytes"].append(float(m.op.bytes))
        for stat in _STAT_FIELDS:
            data[stat].append(_finite(getattr(timing, stat)) if timing else None)
        data["n_samples"].append(timing.n if timing else None)
        data["outliers"].append(timing.outliers if timing else None)
        data["roofline_s"].append(roofline_s)
        median = data["median_s"][-1]
        data["fraction_of_roofline"].append(
            roofline_s / median if roofline_s is not None and median else None)
    schema = pa.schema([(name, ARROW_TYPES[sql_type]) for name, sql_type in columns])
    return pa.table(data, schema=schema)


def fill_roofline(con: duckdb.DuckDBPyConnection, family: str, roofline: RooflineCache) -> int:
    """Compute missing `roofline_s` (and the fraction) for catalog hardware; returns rows set.

    Runs inside the caller's transaction.
    """
    names = [row[0] for row in con.execute(
        f'SELECT DISTINCT hardware FROM "{family}" WHERE roofline_s IS NULL').fetchall()]
    known = [name for name in names if roofline.hardware(name) is not None]
    if not known:
        return 0
    shapes = [name for name, _ in shape_columns(family)]
    cols = ", ".join(f'"{name}"' for name in shapes)
    marks = ", ".join("?" * len(known))
    found = con.execute(f'SELECT DISTINCT op_key, hardware, {cols} FROM "{family}" '
                        f"WHERE roofline_s IS NULL AND hardware IN ({marks})", known).fetchall()
    keys, hardware, times = [], [], []
    for op_key, name, *values in found:
        op = op_from_dict(family, dict(zip(shapes, values, strict=True)))
        value = roofline.time_s(op, name)
        if value is not None:
            keys.append(op_key)
            hardware.append(name)
            times.append(value)
    if not keys:
        return 0
    con.register("_roofline", pa.table({"op_key": keys, "hardware": hardware,
                                        "roofline_s": pa.array(times, pa.float64())}))
    try:
        return con.execute(
            f'UPDATE "{family}" SET roofline_s = r.roofline_s, fraction_of_roofline = '
            f'CASE WHEN "{family}".median_s > 0 THEN r.roofline_s / "{family}".median_s END '
            f'FROM _roofline r WHERE "{family}".op_key = r.op_key AND '
            f'"{family}".hardware = r.hardware AND "{family}".roofline_s IS NULL').fetchall()[0][0]
    finally:
        con.unregister("_roofline")
