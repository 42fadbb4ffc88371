# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the importers of published measurement sets."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence

import pandas as pd

from profiler.timing import Timing

MS = 1e-3  # seconds per millisecond
NAN = math.nan


def timing_from_ms(*, median: float, minimum: float = NAN, maximum: float = NAN,
                   mean: float = NAN, std: float = NAN, n: int = 1) -> Timing:
    """A `Timing` from statistics reported in milliseconds; unknown ones stay NaN (stored NULL).

    ``n`` is the number of values the source reported for the point (not its repetitions,
    which published sets rarely state).
    """
    return Timing(n=int(n), median_s=median * MS, min_s=minimum * MS, max_s=maximum * MS,
                  mean_s=mean * MS, p10_s=NAN, p90_s=NAN, std_s=std * MS, outliers=0)


def aggregate_latency(frame: pd.DataFrame, keys: Sequence[str],
                      latency: str = "latency") -> pd.DataFrame:
    """One row per distinct ``keys``: median, min, max, mean and count of ``latency``.

    Published sets repeat some points (re-collections, copied folders); the store keeps one row
    per point, so repeats are summarised rather than dropped.
    """
    grouped = frame.groupby(list(keys), sort=False, dropna=False)[latency]
    out = grouped.agg(["median", "min", "max", "mean", "count"]).reset_index()
    return out.rename(columns={"median": "lat_median", "min": "lat_min", "max": "lat_max",
                               "mean": "lat_mean", "count": "lat_count"})


def chunked(items: Iterable[object], size: int) -> Iterator[list[object]]:
    """Lists of at most ``size`` consecutive items."""
    batch: list[object] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
