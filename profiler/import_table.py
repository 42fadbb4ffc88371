# SPDX-License-Identifier: Apache-2.0
"""Import a user's own measurements (CSV, Parquet or JSON) with a minimal schema.

A user has timings in a spreadsheet, not store rows. Per row this module needs only the operator
shape (the spec fields of `analytical.ops`, with the common aliases below), its ``dtype``, ONE
latency column with its unit (``latency_s`` | ``latency_ms`` | ``latency_us`` | ``median_s``)
and the hardware (a catalog name, given once or per row). Everything the store keeps beyond that
is derived: the op key, the point key, a fingerprint (id hashed from the optional fingerprint
columns), FLOPs/bytes and the roofline columns. Rows repeating a shape are summarised
(median, min, max, ...) into one measurement, as the published-set importers do.

Every error is one line naming the file, the row (1-based, as a spreadsheet shows it; the header
is row 1) and the column.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analytical.errors import LlmsimError, SpecError
from analytical.ops import OP_FAMILIES, OpSpec, op_fields, op_from_dict
from profiler.fingerprint import FINGERPRINT_FIELDS, Fingerprint
from profiler.measurement import Measurement, Status
from profiler.timing import Timing, summarize

# Latency columns and their factor to seconds; exactly one must be present.
LATENCY_UNITS: dict[str, float] = {"latency_s": 1.0, "median_s": 1.0, "latency_ms": 1e-3,
                                   "latency_us": 1e-6}

# Common spellings (vLLM/AIConfigurator/nccl-tests columns) -> the spec field.
ALIASES: dict[str, dict[str, str]] = {
    "gemm": {"batch_size": "batch"},
    "attention": {"batch_size": "batch", "seq_len": "q_len", "num_heads": "heads",
                  "num_kv_heads": "kv_heads", "num_key_value_heads": "kv_heads"},
    "collective": {"op": "kind", "op_name": "kind", "bytes": "size_bytes",
                   "message_bytes": "size_bytes", "num_gpus": "group_size",
                   "world_size": "group_size"},
    "memory": {"op": "kind", "op_name": "kind"},
    "moe": {"op": "kind", "num_tokens": "tokens", "hidden_size": "hidden",
            "num_experts": "experts", "topk": "top_k"},
}

# Columns that identify a family when no ``family`` column or option is given (first match).
_SIGNATURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("attention", frozenset({"q_len", "heads", "head_dim"})),
    ("moe", frozenset({"tokens", "hidden", "experts"})),
    ("collective", frozenset({"kind", "size_bytes", "group_size"})),
    ("memory", frozenset({"kind", "rows", "cols"})),
    ("gemm", frozenset({"m", "n", "k"})),
)

# Columns the importer reads besides shapes and latency (all optional).
META_COLUMNS = ("family", "hardware", "backend", "source", "status", "n_samples",
                *(f for f in FINGERPRINT_FIELDS if f != "hardware"))

# Nodes of 8 GPUs, the DGX/HGX layout: the default `ranks_per_node` of a collective row.
_GPUS_PER_NODE = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    path: Path
    family: str
    rows: int  # rows read from the file
    measurements: int  # distinct points after folding repeats
    inserted: int
    skipped: int  # already stored


def read_table(path: Path) -> pd.DataFrame:
    """A CSV, Parquet or JSON (records list or JSON lines) file as a DataFrame."""
    if not path.is_file():
        raise SpecError("file", f"no such file: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path, skipinitialspace=True)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
        if suffix in (".json", ".jsonl"):
            text = path.read_text()
            stripped = text.lstrip()
            if stripped.startswith("["):
                return pd.DataFrame(json.loads(text))
            if stripped.startswith("{") and suffix == ".json" and "\n{" not in stripped:
                data = json.loads(text)
                rows = data.get("rows") if isinstance(data, Mapping) else None
                if not isinstance(rows, list):
                    raise SpecError("file", f"{path}: a JSON object needs a 'rows' list")
                return pd.DataFrame(rows)
            return pd.read_json(path, lines=True)
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        if isinstance(exc, LlmsimError):
            raise
        raise SpecError("file", f"{path}: not a readable {suffix[1:]} file: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                        ) from None
    raise SpecError("file", f"{path}: unknown format {suffix!r}; use .csv, .parquet or .json")


def detect_family(columns: list[str]) -> str:
    """The family whose signature columns (after aliases) the table has."""
    for family, needed in _SIGNATURES:
        renamed = {ALIASES[family].get(c, c) for c in columns}
        if needed <= renamed:
            return family
    raise SpecError("family", "cannot tell the operator family from the columns "
                    f"{', '.join(columns)}; add a 'family' column or --family "
                    f"({', '.join(OP_FAMILIES)})")


def _plain(value: Any) -> Any:
    """numpy scalars -> Python; NaN/None/'' -> None."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str) and not value.strip():
        return None
    return value


def _boolean(value: Any, where: str, column: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "t"):
        return True
    if text in ("false", "0", "no", "f"):
        return False
    raise SpecError(f"column {column}", f"expected true/false, got {value!r}", source=where)


def _integer(value: Any, where: str, column: str) -> int:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise SpecError(f"column {column}", f"expected an integer, got {value!r}",
                            source=where) from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not value.is_integer()):
        raise SpecError(f"column {column}", f"expected an integer, got {value!r}", source=where)
    return int(value)


def _shape(family: str, row: Mapping[str, Any], where: str) -> OpSpec:
    """The spec of one row; defaults: kv_len = q_len, kv_heads = heads, ranks_per_node = group
    size up to one 8-GPU node."""
    fields = op_fields(family)
    values: dict[str, Any] = {}
    for name in fields:
        value = row.get(name)
        if value is None:
            continue
        if name in ("causal", "backward"):
            value = _boolean(value, where, name)
        elif name not in ("dtype", "kind", "phase"):
            value = _integer(value, where, name)
        values[name] = value
    if "dtype" not in values:
        raise SpecError("column dtype", "missing (bf16, fp16, fp8, fp32, ...)", source=where)
    if family == "attention":
        values.setdefault("kv_len", values.get("q_len"))
        values.setdefault("kv_heads", values.get("heads"))
    if family == "collective" and "group_size" in values:
        group = values["group_size"]
        values.setdefault("ranks_per_node", group if group <= _GPUS_PER_NODE else _GPUS_PER_NODE)
    try:
        return op_from_dict(family, values, field="column")
    except SpecError as exc:
        column = exc.field.split(".", 1)[-1]
        raise SpecError(f"column {column}", exc.reason, source=where) from None


def _latency_column(columns: list[str], path: Path) -> str:
    present = [c for c in LATENCY_UNITS if c in columns]
    if len(present) != 1:
        raise SpecError("column latency_s", f"{path}: need exactly one latency column of "
                        f"{', '.join(LATENCY_UNITS)}; found {present or 'none'}")
    return present[0]


def _fingerprint(row: Mapping[str, Any], hardware: str, op: OpSpec, where: str) -> Fingerprint:
    values: dict[str, Any] = {}
    for name in FINGERPRINT_FIELDS:
        if name == "hardware" or row.get(name) is None:
            continue
        values[name] = (_integer(row[name], where, name) if name == "device_count"
                        else str(row[name]))
    default_count = op.group_size if op.family == "collective" else 1
    values.setdefault("device_count", default_count)
    values.setdefault("device_name", hardware)
    try:
        return Fingerprint(hardware=hardware, **values)
    except SpecError as exc:
        raise SpecError(f"column {exc.field.split('.', 1)[-1]}", exc.reason, source=where) from None


def _hardware(row: Mapping[str, Any], default: str | None, where: str, known: set[str]) -> str:
    name = row.get("hardware") or default
    if not name:
        raise SpecError("column hardware", "missing: add a 'hardware' column or pass "
                        "--hardware NAME (see `llmsim hardware list`)", source=where)
    name = str(name)
    if name not in known:
        raise SpecError("column hardware", f"unknown hardware {name!r}; add "
                        f"datasets/hardware/{name}.yaml or use one of `llmsim hardware list`",
                        source=where)
    return name


def rows_to_measurements(frame: pd.DataFrame, path: Path, *, family: str | None = None,
                         hardware: str | None = None, source: str | None = None,
                         backend: str | None = None) -> tuple[str, list[Measurement]]:
    """Validate every row and fold repeats of a point into one `Measurement` each."""
    from analytical.hardware import hardware_names  # noqa: PLC0415 - catalog read once here

    columns = [str(c).strip() for c in frame.columns]
    frame = frame.set_axis(columns, axis=1)
    if frame.empty:
        raise SpecError("file", f"{path}: no rows")
    if family is None and "family" in columns:
        found = {str(v) for v in frame["family"].dropna().unique()}
        if len(found) > 1:
            raise SpecError("column family", f"{path}: one family per file, found "
                            f"{', '.join(sorted(found))}")
        family = found.pop() if found else None
    family = family or detect_family(columns)
    if family not in OP_FAMILIES:
        raise SpecError("column family", f"unknown family {family!r}; known: "
                        f"{', '.join(OP_FAMILIES)}")
    frame = frame.rename(columns={a: f for a, f in ALIASES[family].items() if a in columns
                                  and f not in columns})
    latency = _latency_column(list(frame.columns), path)
    allowed = set(op_fields(family)) | set(LATENCY_UNITS) | set(META_COLUMNS)
    unknown = sorted(set(frame.columns) - allowed)
    if unknown:
        raise SpecError(f"column {unknown[0]}", f"{path}: not a {family} column; allowed: "
                        + ", ".join(sorted(allowed)))
    known = set(hardware_names())
    groups: dict[tuple[str, str, str, str], list[tuple[float, int, OpSpec, Fingerprint]]] = {}
    for index, raw in enumerate(frame.to_dict(orient="records")):
        row = {k: _plain(v) for k, v in raw.items()}
        where = f"{path} row {index + 2}"
        op = _shape(family, row, where)
        hw = _hardware(row, hardware, where, known)
        fp = _fingerprint(row, hw, op, where)
        seconds = _seconds(row.get(latency), latency, where)
        n = _integer(row["n_samples"], where, "n_samples") if row.get("n_samples") else 1
        name = str(row.get("backend") or backend or "user")
        prov = f"imported:{row.get('source') or source or path.stem}"
        groups.setdefault((op.key, fp.id, name, prov), []).append((seconds, n, op, fp))
    out = []
    for (_, _, name, prov), items in groups.items():
        op, fp = items[0][2], items[0][3]
        timing = _timing([s for s, _, _, _ in items], sum(n for _, n, _, _ in items))
        out.append(Measurement(op=op, fingerprint=fp, backend=name, status=Status.OK,
                               timing=timing, provenance=prov))
    return family, out


def _seconds(value: Any, column: str, where: str) -> float:
    try:
        number = float(value) if value is not None else math.nan
    except (TypeError, ValueError):
        raise SpecError(f"column {column}", f"expected a number, got {value!r}",
                        source=where) from None
    if not math.isfinite(number) or number <= 0:
        raise SpecError(f"column {column}", f"must be a positive number, got {value!r}",
                        source=where)
    return number * LATENCY_UNITS[column]


def _timing(samples: list[float], n: int) -> Timing:
    """Summary of the rows of one point; ``n`` = samples they stand for (n_samples or rows)."""
    base = summarize(samples, keep_samples=False)
    if len(samples) == 1:  # one reported number: the spread is unknown, not zero
        return Timing(n=n, median_s=base.median_s, min_s=math.nan, max_s=math.nan,
                      mean_s=math.nan, p10_s=math.nan, p90_s=math.nan, std_s=math.nan,
                      outliers=0)
    return Timing(n=max(n, base.n), median_s=base.median_s, min_s=base.min_s, max_s=base.max_s,
                  mean_s=base.mean_s, p10_s=base.p10_s, p90_s=base.p90_s, std_s=base.std_s,
                  outliers=base.outliers)


def import_table(store: Any, path: str | Path, *, family: str | None = None,
                 hardware: str | None = None, source: str | None = None,
                 backend: str | None = None) -> ImportResult:
    """Read, validate and insert one file into ``store`` (a `profiler.store.Store`)."""
    path = Path(path)
    frame = read_table(path)
    family, measurements = rows_to_measurements(frame, path, family=family, hardware=hardware,
                                                source=source, backend=backend)
    inserted = store.insert(measurements)
    return ImportResult(path=path, family=family, rows=len(frame),
                        measurements=len(measurements), inserted=inserted,
                        skipped=len(measurements) - inserted)
