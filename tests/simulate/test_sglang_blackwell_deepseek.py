# SPDX-License-Identifier: Apache-2.0
"""SGLang 0.5.6's defaults on Blackwell for DeepSeek-V3/R1 (datasets/engines/sglang.yaml): its
block-scaled fp8 linear layers run DeepGEMM behind a per-token-group quantization
(`fp8_gemm_vs_bf16`, AIConfigurator's SGLang B200 table), and the TP all-reduce carries the
residual add and RMSNorm (`allreduce_norm_fusion`, FlashInfer's all-reduce fusion)."""

from __future__ import annotations

import csv
from collections.abc import Sequence

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.ops import CollectiveSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind, OpSpec
from simulate.engines import Estimate
from simulate.inference.layer_ops import inference_sharding, step_ops
from simulate.inference.step_cost import DenseCost
from simulate.serving.engine_presets import REPO_ROOT, engine_preset

TABLE = REPO_ROOT / "datasets/measurements/aiconfigurator/b200/sglang-fp8-block/fp8_block_gemm.csv"


def _preset(gpu: str, engine: str = "sglang", tp: int = 8):
    hw = get_hardware(gpu)
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name, tp=tp)


def _measured_ratio(m: int, n: int, k: int) -> float:
    seconds: dict[str, float] = {}
    with TABLE.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if (int(row["m"]), int(row["n"]), int(row["k"])) == (m, n, k):
                seconds[row["kernel"]] = float(row["seconds"])
    return seconds["fp8_block_deepgemm"] / seconds["bf16"]


def test_sglang_prices_fp8_gemms_from_the_block_scaled_table_on_blackwell_only() -> None:
    ratios = _preset("b200").fp8_vs_bf16(get_hardware("b200").architecture)
    assert ratios.shapes and not ratios.points
    q_a = GemmSpec(m=1, n=1536, k=7168, dtype=DType.FP8)  # DeepSeek-V3's q_a_proj, replicated
    assert ratios.ratio(q_a) == pytest.approx(_measured_ratio(1, 1536, 7168), rel=1e-9)
    o_proj = GemmSpec(m=1, n=7168, k=2048, dtype=DType.FP8)  # o_proj at TP 8
    assert ratios.ratio(o_proj) == pytest.approx(_measured_ratio(1, 7168, 2048), rel=1e-9)
    assert ratios.ratio(GemmSpec(m=1, n=1536, k=7168, dtype=DType.BF16)) is None
    for gpu in ("h100-sxm", "h200"):  # measured on B200 only
        assert not _preset(gpu).fp8_vs_bf16(get_hardware(gpu).architecture)
    assert not _preset("b200", "vllm").fp8_vs_bf16("blackwell")


class _ByDtype:
    """bf16 GEMMs answer 10 us, fp8 GEMMs 20 us (the store's TensorRT-LLM rows), else 1 us."""

    def estimate_many(self, ops: Sequence[OpSpec]) -> Sequence[Estimate]:
        def one(op: OpSpec) -> float:
            if isinstance(op, GemmSpec) and op.batch == 1:
                return 20e-6 if op.dtype == DType.FP8 else 10e-6
            return 1e-6
        return [Estimate(latency_s=one(op), engine="store") for op in ops]


def test_a_deepseek_decode_step_takes_bf16_times_the_measured_ratio() -> None:
    model = load_model("deepseek-v3")
    shard = inference_sharding(tp=8, gpus_per_node=8)
    ratios = _preset("b200").fp8_vs_bf16("blackwell")
    plain = DenseCost(model, shard, DType.FP8, _ByDtype(), None)
    priced = DenseCost(model, shard, DType.FP8, _ByDtype(), None, fp8_vs_bf16=ratios)
    fp8 = [(op, n) for op, n in step_ops(model, tokens=1, shard=shard, weight_dtype=DType.FP8)
           if isinstance(op, GemmSpec) and op.dtype == DType.FP8 and op.batch == 1]
    expected = sum(n * (10e-6 * (ratios.ratio(op) or 0.0) - 20e-6) for op, n in fp8)
    assert fp8 and expected != 0.0
    assert priced.get("dense", 1)[0] - plain.get("dense", 1)[0] == pytest.approx(expected)


def _kinds(gpu: str, model: str, tokens: int) -> dict[str, float]:
    spec = load_model(model)
    shard = inference_sharding(tp=8, gpus_per_node=8)
    out: dict[str, float] = {}
    for op, n in step_ops(spec, tokens=tokens, shard=shard, weight_dtype=DType.FP8,
                          fusions=_preset(gpu).fusions()):
        if isinstance(op, (MemoryBoundSpec, CollectiveSpec)):
            out[op.kind.value] = out.get(op.kind.value, 0.0) + n
    return out


def test_flashinfer_allreduce_fusion_on_b200_for_deepseek_up_to_2048_tokens() -> None:
    fusions = _preset("b200").fusions()
    model = load_model("deepseek-v3")
    shard = inference_sharding(tp=8, gpus_per_node=8)
    assert fusions.allreduce_norm(model, shard, 1) and fusions.allreduce_norm(model, shard, 2048)
    assert not fusions.allreduce_norm(model, shard, 2049)
    assert not fusions.allreduce_norm(model, inference_sharding(tp=1), 1)
    assert not fusions.allreduce_norm(load_model("qwen3-235b-a22b"), shard, 1)
    assert not _preset("h200").fusions().allreduce_norm(model, shard, 1)
    fused, plain = _kinds("b200", "deepseek-v3", 1), _kinds("h200", "deepseek-v3", 1)
    assert fused["all_reduce"] == plain["all_reduce"]
    assert MemoryOpKind.ADD.value not in fused and plain[MemoryOpKind.ADD.value] > 0
    # the layer's two hidden-size norms go into the all-reduce; MLA's q / kv norms stay
    assert fused[MemoryOpKind.RMSNORM.value] < plain[MemoryOpKind.RMSNORM.value]
    # above 2048 tokens: NCCL, then SGLang's fused add + RMSNorm (layernorm(x, residual))
    big, big_plain = _kinds("b200", "deepseek-v3", 4096), _kinds("h200", "deepseek-v3", 4096)
    assert MemoryOpKind.ADD.value not in big
    assert big[MemoryOpKind.RMSNORM.value] == big_plain[MemoryOpKind.RMSNORM.value]


def test_on_blackwell_the_quantization_is_priced_once_but_still_launches() -> None:
    """The table's timed op is quantization + DeepGEMM: no separate pass priced on B200 (a
    copy of k x 5 / 4 columns per fp8 GEMM input on Hopper), its kernel counted as a launch."""
    model = load_model("deepseek-v3")
    shard = inference_sharding(tp=8, gpus_per_node=8)
    b200, h200 = _preset("b200").fusions(), _preset("h200").fusions()
    assert b200.act_quant_bytes == 0.0 and b200.act_quant_launches
    assert h200.act_quant_bytes == 5.0 and not h200.act_quant_launches

    def copies(fusions) -> float:
        return sum(n for op, n in step_ops(model, tokens=1, shard=shard, weight_dtype=DType.FP8,
                                           fusions=fusions)
                   if isinstance(op, MemoryBoundSpec) and op.kind == MemoryOpKind.COPY)

    fp8 = sum(n for op, n in step_ops(model, tokens=1, shard=shard, weight_dtype=DType.FP8)
              if isinstance(op, GemmSpec) and op.dtype == DType.FP8 and op.batch == 1)
    assert copies(h200) - copies(b200) == fp8 > 0
    cost = DenseCost(model, shard, DType.FP8, _ByDtype(), None, fusions=b200)
    ops = [n for part in ("dense", "lm") for _, n in cost._ops(part, 1)]
    assert cost.kernels() == sum(ops) + fp8
