# SPDX-License-Identifier: Apache-2.0
"""Prompts a benchmark re-sends to the same server: `inference.prefix_cache.warm_requests` and the
serving corpus's `carryover_repeats` (a harness running a series' points in order with the same
per-repeat seeds)."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from simulate.api import run
from simulate.inference.spec import parse_inference
from simulate.serving.workload import make_workload
from simulate.validate.serving_corpus import _expand, row_scenario


def test_warm_requests_reuse_all_but_the_last_prompt_token() -> None:
    load = make_workload({"process": "closed", "concurrency": 2, "num_requests": 5},
                         input_len=1024, output_len=8, warm_requests=2)
    assert [r.cached_prefix for r in load.requests] == [1023, 1023, 0, 0, 0]
    spec = parse_inference({"input_len": 64, "output_len": 4,
                            "prefix_cache": {"warm_requests": 3}})
    assert spec.prefix_warm_requests == 3 and spec.prefix_hit_ratio == 0.0
    with pytest.raises(SpecError, match="warm_requests"):
        parse_inference({"input_len": 64, "output_len": 4,
                         "prefix_cache": {"warm_requests": 0}})
    with pytest.raises(SpecError, match="prefix_cache"):
        parse_inference({"input_len": 64, "output_len": 4, "prefix_cache": {}})


def test_warm_prompts_skip_their_prefill() -> None:
    doc = {"model": "llama-2-7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
           "inference": {"input_len": 2048, "output_len": 4},
           "serving": {"engine": "vllm",
                       "arrival": {"process": "closed", "concurrency": 1, "num_requests": 2}}}
    cold = run(doc, use_store=False, use_predictors=False).data
    doc["inference"]["prefix_cache"] = {"warm_requests": 1}
    warm = run(doc, use_store=False, use_predictors=False).data
    # one of two prompts computes one token instead of 2048
    assert warm["ttft_s"]["mean"] < 0.75 * cold["ttft_s"]["mean"]
    assert warm["ttft_s"]["max"] == pytest.approx(cold["ttft_s"]["max"], rel=1e-6)


def _doc(kv_tokens: int) -> dict:
    return {"source": "s", "url": "u", "columns": ["concurrency", "num_prompts", "ttft_ms"],
            "defaults": {"model": "llama-2-7b", "gpu": "h100-sxm", "num_gpus": 1,
                         "mode": "closed", "input_len": 1000, "output_len": 100,
                         "carryover_repeats": 3},
            "series": [{"section": "a", "kv_cache_tokens": kv_tokens,
                        "points": [[1, 50, 10.0], [4, 50, 11.0], [32, 160, 50.0]]}]}


def test_carryover_counts_the_previous_points_prompts_when_they_fit() -> None:
    rows = _expand(_doc(kv_tokens=300_000), "x")
    # 3 repeats x 50 prompts x 1100 tokens = 165k fit; the first point has no predecessor
    assert [r.warm_prompts for r in rows] == [0, 50, 50]
    assert row_scenario(rows[2])["inference"]["prefix_cache"] == {"warm_requests": 50}
    assert "prefix_cache" not in row_scenario(rows[0])["inference"]
    assert [r.warm_prompts for r in _expand(_doc(kv_tokens=100_000), "x")] == [0, 0, 0]
    plain = _doc(kv_tokens=300_000)
    del plain["defaults"]["carryover_repeats"]
    assert [r.warm_prompts for r in _expand(plain, "x")] == [0, 0, 0]


def test_carryover_takes_a_derived_kv_size_where_none_is_published() -> None:
    doc = _doc(kv_tokens=0)
    del doc["series"][0]["kv_cache_tokens"]
    assert [r.warm_prompts for r in _expand(doc, "x")] == [0, 0, 0]
    doc["defaults"]["carryover_kv_tokens"] = 300_000
    assert [r.warm_prompts for r in _expand(doc, "x")] == [0, 50, 50]
    doc["defaults"]["carryover_kv_tokens"] = 100_000  # 165k do not fit: LRU evicted them
    assert [r.warm_prompts for r in _expand(doc, "x")] == [0, 0, 0]


def test_sglang_bench_serving_warmup_leaves_the_first_prompt_cached() -> None:
    doc = _doc(kv_tokens=300_000)
    del doc["defaults"]["carryover_repeats"]
    doc["defaults"]["tool"] = "sglang-bench-serving"
    assert [r.warm_prompts for r in _expand(doc, "x")] == [1, 1, 1]
    doc["defaults"]["carryover_repeats"] = 1
    assert [r.warm_prompts for r in _expand(doc, "x")] == [1, 50, 50]
    doc["defaults"]["tool"] = "vllm-bench-serve"  # not listed: no warm-up prompt assumed
    assert [r.warm_prompts for r in _expand(doc, "x")] == [0, 50, 50]


def test_sglang_cookbook_series_carry_the_previous_runs_prompts() -> None:
    from simulate.validate.serving_corpus import load_corpus  # noqa: PLC0415

    warm = {r.id: r.warm_prompts for r in load_corpus()
            if r.source == "sglang-cookbook"}
    assert warm["sglang-cookbook-qwen3-235b-b200/2/0"] == 1  # the client's warm-up prompt
    assert warm["sglang-cookbook-qwen3-235b-b200/2/1"] == 10
    assert warm["sglang-cookbook-qwen3-235b-b200/2/2"] == 80


@pytest.mark.parametrize("key", ["carryover_repeats", "carryover_kv_tokens"])
@pytest.mark.parametrize("bad", [-1, 2.5, "many", True])
def test_carryover_keys_that_are_not_counts_name_the_field(key: str, bad: object) -> None:
    doc = _doc(kv_tokens=0)
    doc["series"][0][key] = bad
    with pytest.raises(SpecError, match=rf"x\.series\[0\]\.{key}"):
        _expand(doc, "x")
