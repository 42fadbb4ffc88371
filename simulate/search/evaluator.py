# SPDX-License-Identifier: Apache-2.0
"""Time many training layouts of one model on one GPU type fast, with `run_training`'s result.

`run_training` rebuilds everything for each layout. Most of that is shared between layouts:
- the layer, embedding and head block costs depend only on the layer shape (the `Sharding`:
  tp, sp, cp, ep, micro-batch, recompute, precision, ZeRO-3 group) and the overlap settings, so
  they are computed once per shape (one `estimate_many` call for its distinct operators);
- the pipeline schedule depends only on (schedule, pp, vpp, micro-batches, stage costs, p2p),
  cached per class and computed by `batch_pipeline` (exact, all layouts of a class at once);
- the DP gradient sync, optimizer step and parameter gather of a stage depend on its parameters
  and its last-backward window, not on when the window starts (`share_link` is
  shift-invariant), so stages and layouts with the same ones share one computation.
The steps and their order are `simulate.training._simulate`'s; `tests/simulate/
test_search_fast.py` checks every timed layout of small spaces against `run_training`.
LoRA layouts are timed by `run_training` itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from analytical.hardware import GIB, HardwareSpec
from analytical.ops import CollectiveKind, OpSpec
from analytical.parallel import Schedule
from analytical.stage import StageParams, stage_params
from simulate.comm_ctas import cp_capped_estimates
from simulate.costs import BlockCost, add_engine_time, block_cost
from simulate.dp_sync import collective_spec, grad_bucket_queues, param_gathers
from simulate.efficiency import framework_estimates, optimizer_estimate
from simulate.engines import ENGINE_ORDER, EngineChain, Estimate
from simulate.extrapolation import sliced_estimates
from simulate.fsdp_root import has_fsdp_root
from simulate.graph import TrainStep
from simulate.moe_host import host_bound_costs
from simulate.moe_overlap import a2a_overlap_costs, paired_fraction
from simulate.offload import offload_costs
from simulate.overlap import default_compute_slowdown, share_link
from simulate.scenario import ClusterSpec, Scenario, TrainingSpec
from simulate.schedule import simulate_pipeline
from simulate.search.batch_pipeline import batch_pipeline
from simulate.tp_overlap import tp_overlap_args
from simulate.training import (
    _blocks,
    _chunk_blocks,
    _train_step,
    dp_bucket_bytes,
    grad_bytes,
    run_training,
    spec_memory,
)

__all__ = ["LayoutEvaluator", "GIB"]



class LayoutEvaluator:
    """Rows (plain dicts) for layouts of ``model`` on ``chain``'s GPU; caches live as long as
    the evaluator (one per worker process and model/GPU/engine set)."""

    def __init__(self, model, hw: HardwareSpec, chain: EngineChain, gpus_per_node: int | None):
        self.model, self.hw, self.chain = model, hw, chain
        self.gpn_override = gpus_per_node
        self._blocks: dict[tuple[Any, ...], dict[Any, BlockCost]] = {}
        self._pipes: dict[tuple[Any, ...], Any] = {}
        self._tails: dict[tuple[Any, ...], tuple[float, float, float, list]] = {}
        self._params: dict[tuple[int, ...], StageParams] = {}
        self._parts: dict[tuple[Any, ...], list[list[Any]]] = {}
        self._shapes: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._sums: dict[tuple[Any, ...], tuple[float, dict[str, float]]] = {}
        self._flops: dict[int, float] = {}
        self._stage_tails: dict[tuple[Any, ...], tuple[Any, int]] = {}
        self.stats = {"block_shapes": 0, "pipelines": 0, "stage_tails": 0}

    def memory_bytes(self, t: TrainingSpec) -> float:
        """Per-GPU memory as `run_training` judges its fit (closed form, nothing timed)."""
        return spec_memory(self.model, t).allocated_bytes

    def _sp(self, par, stage: int) -> StageParams:
        key = (par.tp, par.pp, par.vpp, par.ep, par.etp, stage, par.pipeline_split)
        if key not in self._params:
            self._params[key] = stage_params(self.model, tp=par.tp, pp=par.pp, vpp=par.vpp,
                                             ep=par.ep, stage=stage, etp=par.etp,
                                             split=par.pipeline_split)
        return self._params[key]

    def _block_costs(self, t: TrainingSpec, step: TrainStep, slowdown: float
                     ) -> dict[Any, BlockCost]:
        """Layer / embedding / head costs of one layer shape (cached): `_blocks`' blocks, one
        `estimate_many` call for their distinct operators, then `_simulate`'s passes over them
        (the a2a overlap of the paired share of passes, the MoE host floor with ``t``'s CUDA
        graphs)."""
        par, ov = t.parallel, t.overlap
        paired = paired_fraction(t.num_microbatches, par.pp, par.vpp) if ov.moe_a2a else None
        key = (step, par.tp, par.pp, par.ep, par.etp, ov.tp_comm, slowdown, paired,
               t.cuda_graph, t.transformer_engine, ov.cp_max_ctas)
        if key in self._blocks:
            return self._blocks[key]
        blocks = _blocks(self.model, par, step)
        ops = {n.op.key: n.op for b in blocks.values() for n in (*b.fwd, *b.bwd)}

        def estimate(o: list[OpSpec]) -> list[Estimate]:
            return framework_estimates(o, sliced_estimates(self.chain, o), self.hw,
                                       step.framework, kernel=step.attention,
                                       compiled=step.compiled)

        est = cp_capped_estimates(list(ops.values()), estimate(list(ops.values())),
                                  blocks.values(), self.hw, ov.cp_max_ctas)
        tpo = tp_overlap_args(step.framework, par.tp, self.hw, blocks, estimate, ov.tp_comm,
                              t.transformer_engine)
        costs = {k: block_cost(b, est, tp_overlap=ov.tp_comm, slowdown=slowdown, **tpo)
                 for k, b in blocks.items()}
        costs = a2a_overlap_costs(costs, blocks, est, t, slowdown)
        costs = host_bound_costs(costs, blocks, step, est, self.hw, t.cuda_graph)
        self._blocks[key] = costs
        self.stats["block_shapes"] += 1
        return costs

    def _chunk_parts(self, par) -> list[list[Any]]:
        """Block keys of each virtual stage, in `_simulate`'s order (cached per pp, vpp)."""
        key = (par.pp, par.vpp, par.pipeline_split, has_fsdp_root(par))
        if key not in self._parts:
            self._parts[key] = _chunk_blocks(self.model, par)
        return self._parts[key]

    @staticmethod
    def _pipe_key(t: TrainingSpec, fwd, bwd, p2p_s: float) -> tuple[Any, ...]:
        par = t.parallel
        combined = (t.overlap.moe_a2a and t.schedule != Schedule.GPIPE and par.vpp > 1)
        return (t.schedule, par.pp, par.vpp, t.num_microbatches, combined, fwd, bwd, p2p_s)

    def _pipeline(self, t: TrainingSpec, fwd, bwd, p2p_s: float):
        key = self._pipe_key(t, fwd, bwd, p2p_s)
        if key not in self._pipes:
            self._batch_pipelines([key])
        return self._pipes[key]

    def _batch_pipelines(self, keys: list[tuple[Any, ...]]) -> None:
        """Compute the uncached pipelines among ``keys`` (see `_pipe_key`), each class in one
        `batch_pipeline` call (the event simulation's arithmetic: a layout's numbers do not
        depend on which others share its chunk)."""
        classes: dict[tuple[Any, ...], dict[tuple[Any, ...], None]] = {}
        for key in keys:
            if key not in self._pipes:
                classes.setdefault(key[:5], {})[key] = None
        for (schedule, pp, vpp, m, combined), members in classes.items():
            todo = list(members)
            if combined:  # merged passes, which `batch_pipeline`'s levels do not model
                results = [simulate_pipeline(schedule=schedule, pp=pp, vpp=vpp,
                                             num_microbatches=m, fwd_s=k[5], bwd_s=k[6],
                                             p2p_s=k[7], combined=True) for k in todo]
            else:
                results = batch_pipeline(schedule=schedule, pp=pp, vpp=vpp, num_microbatches=m,
                                         fwd_s=[k[5] for k in todo],
                                         bwd_s=[k[6] for k in todo], p2p_s=[k[7] for k in todo])
            self._pipes.update(zip(todo, results, strict=True))
            self.stats["pipelines"] += len(todo)

    def evaluate(self, scenario: Scenario, memory_bytes: float | None = None
                 ) -> dict[str, Any] | None:
        """The search row of one layout, or None when it does not fit in memory
        (``memory_bytes``: `memory_bytes` of it, when the caller already has it)."""
        t = scenario.training
        if t.lora_rank:
            return _row(run_training(scenario, chain=self.chain), scenario.cluster.num_gpus)
        mem = self.memory_bytes(t) if memory_bytes is None else memory_bytes
        if mem > self.hw.memory_bytes:
            return None
        return self._time(scenario.cluster, t, mem)

    def _stages(self, cluster: ClusterSpec, t: TrainingSpec):
        """Block costs, per-stage per-chunk forward/backward times of one micro-batch (tuples)
        and the p2p estimate, as `_simulate` builds them; cached per layout shape (everything
        but the batch (the micro-batch count only under the a2a overlap, whose paired share
        it sets), the schedule, the DP-side overlap switches and, without offload, the ZeRO
        stage below 3)."""
        gpn = cluster.node_size(self.hw.gpus_per_node)
        ov, par = t.overlap, t.parallel
        key = (par.tp, par.pp, par.dp, par.cp, par.ep, par.etp, par.vpp, par.sp,
               par.zero_stage if t.offload.any else par.zero_stage >= 3, t.micro_batch,
               t.seq_len, t.precision, t.recompute,
               t.attention, t.cp_algorithm, t.framework, t.compile, t.fp8_recipe,
               t.lora_rank, t.lora_targets,
               ov.tp_comm, ov.compute_slowdown, ov.comm_sms, t.offload, gpn, t.cuda_graph,
               t.num_microbatches if ov.moe_a2a else None)
        hit = self._shapes.get(key)
        if hit is None:
            hit = self._shapes[key] = self._build_stages(t, gpn)
        return hit

    def _build_stages(self, t: TrainingSpec, gpn: int):
        model, hw, par = self.model, self.hw, t.parallel
        slowdown = t.overlap.compute_slowdown or default_compute_slowdown(hw, t.overlap.comm_sms)
        step = _train_step(t, gpn)
        costs = offload_costs(self._block_costs(t, step, slowdown), model, t, hw)
        act_bytes = step.tokens * model.hidden * step.precision.act.bytes
        act_bytes /= par.tp if par.sp else 1
        p2p = collective_spec(CollectiveKind.SEND_RECV, act_bytes, 2,
                          2 if par.tp * par.cp * par.dp * 2 <= gpn else 1)
        p2p_e = self.chain.estimate(p2p)
        fwd = [[0.0] * par.vpp for _ in range(par.pp)]
        bwd = [[0.0] * par.vpp for _ in range(par.pp)]
        for v, keys in enumerate(self._chunk_parts(par)):
            stage, chunk = v % par.pp, v // par.pp
            for k in keys:
                fwd[stage][chunk] += costs[k].fwd.elapsed_s
                bwd[stage][chunk] += costs[k].bwd.elapsed_s
        return (costs, tuple(map(tuple, fwd)), tuple(map(tuple, bwd)), p2p_e, gpn,
                slowdown)

    def lower_bound_s(self, cluster: ClusterSpec, t: TrainingSpec) -> float:
        """A time the iteration cannot beat: the busiest stage's compute stream, which runs its
        m*vpp forward and backward tasks one after another from t=0 (its end <= the stage's
        finish <= the iteration). Slightly lowered so float rounding cannot make it exceed the
        timed value. LoRA layouts (timed by `run_training`): 0."""
        if t.lora_rank:
            return 0.0
        _, fwd, bwd, *_ = self._stages(cluster, t)
        busy = max(sum(f) + sum(b) for f, b in zip(fwd, bwd, strict=True))
        return t.num_microbatches * busy * (1.0 - 1e-9)

    def evaluate_many(self, cluster: ClusterSpec, specs: Sequence[TrainingSpec],
                      memory: Sequence[float | None]) -> list[dict[str, Any] | None]:
        """`evaluate`'s rows for many layouts without LoRA (``memory``: `memory_bytes` of
        each, or None): stages first, then the pipelines of each (schedule, pp, vpp,
        micro-batches) class in one batch, then each layout's tail."""
        staged: dict[int, tuple[TrainingSpec, float, tuple[Any, ...]]] = {}
        for i, (t, mem) in enumerate(zip(specs, memory, strict=True)):
            mem = self.memory_bytes(t) if mem is None else mem
            if mem <= self.hw.memory_bytes:
                staged[i] = (t, mem, self._stages(cluster, t))
        self._batch_pipelines([self._pipe_key(t, st[1], st[2], _p2p_s(t, st[3]))
                               for t, _, st in staged.values()])
        return [self._finish(cluster, *staged[i]) if i in staged else None
                for i in range(len(specs))]

    def _time(self, cluster: ClusterSpec, t: TrainingSpec, mem: float) -> dict[str, Any]:
        return self._finish(cluster, t, mem, self._stages(cluster, t))

    def _finish(self, cluster: ClusterSpec, t: TrainingSpec, mem: float, stages
                ) -> dict[str, Any]:
        par = t.parallel
        costs, fwd, bwd, p2p_e, gpn, slowdown = stages
        p2p_s = _p2p_s(t, p2p_e)
        pipe = self._pipeline(t, fwd, bwd, p2p_s)
        ov = t.overlap
        key = (id(pipe), par.zero_stage, par.dp, par.cp, par.tp, par.ep, par.etp,
               ov.dp_grad, ov.param_gather, gpn, dp_bucket_bytes(t), slowdown)
        if key not in self._stage_tails:  # pipes are kept by `_pipes`, so ids stay theirs
            tails = [self._tail(t, s, gpn, slowdown, pipe, fwd) for s in range(par.pp)]
            finish = [tail[0] for tail in tails]
            ref = max(range(par.pp), key=lambda s: (finish[s], -s))
            self._stage_tails[key] = (tails[ref], ref)
        tail, ref = self._stage_tails[key]
        return self._result(t, cluster.num_gpus, mem, costs, pipe, tail, ref, p2p_e, p2p_s)

    def _tail(self, t: TrainingSpec, s: int, gpn: int, slowdown: float, pipe, fwd
              ) -> tuple[float, float, float, list[tuple[str, float]]]:
        """Stage ``s`` after its last backward: (finish, exposed DP time, optimizer time, engine
        time parts), as `simulate.training._after_pipeline`; computed relative to the window
        start and cached."""
        par = t.parallel
        sp = self._sp(par, s)
        end = pipe.stage_end_s[s]
        start = pipe.last_bwd_start_s[s] if t.overlap.dp_grad else end
        hide = fwd[s][0] if t.overlap.param_gather else 0.0
        key = (sp.dense, sp.expert, sp.total, end - start, hide, par.zero_stage, par.dp,
               par.cp, par.tp, par.ep, gpn, dp_bucket_bytes(t), slowdown, grad_bytes(t), t.framework)
        if key not in self._tails:
            self._tails[key] = self._tail_rel(par, sp, end - start, hide, gpn, slowdown,
                                              dp_bucket_bytes(t), grad_bytes(t), t.framework)
            self.stats["stage_tails"] += 1
        sync_rel, opt_s, gather_s, parts = self._tails[key]
        sync_end = start + sync_rel
        return sync_end + opt_s + gather_s, sync_end - end + gather_s, opt_s, parts

    def _tail_rel(self, par, sp: StageParams, window: float, hide: float, gpn: int,
                  slowdown: float, bucket_bytes: float, grad_size: float, framework: str
                  ) -> tuple[float, float, float, list[tuple[str, float]]]:
        chain, zero = self.chain, par.zero_stage
        shard, expert_shard = par.shard_group, par.expert_shard_group
        _, queues = grad_bucket_queues(par, sp, gpn, chain, bucket_bytes, grad_size)
        comm_s = sum((n - 1) * full.latency_s + last.latency_s for n, full, last in queues)
        parts = [p for n, full, last in queues
                 for p in ((full.engine, (n - 1) * full.latency_s), (last.engine, last.latency_s))]
        lost = min(window * slowdown, comm_s) * (1.0 - 1.0 / slowdown) if window > 0 else 0.0
        compute_end = window + lost
        sync_end = compute_end
        scale = compute_end / window if window > 0 else 1.0
        if len(queues) == 1:  # bucket i released at window*(i+1)/n, stretched by `scale`
            n, full, last = queues[0]
            sync_end = max(compute_end, _one_queue_end(window / n * scale, window * scale, n,
                                                       full.latency_s, last.latency_s))
        elif queues:
            jobs = [(window * (i + 1) / n * scale, (last if i == n - 1 else full).latency_s, q)
                    for q, (n, full, last) in enumerate(queues) for i in range(n)]
            sync_end = max(compute_end, max(share_link(jobs)))
        local = sp.dense / shard + sp.expert / expert_shard if zero >= 1 else sp.total
        opt_e = optimizer_estimate(chain, local, framework)
        parts.append((opt_e.engine, opt_e.latency_s))
        gather_s = 0.0
        for ag in param_gathers(par, sp, gpn, chain):
            parts.append((ag.engine, ag.latency_s))
            gather_s += ag.latency_s
        gather_s = max(0.0, gather_s - hide)
        return sync_end, opt_e.latency_s, gather_s, parts

    def _stage_sums(self, costs, par, ref: int, m: int) -> tuple[float, dict[str, float]]:
        """Stage ``ref``'s compute seconds and engine seconds over ``m`` micro-batches, as
        `simulate.training._stage_passes` adds them (cached; a copy of the engine dict)."""
        key = (id(costs), par.pp, par.vpp, ref, m)
        if key not in self._sums:
            compute = 0.0
            engine_s: dict[str, float] = {}
            for v, keys in enumerate(self._chunk_parts(par)):
                if v % par.pp != ref:
                    continue
                for k in keys:
                    c = costs[k]
                    compute += m * (c.fwd.compute_s + c.bwd.compute_s)
                    add_engine_time(engine_s, c.fwd.engine_s, m)
                    add_engine_time(engine_s, c.bwd.engine_s, m)
            self._sums[key] = (compute, engine_s)
        compute, engine_s = self._sums[key]
        return compute, dict(engine_s)

    def _result(self, t: TrainingSpec, num_gpus: int, mem: float, costs, pipe, tail, ref: int,
                p2p_e, p2p_s: float) -> dict[str, Any]:
        par, m, model = t.parallel, t.num_microbatches, self.model
        compute, engine_s = self._stage_sums(costs, par, ref, m)
        if par.pp > 1:
            add_engine_time(engine_s, {p2p_e.engine: p2p_s}, 2 * m * par.vpp)
        iteration, dp_exposed, opt_s, parts = tail
        for engine, seconds in parts:
            engine_s[engine] = engine_s.get(engine, 0.0) + seconds
        busy = pipe.stage_busy_s[ref]
        total_engine = sum(engine_s.values())
        if t.seq_len not in self._flops:
            self._flops[t.seq_len] = model.flops_per_token(t.seq_len, training=True)
        flops = self._flops[t.seq_len] * t.global_batch * t.seq_len
        return {
            "tokens_per_s": t.global_batch * t.seq_len / iteration,
            "mfu": flops / (iteration * num_gpus * self.hw.peak_flops(t.precision)),
            "tflops_per_gpu": flops / iteration / num_gpus / 1e12,
            "iteration_time_s": iteration, "memory_per_gpu_gib": mem / GIB,
            "bubble_fraction": pipe.bubble_fraction(ref),
            "breakdown_s": {"compute": compute,
                            "exposed_communication": busy - compute + dp_exposed,
                            "pipeline_bubble": pipe.stage_end_s[ref] - busy,
                            "optimizer": opt_s},
            "engine_coverage": {e: engine_s.get(e, 0.0) / total_engine for e in ENGINE_ORDER},
        }


def _p2p_s(t: TrainingSpec, p2p_e) -> float:
    """The p2p latency the pipeline uses (none without pipeline stages)."""
    return p2p_e.latency_s if t.parallel.pp > 1 else 0.0


def _one_queue_end(first: float, last: float, n: int, a: float, a_last: float) -> float:
    """When the last of n buckets on one stream ends (what `share_link` gives one queue).

    Bucket j is released at r_j = first + j*d (evenly spaced) and takes a (the last one a_n).
    One stream: f_j = max(r_j, f_(j-1)) + a_j, so f_n = max_j (r_j + sum of a from j on) =
    a_n + max_j (r_j + (n-1-j) a); that is linear in j, so its maximum is at j = 0 or n-1.
    """
    return a_last + max(last, first + (n - 1) * a)


def _row(result, num_gpus: int) -> dict[str, Any] | None:
    """`run_training`'s result as a search row (the LoRA path)."""
    if not result.fits:
        return None
    return {"tokens_per_s": result.tokens_per_s, "mfu": result.mfu,
            "tflops_per_gpu": result.tflops_per_gpu, "iteration_time_s": result.iteration_time_s,
            "memory_per_gpu_gib": result.memory.allocated_bytes / GIB,  # as `memory_bytes`
            "bubble_fraction": result.bubble_fraction, "breakdown_s": dict(result.breakdown_s),
            "engine_coverage": dict(result.engine_coverage)}
