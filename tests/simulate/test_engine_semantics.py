# SPDX-License-Identifier: Apache-2.0
"""Engine semantics beyond batch sizes: what KV dtype "auto" picks, and how each engine
quantizes an fp8 linear layer's input (datasets/engines/*.yaml `fp8_activation_quant`)."""

from __future__ import annotations

import dataclasses

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.ops import GemmSpec, MemoryBoundSpec, MemoryOpKind
from simulate.inference.layer_ops import inference_sharding, step_ops
from simulate.serving.engine_presets import ActQuant, engine_preset
from simulate.validate.serving_corpus import load_corpus, row_scenario


def test_auto_kv_dtype_follows_the_checkpoint_declaration_else_the_activations() -> None:
    # vLLM resolve_kv_cache_dtype_string and TensorRT-LLM ModelLoader._update_from_hf_quant_config
    # take "auto" from hf_quant_config.json kv_cache_quant_algo; without one, the activation
    # dtype (bf16) even for fp8 weights (--quantization fp8, or a linear-only ModelOpt export).
    rows = load_corpus()
    nim = next(r for r in rows if r.source == "nim-benchmarking")
    assert nim.weight_dtype == "fp8" and not nim.checkpoint_kv_dtype
    assert row_scenario(nim)["inference"]["kv_cache_dtype"] == "bf16"
    declared = dataclasses.replace(nim, checkpoint_kv_dtype="fp8")
    assert row_scenario(declared)["inference"]["kv_cache_dtype"] == "fp8"
    forced = dataclasses.replace(declared, kv_dtype="bf16")  # --kv-cache-dtype wins
    assert row_scenario(forced)["inference"]["kv_cache_dtype"] == "bf16"


def _preset(engine: str):
    hw = get_hardware("h100-sxm")
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name)


def test_fp8_activation_quantization_per_engine() -> None:
    # vLLM/SGLang fp8 (online or block-scaled): dynamic scaled_fp8_quant = an amax pass and a
    # cast pass over each linear input (5 B/element); TensorRT-LLM ModelOpt FP8: a stored
    # input_scale, one cast pass (3 B/element).
    assert _preset("vllm").fp8_activation_quant is ActQuant.DYNAMIC
    assert _preset("sglang").fp8_activation_quant is ActQuant.DYNAMIC
    assert _preset("trtllm").fp8_activation_quant is ActQuant.STATIC
    assert ActQuant.DYNAMIC.bytes_per_element == 5.0 and ActQuant.STATIC.bytes_per_element == 3.0


def _copy_bytes(ops) -> float:
    return sum(op.rows * op.cols * 4 * n for op, n in ops
               if isinstance(op, MemoryBoundSpec) and op.kind is MemoryOpKind.COPY)


def test_dynamic_fp8_quant_adds_a_pass_over_every_fp8_linear_input_only() -> None:
    model = load_model("llama-3-8b")
    shard = inference_sharding(tp=1, gpus_per_node=8)
    tokens = 1024
    plain = step_ops(model, tokens=tokens, shard=shard, weight_dtype=DType.FP8)
    quant = step_ops(model, tokens=tokens, shard=shard, weight_dtype=DType.FP8,
                     act_quant_bytes=5.0)
    fp8_inputs = sum(op.m * op.k * n for op, n in plain
                     if isinstance(op, GemmSpec) and op.dtype == DType.FP8)
    # qkv, o, gate_up, down: hidden, hidden, hidden, ffn input columns per token and layer
    per_layer = 3 * model.hidden + model.ffn_hidden
    assert fp8_inputs == tokens * per_layer * model.layers
    extra = _copy_bytes(quant) - _copy_bytes(plain)
    assert extra == pytest.approx(5.0 * fp8_inputs, rel=1e-3)
    bf16 = step_ops(model, tokens=tokens, shard=shard, weight_dtype=DType.BF16,
                    act_quant_bytes=5.0)
    assert _copy_bytes(bf16) == _copy_bytes(
        step_ops(model, tokens=tokens, shard=shard, weight_dtype=DType.BF16))
