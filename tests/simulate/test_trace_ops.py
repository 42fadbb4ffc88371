# SPDX-License-Identifier: Apache-2.0
"""The training trace shows operators and collectives inside a step, on their own tracks."""

from __future__ import annotations

import pytest

from simulate.api import run
from simulate.trace import STREAM_TIDS, check_trace


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def test_operators_and_collectives_inside_the_first_microbatch():
    doc = {"name": "t", "model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"parallel": {"tp": 2, "pp": 2, "dp": 2, "sp": True, "zero": 1},
                        "global_batch": 8, "micro_batch": 1, "seq_len": 1024}}
    trace = run(doc, use_store=False, use_predictors=False, trace=True).trace
    check_trace(trace)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    tasks = {(e["pid"], e["name"]): e for e in events if e["tid"] == STREAM_TIDS["compute"]}
    for stage in (0, 1):
        ops = [e for e in events if e["pid"] == stage and e["tid"] == STREAM_TIDS["ops"]]
        tp = [e for e in events if e["pid"] == stage and e["tid"] == STREAM_TIDS["tp"]]
        assert {"qkv_proj", "attention", "mlp.down", "qkv_proj.dgrad"} <= {e["name"] for e in ops}
        assert {"attn.sp_all_gather", "mlp.sp_reduce_scatter"} <= {e["name"] for e in tp}
        lo = tasks[(stage, "F0")]["ts"]
        hi = tasks[(stage, "B0")]["ts"] + tasks[(stage, "B0")]["dur"]
        assert all(lo - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= hi + 1e-6 for e in ops + tp)
    assert "embedding" in {e["name"] for e in events if e["pid"] == 0}
    assert "lm_head" in {e["name"] for e in events if e["pid"] == 1}
