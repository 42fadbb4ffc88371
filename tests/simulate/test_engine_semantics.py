# SPDX-License-Identifier: Apache-2.0
"""Engine semantics beyond batch sizes: what KV dtype "auto" picks, and how each engine
quantizes an fp8 linear layer's input, whether a step's host work overlaps the GPU step
(datasets/engines/*.yaml `fp8_activation_quant`, `host_overlap`)."""

from __future__ import annotations

import dataclasses

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.inference_memory import kv_cache_bytes, weight_bytes
from analytical.model import load_model
from analytical.ops import GemmSpec, MemoryBoundSpec, MemoryOpKind
from simulate.inference.layer_ops import inference_sharding, step_ops
from simulate.serving.engine_presets import ActQuant, engine_preset
from simulate.serving.loop import Tenant, run_tenants
from simulate.serving.schedulers import SchedulerConfig
from simulate.serving.workload import Request, Workload
from simulate.validate.serving_corpus import ServingRow, load_corpus, row_scenario


def test_auto_kv_dtype_follows_the_checkpoint_declaration_else_the_activations() -> None:
    # vLLM resolve_kv_cache_dtype_string and TensorRT-LLM ModelLoader._update_from_hf_quant_config
    # take "auto" from hf_quant_config.json kv_cache_quant_algo; without one, the activation
    # dtype (bf16) even for fp8 weights (--quantization fp8, or a linear-only ModelOpt export).
    rows = load_corpus()
    nim = next(r for r in rows if r.source == "nim-benchmarking")
    assert nim.weight_dtype == "fp8" and nim.checkpoint_kv_dtype == "fp8"
    undeclared = dataclasses.replace(nim, checkpoint_kv_dtype="")
    assert row_scenario(undeclared)["inference"]["kv_cache_dtype"] == "bf16"
    declared = dataclasses.replace(undeclared, checkpoint_kv_dtype="fp8")
    assert row_scenario(declared)["inference"]["kv_cache_dtype"] == "fp8"
    forced = dataclasses.replace(declared, kv_dtype="bf16")  # --kv-cache-dtype wins
    assert row_scenario(forced)["inference"]["kv_cache_dtype"] == "bf16"


def test_nim_saturation_needs_an_fp8_kv_cache() -> None:
    # At 100-250 clients the NIM page's output rate saturates (920 tok/s at ITL 93 ms): by
    # Little's law rate x ITL requests decode at once, each holding at least its prompt's KV.
    # With a bf16 KV that exceeds an H100's memory besides the fp8 weights; with fp8 it fits.
    rows = [r for r in load_corpus() if r.source == "nim-benchmarking" and r.concurrency >= 100]
    assert len(rows) == 4
    model = load_model(rows[0].model)
    hw = get_hardware(rows[0].gpu)
    for row in rows:
        assert row_scenario(row)["inference"]["kv_cache_dtype"] == "fp8"
        decoding = row.measured["output_tok_s"] * row.measured["tpot_ms"] / 1e3
        assert decoding > 80
        free = hw.memory_bytes - weight_bytes(model, dtype=DType.FP8, tp=row.tp)
        need = {dtype: kv_cache_bytes(model, tokens=round(decoding * row.input_len),
                                      kv_dtype=dtype, tp=row.tp)
                for dtype in (DType.BF16, DType.FP8)}
        assert need[DType.FP8] < free < need[DType.BF16]


def _preset(engine: str):
    hw = get_hardware("h100-sxm")
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name)


def test_fp8_activation_quantization_per_engine() -> None:
    # vLLM/SGLang fp8 (online or block-scaled): dynamic scaled_fp8_quant = an amax pass and a
    # cast pass over each linear input (5 B/element); TensorRT-LLM ModelOpt FP8: a stored
    # input_scale, one cast pass (3 B/element).
    assert _preset("vllm").fp8_activation_quant is ActQuant.DYNAMIC
    assert _preset("sglang").fp8_activation_quant is ActQuant.DYNAMIC
    assert _preset("trtllm").fp8_activation_quant is ActQuant.STATIC
    assert ActQuant.DYNAMIC.bytes_per_element == 5.0 and ActQuant.STATIC.bytes_per_element == 3.0


def _copy_bytes(ops) -> float:
    return sum(op.rows * op.cols * 4 * n for op, n in ops
               if isinstance(op, MemoryBoundSpec) and op.kind is MemoryOpKind.COPY)


def test_dynamic_fp8_quant_adds_a_pass_over_every_fp8_linear_input_only() -> None:
    model = load_model("llama-3-8b")
    shard = inference_sharding(tp=1, gpus_per_node=8)
    tokens = 1024
    plain = step_ops(model, tokens=tokens, shard=shard, weight_dtype=DType.FP8)
    quant = step_ops(model, tokens=tokens, shard=shard, weight_dtype=DType.FP8,
                     act_quant_bytes=5.0)
    fp8_inputs = sum(op.m * op.k * n for op, n in plain
                     if isinstance(op, GemmSpec) and op.dtype == DType.FP8)
    # qkv, o, gate_up, down: hidden, hidden, hidden, ffn input columns per token and layer
    per_layer = 3 * model.hidden + model.ffn_hidden
    assert fp8_inputs == tokens * per_layer * model.layers
    extra = _copy_bytes(quant) - _copy_bytes(plain)
    assert extra == pytest.approx(5.0 * fp8_inputs, rel=1e-3)
    bf16 = step_ops(model, tokens=tokens, shard=shard, weight_dtype=DType.BF16,
                    act_quant_bytes=5.0)
    assert _copy_bytes(bf16) == _copy_bytes(
        step_ops(model, tokens=tokens, shard=shard, weight_dtype=DType.BF16))


def test_overlapping_engines_hide_host_time_under_the_gpu_step() -> None:
    # vLLM async scheduling (default since PR #27614), SGLang's overlap scheduler
    # (disable_overlap_schedule False), TensorRT-LLM's (disable_overlap_scheduler False).
    assert all(_preset(e).host_overlap for e in ("vllm", "sglang", "trtllm"))
    reqs = [Request(id=i, arrival_s=0.0, input_len=8, output_len=4) for i in range(4)]

    def run_with(overlap: bool, host_ms: float) -> float:
        tenant = Tenant(name="m", workload=Workload(requests=reqs), scheduler="continuous",
                        config=SchedulerConfig(max_num_seqs=8, max_batched_tokens=64,
                                               block_size=16),
                        cost=_FlatCost(), kv_blocks=64, kv_bytes_per_token=1.0,
                        step_overhead_s=host_ms / 1e3, host_overlap=overlap)
        run_tenants([tenant])
        return tenant.busy_s / tenant.steps * 1e3

    assert run_with(False, 1.0) == pytest.approx(6.0)  # 5 ms GPU + 1 ms host
    assert run_with(True, 1.0) == pytest.approx(5.0)  # hidden under the GPU step
    assert run_with(True, 8.0) == pytest.approx(8.0)  # host outlasts the GPU: it sets the pace


def test_loso_leaves_overlapping_engines_at_their_presets() -> None:
    from simulate.validate.published_serving import score_serving_loso

    rows = [ServingRow(id=f"{src}{c}", source=src, url="u", section="t", model="llama-2-7b",
                       gpu="h100-sxm", num_gpus=1, engine="vllm", mode="closed", input_len=128,
                       output_len=16, concurrency=c, measured={"tpot_ms": tpot})
            for src, tpot in (("a", 7.0), ("b", 9.0)) for c in (1, 4)]

    def fake(doc):
        extra = doc["serving"].get("step_overhead_ms", 0.0)
        return {"fits": True, "tpot_s": {"mean": (5.0 + extra) / 1e3}}

    scored = score_serving_loso(rows, predict=fake)
    assert scored["fitted_host_overhead"] == {"a": {}, "b": {}}
    assert scored["loso"]["overall"] == scored["base"]["overall"]


class _FlatCost:
    def step_time(self, shape) -> float:
        return 5e-3


def test_overlapping_engine_admits_a_request_one_step_later() -> None:
    # vLLM's async scheduler forms step n+1 when step n starts (PR #19970: "the scheduler
    # operate[s] one step ahead"): a request arriving during step n joins step n+2.
    reqs = [Request(id=0, arrival_s=0.0, input_len=8, output_len=6),
            Request(id=1, arrival_s=2.5e-3, input_len=8, output_len=2)]

    def ttft_ms(overlap: bool) -> float:
        tenant = Tenant(name="m", workload=Workload(requests=reqs), scheduler="continuous",
                        config=SchedulerConfig(max_num_seqs=8, max_batched_tokens=64,
                                               block_size=16),
                        cost=_FlatCost(), kv_blocks=64, kv_bytes_per_token=1.0,
                        host_overlap=overlap)
        run_tenants([tenant])
        late = next(s for s in tenant.sequences if s.req.id == 1)
        return (late.first_token_s - late.req.arrival_s) * 1e3

    assert ttft_ms(False) == pytest.approx(7.5)  # joins the step starting at 5 ms
    assert ttft_ms(True) == pytest.approx(12.5)  # that step was formed at 0: joins the next


def test_api_server_clients_tokenize_serially_in_process_clients_do_not() -> None:
    """Each engine's preset tokenizes in its API server; a row of an in-process client
    (`vllm bench latency`, `trtllm-bench`) has no API server, so no tokenizer queue either."""
    for engine in ("vllm", "sglang", "trtllm"):
        preset = engine_preset(engine, memory_bytes=80 * 2**30, device="H100 SXM")
        assert preset.tokenize_s_per_token > 0
    rows = load_corpus()
    by_tool = {r.tool: r for r in rows}
    served = row_scenario(by_tool["vllm-bench-serve"])["serving"]
    assert "tokenize_us_per_token" not in served  # the preset's value applies
    for tool in ("vllm-bench-latency", "trtllm-bench"):
        assert row_scenario(by_tool[tool])["serving"]["tokenize_us_per_token"] == 0.0


def test_prompt_cap_leaves_bursts_with_latencies_and_closed_loops_whole() -> None:
    """A burst's mean TTFT grows with its size, and a closed loop's statistics weigh its first
    wave and its drain by its request count, so the speed cap takes only throughput-only
    bursts: 300 of silybench's 2,560 requests at 512 clients would be one wave."""
    rows = load_corpus()

    def requests(row: ServingRow) -> int:
        return int(row_scenario(row, max_prompts=50)["serving"]["arrival"]["num_requests"])

    burst = next(r for r in rows if r.mode == "offline" and "ttft_ms" in r.measured
                 and (r.num_prompts or 0) > 50)
    assert requests(burst) == burst.num_prompts
    tput = next(r for r in rows if r.mode == "offline" and set(r.measured) == {"output_tok_s"}
                and (r.num_prompts or 0) > 50)
    assert requests(tput) == 50
    closed = next(r for r in rows if r.mode == "closed" and (r.num_prompts or 0) > 50
                  and r.concurrency <= 50)
    assert requests(closed) == closed.num_prompts
    wide = next(r for r in rows if r.mode == "closed" and r.concurrency >= 512)
    assert (wide.num_prompts, requests(wide)) == (2560, 2560)
