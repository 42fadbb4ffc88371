# SPDX-License-Identifier: Apache-2.0
"""Error metrics (absolute percentage error and its summaries) and the predicted-vs-measured
plot. The same functions score the XGBoost models and both baselines."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from analytical.errors import LlmsimError


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorMetrics:
    """Absolute percentage error summary over ``n`` rows (percent)."""

    n: int
    mape: float
    median_ape: float
    p90_ape: float
    max_ape: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def ape_percent(measured_s: np.ndarray, predicted_s: np.ndarray) -> np.ndarray:
    """|predicted - measured| / measured * 100 per row; measured must be > 0."""
    measured_s = np.asarray(measured_s, dtype=np.float64)
    predicted_s = np.asarray(predicted_s, dtype=np.float64)
    if measured_s.shape != predicted_s.shape:
        raise LlmsimError(f"shape mismatch: {measured_s.shape} vs {predicted_s.shape}")
    if np.any(measured_s <= 0):
        raise LlmsimError("measured latencies must be positive to compute percentage errors")
    ape: np.ndarray = np.abs(predicted_s - measured_s) / measured_s * 100.0
    return ape


def error_metrics(measured_s: np.ndarray, predicted_s: np.ndarray) -> ErrorMetrics:
    ape = ape_percent(measured_s, predicted_s)
    if ape.size == 0:
        return ErrorMetrics(n=0, mape=float("nan"), median_ape=float("nan"),
                            p90_ape=float("nan"), max_ape=float("nan"))
    return ErrorMetrics(n=int(ape.size), mape=float(ape.mean()), median_ape=float(np.median(ape)),
                        p90_ape=float(np.percentile(ape, 90)), max_ape=float(ape.max()))


@dataclass(frozen=True, slots=True, kw_only=True)
class MapeGap:
    """MAPE of a model minus MAPE of a baseline on the same rows (percentage points; negative:
    the model is better), with a 95% paired bootstrap interval over ``clusters`` groups."""

    gap: float
    low: float
    high: float
    clusters: int


def mape_gap(measured_s: np.ndarray, predicted_s: np.ndarray, baseline_s: np.ndarray,
             clusters: np.ndarray, *, seed: int = 0, draws: int = 2000) -> MapeGap:
    """Is the model below the baseline, or within noise of it? A paired cluster bootstrap:
    each draw resamples the held-out shapes (``clusters``: one label per row) with
    replacement and keeps a shape's rows together, because rows of one shape share their
    errors (a held-out message size is missed on every curve at once); rows are not
    independent, so resampling rows would make the interval too narrow."""
    diff = ape_percent(measured_s, predicted_s) - ape_percent(measured_s, baseline_s)
    labels, of_row = np.unique(np.asarray(clusters), return_inverse=True)
    if diff.size == 0:
        return MapeGap(gap=float("nan"), low=float("nan"), high=float("nan"), clusters=0)
    sums = np.bincount(of_row, weights=diff, minlength=len(labels))
    counts = np.bincount(of_row, minlength=len(labels)).astype(np.float64)
    picks = np.random.default_rng(seed).integers(len(labels), size=(draws, len(labels)))
    boot = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return MapeGap(gap=float(diff.mean()), low=float(low), high=float(high),
                   clusters=int(len(labels)))


def plot_predicted_vs_measured(path: str | Path, series: Mapping[str, tuple[np.ndarray,
                               np.ndarray]], *, title: str) -> Path:
    """Log-log scatter, one panel per split: measured (x) vs predicted (y), with the y = x line.

    Args:
        path: PNG to write (its folder must exist).
        series: split name -> (measured_s, predicted_s).
        title: figure title (hardware, family, version).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    names = list(series)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4.2), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        measured, predicted = (np.asarray(a, dtype=np.float64) for a in series[name])
        ax.scatter(measured, predicted, s=3, alpha=0.4, linewidths=0)
        if measured.size:
            lo = float(min(measured.min(), predicted.min()))
            hi = float(max(measured.max(), predicted.max()))
            ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8)
            m = error_metrics(measured, predicted)
            ax.set_title(f"{name}: n={m.n}, MAPE {m.mape:.2f}%", fontsize=9)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured latency (s)")
        ax.set_ylabel("predicted latency (s)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
