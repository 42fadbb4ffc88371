# SPDX-License-Identifier: Apache-2.0
"""Timing statistics: every timer (CPU perf_counter, CUDA events, collectives) returns a `Timing`.

Backend timers live in `profiler.timers`; this module only summarises samples so the store, the
importers and the timers share one definition.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """Summary of repeated measurements of one operator, in seconds."""

    n: int
    median_s: float
    min_s: float
    max_s: float
    mean_s: float
    p10_s: float
    p90_s: float
    std_s: float
    outliers: int  # samples outside [q1 - 1.5 IQR, q3 + 1.5 IQR] (Tukey fences)
    samples_s: tuple[float, ...] = ()


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of sorted values (numpy's default method)."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


def summarize(samples_s: Sequence[float], *, keep_samples: bool = True) -> Timing:
    """Median, min, p10, p90, std and Tukey outlier count of timing samples (seconds)."""
    if not samples_s:
        raise ValueError("summarize needs at least one sample")
    values = sorted(float(s) for s in samples_s)
    q1, q3 = _quantile(values, 0.25), _quantile(values, 0.75)
    iqr = q3 - q1
    outliers = sum(1 for v in values if v < q1 - 1.5 * iqr or v > q3 + 1.5 * iqr)
    return Timing(
        n=len(values),
        median_s=_quantile(values, 0.5),
        min_s=values[0],
        max_s=values[-1],
        mean_s=statistics.fmean(values),
        p10_s=_quantile(values, 0.1),
        p90_s=_quantile(values, 0.9),
        std_s=statistics.pstdev(values) if len(values) > 1 else 0.0,
        outliers=outliers,
        samples_s=tuple(samples_s) if keep_samples else (),
    )
