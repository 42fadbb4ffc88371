# SPDX-License-Identifier: Apache-2.0
"""Vidur import: compute and network rows per GPU/system, shapes and units.

Unit checks: H100 SXM dense fp16 peak 989 TFLOP/s (NVIDIA datasheet); 8x H100 NVLink4
all_reduce bus bandwidth ~350-480 GB/s (nccl-tests); the same 64 MiB all_reduce measured by
AIConfigurator (0.325 ms) must agree with Vidur's once both sizes are read as bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from analytical.ops import CollectiveKind, GemmSpec, MemoryOpKind
from profiler.importers import aiconfigurator, vidur

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"  # beside the checkout, if any
pytestmark = pytest.mark.skipif(not (DATA / "vidur").is_dir(),
                                reason="published data (../shared/data) not present")


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("gpu", sorted(vidur.GPU_NAMES))
def test_compute_rows_per_gpu(gpu: str) -> None:
    found = list(vidur.compute_measurements(DATA, gpus=[gpu], limit=40))
    families = {m.op.family for m in found}
    assert families == {"gemm", "memory"}
    assert {m.fingerprint.hardware for m in found} == {vidur.GPU_NAMES[gpu]}
    assert all(m.op.dtype == "fp16" and m.provenance == "imported:vidur@7d47513" for m in found)


@pytest.mark.parametrize("system", sorted(vidur.SYSTEM_NAMES))
def test_network_rows_per_system(system: str) -> None:
    found = list(vidur.network_measurements(DATA, systems=[system], limit=50))
    assert found and {m.op.family for m in found} == {"collective"}
    assert {m.fingerprint.host for m in found} == {system}


def test_llama2_7b_gemm_shapes_and_h100_throughput() -> None:
    ops = {m.op.key: m for m in vidur.compute_measurements(DATA, gpus=["h100"])}
    # Llama-2-7B, 4096 tokens, tp 1: gate+up projection 4096 x (2*11008) x 4096.
    up = ops[GemmSpec(m=4096, n=22016, k=4096, dtype="fp16").key]
    tflops = up.op.flops / up.timing.median_s / 1e12
    assert 600 < tflops < 989  # 749 TFLOP/s
    # tp 2 shards the qkv projection: (32 + 2*32) * 128 / 2 = 6144 columns.
    assert GemmSpec(m=4096, n=6144, k=4096, dtype="fp16").key in ops
    kinds = {m.op.kind for m in ops.values() if m.op.family == "memory"}
    assert kinds == {MemoryOpKind.SWIGLU, MemoryOpKind.GELU, MemoryOpKind.RMSNORM,
                     MemoryOpKind.ADD}


def test_h100_dgx_all_reduce_bus_bandwidth_matches_aiconfigurator() -> None:
    found = [m for m in vidur.network_measurements(DATA, systems=["h100_dgx"])
             if m.op.kind == CollectiveKind.ALL_REDUCE and m.op.group_size == 8
             and m.op.size_bytes == 1 << 26]
    assert len(found) == 1
    busbw = found[0].op.bytes / found[0].timing.median_s / 1e9
    assert 300 < busbw < 480  # 365 GB/s
    aic = [m for t in aiconfigurator.tables(DATA, gpus=["h100_sxm"], families=["collective"])
           if t.version == "2.29.2" for m in aiconfigurator.table_measurements(t)
           if m.op.key == found[0].op.key]
    assert len(aic) == 1
    assert found[0].timing.median_s == pytest.approx(aic[0].timing.median_s, rel=0.05)


def test_send_recv_across_nodes_has_one_rank_per_node() -> None:
    found = list(vidur.network_measurements(DATA, systems=["a100_dgx"]))
    layouts = {(m.op.kind, m.op.group_size, m.op.ranks_per_node) for m in found}
    assert (CollectiveKind.SEND_RECV, 2, 1) in layouts
    assert (CollectiveKind.ALL_REDUCE, 16, 8) in layouts
