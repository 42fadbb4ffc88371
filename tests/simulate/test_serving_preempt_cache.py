# SPDX-License-Identifier: Apache-2.0
"""Preemption under KV pressure (issue 22): with prefix caching on, a request preempted in the
middle of its prefill keeps its computed blocks in the free pool and resumes from them (vLLM V1's
free-block queue), so a long decode beside it does not make it recompute its prompt every step;
blocks the pool needs in between are taken from the oldest cached ones first."""

from __future__ import annotations

import pytest

from simulate.serving.kv_cache import BlockPool
from simulate.serving.loop import Tenant, run_tenants
from simulate.serving.schedulers import SchedulerConfig, SchedulerState
from simulate.serving.state import Batch, Sequence, StepShape
from simulate.serving.workload import Request, Workload


class _LinearCost:
    def step_time(self, shape: StepShape) -> float:
        return 1e-3 + 1e-6 * shape.tokens


def _run(prefix_caching: bool) -> tuple[int, int]:
    """A long request decoding in a nearly full pool and a second prompt that only fits in
    pieces: (prefill tokens computed, preemptions)."""
    reqs = (Request(id=0, arrival_s=0.0, input_len=1400, output_len=300),
            Request(id=1, arrival_s=0.0, input_len=1200, output_len=4))
    config = SchedulerConfig(max_batched_tokens=256, block_size=16,
                             prefix_caching=prefix_caching)
    tenant = Tenant(name="t", workload=Workload(requests=reqs), scheduler="chunked_prefill",
                    config=config, cost=_LinearCost(), kv_blocks=120, kv_bytes_per_token=1.0)
    steps = run_tenants([tenant], record_steps=True)
    assert tenant.state is not None
    return sum(s.prefill_tokens for s in steps), tenant.state.preemptions


def test_preempted_prefill_resumes_from_its_cached_blocks() -> None:
    without, preempted = _run(False)
    with_cache, preempted_cached = _run(True)
    # without reuse the second prompt is re-admitted, preempted and recomputed step after step
    assert preempted > 10 and without > 2 * 2600
    # with it, it waits with its blocks cached; what it recomputes is what the first request's
    # growth (1400 -> 1700 tokens: 19 blocks) evicted from the cache meanwhile
    assert 1 <= preempted_cached < preempted
    assert 2600 < with_cache <= 2600 + 16 * 20


def test_eviction_takes_the_oldest_cached_tail_first() -> None:
    state = SchedulerState(BlockPool(10, 4), SchedulerConfig(block_size=4, prefix_caching=True))
    old, new = (Sequence(Request(id=i, arrival_s=0.0, input_len=16, output_len=2))
                for i in range(2))
    for seq in (old, new):
        seq.prefilled = 0
        assert state.grow(seq, 12)  # 3 blocks each
        seq.prefilled = 12
        state.running.append(seq)
    state.preempt_last(batch=Batch())  # `new` first: it was admitted last
    state.preempt_last(batch=Batch())
    assert state.cached == {new: 3, old: 3} and state.pool.free == 10
    hog = Sequence(Request(id=2, arrival_s=0.0, input_len=32, output_len=2))
    assert state.grow(hog, 24)  # 6 blocks: 4 spare, then 2 of `new`'s (freed first)
    assert state.cached == {new: 1, old: 3}
    assert state.cache_hit(new) == 4 and state.cache_hit(old) == 12


@pytest.mark.parametrize("caching", [False, True])
def test_every_request_finishes(caching: bool) -> None:
    tokens, _ = _run(caching)
    assert tokens >= 2600
