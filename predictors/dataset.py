# SPDX-License-Identifier: Apache-2.0
"""Training data: frames from the measurement store, one provenance group, and a fingerprint.

Rows measured by different frameworks (kernel sources) for the same shape disagree by more than
a model's error budget, so one model is trained on ONE provenance group (the largest by default,
or the one asked for) and the group is recorded with the run. Inference takes an op spec without
a backend, so backend cannot be a feature. Within the group, repeated measurements of one
``op_key`` are folded to their median. The store itself lives in `profiler.store`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analytical.errors import LlmsimError, SpecError
from analytical.ops import OpSpec, op_fields, op_from_dict

if TYPE_CHECKING:
    from profiler.store import Store

TARGET_COLUMN = "median_s"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """Lineage of a training set: row count and SHA-256 of its sorted (op_key, latency) rows."""

    rows: int
    sha256: str

    def __str__(self) -> str:
        return f"{self.rows}:{self.sha256[:16]}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingData:
    """One (hardware, family, provenance) training set, sorted by op key (deterministic)."""

    hardware: str
    family: str
    provenance: str
    ops: tuple[OpSpec, ...]
    latency_s: np.ndarray  # median latency per op, seconds
    fingerprint: Fingerprint
    duplicates_folded: int  # rows merged into another row with the same op key

    def __len__(self) -> int:
        return len(self.ops)


def open_store(db_path: str | Path | None = None) -> Store:
    """The store at ``db_path`` (default: `analytical.paths.default_db_path`) for training:
    missing (named or default), locked or corrupt is a `StoreError` naming the file
    (`profiler.store.open_for_reading`)."""
    from profiler.store import open_for_reading

    store = open_for_reading(db_path, required=True, missing_hint=(
        "import or profile data first (llmsim db import-parquet datasets/measurements, "
        "llmsim profile run)"))
    assert store is not None  # required=True raises rather than return None
    return store


def load_frame(store: Store, hardware: str, family: str, *, dtype: str | None = None,
               provenance: str | None = None) -> pd.DataFrame:
    """Rows with status ok for (hardware, family[, dtype, provenance]) from a `Store`."""
    return store.frame(family, hardware=hardware, dtype=dtype, provenance=provenance,
                       status="ok")


def provenance_counts(frame: pd.DataFrame) -> dict[str, int]:
    """Rows per provenance, largest first; ties put the later name (newer version) first."""
    if frame.empty:
        return {}
    counts = frame.groupby("provenance", sort=True).size()
    by_name = sorted(((str(p), int(n)) for p, n in counts.items()), key=lambda kv: kv[0],
                     reverse=True)
    return dict(sorted(by_name, key=lambda kv: -kv[1]))


def provenance_coverage(frame: pd.DataFrame, family: str) -> dict[str, int]:
    """Distinct categorical configurations (collective kind x dtype, attention phase x causal,
    GEMM dtype, ...) per provenance: how much of what simulate asks a model trained on that
    group can answer (`predictors.domain`: it declines the rest)."""
    columns = [c for c in op_fields(family) if c in frame.columns and (
        pd.api.types.is_bool_dtype(frame[c]) or not pd.api.types.is_numeric_dtype(frame[c]))]
    if not columns:  # nothing categorical: every group covers the one configuration
        return {str(p): 1 for p in frame["provenance"].unique()}
    distinct = frame.drop_duplicates(["provenance", *columns])
    return {str(k): int(v) for k, v in distinct.groupby("provenance").size().items()}


def pick_provenance(frame: pd.DataFrame, provenance: str | None = None, *,
                    family: str | None = None) -> str:
    """The asked-for provenance (must exist), or the group that covers the most categorical
    configurations of ``family`` (the most rows when ``family`` is None, and among equals;
    then the later name, i.e. the newer version). Coverage first: a collective model trained
    on 2 kinds must decline the other 3, however many sizes it has seen."""
    counts = provenance_counts(frame)
    if not counts:
        raise LlmsimError("no rows with status ok for this hardware and family")
    if provenance is None:
        if family is None:
            return next(iter(counts))
        coverage = provenance_coverage(frame, family)
        return max(counts, key=lambda p: (coverage.get(p, 0), counts[p], p))
    if provenance not in counts:
        known = ", ".join(f"{p} ({n} rows)" for p, n in counts.items())
        raise SpecError("provenance", f"no rows from {provenance!r}; available: {known}")
    return provenance


def training_data(frame: pd.DataFrame, *, hardware: str, family: str,
                  provenance: str | None = None) -> TrainingData:
    """Fold one provenance group of a store frame into ops + median latencies."""
    chosen = pick_provenance(frame, provenance, family=family)
    group = frame[frame["provenance"] == chosen]
    fields = list(op_fields(family))
    missing = [c for c in [*fields, "op_key", TARGET_COLUMN] if c not in group.columns]
    if missing:
        raise SpecError(f"frame.{missing[0]}", f"column missing from the {family} frame")
    group = group[group[TARGET_COLUMN] > 0]
    folded = group.groupby("op_key", sort=True).agg(
        {**{f: "first" for f in fields}, TARGET_COLUMN: "median"})
    ops = tuple(op_from_dict(family, _plain(row), field=f"row[{key}]")
                for key, row in zip(folded.index, folded[fields].to_dict("records"), strict=True))
    latency = folded[TARGET_COLUMN].to_numpy(dtype=np.float64)
    return TrainingData(hardware=hardware, family=family, provenance=chosen, ops=ops,
                        latency_s=latency, fingerprint=fingerprint(folded.index, latency),
                        duplicates_folded=len(group) - len(folded))


def _plain(row: Mapping[Hashable, object]) -> dict[str, object]:
    """Numpy scalars -> Python values, NaN -> None (so defaults apply)."""
    out: dict[str, object] = {}
    for key, value in row.items():
        if hasattr(value, "item"):
            value = value.item()
        if isinstance(value, float) and value != value:
            value = None
        out[str(key)] = value  # frame column names are strings already
    return out


def fingerprint(keys: Iterable[object], latency_s: np.ndarray) -> Fingerprint:
    """Row count + SHA-256 over ``key,latency`` lines in key order (full float precision)."""
    digest = hashlib.sha256()
    for key, value in sorted(zip(map(str, keys), latency_s.tolist(), strict=True)):
        digest.update(f"{key},{value!r}\n".encode())
    return Fingerprint(rows=len(latency_s), sha256=digest.hexdigest())
