# SPDX-License-Identifier: Apache-2.0
"""The API server's serial output path (`simulate.serving.stream`): every token is streamed one
after another on one CPU, beside the engine (vLLM V1, SGLang, trtllm-serve) or inside its
process. Checked against a constant-time step, where the answers are known in closed form, and
the engine presets against the published figures they cite."""

from __future__ import annotations

import pytest

from simulate.serving.engine_presets import GIB, engine_preset, preset_sources
from simulate.serving.loop import Tenant, run_tenants
from simulate.serving.metrics import summarize_tenant
from simulate.serving.schedulers import SchedulerConfig
from simulate.serving.state import StepShape
from simulate.serving.stream import StreamCost
from simulate.serving.workload import make_workload
from simulate.validate.serving_corpus import IN_PROCESS_TOOLS, load_corpus, row_scenario

STEP = 1e-3  # every step costs 1 ms, whatever it holds


class ConstantCost:
    def step_time(self, shape: StepShape) -> float:
        return STEP


def _run(stream: StreamCost, *, clients: int = 8, output_len: int = 50) -> Tenant:
    wl = make_workload({"process": "closed", "concurrency": clients,
                        "num_requests": 4 * clients, "seed": 0}, input_len=16,
                       output_len=output_len)
    tenant = Tenant(name="t", workload=wl, scheduler="chunked_prefill",
                    config=SchedulerConfig(max_batched_tokens=4096, max_num_seqs=256),
                    cost=ConstantCost(), kv_blocks=10_000, kv_bytes_per_token=1.0,
                    host_overlap=True, stream=stream)
    run_tenants([tenant])
    return tenant


def _tokens_per_s(tenant: Tenant) -> float:
    seqs = tenant.sequences
    end = max(s.finish_s or 0.0 for s in seqs)
    return sum(s.req.output_len for s in seqs) / end


def test_no_stream_cost_is_the_engine_alone() -> None:
    """8 clients, one token each per 1 ms step: 8,000 tokens/s, TPOT one step."""
    tenant = _run(StreamCost())
    assert _tokens_per_s(tenant) == pytest.approx(8 / STEP, rel=0.05)
    assert summarize_tenant(tenant).tpot_s.mean == pytest.approx(STEP, rel=1e-6)


def test_a_server_slower_than_the_engine_caps_the_token_rate() -> None:
    """0.5 ms a token on one CPU: 8 tokens per 1 ms step take 4 ms to stream, so the clients
    get 2,000 tokens/s and a token every ~4 ms (fewer while a client waits to resend), while
    the engine (its own process) runs ahead."""
    tenant = _run(StreamCost(per_token_s=5e-4))
    assert _tokens_per_s(tenant) == pytest.approx(1 / 5e-4, rel=0.05)
    assert 3 * STEP < summarize_tenant(tenant).tpot_s.mean <= 8 * 5e-4 * 1.01
    assert tenant.busy_s < 0.5 * max(s.finish_s or 0.0 for s in tenant.sequences)


def test_a_server_faster_than_the_engine_only_delays_each_token() -> None:
    """0.05 ms a token: 8 tokens take 0.4 ms of a 1 ms step, so the rate is the engine's and a
    client sees its first token after its step plus its place in the step's output (a client
    that now resends mid-step waits for the running step and the one formed with it)."""
    base, fast = _run(StreamCost()), _run(StreamCost(per_token_s=5e-5))
    assert _tokens_per_s(fast) == pytest.approx(_tokens_per_s(base), rel=0.05)
    def ttfts(tenant: Tenant) -> list[float]:
        return [(s.first_token_s or 0.0) - s.req.arrival_s for s in tenant.sequences]

    assert min(ttfts(fast)) >= min(ttfts(base)) + 5e-5 - 1e-12
    assert max(ttfts(fast)) <= max(ttfts(base)) + 8 * 5e-5 + 2 * STEP


def test_a_server_in_the_engine_process_stalls_the_engine() -> None:
    """The same 0.5 ms a token inside the engine's process: each step waits for its 8 tokens
    (1 + 4 ms), so the engine itself slows to 8 tokens per 5 ms."""
    tenant = _run(StreamCost(per_token_s=5e-4, separate_process=False))
    assert _tokens_per_s(tenant) == pytest.approx(8 / (STEP + 8 * 5e-4), rel=0.05)
    assert tenant.busy_s == pytest.approx(max(s.finish_s or 0.0 for s in tenant.sequences),
                                          rel=0.05)


def test_closed_loop_clients_resend_when_their_last_token_arrives() -> None:
    """A client's next request is sent when its previous response ended at the client."""
    tenant = _run(StreamCost(per_token_s=5e-4), clients=2, output_len=5)
    finishes = sorted(s.finish_s for s in tenant.sequences if s.finish_s is not None)
    later = sorted(s.req.arrival_s for s in tenant.sequences[2:])
    assert later == pytest.approx(finishes[:len(later)])


def test_vllm_preset_leaves_out_the_bound_it_cites() -> None:
    """vLLM PR #12287 "Before": 1,211,959 tokens streamed in 94.31 s, less the tokenizer's
    1,350,511 prompt tokens at the preset's 1.34 us each, is 76.3 us a token: a rate cap of
    13,100 tokens/s, below the 16,542 tokens/s the YAML cites for one server of this version,
    so the preset leaves it out (0) and says so."""
    preset = engine_preset("vllm", memory_bytes=80 * GIB, device="H100 SXM")
    bound = (94.31 - 1_350_511 * preset.tokenize_s_per_token) / 1_211_959
    source = preset_sources("vllm")["stream_token_us"]
    assert f"{bound * 1e6:.1f} us" in source and "#12287" in source
    assert 1 / bound < 16_542
    assert preset.stream_token_s == 0.0
    assert preset.api_server_process


def test_sglang_and_trtllm_presets() -> None:
    """SGLang: sglang PR #9970, one detokenizer, 5,122,821 tokens in 133.01 s. trtllm-serve:
    nothing published, so no cost."""
    sgl = engine_preset("sglang", memory_bytes=80 * GIB, device="H100 SXM")
    assert sgl.stream_token_s == pytest.approx(133.01 / 5_122_821, rel=2e-3)
    assert "#9970" in preset_sources("sglang")["stream_token_us"]
    trt = engine_preset("trtllm", memory_bytes=80 * GIB, device="H100 SXM")
    assert trt.stream_token_s == 0.0
    assert all(p.api_server_process for p in (sgl, trt))


def test_in_process_clients_stream_nothing() -> None:
    """`vllm bench latency` and `trtllm-bench` call the engine in their own process: no API
    server streams their tokens."""
    rows = [r for r in load_corpus() if r.tool in IN_PROCESS_TOOLS]
    assert rows
    assert all(row_scenario(r)["serving"]["stream_token_us"] == 0.0 for r in rows)
    served = next(r for r in load_corpus() if r.tool not in IN_PROCESS_TOOLS)
    assert "stream_token_us" not in row_scenario(served)["serving"]  # the preset applies


def test_requests_taken_in_one_at_a_time_behind_the_streamed_tokens() -> None:
    """A burst of three requests on a server that takes 2 ms each: they reach the scheduler
    2, 4 and 6 ms after they were sent."""
    wl = make_workload({"process": "burst", "num_requests": 3, "seed": 0}, input_len=16,
                       output_len=2)
    tenant = Tenant(name="t", workload=wl, scheduler="chunked_prefill",
                    config=SchedulerConfig(max_batched_tokens=4096), cost=ConstantCost(),
                    kv_blocks=1000, kv_bytes_per_token=1.0,
                    stream=StreamCost(per_request_s=2e-3))
    run_tenants([tenant])
    assert sorted(s.ready_s for s in tenant.sequences) == pytest.approx([2e-3, 4e-3, 6e-3])


def test_intake_waits_for_the_stream_only_in_the_same_process() -> None:
    """vLLM's API server takes requests in on the event loop that streams tokens, so a request
    sent while 8 tokens of 0.5 ms are queued waits for them; SGLang's DetokenizerManager is
    another process."""
    from simulate.serving.stream import intake

    shared, apart = StreamCost(per_token_s=5e-4), StreamCost(per_token_s=5e-4,
                                                             shared_intake=False)
    assert intake(shared, 1.0, 1.004) == pytest.approx((1.004, 1.004))
    assert intake(apart, 1.0, 1.004) == pytest.approx((1.0, 1.004))
    assert intake(StreamCost(), 1.0, 1.004) == (1.0, 1.004)
    vllm = engine_preset("vllm", memory_bytes=80 * GIB, device="H100 SXM")
    sgl = engine_preset("sglang", memory_bytes=80 * GIB, device="H100 SXM")
    assert vllm.stream_shares_intake and not sgl.stream_shares_intake
    assert sgl.api_request_s == 0.0  # nothing published for SGLang's server


def test_vllm_intake_is_the_published_request_rate_of_its_server() -> None:
    """dphnAI/sonar PR #1359 (a vLLM fork's FastAPI/uvicorn OpenAI server): 1,000 /v1/tokenize
    requests, 100 in flight, 420.87 requests/s on one server. The preset takes that per-request
    time as the serial intake, and the one-client front-end time (tt-inference-server #340,
    TTFT - TPOT = 8.65 ms) net of it, so a lone request's TTFT keeps the published 8.65 ms."""
    vllm = engine_preset("vllm", memory_bytes=80 * GIB, device="H100 SXM")
    assert vllm.api_request_s == pytest.approx(1 / 420.87, rel=1e-3)
    assert vllm.api_request_s + vllm.frontend_s == pytest.approx(8.65e-3, rel=1e-3)
    source = preset_sources("vllm")["api_request_us"]
    assert "#1359" in source and "420.87" in source
    a100 = engine_preset("vllm", memory_bytes=80 * GIB, device="A100 SXM")
    assert a100.api_request_s == vllm.api_request_s  # a host cost, not a GPU one


def test_a_first_wave_is_taken_in_one_request_at_a_time() -> None:
    """C clients sending together at 2.376 ms of intake each: the last of the first wave reaches
    the engine (C - 1) x 2.376 ms after the first, so the wave's TTFT spread grows linearly with
    C (silybench's 128/128 TTFT p95 of 155 / 331 / 732 / 1,345 ms at 64 / 128 / 256 / 512
    clients is 2.4-2.9 ms a client); with no intake cost they arrive together."""
    cost = 2.376e-3
    spread = {}
    for clients in (16, 64):
        tenant = _run(StreamCost(per_request_s=cost), clients=clients, output_len=4)
        first = sorted(tenant.sequences, key=lambda s: s.req.arrival_s)[:clients]
        ready = [s.ready_s or 0.0 for s in first]
        spread[clients] = max(ready) - min(ready)
    assert spread[16] == pytest.approx(15 * cost, rel=1e-6)
    assert spread[64] == pytest.approx(63 * cost, rel=1e-6)
    idle = _run(StreamCost(), clients=16, output_len=4)
    assert len({s.ready_s for s in idle.sequences[:16]}) == 1
