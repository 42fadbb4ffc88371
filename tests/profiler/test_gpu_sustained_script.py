# SPDX-License-Identifier: Apache-2.0
"""`scripts/gpu_sustained.py` without a GPU: the layer's GEMM shapes and the nvidia-smi window."""

from __future__ import annotations

from datetime import datetime

import pytest
from script_loader import load_script

gpu_sustained = load_script("gpu_sustained")


def test_layer_gemms_are_megatron_tp_shards_with_equal_flops_per_pass():
    gemms = gpu_sustained.layer_gemms(*gpu_sustained.LAYERS["llama3-70b-tp8"])
    shapes = {name: (m, n, k) for name, m, n, k in gemms}
    assert len(gemms) == 12
    # Llama 3 70B at TP8: (64 + 2 * 8) heads x 128 / 8 = 1,280 qkv columns; 28,672 x 2 / 8 fc1.
    assert shapes["qkv.fwd"] == (8192, 1280, 8192)
    assert shapes["proj.fwd"] == (8192, 8192, 1024)
    assert shapes["fc1.fwd"] == (8192, 7168, 8192)
    assert shapes["fc2.fwd"] == (8192, 8192, 3584)
    for name in ("qkv", "proj", "fc1", "fc2"):
        m, n, k = shapes[f"{name}.fwd"]
        assert shapes[f"{name}.dgrad"] == (m, k, n)  # dX = dY @ W
        assert shapes[f"{name}.wgrad"] == (n, k, m)  # dW = dY^T @ X
        flops = {2 * a * b * c for a, b, c in (shapes[f"{name}.{p}"]
                                               for p in ("fwd", "dgrad", "wgrad"))}
        assert len(flops) == 1


def test_smi_window_takes_medians_inside_the_window_and_skips_bad_lines(tmp_path):
    t0 = datetime(2026, 11, 26, 3, 5, 0).timestamp()
    lines = ["timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], power.draw [W], "
             "temperature.gpu, clocks_event_reasons.active"]
    for i, (clock, power) in enumerate([(1980, 300.0), (1455, 692.0), (1440, 693.5), (1470, 691.0)]):
        stamp = datetime.fromtimestamp(t0 + i).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        lines.append(f"{stamp}, {clock}, 3201, {power}, {55 + i}, 0x0000000000000004")
    lines.append("not a sample")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    window = gpu_sustained.smi_window(path, t0 + 0.5, t0 + 3.5)  # the first sample is outside
    assert window["samples"] == 3
    assert window["sm_mhz_median"] == pytest.approx(1455.0)
    assert window["sm_mhz_min"] == pytest.approx(1440.0)
    assert window["power_w_median"] == pytest.approx(692.0)
    assert window["temp_c_max"] == pytest.approx(58.0)
    assert window["throttle_reasons"] == ["0x0000000000000004"]
    assert gpu_sustained.smi_window(path, t0 + 10, t0 + 20) == {"samples": 0}


def test_mpt_layers_have_an_ungated_mlp_at_their_micro_batch_tokens():
    gemms = gpu_sustained.layer_gemms(*gpu_sustained.LAYERS["mpt-1b-mb12"])
    shapes = {name: (m, n, k) for name, m, n, k in gemms}
    # MPT-1B: hidden 2,048, MLP 4 x 2,048 with GELU (one fc1 output, not a gate and an up).
    assert shapes["fc1.fwd"] == (12 * 2048, 8192, 2048)
    assert shapes["fc2.fwd"] == (12 * 2048, 2048, 8192)
    assert shapes["qkv.fwd"] == (12 * 2048, 3 * 2048, 2048)
    assert set(gpu_sustained.DEFAULT_LAYERS) <= set(gpu_sustained.LAYERS)
