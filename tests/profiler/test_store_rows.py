# SPDX-License-Identifier: Apache-2.0
"""Insert, idempotency, lookups, frames and fingerprints of the measurement store."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import Efficiency, HardwareSpec, Link
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    Phase,
    op_fields,
)
from analytical.roofline import roofline_time
from profiler import store_rows
from profiler.fingerprint import Fingerprint, current_fingerprint, hardware_name_for_device
from profiler.store import Measurement, Status, Store, point_key
from profiler.timing import summarize

H100 = Fingerprint(hardware="h100-sxm", device_name="NVIDIA H100 80GB HBM3", device_count=1,
                   cuda="12.4", torch="2.5.0")
GEMM = GemmSpec(m=4096, n=4096, k=4096, dtype=DType.BF16)


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_DB", raising=False)


def _ok(op, samples, *, fp=H100, backend="torch.matmul", provenance="profiled"):  # noqa: ANN001,ANN202
    return Measurement(op=op, fingerprint=fp, backend=backend, status=Status.OK,
                       timing=summarize(samples), provenance=provenance)


def test_fingerprint_id_hashes_every_field() -> None:
    assert len(H100.id) == 16 and int(H100.id, 16) >= 0
    same = Fingerprint(hardware="h100-sxm", device_name="NVIDIA H100 80GB HBM3",
                       device_count=1, cuda="12.4", torch="2.5.0")
    assert same.id == H100.id
    for change in ({"driver": "550.54"}, {"host": "node7"}, {"device_count": 8},
                   {"clocks_mhz": "sm=1980,mem=2619"}):
        assert Fingerprint(**{**H100.to_dict(), **change}).id != H100.id


def test_hardware_names_for_reported_devices() -> None:
    assert hardware_name_for_device("NVIDIA H100 80GB HBM3") == "h100-sxm"
    assert hardware_name_for_device("NVIDIA A100-SXM4-80GB") == "a100-sxm-80gb"
    assert hardware_name_for_device("NVIDIA A100-SXM4-40GB") == "a100-sxm-40gb"
    assert hardware_name_for_device("NVIDIA H100 PCIe") == "h100-pcie"
    assert hardware_name_for_device("NVIDIA H200") == "h200"
    assert hardware_name_for_device("NVIDIA GH200 480GB") == "gh200"
    assert hardware_name_for_device("NVIDIA B200") == "b200"
    assert hardware_name_for_device("NVIDIA L40S") == "l40s"
    assert hardware_name_for_device("Intel(R) Xeon(R) Platinum 8480+") == "cpu"
    assert hardware_name_for_device("cpu") == "cpu"
    assert hardware_name_for_device("NVIDIA RTX 6000 Ada") == "nvidia-rtx-6000-ada"


def test_cpu_fingerprint_of_this_machine() -> None:
    fp = current_fingerprint("cpu")
    assert fp.hardware == "cpu" and fp.device_count >= 1 and fp.device_name
    assert current_fingerprint("cpu", hardware="my-cpu").hardware == "my-cpu"
    with pytest.raises(SpecError, match="device"):
        current_fingerprint("tpu")


def test_measurement_rejects_inconsistent_status() -> None:
    with pytest.raises(SpecError, match="Measurement.timing"):
        Measurement(op=GEMM, fingerprint=H100, backend="x", status=Status.OK, timing=None)
    with pytest.raises(SpecError, match="Measurement.timing"):
        Measurement(op=GEMM, fingerprint=H100, backend="x", status=Status.OOM,
                    timing=summarize([1.0]))
    with pytest.raises(SpecError, match="Measurement.provenance"):
        _ok(GEMM, [1.0], provenance="somewhere")


def test_insert_is_idempotent_and_counts_rows(tmp_path: Path) -> None:
    oom = Measurement(op=GemmSpec(m=1 << 20, n=1 << 20, k=1024), fingerprint=H100,
                      backend="torch.matmul", status=Status.OOM, timing=None, error="CUDA OOM")
    batch = [_ok(GEMM, [1e-3, 2e-3, 3e-3]), oom, _ok(GEMM, [9.0])]  # 3rd: same point key
    with Store(tmp_path / "s.duckdb") as store:
        assert store.insert(batch) == 2
        assert store.insert(batch) == 0
        assert store.insert([]) == 0
        info = store.info()
        assert info.set_index("status")["rows"].to_dict() == {"ok": 1, "oom": 1}
        keys = [point_key(GEMM, H100, "torch.matmul"), "0" * 32]
        assert store.existing_keys(keys) == {keys[0]}
        frame = store.frame("gemm", status=None)
        assert len(frame) == 2
        assert frame.set_index("status").loc["oom", "error"] == "CUDA OOM"


def test_point_key_separates_backend_and_provenance() -> None:
    keys = {point_key(GEMM, H100, "a"), point_key(GEMM, H100, "b"),
            point_key(GEMM, H100, "a", "imported:x")}
    assert len(keys) == 3 and all(len(k) == 32 for k in keys)


def test_lookup_medians_returns_the_inserted_median(tmp_path: Path) -> None:
    attn = AttentionSpec(batch=2, q_len=1, kv_len=4096, heads=32, kv_heads=8, head_dim=128,
                         phase=Phase.DECODE)
    with Store(tmp_path / "s.duckdb") as store:
        store.insert([_ok(GEMM, [3e-4, 1e-4, 2e-4, 9e-4, 5e-4]), _ok(attn, [7.25e-5])])
        got = store.lookup_medians([GEMM.key, attn.key, "gemm/bf16/b1/1x1x1", "bogus"],
                                   "h100-sxm")
        assert got == {GEMM.key: 3e-4, attn.key: 7.25e-5}
        assert store.lookup_medians([GEMM.key], "a100-sxm-80gb") == {}


def test_lookup_prefers_profiled_then_median_of_medians(tmp_path: Path) -> None:
    other = Fingerprint(hardware="h100-sxm", device_name="NVIDIA H100 80GB HBM3",
                        device_count=1, host="node2")
    with Store(tmp_path / "s.duckdb") as store:
        store.insert([_ok(GEMM, [1.0], provenance="imported:a"),
                      _ok(GEMM, [2.0], provenance="imported:b"),
                      _ok(GEMM, [4.0], provenance="imported:c")])
        assert store.lookup_medians([GEMM.key], "h100-sxm") == {GEMM.key: 2.0}
        attn = AttentionSpec(batch=2, q_len=1, kv_len=64, heads=8, kv_heads=8, head_dim=64,
                             phase=Phase.DECODE)
        store.insert([_ok(attn, [1.0], provenance="imported:a")])
        assert store.measured_by_key("attention", "h100-sxm") == {attn.key: (1.0, "imported:a")}
        assert store.measured_by_key("gemm", "h100-sxm") == {GEMM.key: (2.0, "")}  # mixed
        store.insert([_ok(GEMM, [10.0]), _ok(GEMM, [20.0], fp=other)])
        assert store.lookup_medians([GEMM.key], "h100-sxm") == {GEMM.key: 15.0}
        # the median is ours
        assert store.measured_by_key("gemm", "h100-sxm") == {GEMM.key: (15.0, "profiled")}
        assert store.measured_by_key("gemm", "a100-sxm-80gb") == {}


def test_frame_has_typed_shape_and_fingerprint_columns(tmp_path: Path) -> None:
    coll = CollectiveSpec(kind=CollectiveKind.ALL_REDUCE, size_bytes=1 << 30, group_size=8,
                          ranks_per_node=8)
    with Store(tmp_path / "s.duckdb") as store:
        store.insert([_ok(coll, [2.0e-3, 2.2e-3, 2.4e-3], backend="nccl"),
                      _ok(GEMM, [1e-3], fp=Fingerprint(hardware="a100-sxm-80gb",
                                                       device_name="A100", device_count=1))])
        frame = store.frame("collective")
        for column in (*op_fields("collective"), "op_key", "hardware", "backend", "provenance",
                       "median_s", "min_s", "p10_s", "p90_s", "std_s", "n_samples",
                       "device_name", "torch", "cuda", "fingerprint_id"):
            assert column in frame.columns, column
        row = frame.iloc[0]
        assert row["size_bytes"] == 1 << 30 and row["kind"] == "all_reduce"
        assert row["median_s"] == pytest.approx(2.2e-3) and row["n_samples"] == 3
        assert row["torch"] == "2.5.0" and row["bytes"] == pytest.approx(coll.bytes)
        assert len(store.frame("gemm", hardware="a100-sxm-80gb", dtype="bf16")) == 1
        assert len(store.frame("gemm", hardware="h100-sxm")) == 0
        with pytest.raises(UnknownNameError):
            store.frame("conv")


def _h100_spec() -> HardwareSpec:
    link = Link(name="nvlink", bandwidth_bytes_per_s=450e9, latency_s=3e-6)
    return HardwareSpec(
        name="h100-sxm", vendor="nvidia", kind="gpu", peak_flops_fp32=67e12,
        peak_flops_tf32=494.5e12, peak_flops_bf16=989e12, peak_flops_fp16=989e12,
        peak_flops_fp8=1979e12, peak_flops_int8=1979e12, peak_flops_fp4=0.0,
        memory_bytes=80 * 2**30, memory_bw_bytes_per_s=3.35e12, compute_units=132,
        l2_bytes=50e6, intra_node=link, pcie=link, inter_node=link, gpus_per_node=8,
        efficiency=Efficiency(gemm=0.8, attention=0.6, memory=0.85, intra_node=0.8,
                              inter_node=0.8))


def test_roofline_columns_use_the_catalog_hardware(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _h100_spec()
    monkeypatch.setattr(store_rows.RooflineCache, "hardware",
                        lambda self, name: spec if name == "h100-sxm" else None)
    with Store(tmp_path / "s.duckdb") as store:
        store.insert([_ok(GEMM, [2e-4]),
                      _ok(GEMM, [1e-3], fp=Fingerprint(hardware="unknown-gpu", device_name="?",
                                                       device_count=1))])
        frame = store.frame("gemm").set_index("hardware")
    expected = roofline_time(GEMM, spec)
    assert frame.loc["h100-sxm", "roofline_s"] == pytest.approx(expected)
    assert frame.loc["h100-sxm", "fraction_of_roofline"] == pytest.approx(expected / 2e-4)
    assert frame["roofline_s"].isna()["unknown-gpu"]


def test_failed_insert_leaves_the_store_unchanged(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.duckdb"
    coll = CollectiveSpec(kind=CollectiveKind.ALL_GATHER, size_bytes=1024, group_size=2,
                          ranks_per_node=2)
    with Store(path) as store:
        store.insert([_ok(GEMM, [1.0])])
        original = Store._insert_arrow

        def fail_on_collective(self, family, table):  # noqa: ANN001,ANN202
            if family == "collective":
                raise RuntimeError("disk full")
            return original(self, family, table)

        monkeypatch.setattr(Store, "_insert_arrow", fail_on_collective)
        new_fp = Fingerprint(hardware="b200", device_name="NVIDIA B200", device_count=1)
        with pytest.raises(RuntimeError, match="disk full"):
            store.insert([_ok(GemmSpec(m=1, n=2, k=3), [1.0], fp=new_fp),
                          _ok(coll, [1.0], fp=new_fp, backend="gloo")])
        assert store.info()["rows"].sum() == 1
        assert new_fp.id not in set(store.fingerprints()["fingerprint_id"])


def test_runs_and_fingerprints_are_recorded(tmp_path: Path) -> None:
    with Store(tmp_path / "s.duckdb") as store:
        run = store.start_run(command="llmsim profile run", sweep="gemm-small", fingerprint=H100)
        store.insert([Measurement(op=GEMM, fingerprint=H100, backend="torch.matmul",
                                  status=Status.OK, timing=summarize([1.0]), run_id=run)])
        runs = store.query("SELECT run_id, sweep, fingerprint_id FROM runs")
        assert runs.values.tolist() == [[run, "gemm-small", H100.id]]
        fps = store.fingerprints()
        assert fps.set_index("fingerprint_id").loc[H100.id, "rows"] == 1
        assert store.frame("gemm")["run_id"].tolist() == [run]
