# SPDX-License-Identifier: Apache-2.0
"""Dynamic SP: hand-computed cases with a closed-form time model, and the Llama-3-70B case."""

from __future__ import annotations

import pytest

from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import EngineChain
from simulate.search.dynamic_sp import (
    compare_sp,
    model_time_fn,
    plan_dynamic_sp,
    plan_fixed_sp,
    ring_attention_time,
)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def _linear(s: int, d: int) -> float:
    return s / d + 0.25 * (d - 1)  # perfect split plus a fixed cost per extra rank


def test_hand_computed_case():
    # 8 GPUs, lengths [8, 1, 1, 1, 1]. Fixed d=4: two groups; LPT puts 8 (2.75) on one and the
    # ones (1.0 each) fill: loads 2.75+1 = 3.75 and 3.0 -> 3.75 (d=1: 8, d=2: 4.25, d=8: 10.25).
    # Dynamic: 8 on a group of 4 (2.75), the ones in two groups of 2 (0.75 each, two per group:
    # 1.5) -> 2.75.
    lengths = [8, 1, 1, 1, 1]
    degree, fixed = plan_fixed_sp(lengths, 8, _linear)
    assert degree == 4 and fixed.latency_s == pytest.approx(3.75)
    dynamic = plan_dynamic_sp(lengths, 8, _linear)
    assert dynamic.latency_s == pytest.approx(2.75)
    assert dynamic.degree_per_request(5)[0] == 4


def test_equal_sequences_dynamic_equals_fixed():
    lengths = [4] * 8
    _, fixed = plan_fixed_sp(lengths, 8, _linear)
    assert plan_dynamic_sp(lengths, 8, _linear).latency_s == pytest.approx(fixed.latency_s)
    assert fixed.latency_s == pytest.approx(4.0)  # d=1, one sequence per GPU


def test_ring_time_closed_form():
    assert ring_attention_time(16.0, 0.0, 4) == pytest.approx(4.0)  # pure split: C/d
    assert ring_attention_time(16.0, 2.0, 4) == pytest.approx(1.0 + 3 * 2.0)  # comm-bound hops
    assert ring_attention_time(5.0, 1.0, 1) == pytest.approx(5.0)


def test_llama3_70b_case_saves_time():
    hw = get_hardware("h100-sxm")
    chain = EngineChain(hw, use_store=False, use_predictors=False)
    fn = model_time_fn(load_model("llama-3-70b"),
                       lambda ops: [e.latency_s for e in chain.estimate_many(ops)],
                       gpus_per_node=8)
    out = compare_sp([131072, 32768] + [4096] * 24, 16, fn)
    assert out["dynamic"]["latency_s"] <= out["fixed"]["latency_s"]
    assert out["saving"] > 0.05
    assert out["dynamic"]["degree_per_request"][0] > out["dynamic"]["degree_per_request"][-1]
