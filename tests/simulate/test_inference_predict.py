# SPDX-License-Identifier: Apache-2.0
"""Inference predictions on the roofline engine: closed-form checks and every shipped scenario."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from analytical import memory as mem
from analytical.dtypes import DType
from analytical.errors import InfeasibleError, SpecError
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import EngineChain
from simulate.inference.predict import predict_colocated, predict_inference
from simulate.inference.setup import parse_colocation, parse_inference_setup

SCENARIOS = Path(__file__).resolve().parents[2] / "datasets" / "scenarios"
A100 = "a100-sxm-80gb"


def _estimator(gpu: str) -> EngineChain:
    return EngineChain(get_hardware(gpu), use_store=False, use_predictors=False)


def _doc(**inference) -> dict:
    base = {"parallel": {"tp": 1}, "precision": "bf16", "batch_size": 1, "input_len": 512,
            "output_len": 64}
    base.update(inference)
    return {"inference": base}


def _predict(doc: dict, model: str = "llama-2-7b", gpu: str = A100, gpus: int = 1) -> dict:
    return predict_inference(parse_inference_setup(doc), model=load_model(model),
                             hw=get_hardware(gpu), num_gpus=gpus,
                             estimator=_estimator(gpu)).to_dict()


def test_batch1_decode_is_weight_streaming() -> None:
    hw = get_hardware(A100)
    model = load_model("llama-2-7b")
    result = _predict(_doc(input_len=128, output_len=64))
    # every weight but the embedding table (one row is gathered) is read once per token
    streamed = mem.weight_bytes(model, dtype=DType.BF16) - model.embedding_params * 2
    floor = streamed / (hw.memory_bw_bytes_per_s * hw.efficiency.memory)
    # KV reads, activations and small kernels add a few percent
    assert floor <= result["tpot_s"] <= 1.10 * floor


def test_int4_decode_streams_a_quarter_of_the_bytes() -> None:
    full = _predict(_doc(parallel={"tp": 2}, input_len=128, output_len=32), model="llama-3-70b",
                    gpu="h100-sxm", gpus=2)
    int4 = _predict(_doc(parallel={"tp": 2}, precision="int4", input_len=128, output_len=32),
                    model="llama-3-70b", gpu="h100-sxm", gpus=2)
    ratio = int4["tpot_s"] / full["tpot_s"]
    assert 0.25 < ratio < 0.4  # 0.5 B vs 2 B per weight, plus bf16 embeddings/scales/KV


def test_serving_at_vanishing_qps_matches_single_request() -> None:
    single = _predict(_doc(input_len=1024, output_len=16))
    served = _predict({**_doc(input_len=1024, output_len=16),
                       "serving": {"arrival": {"process": "poisson", "qps": 0.001,
                                               "num_requests": 5, "seed": 0}}})
    # the served path prices the prompt's attention exactly (`step_cost.PrefillAttention`)
    assert served["ttft_s"]["p50"] == pytest.approx(single["ttft_s"], rel=1e-6)
    assert served["tpot_s"]["p50"] == pytest.approx(single["tpot_s"], rel=1e-6)


def test_kv_capacity_matches_memory_model() -> None:
    hw = get_hardware(A100)
    model = load_model("llama-2-7b")
    result = _predict({**_doc(), "serving": {"arrival": {"process": "burst", "num_requests": 2},
                                             "block_size": 16, "gpu_memory_utilization": 0.9}})
    m = result["memory"]
    usable = hw.memory_bytes * 0.9
    free = usable - m["weights_gib"] * 2**30 - m["activation_reserve_gib"] * 2**30
    per_token = mem.kv_cache_bytes(model, tokens=1, kv_dtype=DType.BF16)
    assert per_token == 2 * 32 * 4096 * 2  # 512 KiB per token
    assert m["kv_capacity_tokens"] == 16 * int(free // (per_token * 16))


def test_speculative_decoding_cuts_tpot() -> None:
    doc = _doc(parallel={"tp": 8}, input_len=256, output_len=128)
    plain = _predict(doc, model="llama-2-70b", gpu="h100-sxm", gpus=8)
    spec = _predict({"inference": {**doc["inference"], "speculative": {
        "draft_model": "llama-2-7b", "k": 4, "acceptance": 0.8, "draft_tp": 8}}}, model="llama-2-70b",
        gpu="h100-sxm", gpus=8)
    assert spec["speculative"]["expected_tokens_per_step"] == pytest.approx(
        (1 - 0.8**5) / (1 - 0.8))
    assert spec["tpot_s"] < 0.7 * plain["tpot_s"]


def test_prefix_cache_hits_shorten_prefill() -> None:
    cold = _predict(_doc(input_len=4096, output_len=4))
    warm = _predict(_doc(input_len=4096, output_len=4, prefix_cache={"hit_ratio": 0.5}))
    assert warm["ttft_s"] < 0.6 * cold["ttft_s"]


@pytest.mark.parametrize(("doc", "gpus", "field"), [
    (_doc(parallel={"tp": 3}), 3, "inference.parallel.tp"),
    (_doc(parallel={"tp": 2}), 1, "hardware.num_gpus"),
    (_doc(precision="fp64"), 1, "inference.precision"),
    (_doc(batch_size=0), 1, "inference.batch_size"),
    ({"inference": {**_doc()["inference"], "bogus": 1}}, 1, "inference.bogus"),
    ({**_doc(), "serving": {"arrival": {"process": "poisson", "num_requests": 3}}}, 1,
     "serving.arrival.qps"),
    ({**_doc(), "serving": {"scheduler": "fifo", "arrival": {"num_requests": 3}}}, 1,
     "serving.scheduler"),
])
def test_bad_inference_input_names_the_field(doc: dict, gpus: int, field: str) -> None:
    with pytest.raises(SpecError) as err:
        _predict(doc, gpus=gpus)
    assert err.value.field == field


def test_model_that_does_not_fit_gets_a_verdict() -> None:
    with pytest.raises(InfeasibleError, match="does not fit") as err:
        _predict(_doc(), model="llama-3-70b", gpu=A100, gpus=1)
    assert err.value.details["weights_gib"] > 100


@pytest.mark.parametrize("path", sorted(p for p in SCENARIOS.glob("*.yaml")
                                        if "inference" in p.read_text()
                                        or "colocate" in p.read_text()),
                         ids=lambda p: p.stem)
def test_shipped_inference_scenarios_run(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    gpu, gpus = doc["hardware"]["gpu"], doc["hardware"]["num_gpus"]
    if "colocate" in doc:
        result = predict_colocated(parse_colocation(doc["colocate"]), hw=get_hardware(gpu),
                                   num_gpus=gpus, estimator=_estimator(gpu)).to_dict()
        assert len(result["tenants"]) == 2
        assert all(t["throughput_tokens_per_s"] > 0 for t in result["tenants"].values())
    else:
        result = _predict(doc, model=doc["model"], gpu=gpu, gpus=gpus)
        assert result["throughput_tokens_per_s"] > 0
    assert sum(result["engine_coverage"].values()) == pytest.approx(1.0)


def test_cli_json_trace_and_plot(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from simulate.trace import check_trace

    trace, plot = tmp_path / "t.json", tmp_path / "cdf.png"
    out = subprocess.run(
        [sys.executable, "-m", "simulate.cli.main", "simulate",
         str(SCENARIOS / "llama2-7b-continuous-qps2-a100.yaml"), "--json", "--no-store",
         "--no-predictors", "--trace", str(trace), "--plot", str(plot),
         "--set", "serving.arrival.num_requests=50"],
        capture_output=True, text=True, timeout=300, env={"LLMSIM_HOME": str(tmp_path),
                                                          "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["num_requests"] == 50 and data["fits"] is True
    assert set(data["ttft_s"]) >= {"mean", "p50", "p90", "p99"}
    check_trace(json.loads(trace.read_text()))
    assert plot.stat().st_size > 10_000


def test_does_not_fit_is_a_verdict_not_an_error() -> None:
    from simulate.api import run

    out = run(SCENARIOS / "llama2-7b-single-a100.yaml", use_store=False, use_predictors=False,
              overrides=["model=llama-3-70b"])
    assert out.data["fits"] is False and out.data["ttft_s"] is None
    assert out.data["memory"]["weights_gib"] > 100
