# SPDX-License-Identifier: Apache-2.0
"""SGLang on Blackwell runs a block-scaled fp8 MoE layer as FlashInfer's fused
trtllm_fp8_block_scale_moe; llmsim prices it from AIConfigurator's measured table
(datasets/engines/sglang.yaml ``fused_moe_table``) in place of the ops it replaces."""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Sequence

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.ops import GemmSpec, MoESpec, OpSpec
from simulate.engines import Estimate
from simulate.inference.fused_moe import FusedMoeOp
from simulate.inference.layer_ops import inference_sharding
from simulate.inference.step_cost import DenseCost
from simulate.serving.engine_presets import REPO_ROOT, engine_preset

TABLE = REPO_ROOT / ("datasets/measurements/aiconfigurator/b200/sglang-fp8-block-moe/"
                     "fp8_block_moe.csv")


def _preset(gpu: str, engine: str = "sglang", tp: int = 8):
    hw = get_hardware(gpu)
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name, tp=tp)


def _measured(hidden: int, tokens: int, tp: int = 8, ep: int = 1) -> float:
    with TABLE.open(newline="") as fh:
        for row in csv.DictReader(fh):
            if (int(row["hidden"]), int(row["tokens"]), int(row["tp"]), int(row["ep"]),
                    row["distribution"]) == (hidden, tokens, tp, ep, "power_law_1.01"):
                return float(row["seconds"])
    raise AssertionError("row not in the table")


class _Flat:
    """Every op answers 1 us (the fused MoE's price comes from the table, not from here)."""

    def estimate_many(self, ops: Sequence[OpSpec]) -> Sequence[Estimate]:
        return [Estimate(latency_s=1e-6, engine="store") for _ in ops]


def _cost(model: str, gpu: str, weight_dtype: DType = DType.FP8, engine: str = "sglang"
          ) -> DenseCost:
    preset = _preset(gpu, engine)
    return DenseCost(load_model(model), inference_sharding(tp=8, gpus_per_node=8), weight_dtype,
                     _Flat(), None, fusions=preset.fusions(), fused_moe=preset.fused_moe)


def _tally(ops: Sequence[tuple[OpSpec, float]]) -> Counter[OpSpec]:
    out: Counter[OpSpec] = Counter()
    for op, n in ops:
        out[op] += int(n)
    return out


def _fused(cost: DenseCost, tokens: int) -> list[tuple[FusedMoeOp, float, float]]:
    return [(op, n, s) for _, op, n, s, _ in cost.priced_ops("dense", [tokens])
            if isinstance(op, FusedMoeOp)]


@pytest.mark.parametrize("tokens", [1, 1024])
def test_deepseek_moe_layer_on_b200_is_the_tables_fused_kernel(tokens: int) -> None:
    model = load_model("deepseek-v3")
    cost = _cost("deepseek-v3", "b200")
    [(op, n, seconds)] = _fused(cost, tokens)
    assert (op.tokens, op.hidden, op.inter, op.experts, op.top_k) == (tokens, 7168, 2048, 256, 8)
    assert n == model.moe_layers and seconds == pytest.approx(_measured(7168, tokens))
    # no per-op routed experts left: no dispatch / combine, no grouped expert GEMM
    fused = cost._ops("dense", tokens)
    assert not any(isinstance(o, MoESpec) or (isinstance(o, GemmSpec) and o.batch > 1)
                   for o, _ in fused)
    # exactly dispatch, the two expert GEMMs, the activation and combine per MoE layer go
    plain = cost._ops("dense", tokens, fused=False)
    gone = _tally(plain)
    gone.subtract(_tally(fused))
    assert min(gone.values()) >= 0 and sum(gone.values()) == 5 * model.moe_layers
    # 1 us per op: the step moved by exactly the table's time less the ops it replaced
    priced = cost.get("dense", tokens)[0]
    assert priced == pytest.approx(sum(n for _, n in fused) * 1e-6 + n * seconds)


def test_launches_count_the_replaced_ops_and_the_input_quantization() -> None:
    model = load_model("deepseek-v3")
    with_table, without = _cost("deepseek-v3", "b200"), _cost("deepseek-v3", "b200")
    without._fused_moe = type(with_table._fused_moe)()
    assert with_table.kernels() == without.kernels() + model.moe_layers


def test_other_gpus_engines_dtypes_and_token_counts_keep_per_op_pricing() -> None:
    assert not _fused(_cost("deepseek-v3", "h200"), 1)  # Hopper: no table
    assert not _fused(_cost("deepseek-v3", "b200", engine="vllm"), 1)
    assert not _fused(_cost("deepseek-v3", "b200"), 20000)  # past the measured 16,384
    assert any(isinstance(o, MoESpec) for o, _ in _cost("deepseek-v3", "b200")._ops("dense",
                                                                                    20000))
    # a bf16 Qwen3 checkpoint runs SGLang's Triton fused MoE: not this table
    assert not _fused(_cost("qwen3-235b-a22b", "b200", DType.BF16), 1)
    [(op, _, seconds)] = _fused(_cost("qwen3-235b-a22b", "b200"), 1)  # its fp8 checkpoint
    assert (op.hidden, op.inter, op.experts) == (4096, 1536, 128)
    assert seconds == pytest.approx(_measured(4096, 1))
