# SPDX-License-Identifier: Apache-2.0
"""MoE training: the Megatron-Bridge corpus rows parse and simulate, Megatron-Core's expert
layout rule (etp x ep tiles one stage's ranks), and a job inside one NVLink domain keeps its
expert all-to-all on NVLink."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from analytical.parallel import ParallelConfig
from simulate.api import run
from simulate.validate import published as pub


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")


def _bridge_rows() -> list[dict[str, str]]:
    return [r for r in pub.load_corpus() if r["source"] == "megatron-bridge"]


def _data(scenario) -> dict:
    return run(scenario, use_store=False, use_predictors=False).data


def test_bridge_rows_are_complete_moe_runs():
    rows = _bridge_rows()
    assert len(rows) >= 100
    models = {r["model"] for r in rows}
    assert {"qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b", "deepseek-v3"} <= models
    for r in rows:
        assert int(r["ep"]) > 1 and r["etp"] == "1" and r["tokens_per_s_per_gpu"]
        gpus = int(r["num_gpus"])
        assert int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"] or 1) == gpus
        assert "4ab94dfa" in r["url"]


def test_one_row_per_model_simulates():
    seen: dict[str, dict[str, str]] = {}
    for r in _bridge_rows():
        seen.setdefault(r["model"], r)
    runner = pub.simulate_runner(use_store=False, use_predictors=False)
    for index, row in enumerate(seen.values()):
        outcome = pub.score_row(row, index, runner)
        assert outcome.error is None, outcome.error
        assert outcome.fits and outcome.predicted_tps and outcome.predicted_tps > 0


def test_expert_grid_follows_megatron_core():
    # Qwen3-235B on H100 (Megatron-Bridge): TP 2, DP 16, EP 32 with expert TP 1 is valid.
    assert ParallelConfig(tp=2, pp=8, dp=16, ep=32, etp=1, sp=True).experts_tile_stage
    # With expert TP = TP (the default) the grid needs 64 ranks per stage: rejected.
    assert not ParallelConfig(tp=2, pp=8, dp=16, ep=32, sp=True).experts_tile_stage
    doc = _scenario(gpus=32, parallel={"tp": 2, "pp": 1, "dp": 16, "ep": 32, "sp": True})
    with pytest.raises(SpecError) as info:
        _data(doc)
    assert info.value.field == "training.parallel.ep"
    doc["training"]["parallel"]["etp"] = 1
    assert _data(doc)["fits"] is True


def _scenario(*, gpus: int, parallel: dict, gpu: str = "h100-sxm",
              gpus_per_node: int | None = None) -> dict:
    hardware = {"gpu": gpu, "num_gpus": gpus}
    if gpus_per_node:
        hardware["gpus_per_node"] = gpus_per_node
    return {"name": "moe", "model": "qwen3-30b-a3b", "hardware": hardware,
            "training": {"parallel": parallel, "global_batch": 2 * parallel["dp"],
                         "micro_batch": 1, "seq_len": 2048, "precision": "bf16",
                         "recompute": "full", "framework": "megatron"}}


def test_job_inside_one_nvlink_domain_keeps_all_to_all_on_nvlink(monkeypatch):
    from simulate import moe_host

    # 64 GPUs of a 72-GPU NVL72 domain: the EP-64 all-to-all is all NVLink. Declaring 8-GPU
    # nodes puts 56 of the 64 peers behind the network, which must be slower. (Without the
    # host floor, which at one 2k-token micro-batch on a Grace host would hide the network.)
    monkeypatch.setattr(moe_host, "HOST_BOUND_FRAMEWORKS", frozenset())
    parallel = {"tp": 1, "pp": 1, "dp": 64, "ep": 64}
    one_domain = _data(_scenario(gpus=64, parallel=parallel, gpu="gb200"))
    eight = _data(_scenario(gpus=64, parallel=parallel, gpu="gb200", gpus_per_node=8))
    assert one_domain["tokens_per_s_per_gpu"] > 1.2 * eight["tokens_per_s_per_gpu"]
    # Before, gcd(64, 72) = 8 ranks per node made the 72-GPU domain behave like 8-GPU nodes.
    assert one_domain["breakdown"]["exposed_communication"] < \
        0.5 * eight["breakdown"]["exposed_communication"]


def _qwen_b200(seq_len: int, micro_batch: int, framework: str = "megatron",
               router_fusion: bool = True) -> dict:
    return {"name": "moe-host", "model": "qwen3-30b-a3b",
            "hardware": {"gpu": "b200", "num_gpus": 8},
            "training": {"parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8},
                         "global_batch": 8 * micro_batch * 4, "micro_batch": micro_batch,
                         "seq_len": seq_len, "precision": "fp8", "recompute": "full",
                         "framework": framework, "moe_router_fusion": router_fusion}}


def test_an_unfused_router_issues_the_measured_extra_kernels():
    from simulate.moe_graphs import ROUTING_PARTS, UNFUSED_ROUTER, eager_routing
    from simulate.moe_host import pass_shares, x86_kernel_s
    from simulate.scenario import parse_scenario

    # Megatron-Core's default (no --moe-router-fusion): the measured unfused router.
    assert parse_scenario(_qwen_b200(512, 1)).training.moe_router_fusion
    assert parse_scenario({**_qwen_b200(512, 1), "training": {
        k: v for k, v in _qwen_b200(512, 1)["training"].items()
        if k != "moe_router_fusion"}}).training.moe_router_fusion is False
    extra_fwd, extra_bwd = (u - f for u, f in zip(UNFUSED_ROUTER, ROUTING_PARTS["router"],
                                                   strict=True))
    assert extra_fwd > 0 and extra_bwd > 0
    assert eager_routing((), backward=False, router_fusion=False) == \
        eager_routing((), backward=False) + extra_fwd
    assert eager_routing((), backward=True, router_fusion=False) == \
        eager_routing((), backward=True) + extra_bwd
    # Host-bound small micro-batches (full recompute replays the forward's routing): each MoE
    # layer's two forwards and its backward issue the extra kernels per micro-batch, so the
    # step is slower by about layers x (2 x extra_fwd + extra_bwd) x micro-batches of CPU time.
    fused, unfused = (_data(_qwen_b200(512, 1, router_fusion=f))["iteration_time_s"]
                      for f in (True, False))
    assert unfused > fused
    fwd, bwd = pass_shares()  # a forward kernel's CPU time, and a backward one's
    bound = 48 * (2 * extra_fwd * fwd + extra_bwd * bwd) * 4 * x86_kernel_s()
    assert unfused - fused == pytest.approx(bound, rel=0.01)


def test_small_micro_batches_of_moe_layers_are_host_bound(monkeypatch):
    from simulate import moe_host

    small, large = _qwen_b200(512, 1), _qwen_b200(4096, 4)
    with_floor = [_data(s)["iteration_time_s"] for s in (small, large)]
    monkeypatch.setattr(moe_host, "HOST_BOUND_FRAMEWORKS", frozenset())
    without = [_data(s)["iteration_time_s"] for s in (small, large)]
    # 512 tokens per micro-batch: ~300 kernels per layer at 2.61 x 13.48 us (a forward one at
    # 4.22 x) outlast the GPU many times over.
    assert with_floor[0] > 1.5 * without[0]
    # 16k tokens per micro-batch: mostly GPU-bound; the forward halves around the sync (and
    # full recompute's replayed forwards) still expose some CPU.
    assert without[1] < with_floor[1] < 1.3 * without[1]
    assert with_floor[0] / without[0] > 50 * (with_floor[1] / without[1] - 1)


def test_a_grace_host_issues_kernels_slower_than_an_x86_host():
    from dataclasses import replace

    from analytical.hardware import get_hardware
    from simulate.moe_host import host_kernel_s, x86_kernel_s

    gb200, b200 = get_hardware("gb200"), get_hardware("b200")
    assert host_kernel_s(b200) == x86_kernel_s()  # no measurement: the x86 rate
    assert host_kernel_s(get_hardware("h100-sxm")) == pytest.approx(x86_kernel_s())
    assert host_kernel_s(gb200) == pytest.approx(x86_kernel_s() * 37.08 / 13.48)
    assert host_kernel_s(replace(gb200, host_op_s=0.0)) == x86_kernel_s()
    # A host-bound micro-batch (512 tokens) on a GB200 node runs slower than on B200's x86.
    grace, x86 = _qwen_b200(512, 1), _qwen_b200(512, 1)
    grace["hardware"]["gpu"] = "gb200"
    grace["training"]["parallel"]["dp"] = 8
    slow, fast = (_data(s)["iteration_time_s"] for s in (grace, x86))
    assert slow > 1.5 * fast


def test_host_floor_counts_each_local_expert_and_only_moe_frameworks():
    from analytical.layer_spec import Node
    from analytical.ops import GemmSpec
    from simulate.moe_host import pass_kernels

    gemm = Node(name="experts.up_gate", op=GemmSpec(m=64, n=64, k=64, batch=16))
    other = Node(name="qkv_proj", op=GemmSpec(m=64, n=64, k=64))
    assert pass_kernels([gemm, other], 16, routing=10) == 10 + 16 + 1
    small = _qwen_b200(512, 1)
    titan = _qwen_b200(512, 1, framework="torchtitan")
    assert _data(small)["iteration_time_s"] > _data(titan)["iteration_time_s"]


def test_expert_activations_follow_the_expert_tp_and_fp8_inputs():
    from analytical.activations import activation_bytes_per_layer, fp8_saved_input_savings
    from analytical.model import load_model

    model = load_model("qwen3-235b-a22b")
    kw = dict(micro_batch=1, seq_len=4096)
    folded = ParallelConfig(tp=2, pp=8, dp=16, ep=32, etp=1, sp=True)
    gathered = ParallelConfig(tp=2, pp=8, dp=32, ep=16, sp=True)  # etp = tp = 2
    drop = (activation_bytes_per_layer(model, gathered, **kw)
            - activation_bytes_per_layer(model, folded, **kw))
    # Expert TP 1: a rank's experts hold half the routed copies (inputs and outputs, bf16).
    routed = 2 * model.top_k * 2 * model.hidden * 4096
    assert drop == pytest.approx(routed / 2)
    dense_part = fp8_saved_input_savings(model, folded, moe_layer=False, **kw)
    moe_part = fp8_saved_input_savings(model, folded, moe_layer=True, **kw)
    # 8 routed copies of (hidden / 2 + moe_ffn / 2) outweigh the dense fc1 + fc2 inputs.
    assert moe_part > 1.5 * dense_part


def test_several_local_experts_resort_received_tokens():
    from analytical.attention_span import AttentionKind
    from analytical.layer_spec import Sharding
    from analytical.model import load_model
    from simulate.graph import TrainStep, layer_block

    model = load_model("qwen3-30b-a3b")

    def names(ep: int) -> set[str]:
        step = TrainStep(sharding=Sharding(ep=ep, ep_rpn=min(ep, 8)), micro_batch=1,
                         seq_len=1024)
        block = layer_block(model, step, moe=True, attention=AttentionKind.FULL,
                            layer_params_per_rank=1)
        return {n.name for n in (*block.fwd, *block.bwd)}

    assert {"dispatch.sort_chunks", "combine.sort_chunks"} <= names(8)  # 16 local experts
    assert not any("sort_chunks" in n for n in names(128))  # one expert per rank
    assert not any("sort_chunks" in n for n in names(1))  # no all-to-all


def test_unstated_expert_tp_is_one_the_run_could_have_used():
    row = dict(_bridge_rows()[0])
    row.update(tp="2", pp="8", dp="16", cp="1", ep="32", sp="true", num_gpus="256", etp="")
    assert pub.row_scenario(row, "r")["training"]["parallel"]["etp"] == 1  # 2 x 32 > 32 ranks
    row.update(dp="32", num_gpus="512")
    assert pub.row_scenario(row, "r")["training"]["parallel"]["etp"] == 0  # default tp tiles
    row.update(etp="2")
    assert pub.row_scenario(row, "r")["training"]["parallel"]["etp"] == 2  # stated wins


def test_unstated_placement_spreads_over_the_fewest_domains():
    row = dict(_bridge_rows()[0])
    row.update(gpu="gb200", num_gpus="256", gpus_per_node="")
    assert pub.row_scenario(row, "r")["hardware"]["gpus_per_node"] == 64  # 4 NVL72 racks
    row.update(num_gpus="64")
    assert "gpus_per_node" not in pub.row_scenario(row, "r")["hardware"]  # one rack
    row.update(gpus_per_node="72", num_gpus="144")
    assert pub.row_scenario(row, "r")["hardware"]["gpus_per_node"] == 72  # stated wins


def _sync_layer(pre_gemm_s: float, post_gemm_s: float):
    """A toy MoE forward: one GEMM before the dispatcher's sync, one expert GEMM after it."""
    from analytical.layer_spec import Node
    from analytical.op_kinds import MoEOpKind
    from analytical.ops import GemmSpec, MoESpec
    from simulate.costs import PassCost
    from simulate.engines import Estimate

    attn = Node(name="qkv_proj", op=GemmSpec(m=64, n=64, k=64))
    disp = Node(name="dispatch", op=MoESpec(kind=MoEOpKind.DISPATCH, tokens=8, hidden=8,
                                            experts=4, top_k=1))
    expert = Node(name="experts.up_gate", op=GemmSpec(m=64, n=64, k=128, batch=4))
    est = {attn.op.key: Estimate(latency_s=pre_gemm_s, engine="roofline"),
           disp.op.key: Estimate(latency_s=0.0, engine="roofline"),
           expert.op.key: Estimate(latency_s=post_gemm_s, engine="roofline")}
    total = pre_gemm_s + post_gemm_s
    return [attn, disp, expert], est, PassCost(elapsed_s=total, compute_s=total, engine_s={})


def _te_call_kernels() -> float:
    """One Transformer Engine module call's extra CPU time, in x86 kernel issues."""
    from simulate.moe_host import TE_EXTRA_OPS, X86_HOST_OP_S, x86_kernel_s

    return TE_EXTRA_OPS * X86_HOST_OP_S / x86_kernel_s()


def test_the_dispatcher_sync_exposes_a_host_bound_half_of_the_forward():
    from simulate.moe_host import ROUTING_KERNELS, pass_shares, pass_with_sync, x86_kernel_s

    te = _te_call_kernels()  # qkv_proj before the sync, experts.up_gate after it
    fwd, _ = pass_shares()
    cpu_pre = ((ROUTING_KERNELS[0] + 1) * fwd + te) * x86_kernel_s()
    # the dispatch node, one GEMM per local expert
    cpu_post = ((1 + 4) * fwd + te) * x86_kernel_s()
    # The GPU outlasts the CPU before the sync (attention) and the CPU outlasts it after it
    # (experts): the layer's CPU total is below its GPU total, yet the sync exposes the CPU.
    gpu_pre, gpu_post = 10 * cpu_pre, 0.2 * cpu_post
    nodes, est, p = _sync_layer(gpu_pre, gpu_post)
    assert cpu_pre + cpu_post < p.elapsed_s
    out = pass_with_sync(p, nodes, est, 4, backward=False)
    assert out.elapsed_s == pytest.approx(gpu_pre + cpu_post)
    assert out.compute_s - p.compute_s == pytest.approx(out.elapsed_s - p.elapsed_s)
    # GPU-bound on both sides of the sync: unchanged.
    nodes, est, p = _sync_layer(10 * cpu_pre, 10 * cpu_post)
    assert pass_with_sync(p, nodes, est, 4, backward=False) == p


def test_host_kernels_follow_transformer_engine_grouped_linear_per_precision():
    from analytical.layer_spec import Node
    from analytical.ops import GemmSpec, MemoryBoundSpec, MemoryOpKind
    from simulate.moe_host import BIAS_KERNELS_PER_EXPERT, pass_kernels

    g = GemmSpec(m=64, n=64, k=64, batch=8)
    mem = MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=8, cols=8)
    wgrad = Node(name="experts.up_gate.wgrad", op=g)
    cast = Node(name="experts.up_gate.fp8_cast_grad", op=mem)
    bias = Node(name="experts.down_bias.bwd", op=mem)
    # fp8: one quantize per expert's split; a recomputed expert GEMM is per expert too.
    assert pass_kernels([wgrad, cast], 8, routing=0) == 16
    assert pass_kernels([Node(name="recompute.experts.up_gate", op=g)], 8, routing=0) == 8
    # bf16 biased experts: FC1's bias gradient is one sum per expert beside its wgrad GEMM,
    # and the FC2 bias Megatron-Core adds per expert has its own kernels per expert.
    assert pass_kernels([wgrad, bias], 8, routing=0) == 8 * (2 + BIAS_KERNELS_PER_EXPERT[1])
    assert pass_kernels([wgrad, bias, cast], 8, routing=0) == 8 * (1 + 4 + 1)


def test_a_recomputed_dispatcher_syncs_the_backward_too():
    from dataclasses import replace

    from simulate.moe_host import ROUTING_KERNELS, pass_shares, pass_with_sync, x86_kernel_s

    te = _te_call_kernels()
    fwd, bwd = pass_shares()  # the replayed forward's kernels, the backward's routing
    cpu_pre = ((ROUTING_KERNELS[0] + 1) * fwd + te) * x86_kernel_s()
    cpu_post = (ROUTING_KERNELS[1] * bwd + (1 + 4) * fwd + te) * x86_kernel_s()
    nodes, est, p = _sync_layer(10 * cpu_pre, 0.2 * cpu_post)
    plain = pass_with_sync(p, nodes, est, 4, backward=True)  # no recompute.dispatch: no sync
    assert plain == p
    recomputed = [replace(n, name=f"recompute.{n.name}") for n in nodes]
    out = pass_with_sync(p, recomputed, est, 4, backward=True)
    assert out.elapsed_s == pytest.approx(10 * cpu_pre + cpu_post)


def test_transformer_engine_module_calls_follow_megatron_cores_layer_spec():
    from analytical.layer_spec import Node
    from analytical.ops import GemmSpec, MemoryBoundSpec, MemoryOpKind
    from simulate.moe_host import HostIssue, te_module_calls

    g = GemmSpec(m=64, n=64, k=64)
    mem = MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=8, cols=8)

    def nodes(*names: str) -> list[Node]:
        return [Node(name=n, op=g if "proj" in n or "experts" in n else mem) for n in names]

    # GQA: the input norm is fused into linear_qkv; q and k norms are two TENorm calls; the
    # router's GEMM is PyTorch's; an fp8 cast belongs to its module's call.
    fwd = nodes("attn_norm", "qkv_proj", "qk_norm", "attention", "out_proj", "mlp_norm",
                "router", "experts.up_gate", "experts.up_gate.fp8_cast_input", "experts.down")
    assert te_module_calls(fwd) == 1 + 2 + 1 + 1 + 1 + 2
    # backward: dgrad and wgrad are one module's backward; a recomputed forward calls again.
    assert te_module_calls(nodes("out_proj.dgrad", "out_proj.wgrad", "router.dgrad")) == 1
    assert te_module_calls(nodes("recompute.out_proj", "out_proj.dgrad")) == 2
    # MLA: no fused qkv, so the input norm is its own TENorm call.
    assert te_module_calls(nodes("attn_norm", "q_down", "q_up", "kv_down", "kv_up")) == 5
    # The calls raise the CPU issue time, and a Grace host pays them at its own rate.
    x86, grace = HostIssue(), HostIssue(kernel_s=41e-6)
    with_te, without = nodes("qkv_proj"), nodes("router")
    assert x86.cpu_s(with_te, 1, backward=False) > x86.cpu_s(without, 1, backward=False)
    te_x86 = x86.cpu_s(with_te, 1, backward=False) - x86.cpu_s(without, 1, backward=False)
    te_grace = grace.cpu_s(with_te, 1, backward=False) - grace.cpu_s(without, 1, backward=False)
    assert te_grace / te_x86 == pytest.approx(41e-6 / x86.kernel_s)
