# SPDX-License-Identifier: Apache-2.0
"""PyTorch-native kernels outside the fused graph (`simulate.torch_kernels`): eager composite
traffic and torchao's rowwise fp8 passes, switched by `training.compile` / `fp8_recipe`."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.layer_edges import UNFUSED_LOSS_PASSES
from analytical.layer_spec import LayerPhase, Precision, Sharding, TokenBatch
from analytical.layers import layer_ops
from analytical.model import load_model
from analytical.ops import MemoryBoundSpec, MemoryOpKind
from simulate.efficiency import fp8_cast_nodes, framework_estimates
from simulate.engines import EngineChain, EngineOptions, Estimate
from simulate.scenario import load_scenario
from simulate.search.training_search import search_training
from simulate.torch_kernels import eager_traffic, unfused_loss_nodes
from simulate.training import run_training

ENGINES = EngineOptions(use_store=False, use_predictors=False)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def _doc(framework: str, **training) -> dict:
    return {"name": "x", "model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
            "training": {"parallel": {"dp": 8, "zero": 3, "fsdp": True}, "global_batch": 16,
                         "micro_batch": 1, "seq_len": 8192, "recompute": "selective",
                         "framework": framework, **training}}


def _tps(doc: dict) -> float:
    out = run_training(load_scenario(doc), use_store=False, use_predictors=False).tokens_per_s
    assert out is not None
    return out


def test_eager_traffic_only_for_composite_ops_of_pytorch_native_frameworks():
    assert eager_traffic("torchtitan", False, MemoryOpKind.RMSNORM, backward=False) == 9.0
    assert eager_traffic("torchtitan", False, MemoryOpKind.RMSNORM, backward=True) > 9.0
    assert eager_traffic("composer", False, MemoryOpKind.ROTARY, backward=False) == 5.0
    assert eager_traffic("torchtitan", True, MemoryOpKind.RMSNORM, backward=False) == 1.0
    assert eager_traffic("megatron", False, MemoryOpKind.RMSNORM, backward=False) == 1.0
    assert eager_traffic("torchtitan", False, MemoryOpKind.LAYERNORM, backward=False) == 1.0


def test_eager_rmsnorm_moves_nine_times_the_fused_traffic():
    hw = get_hardware("h100-sxm")
    op = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=8192, cols=4096, dtype=DType.BF16)
    roof = EngineChain.from_options(hw, ENGINES).estimate(op)
    eager = framework_estimates([op], [roof], hw, "torchtitan", compiled=False)[0]
    alpha = hw.efficiency.kernel_latency_s  # the roofline's fixed time of one kernel
    assert eager.latency_s == pytest.approx(9.0 * (roof.latency_s - alpha) + alpha, rel=1e-6)


def test_a_measured_fused_rmsnorm_is_repriced_as_the_eager_composite():
    """The store's RMSNorm is one fused kernel (`F.rms_norm`); eager torchtitan runs the
    composite, so its answer is re-priced as the roofline of 9x the traffic, as a roofline
    answer is. Compiled, or a composite the store measured as such (SwiGLU), it stands."""
    hw = get_hardware("h100-sxm")
    norm = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=8192, cols=4096, dtype=DType.BF16)
    glu = MemoryBoundSpec(kind=MemoryOpKind.SWIGLU, rows=8192, cols=4096, dtype=DType.BF16)
    roof = EngineChain.from_options(hw, ENGINES).estimate(norm)
    measured = Estimate(latency_s=5e-5, engine="store")
    eager = framework_estimates([norm], [measured], hw, "torchtitan", compiled=False)[0]
    alpha = hw.efficiency.kernel_latency_s
    assert eager.latency_s == pytest.approx(9.0 * (roof.latency_s - alpha) + alpha, rel=1e-6)
    assert framework_estimates([norm], [measured], hw, "torchtitan")[0] == measured
    assert framework_estimates([norm], [measured], hw, "megatron", compiled=False)[0] == measured
    assert framework_estimates([glu], [measured], hw, "torchtitan", compiled=False)[0] == measured


def test_eager_torchtitan_is_slower_and_megatron_does_not_care():
    compiled, eager = _tps(_doc("torchtitan")), _tps(_doc("torchtitan", compile=False))
    assert eager < 0.95 * compiled
    assert _tps(_doc("megatron", compile=False)) == pytest.approx(_tps(_doc("megatron")))


def test_search_times_eager_as_simulate_does():
    doc = _doc("torchtitan", compile=False)
    want = _tps(doc)
    doc["training"]["parallel"] = {"dp": [8], "zero": 3, "fsdp": True}
    res = search_training(doc, executor="serial", engines=ENGINES)
    got = {r["layout"]["micro_batch"]: r["tokens_per_s"] for r in res.rows}
    assert got[1] == pytest.approx(want, rel=1e-9)


def test_rowwise_adds_five_backward_passes_per_fp8_weight_gemm():
    model = load_model("llama-3-8b")
    fwd = layer_ops(model, Sharding(), TokenBatch(seqs=1, q_len=4096), LayerPhase.TRAIN,
                    precision=Precision(gemm=DType.FP8))
    tw_f, tw_b = fp8_cast_nodes(fwd, "torchtitan")
    rw_f, rw_b = fp8_cast_nodes(fwd, "torchtitan", "rowwise")
    assert rw_f == tw_f
    assert len(rw_b) - len(tw_b) == 5 * len(tw_b)  # one grad cast per GEMM in tensorwise
    bf16 = layer_ops(model, Sharding(), TokenBatch(seqs=1, q_len=4096), LayerPhase.TRAIN)
    assert fp8_cast_nodes(bf16, "torchtitan", "rowwise") == ([], [])
    # torchao's recipe: Transformer Engine frameworks keep their one cast per tensor
    assert fp8_cast_nodes(fwd, "megatron", "rowwise") == fp8_cast_nodes(fwd, "megatron")


def test_rowwise_fp8_is_slower_than_tensorwise():
    tensorwise = _tps(_doc("torchtitan", precision="fp8"))
    assert _tps(_doc("torchtitan", precision="fp8", fp8_recipe="rowwise")) < 0.95 * tensorwise


def _head(vocab: int = 131072, rows: int = 4096) -> list:
    from analytical.layer_spec import Node
    return [Node(name="cross_entropy", op=MemoryBoundSpec(kind=MemoryOpKind.CROSS_ENTROPY,
                                                          rows=rows, cols=vocab, dtype=DType.FP32))]


def test_megatron_unfused_cross_entropy_adds_34_and_6_bytes_per_logit():
    fwd, bwd = unfused_loss_nodes("megatron", None, _head())
    assert [n.count for n in fwd] == [UNFUSED_LOSS_PASSES[0]] and len(bwd) == 1
    assert fwd[0].count * 8 == 34 and bwd[0].count * 8 == 6  # fp32 copy: 8 bytes per element
    assert fwd[0].op.rows == 4096 and fwd[0].op.cols == 131072
    assert unfused_loss_nodes("megatron", True, _head()) == ([], [])
    # NeMo's default is not read (left fused); a stated false runs the same Megatron-Core code
    assert unfused_loss_nodes("nemo", None, _head()) == ([], [])
    assert unfused_loss_nodes("nemo", False, _head()) == (fwd, bwd)
    for fw in ("torchtitan", "composer", "deepspeed"):  # their own loss paths
        assert unfused_loss_nodes(fw, False, _head()) == ([], [])


def test_unfused_cross_entropy_slows_a_large_vocab_megatron_run():
    doc = {"name": "x", "model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"parallel": {"dp": 8, "zero": 1}, "global_batch": 8, "micro_batch": 1,
                        "seq_len": 4096}}
    unfused = _tps(doc)
    doc["training"]["cross_entropy_fusion"] = True
    fused = _tps(doc)
    assert 0.9 * fused < unfused < 0.995 * fused  # 128k vocab: a few % of an 8B step
    doc["training"]["framework"] = "nemo"
    nemo_fused = _tps(doc)
    doc["training"].pop("cross_entropy_fusion")
    assert _tps(doc) == pytest.approx(nemo_fused)


@pytest.mark.parametrize("field,value", [("compile", "no"), ("fp8_recipe", "blockwise"),
                                         ("cross_entropy_fusion", "yes"),
                                         ("compile_loss", 1)])
def test_bad_fields_name_themselves(field, value):
    with pytest.raises(SpecError, match=f"training.{field}"):
        load_scenario(_doc("torchtitan", **{field: value}))


def test_power_limited_hopper_runs_attention_at_its_gemm_clock():
    """The FlashAttention figures are the 700 W SXM's; the 500 W part's measured GEMM efficiency
    (0.63 against 0.75) scales its attention too; other Hopper parts at the SXM's 0.75 keep 1."""
    from simulate.efficiency import attention_fraction, power_scale

    sxm, limited = get_hardware("h100-sxm"), get_hardware("h100-hbm2e-96gb")
    assert power_scale(sxm) == 1.0 and power_scale(get_hardware("h200")) == 1.0
    assert power_scale(limited) == pytest.approx(0.63 / 0.75)
    assert attention_fraction(limited, "torchtitan", backward=True) == pytest.approx(
        0.84 * attention_fraction(sxm, "torchtitan", backward=True))


def test_llm_foundry_flash_path_unpads_around_attention_only():
    """Composer + flash: gathers of q, k, v and the pad of the output (10 bf16 copies of a
    [tokens, heads*head_dim] tensor for MHA over forward and backward); Triton path, other
    frameworks: nothing."""
    from simulate.torch_kernels import unpad_nodes

    fwd = layer_ops(load_model("llama-2-7b"), Sharding(), TokenBatch(seqs=2, q_len=2048),
                    LayerPhase.TRAIN)
    f, b = unpad_nodes(fwd, "composer", "flash")
    assert sum(n.count for n in f) + sum(n.count for n in b) == pytest.approx(10.0)
    assert all(n.op.rows == 4096 and n.op.cols == 4096 for n in (*f, *b))
    assert unpad_nodes(fwd, "composer", "flash-triton") == ([], [])
    assert unpad_nodes(fwd, "torchtitan", "flash") == ([], [])


def test_pytorch_native_optimizer_steps_cost_their_extra_passes():
    """torchtitan's foreach AdamW and Composer's per-parameter DecoupledAdamW, each with its
    unconditional gradient-clipping pass, move 23 fp32 passes where the fused Adam moves 8."""
    from simulate.efficiency import optimizer_estimate
    from simulate.torch_kernels import optimizer_traffic

    chain = EngineChain.from_options(get_hardware("h100-sxm"), ENGINES)
    fused = optimizer_estimate(chain, 1e9, "megatron").latency_s
    for fw in ("torchtitan", "composer"):
        assert optimizer_traffic(fw) == pytest.approx(23 / 8)
        assert optimizer_estimate(chain, 1e9, fw).latency_s == pytest.approx(23 / 8 * fused)
    assert optimizer_traffic("nemo") == 1.0


def test_search_times_the_optimizer_as_simulate_does():
    doc = _doc("composer")
    want = run_training(load_scenario(doc), use_store=False, use_predictors=False)
    doc["training"]["parallel"] = {"dp": [8], "zero": 3, "fsdp": True}
    res = search_training(doc, executor="serial", engines=ENGINES)
    got = {r["layout"]["micro_batch"]: r for r in res.rows}[1]
    assert got["tokens_per_s"] == pytest.approx(want.tokens_per_s, rel=1e-9)


def test_fsdp_copies_on_the_compute_stream_by_framework():
    """FSDP2's all-gather copy-out (forward and backward) and FSDP1's flat-gradient cat
    (backward), once per unit and pass: full recompute does not repeat them."""
    doc = _doc("torchtitan", recompute="full")
    names = {}
    for fw in ("torchtitan", "composer", "megatron"):
        doc["training"]["framework"] = fw
        sc = load_scenario(doc)
        res = run_training(sc, use_store=False, use_predictors=False, record=True)
        names[fw] = [r.name for r in res.records]
    count = {fw: (sum(n == "fsdp_copy_out" for n in v), sum(n == "fsdp_copy_out.bwd" for n in v),
                  sum(n == "fsdp_grad_cat" for n in v)) for fw, v in names.items()}
    layers = load_model("llama-3-8b").layers  # records: one micro-batch
    assert count["torchtitan"] == (layers, layers, 0)
    assert count["composer"] == (0, 0, layers)
    assert count["megatron"] == (0, 0, 0)


def test_torchtitan_upcasts_its_logits_outside_the_compiled_blocks():
    """torchtitan's `cross_entropy(pred.float())` outside torch.compile (before 2025-04): an
    fp32 upcast of the logits in forward and its cast back in backward; fused-loss frameworks
    have none."""
    names = {}
    for fw in ("torchtitan", "megatron"):
        res = run_training(load_scenario(_doc(fw, compile_loss=False)), use_store=False,
                           use_predictors=False, record=True)
        names[fw] = [r.name for r in res.records if r.name.startswith("loss_upcast")]
    assert names == {"torchtitan": ["loss_upcast", "loss_upcast.bwd"], "megatron": []}
    from simulate.torch_kernels import loss_upcast_nodes

    assert loss_upcast_nodes("torchtitan", []) == []


def _tp_layer(framework: str, tp_overlap: bool):
    from simulate.graph import TrainStep, layer_block
    step = TrainStep(sharding=Sharding(tp=8, sp=True), micro_batch=2, seq_len=4096,
                     framework=framework, tp_overlap=tp_overlap)
    return layer_block(load_model("llama-3-8b"), step, moe=False)


def test_async_tp_sums_the_stacked_partials_after_each_forward_reduce_scatter():
    from analytical.ops import CollectiveKind
    from simulate.efficiency import tp_overlap_rs_splits
    from simulate.torch_kernels import symm_mem_reduce_nodes

    block = _tp_layer("torchtitan", True)
    sums = [n for n in block.fwd if n.name.endswith(".symm_mem_sum")]
    rs = [n for n in block.fwd if getattr(n.op, "kind", None) == CollectiveKind.REDUCE_SCATTER]
    assert len(sums) == len(rs) == 2  # attention output projection and MLP down projection
    assert sums[0].op.rows * sums[0].op.cols == 2 * 4096 * 4096  # the unscattered output
    assert sums[0].count == pytest.approx((1 + 1 / 8) / 2)
    assert not any(n.name.endswith(".symm_mem_sum") for n in _tp_layer("torchtitan", False).fwd)
    assert not any(n.name.endswith(".symm_mem_sum") for n in _tp_layer("megatron", True).fwd)
    assert symm_mem_reduce_nodes("megatron", True, block.fwd, 8192) == []
    # the last of tp chunks has no matmul left to hide behind; TE userbuffers: 4 chunks
    assert tp_overlap_rs_splits("torchtitan", 8) == 8
    assert tp_overlap_rs_splits("torchtitan", 1) == 0
    assert tp_overlap_rs_splits("megatron", 8) == 4
    assert tp_overlap_rs_splits("deepspeed", 8) == 0


def test_torchtitan_compiled_loss_keeps_bf16_logits_and_drops_the_upcast_pass():
    from simulate.torch_kernels import loss_upcast_nodes
    from simulate.training import spec_memory

    doc = _doc("torchtitan")
    spec = load_scenario(doc).training
    assert spec.compile_loss is None and spec.compiled_loss  # with the model, as since 2025-04
    doc["training"]["compile_loss"] = False
    old = load_scenario(doc).training
    assert not old.compiled_loss
    model = load_model("llama-3-8b")
    saved = spec_memory(model, old).activations_bytes - spec_memory(model, spec).activations_bytes
    logits = 8192 * model.vocab  # one micro-batch of 8192 tokens, no TP
    assert saved == pytest.approx((12 - 4) * logits, rel=1e-6)
    assert loss_upcast_nodes("torchtitan", _head(), True) == []
    assert len(loss_upcast_nodes("torchtitan", _head(), False)) == 1
    assert _tps(doc) < _tps(_doc("torchtitan"))  # the uncompiled loss's upcast pass


def test_torch_context_parallel_merges_each_remote_block_in_fp32():
    from simulate.graph import TrainStep, layer_block
    from simulate.torch_kernels import RING_MERGE_ONCE, RING_MERGE_PER_STEP, ring_merge_nodes

    model = load_model("llama-3-8b")

    def block(framework: str, cp: int):
        step = TrainStep(sharding=Sharding(cp=cp), micro_batch=1, seq_len=32768,
                         framework=framework)
        return layer_block(model, step, moe=False)

    b = block("torchtitan", 4)
    merges = {n.name: n for n in (*b.fwd, *b.bwd) if n.name.startswith("cp_merge")}
    assert set(merges) == {"cp_merge_q", "cp_merge_kv", "cp_merge_q.bwd", "cp_merge_kv.bwd"}
    q = merges["cp_merge_q"]
    assert (q.op.rows, q.op.cols) == (32768 // 4, 4096)  # local queries x heads * head dim
    assert merges["cp_merge_kv"].op.cols == 4096  # K/V repeated to the 32 query heads x 128
    assert q.count == pytest.approx(3 * RING_MERGE_PER_STEP["q"][0] + RING_MERGE_ONCE["q"][0])
    assert all(n.core for n in merges.values())  # inside the SDPA op selective AC saves
    assert ring_merge_nodes("torchtitan", b.fwd, 1) == ([], [])
    assert not any(n.name.startswith("cp_merge") for n in (*block("megatron", 4).fwd,
                                                           *block("torchtitan", 1).fwd))


def test_torch_context_parallel_gathers_repeated_kv_behind_the_local_block():
    """torchtitan's CP: the all-gather rotation (its default) of K/V repeated to the query heads,
    hidden behind the local causal block only; Megatron's ring of the GQA K/V is unchanged."""
    from analytical.layer_spec import CP_ROTATE_GATHER, CpAlgorithm, Stream
    from simulate.costs import _cp_exposed_s
    from simulate.engines import Estimate
    from simulate.graph import TrainStep, layer_block
    from simulate.torch_kernels import cp_sharding

    assert cp_sharding("torchtitan", None) == {"cp_algorithm": CpAlgorithm.ALL_GATHER,
                                               "cp_torch": True}
    assert cp_sharding("torchtitan", "ring")["cp_algorithm"] == CpAlgorithm.RING
    assert cp_sharding("megatron", None) == {"cp_algorithm": CpAlgorithm.RING, "cp_torch": False}
    model = load_model("llama-3-8b")

    def cp_nodes(sh: Sharding, framework: str):
        step = TrainStep(sharding=sh, micro_batch=1, seq_len=32768, framework=framework)
        b = layer_block(model, step, moe=False)
        return b, [n for n in b.fwd if n.stream == Stream.CP]

    b, (gather,) = cp_nodes(Sharding(cp=4, cp_algorithm=CpAlgorithm.ALL_GATHER, cp_torch=True),
                            "torchtitan")
    assert gather.name == CP_ROTATE_GATHER
    # 4 ranks x 8192 local tokens x 32 heads x (128 + 128) x 2 bytes
    assert gather.op.size_bytes == 4 * 8192 * 32 * 256 * 2
    _, (ring,) = cp_nodes(Sharding(cp=4), "megatron")
    assert ring.op.size_bytes == 8192 * 8 * 256 * 2  # one GQA block per ring step

    def exposed(comm_s: float) -> float:
        est = {n.op.key: Estimate(latency_s=(comm_s if n.stream == Stream.CP else 1e-3),
                                  engine="roofline") for n in b.fwd}
        return _cp_exposed_s(b.fwd, est, 1.0)

    assert exposed(1e-4) == pytest.approx(0.0)  # shorter than the local block: hidden
    assert exposed(5e-3) == pytest.approx(5e-3 - 1e-3)  # only the local block (1 ms) hides it


def test_rowwise_forward_gemm_takes_the_measured_cutlass_ratio():
    """torchao rowwise: the forward fp8 GEMMs run at the H100 CUTLASS / cuBLASLt time ratio
    of the nearest measured shape at their token count; tensorwise, other frameworks and the
    GEMMs' backward are untouched."""
    import csv

    from analytical.ops import GemmSpec
    from simulate.graph import TrainStep, layer_block
    from simulate.torch_kernels import ROWWISE_TABLE, rowwise_fwd_ratio

    with ROWWISE_TABLE.open() as f:  # a measured shape at a measured m: its own ratio
        t = {r["kernel"]: float(r["seconds"]) for r in csv.DictReader(f)
             if r["shape"] == "llama3.1-8b-tp1-o" and r["m"] == "2048"}
    o_proj = GemmSpec(m=2048, n=4096, k=4096, dtype=DType.FP8)
    assert rowwise_fwd_ratio(o_proj) == pytest.approx(t["fp8_rowwise"] / t["fp8_tensorwise"])
    lo, hi = (rowwise_fwd_ratio(GemmSpec(m=m, n=4096, k=4096, dtype=DType.FP8))
              for m in (2048, 4096))
    between = rowwise_fwd_ratio(GemmSpec(m=3000, n=4096, k=4096, dtype=DType.FP8))
    assert min(lo, hi) <= between <= max(lo, hi)

    def gemms(framework: str, recipe: str):
        step = TrainStep(sharding=Sharding(), micro_batch=1, seq_len=3000, framework=framework,
                         precision=Precision(gemm=DType.FP8, act=DType.BF16), fp8_recipe=recipe)
        b = layer_block(load_model("llama-3-8b"), step, moe=False)
        return ({n.name: n.count for part in (b.fwd, b.bwd) for n in part
                 if n.op.family == "gemm"}, {n.name: n.op for n in b.fwd})

    (rowwise, ops), (tensorwise, _) = gemms("torchtitan", "rowwise"), gemms("torchtitan",
                                                                             "tensorwise")
    assert rowwise["qkv_proj.wk"] == pytest.approx(rowwise_fwd_ratio(ops["qkv_proj.wk"]))
    assert rowwise["qkv_proj.wk"] > 1.0
    assert rowwise["qkv_proj.wk.dgrad"] == tensorwise["qkv_proj.wk"] == 1.0
    assert gemms("megatron", "rowwise")[0]["qkv_proj"] == 1.0

def test_fp8_weights_are_cast_per_call_where_te_or_torchao_is_called_so():
    """TE re-casts the weight on every call unless the caller passes is_first_microbatch
    (Megatron-Core does; Composer's MPT te.Linear does not); torchao always re-casts."""
    from analytical.dtypes import DType
    from analytical.layer_spec import Precision
    from simulate.graph import TrainStep, layer_block

    def weight_casts(framework: str) -> int:
        step = TrainStep(sharding=Sharding(), micro_batch=1, seq_len=2048, framework=framework,
                         precision=Precision(gemm=DType.FP8, act=DType.BF16))
        b = layer_block(load_model("llama-3-8b"), step, moe=False)
        return sum(n.name.endswith(".fp8_cast_weight") for n in b.fwd)

    assert weight_casts("composer") == 4  # qkv, out, up, down
    assert weight_casts("torchtitan") == 7  # its seven separate linears
    assert weight_casts("megatron") == weight_casts("nemo") == 0


def test_a_measured_eager_composite_is_the_fused_kernel_where_the_framework_fuses_it():
    """The store times rotary and SwiGLU as eager composites (`profiler.benchmarks.memory`);
    Megatron-Core / NeMo (TE fused RoPE, fused bias-SwiGLU) and compiled PyTorch run one fused
    kernel, so a measured or learned answer is re-priced as the roofline's one pass, and
    reported as the roofline's; eager torchtitan keeps the composite's measurement."""
    hw = get_hardware("h100-sxm")
    chain = EngineChain.from_options(hw, ENGINES)
    for kind in (MemoryOpKind.ROTARY, MemoryOpKind.SWIGLU):
        op = MemoryBoundSpec(kind=kind, rows=8192, cols=4096, dtype=DType.BF16)
        roof = chain.estimate(op)
        measured = Estimate(latency_s=20 * roof.latency_s, engine="learned")
        for framework, compiled in (("megatron", True), ("nemo", False), ("torchtitan", True)):
            fused = framework_estimates([op], [measured], hw, framework, compiled=compiled)[0]
            assert fused.latency_s == pytest.approx(roof.latency_s, rel=1e-6)
            assert fused.engine == "roofline"
        eager = framework_estimates([op], [measured], hw, "torchtitan", compiled=False)[0]
        assert eager == measured
    norm = MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=8192, cols=4096, dtype=DType.BF16)
    kept = Estimate(latency_s=5e-5, engine="store")
    assert framework_estimates([norm], [kept], hw, "megatron")[0] == kept
