# SPDX-License-Identifier: Apache-2.0
"""The distributed optimizer's collectives go over each buffer's own group (`simulate.dp_sync`)."""

from __future__ import annotations

from typing import Any

from analytical.ops import CollectiveKind
from analytical.parallel import ParallelConfig
from analytical.stage import StageParams
from simulate.dp_sync import grad_bucket_queues, param_gathers
from simulate.engines import Estimate


class _Recorder:
    """Prices every collective at 1 s and keeps the specs asked."""

    def __init__(self) -> None:
        self.specs: list[Any] = []

    def estimate_many(self, ops: Any) -> list[Estimate]:
        self.specs += list(ops)
        return [Estimate(latency_s=1.0, engine="roofline") for _ in ops]


def _stage(dense: float, expert: float) -> StageParams:
    return StageParams(dense=dense, expert=expert, linear=dense + expert, largest_layer=1.0,
                       layer_is_moe=(True,), has_embedding=True, has_lm_head=True)


def test_expert_gather_runs_over_the_expert_shard_group() -> None:
    """EP 8 inside an 8-GPU node, dp 64: the experts' all-gather is 8 ranks, one per node."""
    par = ParallelConfig(dp=64, ep=8, zero=1)
    chain = _Recorder()
    gathers = param_gathers(par, _stage(2e9, 14e9), 8, chain)  # type: ignore[arg-type]
    assert len(gathers) == 2
    dense, expert = chain.specs
    assert (dense.kind, dense.group_size, dense.ranks_per_node) == (CollectiveKind.ALL_GATHER,
                                                                    64, 8)
    assert dense.size_bytes == int(2e9 * 2)
    assert (expert.group_size, expert.ranks_per_node, expert.size_bytes) == (8, 1, int(14e9 * 2))


def test_gathers_follow_the_gradient_queues() -> None:
    """Same groups as the gradient reduction; none without the distributed optimizer, and no
    expert gather where EP spans the whole data-parallel group."""
    par = ParallelConfig(dp=64, ep=8, zero=1)
    grads, gathers = _Recorder(), _Recorder()
    grad_bucket_queues(par, _stage(2e9, 14e9), 8, grads, 4e9, 2.0)  # type: ignore[arg-type]
    param_gathers(par, _stage(2e9, 14e9), 8, gathers)  # type: ignore[arg-type]
    assert ({(s.group_size, s.ranks_per_node) for s in grads.specs}
            == {(s.group_size, s.ranks_per_node) for s in gathers.specs})
    assert param_gathers(ParallelConfig(dp=64, ep=8), _stage(2e9, 14e9), 8,
                         _Recorder()) == []  # type: ignore[arg-type]
    full_ep = _Recorder()
    param_gathers(ParallelConfig(dp=64, ep=64, zero=1), _stage(2e9, 1e9), 64,
                  full_ep)  # type: ignore[arg-type]
    assert [s.group_size for s in full_ep.specs] == [64]
