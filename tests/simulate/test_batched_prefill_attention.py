# SPDX-License-Identifier: Apache-2.0
"""A step's prefill chunks share one attention launch per layer (`PrefillAttention.seconds`,
`EnginePreset.batched_prefill_attention`): vLLM V1's FlashAttention backend calls
flash_attn_varlen_func once per layer over every scheduled token, SGLang's extend batch and
TensorRT-LLM's context requests likewise run in one attention op per layer. Priced one kernel
per chunk, 31 prompts of one new token each cost 31 kernels' fixed time per layer."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import Estimate
from simulate.inference.layer_ops import inference_sharding
from simulate.inference.step_cost import PrefillAttention
from simulate.serving.engine_presets import engine_preset, preset_sources

FIXED = 10e-6  # a kernel's fixed time
PER_TOKEN = 1e-8  # and its work, per query token


class _Linear:
    """Every attention kernel costs FIXED + PER_TOKEN x its query tokens."""

    def estimate_many(self, ops):
        return [Estimate(latency_s=FIXED + PER_TOKEN * op.q_len,
                         engine="roofline") for op in ops]


def _attention(batched: bool) -> PrefillAttention:
    model = load_model("qwen3-8b")
    shard = inference_sharding(tp=1, gpus_per_node=8)
    return PrefillAttention(model, shard, _Linear(), DType.BF16, batched=batched)


def test_every_engine_batches_a_steps_prefill_attention() -> None:
    hw = get_hardware("h100-sxm")
    for engine in ("vllm", "sglang", "trtllm"):
        preset = engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name, tp=1)
        assert preset.batched_prefill_attention
        assert "one" in preset_sources(engine)["batched_prefill_attention"]


def test_chunks_beyond_the_largest_shed_a_one_token_chunks_price() -> None:
    per_chunk, batched = _attention(False), _attention(True)
    chunks = [(127, 1)] * 31
    floor = batched.get((0, 1))[0]
    assert floor > 0
    assert per_chunk.seconds(chunks) == pytest.approx(31 * per_chunk.get((127, 1))[0])
    assert batched.seconds(chunks) == pytest.approx(per_chunk.seconds(chunks) - 30 * floor)
    assert batched.seconds(chunks) < per_chunk.seconds(chunks) / 5
    # one chunk, or a lone long prompt beside short ones, keeps the long one's whole price
    assert batched.seconds([(0, 4096)]) == pytest.approx(per_chunk.seconds([(0, 4096)]))
    mixed = [(0, 4096), (0, 1), (0, 1)]
    assert batched.seconds(mixed) == pytest.approx(batched.get((0, 4096))[0] + 2 * (
        batched.get((0, 1))[0] - floor))
