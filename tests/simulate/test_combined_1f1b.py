# SPDX-License-Identifier: Apache-2.0
"""The combined 1F1B of the EP a2a overlap (`simulate.schedule`, ``combined``): one more warm-up
forward, and each steady step's forward and backward merged, waiting for both inputs."""

from __future__ import annotations

import pytest

from analytical.layer_spec import Stream
from analytical.parallel import Schedule
from simulate.schedule import BWD, FWD, simulate_pipeline, stage_order


def _run(pp: int, vpp: int, m: int, p2p_s: float, *, combined: bool, record: bool = False):
    f, b = 1.0 / vpp, 2.0 / vpp
    return simulate_pipeline(schedule=Schedule.INTERLEAVED if vpp > 1 else Schedule.ONE_F_ONE_B,
                             pp=pp, vpp=vpp, num_microbatches=m, fwd_s=[[f] * vpp] * pp,
                             bwd_s=[[b] * vpp] * pp, p2p_s=p2p_s, record=record,
                             combined=combined)


def test_one_more_warmup_forward():
    """Megatron-Core ``get_pp_rank_microbatches``: + 1 with ``overlap_moe_expert_parallel_comm``."""
    def warmup(order):
        return next(i for i, task in enumerate(order) if task[0] == BWD) - 1
    for stage in range(4):
        plain = stage_order(Schedule.INTERLEAVED, stage, 4, 2, 8)
        combined = stage_order(Schedule.INTERLEAVED, stage, 4, 2, 8, combined=True)
        assert warmup(combined) == warmup(plain) + 1
        assert sorted(plain) == sorted(combined)


@pytest.mark.parametrize(("pp", "vpp", "m"), [(2, 12, 16), (8, 4, 16), (4, 2, 8)])
def test_merged_steps_wait_for_both_inputs(pp, vpp, m):
    """Without transfer time the merged steps cost nothing more; with it, each stage waits for
    its neighbours' whole merged step, so the step is longer."""
    assert _run(pp, vpp, m, 0.0, combined=True).span_s == pytest.approx(
        _run(pp, vpp, m, 0.0, combined=False).span_s, rel=1e-12)
    p2p = 0.05 / vpp
    slow, fast = _run(pp, vpp, m, p2p, combined=True), _run(pp, vpp, m, p2p, combined=False)
    assert slow.span_s > fast.span_s * 1.005
    assert slow.stage_busy_s == pytest.approx(fast.stage_busy_s)


def test_merged_pair_runs_back_to_back():
    """In the steady state a forward's record ends where its paired backward's begins."""
    r = _run(2, 4, 8, 0.01, combined=True, record=True)
    stage0 = [x for x in r.records if x.stage == 0 and x.stream == Stream.COMPUTE]
    order = stage_order(Schedule.INTERLEAVED, 0, 2, 4, 8, combined=True)
    first_bwd = next(i for i, task in enumerate(order) if task[0] == BWD)
    f, b = stage0[first_bwd - 1], stage0[first_bwd]
    assert f.name.startswith("F") and b.name.startswith("B")
    assert b.start_s == f.end_s


def test_no_interleaving_no_change():
    """The combined order applies to the interleaved schedule only (what the code sets here)."""
    assert _run(4, 1, 8, 0.05, combined=True).span_s == _run(4, 1, 8, 0.05, combined=False).span_s
    assert stage_order(Schedule.ONE_F_ONE_B, 0, 4, 1, 8, combined=True)[0][0] == FWD


def test_all_in_warmup_merges_nothing():
    """pp 8, vpp 4, m 8: stage 0's warm-up, 14 + 24 + 1 chunks, covers all 32, so Megatron-Core's
    steady loop runs no merged step; the last forward and first backward run apart (the
    backward starts when its gradient arrives, not with the forward)."""
    from simulate.schedule import _steady_forwards

    assert _steady_forwards(stage_order(Schedule.INTERLEAVED, 0, 8, 4, 8, combined=True)) == \
        frozenset()
    assert _steady_forwards(stage_order(Schedule.INTERLEAVED, 7, 8, 4, 8, combined=True))
    assert _run(8, 4, 8, 0.0, combined=True).span_s == pytest.approx(
        _run(8, 4, 8, 0.0, combined=False).span_s, rel=1e-12)
