# SPDX-License-Identifier: Apache-2.0
"""Serving prices sliding-window layers by their window (issue #25 item 5): a window longer
than every context changes nothing, past the window a windowed layer's decode stops growing
with the context, and an engine that frees out-of-window blocks holds less KV."""

from __future__ import annotations

import dataclasses

import pytest

from analytical.attention_span import AttentionKind, causal_pairs, decode_keys
from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import EngineChain
from simulate.inference.layer_ops import inference_sharding
from simulate.inference.step_cost import MeteredCost, build_tables
from simulate.serving.engine_presets import engine_preset
from simulate.serving.kv_cache import BlockPool, blocks_for
from simulate.serving.loop import Tenant, run_tenants
from simulate.serving.metrics import summarize_tenant
from simulate.serving.schedulers import SchedulerConfig, SchedulerState
from simulate.serving.state import Batch, Sequence, step_shape
from simulate.serving.workload import Request, make_workload

SLIDING, CHUNKED, FULL = AttentionKind.SLIDING, AttentionKind.CHUNKED, AttentionKind.FULL


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))


def _tables(model, max_tokens=2048):
    hw = get_hardware("h100-sxm")
    chain = EngineChain(hw, use_store=False, use_predictors=False)
    return build_tables(model, hw, inference_sharding(tp=1, gpus_per_node=8),
                        weight_dtype=DType.BF16, kv_dtype=DType.BF16, estimator=chain,
                        max_tokens=max_tokens)


def _serve(model) -> dict:
    tables = _tables(model)
    wl = make_workload({"process": "poisson", "qps": 8, "num_requests": 60, "seed": 2},
                       input_len={"dist": "uniform", "min": 200, "max": 3000}, output_len=64)
    tenant = Tenant(name="t", workload=wl, scheduler="chunked_prefill",
                    config=SchedulerConfig(max_batched_tokens=2048), cost=MeteredCost(tables),
                    kv_blocks=100_000, kv_bytes_per_token=1e5, attention_spans=tables.spans)
    run_tenants([tenant])
    return summarize_tenant(tenant).to_dict()


def test_pair_and_key_counts_match_brute_force() -> None:
    for kind in (FULL, SLIDING, CHUNKED):
        for before, new, span in ((0, 10, 4), (3, 9, 4), (17, 5, 8), (0, 3, 16)):
            brute = sum(p if kind is FULL else min(p, span) if kind is SLIDING
                        else (p - 1) % span + 1 for p in range(before + 1, before + new + 1))
            assert causal_pairs(kind, before, new, span) == brute
        # the next token at position ctx + 1: its earlier keys under the mask
        assert decode_keys(kind, 10, 4) == {FULL: 10, SLIDING: 3, CHUNKED: 2}[kind]


@pytest.mark.parametrize("name", ["gemma-2-9b", "mistral-7b"])
def test_window_beyond_every_context_serves_like_full_attention(name) -> None:
    model = dataclasses.replace(load_model(name), sliding_window=1 << 20)
    full = dataclasses.replace(model, layer_attention=(), sliding_window=0)
    assert SLIDING in model.layer_kinds and SLIDING not in full.layer_kinds
    windowed, reference = _serve(model), _serve(full)
    assert windowed.keys() == reference.keys()
    for key, value in reference.items():
        assert windowed[key] == pytest.approx(value, rel=1e-9), key


def _decode_seconds(tables, contexts: list[int]) -> float:
    seqs = []
    for ctx in contexts:
        seq = Sequence(Request(id=0, arrival_s=0.0, input_len=ctx, output_len=4))
        seq.prefilled = ctx
        seqs.append(seq)
    return tables.attention_parts(step_shape(Batch(decode=seqs), spans=tables.spans))[1]


def test_decode_past_the_window_grows_only_on_full_layers() -> None:
    gemma = load_model("gemma-2-9b")  # alternating 4096-window and global layers
    w = gemma.sliding_window
    tables = _tables(gemma)
    b, full_share = tables.decode_per_kv_s, tables.full_share
    assert 0 < full_share < 1 and b > 0
    short, long, longer = (_decode_seconds(tables, [c] * 8) for c in (w // 2, 2 * w, 4 * w))
    # closed form: below the window every layer reads ctx keys; past it only the full ones grow
    assert longer - long == pytest.approx(8 * full_share * b * 2 * w, rel=1e-9)
    assert long - short == pytest.approx(
        8 * b * (full_share * (2 * w - w // 2) + (1 - full_share) * (w - 1 - w // 2)), rel=1e-9)
    mistral = _tables(load_model("mistral-7b"))  # every layer slides: decode stops growing
    assert mistral.full_share == 0
    flat = [_decode_seconds(mistral, [c] * 8) for c in (2 * w, 4 * w, 16 * w)]
    assert flat[0] == pytest.approx(flat[2], rel=1e-12) and flat[1] == pytest.approx(flat[2])
    assert _decode_seconds(mistral, [w // 2] * 8) < flat[0]


def test_long_prefill_of_a_windowed_model_costs_less_than_full() -> None:
    mistral = load_model("mistral-7b")
    full = dataclasses.replace(mistral, layer_attention=(), sliding_window=0)
    seq = Sequence(Request(id=0, arrival_s=0.0, input_len=16_384, output_len=1))
    batch = Batch(prefill=[(seq, 8192)])
    seq.prefilled = 8192  # the second chunk of a long prompt: its queries see 4096 keys
    times = []
    for model in (mistral, full):
        tables = _tables(model, max_tokens=8192)
        times.append(tables.attention_parts(step_shape(batch, spans=tables.spans))[0])
    pairs = causal_pairs(SLIDING, 8192, 8192, mistral.sliding_window)
    assert pairs == 8192 * mistral.sliding_window
    assert times[0] < 0.5 * times[1]



def test_windowed_layers_hold_only_their_window_when_the_engine_frees_blocks() -> None:
    gib = 80 * 2**30
    freeing = {e: engine_preset(e, memory_bytes=gib, device="h100-sxm").window_kv
               for e in ("vllm", "sglang", "trtllm")}
    assert freeing == {"vllm": True, "sglang": False, "trtllm": False}
    windows = tuple((w.share, w.span) for w in _tables(load_model("gemma-2-9b")).windowed)
    assert windows == ((0.5, 4096),)
    state = SchedulerState(BlockPool(10_000, 16), SchedulerConfig(kv_windows=windows))
    plain = SchedulerState(BlockPool(10_000, 16), SchedulerConfig())
    for tokens in (1, 100, 4096, 4112):  # within window + one block: every layer holds all
        assert state.held_blocks(tokens) == plain.held_blocks(tokens) == blocks_for(tokens, 16)
    # past it the full half grows, the sliding half stays at window + one block
    assert state.held_blocks(40_000) == blocks_for(20_000 + (4096 + 16) // 2, 16)
    assert state.held_blocks(40_000) < plain.held_blocks(40_000)
