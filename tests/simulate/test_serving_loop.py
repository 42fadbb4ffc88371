# SPDX-License-Identifier: Apache-2.0
"""The serving loop against a linear step-cost model, where answers are known in closed form."""

from __future__ import annotations

import numpy as np
import pytest

from analytical.errors import InfeasibleError, SpecError
from simulate.serving.loop import Speculation, Tenant, run_tenants
from simulate.serving.metrics import ServingMetrics, summarize_tenant
from simulate.serving.schedulers import SchedulerConfig
from simulate.serving.state import StepShape
from simulate.serving.workload import Request, Workload, make_workload


class LinearCost:
    """step = a + b * tokens + c * kv tokens read by decodes."""

    def __init__(self, a: float, b: float, c: float = 0.0) -> None:
        self.a, self.b, self.c = a, b, c
        self.shapes: list[StepShape] = []

    def step_time(self, shape: StepShape) -> float:
        self.shapes.append(shape)
        return self.a + self.b * shape.tokens + self.c * shape.decode_kv


def _tenant(workload: Workload, *, scheduler: str = "continuous", blocks: int = 10_000,
            cost: LinearCost | None = None, **cfg) -> Tenant:
    return Tenant(name="t", workload=workload, scheduler=scheduler,
                  config=SchedulerConfig(**cfg), cost=cost or LinearCost(0.01, 1e-4, 1e-7),
                  kv_blocks=blocks, kv_bytes_per_token=1e5)


def test_ttft_at_low_qps_equals_prefill_time() -> None:
    wl = make_workload({"process": "poisson", "qps": 1e-3, "num_requests": 5, "seed": 0},
                       input_len=512, output_len=8)
    tenant = _tenant(wl, cost=LinearCost(0.01, 1e-4))
    run_tenants([tenant])
    metrics = summarize_tenant(tenant)
    assert metrics.ttft_s.max == pytest.approx(0.01 + 512e-4, rel=1e-9)
    # each decode step: a + b*1 (one sequence in the batch)
    assert metrics.tpot_s.mean == pytest.approx(0.01 + 1e-4, rel=1e-9)


def test_chunked_prefill_respects_token_budget_and_mixes_decodes() -> None:
    wl = make_workload({"process": "poisson", "qps": 20, "num_requests": 200, "seed": 3},
                       input_len={"dist": "uniform", "min": 100, "max": 3000}, output_len=64)
    cost = LinearCost(0.005, 5e-5)
    tenant = _tenant(wl, scheduler="chunked_prefill", cost=cost, max_batched_tokens=512)
    run_tenants([tenant])
    assert max(s.tokens for s in cost.shapes) <= 512
    assert any(s.prefill_chunks and s.decode_seqs for s in cost.shapes)
    assert all(seq.finish_s is not None for seq in tenant.sequences)


def test_same_seed_same_result_and_different_seed_differs() -> None:
    def once(seed: int) -> ServingMetrics:
        wl = make_workload({"process": "poisson", "qps": 5, "num_requests": 300, "seed": seed},
                           input_len={"dist": "lognormal", "mean": 400}, output_len=100)
        tenant = _tenant(wl)
        run_tenants([tenant])
        return summarize_tenant(tenant)

    assert once(1) == once(1)
    assert once(1).ttft_s != once(2).ttft_s


def test_small_kv_cache_preempts_and_still_finishes_everything() -> None:
    wl = make_workload({"process": "burst", "num_requests": 40, "seed": 0}, input_len=200,
                       output_len=300)
    tenant = _tenant(wl, blocks=200, block_size=16)  # 3200 tokens: ~6 requests' worth
    run_tenants([tenant])
    metrics = summarize_tenant(tenant)
    assert metrics.preemptions > 0
    assert metrics.loop.kv_cache.peak_utilisation <= 1.0
    assert all(seq.generated == 300 for seq in tenant.sequences)
    assert tenant.state.pool.used == 0  # everything released


def test_request_larger_than_cache_is_infeasible() -> None:
    wl = Workload(requests=(Request(id=0, arrival_s=0, input_len=5000, output_len=4),))
    with pytest.raises(InfeasibleError, match="KV tokens"):
        run_tenants([_tenant(wl, blocks=100, block_size=16)])


def test_static_batching_admits_nothing_mid_batch() -> None:
    reqs = tuple(Request(id=i, arrival_s=0.0, input_len=100, output_len=50 + 50 * (i % 2))
                 for i in range(8))
    tenant = _tenant(Workload(requests=reqs), scheduler="static", max_num_seqs=4)
    run_tenants([tenant])
    first_batch = [s for s in tenant.sequences if s.req.id < 4]
    later = [s for s in tenant.sequences if s.req.id >= 4]
    assert min(s.first_token_s for s in later) >= max(s.finish_s for s in first_batch)


def test_speculative_decoding_mean_tokens_per_step() -> None:
    k, a = 4, 0.8
    spec = Speculation(k=k, acceptance=a, draft_cost=LinearCost(0.001, 0.0), seed=7)
    assert spec.expected_tokens == pytest.approx((1 - a ** (k + 1)) / (1 - a))
    wl = Workload(requests=(Request(id=0, arrival_s=0, input_len=64, output_len=20001),))
    tenant = _tenant(wl, cost=LinearCost(0.01, 0.0), decode_q=k + 1)
    tenant.speculation = spec
    run_tenants([tenant])
    decode_steps = tenant.steps - 1
    assert 20000 / decode_steps == pytest.approx(spec.expected_tokens, rel=0.02)


def test_closed_loop_keeps_concurrency() -> None:
    wl = make_workload({"process": "closed", "concurrency": 4, "num_requests": 40, "seed": 0},
                       input_len=128, output_len=16)
    cost = LinearCost(0.01, 0.0)
    run_tenants([_tenant(wl, cost=cost)])
    assert max(s.decode_seqs for s in cost.shapes) == 4


def test_two_tenants_time_share_the_gpu() -> None:
    def wl() -> Workload:
        return make_workload({"process": "burst", "num_requests": 10, "seed": 0},
                             input_len=100, output_len=100)

    alone = _tenant(wl())
    run_tenants([alone])
    a, b = _tenant(wl()), _tenant(wl())
    run_tenants([a, b])
    # two identical tenants sharing one GPU each take about twice as long
    ratio = summarize_tenant(a).duration_s / summarize_tenant(alone).duration_s
    assert ratio == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize(("arrival", "field"), [
    ({"process": "poisson", "num_requests": 10}, "qps"),
    ({"process": "poisson", "qps": 1, "num_requests": 0}, "num_requests"),
    ({"process": "weird", "num_requests": 3}, "process"),
])
def test_bad_arrival_names_field(arrival: dict, field: str) -> None:
    with pytest.raises(SpecError, match=field):
        make_workload(arrival, input_len=10, output_len=10)


def test_trace_file(tmp_path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,input_len,output_len\n0.5,100,10\n0.0,50,5\n")
    wl = make_workload({"trace": str(path)}, input_len=1, output_len=1)
    assert [r.input_len for r in wl.requests] == [50, 100]
    bad = tmp_path / "bad.csv"
    bad.write_text("arrival_s,input_len\n0,1\n")
    with pytest.raises(SpecError, match="missing columns"):
        make_workload({"trace": str(bad)}, input_len=1, output_len=1)
    assert np.isclose(wl.requests[1].arrival_s, 0.5)


def test_ttft_parts_split_front_end_queue_and_prefill() -> None:
    """Two requests at t=0 under the whole-prompt scheduler with a 1-prompt budget: the second
    waits for the first one's prefill step, and the parts add up to each TTFT."""
    from simulate.serving.metrics import latency_arrays, ttft_parts

    wl = make_workload({"process": "burst", "num_requests": 2, "seed": 0}, input_len=100,
                       output_len=1)
    tenant = _tenant(wl, cost=LinearCost(0.01, 1e-4), max_batched_tokens=100)
    tenant.frontend_s = 0.002
    run_tenants([tenant])
    arr = latency_arrays(tenant.sequences)
    step = 0.01 + 100e-4
    parts = ttft_parts(arr)
    assert parts["frontend"] == pytest.approx(0.002)
    assert parts["queue"] == pytest.approx(step / 2)  # 0 for the first, one step for the second
    assert parts["prefill"] == pytest.approx(step)
    assert sum(parts.values()) == pytest.approx(float(arr["ttft"].mean()))
    assert ttft_parts(arr, warmup=1)["queue"] == pytest.approx(step)


def test_serial_tokenizer_spaces_a_burst_by_prompt_length() -> None:
    """The API server tokenizes one prompt at a time: the k-th of a burst reaches the scheduler
    after k prompts' tokenization plus the front-end time."""
    wl = make_workload({"process": "burst", "num_requests": 3, "seed": 0}, input_len=1000,
                       output_len=2)
    tenant = _tenant(wl)
    tenant.frontend_s, tenant.tokenize_s_per_token = 0.005, 1e-6
    run_tenants([tenant])
    ready = sorted(s.ready_s for s in tenant.sequences)
    assert ready == pytest.approx([0.006, 0.007, 0.008])


def _closed_ttfts(tokenize_s_per_token: float) -> np.ndarray:
    wl = make_workload({"process": "closed", "concurrency": 4, "num_requests": 40, "seed": 0},
                       input_len=128, output_len=16)
    tenant = _tenant(wl, scheduler="chunked_prefill", cost=LinearCost(0.005, 1e-5))
    tenant.host_overlap, tenant.frontend_s = True, 0.008
    tenant.tokenize_s_per_token = tokenize_s_per_token
    run_tenants([tenant])
    return np.array([s.first_token_s - s.req.arrival_s for s in tenant.sequences[4:]])


def test_serial_front_end_desynchronises_closed_loop_clients() -> None:
    """Without a serial stage, clients that start together stay in lockstep (every request
    reaches an idle engine with the others: one TTFT for all); handed over one at a time, the
    first starts a step alone, the rest join later steps, and later requests arrive while
    others decode, so they wait for running steps (larger, varied TTFTs)."""
    lockstep, serial = _closed_ttfts(0.0), _closed_ttfts(1e-6)
    assert np.ptp(lockstep) == pytest.approx(0.0, abs=1e-12)
    assert np.ptp(serial) > 0.004  # at least most of a decode step apart
    assert serial.mean() > lockstep.mean()
