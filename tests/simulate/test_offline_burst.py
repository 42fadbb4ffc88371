# SPDX-License-Identifier: Apache-2.0
"""What an offline burst measured by `vllm bench serve` means (GPUStack's rows): every request
arrives at t = 0 and the mean TTFT holds the queue; and chunks without a token in a streamed
chat response (engine preset `chat_stream_empty_chunks`): a client that times every chunk
(`--backend openai-chat`) sees one ~0 ms gap more per such chunk, so its mean ITL falls below
TPOT, while TTFT and TPOT stay as they were."""

from __future__ import annotations

import pytest

from simulate.serving.engine_presets import GIB, engine_preset
from simulate.serving.loop import Tenant, run_tenants
from simulate.serving.metrics import summarize_tenant
from simulate.serving.schedulers import SchedulerConfig
from simulate.serving.state import StepShape
from simulate.serving.workload import make_workload
from simulate.validate.serving_corpus import load_corpus, row_scenario

STEP = 1e-3


class ConstantCost:
    def step_time(self, shape: StepShape) -> float:
        return STEP


def _burst(empty_chunks: int, *, output_len: int) -> Tenant:
    wl = make_workload({"process": "burst", "num_requests": 16, "seed": 0}, input_len=16,
                       output_len=output_len)
    tenant = Tenant(name="t", workload=wl, scheduler="chunked_prefill",
                    config=SchedulerConfig(max_batched_tokens=4096, max_num_seqs=256),
                    cost=ConstantCost(), kv_blocks=10_000, kv_bytes_per_token=1.0,
                    empty_chunks=empty_chunks)
    run_tenants([tenant])
    return tenant


@pytest.mark.parametrize(("chunks", "ratio"), [(1, 3 / 4), (2, 3 / 5)])
def test_empty_chunks_lower_mean_itl_by_n_minus_1_over_n_minus_1_plus_k(chunks: int,
                                                                         ratio: float) -> None:
    """4 tokens a request, one 1 ms step each after the prefill: 3 token gaps of 1 ms; with
    the role chunk (vLLM) a 4th gap of 0, with the finish chunk too (SGLang) a 5th."""
    plain = summarize_tenant(_burst(0, output_len=4))
    chat = summarize_tenant(_burst(chunks, output_len=4))
    assert plain.loop.itl_s.mean == pytest.approx(STEP, rel=1e-9)
    assert chat.loop.itl_s.mean == pytest.approx(ratio * STEP, rel=1e-9)
    assert chat.tpot_s.mean == pytest.approx(plain.tpot_s.mean, rel=1e-12)
    assert chat.ttft_s.mean == pytest.approx(plain.ttft_s.mean, rel=1e-12)


def test_engine_presets_and_the_gpustack_rows() -> None:
    """vLLM's chat server streams one role chunk, SGLang's a role and a finish chunk; only rows
    that name the chat endpoint get them (GPUStack's `--backend openai-chat`)."""
    counts = {e: engine_preset(e, memory_bytes=80 * GIB, device="H100").chat_stream_empty_chunks
              for e in ("vllm", "sglang", "trtllm")}
    assert counts == {"vllm": 1, "sglang": 2, "trtllm": 0}
    rows = load_corpus()
    gpustack = [r for r in rows if r.source == "gpustack-performance-lab"]
    assert gpustack and all(row_scenario(r)["serving"].get("endpoint") == "chat"
                            for r in gpustack)
    assert all("endpoint" not in row_scenario(r)["serving"]
               for r in rows if r.source != "gpustack-performance-lab")


def test_a_burst_arrives_at_once_and_its_mean_ttft_holds_the_queue() -> None:
    """`vllm bench serve` without a rate sends every request at t = 0, and its mean TTFT
    averages over all of them, queue included: N prompts of one budget's worth of tokens, one
    1 ms prefill step each, one output token (nothing decodes): request k's first token comes
    after step k + 1, so the mean TTFT is (N + 1) / 2 steps, and the last one's N steps."""
    n = 9
    wl = make_workload({"process": "burst", "num_requests": n, "seed": 0}, input_len=64,
                       output_len=1)
    tenant = Tenant(name="t", workload=wl, scheduler="chunked_prefill",
                    config=SchedulerConfig(max_batched_tokens=64, max_num_seqs=256),
                    cost=ConstantCost(), kv_blocks=10_000, kv_bytes_per_token=1.0)
    run_tenants([tenant])
    assert all(s.req.arrival_s == 0.0 for s in tenant.sequences)
    ttft = summarize_tenant(tenant).ttft_s
    assert ttft.mean == pytest.approx((n + 1) / 2 * STEP, rel=1e-9)
    assert ttft.max == pytest.approx(n * STEP, rel=1e-9)
