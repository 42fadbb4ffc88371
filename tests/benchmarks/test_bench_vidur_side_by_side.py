# SPDX-License-Identifier: Apache-2.0
"""The pure parts of benchmarks/vidur_side_by_side.py (Vidur itself is not needed)."""

from __future__ import annotations

import csv
import lzma
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import vidur_side_by_side as vsbs  # noqa: E402

from analytical.dtypes import DType  # noqa: E402
from analytical.hardware import get_hardware  # noqa: E402
from analytical.model import load_model  # noqa: E402
from analytical.ops import AttentionSpec, Phase  # noqa: E402
from analytical.roofline import roofline_time  # noqa: E402


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))


def _args(tmp_path, *extra):
    return vsbs.parse_args(["--work-dir", str(tmp_path / "w"), "--engines", "roofline", *extra])


def test_trace_roundtrip(tmp_path):
    path = vsbs.write_trace(tmp_path / "t.csv", qps=4, num_requests=30, seed=1)
    cols = vsbs.read_trace(path)
    assert len(cols["arrival"]) == 30
    assert cols["arrival"][0] == 0.0 and np.all(np.diff(cols["arrival"]) >= 0)
    assert cols["input_len"].max() <= 3072 and cols["output_len"].max() <= 1024


def test_vidur_metrics_closed_form(tmp_path):
    # Two requests: arrivals 0 and 1 s; TTFT 0.1 / 0.2 s; E2E 1.1 / 2.2 s; 11 and 21 tokens.
    path = tmp_path / "request_metrics.csv"
    path.write_text("Request Id,prefill_e2e_time,request_e2e_time\n1,0.2,2.2\n0,0.1,1.1\n")
    cols = {"arrival": np.array([0.0, 1.0]), "input_len": np.array([5, 7]),
            "output_len": np.array([11, 21])}
    m = vsbs.vidur_metrics(path, cols)
    assert m["ttft_s"]["mean"] == pytest.approx(0.15)
    # TPOT = (e2e - ttft) / (output_len - 1): 1.0 / 10 and 2.0 / 20 -> both 0.1 s.
    assert m["tpot_s"]["p50"] == pytest.approx(0.1)
    assert m["e2e_latency_s"]["mean"] == pytest.approx(1.65)
    # makespan: last finish (1 + 2.2) minus first arrival (0) = 3.2 s; 32 output tokens.
    assert m["throughput_tokens_per_s"] == pytest.approx(32 / 3.2)


def _flags(argv):
    return {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}


def test_vidur_argv_matches_scheduler(tmp_path):
    data = {"compute": "local/c", "network": "local/n"}
    argv = vsbs.vidur_argv(_args(tmp_path, "--max-num-seqs", "64"), tmp_path / "t.csv", tmp_path,
                           data)
    flags = _flags(argv)
    assert flags["--replica_scheduler_config_type"] == "vllm"
    assert flags["--vllm_scheduler_config_batch_size_cap"] == "64"
    assert flags["--vllm_scheduler_config_max_tokens_in_batch"] == "4096"
    assert flags["--replica_config_device"] == "a100"
    argv = vsbs.vidur_argv(_args(tmp_path, "--scheduler", "chunked_prefill", "--chunk-size",
                                 "256"), tmp_path / "t.csv", tmp_path, data)
    flags = _flags(argv)
    assert flags["--replica_scheduler_config_type"] == "sarathi"
    assert flags["--sarathi_scheduler_config_chunk_size"] == "256"


def test_attention_rows_are_per_worker_roofline_ms():
    model, hw = load_model("llama-2-70b"), get_hardware("a100-sxm-80gb")
    rows, engines = vsbs.attention_rows(model, hw, "roofline", tp=4)
    assert engines == {"roofline"}
    row = next(r for r in rows if r["batch_size"] == 8 and r["prefill_chunk_size"] == 0
               and r["kv_cache_size"] == 1024)
    spec = AttentionSpec(batch=8, q_len=1, kv_len=1024, heads=16, kv_heads=2, head_dim=128,
                         causal=True, phase=Phase.DECODE, dtype=DType.FP16)
    assert row["time_stats.attn_decode.median"] == pytest.approx(roofline_time(spec, hw) * 1e3)
    assert row["n_q_head"] == 64 and row["num_tensor_parallel_workers"] == 4
    prefill = [r for r in rows if r["prefill_chunk_size"]]
    assert all(r["kv_cache_size"] + r["prefill_chunk_size"] <= 4096 for r in prefill)
    assert all(r["time_stats.attn_decode.median"] == "" for r in prefill)


def test_prepare_vidur_data_layout(tmp_path):
    data = tmp_path / "profiling"
    mlp = data / "compute" / "a100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
    net = data / "network" / "a100_dgx"
    mlp.parent.mkdir(parents=True)
    net.mkdir(parents=True)
    mlp.write_text("num_tokens\n1\n")
    for name in ("all_reduce", "send_recv"):
        (net / f"{name}.csv").write_text("size\n2\n")
    args = _args(tmp_path, "--vidur-data", str(data))
    out = vsbs.prepare_vidur_data(args, tmp_path / "w")
    compute, network = Path(out["compute_dir"]), Path(out["network_dir"])
    assert out["attention_engines"] == ["roofline"]
    # The dataset name carries the content hash (Vidur caches trained models by name only).
    assert out["compute"].startswith("local/compute-") and out["compute"] != out["network"]
    args70 = _args(tmp_path, "--vidur-data", str(data), "--tp", "2")
    assert vsbs.prepare_vidur_data(args70, tmp_path / "w")["compute"] != out["compute"]
    with lzma.open(compute / "mlp.csv.xz", "rt") as fh:
        assert fh.read() == "num_tokens\n1\n"
    with lzma.open(compute / "attention.csv.xz", "rt") as fh:
        assert "time_stats.attn_prefill.median" in next(csv.reader(fh))
    assert (network / "send_recv.csv.xz").is_file()
    assert '"device_sku": "a100"' in (compute / "config.json").read_text()


def test_missing_vidur_data_names_flag(tmp_path):
    with pytest.raises(vsbs.SpecError, match="--vidur-data"):
        vsbs.prepare_vidur_data(_args(tmp_path, "--vidur-data", str(tmp_path)), tmp_path / "w")


def test_llmsim_side_runs_on_trace(tmp_path):
    args = _args(tmp_path)
    trace = vsbs.write_trace(tmp_path / "t.csv", qps=2, num_requests=20, seed=0)
    out = vsbs.run_llmsim(args, trace, repeats=1)
    assert out["result"]["engine_coverage"] == {"roofline": 1.0}
    assert out["result"]["ttft_s"]["p50"] > 0 and out["wall_s"] > 0
