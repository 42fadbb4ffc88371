# SPDX-License-Identifier: Apache-2.0
"""The hardware files' `efficiency.gemm` / `efficiency.attention` read off measured operators.

The roofline prices a large GEMM at ``peak * efficiency.gemm * gemm_tile_efficiency`` and a
fused attention at ``peak * efficiency.attention`` (`analytical/roofline.py`). Both factors are
the median, over the measured operators large enough to sit on the compute roof, of measured
rate / that roofline rate at efficiency 1:

- gemm: GEMMs of ``dtype`` (default bf16, the rate `llmsim hardware calibrate` also writes) with
  at least ``GEMM_MIN_FLOPS``, each divided by its tile efficiency;
- attention: forward prefill (context) attention in bf16, head dim 128 (the training models'),
  at least ``ATTENTION_MIN_FLOPS``; FLOPs as `AttentionSpec.flops` counts them (causal pairs).

The fixed time of one kernel, `efficiency.kernel_latency_us`, is the intercept of the least
squares line t = t0 + c * roofline over the bf16 GEMMs with m <= ``LATENCY_MAX_M`` (decode-sized
shapes, where launch and ramp-up are most of the time), the roofline without its latency term.

Measured rows only (never end-to-end runs). Reproduce the YAML values with
``python -m profiler.efficiency_fit datasets/measurements/aiconfigurator``.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from analytical.dtypes import DType, parse_dtype
from analytical.hardware import Efficiency, HardwareSpec, get_hardware
from analytical.ops import GemmSpec
from analytical.roofline import gemm_tile_efficiency, roofline_estimate

# Large enough that launch and tail time are under ~1% of the kernel (>= 1 TFLOP runs >= 0.4 ms
# on any GPU in the store at its peak), small enough to keep > 1,000 rows per GPU and dtype.
GEMM_MIN_FLOPS = 1e12
ATTENTION_MIN_FLOPS = 1e12
ATTENTION_HEAD_DIM = 128
FRACTION_DTYPES = ("bf16", "fp8", "fp4")  # printed; the file's gemm value is bf16's
LATENCY_MAX_M = 16


@dataclass(frozen=True, slots=True, kw_only=True)
class Fraction:
    """Median measured / roofline-at-efficiency-1 over ``n`` rows (0 rows: ``median`` 0)."""

    median: float
    n: int


def _median(values: Sequence[float]) -> Fraction:
    return Fraction(median=statistics.median(values) if values else 0.0, n=len(values))


def gemm_fraction(rows: Iterable[Mapping[str, Any]], hw: HardwareSpec, dtype: DType = DType.BF16,
                  *, min_flops: float = GEMM_MIN_FLOPS) -> Fraction:
    """Median over ok GEMM rows of ``dtype`` with >= ``min_flops`` of achieved rate / (dense
    peak * tile efficiency): the `efficiency.gemm` that makes the roofline hit the median."""
    peak = hw.peak_flops(dtype)
    out = []
    for r in rows:
        if r["status"] != "ok" or r["dtype"] != dtype.value or r["flops"] < min_flops:
            continue
        spec = GemmSpec(m=r["m"], n=r["n"], k=r["k"], batch=r["batch"], dtype=dtype)
        out.append(r["flops"] / r["median_s"] / (peak * gemm_tile_efficiency(spec, hw)))
    return _median(out)


def attention_fraction(rows: Iterable[Mapping[str, Any]], hw: HardwareSpec, *,
                       head_dim: int = ATTENTION_HEAD_DIM,
                       min_flops: float = ATTENTION_MIN_FLOPS) -> Fraction:
    """Median over ok forward bf16 prefill rows of ``head_dim`` with >= ``min_flops`` of
    achieved rate / dense bf16 peak."""
    peak = hw.peak_flops(DType.BF16)
    out = [r["flops"] / r["median_s"] / peak for r in rows
           if r["status"] == "ok" and r["phase"] == "prefill" and r["dtype"] == "bf16"
           and not r["backward"] and r["head_dim"] == head_dim and r["flops"] >= min_flops]
    return _median(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class LatencyFit:
    """t = t0_s + slope * roofline over ``n`` rows (fewer than 2 rows: all zero)."""

    t0_s: float
    slope: float
    n: int


def kernel_latency_fit(rows: Iterable[Mapping[str, Any]], hw: HardwareSpec, *,
                       max_m: int = LATENCY_MAX_M) -> LatencyFit:
    """Least squares t = t0 + c * max(compute, memory) over ok bf16 GEMM rows with m <= max_m."""
    times, roofs = [], []
    for r in rows:
        if r["status"] != "ok" or r["dtype"] != "bf16" or r["m"] > max_m:
            continue
        est = roofline_estimate(GemmSpec(m=r["m"], n=r["n"], k=r["k"], batch=r["batch"],
                                         dtype=DType.BF16), hw)
        times.append(r["median_s"])
        roofs.append(max(est.compute_s, est.memory_s))
    if len(times) < 2:
        return LatencyFit(t0_s=0.0, slope=0.0, n=len(times))
    design = np.column_stack([np.ones(len(roofs)), roofs])
    (t0, slope), *_ = np.linalg.lstsq(design, np.asarray(times), rcond=None)
    return LatencyFit(t0_s=float(t0), slope=float(slope), n=len(times))


def _small_m_rows(path: Path) -> list[dict[str, Any]]:
    """bf16 GEMM rows with m <= LATENCY_MAX_M of a store parquet file (none if it is missing)."""
    if not path.is_file():
        return []
    return pq.read_table(path, filters=[("m", "<=", LATENCY_MAX_M),
                                        ("dtype", "=", "bf16")]).to_pylist()


def _rows(path: Path, min_flops: float) -> list[dict[str, Any]]:
    """Rows of a store parquet file with >= ``min_flops`` (none if the file is missing)."""
    if not path.is_file():
        return []
    return pq.read_table(path, filters=[("flops", ">=", min_flops)]).to_pylist()


def derive(folder: str | Path, hardware: str) -> dict[str, Fraction]:
    """Fractions of ``<folder>/<hardware>/{gemm,attention}.parquet``: ``gemm.<dtype>`` for each
    dtype the GPU has, and ``attention``."""
    hw = get_hardware(hardware)
    base = Path(folder) / hardware
    gemm = _rows(base / "gemm.parquet", GEMM_MIN_FLOPS)
    out = {f"gemm.{d}": gemm_fraction(gemm, hw, parse_dtype(d))
           for d in FRACTION_DTYPES if hw.supports(parse_dtype(d))}
    out["attention"] = attention_fraction(_rows(base / "attention.parquet", ATTENTION_MIN_FLOPS), hw)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Print one line per GPU folder: derived fractions (n rows) beside the file's values."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="<folder>/<hardware>/{gemm,attention}.parquet")
    args = ap.parse_args(argv)
    for sub in sorted(p for p in Path(args.folder).iterdir() if p.is_dir()):
        eff = get_hardware(sub.name).efficiency
        cells = [f"{k} {f.median:.3f} (n={f.n}; file {_file_value(eff, k)})"
                 for k, f in derive(args.folder, sub.name).items() if f.n]
        fit = kernel_latency_fit(_small_m_rows(sub / "gemm.parquet"), get_hardware(sub.name))
        if fit.n:
            cells.append(f"kernel_latency_us {fit.t0_s * 1e6:.2f} (slope {fit.slope:.2f}, "
                         f"n={fit.n}; file {eff.kernel_latency_s * 1e6:g})")
        print(f"{sub.name}: " + ", ".join(cells))


def _file_value(eff: Efficiency, key: str) -> float:
    """The hardware file's value for a `derive` key (``gemm.fp8`` -> ``gemm_at(fp8)``)."""
    if key == "attention":
        return eff.attention
    return eff.gemm_at(parse_dtype(key.split(".")[1]))


if __name__ == "__main__":
    main()
