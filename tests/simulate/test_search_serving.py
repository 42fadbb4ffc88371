# SPDX-License-Identifier: Apache-2.0
"""Serving search: candidates, SLO frontier, gain over the default, executor agreement."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from simulate.engines import EngineOptions
from simulate.search.serving_search import search_serving

ENGINES = EngineOptions(use_store=False, use_predictors=False)
DOC = {
    "name": "serve-small",
    "model": "llama-2-7b",
    "hardware": {"gpu": "a100-sxm-80gb", "num_gpus": 2, "gpus_per_node": 8},
    "inference": {"parallel": {"tp": 2}, "precision": "bf16", "input_len": 512,
                  "output_len": 64},
    "serving": {"scheduler": "continuous", "max_num_seqs": 8,
                "arrival": {"process": "closed", "concurrency": 8, "num_requests": 40,
                            "seed": 0},
                "slo": {"ttft_s": 5.0, "tpot_s": 0.2}},
    "search": {"tp": [1, 2], "max_num_seqs": [8, 32], "scheduler": ["continuous",
                                                                    "chunked_prefill"],
               "chunk_size": [512],
               "disaggregated": [{"prefill": {"instances": 1, "tp": 1},
                                  "decode": {"instances": 1, "tp": 1}}]},
}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


@pytest.fixture(scope="module")
def result():
    return search_serving(DOC, executor="serial", engines=ENGINES)


def test_candidates_and_frontier(result):
    # 2 max_num_seqs x (continuous + chunked 512) x (tp1 dp2, tp2 dp1, one P/D split) = 12
    assert result.candidates == 12
    assert len(result.rows) == 12
    assert all(r["meets_slo"] for r in result.frontier)
    tput = [r["tokens_per_s_per_gpu"] for r in result.frontier]
    tpot = [r["tpot_p90_s"] for r in result.frontier]
    assert tput == sorted(tput, reverse=True) and tpot == sorted(tpot, reverse=True)
    assert result.best is result.frontier[0] or result.best == result.frontier[0]


def test_best_improves_on_default(result):
    assert result.default is not None
    assert result.improvement is not None and result.improvement >= 1.0
    # the default (tp2, 8 seqs) is itself one of the candidates: the best is at least as good
    same = [r for r in result.rows if r["config"].get("tp") == 2 and r["config"].get("dp") == 1
            and r["config"]["max_num_seqs"] == 8 and r["config"]["scheduler"] == "continuous"]
    assert same[0]["tokens_per_s_per_gpu"] == pytest.approx(
        result.default["tokens_per_s_per_gpu"])


def test_process_executor_agrees(result):
    proc = search_serving(DOC, executor="process", workers=2, engines=ENGINES)
    assert [r["config"] for r in proc.rows] == [r["config"] for r in result.rows]
    assert [r.get("tokens_per_s_per_gpu") for r in proc.rows] == \
        [r.get("tokens_per_s_per_gpu") for r in result.rows]


def test_unknown_axis_names_field():
    with pytest.raises(SpecError, match="search.batch"):
        search_serving({**DOC, "search": {"batch": [1]}}, engines=ENGINES)
