# SPDX-License-Identifier: Apache-2.0
"""The hardware files' GEMM / attention efficiencies are the medians of measured operators."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.hardware import HARDWARE_DIR, get_hardware, load_hardware_file
from analytical.ops import GemmSpec
from analytical.roofline import gemm_tile_efficiency, roofline_time
from profiler.efficiency_fit import (
    attention_fraction,
    derive,
    gemm_fraction,
    kernel_latency_fit,
)

MEASURED = Path(__file__).resolve().parents[2] / "datasets" / "measurements" / "aiconfigurator"


def _gemm(m: int, fraction: float, *, dtype: str = "bf16", status: str = "ok") -> dict:
    """A row measured at ``fraction`` of the B200 roofline at efficiency 1."""
    hw = get_hardware("b200")
    spec = GemmSpec(m=m, n=8192, k=8192, dtype=DType(dtype))
    rate = hw.peak_flops(DType(dtype)) * gemm_tile_efficiency(spec, hw) * fraction
    return {"m": m, "n": 8192, "k": 8192, "batch": 1, "dtype": dtype, "status": status,
            "flops": spec.flops, "median_s": spec.flops / rate}


def _attention(fraction: float, **over: object) -> dict:
    row = {"status": "ok", "phase": "prefill", "dtype": "bf16", "backward": False,
           "head_dim": 128, "flops": 4e12, "median_s": 4e12 / (2250e12 * fraction)}
    return row | over


def test_gemm_fraction_is_the_median_over_large_rows_of_the_dtype() -> None:
    hw = get_hardware("b200")
    rows = [_gemm(8192, 0.6), _gemm(16384, 0.7), _gemm(12288, 0.8),
            _gemm(64, 0.01),  # under 1 TFLOP: ignored
            _gemm(8192, 0.1, dtype="fp8"), _gemm(8192, 0.1, status="error")]
    got = gemm_fraction(rows, hw)
    assert got.n == 3
    assert got.median == pytest.approx(0.7)
    assert gemm_fraction(rows, hw, DType.FP8).median == pytest.approx(0.1)
    assert gemm_fraction([], hw).n == 0


def test_attention_fraction_keeps_forward_bf16_prefill_of_the_head_dim() -> None:
    rows = [_attention(0.4), _attention(0.5), _attention(0.45),
            _attention(0.9, head_dim=64), _attention(0.9, backward=True),
            _attention(0.9, phase="decode"), _attention(0.9, dtype="fp8"),
            _attention(0.9, flops=1e9, median_s=1e9 / (2250e12 * 0.9))]
    got = attention_fraction(rows, get_hardware("b200"))
    assert (got.n, got.median) == (3, pytest.approx(0.45))


def test_kernel_latency_is_the_intercept_over_small_m_bf16_gemms() -> None:
    hw = get_hardware("h100-sxm")

    def row(m: int, n: int, *, dtype: str = "bf16", extra_s: float = 0.0) -> dict:
        spec = GemmSpec(m=m, n=n, k=4096, dtype=DType(dtype))
        roof = roofline_time(spec, hw) - hw.efficiency.kernel_latency_s
        return {"m": m, "n": n, "k": 4096, "batch": 1, "dtype": dtype, "status": "ok",
                "median_s": 5e-6 + 1.5 * roof + extra_s}

    rows = [row(m, n) for m in (1, 8, 16) for n in (1024, 8192, 65536)]
    rows += [row(64, 8192, extra_s=1e-3), row(8, 8192, dtype="fp8", extra_s=1e-3)]  # ignored
    fit = kernel_latency_fit(rows, hw)
    assert fit.n == 9
    assert fit.t0_s == pytest.approx(5e-6, rel=1e-6) and fit.slope == pytest.approx(1.5)
    assert kernel_latency_fit(rows[:1], hw).n == 1 and kernel_latency_fit(rows[:1], hw).t0_s == 0


@pytest.mark.parametrize(("gpu", "keys"), [
    ("b200", {"gemm.bf16": "gemm", "gemm.fp8": "gemm_fp8", "gemm.fp4": "gemm_fp4",
              "attention": "attention"}),
    ("h100-sxm", {"gemm.fp8": "gemm_fp8"}),
])
def test_hardware_files_hold_the_derived_values(gpu: str, keys: dict[str, str]) -> None:
    """The YAML values are the command's medians rounded to 2 decimals (datasets/hardware/
    README.md); re-deriving from the curated parquet files must reproduce them."""
    derived = derive(MEASURED, gpu)
    eff = get_hardware(gpu).efficiency
    for key, field in keys.items():
        assert derived[key].n > 500, key
        assert getattr(eff, field) == pytest.approx(derived[key].median, abs=0.006), key


def test_fp8_gemm_uses_its_own_fraction_and_fp4_falls_back() -> None:
    b200, a100 = get_hardware("b200"), get_hardware("a100-sxm-80gb")
    assert b200.efficiency.gemm_at(DType.FP8) == 0.59
    assert b200.efficiency.gemm_at(DType.BF16) == 0.7
    assert a100.efficiency.gemm_at(DType.FP8) == a100.efficiency.gemm  # unset -> bf16's
    big = dict(m=16384, n=16384, k=16384)
    t_bf16 = roofline_time(GemmSpec(**big, dtype=DType.BF16), b200)
    t_fp8 = roofline_time(GemmSpec(**big, dtype=DType.FP8), b200)
    # fp8: twice the peak at 0.59 instead of 0.7 of it
    assert t_fp8 / t_bf16 == pytest.approx(0.7 / (2 * 0.59), rel=0.02)


def test_a_low_precision_fraction_over_one_names_its_field(tmp_path: Path) -> None:
    text = (HARDWARE_DIR / "b200.yaml").read_text().replace("gemm_fp8: 0.59", "gemm_fp8: 1.5")
    (tmp_path / "b200.yaml").write_text(text)
    with pytest.raises(SpecError, match="efficiency.gemm_fp8"):
        load_hardware_file(str(tmp_path / "b200.yaml"))
