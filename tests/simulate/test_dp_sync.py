# SPDX-License-Identifier: Apache-2.0
"""The distributed optimizer's collectives go over each buffer's own group (`simulate.dp_sync`)."""

from __future__ import annotations

from typing import Any

from analytical.ops import CollectiveKind
from analytical.parallel import ParallelConfig
from analytical.stage import StageParams
from simulate.dp_sync import bucket_bytes, grad_bucket_queues, param_gathers
from simulate.engines import Estimate


class _Recorder:
    """Prices every collective at 1 s and keeps the specs asked."""

    def __init__(self) -> None:
        self.specs: list[Any] = []

    def estimate_many(self, ops: Any) -> list[Estimate]:
        self.specs += list(ops)
        return [Estimate(latency_s=1.0, engine="roofline") for _ in ops]


def _stage(dense: float, expert: float) -> StageParams:
    return StageParams(dense=dense, expert=expert, linear=dense + expert, largest_layer=1.0,
                       layer_is_moe=(True,), has_embedding=True, has_lm_head=True)


def test_expert_gather_runs_over_the_expert_shard_group() -> None:
    """EP 8 inside an 8-GPU node, dp 64: the experts' all-gather is 8 ranks, one per node."""
    par = ParallelConfig(dp=64, ep=8, zero=1)
    chain = _Recorder()
    gathers = param_gathers(par, _stage(2e9, 14e9), 8, chain)  # type: ignore[arg-type]
    assert len(gathers) == 2
    dense, expert = chain.specs
    assert (dense.kind, dense.group_size, dense.ranks_per_node) == (CollectiveKind.ALL_GATHER,
                                                                    64, 8)
    assert dense.size_bytes == int(2e9 * 2)
    assert (expert.group_size, expert.ranks_per_node, expert.size_bytes) == (8, 1, int(14e9 * 2))


def test_gathers_follow_the_gradient_queues() -> None:
    """Same groups as the gradient reduction; none without the distributed optimizer, and no
    expert gather where EP spans the whole data-parallel group."""
    par = ParallelConfig(dp=64, ep=8, zero=1)
    grads, gathers = _Recorder(), _Recorder()
    grad_bucket_queues(par, _stage(2e9, 14e9), 8, grads, 4e9, 2.0)  # type: ignore[arg-type]
    param_gathers(par, _stage(2e9, 14e9), 8, gathers)  # type: ignore[arg-type]
    assert ({(s.group_size, s.ranks_per_node) for s in grads.specs}
            == {(s.group_size, s.ranks_per_node) for s in gathers.specs})
    assert param_gathers(ParallelConfig(dp=64, ep=8), _stage(2e9, 14e9), 8,
                         _Recorder()) == []  # type: ignore[arg-type]
    full_ep = _Recorder()
    param_gathers(ParallelConfig(dp=64, ep=64, zero=1), _stage(2e9, 1e9), 64,
                  full_ep)  # type: ignore[arg-type]
    assert [s.group_size for s in full_ep.specs] == [64]


def test_megatron_bucket_grows_with_the_data_parallel_group() -> None:
    """Megatron-Core's default bucket is max(40M, 1M x dp) parameters of the gradient buffer:
    at DP 448 with bf16 gradients 896 MB, so a 5.5B-parameter stage reduces its 11 GB in 13
    buckets, not the 275 of a flat 40 MB bucket; NeMo runs the same DDP."""
    size = bucket_bytes("megatron", None, 448, 2.0, True)
    assert size == 448e6 * 2.0
    assert bucket_bytes("nemo", None, 448, 2.0, True) == size
    assert bucket_bytes("megatron", None, 8, 4.0, True) == 40e6 * 4.0  # the 40M floor, fp32
    chain = _Recorder()
    _, queues = grad_bucket_queues(ParallelConfig(dp=448, zero=1), _stage(5.5e9, 0.0), 8, chain,
                                   size, 2.0)  # type: ignore[arg-type]
    assert [n for n, _, _ in queues] == [13]
    assert chain.specs[0].size_bytes == int(size)


def test_stated_bucket_wins_and_other_frameworks_keep_40_mb() -> None:
    """A stated ``dp_bucket_mb`` is used as is; frameworks not on Megatron-Core DDP keep 40 MB."""
    assert bucket_bytes("megatron", 200.0, 448, 2.0, True) == 200e6
    assert bucket_bytes("deepspeed", None, 448, 2.0, True) == 40e6
    assert bucket_bytes("torchtitan", 25.0, 448, 4.0, True) == 25e6


def test_megatron_without_grad_overlap_reduces_one_bucket() -> None:
    """overlap_grad_reduce off: Megatron sets bucket_size None, one bucket per buffer."""
    size = bucket_bytes("megatron", 40.0, 64, 2.0, False)
    chain = _Recorder()
    _, queues = grad_bucket_queues(ParallelConfig(dp=64, ep=8, zero=1), _stage(2e9, 14e9), 8,
                                   chain, size, 2.0)  # type: ignore[arg-type]
    assert [n for n, _, _ in queues] == [1, 1]
    assert [s.size_bytes for s in chain.specs] == [int(4e9)] * 2 + [int(28e9)] * 2


def _dp448(**training: Any) -> Any:
    from simulate.scenario import load_scenario

    return load_scenario({
        "name": "dp448", "model": "llama-3-8b", "hardware": {"gpu": "h100-sxm", "num_gpus": 448},
        "training": {"parallel": {"dp": 448, "zero": 1}, "global_batch": 448, "micro_batch": 1,
                     "seq_len": 4096, "framework": "megatron", **training}})


def test_megatron_run_and_search_use_the_dp_scaled_bucket(tmp_path, monkeypatch) -> None:
    """End to end at DP 448 (roofline): the default bucket (896 MB) exposes less gradient
    reduction than a stated 40 MB, and the search's evaluator times the layout the same way."""
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    from analytical.hardware import get_hardware
    from analytical.model import load_model
    from simulate.engines import EngineChain
    from simulate.search.evaluator import LayoutEvaluator
    from simulate.training import run_training

    default, small = _dp448(), _dp448(dp_bucket_mb=40)
    assert default.training is not None and default.training.dp_bucket_mb is None
    chain = EngineChain(get_hardware("h100-sxm"), use_store=False, use_predictors=False)
    fast, slow = run_training(default, chain=chain), run_training(small, chain=chain)
    assert fast.breakdown_s["exposed_communication"] < slow.breakdown_s["exposed_communication"]
    row = LayoutEvaluator(load_model("llama-3-8b"), chain.hardware, chain, None).evaluate(default)
    assert row is not None and row["iteration_time_s"] == fast.iteration_time_s
