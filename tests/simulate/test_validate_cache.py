# SPDX-License-Identifier: Apache-2.0
"""The cache state of the CPU validation's operator prices: sysfs cache sizes, the working set
of a step, and the rule choosing cold or LLC-warm prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytical.dtypes import DType
from analytical.ops import GemmSpec
from profiler.cpu_caches import cache_instances, cpu_cache_bytes, last_level_cache_bytes
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import ParamInfo, TracedGraph, TracedOp, TracePhase
from simulate.validate.cache import (
    MIN_WARM_FLUSH_BYTES,
    CacheRule,
    fits_llc,
    warm_flush_bytes,
    working_set_bytes,
)
from simulate.validate.loop import warm_store_path

MiB = 2**20


def _index(root: Path, cpu: int, index: int, level: int, kind: str, size: str,
           shared: str) -> None:
    path = root / f"cpu{cpu}" / "cache" / f"index{index}"
    path.mkdir(parents=True)
    for name, value in (("level", str(level)), ("type", kind), ("size", size),
                        ("shared_cpu_list", shared)):
        (path / name).write_text(value + "\n")


def _sysfs(root: Path) -> Path:
    """Two CPUs: private 48K L1d, 32K L1i, 2M L2 each, one shared 105M L3."""
    for cpu in (0, 1):
        _index(root, cpu, 0, 1, "Data", "48K", str(cpu))
        _index(root, cpu, 1, 1, "Instruction", "32K", str(cpu))
        _index(root, cpu, 2, 2, "Unified", "2048K", str(cpu))
        _index(root, cpu, 3, 3, "Unified", "107520K", "0-1")
    return root


def test_sysfs_cache_sizes(tmp_path: Path) -> None:
    root = _sysfs(tmp_path)
    assert cpu_cache_bytes(2, root=root) == 2 * MiB
    assert cpu_cache_bytes(1, root=root) == 48 * 2**10  # the data cache, not the instruction
    assert last_level_cache_bytes(root=root) == 105 * MiB
    assert cache_instances(2, root=root) == {"0": 2 * MiB, "1": 2 * MiB}
    assert cache_instances(3, root=root) == {"0-1": 105 * MiB}  # shared: counted once
    # nothing there (not Linux, a container hiding sysfs): 0, never an error
    assert last_level_cache_bytes(root=tmp_path / "none") == 0
    assert cpu_cache_bytes(2, cpu=7, root=root) == 0


def _graph(param_mb: tuple[int, ...], call_mb: tuple[tuple[int, frozenset[int]], ...],
           backward: bool = False) -> TracedGraph:
    spec = GemmSpec(m=2, n=8, k=8, dtype=DType.FP32)
    ops = tuple(TracedOp(index=i, aten="aten.mm.default", phase=TracePhase.FORWARD, spec=spec,
                         in_shapes=(), out_shapes=(), dtype="float32", category=Category.GEMM,
                         bytes=mb * MiB, params=reads)
                for i, (mb, reads) in enumerate(call_mb))
    params = tuple(ParamInfo(name=f"w{i}", numel=mb * MiB // 4, dtype="float32", itemsize=4)
                   for i, mb in enumerate(param_mb))
    return TracedGraph(ops=ops, params=params, backward=backward)


def test_working_set_is_parameters_plus_the_largest_activation() -> None:
    # a 10 MiB weight read by a 14 MiB call (4 MiB of activations) and an 8 MiB weightless
    # call (attention scores): 10 + 8
    graph = _graph((10, 2), ((14, frozenset({0})), (8, frozenset()), (3, frozenset({1}))))
    assert working_set_bytes(graph) == (12 + 8) * MiB
    # with a backward the gradients sit beside the parameters
    trained = _graph((10, 2), ((14, frozenset({0})), (8, frozenset())), backward=True)
    assert working_set_bytes(trained) == (2 * 12 + 8) * MiB


def test_the_rule_prices_warm_only_what_fits_the_llc() -> None:
    graph = _graph((10,), ((14, frozenset({0})),))  # 14 MiB
    assert fits_llc(graph, 32 * MiB)
    assert fits_llc(graph, 14 * MiB)
    assert not fits_llc(graph, 13 * MiB)
    assert not fits_llc(graph, 0)  # unknown LLC: cold
    assert not fits_llc(graph, 2**40, CacheRule.COLD)
    assert fits_llc(graph, 0, CacheRule.WARM)


def test_warm_flush_evicts_the_private_l2_only() -> None:
    assert warm_flush_bytes(2 * MiB) == 4 * MiB
    assert warm_flush_bytes(0) == MIN_WARM_FLUSH_BYTES
    assert warm_store_path(Path("/x/cpu-t1.duckdb")) == Path("/x/cpu-t1-llc.duckdb")


@pytest.mark.parametrize("rule", list(CacheRule))
def test_rules_are_strings_the_cli_accepts(rule: CacheRule) -> None:
    assert CacheRule(str(rule)) is rule
