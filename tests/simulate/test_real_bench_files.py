# SPDX-License-Identifier: Apache-2.0
"""Published files (not written by us) through llmsim's importers: `benchmark_serving.py
--save-result` results and a ShareGPT-derived length table; sources in datasets/traces/README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from analytical.errors import SpecError
from simulate.serving.trace_formats import TraceFormat, detect_format, trace_workload
from simulate.validate.serving_corpus import rows_from_vllm_bench

TRACES = Path(__file__).resolve().parents[2] / "datasets" / "traces"
INFERENCEX = TRACES / "inferencex-gpt-oss-120b-conc16-vllm-bench-result.json"
INFERENCEX_LENS = TRACES / "inferencex-qwen3.5-397b-conc64-vllm-bench-result.json"


def test_inferencex_summary_result_imports_as_one_closed_loop_row() -> None:
    # the GPU and engine are not in the file; the caller names them (not checked here)
    rows = rows_from_vllm_bench([INFERENCEX], model="gpt-oss-120b", gpu="gb200", num_gpus=16)
    assert len(rows) == 1
    row = rows[0]
    # 160 completed, 163840 input and output tokens, --max-concurrency 16 (as stored)
    assert (row.mode, row.concurrency, row.num_prompts) == ("closed", 16, 160)
    assert (row.input_len, row.output_len) == (1024, 1024)
    assert row.section == "20260428-110159"  # the file's "date"
    assert row.measured["ttft_ms"] == pytest.approx(185.00612755160546)
    assert row.measured["tpot_ms"] == pytest.approx(9.043755853690438)
    assert row.measured["e2e_ms"] == pytest.approx(9436.768365876924)
    assert row.measured["output_tok_s"] == pytest.approx(1725.5812148243967)


def test_summary_result_without_per_request_lengths_is_no_trace() -> None:
    # saved without --save-detailed: no input_lens/output_lens, so no requests to replay
    assert detect_format(INFERENCEX) == TraceFormat.VLLM_BENCH
    with pytest.raises(SpecError, match="input_lens and output_lens"):
        trace_workload(INFERENCEX, {"qps": 4.0, "seed": 0})


def test_inferencex_per_request_result_replays_its_64_requests() -> None:
    # a result that kept input_lens/output_lens: 64 requests, 468058 / 59194 tokens (as stored);
    # it has no start_times, so arrivals come from the scenario's process
    assert detect_format(INFERENCEX_LENS) == TraceFormat.VLLM_BENCH
    reqs = sorted(trace_workload(INFERENCEX_LENS, {"qps": 4.0, "seed": 0}).requests,
                  key=lambda r: r.id)
    assert len(reqs) == 64
    assert sum(r.input_len for r in reqs) == 468058
    assert sum(r.output_len for r in reqs) == 59194
    assert [(r.input_len, r.output_len) for r in reqs[:3]] == [(7239, 921), (7114, 859),
                                                                (7771, 1002)]
    row = rows_from_vllm_bench([INFERENCEX_LENS], model="qwen3.5-397b", gpu="mi355x",
                               num_gpus=4)[0]
    assert (row.mode, row.concurrency, row.input_len, row.output_len) == ("closed", 64, 7313, 925)
    assert row.measured["ttft_ms"] == pytest.approx(5923.282071953508)


def test_sarathi_sharegpt_length_table_loads_its_rows() -> None:
    # ShareGPT-derived (num_prefill_tokens, num_decode_tokens) table: 200 rows, 398909 / 99179
    # tokens (as stored), no arrival column, so arrivals come from the scenario's process
    path = TRACES / "sarathi-sharegpt-8k-lengths-head200.csv"
    assert detect_format(path) == TraceFormat.LENGTHS
    reqs = sorted(trace_workload(path, {"qps": 4.0, "seed": 0}).requests, key=lambda r: r.id)
    assert len(reqs) == 200
    assert sum(r.input_len for r in reqs) == 398909
    assert sum(r.output_len for r in reqs) == 99179
    assert [(r.input_len, r.output_len) for r in reqs[:2]] == [(74, 918), (290, 905)]
