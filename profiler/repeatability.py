# SPDX-License-Identifier: Apache-2.0
"""Run-to-run agreement of two measurements of the same operators: the noise floor.

A predictor cannot be more accurate than the data it is scored on is repeatable: two runs of one
sweep disagree by some percent, most on the shortest kernels. `compare_runs` matches the ``ok``
rows of two sets (stores or Parquet folders from `llmsim db export`) on (hardware, family, op
key, backend) and reports the absolute percent difference of the second median from the first,
per family and per latency band (of the first run's median), and the median ratio second /
first, which says whether one set is systematically slower. With ``across_backends`` operators
match on (hardware, family, op key) alone: two software stacks measuring the same shapes (our
torch/cuBLAS H100 GEMMs against TensorRT-LLM's) rather than two runs of one. With
``across_hardware`` they match on (family, op key, backend): one stack's kernels on two GPUs (our
H100 and H200 sweeps), whose median ratio is the second GPU's speed-up. Behind ``llmsim db
compare``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from analytical.inputs import read_parquet
from profiler.measurement import StoreError
from profiler.store import open_for_reading
from profiler.store_parquet import parquet_files
from profiler.store_schema import FAMILIES

__all__ = ["LATENCY_BANDS_US", "Agreement", "compare_runs", "load_ok_rows"]

# Band edges in microseconds: launch-bound kernels (< 20 us) are where timers disagree most.
LATENCY_BANDS_US: tuple[float, ...] = (0.0, 10.0, 20.0, 50.0, 100.0, 1000.0, float("inf"))
_MATCH = ("hardware", "family", "op_key", "backend")
_MATCH_ACROSS_BACKENDS = ("hardware", "family", "op_key")
_MATCH_ACROSS_HARDWARE = ("family", "op_key", "backend")


@dataclass(frozen=True, slots=True, kw_only=True)
class Agreement:
    """Absolute percent differences between two runs for one family (and band)."""

    family: str
    band_us: str  # "all" or "[lo, hi)"
    n: int
    mean_pct: float
    median_pct: float
    p90_pct: float
    max_pct: float
    over_10_pct: float  # share of operators, in percent, whose runs differ by more than 10%
    median_ratio: float  # median of second / first: above 1, the second set is slower

    def as_row(self) -> dict[str, object]:
        return asdict(self)


def load_ok_rows(path: str | Path) -> pd.DataFrame:
    """The ok rows of a store file or of a Parquet folder/file, with a ``family`` column."""
    path = Path(path)
    frames = []
    if path.is_file() and path.suffix != ".parquet":
        with open_for_reading(path) as store:
            for family in FAMILIES:
                frame = store.frame(family, status="ok")
                frames.append(frame.assign(family=family))
    else:
        for file in parquet_files(path):
            frame = read_parquet(file, "parquet")
            frames.append(frame[frame["status"] == "ok"].assign(family=file.stem))
    frames = [f for f in frames if not f.empty]
    if not frames:
        raise StoreError(f"{path}: no rows with status ok")
    columns = [*_MATCH, "median_s"]
    return pd.concat([f[columns] for f in frames], ignore_index=True)


def _agreement(family: str, band: str, rows: pd.DataFrame) -> Agreement:
    pct = ((rows["second_s"] - rows["first_s"]).abs() / rows["first_s"] * 100).to_numpy()
    ratio = (rows["second_s"] / rows["first_s"]).to_numpy()
    return Agreement(family=family, band_us=band, n=len(pct), mean_pct=float(pct.mean()),
                     median_pct=float(np.median(pct)), p90_pct=float(np.quantile(pct, 0.9)),
                     max_pct=float(pct.max()), over_10_pct=float((pct > 10).mean() * 100),
                     median_ratio=float(np.median(ratio)))


def compare_runs(first: pd.DataFrame, second: pd.DataFrame, *,
                 bands_us: tuple[float, ...] = LATENCY_BANDS_US,
                 across_backends: bool = False,
                 across_hardware: bool = False) -> list[Agreement]:
    """Per family: all matched operators, then each latency band that holds any.

    Operators measured several times in one set (or, ``across_backends``, by several backends)
    are folded to their median first, so each operator counts once. Raises StoreError when the
    two sets share no operator, or when both ``across_*`` are asked (one of them, not both).
    """
    if across_backends and across_hardware:
        raise StoreError("compare across backends or across hardware, not both")
    match = list(_MATCH_ACROSS_HARDWARE if across_hardware
                 else _MATCH_ACROSS_BACKENDS if across_backends else _MATCH)
    folded = [frame.groupby(match, sort=True)["median_s"].median().rename(name)
              for frame, name in ((first, "first_s"), (second, "second_s"))]
    both = pd.concat(folded, axis=1, join="inner").reset_index()
    both = both[(both["first_s"] > 0) & (both["second_s"] > 0)]
    if both.empty:
        raise StoreError(f"the two sets share no operator ({', '.join(match)})")
    out: list[Agreement] = []
    for family, rows in both.groupby("family", sort=True):
        out.append(_agreement(str(family), "all", rows))
        micros = rows["first_s"].to_numpy() * 1e6
        for lo, hi in zip(bands_us[:-1], bands_us[1:], strict=True):
            inside = (micros >= lo) & (micros < hi)
            if inside.any():
                label = f"[{lo:g}, {hi:g})" if np.isfinite(hi) else f"[{lo:g}, inf)"
                out.append(_agreement(str(family), label, rows[inside]))
    return out
