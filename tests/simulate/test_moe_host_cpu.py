# SPDX-License-Identifier: Apache-2.0
"""The MoE host floor's CPU time per kernel comes from the measured CPU time of an eager
Megatron-Core layer (datasets/measurements/llmsim/cpu/moe-layer-cpu/, scripts/
time_moe_layer_cpu.py), in host ops per kernel."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

FIELDS = ["rank", "ep", "tokens", "pass_", "part", "cpu_us", "kernel", "collective", "d2h_copy"]


def _measurement(path: Path, scale: float = 1.0) -> Path:
    """One EP size: a Linear at 5 / 12 us for 8 / 64 rows (4 us at none), the layer at 1000 /
    1200 us forward and 600 / 700 backward for 64 / 128 tokens (800 + 500 at none, x ``scale``)
    issuing 90 + 10 collectives forward and 200 kernels backward: 1300 x scale / 4 / 300."""
    rows = [(0, 1, t, w, "ref.linear_fwd", us, 0, 0, 0)
            for w in ("ref_before", "ref_after") for t, us in ((8, 5.0), (64, 12.0))]
    for rank in (0, 1):
        rows += [(rank, 1, 64, "fwd", "layer", 1000 * scale, 88, 10, 2),
                 (rank, 1, 128, "fwd", "layer", 1200 * scale, 88, 10, 2),
                 (rank, 1, 64, "bwd", "layer", 600 * scale, 200, 0, 0),
                 (rank, 1, 128, "bwd", "layer", 700 * scale, 200, 0, 0),
                 (rank, 1, 64, "fwd", "experts_alone", 9999.0, 1, 0, 0)]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(FIELDS)
        w.writerows(rows)
    return path


def test_host_ops_per_kernel_reads_the_measurement(tmp_path):
    from simulate.moe_host import host_ops_per_kernel

    assert host_ops_per_kernel(_measurement(tmp_path / "a.csv")) == \
        pytest.approx(1300 / 4 / 300)
    assert host_ops_per_kernel(tmp_path / "a.csv", ("fwd",)) == pytest.approx(800 / 4 / 100)
    assert host_ops_per_kernel(tmp_path / "a.csv", ("bwd",)) == pytest.approx(500 / 4 / 200)
    assert host_ops_per_kernel(_measurement(tmp_path / "b.csv", 2.0)) == \
        pytest.approx(2 * 1300 / 4 / 300)


def test_the_shipped_measurement_is_above_one_host_op_per_kernel():
    from simulate.moe_host import X86_HOST_OP_S, host_ops_per_kernel, x86_kernel_s

    ops = host_ops_per_kernel()
    assert 1.5 < ops < 5  # Megatron-Core's Python and autograd beyond the op itself
    assert x86_kernel_s() == pytest.approx(ops * X86_HOST_OP_S)


def test_a_pass_cpu_time_follows_the_measurement(tmp_path, monkeypatch):
    from analytical.hardware import get_hardware
    from analytical.layer_spec import Node
    from analytical.ops import MemoryBoundSpec, MemoryOpKind
    from simulate import moe_host

    nodes = [Node(name=f"op{i}", op=MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=8, cols=8))
             for i in range(7)]
    h100, gb200 = get_hardware("h100-sxm"), get_hardware("gb200")
    times = []
    for scale in (1.0, 3.0):
        monkeypatch.setattr(moe_host, "MEASURED_CPU", _measurement(tmp_path / f"{scale}.csv",
                                                                   scale))
        ops = scale * 1300 / 4 / 300
        assert moe_host.host_kernel_s(h100) == pytest.approx(ops * moe_host.X86_HOST_OP_S)
        assert moe_host.host_kernel_s(gb200) == pytest.approx(ops * 37.08e-6)
        issue = moe_host.HostIssue(kernel_s=moe_host.host_kernel_s(gb200))
        times.append([issue.cpu_s(nodes, 1, backward=False, routing=False, in_backward=b)
                      for b in (False, True)])
    # a forward kernel at the forward's 800 / 4 / 100 host ops, a backward one at 500 / 4 / 200
    assert times[0][0] == pytest.approx(7 * 2.0 * 37.08e-6)
    assert times[0][1] == pytest.approx(7 * 0.625 * 37.08e-6)
    assert times[1] == pytest.approx([3 * t for t in times[0]])


def test_importing_the_simulator_reads_no_measurement():
    """The measured CSV is read on first use, not when `simulate` is imported."""
    import subprocess
    import sys

    code = ("import pathlib\n"
            "opened = []\n"
            "real = pathlib.Path.open\n"
            "def spy(self, *a, **k):\n"
            "    opened.append(self.name)\n"
            "    return real(self, *a, **k)\n"
            "pathlib.Path.open = spy\n"
            "import simulate, simulate.training, simulate.moe_host, simulate.search.evaluator\n"
            "assert simulate.moe_host.MEASURED_CPU.name not in opened, opened\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr


def test_a_missing_measurement_is_named_at_use(tmp_path, monkeypatch):
    from analytical.hardware import get_hardware
    from simulate import moe_host

    missing = tmp_path / "gone.csv"
    monkeypatch.setattr(moe_host, "MEASURED_CPU", missing)
    with pytest.raises(FileNotFoundError, match="gone.csv.*time_moe_layer_cpu.py"):
        moe_host.host_kernel_s(get_hardware("h100-sxm"))
