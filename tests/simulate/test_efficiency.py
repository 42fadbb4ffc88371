# SPDX-License-Identifier: Apache-2.0
"""Framework kernel choices (`simulate.efficiency`): the attention backend each framework runs,
applied to roofline estimates only, identically in `run_training` and the search."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.ops import AttentionSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind
from simulate.efficiency import (
    attention_fraction,
    fp8_cast_nodes,
    framework_estimates,
    grad_reduce_dtype,
    power_scale,
    reduction_fraction,
)
from simulate.engines import EngineChain, EngineOptions, Estimate
from simulate.extrapolation import GEMM_SLICE_ROWS, sliced_estimates
from simulate.scenario import load_scenario
from simulate.search.training_search import search_training
from simulate.training import run_training

ENGINES = EngineOptions(use_store=False, use_predictors=False)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def _doc(framework: str, gpu: str = "h100-sxm") -> dict:
    return {"name": "x", "model": "llama-2-7b", "hardware": {"gpu": gpu, "num_gpus": 8},
            "training": {"parallel": {"dp": 8, "zero": 3, "fsdp": True}, "global_batch": 16,
                         "micro_batch": 1, "seq_len": 8192, "recompute": "full",
                         "framework": framework}}


def test_flash_attention_2_is_slower_than_cudnn_on_hopper_only():
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-sxm-80gb")
    for backward in (False, True):
        assert (attention_fraction(h100, "torchtitan", backward=backward)
                < attention_fraction(h100, "megatron", backward=backward))
        assert attention_fraction(a100, "torchtitan", backward=backward) == pytest.approx(
            a100.efficiency.attention)


@pytest.mark.parametrize("name", ["h100-nvl", "h200", "gh200", "h20", "h100-pcie"])
def test_every_hopper_part_gets_the_hopper_attention_numbers(name):
    """Gated on the file's architecture, not a name list (which once missed h100-nvl)."""
    h100 = get_hardware("h100-sxm")
    hw = get_hardware(name)
    for backward in (False, True):  # a power-limited part at its own GEMM clock (power_scale)
        assert attention_fraction(hw, "megatron", backward=backward) == pytest.approx(
            attention_fraction(h100, "megatron", backward=backward) * power_scale(hw))
    assert reduction_fraction(hw, "torchtitan", MemoryOpKind.RMSNORM) == 0.5


def test_a_calibrated_copy_of_a_hopper_file_stays_hopper():
    """`llmsim hardware calibrate --reference h100-sxm` starts from `hardware_to_dict` of the
    reference under a new name; the old name list missed such files."""
    from analytical.hardware import hardware_from_dict, hardware_to_dict

    hw = hardware_from_dict({**hardware_to_dict(get_hardware("h100-sxm")), "name": "my-h100"})
    assert attention_fraction(hw, "torchtitan", backward=False) < hw.efficiency.attention
    l40s = get_hardware("l40s")
    assert attention_fraction(l40s, "torchtitan", backward=False) == l40s.efficiency.attention


def test_only_roofline_or_another_kernels_attention_is_retimed():
    hw = get_hardware("h100-sxm")
    op = AttentionSpec(batch=1, q_len=8192, kv_len=8192, heads=32, kv_heads=8, head_dim=128)
    profiled = Estimate(latency_s=1e-3, engine="store", stack="profiled")
    trtllm = Estimate(latency_s=1e-3, engine="store", stack="trtllm")
    roof = EngineChain.from_options(hw, ENGINES).estimate(op)
    out = framework_estimates([op, op, op], [profiled, roof, trtllm], hw, "torchtitan")
    assert out[0] == profiled  # our SDPA sweep: FlashAttention-2 itself
    assert out[1].latency_s > 1.4 * roof.latency_s  # 0.55 -> 370/989 of peak
    # TensorRT-LLM's Hopper FMHA is not FlashAttention-2: the framework's own figure prices it
    assert out[2].latency_s == out[1].latency_s
    # cuDNN (Megatron-Core) keeps it; off Hopper FlashAttention-2 keeps it too
    assert framework_estimates([op], [trtllm], hw, "megatron")[0] == trtllm
    a100 = get_hardware("a100-sxm-80gb")
    assert framework_estimates([op], [trtllm], a100, "torchtitan")[0] == trtllm
    # no store holds the Triton port, on any GPU
    for gpu in (hw, a100):
        tri = framework_estimates([op], [profiled], gpu, "composer", kernel="flash-triton")[0]
        assert tri.latency_s > 1e-3 and "flash-triton" in tri.detail


def test_torchtitan_runs_slower_than_megatron_on_the_same_layout():
    tt = run_training(load_scenario(_doc("torchtitan")), use_store=False, use_predictors=False)
    mg = run_training(load_scenario(_doc("megatron")), use_store=False, use_predictors=False)
    assert tt.fits and mg.fits
    assert tt.tokens_per_s < 0.95 * mg.tokens_per_s


def test_search_equals_simulate_for_torchtitan():
    doc = _doc("torchtitan")
    doc["training"]["parallel"] = {"tp": [1, 2], "dp": [4, 8], "zero": 3, "fsdp": True}
    doc["training"]["recompute"] = ["selective", "full"]
    res = search_training(doc, executor="serial", engines=ENGINES)
    assert res.rows
    for row in res.rows:
        sc = load_scenario({"name": "x", "model": doc["model"],
                            "hardware": {"gpu": row["gpu"], "num_gpus": row["num_gpus"]},
                            "training": row["layout"]})
        want = run_training(sc, use_store=False, use_predictors=False)
        assert row["tokens_per_s"] == pytest.approx(want.tokens_per_s, rel=1e-9)


def _layer(precision: DType):
    from analytical.layer_spec import LayerPhase, Precision, Sharding, TokenBatch
    from analytical.layers import layer_ops
    from analytical.model import load_model
    return layer_ops(load_model("llama-3-8b"), Sharding(), TokenBatch(seqs=1, q_len=4096),
                     LayerPhase.TRAIN, precision=Precision(gemm=precision))


def test_fp8_casts_follow_the_framework():
    """TE fuses the QKV/FC1 input casts into the norm and keeps fp8 weights; torchao casts
    every input and weight per call; every fp8 GEMM's output gradient is cast; bf16: none."""
    fwd = _layer(DType.FP8)
    te_f, te_b = fp8_cast_nodes(fwd, "megatron")
    tt_f, tt_b = fp8_cast_nodes(fwd, "torchtitan")
    assert [n.name for n in te_f] == ["out_proj.fp8_cast_input", "mlp.down.fp8_cast_input"]
    assert len(tt_f) == 8 and len(te_b) == len(tt_b) == 4
    assert fp8_cast_nodes(_layer(DType.BF16), "torchtitan") == ([], [])


def test_fsdp_gradients_reduce_in_fp32_for_torchtitan_and_composer():
    assert grad_reduce_dtype("torchtitan", DType.BF16) == DType.FP32
    assert grad_reduce_dtype("composer", DType.BF16) == DType.FP32


def test_megatron_reduces_bf16_gradients_in_fp32_only():
    assert grad_reduce_dtype("megatron", DType.BF16) == DType.FP32
    assert grad_reduce_dtype("megatron", DType.FP16) == DType.FP16
    assert grad_reduce_dtype("nemo", DType.BF16) == DType.BF16


def test_triton_flash_attention_runs_at_the_fa2_papers_ratio():
    """FlashAttention-2 paper section 4.1: the Triton port is ~1.4x slower forward, 2x backward,
    whatever framework calls it and on any GPU."""
    for gpu in ("h100-sxm", "a100-sxm-80gb"):
        hw = get_hardware(gpu)
        for backward, ratio in ((False, 1.4), (True, 2.0)):
            fa2 = attention_fraction(hw, "composer", backward=backward)
            tri = attention_fraction(hw, "megatron", backward=backward, kernel="flash-triton")
            assert fa2 / tri == pytest.approx(ratio)


def test_flash2_kernel_runs_flash_attention_2_under_nemo():
    """NeMo-Framework-Launcher 24.01-24.07 ``NVTE_FUSED_ATTN: 0``: TE runs flash-attn 2, not
    cuDNN, so `attention: flash2` prices NeMo's attention at FlashAttention-2's Hopper figures,
    re-prices a store answer from another kernel (TensorRT-LLM's FMHA) and slows the step."""
    h100 = get_hardware("h100-sxm")
    for backward in (False, True):
        fa2 = attention_fraction(h100, "nemo", backward=backward, kernel="flash2")
        assert fa2 == attention_fraction(h100, "torchtitan", backward=backward)
        assert fa2 < 0.7 * attention_fraction(h100, "nemo", backward=backward)
    op = AttentionSpec(batch=1, q_len=8192, kv_len=8192, heads=32, kv_heads=8, head_dim=128)
    trtllm = Estimate(latency_s=1e-3, engine="store", stack="trtllm")
    assert framework_estimates([op], [trtllm], h100, "nemo")[0] == trtllm
    assert framework_estimates([op], [trtllm], h100, "nemo", kernel="flash2")[0] != trtllm
    doc = _doc("nemo")
    doc["training"]["attention"] = "flash2"
    slow = run_training(load_scenario(doc), use_store=False, use_predictors=False)
    fast = run_training(load_scenario(_doc("nemo")), use_store=False, use_predictors=False)
    assert slow.tokens_per_s < 0.95 * fast.tokens_per_s


def test_search_equals_simulate_with_triton_attention():
    doc = _doc("composer", gpu="a100-sxm-80gb")
    doc["training"]["attention"] = "flash-triton"
    slow = run_training(load_scenario(doc), use_store=False, use_predictors=False)
    fast = run_training(load_scenario(_doc("composer", gpu="a100-sxm-80gb")), use_store=False, use_predictors=False)
    assert slow.tokens_per_s < 0.95 * fast.tokens_per_s
    doc["training"]["parallel"] = {"dp": [8], "zero": 3, "fsdp": True}
    res = search_training(doc, executor="serial", engines=ENGINES)
    assert res.rows
    want = {r["layout"]["micro_batch"]: r["tokens_per_s"] for r in res.rows}
    assert want[1] == pytest.approx(slow.tokens_per_s, rel=1e-9)


def test_pytorch_reductions_are_slower_on_hopper_only():
    h100, a100 = get_hardware("h100-sxm"), get_hardware("a100-sxm-80gb")
    op = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=8192, cols=4096, dtype=DType.BF16)
    roof = EngineChain.from_options(h100, ENGINES).estimate(op)
    tt = framework_estimates([op], [roof], h100, "torchtitan")[0]
    assert tt.latency_s > 1.8 * roof.latency_s  # ~50% of a hand-written kernel's bandwidth
    assert framework_estimates([op], [roof], h100, "megatron")[0] == roof
    assert reduction_fraction(a100, "torchtitan", MemoryOpKind.RMSNORM) == 1.0
    assert reduction_fraction(h100, "torchtitan", MemoryOpKind.COPY) == 1.0


def test_composer_layernorm_runs_at_atens_measured_fraction_on_every_gpu():
    """Composer's MPT calls ATen's F.layer_norm eagerly: its backward (two kernels) is priced at
    the store's measured H100 fraction on Ampere too; other frameworks keep their fused norm."""
    a100 = get_hardware("a100-sxm-40gb")
    chain = EngineChain.from_options(a100, ENGINES)
    for backward, floor in ((False, 1.5), (True, 2.5)):
        op = MemoryBoundSpec(kind=MemoryOpKind.LAYERNORM, rows=32768, cols=4096,
                             dtype=DType.BF16, backward=backward)
        roof = chain.estimate(op)
        eager = framework_estimates([op], [roof], a100, "composer")[0]
        assert eager.latency_s > floor * roof.latency_s
        assert framework_estimates([op], [roof], a100, "megatron")[0] == roof
    assert reduction_fraction(a100, "composer", MemoryOpKind.GELU, backward=True) == 1.0


def test_head_dim_64_costs_cudnn_more_than_flash_attention_2():
    """FA3 paper Fig. 5 (causal, 8k): head dim 64 runs 0.72 of 128's rate on cuDNN, 0.89 on
    FlashAttention-2, so the retimed roofline keeps each backend's own head-dim penalty."""
    h100 = get_hardware("h100-sxm")
    att = dict(batch=1, q_len=8192, kv_len=8192, heads=32, kv_heads=8)
    for backward in (False, True):
        ratios = {fw: attention_fraction(h100, fw, backward=backward,
                                         op=AttentionSpec(head_dim=64, **att))
                  / attention_fraction(h100, fw, backward=backward,
                                       op=AttentionSpec(head_dim=128, **att))
                  for fw in ("megatron", "torchtitan")}
        assert ratios["megatron"] == pytest.approx(379 / 529)
        assert ratios["torchtitan"] == pytest.approx(295 / 333)
    op = AttentionSpec(head_dim=64, **att)
    roof = EngineChain(h100, use_store=False, use_predictors=False).estimate_many([op])
    (cudnn,) = framework_estimates([op], roof, h100, "megatron")
    (fa2,) = framework_estimates([op], roof, h100, "torchtitan")
    assert cudnn.latency_s < fa2.latency_s  # cuDNN still faster per FLOP at head dim 64


def test_sustained_gemm_caps_16_bit_gemm_rate():
    """`efficiency.sustained_gemm` is a ceiling on a 16-bit GEMM's rate in a training step (the
    store timed kernels one at a time at boost clock): a faster measured or learned time is
    raised to it, a slower one and other dtypes and ops are left alone, and a GPU whose file
    does not set it keeps its times."""
    from analytical.hardware import hardware_from_dict, hardware_to_dict
    from analytical.ops import GemmSpec

    base = hardware_to_dict(get_hardware("h100-sxm"))
    base["efficiency"].pop("sustained_gemm", None)
    base["efficiency"].pop("sustained_gemm_fp8", None)
    plain = hardware_from_dict({**base, "name": "plain"})
    hot = hardware_from_dict({**base, "name": "hot",
                              "efficiency": {**base["efficiency"], "sustained_gemm": 0.5}})
    assert hardware_to_dict(hot)["efficiency"]["sustained_gemm"] == 0.5
    gemm = GemmSpec(m=8192, n=8192, k=8192, dtype=DType.BF16)
    fp8 = GemmSpec(m=8192, n=8192, k=8192, dtype=DType.FP8)
    ceiling = gemm.flops / (hot.peak_flops(DType.BF16) * 0.5)
    norm = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=8192, cols=8192, dtype=DType.BF16)
    fast = Estimate(latency_s=0.5 * ceiling, engine="xgboost")
    slow = Estimate(latency_s=2.0 * ceiling, engine="store")
    tiny = Estimate(latency_s=1e-6, engine="store")
    out = framework_estimates([gemm, gemm, fp8, norm], [fast, slow, fast, tiny], hot, "megatron")
    assert out[0].latency_s == pytest.approx(ceiling)
    assert out[1:] == [slow, fast, tiny]
    roof = EngineChain.from_options(hot, ENGINES).estimate(gemm)  # 0.75 of peak, over 0.5
    assert framework_estimates([gemm], [roof], hot, "megatron")[0].latency_s == pytest.approx(
        ceiling)
    assert framework_estimates([gemm], [fast], plain, "megatron")[0] == fast


def test_sustained_gemm_fp8_caps_fp8_gemm_rate_apart_from_bf16():
    """`efficiency.sustained_gemm_fp8` is the fp8 GEMMs' own ceiling, a fraction of the fp8
    peak: an fp8 GEMM priced faster is raised to it, a bf16 one keeps the bf16 ceiling, and the
    key round-trips through the hardware file."""
    from analytical.hardware import hardware_from_dict, hardware_to_dict
    from analytical.ops import GemmSpec

    base = hardware_to_dict(get_hardware("h100-sxm"))
    base["efficiency"].pop("sustained_gemm_fp8")
    hot = hardware_from_dict({**base, "name": "hot-fp8",
                              "efficiency": {**base["efficiency"], "sustained_gemm_fp8": 0.5}})
    assert hardware_to_dict(hot)["efficiency"]["sustained_gemm_fp8"] == 0.5
    assert "sustained_gemm_fp8" not in hardware_to_dict(hardware_from_dict(base))["efficiency"]
    fp8 = GemmSpec(m=8192, n=8192, k=8192, dtype=DType.FP8)
    bf16 = GemmSpec(m=8192, n=8192, k=8192, dtype=DType.BF16)
    fp8_ceiling = fp8.flops / (hot.peak_flops(DType.FP8) * 0.5)
    bf16_ceiling = bf16.flops / (hot.peak_flops(DType.BF16) * hot.efficiency.sustained_gemm)
    fast = Estimate(latency_s=1e-6, engine="xgboost")
    out = framework_estimates([fp8, bf16], [fast, fast], hot, "megatron")
    assert out[0].latency_s == pytest.approx(fp8_ceiling)
    assert out[1].latency_s == pytest.approx(bf16_ceiling)
    plain = hardware_from_dict({**base, "name": "plain-fp8"})
    assert framework_estimates([fp8], [fast], plain, "megatron")[0] == fast


def test_sustained_gemm_above_one_is_rejected():
    from analytical.errors import SpecError
    from analytical.hardware import hardware_from_dict, hardware_to_dict

    base = hardware_to_dict(get_hardware("h100-sxm"))
    with pytest.raises(SpecError, match="sustained_gemm"):
        hardware_from_dict({**base, "efficiency": {**base["efficiency"], "sustained_gemm": 1.1}})


def test_training_step_on_h100_pays_the_sustained_ceiling():
    """The catalog H100 SXM carries the H200 measurement's ceiling (same die, clock and 700 W
    limit), and `run_training` prices its GEMMs through it: a copy of the file without the key
    trains faster, the bf16 roofline's 0.75 being above the 0.68 ceiling."""
    from analytical.hardware import hardware_from_dict, hardware_to_dict

    h100 = get_hardware("h100-sxm")
    assert h100.efficiency.sustained_gemm == get_hardware("h200").efficiency.sustained_gemm < 1
    raw = hardware_to_dict(h100)
    raw["efficiency"].pop("sustained_gemm")
    unbounded = hardware_from_dict(raw)
    scenario = load_scenario(_doc("megatron"))
    capped = run_training(scenario, chain=EngineChain.from_options(h100, ENGINES))
    free = run_training(scenario, chain=EngineChain.from_options(unbounded, ENGINES))
    assert capped.fits and free.fits
    assert capped.iteration_time_s > 1.02 * free.iteration_time_s


class _ShapeChain:
    """A stand-in engine chain: GEMMs over 8,192 rows come back at a quarter of the rate per
    row (a learned model's extrapolation), the ``measured`` key from the store."""

    def __init__(self, measured: str = "") -> None:
        self.measured = measured

    def estimate_many(self, ops):
        return [Estimate(latency_s=op.m * (4e-9 if op.m > 8192 else 1e-9),
                         engine="store" if op.key == self.measured else "xgboost")
                for op in ops]


def test_gemm_rows_beyond_the_slice_are_priced_as_slices():
    small, big, odd = (GemmSpec(m=m, n=4096, k=4096) for m in (GEMM_SLICE_ROWS, 65536, 20000))
    est = sliced_estimates(_ShapeChain(), [small, big, odd])
    assert est[0].latency_s == pytest.approx(8192e-9)
    assert est[1].latency_s == pytest.approx(8 * 8192e-9)  # 8 slices of 8,192 rows
    assert est[2].latency_s == pytest.approx(3 * 6667e-9)  # 3 slices of 6,667 rows
    assert "row slices" in est[1].detail
    # a measured shape is its own answer (as is the roofline's, linear in m)
    kept = sliced_estimates(_ShapeChain(measured=big.key), [big])
    assert kept[0].latency_s == pytest.approx(65536 * 4e-9) and kept[0].engine == "store"


class _RateChain:
    """A stand-in chain: attention at 100 TFLOP/s up to 16,384 queries, a learned model's wild
    1,000 beyond it, and the store for the ``measured`` key."""

    def __init__(self, measured: str = "") -> None:
        self.measured = measured

    def estimate_many(self, ops):
        return [Estimate(latency_s=op.flops / (1e15 if op.q_len > 16384 else 1e14),
                         engine="store" if op.key == self.measured else "xgboost")
                for op in ops]


def test_attention_beyond_the_sweeps_runs_at_the_largest_measured_rate():
    long = AttentionSpec(batch=1, q_len=65536, kv_len=65536, heads=32, kv_heads=8, head_dim=128)
    (est,) = sliced_estimates(_RateChain(), [long])
    assert est.latency_s == pytest.approx(long.flops / 1e14)
    assert "16384 queries" in est.detail
    (kept,) = sliced_estimates(_RateChain(measured=long.key), [long])
    assert kept.latency_s == pytest.approx(long.flops / 1e15) and kept.engine == "store"
