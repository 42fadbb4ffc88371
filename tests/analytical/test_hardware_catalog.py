# SPDX-License-Identifier: Apache-2.0
"""The shipped hardware catalog: every file loads, datasheet values are pinned, bad files are
rejected with the file and field named, and the ``llmsim hardware`` commands work end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from analytical.dtypes import DType
from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import (
    HARDWARE_DIR,
    Architecture,
    get_hardware,
    hardware_from_dict,
    hardware_names,
    load_hardware_file,
)

SHIPPED = ("a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "h100-sxm", "h100-pcie", "h200",
           "b200", "gh200", "l4", "l40s", "mi300x", "cpu", "b300", "gb200", "gb300", "mi325x",
           "mi355x", "rtx-6000-ada", "rtx-pro-6000-server", "h20", "h100-hbm2e-96gb", "a40", "h100-nvl",
           "a10")
LLMSIM = Path(sys.executable).parent / "llmsim"


pytestmark = pytest.mark.usefixtures("isolated_hardware_home")  # tests/conftest.py


def test_catalog_holds_exactly_the_shipped_files():
    assert sorted(p.stem for p in HARDWARE_DIR.glob("*.yaml")) == sorted(SHIPPED)
    assert set(SHIPPED) <= set(hardware_names())


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_file_loads_and_is_consistent(name):
    hw = load_hardware_file(HARDWARE_DIR / f"{name}.yaml")
    assert hw.name == name  # file stem = name
    assert hw.kind == ("cpu" if name == "cpu" else "gpu")
    assert hw.sources, "every entry cites where its numbers come from"
    # Tensor-core ordering that holds on every listed part: fp32 <= tf32 <= bf16 <= fp8.
    assert hw.peak_flops_fp32 <= hw.peak_flops_tf32 <= hw.peak_flops_bf16
    if hw.supports(DType.FP8):
        assert hw.peak_flops_fp8 >= hw.peak_flops_bf16
    for eff in (hw.efficiency.gemm, hw.efficiency.attention, hw.efficiency.memory,
                hw.efficiency.intra_node, hw.efficiency.inter_node):
        assert 0 < eff <= 1
    assert hw.inter_node.bandwidth_bytes_per_s <= hw.intra_node.bandwidth_bytes_per_s or \
        hw.kind == "cpu"


def test_h100_sxm_matches_datasheet():
    # NVIDIA H100 datasheet (SXM): bf16 1,979 TFLOP/s with sparsity -> 989 dense; 3.35 TB/s HBM3;
    # 80 GB; NVLink 900 GB/s bidirectional -> 450 GB/s per direction.
    hw = get_hardware("h100-sxm")
    assert hw.peak_flops(DType.BF16) == pytest.approx(989e12, rel=1e-3)
    assert hw.peak_flops(DType.FP8) == pytest.approx(1979e12, rel=1e-3)
    assert hw.memory_bw_bytes_per_s == pytest.approx(3.35e12)
    assert hw.memory_bytes == 80 * 2**30
    assert hw.intra_node.bandwidth_bytes_per_s == pytest.approx(450e9)
    assert hw.inter_node.bandwidth_bytes_per_s == pytest.approx(50e9)  # 8 x 400 Gb/s / 8
    assert hw.compute_units == 132
    assert hw.gpus_per_node == 8


def test_a100_matches_datasheet():
    # NVIDIA A100 datasheet: bf16 312 TFLOP/s dense, no fp8; 80GB SXM 2,039 GB/s; 40GB 1,555 GB/s.
    a80, a40 = get_hardware("a100-sxm-80gb"), get_hardware("a100-sxm-40gb")
    assert a80.peak_flops(DType.BF16) == pytest.approx(312e12)
    assert a80.peak_flops(DType.TF32) == pytest.approx(156e12)
    assert not a80.supports(DType.FP8)
    assert a80.memory_bw_bytes_per_s == pytest.approx(2.039e12)
    assert a40.memory_bw_bytes_per_s == pytest.approx(1.555e12)
    assert a80.intra_node.bandwidth_bytes_per_s == pytest.approx(300e9)  # NVLink3 600 bidir


def test_other_pinned_datasheet_values():
    assert get_hardware("mi300x").peak_flops(DType.BF16) == pytest.approx(1307.4e12)
    assert get_hardware("mi300x").memory_bw_bytes_per_s == pytest.approx(5.3e12)
    assert get_hardware("h200").memory_bw_bytes_per_s == pytest.approx(4.8e12)
    assert get_hardware("b200").peak_flops(DType.FP4) == pytest.approx(9000e12)
    assert get_hardware("l4").memory_bw_bytes_per_s == pytest.approx(300e9)
    # int4 is weight-only in llmsim: it runs at the bf16 rate.
    assert get_hardware("l40s").peak_flops(DType.INT4) == get_hardware("l40s").peak_flops_bf16


# (gpu, attribute or dtype, value in SI units, the vendor figure it comes from)
CURRENT_GPUS = [
    ("b300", DType.FP4, 13.5e15, "HGX B300: FP4 108 PF dense per 8 GPUs"),
    ("b300", DType.BF16, 2.25e15, "HGX B300: FP16/BF16 36 PF sparse per 8 GPUs"),
    ("b300", "memory_bw_bytes_per_s", 8e12, "Blackwell Ultra blog: 8 TB/s"),
    ("b300", "inter_node", 100e9, "8x ConnectX-8 800 Gb/s per 8 GPUs"),
    ("gb200", DType.FP8, 5e15, "GB200 NVL72: FP8 720 PF sparse per 72 GPUs"),
    ("gb200", "memory_bw_bytes_per_s", 8e12, "GB200 NVL72: 576 TB/s per 72 GPUs"),
    ("gb200", "intra_node", 900e9, "NVL72: 130 TB/s NVLink per 72 GPUs, bidirectional"),
    ("gb300", DType.FP4, 15e15, "GB300 NVL72: FP4 1,080 PF dense per 72 GPUs"),
    ("mi325x", DType.BF16, 1307.4e12, "MI325X: FP16/BF16 1307.4 TF dense"),
    ("mi325x", "memory_bw_bytes_per_s", 6e12, "MI325X: 6 TB/s HBM3E"),
    ("mi355x", DType.FP8, 5033.2e12, "MI355X: 256 CUs x 8192 FLOP/clk x 2.4 GHz"),
    ("mi355x", "memory_bw_bytes_per_s", 8e12, "MI355X: 8 TB/s HBM3E"),
    ("rtx-6000-ada", DType.BF16, 364.2e12, "Ada whitepaper: RTX 6000 FP16 w/ FP32 acc, dense"),
    ("rtx-6000-ada", "memory_bw_bytes_per_s", 960e9, "RTX 6000 Ada datasheet: 960 GB/s"),
    ("rtx-pro-6000-server", DType.FP4, 2000e12, "4,000 AI TOPS (FP4, sparse) / 2"),
    ("h20", DType.BF16, 148e12, "H20 partner datasheet: FP16/BF16 148 TF dense"),
    ("h20", "memory_bw_bytes_per_s", 4e12, "H20: 96 GB HBM3 at 4.0 TB/s"),
    ("a40", DType.BF16, 149.7e12, "A40 datasheet: BF16 299.4 TF sparse"),
    ("a40", "memory_bw_bytes_per_s", 696e9, "A40 datasheet: 696 GB/s GDDR6"),
    ("a40", "compute_units", 84, "A40 datasheet: 10,752 CUDA cores, 128 per GA102 SM"),
    ("h100-nvl", DType.FP8, 1670.5e12, "H100 NVL: FP8 3,341 TF sparse"),
    ("h100-nvl", "memory_bw_bytes_per_s", 3.9e12, "H100 NVL: 94 GB HBM3 at 3.9 TB/s"),
    ("a10", DType.BF16, 125e12, "A10 datasheet: BF16 250 TF sparse"),
    ("a10", "memory_bw_bytes_per_s", 600e9, "A10 datasheet: 600 GB/s GDDR6"),
    ("l40s", "l2_bw_bytes_per_s", 5.2e12, "gpu-benches gpu-l2-cache l40.txt: 5.1-5.3 TB/s"),
    ("a100-sxm-80gb", "l2_bw_bytes_per_s", 5.4e12, "gpu-l2-cache a100_80.txt: 5.3-5.5 TB/s"),
    ("h200", "l2_bw_bytes_per_s", 9.7e12, "gpu-l2-cache h200.txt: 9.5-9.9 TB/s"),
    ("a40", "l2_bw_bytes_per_s", 0.0, "no published measurement: left empty"),
    ("l40s", "boost_clock_hz", 2.52e9, "TechPowerUp L40S: boost 2520 MHz"),
    ("l40s", "power_limit_w", 350, "L40S datasheet: 350 W max power"),
    ("a100-sxm-80gb", "boost_clock_hz", 1.41e9, "A100 whitepaper: GPU boost clock 1410 MHz"),
    ("h200", "boost_clock_hz", 1.98e9, "nvidia-smi on our H200: 1980 MHz"),
    ("b200", "base_clock_hz", 0.0, "no published base clock: left empty"),
]


@pytest.mark.parametrize(("name", "what", "value", "source"), CURRENT_GPUS,
                         ids=[f"{row[0]}-{row[1]}" for row in CURRENT_GPUS])
def test_current_gpus_match_their_cited_figures(name, what, value, source):
    hw = get_hardware(name)
    if isinstance(what, DType):
        got = hw.peak_flops(what)
    elif what in ("intra_node", "inter_node"):
        got = getattr(hw, what).bandwidth_bytes_per_s
    else:
        got = getattr(hw, what)
    assert got == pytest.approx(value, rel=1e-3), source


def test_rack_scale_parts_span_their_nvlink_domain():
    # GB200/GB300 NVL72: one NVLink domain of 72 GPUs; HGX boards: 8.
    assert get_hardware("gb200").gpus_per_node == get_hardware("gb300").gpus_per_node == 72
    assert get_hardware("b300").gpus_per_node == 8
    assert not get_hardware("mi355x").supports(DType.TF32) or \
        get_hardware("mi355x").peak_flops(DType.TF32) == get_hardware("mi355x").peak_flops_fp32


def _valid() -> dict:
    return yaml.safe_load((HARDWARE_DIR / "h100-sxm.yaml").read_text())


def _write(tmp_path: Path, data) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _mutate(change) -> dict:
    data = _valid()
    change(data)
    return data


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d.update(flops=1), "flops"),
    (lambda d: d["memory"].update(speed=1), "memory.speed"),
    (lambda d: d["memory"].pop("bandwidth_gb_per_s"), "memory.bandwidth_gb_per_s"),
    (lambda d: d["peak_dense_tflops"].pop("bf16"), "peak_dense_tflops.bf16"),
    (lambda d: d["interconnect"]["intra_node"].update(bandwidth_gb_per_s=-450),
     "interconnect.intra_node.bandwidth_gb_per_s"),
    (lambda d: d["efficiency"].update(gemm=1.2), "efficiency.gemm"),
    (lambda d: d["efficiency"].update(memory="high"), "efficiency.memory"),
    (lambda d: d.update(kind="tpu"), "kind"),
    (lambda d: d.update(architecture="hopper-ish"), "architecture"),
    (lambda d: d["interconnect"]["intra_node"].update(fabric="nvswitch"),
     "interconnect.intra_node.fabric"),
    (lambda d: d["memory"].update(l2_bandwidth_gb_per_s=0), "memory.l2_bandwidth_gb_per_s"),
    (lambda d: d.update(clocks={"boost_mhz": -1980}), "clocks.boost_mhz"),
    (lambda d: d.update(clocks={"tensor_mhz": 1830}), "clocks.tensor_mhz"),
], ids=["unknown-top-key", "unknown-nested-key", "missing-bandwidth", "missing-bf16",
        "negative-bandwidth", "efficiency-above-1", "efficiency-not-number", "bad-kind",
        "bad-architecture", "bad-fabric", "zero-l2-bandwidth", "negative-clock",
        "unknown-clock-key"])
def test_bad_file_names_file_and_field(tmp_path, change, field):
    path = _write(tmp_path, _mutate(change))
    with pytest.raises(SpecError) as info:
        load_hardware_file(path)
    assert info.value.field == field
    assert info.value.source == str(path)
    assert str(path) in str(info.value) and field in str(info.value)


def test_malformed_yaml_names_the_file(tmp_path):
    path = _write(tmp_path, "name: [unclosed\n  vendor: x\n")
    with pytest.raises(SpecError) as info:
        load_hardware_file(path)
    assert info.value.field == "hardware" and info.value.source == str(path)


def test_unknown_gpu_lists_known_names():
    with pytest.raises(UnknownNameError) as info:
        get_hardware("h100-sxm5")  # exact lookups only, no substring fallback
    assert "h100-sxm" in info.value.known and "mi300x" in info.value.known


def test_user_file_shadows_the_catalog(tmp_path, monkeypatch):
    folder = tmp_path / "extra"
    folder.mkdir()
    data = _mutate(lambda d: d["efficiency"].update(gemm=0.5))
    (folder / "h100-sxm.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("LLMSIM_HARDWARE_PATH", str(folder))
    get_hardware.cache_clear()
    assert get_hardware("h100-sxm").efficiency.gemm == 0.5


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_file_states_its_architecture(name):
    """Generation-gated effects (`simulate.efficiency.is_hopper`) read this field, so no
    shipped file may leave it unknown, and every GH100 part must say Hopper."""
    hw = get_hardware(name)
    assert hw.architecture != Architecture.UNKNOWN
    hopper = name.startswith(("h100", "h200", "h20", "gh200"))
    assert (hw.architecture == Architecture.HOPPER) == hopper


def test_link_fabrics_and_pair_bridges():
    """NCCL tells NVLink from PCIe paths (its latency classes); PCIe cards sold NVLink-bridged
    in pairs carry the bridge as its own link, cited from their datasheets."""
    from analytical.hardware import LinkFabric

    assert get_hardware("h100-sxm").intra_node.fabric == LinkFabric.NVLINK
    assert get_hardware("l40s").intra_node.fabric == LinkFabric.PCIE
    assert get_hardware("l40s").pair_bridge is None
    nvl = get_hardware("h100-nvl")
    assert nvl.intra_node.fabric == LinkFabric.PCIE
    assert nvl.pair_bridge is not None and nvl.pair_bridge.fabric == LinkFabric.NVLINK
    assert nvl.pair_bridge.bandwidth_bytes_per_s == pytest.approx(300e9)  # 600 GB/s bidir
    assert get_hardware("a40").pair_bridge.bandwidth_bytes_per_s == pytest.approx(56.25e9)


def test_a_file_without_architecture_loads_as_unknown():
    data = _valid()
    del data["architecture"]
    assert hardware_from_dict(data).architecture == Architecture.UNKNOWN


def test_round_trip_through_dict():
    assert hardware_from_dict(_valid()) == get_hardware("h100-sxm")


def _run(*args: str, home: Path) -> subprocess.CompletedProcess:
    # PYTHONPATH passes through so that a worktree's checkout (not the installed one) answers.
    env = {"LLMSIM_HOME": str(home), "PATH": str(LLMSIM.parent),
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    return subprocess.run([str(LLMSIM), "hardware", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_list_json_has_all_names(tmp_path):
    result = _run("list", "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert {row["name"] for row in rows} >= set(SHIPPED)
    h100 = next(row for row in rows if row["name"] == "h100-sxm")
    assert h100["bf16_tflops"] == pytest.approx(989.4)
    assert h100["nvlink_gb_per_s"] == pytest.approx(450)


def test_cli_show(tmp_path):
    result = _run("show", "a100-sxm-80gb", "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["memory_bw_tb_per_s"] == pytest.approx(2.039)
    assert shown["peak_bf16_tflops"] == pytest.approx(312)
    assert shown["sources"]
    assert shown["architecture"] == "ampere" and shown["intra_node_fabric"] == "nvlink"
    assert "pair_bridge_link" not in shown
    bridged = json.loads(_run("show", "h100-nvl", "--json", home=tmp_path).stdout)
    assert bridged["pair_bridge_gb_per_s_per_direction"] == pytest.approx(300)
    table = _run("show", "l4", home=tmp_path)
    assert table.returncode == 0 and "l4.yaml" in table.stdout.replace("\n", "")


def test_cli_show_unknown_name_exits_2_with_one_line(tmp_path):
    result = _run("show", "no-such-gpu", home=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no-such-gpu" in lines[0] and "h100-sxm" in lines[0]
    assert "Traceback" not in result.stderr


def test_every_entry_writes_back_to_the_same_spec():
    """`hardware_to_dict` is `hardware_from_dict`'s inverse (calibration starts from it)."""
    from analytical.hardware import hardware_to_dict

    for name in hardware_names():
        hw = get_hardware(name)
        assert hardware_from_dict(hardware_to_dict(hw), source=name) == hw, name
