# SPDX-License-Identifier: Apache-2.0
"""vLLM's own fp8 GEMM (CUTLASS cutlass_scaled_mm) at small m on Hopper, priced as the bf16 GEMM of
the same shape times the ratio of vllm-project/vllm PR #49363's H100 table
(`fp8_gemm_vs_bf16` in datasets/engines/vllm.yaml, `step_cost.DenseCost`), not as the store's
TensorRT-LLM fp8 rows."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.ops import GemmSpec, OpSpec
from simulate.engines import Estimate
from simulate.inference.fp8_gemm import Fp8GemmRatios, file_fingerprint, load_ratio_table
from simulate.inference.layer_ops import inference_sharding
from simulate.inference.step_cost import DenseCost
from simulate.serving.engine_presets import engine_preset


class _ByDtype:
    """fp8 GEMMs answer 1 ms, bf16 GEMMs 2 ms, anything else 1 us."""

    def estimate_many(self, ops: Sequence[OpSpec]) -> Sequence[Estimate]:
        def one(op: OpSpec) -> float:
            if isinstance(op, GemmSpec):
                return 1e-3 if op.dtype == DType.FP8 else 2e-3
            return 1e-6
        return [Estimate(latency_s=one(op), engine="store") for op in ops]


def _preset(engine: str, gpu: str = "h100-sxm"):
    hw = get_hardware(gpu)
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name)


def test_only_vllm_on_hopper_prices_fp8_from_bf16() -> None:
    vllm = _preset("vllm")
    ratios = vllm.fp8_vs_bf16(get_hardware("h100-sxm").architecture)
    assert ratios.points[0] == (1, 0.556) and ratios.points[-1] == (128, 0.606)
    assert vllm.fp8_vs_bf16(get_hardware("h200").architecture) == ratios
    for gpu in ("a100-sxm-80gb", "b200"):  # the table is an H100 measurement
        assert not vllm.fp8_vs_bf16(get_hardware(gpu).architecture)
    for engine in ("sglang", "trtllm"):
        assert not _preset(engine).fp8_vs_bf16(get_hardware("h100-sxm").architecture)


def _gemm_seconds(tokens: int, weight_dtype: DType,
                  points: Fp8GemmRatios = Fp8GemmRatios()) -> float:
    model = load_model("qwen3-8b")
    cost = DenseCost(model, inference_sharding(tp=1), weight_dtype, _ByDtype(), None,
                     fp8_vs_bf16=points)
    seconds, _ = cost.get("dense", tokens)
    return seconds


def test_fp8_gemms_up_to_the_tables_last_m_take_the_bf16_time_times_the_ratio() -> None:
    points = _preset("vllm").fp8_vs_bf16("hopper")
    gemms = 4 * load_model("qwen3-8b").layers  # qkv, o, gate_up, down
    for tokens, ratio in ((1, 0.556), (16, 0.560), (40, 0.5665), (128, 0.606)):
        plain = _gemm_seconds(tokens, DType.FP8)
        priced = _gemm_seconds(tokens, DType.FP8, points)
        # without the points every fp8 GEMM answers 1 ms; with them 2 ms x ratio
        assert priced - plain == pytest.approx(gemms * (2e-3 * ratio - 1e-3), rel=1e-6)
    # above the points (m > 128) without a table, and for bf16 weights, nothing changes
    only = Fp8GemmRatios(points=points.points)
    assert _gemm_seconds(129, DType.FP8, only) == _gemm_seconds(129, DType.FP8)
    assert _gemm_seconds(8, DType.BF16, points) == _gemm_seconds(8, DType.BF16)


def _table(tmp_path: Path) -> Path:
    """Two weight shapes, bf16 and fp8 times at m = 64 / 256 / 4096 (gpu_fp8_gemm.py's columns)."""
    rows = ["shape,m,n,k,kernel,seconds,tflops"]
    for n, k, fp8 in ((4096, 4096, (9.0, 8.0, 5.0)), (24576, 4096, (6.0, 7.0, 6.0))):
        for m, t in zip((64, 256, 4096), fp8, strict=True):
            rows += [f"s,{m},{n},{k},bf16,10.0,1", f"s,{m},{n},{k},fp8_tensorwise,{t},1",
                     f"s,{m},{n},{k},fp8_rowwise,99,1"]
    path = tmp_path / "fp8.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_the_table_prices_large_m_by_the_nearest_shape_in_log_m(tmp_path: Path) -> None:
    path = _table(tmp_path)
    shapes = load_ratio_table(path, fingerprint=file_fingerprint(path), bf16="bf16",
                              fp8="fp8_tensorwise", min_m=129)
    assert [(n, k, len(c)) for n, k, c in shapes] == [(4096, 4096, 2), (24576, 4096, 2)]
    ratios = Fp8GemmRatios(points=((1, 0.5), (128, 0.6)), shapes=shapes)
    assert ratios.ratio(GemmSpec(m=64, n=4096, k=4096, dtype=DType.FP8)) == pytest.approx(0.55, abs=1e-3)
    square = GemmSpec(m=1024, n=5120, k=5120, dtype=DType.FP8)  # nearest: 4096 x 4096
    assert ratios.ratio(square) == pytest.approx(0.8 + (0.5 - 0.8) * 0.5)  # halfway in log m
    assert ratios.ratio(GemmSpec(m=16384, n=20000, k=4096, dtype=DType.FP8)) == pytest.approx(0.6)
    assert ratios.ratio(GemmSpec(m=200, n=20000, k=4096, dtype=DType.FP8)) == pytest.approx(0.7)
    assert ratios.ratio(GemmSpec(m=1024, n=4096, k=4096)) is None  # bf16: as the chain


def test_a_changed_table_is_refused(tmp_path: Path) -> None:
    path = _table(tmp_path)
    with pytest.raises(SpecError, match="fingerprint"):
        load_ratio_table(path, fingerprint="0" * 16, bf16="bf16", fp8="fp8_tensorwise")


def test_vllm_prices_prefill_sized_fp8_gemms_from_our_h100_measurement() -> None:
    """Above m = 128 the vLLM preset's ratio is the measured cuBLASLt tensorwise fp8 time over
    bf16's for the nearest shape (datasets/measurements/llmsim/h100-sxm/fp8-gemm/fp8_gemm.csv);
    Llama-3.1-8B's qkv (N=6144, K=4096) is measured, so at m = 4,096 it is that row's ratio."""
    path = Path(__file__).resolve().parents[2] / "datasets/measurements/llmsim/h100-sxm/fp8-gemm"
    seconds = {}
    with (path / "fp8_gemm.csv").open() as fh:
        for row in csv.DictReader(fh):
            if (row["m"], row["n"], row["k"]) == ("4096", "6144", "4096"):
                seconds[row["kernel"]] = float(row["seconds"])
    expected = seconds["fp8_tensorwise"] / seconds["bf16"]
    ratios = _preset("vllm").fp8_vs_bf16("hopper")
    assert 0.4 < expected < 0.8
    assert ratios.ratio(GemmSpec(m=4096, n=6144, k=4096, dtype=DType.FP8)) == pytest.approx(expected)
    assert ratios.ratio(GemmSpec(m=100, n=6144, k=4096, dtype=DType.FP8)) == pytest.approx(
        0.573 + (0.606 - 0.573) * 36 / 64)  # still PR #49363's points up to 128
