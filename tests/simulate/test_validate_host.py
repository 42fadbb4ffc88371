# SPDX-License-Identifier: Apache-2.0
"""The host term of the CPU validation loop: what it counts, and the probes that measure it."""

from __future__ import annotations

import math

import pytest

from analytical.dtypes import DType
from analytical.ops import GemmSpec, MemoryBoundSpec, MemoryOpKind
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracedGraph, TracedOp, TracePhase
from simulate.validate.host import (
    PROBE_MODELS,
    HostGap,
    host_calls,
    measure_host_gap,
)
from simulate.validate.models import VALIDATION_MODELS, trace_validation_model

GEMM = GemmSpec(m=2, n=8, k=8, dtype=DType.FP32)
COPY = MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=2, cols=8, dtype=DType.FP32)


def _op(index: int, spec, category: Category, phase: TracePhase = TracePhase.FORWARD):
    return TracedOp(index=index, aten="aten.x", phase=phase, spec=spec, in_shapes=(),
                    out_shapes=(), dtype="float32", category=category)


def test_seconds_adds_the_host_work_of_every_python_issued_call() -> None:
    graph = TracedGraph(ops=(
        _op(0, GEMM, Category.GEMM), _op(1, None, Category.VIEW),
        _op(2, COPY, Category.UNKNOWN), _op(3, COPY, Category.MEMORY),
        _op(4, GEMM, Category.GEMM, TracePhase.BACKWARD)), params=(), backward=True)
    # Python issues the 4 forward calls (the view and the unknown included); the backward
    # call is issued by the autograd engine
    assert host_calls(graph) == 4
    assert HostGap(per_call_s=5e-6).seconds(graph) == pytest.approx(4 * 5e-6)
    assert HostGap(per_call_s=0.0).seconds(graph) == 0.0


def test_probes_are_other_architectures_than_the_validated_ones() -> None:
    validated = {m.config["model_type"] for m in VALIDATION_MODELS.values()}
    assert PROBE_MODELS and not set(PROBE_MODELS) & set(VALIDATION_MODELS)
    assert not {p.config["model_type"] for p in PROBE_MODELS.values()} & validated


def test_a_probe_with_an_unknown_call_is_left_out() -> None:
    graph = TracedGraph(ops=(_op(0, GEMM, Category.GEMM), _op(1, COPY, Category.UNKNOWN)),
                        params=(), backward=False)
    gap = measure_host_gap({"gpt-neox-probe": graph}, threads=1, repeats=1)
    assert gap.probes == {} and gap.per_call_s == 0.0


def test_measure_host_gap_on_one_probe() -> None:
    name = "gpt-neox-probe"
    traced = trace_validation_model(PROBE_MODELS[name], "generate")
    gap = measure_host_gap({name: traced}, threads=1, warmup=1, repeats=3)
    probe = gap.probes[name]
    costed = sum(1 for op in traced.ops if op.spec is not None)
    assert probe["calls"] == host_calls(traced) == len(traced.ops) > costed > 0
    # a narrow probe: its operators are nearly free, most of its generate is host work
    assert 0.0 < probe["warm_ops_ms"] < probe["measured_ms"]
    assert math.isfinite(probe["per_call_us"]) and probe["per_call_us"] > 0.0
    assert gap.per_call_s == pytest.approx(probe["per_call_us"] * 1e-6)  # one probe: its figure
    assert gap.per_call_s == pytest.approx(
        max(0.0, probe["measured_ms"] - probe["warm_ops_ms"]) / probe["calls"] * 1e-3)
