# SPDX-License-Identifier: Apache-2.0
"""What the CPU validation loop reports: one row per (model, mode), the unknown aten calls and
the summary across models (median absolute error for forward + backward, the worst case).

Errors are signed, ``(predicted - measured) / measured`` in percent. The composition error
compares the sum of the STORED measured per-operator medians (no predictor, no roofline) with
the measured model: it separates what the operator benchmarks miss (fusion, cache state,
framework overhead between kernels) from what the predictors get wrong.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

ENGINES = ("store", "xgboost", "roofline")  # simulate.engines ENGINE_ORDER
FWD_BWD = "train_step"


def error_pct(predicted_s: float | None, measured_s: float) -> float | None:
    """Signed relative error in percent; None when either side is missing or not positive."""
    if predicted_s is None or not math.isfinite(predicted_s) or measured_s <= 0:
        return None
    return (predicted_s - measured_s) / measured_s * 100.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationRow:
    """Predicted against measured for one model and one mode."""

    model: str
    mode: str  # forward | train_step (forward + backward) | generate
    ops: int  # costed calls in the trace
    distinct_ops: int  # distinct op keys among them
    predicted_s: float  # sum over the traced calls in order (one device, no overlap) + host_s
    host_s: float = 0.0  # host work between the calls (`simulate.validate.host`), in predicted_s
    measured_s: float  # median of repeats of the real model
    measured_spread: float  # (p90 - p10) / median of the model timing
    measured_min_s: float | None = None  # fastest repeat: least disturbed by other load
    engine_share: dict[str, float] = field(hash=False)  # engine -> fraction of the operators' time
    composition_s: float | None  # sum of stored per-op medians; None if any op lacks one
    composition_missing: int  # calls with no stored median (this fingerprint)
    predictor_s: float | None = None  # chain without the store (xgboost, else roofline) + host_s
    predictor_xgb_share: float = 0.0  # of predictor_s answered by xgboost
    cache: str = "cold"  # operator prices: "cold" store or "llc-warm" (simulate.validate.cache)
    working_set_bytes: int = 0  # `cache.working_set_bytes` of the trace
    composition_cold_s: float | None = None  # the composition from the cold store (all rows)
    cache_fraction: float = 0.0  # weight of the LLC-warm store in the prices (validate.warmth)
    composition_fit_s: float | None = None  # the composition under the `fit` rule

    @property
    def error_pct(self) -> float | None:
        return error_pct(self.predicted_s, self.measured_s)

    @property
    def composition_error_pct(self) -> float | None:
        return error_pct(self.composition_s, self.measured_s)

    @property
    def error_vs_min_pct(self) -> float | None:
        return None if self.measured_min_s is None else error_pct(self.predicted_s,
                                                                  self.measured_min_s)

    @property
    def fit_error_pct(self) -> float | None:
        """The error under the `fit` rule: the prediction with its composition swapped for the
        fit rule's (exact when the store serves every call, as in `validate cpu`)."""
        if self.composition_fit_s is None or self.composition_s is None:
            return None
        return error_pct(self.predicted_s - self.composition_s + self.composition_fit_s,
                         self.measured_s)

    @property
    def predictor_error_pct(self) -> float | None:
        return error_pct(self.predictor_s, self.measured_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownRow:
    """Unknown aten calls of one overload in one (model, mode), priced by the roofline."""

    model: str
    mode: str
    aten: str
    count: int
    bytes: int
    time_s: float
    share: float  # of the (model, mode)'s predicted time


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationReport:
    rows: tuple[ValidationRow, ...]
    unknown: tuple[UnknownRow, ...]
    hardware: str
    threads: int
    stages: dict[str, Any] = field(default_factory=dict, hash=False)  # profile/train summaries
    elapsed_s: dict[str, float] = field(default_factory=dict, hash=False)  # per stage

    def median_abs_error_pct(self, mode: str = FWD_BWD) -> float | None:
        errors = [abs(e) for r in self.rows if r.mode == mode and (e := r.error_pct) is not None]
        return statistics.median(errors) if errors else None

    def worst(self, mode: str | None = None) -> ValidationRow | None:
        """The row with the largest absolute error (of ``mode``, or of every mode)."""
        rows = [r for r in self.rows if (mode is None or r.mode == mode)
                and r.error_pct is not None]
        return max(rows, key=lambda r: abs(r.error_pct)) if rows else None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for mode in dict.fromkeys(r.mode for r in self.rows):
            out[f"median_abs_error_pct_{mode}"] = self.median_abs_error_pct(mode)
            vs_min = [abs(e) for r in self.rows if r.mode == mode
                      and (e := r.error_vs_min_pct) is not None]
            out[f"median_abs_error_vs_min_pct_{mode}"] = (
                statistics.median(vs_min) if vs_min else None)
            comp = [abs(e) for r in self.rows if r.mode == mode
                    and (e := r.composition_error_pct) is not None]
            out[f"median_abs_composition_error_pct_{mode}"] = (
                statistics.median(comp) if comp else None)
            fit = [abs(e) for r in self.rows if r.mode == mode
                   and (e := r.fit_error_pct) is not None]
            out[f"median_abs_fit_error_pct_{mode}"] = statistics.median(fit) if fit else None
            pred = [abs(e) for r in self.rows if r.mode == mode
                    and (e := r.predictor_error_pct) is not None]
            out[f"median_abs_predictor_error_pct_{mode}"] = (
                statistics.median(pred) if pred else None)
        for label, mode in (("worst_fwd_bwd", FWD_BWD), ("worst_overall", None)):
            row = self.worst(mode)
            out[label] = (None if row is None else
                          {"model": row.model, "mode": row.mode, "error_pct": row.error_pct})
        return out


def row_dict(row: ValidationRow) -> dict[str, Any]:
    """A flat, JSON-ready row (times in ms, shares in percent)."""
    out: dict[str, Any] = {
        "model": row.model, "mode": row.mode, "ops": row.ops, "distinct": row.distinct_ops,
        "predicted_ms": row.predicted_s * 1e3, "host_ms": row.host_s * 1e3,
        "measured_ms": row.measured_s * 1e3,
        "error_pct": row.error_pct, "spread_pct": row.measured_spread * 100.0,
        "measured_min_ms": None if row.measured_min_s is None else row.measured_min_s * 1e3,
        "error_vs_min_pct": row.error_vs_min_pct,
        "cache": row.cache, "working_set_mb": row.working_set_bytes / 2**20,
    }
    for engine in ENGINES:
        out[f"{engine}_pct"] = row.engine_share.get(engine, 0.0) * 100.0
    out["composition_ms"] = None if row.composition_s is None else row.composition_s * 1e3
    out["composition_error_pct"] = row.composition_error_pct
    out["composition_missing"] = row.composition_missing
    out["composition_cold_ms"] = (None if row.composition_cold_s is None
                                  else row.composition_cold_s * 1e3)
    out["composition_cold_error_pct"] = error_pct(row.composition_cold_s, row.measured_s)
    out["cache_fraction"] = row.cache_fraction
    out["composition_fit_ms"] = (None if row.composition_fit_s is None
                                 else row.composition_fit_s * 1e3)
    out["composition_fit_error_pct"] = error_pct(row.composition_fit_s, row.measured_s)
    out["fit_error_pct"] = row.fit_error_pct
    out["predictor_ms"] = None if row.predictor_s is None else row.predictor_s * 1e3
    out["predictor_error_pct"] = row.predictor_error_pct
    out["predictor_xgb_pct"] = row.predictor_xgb_share * 100.0
    return out


def unknown_dict(row: UnknownRow) -> dict[str, Any]:
    return {"model": row.model, "mode": row.mode, "aten": row.aten, "count": row.count,
            "bytes": row.bytes, "roofline_ms": row.time_s * 1e3, "share_pct": row.share * 100.0}


def report_dict(report: ValidationReport) -> dict[str, Any]:
    """The whole report as one JSON-ready object (``llmsim validate cpu --json``)."""
    return {"hardware": report.hardware, "threads": report.threads,
            "rows": [row_dict(r) for r in report.rows],
            "unknown_ops": [unknown_dict(r) for r in report.unknown],
            "summary": report.summary(), "stages": report.stages,
            "elapsed_s": report.elapsed_s}


# (row_dict key, short header) of the printed table; --json has every key.
TABLE_COLUMNS = (("model", "model"), ("mode", "mode"), ("ops", "ops"), ("cache", "cache"),
                 ("predicted_ms", "pred ms"), ("host_ms", "host ms"), ("measured_ms", "meas ms"),
                 ("error_pct", "err %"), ("error_vs_min_pct", "err(min) %"), ("store_pct", "store %"), ("xgboost_pct", "xgb %"),
                 ("roofline_pct", "roof %"), ("composition_error_pct", "comp err %"),
                 ("predictor_error_pct", "xgb-only err %"), ("spread_pct", "spread %"))
UNKNOWN_COLUMNS = ("model", "mode", "aten", "count", "bytes", "roofline_ms", "share_pct")


def table_rows(report: ValidationReport) -> list[dict[str, Any]]:
    """The printed table: `TABLE_COLUMNS` headers, numbers rounded for reading."""
    out = []
    for row in report.rows:
        values = row_dict(row)
        out.append({header: (round(values[key], 1) if isinstance(values[key], float)
                             else values[key]) for key, header in TABLE_COLUMNS})
    return out
