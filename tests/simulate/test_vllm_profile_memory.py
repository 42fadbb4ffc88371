# SPDX-License-Identifier: Apache-2.0
"""vLLM V1's start-up memory profile: one torch peak over the forward and the sampler
(v0.11.0 gpu_model_runner.py profile_run, vllm/utils memory_profiling), so the KV pool is
total * util - weights - max(forward, sampler), with the sampler on full-vocabulary logits."""

from __future__ import annotations

import pytest

from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import EngineChain
from simulate.inference.layer_ops import inference_sharding
from simulate.inference.predict import predict_inference
from simulate.inference.run import activation_reserve_bytes
from simulate.inference.setup import parse_inference_setup
from simulate.serving.engine_presets import engine_preset

H100 = "h100-sxm"


def _memory(model: str, tp: int) -> dict:
    doc = {"inference": {"parallel": {"tp": tp}, "precision": "bf16", "batch_size": 1,
                         "input_len": 32000, "output_len": 64},
           "serving": {"engine": "vllm", "arrival": {"process": "burst", "num_requests": 1}}}
    return predict_inference(parse_inference_setup(doc), model=load_model(model),
                             hw=get_hardware(H100), num_gpus=tp,
                             estimator=EngineChain(get_hardware(H100), use_store=False,
                                                   use_predictors=False)).to_dict()["memory"]


def test_vllm_reserve_is_the_larger_of_forward_and_sampler() -> None:
    model = load_model("qwen3-32b")
    preset = engine_preset("vllm", memory_bytes=get_hardware(H100).memory_bytes, device=H100)
    assert preset.sampler_profile_bytes_per_logit == 14  # bf16 + fp32 + top-k mask + softmax
    tokens, seqs = preset.max_batched_tokens, preset.max_num_seqs  # 8192, 1024 on an H100
    forward = activation_reserve_bytes(model, inference_sharding(tp=1, pp=1, ep=1),
                                       tokens, 0)  # the sum rule with no logits: the forward
    sampler = 2.0 * model.hidden * (tokens + 2 * seqs) + 14 * seqs * model.vocab
    m = _memory("qwen3-32b", 1)
    assert m["activation_reserve_gib"] * 2**30 == pytest.approx(max(forward, sampler))
    # the sum rule (forward + fp32 logits) left 35,856 tokens for Qwen3-32B on one H100
    assert m["kv_capacity_tokens"] == 36240


def test_vllm_sampler_logits_are_not_split_over_tp() -> None:
    model = load_model("qwen3-32b")
    seqs = 1024
    m = _memory("qwen3-32b", 2)
    assert m["activation_reserve_gib"] * 2**30 >= 14 * seqs * model.vocab


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_other_engines_keep_the_sum_rule(engine: str) -> None:
    preset = engine_preset(engine, memory_bytes=get_hardware(H100).memory_bytes, device=H100)
    assert preset.sampler_profile_bytes_per_logit == 0.0
