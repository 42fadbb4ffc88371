# SPDX-License-Identifier: Apache-2.0
"""AIConfigurator import: every GPU and family yields rows, and the units are right.

Unit checks use published numbers: dense bf16 peak 989 TFLOP/s for H100 SXM (NVIDIA H100
datasheet) and nccl-tests all_reduce bus bandwidth of ~350-480 GB/s on 8x H100 NVLink4 (the
450 GB/s per-direction link is the ceiling without NVLS).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analytical.ops import CollectiveKind, Phase
from profiler.importers import aiconfigurator, import_published
from profiler.store import Store

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"  # beside the checkout, if any
pytestmark = pytest.mark.skipif(not (DATA / "aiconfigurator").is_dir(),
                                reason="published data (../shared/data) not present")


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_DB", raising=False)


def _table(gpu: str, family: str, framework: str, stem: str,
           version: str | None = None) -> aiconfigurator.Table:
    for table in aiconfigurator.tables(DATA, gpus=[gpu], families=[family]):
        if table.framework == framework and table.path.stem == stem and \
                version in (None, table.version):
            return table
    raise AssertionError(f"no {gpu}/{family}/{framework}/{stem}")


@pytest.mark.parametrize("gpu", sorted(aiconfigurator.GPU_NAMES))
@pytest.mark.parametrize("family", ["gemm", "attention", "collective"])
def test_rows_for_every_gpu_and_family(gpu: str, family: str) -> None:
    found = list(aiconfigurator.measurements(DATA, gpus=[gpu], families=[family], limit=300))
    assert found, f"no {family} rows for {gpu}"
    assert {m.op.family for m in found} == {family}
    assert {m.fingerprint.hardware for m in found} == {aiconfigurator.GPU_NAMES[gpu]}
    assert all(m.provenance.startswith("imported:aiconfigurator-0.12.0/") for m in found)
    assert all(m.timing is not None and m.timing.median_s > 0 for m in found)


def test_both_attention_phases_are_imported() -> None:
    phases = {m.op.phase for m in aiconfigurator.measurements(
        DATA, gpus=["h100_sxm"], families=["attention"], limit=300)}
    assert phases == {Phase.PREFILL, Phase.DECODE}


def test_h100_large_bf16_gemm_is_in_the_published_range() -> None:
    table = _table("h100_sxm", "gemm", "trtllm", "gemm_perf")
    assert table.provenance == "imported:aiconfigurator-0.12.0/trtllm-1.3.0rc20"
    rows = [m for m in aiconfigurator.table_measurements(table)
            if m.op.key == "gemm/bf16/b1/8192x8192x8192"]
    assert [m.backend for m in rows] == ["trtllm/torch_flow"]
    tflops = rows[0].op.flops / rows[0].timing.median_s / 1e12
    assert 600 < tflops < 989  # measured 783 TFLOP/s


def test_h100_nvlink_all_reduce_bus_bandwidth() -> None:
    table = _table("h100_sxm", "collective", "nccl", "nccl_perf", "2.29.2")
    rows = [m for m in aiconfigurator.table_measurements(table)
            if m.op.kind == CollectiveKind.ALL_REDUCE and m.op.group_size == 8
            and m.op.size_bytes == 1 << 29 and m.op.dtype == "fp16"]
    assert len(rows) == 1
    busbw = rows[0].op.bytes / rows[0].timing.median_s / 1e9
    assert 350 < busbw < 480  # measured 445 GB/s
    assert rows[0].backend == "nccl" and rows[0].fingerprint.device_count == 8
    assert rows[0].fingerprint.nccl == "2.29.2"


def test_decode_kv_len_is_step_plus_one() -> None:
    table = _table("h100_sxm", "attention", "trtllm", "generation_attention_perf")
    ops = [m.op for m in aiconfigurator.table_measurements(table, limit=500)]
    assert {op.q_len for op in ops} == {1}
    assert {op.kv_len & (op.kv_len - 1) for op in ops} == {0}  # steps 2^k - 1


def test_import_twice_stores_nothing_twice(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def few(data_dir):  # noqa: ANN001,ANN202
        return aiconfigurator.measurements(data_dir, gpus=["a100_sxm"], limit=100)

    monkeypatch.setitem(__import__("profiler.importers").importers.IMPORTERS,
                        "aiconfigurator", few)
    with Store(tmp_path / "s.duckdb") as store:
        first = import_published(store, source="aiconfigurator", data_dir=DATA)
        inserted, skipped = first["aiconfigurator"]
        assert inserted > 0 and skipped == 0
        assert import_published(store, source="aiconfigurator", data_dir=DATA) == {
            "aiconfigurator": (0, inserted)}
        assert store.info()["rows"].sum() == inserted
