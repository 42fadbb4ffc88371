# SPDX-License-Identifier: Apache-2.0
"""Step-cost tables of inference: token grid, exact dense memo, attention fits and the engine
seconds (with a synthetic engine whose answers are known in closed form)."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.ops import AttentionSpec
from analytical.roofline import roofline_time
from simulate.engines import Estimate
from simulate.inference.layer_ops import inference_sharding, lm_head_ops, step_ops
from simulate.inference.step_cost import (
    DenseCost,
    MeteredCost,
    build_tables,
    decode_floor_s,
    token_grid,
)
from simulate.serving.state import StepShape

A_SEQ, B_KV, PAIR = 3e-6, 2e-9, 1e-12  # synthetic decode and prefill attention laws


class _Estimator:
    """Attention: exactly a*B + b*B*kv (decode) and PAIR per causal pair (prefill); every other
    operator 1 ns per FLOP-free op plus FLOPs / 1e15, from engine "store" for GEMMs. Records the
    size of each batched call in ``calls``."""

    def __init__(self, calls: list[int]) -> None:
        self.calls = calls

    def estimate_many(self, ops):
        self.calls.append(len(ops))
        return [_answer(op) for op in ops]


def _answer(op) -> Estimate:
    if isinstance(op, AttentionSpec) and op.phase == "decode":
        return Estimate(latency_s=A_SEQ * op.batch + B_KV * op.batch * op.kv_len,
                        engine="roofline")
    if isinstance(op, AttentionSpec):
        return Estimate(latency_s=PAIR * op.score_pairs * op.batch, engine="xgboost")
    return Estimate(latency_s=1e-9 + op.flops / 1e15,
                    engine="store" if op.family == "gemm" else "roofline")


def _tables(calls=None, **kw):
    model = load_model("llama-3-8b")
    shard = inference_sharding(tp=2, pp=kw.pop("pp", 1), gpus_per_node=8)
    return model, shard, build_tables(model, get_hardware("h100-sxm"), shard,
                                      weight_dtype=DType.BF16, kv_dtype=DType.BF16,
                                      estimator=_Estimator(calls if calls is not None else []),
                                      max_tokens=2048, **kw)


def test_token_grid_is_sorted_dense_then_geometric():
    grid = token_grid(1000)
    assert grid[:6] == [1, 2, 3, 4, 6, 8] and grid[-1] == 1000 and grid == sorted(set(grid))
    assert all(b <= 1.25 * a + 1 for a, b in zip(grid[6:], grid[7:], strict=False))  # rounded
    assert token_grid(5) == [1, 2, 3, 4, 5]


def test_dense_cost_is_the_exact_sum_of_its_ops_and_memoised():
    model = load_model("llama-3-8b")
    shard = inference_sharding(tp=2, gpus_per_node=8)
    calls: list[int] = []
    dense = DenseCost(model, shard, DType.BF16, _Estimator(calls), None)
    seconds, engines = dense.get("dense", 300)
    ops = step_ops(model, tokens=300, shard=shard, weight_dtype=DType.BF16)
    expected = sum(n * _answer(op).latency_s for op, n in ops)
    assert seconds == pytest.approx(expected, rel=1e-12)
    assert sum(engines.values()) == pytest.approx(seconds, rel=1e-12)
    assert set(engines) == {"store", "roofline"}
    dense.get("dense", 300)
    assert len(calls) == 1  # memoised
    lm, _ = dense.get("lm", 4)
    assert lm == pytest.approx(sum(_answer(op).latency_s
                                   for op in lm_head_ops(model, 4, shard, DType.BF16)), rel=1e-12)
    assert dense.get("dense", 0) == (0.0, {})


def test_decode_fit_recovers_a_linear_law_and_prefill_is_exact_per_chunk():
    calls: list[int] = []
    model, _, tables = _tables(calls)
    layers = model.layers
    assert tables.decode_per_seq_s == pytest.approx(layers * A_SEQ, rel=1e-6)
    assert tables.decode_per_kv_s == pytest.approx(layers * B_KV, rel=1e-6)
    assert tables.fit_error < 1e-6
    assert tables.attention_share == {"prefill": {"xgboost": 1.0}, "decode": {"roofline": 1.0}}
    assert len(calls) == 3  # dense grid, LM head grid, attention: three batched engine calls
    # a chunk on the grid is memoised; one off it (length 1000 after a 300-token prefix) is
    # asked once, exactly: every causal pair of the chunk, no interpolation
    seconds, engines = tables.prefill.get((0, 2048))  # the grid's top (max_tokens)
    assert seconds == pytest.approx(layers * PAIR * 2048 * 2049 / 2, rel=1e-12)
    assert len(calls) == 3
    pairs = 1000 * 300 + 1000 * 1001 / 2
    assert tables.prefill.seconds([(300, 1000)] * 2) == pytest.approx(2 * layers * PAIR * pairs,
                                                                        rel=1e-12)
    assert len(calls) == 4 and engines == {"xgboost": seconds}
    tables.prefill.get((300, 1000))
    assert len(calls) == 4  # memoised


def test_step_time_and_metered_engine_seconds_agree():
    model, _, tables = _tables(pp=2)
    shape = StepShape(tokens=600, logits=9, prefill_pairs=512 * 513 / 2, prefill_chunks=1,
                      decode_seqs=8, decode_kv=8 * 1000, decode_q=1, chunks=((0, 512),))
    prefill, decode, hops = tables.attention_parts(shape)
    assert prefill == pytest.approx(shape.prefill_pairs * model.layers * PAIR, rel=1e-9)
    assert decode == pytest.approx(model.layers * (8 * A_SEQ + 8000 * B_KV), rel=1e-6)
    assert hops == pytest.approx(tables.pp_hop_s_per_token * 600) and hops > 0
    total = tables.step_time(shape)
    assert total == pytest.approx(tables.dense.get("dense", 600)[0]
                                  + tables.dense.get("lm", 9)[0] + prefill + decode + hops)
    metered = MeteredCost(tables)
    assert metered.step_time(shape) == pytest.approx(total, rel=1e-12)
    assert metered.step_time(shape) == pytest.approx(total, rel=1e-12)
    assert sum(metered.engine_seconds().values()) == pytest.approx(2 * total, rel=1e-9)


class _Learned(_Estimator):
    """Decode attention from a "learned" model: ``fixed`` + the linear law up to 2**16 cached
    tokens, then flat (a tree past its training rows); everything else as `_Estimator`."""

    def __init__(self, fixed: float) -> None:
        super().__init__([])
        self.fixed = fixed

    def estimate_many(self, ops):
        out = []
        for op in ops:
            if isinstance(op, AttentionSpec) and op.phase == "decode":
                tokens = min(op.batch * op.kv_len, 2**16)
                out.append(Estimate(latency_s=self.fixed + A_SEQ * op.batch + B_KV * tokens,
                                    engine="xgboost"))
            else:
                out.append(_answer(op))
        return out


def test_decode_fit_keeps_a_per_step_kernel_time():
    model = load_model("llama-3-8b")
    shard = inference_sharding(tp=2, gpus_per_node=8)
    tables = build_tables(model, get_hardware("h100-sxm"), shard, weight_dtype=DType.BF16,
                          kv_dtype=DType.BF16, estimator=_Learned(9e-6), max_tokens=2048)
    # a learned answer never beats the roofline's KV read, so past the plateau the fitted
    # cost per KV token stays near the roofline's, not the flat tree's
    op = AttentionSpec(batch=256, q_len=1, kv_len=32769, heads=16, kv_heads=4, head_dim=128,
                       phase="decode")
    flat = Estimate(latency_s=1e-5, engine="xgboost")
    floor = roofline_time(op, get_hardware("h100-sxm"))
    assert decode_floor_s(flat, op, get_hardware("h100-sxm")) == floor > 1e-5
    assert decode_floor_s(Estimate(latency_s=1e-5, engine="store"), op,
                          get_hardware("h100-sxm")) == 1e-5  # measured: kept
    kv = 256 * 32769
    assert tables.decode_per_kv_s * kv > 0.5 * model.layers * floor
    assert tables.decode_per_step_s > 0  # every layer's kernel at a handful of keys
    shape = StepShape(tokens=1, logits=1, prefill_pairs=0.0, prefill_chunks=0, decode_seqs=1,
                      decode_kv=128, decode_q=1)
    assert tables.attention_parts(shape)[1] >= tables.decode_per_step_s


def test_dense_cost_caps_16_bit_gemms_at_the_sustained_rate():
    """With ``hw`` a 16-bit GEMM answered faster than the hardware's sustained rate (the
    synthetic engine: 1,000 TFLOP/s, above the H100's 0.68 x 989) is priced at that rate, the
    other ops keep their answers, and a GPU whose file sets no ceiling (A100) changes nothing."""
    from analytical.ops import GemmSpec
    from simulate.sustained import sustained_floor_s

    model = load_model("llama-3-8b")
    shard = inference_sharding(tp=1, gpus_per_node=8)
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-sxm-80gb")
    assert h100.efficiency.sustained_gemm < 1 and a100.efficiency.sustained_gemm == 1
    ops = step_ops(model, tokens=4096, shard=shard, weight_dtype=DType.BF16)
    expected = sum(n * max(_answer(op).latency_s, sustained_floor_s(op, h100)) for op, n in ops)
    free = sum(n * _answer(op).latency_s for op, n in ops)
    capped = DenseCost(model, shard, DType.BF16, _Estimator([]), None, hw=h100).get(
        "dense", 4096)[0]
    assert capped == pytest.approx(expected, rel=1e-12) and capped > 1.2 * free
    gemm = next(op for op, _ in ops if isinstance(op, GemmSpec))
    assert sustained_floor_s(gemm, h100) == pytest.approx(
        gemm.flops / (h100.peak_flops(DType.BF16) * h100.efficiency.sustained_gemm))
    assert DenseCost(model, shard, DType.BF16, _Estimator([]), None, hw=a100).get(
        "dense", 4096)[0] == pytest.approx(free, rel=1e-12)
