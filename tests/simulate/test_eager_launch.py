# SPDX-License-Identifier: Apache-2.0
"""Host time of an eagerly run step (`EnginePreset.eager_launch_s`, `StepCostTables.launch_s`):
SGLang replays CUDA graphs for decode batches only, so a prefill (extend) step, or a decode
step above its largest graph, issues every kernel from its Python forward. The per-kernel figure
is read from sgl-project/sglang PR #12160 (DeepSeek-V3, a 1-token prefill: 82.6 ms eager against
23.1 ms as a CUDA graph), not from a scored source."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import Estimate
from simulate.inference.layer_ops import inference_sharding
from simulate.inference.step_cost import DenseCost, build_tables
from simulate.serving.engine_presets import engine_preset
from simulate.serving.state import StepShape


class _Flat:
    """Every operator 1 us (the launch term must not depend on the kernels' GPU time)."""

    def estimate_many(self, ops):
        return [Estimate(latency_s=1e-6, engine="roofline") for _ in ops]


def _preset(engine: str):
    hw = get_hardware("b200")
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name, tp=8)


def test_only_sglang_launches_eager_steps_from_python() -> None:
    # vLLM captures piecewise CUDA graphs for prefill as well; TensorRT-LLM's default is its
    # C++ runtime or the PyTorch backend's graphs (not listed: 0).
    assert _preset("sglang").eager_launch_s == pytest.approx(41.0e-6)
    assert _preset("vllm").eager_launch_s == 0.0
    assert _preset("trtllm").eager_launch_s == 0.0


def test_per_kernel_figure_is_pr_12160s_host_time_over_deepseek_v3s_kernels() -> None:
    # 82.6 ms eager - 23.1 ms graph = 59.5 ms of host time for one DeepSeek-V3 step (TP8).
    model = load_model("deepseek-v3")
    shard = inference_sharding(tp=8, gpus_per_node=8)
    kernels = DenseCost(model, shard, DType.BF16, _Flat(), None).kernels() + model.layers
    assert (82.6e-3 - 23.1e-3) / kernels == pytest.approx(_preset("sglang").eager_launch_s,
                                                          rel=0.02)


def _shape(*, prefill: int, decode: int) -> StepShape:
    chunks = ((0, prefill),) if prefill else ()
    return StepShape(tokens=prefill + decode, logits=decode + (1 if prefill else 0),
                     prefill_pairs=prefill * (prefill + 1) / 2.0, prefill_chunks=len(chunks),
                     decode_seqs=decode, decode_kv=decode * 512, decode_q=1, chunks=chunks)


def test_prefill_and_steps_above_the_largest_graph_pay_the_launch_time() -> None:
    model = load_model("qwen3-235b-a22b")
    shard = inference_sharding(tp=8, gpus_per_node=8)

    def tables(eager: float):
        return build_tables(model, get_hardware("b200"), shard, weight_dtype=DType.BF16,
                            kv_dtype=DType.BF16, estimator=_Flat(), max_tokens=1024,
                            graph_max_tokens=256, eager_launch_s=eager)

    plain, eager = tables(0.0), tables(41e-6)
    assert eager.eager_step_s == pytest.approx(41e-6 * eager.dense.kernels() + 41e-6 * 94)
    assert 0.05 < eager.eager_step_s < 0.08  # ~1,600 kernels of Qwen3-235B-A22B at TP8
    for shape, extra in ((_shape(prefill=600, decode=0), eager.eager_step_s),
                         (_shape(prefill=0, decode=16), 0.0),  # a graph replay
                         (_shape(prefill=0, decode=300), eager.eager_step_s)):  # above 256
        assert eager.step_time(shape) - plain.step_time(shape) == pytest.approx(extra)
