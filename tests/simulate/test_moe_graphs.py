# SPDX-License-Identifier: Apache-2.0
"""CUDA graphs of an MoE layer's static parts (`simulate.moe_graphs`): captured parts cost one
launch on the host, a full-iteration graph removes the host floor, and the corpus column reaches
the scenario."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from analytical.layer_spec import Node
from analytical.ops import GemmSpec
from simulate.api import run
from simulate.moe_graphs import (
    ROUTING_PARTS,
    CudaGraphScope,
    attention_bases,
    eager_nodes,
    eager_routing,
)
from simulate.validate import published as pub


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")


def _node(name: str) -> Node:
    return Node(name=name, op=GemmSpec(m=8, n=8, k=8))


def test_captured_parts_leave_the_experts_eager():
    fwd = [_node(n) for n in ("attn_norm", "qkv_proj", "attention", "out_proj", "mlp_norm",
                              "router", "dispatch", "experts.up_gate", "experts.down")]
    attention = attention_bases(fwd)
    assert attention == {"attn_norm", "qkv_proj", "attention", "out_proj", "mlp_norm"}
    scopes = (CudaGraphScope.ATTN, CudaGraphScope.MOE_ROUTER, CudaGraphScope.MOE_PREPROCESS)
    eager, launches = eager_nodes(fwd, scopes, attention)
    assert [n.name for n in eager] == ["dispatch", "experts.up_gate", "experts.down"]
    assert launches == 3
    # Backward nodes (dgrad / wgrad / .bwd / fp8 casts) follow their forward node.
    bwd = [_node(n) for n in ("experts.down.dgrad", "router.wgrad", "qkv_proj.dgrad",
                              "out_proj.fp8_cast_grad", "mlp_norm.bwd")]
    eager, _ = eager_nodes(bwd, scopes, attention)
    assert [n.name for n in eager] == ["experts.down.dgrad"]
    assert eager_nodes(bwd, (), attention) == (bwd, 0)
    # Router and preprocess graphs take their bookkeeping kernels off the CPU.
    fwd_all = sum(k[0] for k in ROUTING_PARTS.values())
    assert eager_routing((), backward=False) == fwd_all
    assert eager_routing(scopes, backward=False) == ROUTING_PARTS["permute"][0]


def _qwen(cuda_graph: list[str] | None) -> dict:
    training = {"parallel": {"tp": 1, "pp": 1, "dp": 8, "ep": 8}, "global_batch": 32,
                "micro_batch": 1, "seq_len": 512, "precision": "fp8", "recompute": "full"}
    if cuda_graph is not None:
        training["cuda_graph"] = cuda_graph
    return {"name": "moe-graphs", "model": "qwen3-30b-a3b",
            "hardware": {"gpu": "b200", "num_gpus": 8}, "training": training}


def _step_s(scenario: dict) -> float:
    return run(scenario, use_store=False, use_predictors=False).data["iteration_time_s"]


def test_graphs_shorten_a_host_bound_step_and_a_full_iteration_graph_removes_the_floor(
        monkeypatch):
    from simulate import moe_host

    eager = _step_s(_qwen(None))
    partial = _step_s(_qwen(["attn", "moe_router", "moe_preprocess"]))
    full = _step_s(_qwen(["full_iteration"]))
    assert full < partial < eager
    monkeypatch.setattr(moe_host, "HOST_BOUND_FRAMEWORKS", frozenset())
    assert full == pytest.approx(_step_s(_qwen(None)), rel=1e-12)


def test_unknown_scope_is_rejected_by_name():
    with pytest.raises(SpecError, match="cuda_graph"):
        _step_s(_qwen(["moe"]))


def test_corpus_column_reaches_the_scenario():
    rows = [r for r in pub.load_corpus() if r["cuda_graph"]]
    assert rows and {r["source"] for r in rows} <= {"megatron-bridge", "mlperf-training",
                                                   "megatron-lm-docs"}
    scenario = pub.row_scenario(rows[0], "row")
    assert scenario["training"]["cuda_graph"] == rows[0]["cuda_graph"].split("+")
    assert all(set(r["cuda_graph"].split("+")) <= {s.value for s in CudaGraphScope}
               for r in rows)


def test_router_graph_takes_the_fused_routers_measured_kernels_off_the_cpu():
    """The fused router's forward, as measured from Megatron-Core's MoE layer (`ROUTING_PARTS`,
    every Megatron-Bridge recipe sets ``--moe-router-fusion``): the router GEMM node plus the
    routing bookkeeping that a ``moe_router`` graph replaces by one launch."""
    from simulate.moe_host import HostIssue, pass_shares

    fwd = [_node(n) for n in ("mlp_norm", "router", "dispatch")]
    attention = attention_bases(fwd)
    eager = HostIssue(kernel_s=1.0, attention=attention).cpu_s(fwd, 1, backward=False)
    graphed = HostIssue(kernel_s=1.0, graphs=frozenset({CudaGraphScope.MOE_ROUTER}),
                        attention=attention).cpu_s(fwd, 1, backward=False)
    # the bookkeeping kernels and the GEMM become one graph launch (forward kernels, each at
    # the forward's measured share of the mean kernel's CPU time)
    assert eager - graphed == pytest.approx((ROUTING_PARTS["router"][0] + 1 - 1) * pass_shares()[0])


def test_recipe_columns_agree_with_the_configs_their_notes_name():
    """A megatron-bridge row whose notes name a recipe's CUDA graph implementation, EP overlap
    or pipeline split carries it in the column the model reads (and no row runs a graph its
    notes do not source)."""
    rows = [r for r in pub.load_corpus() if r["source"] == "megatron-bridge"]
    for r in rows:
        notes = r["notes"]
        if "cuda_graph_impl full_iteration" in notes:
            assert r["cuda_graph"] == "full_iteration", r["framework_version"]
        if "cuda_graph_impl transformer_engine" in notes:
            assert r["cuda_graph"] and "full_iteration" not in r["cuda_graph"]
        if r["cuda_graph"]:
            assert "cuda_graph" in notes
        if "moe_a2a_overlap" in notes and "moe_a2a_overlap False" not in notes:
            assert str(r["moe_a2a_overlap"]).lower() == "true", r["framework_version"]
        if "pipeline_split embedding-loss" in notes:
            assert r["pipeline_split"] == "embedding-loss"
    graphed_2608 = [r for r in rows if r["framework_version"].endswith("26.08")]
    assert graphed_2608 and all(r["cuda_graph"] == "full_iteration" for r in graphed_2608)
