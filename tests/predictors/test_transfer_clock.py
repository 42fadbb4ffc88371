# SPDX-License-Identifier: Apache-2.0
"""The sustained-clock cap of the transfer target (`predictors.transfer_clock`)."""

from __future__ import annotations

import numpy as np
import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.ops import GemmSpec
from predictors.transfer_clock import capped_roofline, clock_derate, fit_clock_cap
from predictors.transfer_features import ideal_seconds, tensor_compute_seconds


def test_derate_stretches_only_a_boost_above_the_cap():
    boost = np.array([1.41e9, 1.98e9, 2.52e9, 0.0])
    assert clock_derate(boost, 1.8e9) == pytest.approx([1.0, 1.1, 1.4, 1.0])
    assert clock_derate(boost, 0.0) == pytest.approx([1.0] * 4)
    # the memory bound is untouched: a capped compute bound under it leaves the roofline
    assert capped_roofline(np.array([5.0, 5.0]), np.array([1.0, 5.0]), 2.52e9, 1.8e9
                           ) == pytest.approx([5.0, 7.0])


def test_ideal_seconds_caps_the_tensor_bound_of_a_compute_bound_gemm():
    l40s = get_hardware("l40s")  # datasheet peak at 2,490 MHz (boost 2,520)
    big = GemmSpec(m=8192, n=8192, k=8192, dtype=DType.BF16)
    base = ideal_seconds([big], l40s)[0]
    assert base == pytest.approx(tensor_compute_seconds([big], l40s)[0])
    assert ideal_seconds([big], l40s, 1.8e9)[0] == pytest.approx(base * 2.49 / 1.8)
    assert ideal_seconds([big], l40s, 3.0e9)[0] == pytest.approx(base)
    a100 = get_hardware("a100-sxm-80gb")  # peak at 1,410 MHz: under the cap, its datasheet peak
    assert ideal_seconds([big], a100, 1.8e9)[0] == pytest.approx(ideal_seconds([big], a100)[0])


def _gpu_rows(name, boost, share, n=5):
    """Compute-bound rows of one GPU that reach ``share`` of its boost-clock peak."""
    compute = np.full(n, 1e-3)
    return ([name] * n, ["trtllm"] * n, compute / share, compute, compute, [boost] * n)


def _fit(*gpus):
    cols = [np.concatenate([np.asarray(g[i]) for g in gpus]) for i in range(6)]
    gpu, stacks, latency, ideal, compute, boost = cols
    return fit_clock_cap(gpu, stacks, latency.astype(float), ideal.astype(float),
                         compute.astype(float), boost.astype(float))


def test_cap_is_where_the_gpus_sustain_the_same_clock():
    # A 1.4 GHz GPU at 0.9 of its peak (1.26 GHz) and a 2.1 GHz one at 0.6 (1.26 GHz): both
    # sustain 1.26 GHz, so a cap of 1.4 GHz makes them alike (0.9 and 0.9 of the capped peak).
    cap = _fit(_gpu_rows("slow", 1.4e9, 0.9), _gpu_rows("fast", 2.1e9, 0.6))
    assert cap == pytest.approx(1.4e9, abs=1e7)
    # the same share of the boost peak on both: no cap
    assert _fit(_gpu_rows("slow", 1.4e9, 0.7), _gpu_rows("fast", 2.1e9, 0.7)) == 0.0
    # one GPU per stack tells nothing, and launch-bound rows (under 100 us) do not count
    assert _fit(_gpu_rows("slow", 1.4e9, 0.9)) == 0.0
    short = _gpu_rows("fast", 2.1e9, 0.6)
    short = (short[0], short[1], short[2] / 100, short[3] / 100, short[4] / 100, short[5])
    assert _fit(_gpu_rows("slow", 1.4e9, 0.9), short) == 0.0


def test_the_cap_compares_the_clock_the_datasheet_peak_is_stated_at():
    # H100 SXM's 989.4 TF is 132 SMs x 4,096 FLOP/clock x 1.83 GHz, below its 1.98 GHz boost:
    # a 1.9 GHz cap leaves its peak alone, a 1.5 GHz cap stretches it by 1.83 / 1.5
    from dataclasses import replace

    from predictors.transfer_clock import tensor_clock_hz

    h100 = get_hardware("h100-sxm")
    assert tensor_clock_hz(h100) == pytest.approx(1.83e9)
    assert tensor_clock_hz(replace(h100, peak_clock_hz=0.0)) == pytest.approx(1.98e9)
    big = GemmSpec(m=8192, n=8192, k=8192, dtype=DType.BF16)
    base = ideal_seconds([big], h100)[0]
    assert ideal_seconds([big], h100, 1.9e9)[0] == pytest.approx(base)
    assert ideal_seconds([big], h100, 1.5e9)[0] == pytest.approx(base * 1.83 / 1.5)


def test_attention_sees_the_mma_width_per_sm_and_clock():
    """bf16 tensor FLOP per SM per clock from the datasheet peak: Ada 1,024, Ampere 2,048,
    Hopper 4,096, Blackwell 8,192 (log2 10 / 11 / 12 / 13); fp8 doubles it."""
    from analytical.ops import AttentionSpec, Phase
    from predictors.transfer_features import transfer_feature_names, transfer_matrix

    column = transfer_feature_names("attention").index("log2_tensor_flop_per_sm_clock")
    op = AttentionSpec(batch=1, q_len=1, kv_len=1024, heads=32, kv_heads=8, head_dim=128,
                       dtype=DType.BF16, phase=Phase.DECODE)
    got = {name: transfer_matrix("attention", [op], get_hardware(name))[0, column]
           for name in ("l40s", "a100-sxm-80gb", "h100-sxm", "b200")}
    assert got == pytest.approx({"l40s": 10.0, "a100-sxm-80gb": 11.0, "h100-sxm": 12.0,
                                 "b200": 13.0}, abs=0.01)
    fp8 = transfer_matrix("attention", [_replace_dtype(op, DType.FP8)],
                          get_hardware("h100-sxm"))[0, column]
    assert fp8 == pytest.approx(13.0, abs=0.01)
    assert "log2_tensor_flop_per_sm_clock" not in transfer_feature_names("gemm")


def _replace_dtype(op, dtype):
    from dataclasses import replace

    return replace(op, dtype=dtype)
