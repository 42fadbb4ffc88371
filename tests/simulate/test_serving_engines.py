# SPDX-License-Identifier: Apache-2.0
"""Engine presets against the engines' documented defaults, the benchmark semantics of
`vllm bench serve`, the vllm-bench JSON round trip, and the published-serving scorer."""

from __future__ import annotations

import dataclasses
import json

import pytest

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from simulate.api import run
from simulate.inference.run import resolve_serving
from simulate.inference.spec import parse_serving
from simulate.serving.bench_format import vllm_bench_result
from simulate.serving.engine_presets import (
    MemoryRule,
    engine_preset,
    kv_cache_bytes,
    preset_sources,
    sglang_mem_fraction_static,
)
from simulate.serving.loop import Tenant, run_tenants
from simulate.serving.metrics import summarize_tenant
from simulate.serving.schedulers import SchedulerConfig
from simulate.serving.state import StepShape
from simulate.serving.workload import Request, Workload
from simulate.validate.published_serving import by_band, score_serving, summarize
from simulate.validate.serving_corpus import (
    ServingRow,
    load_corpus,
    row_scenario,
    rows_from_vllm_bench,
)


def _preset(engine: str, gpu: str, tp: int = 1):
    hw = get_hardware(gpu)
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name, tp=tp)


# --- presets vs the engines' code ----------------------------------------------------------

def test_vllm_defaults_follow_the_hardware_tiers_of_arg_utils() -> None:
    # vllm/engine/arg_utils.py: >= 70 GiB and not A100 -> OPENAI_API_SERVER batched tokens 8192,
    # max_num_seqs 1024; otherwise 2048 / 256. CacheConfig: block_size 16,
    # gpu_memory_utilization 0.9. V1 always chunks prefills; prefix caching on by default.
    # vllm/config/vllm.py _set_cudagraph_sizes: max capture size min(2 * max_num_seqs, 512).
    h100 = _preset("vllm", "h100-sxm")
    assert (h100.max_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    assert (h100.block_size, h100.gpu_memory_utilization) == (16, 0.9)
    assert (h100.scheduler, h100.chunk_prompts, h100.prefix_caching) == (
        "chunked_prefill", True, True)
    assert h100.cuda_graph_max_bs == 512
    assert h100.memory_rule is MemoryRule.TOTAL_FRACTION
    a100 = _preset("vllm", "a100-sxm-80gb")  # 80 GiB but excluded by name (PR #17885)
    assert (a100.max_batched_tokens, a100.max_num_seqs) == (2048, 256)
    l4 = _preset("vllm", "l4")
    assert (l4.max_batched_tokens, l4.max_num_seqs, l4.cuda_graph_max_bs) == (2048, 256, 512)


def test_sglang_defaults_follow_handle_gpu_memory_settings() -> None:
    # sglang server_args.py _handle_gpu_memory_settings: < 90 GiB (H100): chunked_prefill_size
    # 8192, cuda_graph_max_bs 256 (512 at tp >= 4); >= 160 GiB (B200): 16384 and 512.
    # mem_fraction_static = (gpu_mem - reserved) / gpu_mem, reserved at least 10 GiB > 60 GiB.
    h100 = _preset("sglang", "h100-sxm")
    assert (h100.max_batched_tokens, h100.cuda_graph_max_bs) == (8192, 256)
    assert _preset("sglang", "h100-sxm", tp=4).cuda_graph_max_bs == 512
    reserved = 512 + 8192 * 1.5 + 256 * 2 + 1 / 8 * 1024  # MiB, above the 10 GiB floor
    assert h100.gpu_memory_utilization == pytest.approx(
        round((80 * 1024 - reserved) / (80 * 1024), 3))
    assert (h100.scheduler, h100.block_size, h100.memory_rule) == (
        "prefill_first", 1, MemoryRule.STATIC_FRACTION)
    b200 = _preset("sglang", "b200")
    assert (b200.max_batched_tokens, b200.cuda_graph_max_bs) == (16384, 512)
    # below 60 GiB the 10 GiB floor does not apply
    assert sglang_mem_fraction_static(gpu_mib=40 * 1024, chunked_prefill=4096, graph_max_bs=32,
                                      tp=1, pp=1) == round((40960 - 6848) / 40960, 3)


def test_trtllm_defaults_follow_llm_args() -> None:
    # tensorrt_llm llm_args.py: max_num_tokens 8192, max_batch_size 2048, KvCacheConfig
    # tokens_per_block 32, free_gpu_memory_fraction 0.9 (of memory free after the weights),
    # enable_chunked_prefill False, capacity policy GUARANTEED_NO_EVICT.
    p = _preset("trtllm", "h200")
    assert (p.max_batched_tokens, p.max_num_seqs, p.block_size) == (8192, 2048, 32)
    assert p.gpu_memory_utilization == 0.9
    assert (p.chunk_prompts, p.reserve_output_kv) == (False, True)
    assert p.memory_rule is MemoryRule.FREE_AFTER_WEIGHTS


def test_every_preset_value_names_its_source() -> None:
    for engine in ("vllm", "sglang", "trtllm"):
        sources = preset_sources(engine)
        for key in ("scheduler", "max_batched_tokens", "max_num_seqs", "block_size",
                    "gpu_memory_utilization", "memory_rule", "prefix_caching"):
            assert len(sources[key]) > 20, (engine, key)


def test_unknown_engine_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="serving.engine"):
        _preset("tgi", "h100-sxm")


def test_kv_cache_bytes_per_memory_rule() -> None:
    args = {"capacity": 100.0, "utilization": 0.9, "weights": 30.0, "activations": 10.0}
    assert kv_cache_bytes("total_fraction", **args) == pytest.approx(50.0)
    assert kv_cache_bytes("static_fraction", **args) == pytest.approx(60.0)
    assert kv_cache_bytes("free_after_weights", **args) == pytest.approx(54.0)


# --- presets applied to a scenario -----------------------------------------------------------

def test_explicit_fields_override_the_preset_and_no_engine_keeps_continuous() -> None:
    hw = get_hardware("h100-sxm")
    arrival = {"process": "closed", "concurrency": 4, "num_requests": 8}
    mine = resolve_serving(parse_serving({"engine": "vllm", "max_num_seqs": 64,
                                          "arrival": arrival}), hw, tp=1, pp=1)
    assert mine.max_num_seqs == 64  # explicit
    assert (mine.scheduler, mine.max_batched_tokens, mine.block_size) == (
        "chunked_prefill", 8192, 16)  # preset
    chunk = resolve_serving(parse_serving({"engine": "vllm", "chunk_size": 512,
                                           "arrival": arrival}), hw, tp=1, pp=1)
    assert chunk.max_batched_tokens == 512
    plain = parse_serving({"arrival": arrival})
    assert resolve_serving(plain, hw, tp=1, pp=1) is plain
    assert plain.scheduler == "continuous"


def _closed(model: str, engine: str, *, concurrency: int, n: int, gpu: str = "h100-sxm"):
    return {"name": "t", "model": model, "hardware": {"gpu": gpu, "num_gpus": 1},
            "inference": {"parallel": {"tp": 1}, "precision": "bf16", "input_len": 512,
                          "output_len": 32},
            "serving": {"engine": engine, "arrival": {"process": "closed",
                                                       "concurrency": concurrency,
                                                       "num_requests": n}}}


def test_engine_memory_rules_give_different_kv_capacity() -> None:
    caps = {}
    for engine in ("vllm", "sglang", "trtllm"):
        out = run(_closed("llama-2-7b", engine, concurrency=2, n=4), use_store=False,
                  use_predictors=False)
        caps[engine] = out.data["memory"]["kv_capacity_tokens"]
    # same weights; SGLang keeps ~84% of 80 GiB minus weights, vLLM 90% minus weights and the
    # profiled activations, TensorRT-LLM 90% of what weights and activations leave
    assert len(set(caps.values())) == 3
    assert caps["trtllm"] > caps["vllm"]  # 0.9 (C - W - A) > 0.9 C - W - A


# --- benchmark semantics -------------------------------------------------------------------

class _Cost:
    def __init__(self, a: float, b: float) -> None:
        self.a, self.b = a, b

    def step_time(self, shape: StepShape) -> float:
        return self.a + self.b * shape.tokens


def _reqs(n: int, inp: int, out: int) -> tuple[Request, ...]:
    return tuple(Request(id=i, arrival_s=0.0, input_len=inp, output_len=out) for i in range(n))


def test_itl_pools_token_gaps_and_tpot_is_per_request() -> None:
    # one client: every gap is one decode step (a + b), so mean ITL = TPOT = a + b
    tenant = Tenant(name="t", workload=Workload(requests=_reqs(3, 100, 5), concurrency=1),
                    scheduler="continuous", config=SchedulerConfig(), cost=_Cost(0.01, 1e-4),
                    kv_blocks=1000, kv_bytes_per_token=1.0)
    run_tenants([tenant])
    m = summarize_tenant(tenant)
    assert m.loop.itl_s.mean == pytest.approx(0.01 + 1e-4)
    assert m.tpot_s.mean == pytest.approx(0.01 + 1e-4)
    for seq in tenant.sequences:  # TPOT = (e2e - ttft) / (output_len - 1)
        assert (seq.finish_s - seq.first_token_s) / 4 == pytest.approx(0.01 + 1e-4)
    # two clients under prefill-first: one client's prefill stalls the other's decode, so a
    # few gaps are long (ITL p99) while the median gap stays one decode step
    reqs = tuple(Request(id=i, arrival_s=0.0, input_len=2000, output_len=(10, 25)[i % 2])
                 for i in range(6))  # unequal outputs: the clients' prompts stop coinciding
    tenant = Tenant(name="t", workload=Workload(requests=reqs, concurrency=2),
                    scheduler="continuous", config=SchedulerConfig(), cost=_Cost(0.01, 1e-4),
                    kv_blocks=10_000, kv_bytes_per_token=1.0)
    run_tenants([tenant])
    m = summarize_tenant(tenant)
    assert m.loop.itl_s.p50 == pytest.approx(0.01 + 2e-4)
    assert m.loop.itl_s.max > 0.01 + 2000e-4


def test_reserve_output_admits_only_what_fits_whole_and_never_preempts() -> None:
    # 16-token blocks; each request needs (100 + 60) / 16 = 10 blocks for prompt + output
    wl = Workload(requests=_reqs(4, 100, 60), concurrency=4)
    for reserve, preempted in ((True, False), (False, True)):
        tenant = Tenant(name="t", workload=wl, scheduler="chunked_prefill",
                        config=SchedulerConfig(reserve_output=reserve), cost=_Cost(0.01, 1e-5),
                        kv_blocks=25, kv_bytes_per_token=1.0)
        run_tenants([tenant])
        assert (tenant.state.preemptions > 0) is preempted
        assert all(s.finish_s is not None for s in tenant.sequences)


def test_prefill_first_never_mixes_prefill_and_decode() -> None:
    class Recorder(_Cost):
        shapes: list[StepShape] = []

        def step_time(self, shape: StepShape) -> float:
            self.shapes.append(shape)
            return super().step_time(shape)

    cost = Recorder(0.01, 1e-5)
    tenant = Tenant(name="t", workload=Workload(requests=_reqs(8, 3000, 8), concurrency=4),
                    scheduler="prefill_first", config=SchedulerConfig(max_batched_tokens=1024),
                    cost=cost, kv_blocks=10_000, kv_bytes_per_token=1.0)
    run_tenants([tenant])
    assert not any(s.prefill_chunks and s.decode_seqs for s in cost.shapes)
    assert max(s.tokens for s in cost.shapes) <= 1024


# --- vllm-bench output, importer and scorer --------------------------------------------------

def test_vllm_bench_round_trip_scores_a_prediction_against_itself(tmp_path) -> None:
    doc = _closed("llama-2-7b", "vllm", concurrency=4, n=12)
    out = run(doc, use_store=False, use_predictors=False, trace=True)
    result = vllm_bench_result(out.data, model_id="llama-2-7b", arrival=doc["serving"]["arrival"],
                               latencies=out.latencies)
    assert result["max_concurrency"] == 4 and result["completed"] == 12
    assert result["mean_ttft_ms"] == pytest.approx(out.data["ttft_s"]["mean"] * 1e3)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(result))
    rows = rows_from_vllm_bench([path], model="llama-2-7b", gpu="h100-sxm", num_gpus=1,
                                weight_dtype="bf16")
    assert (rows[0].input_len, rows[0].output_len, rows[0].concurrency) == (512, 32, 4)
    scored = score_serving(rows, use_store=False)
    for measure in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tok_s"):
        assert scored["overall"][measure]["mape_pct"] == pytest.approx(0.0, abs=1e-6)


def test_score_serving_reports_mape_bands_and_false_oom() -> None:
    rows = [ServingRow(id=f"r{c}", source="s", url="u", section="t", model="llama-2-7b",
                       gpu="h100-sxm", num_gpus=1, mode="closed", input_len=128, output_len=16,
                       concurrency=c, measured={"ttft_ms": 100.0, "tpot_ms": 10.0})
            for c in (2, 8, 32, 128)]
    answers = {2: (0.11, 0.009), 8: (0.12, 0.011), 32: (0.08, 0.010), 128: None}

    def fake(doc):  # scenario -> the JSON llmsim simulate --json prints
        c = doc["serving"]["arrival"]["concurrency"]
        if answers[c] is None:
            return {"fits": False, "reason": "too big"}
        ttft, tpot = answers[c]
        return {"fits": True, "ttft_s": {"mean": ttft}, "tpot_s": {"mean": tpot}}

    scored = score_serving(rows, predict=fake)
    overall = scored["overall"]
    assert overall["false_oom"] == 1
    assert overall["ttft_ms"]["n"] == 3
    assert overall["ttft_ms"]["mape_pct"] == pytest.approx((10 + 20 + 20) / 3)
    assert overall["tpot_ms"]["mean_signed_pct"] == pytest.approx((-10 + 10 + 0) / 3)
    assert scored["by_band"]["1-4"]["ttft_ms"]["mean_signed_pct"] == pytest.approx(10.0)
    assert scored["by_band"]["17-64"]["ttft_ms"]["mean_signed_pct"] == pytest.approx(-20.0)
    assert scored["by_band"][">64"] == {}  # the false-OOM row has no latency to compare
    assert summarize([])["rows"] == 0 and by_band([]) == {}


def test_corpus_rows_cite_their_source_and_use_known_models_and_gpus() -> None:
    from analytical.hardware import hardware_names
    from analytical.model import load_model

    rows = load_corpus()
    assert len(rows) >= 60 and len({r.source for r in rows}) >= 3
    gpus = set(hardware_names())
    for row in rows:
        assert row.url.startswith("https://") and row.section, row.id
        assert row.gpu in gpus, row.id
        assert row.measured, row.id
        assert row.mode in ("closed", "offline", "latency")
    for model in {r.model for r in rows}:
        load_model(model)
    doc = row_scenario(rows[0], max_prompts=10)
    assert doc["serving"]["arrival"]["num_requests"] >= rows[0].concurrency


def test_score_serving_on_a_published_row_runs_the_simulate_path() -> None:
    row = next(r for r in load_corpus() if r.source == "silybench" and r.concurrency == 4
               and r.input_len == 128 and r.output_len == 128 and r.weight_dtype == "bf16")
    scored = score_serving([row], use_store=False)
    result = scored["rows"][0]
    assert result["fits"] is True
    assert set(result["error"]) == set(row.measured)
    assert scored["by_source"]["silybench"]["ttft_ms"]["n"] == 1


def test_sglang_bench_serving_rows_draw_uniform_lengths_as_its_default_range_ratio() -> None:
    """sglang python/sglang/bench_serving.py sample_random_requests: --random-range-ratio 0.0
    (default) draws lengths uniformly from [1, L]; the row's mean length gives L = 2 * mean - 1.
    Other clients (vllm bench serve: fixed lengths at ratio 0.0) keep the published length."""
    from simulate.serving.workload import make_workload

    rows = load_corpus()
    sgl = next(r for r in rows if r.tool == "sglang-bench-serving" and r.concurrency == 64)
    inference = row_scenario(sgl)["inference"]
    assert inference["input_len"] == {"dist": "uniform", "min": 1, "max": 2 * sgl.input_len - 1}
    assert inference["output_len"]["max"] == 2 * sgl.output_len - 1
    load = make_workload({"process": "closed", "concurrency": 4, "num_requests": 2000},
                         input_len=inference["input_len"], output_len=inference["output_len"])
    ins = [r.input_len for r in load.requests]
    assert min(ins) < sgl.input_len // 4 and max(ins) > 7 * sgl.input_len // 4
    assert abs(sum(ins) / len(ins) - sgl.input_len) < 0.05 * sgl.input_len
    vllm = next(r for r in rows if r.tool == "vllm-bench-serve" and r.mode == "closed")
    assert row_scenario(vllm)["inference"]["input_len"] == vllm.input_len
    # a stated ratio: vLLM spreads around the mean, sglang at ratio 1 draws L every time
    spread = row_scenario(dataclasses.replace(vllm, range_ratio=0.5))["inference"]["input_len"]
    assert spread == {"dist": "uniform", "min": int(vllm.input_len * 0.5),
                      "max": int(vllm.input_len * 1.5)}
    fixed = dataclasses.replace(sgl, range_ratio=1.0)
    assert row_scenario(fixed)["inference"]["input_len"] == sgl.input_len
    with pytest.raises(SpecError, match="range_ratio"):
        row_scenario(dataclasses.replace(sgl, range_ratio=1.5))


def _no_host_overlap(monkeypatch) -> None:
    """The LOSO host fit applies to engines that add host time to the GPU step; the three
    presets overlap the two (host_overlap), so these tests switch that off."""
    from simulate.validate import published_serving

    monkeypatch.setattr(published_serving, "hides_host_time", lambda engine, version="": False)


def test_loso_fits_the_step_overhead_on_the_other_sources_only(monkeypatch) -> None:
    from simulate.validate.published_serving import score_serving_loso

    _no_host_overlap(monkeypatch)

    rows = [ServingRow(id=f"{src}{c}", source=src, url="u", section="t", model="llama-2-7b",
                       gpu="h100-sxm", num_gpus=1, engine="vllm", mode="closed", input_len=128,
                       output_len=16, concurrency=c, measured={"tpot_ms": tpot})
            for src, tpot in (("a", 7.0), ("b", 9.0)) for c in (1, 4)]

    def fake(doc):  # 5 ms of GPU per step plus whatever host overhead the scenario sets
        extra = doc["serving"].get("step_overhead_ms", 0.0)
        return {"fits": True, "tpot_s": {"mean": (5.0 + extra) / 1e3}}

    scored = score_serving_loso(rows, predict=fake)
    fitted = scored["fitted_host_overhead"]
    assert fitted["a"]["vllm"]["step_ms"] == pytest.approx(4.0)  # from b only
    assert fitted["b"]["vllm"]["step_ms"] == pytest.approx(2.0)  # from a only
    assert fitted["a"]["vllm"]["per_seq_us"] == pytest.approx(0.0, abs=1e-9)
    by_source = scored["loso"]["by_source"]
    assert by_source["a"]["tpot_ms"]["mean_signed_pct"] == pytest.approx((9 - 7) / 7 * 100)
    assert by_source["b"]["tpot_ms"]["mean_signed_pct"] == pytest.approx((7 - 9) / 9 * 100)
    assert scored["base"]["overall"]["tpot_ms"]["mean_signed_pct"] < 0


def test_loso_host_overhead_recovers_a_per_request_slope() -> None:
    """Residuals growing with the batch give the per-request part; an engine whose other rows
    sit at one batch size borrows the slope of all rows."""
    from simulate.validate.published_serving import fit_host_overhead

    def row(src, engine, c, itl):
        return ServingRow(id=f"{src}{engine}{c}", source=src, url="u", section="t",
                          model="llama-2-7b", gpu="h100-sxm", num_gpus=1, engine=engine,
                          mode="closed", input_len=128, output_len=16, concurrency=c,
                          measured={"itl_ms": itl}, stats={"itl_ms": "median"})

    pairs = [(row("a", "vllm", c, 5.0 + 2.0 + 0.01 * c), {"predicted": {"itl_ms": 5.0}})
             for c in (1, 16, 256)]
    pairs.append((row("b", "sglang", 8, 5.0 + 1.0 + 0.01 * 8), {"predicted": {"itl_ms": 5.0}}))
    fit = fit_host_overhead(pairs)
    assert fit["vllm"].step_ms == pytest.approx(2.0)
    assert fit["vllm"].per_seq_us == pytest.approx(10.0)
    assert fit["sglang"].per_seq_us == pytest.approx(fit[""].per_seq_us)
    assert fit["sglang"].at(8) == pytest.approx(1.08, abs=0.05)
    # wrong-statistic ITL (p95) says nothing about a median decode step
    p95 = dataclasses.replace(row("c", "vllm", 64, 30.0), stats={"itl_ms": "p95"})
    assert fit_host_overhead([(p95, {"predicted": {"itl_ms": 5.0}})]) == {}


def test_host_overhead_slope_is_never_taken_across_sources() -> None:
    """Two sources each at one batch size (1 and 8) differ in model, GPU and tool: the gap
    between their residuals is no per-request cost, so the slope stays 0."""
    from simulate.validate.published_serving import fit_host_overhead

    def row(src, c, tpot):
        return ServingRow(id=f"{src}{c}", source=src, url="u", section="t", model="llama-2-7b",
                          gpu="h100-sxm", num_gpus=1, engine="vllm", mode="closed",
                          input_len=128, output_len=16, concurrency=c,
                          measured={"tpot_ms": tpot})

    pairs = [(row("a", 1, 6.0), {"predicted": {"tpot_ms": 5.0}}),
             (row("b", 8, 9.0), {"predicted": {"tpot_ms": 5.0}}),
             (row("b", 8, 9.0), {"predicted": {"tpot_ms": 5.0}})]
    fit = fit_host_overhead(pairs)
    assert fit["vllm"].per_seq_us == 0.0 and fit[""].per_seq_us == 0.0
    assert fit["vllm"].step_ms == pytest.approx(4.0)  # median of 1, 4, 4


def test_loso_fits_host_time_only_on_rows_with_measured_gpu_time(monkeypatch) -> None:
    """A roofline-only row's residual is the roofline's error, not host time: when other rows
    have measured GPU time, it is left out of the fit; in a roofline-only run all rows count."""
    from simulate.validate.published_serving import score_serving_loso

    _no_host_overlap(monkeypatch)

    extra = {"a": 1.0, "b": 5.0, "c": 1.0}  # measured minus GPU time per step (ms)
    rows = [ServingRow(id=f"{src}{c}", source=src, url="u", section="t", model="llama-2-7b",
                       gpu="h100-sxm", num_gpus=1, engine="vllm", mode="closed", input_len=128,
                       output_len=16, concurrency=c, measured={"tpot_ms": 5.0 + extra[src]})
            for src in extra for c in (1, 4)]

    def fake(roofline_b: bool):
        def predict(doc):
            src = doc["name"][0]
            host = doc["serving"].get("step_overhead_ms", 0.0)
            share = {"roofline": 1.0} if roofline_b and src == "b" else {"store": 1.0}
            return {"fits": True, "tpot_s": {"mean": (5.0 + host) / 1e3},
                    "engine_coverage": share}
        return predict

    mixed = score_serving_loso(rows, predict=fake(True))["fitted_host_overhead"]
    assert mixed["c"]["vllm"]["step_ms"] == pytest.approx(1.0)  # from a; b left out
    assert "vllm" not in mixed["b"] or mixed["b"]["vllm"]["step_ms"] == pytest.approx(1.0)
    everything = score_serving_loso(rows, predict=fake(False))["fitted_host_overhead"]
    assert everything["c"]["vllm"]["step_ms"] == pytest.approx(3.0)  # median of 1, 1, 5, 5


def test_per_request_step_overhead_slows_big_batches_more() -> None:
    base = _closed("llama-2-7b", "vllm", concurrency=32, n=64)
    a = run(base, use_store=False, use_predictors=False).data
    tpot = {}
    for us in (50.0, 1000.0):
        slow = json.loads(json.dumps(base))
        slow["serving"]["step_overhead_per_seq_us"] = us
        tpot[us] = run(slow, use_store=False, use_predictors=False).data["tpot_s"]["mean"]
    # vLLM overlaps host work with the GPU step: 32 x 50 us = 1.6 ms hides under a ~10 ms
    # decode step; 32 x 1 ms = 32 ms outlasts it and sets the pace
    assert tpot[50.0] == pytest.approx(a["tpot_s"]["mean"], rel=1e-6)
    assert 0.9 * 32e-3 < tpot[1000.0] < 1.1 * 32e-3


def test_warmup_requests_run_but_are_not_measured() -> None:
    base = _closed("llama-2-7b", "vllm", concurrency=4, n=12)
    warm = json.loads(json.dumps(base))
    warm["serving"]["arrival"]["warmup_requests"] = 4
    a = run(base, use_store=False, use_predictors=False).data
    b = run(warm, use_store=False, use_predictors=False).data
    assert (a["num_requests"], b["num_requests"]) == (12, 8)
    # the first wave waits behind the whole burst of prompts; without it TTFT is lower
    assert b["ttft_s"]["max"] <= a["ttft_s"]["max"]
    bad = json.loads(json.dumps(base))
    bad["serving"]["arrival"]["warmup_requests"] = 12
    with pytest.raises(SpecError, match="warmup_requests"):
        run(bad, use_store=False, use_predictors=False)


def test_cli_format_vllm_bench_prints_vllm_keys_and_rejects_non_serving(tmp_path, capsys) -> None:
    import yaml

    from simulate.cli.main import main

    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(_closed("llama-2-7b", "sglang", concurrency=2, n=4)))
    assert main(["simulate", str(scenario), "--no-store", "--no-predictors",
                 "--format", "vllm-bench"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["max_concurrency"] == 2 and printed["completed"] == 4
    for metric in ("ttft", "tpot", "itl", "e2el"):
        assert printed[f"mean_{metric}_ms"] > 0 and f"p99_{metric}_ms" in printed
    single = _closed("llama-2-7b", "vllm", concurrency=2, n=4)
    del single["serving"]
    scenario.write_text(yaml.safe_dump(single))
    assert main(["simulate", str(scenario), "--no-store", "--no-predictors",
                 "--format", "vllm-bench"]) == 2


def test_validate_published_serving_cli_scores_a_source(capsys):
    """`llmsim validate published --kind serving` runs the serving scorer (presets, then
    leave-one-source-out) through the CLI and prints each source with n."""
    from simulate.cli.main import main

    code = main(["validate", "published", "--kind", "serving", "--sources", "vllm-ci",
                 "--no-store", "--no-predictors", "--max-prompts", "50", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(out)
    assert report["loso"]["by_source"]["vllm-ci"]["rows"] == 3
    assert report["base"]["overall"]["e2e_ms"]["n"] == 3


def test_vllm_pads_a_step_to_the_next_cuda_graph_size() -> None:
    """vLLM pads a step's tokens to the next captured size up to the largest (gpu_model_runner
    execute_model, pad_for_cudagraph); TensorRT-LLM does not pad (enable_padding = False)."""
    from simulate.serving.engine_presets import cuda_graph_sizes
    from simulate.serving.loop import _padded

    sizes = cuda_graph_sizes(_preset("vllm", "h100-sxm"))
    assert sizes[:4] == (1, 2, 4, 8) and sizes[-2:] == (496, 512) and 264 not in sizes
    shape = StepShape(tokens=33, logits=33, prefill_pairs=0.0, prefill_chunks=0,
                      decode_seqs=33, decode_kv=33 * 100, decode_q=1)
    assert _padded(shape, sizes).dense_tokens == 40
    assert _padded(shape, sizes).tokens == 33  # attention and logits see the real requests
    big = StepShape(tokens=600, logits=1, prefill_pairs=0.0, prefill_chunks=1, decode_seqs=0,
                    decode_kv=0, decode_q=1)
    assert _padded(big, sizes).dense_tokens == 600  # eager above the largest graph
    assert cuda_graph_sizes(_preset("trtllm", "h100-sxm")) == ()


def test_frontend_time_delays_first_token_and_the_closed_loop() -> None:
    base = _closed("llama-2-7b", "vllm", concurrency=1, n=4)
    base["serving"]["frontend_ms"] = 0.0
    slow = json.loads(json.dumps(base))
    slow["serving"]["frontend_ms"] = 10.0
    a = run(base, use_store=False, use_predictors=False).data
    b = run(slow, use_store=False, use_predictors=False).data
    # one client: every request waits 10 ms in the API server before its prefill
    assert b["ttft_s"]["mean"] - a["ttft_s"]["mean"] == pytest.approx(10e-3, rel=1e-6)
    assert b["tpot_s"]["mean"] == pytest.approx(a["tpot_s"]["mean"], rel=1e-9)
    assert b["throughput_tokens_per_s"] < a["throughput_tokens_per_s"]
    # vLLM's preset carries a front-end time; an in-process benchmark row switches it off
    assert _preset("vllm", "h100-sxm").frontend_s > 0
    assert _preset("trtllm", "h100-sxm").frontend_s == 0
    latency = next(r for r in load_corpus() if r.tool == "vllm-bench-latency")
    assert row_scenario(latency)["serving"]["frontend_ms"] == 0.0
    served = next(r for r in load_corpus() if r.tool == "vllm-bench-serve")
    assert "frontend_ms" not in row_scenario(served)["serving"]


def test_sglang_cookbook_rows_load_with_run_means_and_simulate() -> None:
    """SGLang cookbook Qwen3-235B-A22B on 8xB200: lengths are the run's means (total tokens /
    successful requests, as printed), and a one-client row runs through the SGLang preset."""
    rows = [r for r in load_corpus() if r.source == "sglang-cookbook"]
    assert len(rows) == 9
    first = rows[0]
    assert (first.model, first.gpu, first.tp, first.engine, first.concurrency) == (
        "qwen3-235b-a22b", "b200", 8, "sglang", 1)
    assert (first.input_len, first.output_len) == (round(6101 / 10), round(4210 / 10))
    assert first.measured["tpot_ms"] == pytest.approx(10.12)
    assert row_scenario(first)["serving"]["engine"] == "sglang"
    scored = score_serving([first], use_store=False, max_prompts=2)
    result = scored["rows"][0]
    assert result["fits"] is True
    # decode of 22B active parameters over 8 GPUs: a few ms per token, not the all-experts read
    assert 2.0 < result["predicted"]["tpot_ms"] < 20.0
