# SPDX-License-Identifier: Apache-2.0
"""The DuckDB schema of the measurement store: one table per operator family, typed columns.

Each family table has the spec's fields as typed columns (names = `analytical.ops.op_fields`),
then the columns every measurement has (`MEASUREMENT_COLUMNS`). `fingerprints` and `runs` hold
what many rows share; `schema_version` holds one integer, checked on open. Changing any column
here is a schema change: bump `SCHEMA_VERSION` (the contract test freezes the columns).
The store logic lives in `profiler.store`.
"""

from __future__ import annotations

from analytical.ops import OP_FAMILIES, op_fields

SCHEMA_VERSION = 1

# Spec fields that are not integers; every other spec field is a BIGINT dimension.
_SPEC_FIELD_TYPES: dict[str, str] = {
    "dtype": "VARCHAR",
    "kind": "VARCHAR",
    "phase": "VARCHAR",
    "causal": "BOOLEAN",
    "backward": "BOOLEAN",
}

# Columns every family table has after its shape columns, in order.
MEASUREMENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("point_key", "VARCHAR"),  # sha256(op_key, fingerprint id, backend, provenance)[:32]
    ("op_key", "VARCHAR"),  # spec.key, the engines' lookup key
    ("hardware", "VARCHAR"),  # catalog name (also in fingerprints, kept here for filters)
    ("fingerprint_id", "VARCHAR"),
    ("backend", "VARCHAR"),  # "torch.matmul", "nccl", "trtllm/torch_flow", ...
    ("status", "VARCHAR"),  # ok | oom | error | timeout | unsupported
    ("error", "VARCHAR"),
    ("run_id", "VARCHAR"),
    ("provenance", "VARCHAR"),  # "profiled" or "imported:<source>"
    ("measured_at", "TIMESTAMP"),  # UTC, when the row was stored
    ("flops", "DOUBLE"),  # spec.flops
    ("bytes", "DOUBLE"),  # spec.bytes
    ("median_s", "DOUBLE"),
    ("min_s", "DOUBLE"),
    ("max_s", "DOUBLE"),
    ("mean_s", "DOUBLE"),
    ("p10_s", "DOUBLE"),
    ("p90_s", "DOUBLE"),
    ("std_s", "DOUBLE"),
    ("n_samples", "INTEGER"),  # Timing.n ("n" is a GEMM dimension)
    ("outliers", "INTEGER"),
    ("roofline_s", "DOUBLE"),  # analytical.roofline.roofline_time on the catalog hardware
    ("fraction_of_roofline", "DOUBLE"),  # roofline_s / median_s; > ~1.05 is suspect
)

FINGERPRINT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("fingerprint_id", "VARCHAR"),
    ("hardware", "VARCHAR"),
    ("device_name", "VARCHAR"),
    ("device_count", "INTEGER"),
    ("driver", "VARCHAR"),
    ("cuda", "VARCHAR"),
    ("torch", "VARCHAR"),
    ("nccl", "VARCHAR"),
    ("triton", "VARCHAR"),
    ("clocks_mhz", "VARCHAR"),
    ("host", "VARCHAR"),
)

RUN_COLUMNS: tuple[tuple[str, str], ...] = (
    ("run_id", "VARCHAR"),
    ("command", "VARCHAR"),
    ("sweep", "VARCHAR"),
    ("fingerprint_id", "VARCHAR"),
    ("started_at", "TIMESTAMP"),
)

FAMILIES: tuple[str, ...] = tuple(OP_FAMILIES)


def shape_columns(family: str) -> tuple[tuple[str, str], ...]:
    """(name, DuckDB type) of a family's spec fields, in declaration order."""
    return tuple((name, _SPEC_FIELD_TYPES.get(name, "BIGINT")) for name in op_fields(family))


def family_columns(family: str) -> tuple[tuple[str, str], ...]:
    """All columns of a family table: shape columns, then `MEASUREMENT_COLUMNS`."""
    return shape_columns(family) + MEASUREMENT_COLUMNS


def table_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """Every table of the store and its columns (what the contract test freezes)."""
    tables = {family: family_columns(family) for family in FAMILIES}
    tables["fingerprints"] = FINGERPRINT_COLUMNS
    tables["runs"] = RUN_COLUMNS
    tables["schema_version"] = (("version", "INTEGER"),)
    return tables


def _create(table: str, columns: tuple[tuple[str, str], ...], key: str | None) -> str:
    body = ", ".join(f'"{name}" {sql_type}' + (" PRIMARY KEY" if name == key else "")
                     for name, sql_type in columns)
    return f'CREATE TABLE IF NOT EXISTS "{table}" ({body})'


def ddl() -> list[str]:
    """CREATE statements for a new store (idempotent)."""
    statements = [_create(family, family_columns(family), "point_key") for family in FAMILIES]
    statements.append(_create("fingerprints", FINGERPRINT_COLUMNS, "fingerprint_id"))
    statements.append(_create("runs", RUN_COLUMNS, "run_id"))
    statements.append(_create("schema_version", (("version", "INTEGER"),), None))
    return statements
