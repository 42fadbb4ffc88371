# SPDX-License-Identifier: Apache-2.0
"""Request traces as published: Azure, Mooncake, Vidur length files (real excerpts under
datasets/traces/), BurstGPT (3 real rows and a same-format file with a failure) and vLLM
bench (a same-format file), detected by header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytical.errors import SpecError
from simulate.serving.trace_formats import TraceFormat, detect_format, trace_workload
from simulate.serving.workload import make_workload

TRACES = Path(__file__).resolve().parents[2] / "datasets" / "traces"
AZURE_CONV = TRACES / "azure-llm-2023-conv-head300.csv"


@pytest.mark.parametrize(("name", "fmt", "count"), [
    ("azure-llm-2023-code-head300.csv", TraceFormat.AZURE, 300),
    ("azure-llm-2023-conv-head300.csv", TraceFormat.AZURE, 300),
    ("mooncake-fast25-conversation-head100.jsonl", TraceFormat.MOONCAKE, 100),
    ("vidur-arxiv-summarization-lengths-head200.csv", TraceFormat.LENGTHS, 200),
    ("burstgpt-v1.1-head3.csv", TraceFormat.BURSTGPT, 3),
    ("burstgpt-format-example.csv", TraceFormat.BURSTGPT, 23),  # one failed request dropped
    ("vllm-bench-format-example.json", TraceFormat.VLLM_BENCH, 15),  # one error dropped
    ("poisson-qps2-n500-seed0.csv", TraceFormat.LLMSIM, 500),
])
def test_every_committed_trace_loads(name: str, fmt: TraceFormat, count: int) -> None:
    path = TRACES / name
    assert detect_format(path) == fmt
    workload = trace_workload(path, {"qps": 4.0, "seed": 0})
    reqs = workload.requests
    assert len(reqs) == count
    assert reqs[0].arrival_s == 0.0
    assert all(b.arrival_s >= a.arrival_s for a, b in zip(reqs, reqs[1:], strict=False))
    assert all(r.input_len > 0 and r.output_len > 0 for r in reqs)


def test_azure_rows_become_seconds_and_lengths() -> None:
    reqs = trace_workload(AZURE_CONV, {}).requests
    # first rows: 18:15:46.6805900,374,44 then 18:15:50.9951690,396,109; Vidur's converted
    # splitwise_conv.csv (microsoft/vidur data/processed_traces) has the same 4.314579 s
    assert (reqs[0].input_len, reqs[0].output_len) == (374, 44)
    assert (reqs[1].input_len, reqs[1].output_len) == (396, 109)
    assert reqs[1].arrival_s == pytest.approx(4.314579, abs=1e-6)


def test_burstgpt_rows_become_seconds_from_the_first_request() -> None:
    # the release's first rows: 5,ChatGPT,472,18 / 45,ChatGPT,1087,230 / 118,GPT-4,417,276
    reqs = trace_workload(TRACES / "burstgpt-v1.1-head3.csv", {}).requests
    assert [r.arrival_s for r in reqs] == [0.0, 40.0, 113.0]
    assert [(r.input_len, r.output_len) for r in reqs] == [(472, 18), (1087, 230), (417, 276)]


def test_mooncake_timestamps_are_milliseconds() -> None:
    reqs = trace_workload(TRACES / "mooncake-fast25-conversation-head100.jsonl", {}).requests
    first = [r for r in reqs if r.arrival_s == 0.0]
    assert {r.input_len for r in first} >= {6758, 7322}
    assert 30.0 < reqs[-1].arrival_s < 40.0  # last timestamp 33000 ms in this excerpt


def test_length_only_trace_needs_an_arrival_rate() -> None:
    path = TRACES / "vidur-arxiv-summarization-lengths-head200.csv"
    with pytest.raises(SpecError, match=r"serving.arrival.qps: .*no arrival times"):
        trace_workload(path, {})
    burst = trace_workload(path, {"process": "burst"}).requests
    assert {r.arrival_s for r in burst} == {0.0}
    assert burst[0].input_len == 3772 and burst[0].output_len == 54


def test_unknown_header_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("when,prompt,answer\n0,1,2\n")
    with pytest.raises(SpecError, match="unknown trace format"):
        make_workload({"trace": str(path)}, input_len=None, output_len=None)


def test_trace_scenario_needs_no_lengths(tmp_path: Path, capsys) -> None:
    from simulate.cli.main import main

    scenario = {
        "name": "azure-conv-7b", "model": "llama-2-7b",
        "hardware": {"gpu": "a100-sxm-80gb", "num_gpus": 1, "gpus_per_node": 8},
        "inference": {"parallel": {"tp": 1}, "precision": "bf16"},
        "serving": {"scheduler": "continuous", "arrival": {"trace": str(AZURE_CONV)}},
    }
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario))
    code = main(["simulate", str(path), "--json", "--no-store", "--no-predictors"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert data["mode"] == "serving" and data["num_requests"] == 300
    del scenario["serving"]
    path.write_text(json.dumps(scenario))
    assert main(["simulate", str(path), "--no-store", "--no-predictors"]) == 2
    assert "inference.input_len" in capsys.readouterr().err


def test_too_long_a_trace_is_refused(tmp_path: Path, monkeypatch) -> None:
    import simulate.serving.trace_formats as formats

    monkeypatch.setattr(formats, "MAX_TRACE_REQUESTS", 100)
    with pytest.raises(SpecError, match="300 requests, at most 100"):
        trace_workload(AZURE_CONV, {})
