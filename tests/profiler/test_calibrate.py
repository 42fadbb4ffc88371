# SPDX-License-Identifier: Apache-2.0
"""`profiler.calibrate` on this CPU with a tiny budget: the result is a valid catalog entry."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from analytical.calibrate import write_hardware_file
from analytical.errors import SpecError
from analytical.hardware import get_hardware, hardware_from_dict, load_hardware_file
from profiler import calibrate as cal

ROOT = Path(__file__).resolve().parents[2]


pytestmark = pytest.mark.usefixtures("isolated_hardware_home")  # tests/conftest.py


@pytest.fixture(scope="module")
def cpu_result() -> dict:
    return cal.calibrate("cpu", name="tiny-cpu", budget_s=1.0)


def test_cpu_calibration_is_a_valid_entry(cpu_result):
    hw = hardware_from_dict(cpu_result)
    assert hw.name == "tiny-cpu" and hw.kind == "cpu"
    assert hw.peak_flops_fp32 > 1e8  # any CPU does > 0.1 GFLOP/s
    assert hw.peak_flops_bf16 > 0 and hw.memory_bw_bytes_per_s > 1e8
    # No vendor peak for a CPU: peaks are the measured rates, efficiency 1.0, said in notes.
    assert hw.efficiency.gemm == 1.0 and hw.efficiency.memory == 1.0
    assert hw.peak_flops_fp16 == hw.peak_flops_bf16  # fp16 skipped on CPU
    assert hw.peak_flops_tf32 == hw.peak_flops_fp32
    assert "fp16" in cpu_result["notes"] and "efficiency is 1.0" in cpu_result["notes"]
    assert hw.compute_units >= 1 and hw.memory_bytes > 2**30


def test_write_and_reload(cpu_result, tmp_path):
    path = write_hardware_file(cpu_result, tmp_path / "sub" / "tiny-cpu.yaml")
    assert path.read_text().startswith("# Written by `llmsim hardware calibrate`")
    assert load_hardware_file(path) == hardware_from_dict(cpu_result)


def test_write_rejects_invalid_data(cpu_result, tmp_path):
    bad = {**cpu_result, "efficiency": {**cpu_result["efficiency"], "gemm": 2.0}}
    with pytest.raises(SpecError) as info:
        write_hardware_file(bad, tmp_path / "bad.yaml")
    assert info.value.field == "efficiency.gemm"
    assert not (tmp_path / "bad.yaml").exists()


def test_reference_keeps_vendor_peaks_and_measures_efficiency():
    data = cal.calibrate("cpu", name="h100-like", budget_s=0.5, reference="h100-sxm")
    hw, ref = hardware_from_dict(data), get_hardware("h100-sxm")
    assert hw.peak_flops_bf16 == ref.peak_flops_bf16 and hw.intra_node == ref.intra_node
    # A 2-core CPU reaches a tiny fraction of an H100: achieved / peak, not the catalog's 0.75.
    assert 0 < hw.efficiency.gemm < 0.01 and 0 < hw.efficiency.memory < 0.1
    assert hw.efficiency.attention == ref.efficiency.attention  # not measured: kept


@pytest.mark.parametrize(("device", "budget_s", "field"), [
    ("tpu", 1.0, "device"),
    ("cpu", 0.0, "budget_s"),
])
def test_bad_arguments(device, budget_s, field):
    with pytest.raises(SpecError) as info:
        cal.calibrate(device, name="x", budget_s=budget_s)
    assert info.value.field == field


def test_median_goes_through_the_profiler_timer(monkeypatch):
    """One timer for the project: calibration times with `profiler.timers`, within its reps."""
    seen = []

    def fake_time_cpu(run, budget, *, flush_bytes=None, prepare=None):
        seen.append((budget.min_reps, budget.max_reps, flush_bytes))
        return real(run, budget, flush_bytes=0)

    real = cal.time_cpu
    monkeypatch.setattr(cal, "time_cpu", fake_time_cpu)
    calls = []
    assert cal.median_s(lambda: calls.append(1), "cpu", 0.0) >= 0
    assert seen == [(cal.MIN_REPS, cal.MAX_REPS, 0)]
    assert len(calls) >= 2 + cal.MIN_REPS  # first call, a warm-up, then the minimum repeats


def test_cli_calibrate_writes_a_loadable_file(tmp_path):
    out = tmp_path / "mine.yaml"
    env = {"LLMSIM_HOME": str(tmp_path / "home"), "PATH": str(Path(sys.executable).parent),
           "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "simulate.cli.main", "hardware", "calibrate",
                             "--device", "cpu", "--name", "mine", "--budget-s", "0.5",
                             "--out", str(out), "--json"],
                            capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert load_hardware_file(out).name == "mine"
    assert '"written"' in result.stdout



@pytest.mark.gpu
def test_cuda_calibration_is_a_valid_entry():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    hw = hardware_from_dict(cal.calibrate("cuda", name="gpu-cal", budget_s=10.0))
    assert hw.kind == "gpu"
    assert hw.compute_units == torch.cuda.get_device_properties(0).multi_processor_count
    assert hw.peak_flops_bf16 > hw.peak_flops_fp32 > 1e12  # tensor cores beat fp32 SIMT
    assert hw.memory_bw_bytes_per_s > 1e11
