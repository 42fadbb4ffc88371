# SPDX-License-Identifier: Apache-2.0
"""`scripts/moe_breakdown.py`: operator kinds by node name and per-stage sums of a trace."""

from __future__ import annotations

import pytest
from script_loader import load_script

moe_breakdown = load_script("moe_breakdown")


@pytest.mark.parametrize(("name", "kind"), [
    ("experts.up_gate", "expert_gemm"), ("experts.up_gate.wgrad", "expert_gemm"),
    ("experts.down.dgrad", "expert_gemm"), ("experts.up", "expert_gemm"),
    ("experts.down_bias", "elementwise"), ("experts.act_clamp.bwd", "elementwise"),
    ("experts.act", "elementwise"), ("attention.bwd", "attention"),
    ("qkv_proj.dgrad", "dense_gemm"), ("router", "dense_gemm"), ("lm_head.wgrad", "dense_gemm"),
    ("dispatch.sort_chunks", "permute"), ("combine.bwd", "permute"),
    ("mlp_norm.bwd", "elementwise"), ("recompute.experts.act", "recompute"),
])
def test_op_kind(name, kind):
    assert moe_breakdown.op_kind(name) == kind


def _meta(pid, tid, name):
    return {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _event(pid, tid, name, dur_us):
    return {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": 0, "dur": dur_us}


def test_stage_seconds_sums_one_stage_by_kind_and_skips_the_pass_track():
    trace = {"traceEvents": [
        _meta(0, 0, "compute"), _meta(0, 1, "ops"), _meta(0, 2, "ep"),
        _meta(1, 1, "ops"),
        _event(0, 0, "F0", 9e6),  # a whole pass: already the sum of its operators
        _event(0, 1, "experts.up_gate", 2e6), _event(0, 1, "experts.down.wgrad", 1e6),
        _event(0, 1, "attention", 5e5), _event(0, 2, "ep_all_to_all", 3e5),
        _event(1, 1, "attention", 7e6),  # another stage
    ]}
    got = moe_breakdown.stage_seconds(trace, 0)
    assert got == pytest.approx({"expert_gemm": 3.0, "attention": 0.5, "ep": 0.3})
    assert moe_breakdown.stage_seconds(trace, 1) == pytest.approx({"attention": 7.0})
