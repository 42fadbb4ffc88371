# SPDX-License-Identifier: Apache-2.0
"""What every column means: the import schema (`llmsim db schema`) and DuckDB column comments.

The store is a plain DuckDB file a user may open with the ``duckdb`` CLI; `comment_store` writes
these descriptions as ``COMMENT ON COLUMN`` (DuckDB >= 0.10) so ``duckdb_columns()`` shows them.
The column lists themselves live in `profiler.store_schema`; this module only describes them.
"""

from __future__ import annotations

from typing import Any

from analytical.ops import OP_FAMILIES, op_fields
from profiler.import_table import ALIASES, LATENCY_UNITS
from profiler.store_schema import (
    FAMILIES,
    FINGERPRINT_COLUMNS,
    MEASUREMENT_COLUMNS,
    RUN_COLUMNS,
    shape_columns,
)

SHAPE_DOCS: dict[str, str] = {
    "m": "GEMM rows of A and C", "n": "GEMM columns of B and C", "k": "GEMM reduction dim",
    "batch": "batch count (GEMM: batched matmuls; attention: sequences)",
    "dtype": "element type: bf16, fp16, fp8, fp32, int8, int4, fp4",
    "q_len": "query tokens per sequence", "kv_len": "key/value tokens per sequence",
    "heads": "query heads", "kv_heads": "key/value heads (GQA/MQA when < heads)",
    "head_dim": "dimension per head", "causal": "causal mask (true/false)",
    "phase": "prefill or decode", "backward": "gradient pass (true/false)",
    "kind": "operation kind (collective: all_reduce, all_gather, ...; memory: rmsnorm, ...; "
            "moe: dispatch, combine)",
    "size_bytes": "collective buffer per rank in bytes, as nccl-tests counts it",
    "group_size": "ranks in the collective", "ranks_per_node": "ranks per node",
    "rows": "tensor rows", "cols": "tensor columns", "tokens": "tokens routed",
    "hidden": "hidden size", "experts": "experts", "top_k": "experts per token",
}

MEASUREMENT_DOCS: dict[str, str] = {
    "point_key": "row identity: sha256(op_key, fingerprint_id, backend, provenance)[:32]",
    "op_key": "the operator spec key the simulator looks up",
    "hardware": "catalog hardware name (datasets/hardware/<name>.yaml)",
    "fingerprint_id": "device + software stack id (table fingerprints)",
    "backend": "kernel or library that ran it (torch.matmul, nccl, user, ...)",
    "status": "ok | oom | error | timeout | unsupported", "error": "error text if not ok",
    "run_id": "profiling run (table runs); empty for imports",
    "provenance": "profiled, or imported:<source>", "measured_at": "UTC time the row was stored",
    "flops": "floating-point operations of the spec", "bytes": "bytes the spec must move",
    "median_s": "median latency, seconds", "min_s": "fastest sample, seconds",
    "max_s": "slowest sample, seconds", "mean_s": "mean latency, seconds",
    "p10_s": "10th percentile, seconds", "p90_s": "90th percentile, seconds",
    "std_s": "standard deviation, seconds", "n_samples": "samples summarised",
    "outliers": "samples outside Tukey fences",
    "roofline_s": "roofline time on the catalog hardware, seconds",
    "fraction_of_roofline": "roofline_s / median_s (> ~1.05 is suspect)",
}

FINGERPRINT_DOCS: dict[str, str] = {
    "fingerprint_id": "sha256 of every field below [:16]", "hardware": "catalog hardware name",
    "device_name": "device as reported (nvidia-smi name)", "device_count": "devices taking part",
    "driver": "driver version", "cuda": "CUDA/ROCm version", "torch": "torch version",
    "nccl": "NCCL version", "triton": "Triton version", "clocks_mhz": "max clocks, sm=..,mem=..",
    "host": "host name",
}

RUN_DOCS: dict[str, str] = {
    "run_id": "profiling run id", "command": "command line", "sweep": "sweep name",
    "fingerprint_id": "fingerprint of the run", "started_at": "UTC start time",
}

_DEFAULTS: dict[str, dict[str, str]] = {
    "gemm": {"batch": "1"},
    "attention": {"kv_len": "q_len", "kv_heads": "heads", "causal": "true",
                  "phase": "prefill", "backward": "false", "batch": "(required)"},
    "collective": {"ranks_per_node": "group_size, at most 8"},
    "memory": {"backward": "false"},
    "moe": {},
}


def import_schema(family: str) -> list[dict[str, str]]:
    """The columns `llmsim db import` reads for ``family``: name, need, meaning."""
    rows = []
    defaults = _DEFAULTS.get(family, {})
    aliases = {field: alias for alias, field in ALIASES.get(family, {}).items()}
    for name in op_fields(family):
        default = defaults.get(name)
        if default is None and name not in ("dtype",) and _has_default(family, name):
            default = "spec default"
        need = "required" if default in (None, "(required)") else f"default {default}"
        alias = f" (or {aliases[name]})" if name in aliases else ""
        rows.append({"column": name + alias, "need": need, "meaning": SHAPE_DOCS.get(name, "")})
    rows.append({"column": " | ".join(LATENCY_UNITS), "need": "one required",
                 "meaning": "latency in the unit its name says"})
    rows.append({"column": "hardware", "need": "column or --hardware",
                 "meaning": "catalog hardware name"})
    rows += [
        {"column": "source", "need": "optional", "meaning": "provenance becomes "
         "imported:<source> (default: the file name)"},
        {"column": "backend", "need": "optional", "meaning": "default 'user'"},
        {"column": "n_samples", "need": "optional", "meaning": "samples behind the latency"},
        {"column": "device_name, device_count, driver, cuda, torch, nccl, triton, clocks_mhz, "
         "host", "need": "optional", "meaning": "fingerprint fields (id derived)"},
    ]
    return rows


def _has_default(family: str, name: str) -> bool:
    from dataclasses import MISSING, fields  # noqa: PLC0415

    for f in fields(OP_FAMILIES[family]):
        if f.name == name:
            return f.default is not MISSING
    return False


def store_columns() -> list[dict[str, str]]:
    """Every table and column of the store with its type and meaning."""
    rows: list[dict[str, str]] = []
    for table, columns, docs in _tables():
        for name, sql_type in columns:
            rows.append({"table": table, "column": name, "type": sql_type,
                         "meaning": docs.get(name, "")})
    return rows


def _tables() -> list[tuple[str, tuple[tuple[str, str], ...], dict[str, str]]]:
    out = [(family, shape_columns(family) + MEASUREMENT_COLUMNS,
            {**SHAPE_DOCS, **MEASUREMENT_DOCS}) for family in FAMILIES]
    out.append(("fingerprints", FINGERPRINT_COLUMNS, FINGERPRINT_DOCS))
    out.append(("runs", RUN_COLUMNS, RUN_DOCS))
    return out


def comment_store(con: Any) -> int:
    """Write ``COMMENT ON COLUMN`` for every documented column; returns how many were set.

    Returns 0 when the installed DuckDB lacks the statement (comments are a convenience).
    """
    import duckdb  # noqa: PLC0415

    count = 0
    for row in store_columns():
        if not row["meaning"]:
            continue
        text = row["meaning"].replace("'", "''")
        try:
            con.execute(f'COMMENT ON COLUMN "{row["table"]}"."{row["column"]}" IS \'{text}\'')
        except (duckdb.ParserException, duckdb.NotImplementedException):
            return 0
        count += 1
    return count
