# SPDX-License-Identifier: Apache-2.0
"""One training iteration end to end: memory verdict, graph, engines, pipeline, DP, optimizer.

Rank placement follows Megatron-Core's default order (tp fastest, then cp, then dp/ep, then pp):
a group's ranks-per-node is how many of its members share a node given that stride. The layers
of a stage are estimated once per layer kind (dense / MoE) and multiplied.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from analytical.attention_span import AttentionKind
from analytical.dtypes import DType
from analytical.hardware import GIB, HardwareSpec, get_hardware
from analytical.layer_spec import LoraSpec, Precision, Sharding, Stream, ranks_per_node
from analytical.memory import TrainingMemory, training_memory
from analytical.model import load_model
from analytical.ops import CollectiveKind, CollectiveSpec, OpSpec
from analytical.parallel import ParallelConfig, Schedule
from analytical.stage import StageParams, chunk_layers, is_moe_layer, stage_params
from simulate.comm_ctas import cp_capped_estimates
from simulate.costs import BlockCost, OpEvent, add_engine_time, block_cost, pass_timeline
from simulate.dp_sync import bucket_bytes, collective_spec, grad_bucket_queues, param_gathers
from simulate.efficiency import (
    framework_estimates,
    grad_reduce_dtype,
    optimizer_estimate,
)
from simulate.engines import ENGINE_ORDER, EngineChain, Estimate
from simulate.extrapolation import sliced_estimates
from simulate.fsdp_root import fsdp_root_blocks, with_root_keys
from simulate.graph import Block, TrainStep, embedding_block, head_block, layer_block
from simulate.layout import validate_layout
from simulate.lora import lora_trainable_params
from simulate.moe_host import host_bound_costs
from simulate.moe_overlap import a2a_overlap_costs
from simulate.offload import offload_costs, offload_memory
from simulate.overlap import default_compute_slowdown, share_link
from simulate.scenario import Scenario, TrainingSpec
from simulate.schedule import PipelineResult, TaskRecord, simulate_pipeline
from simulate.torch_kernels import cp_sharding
from simulate.tp_overlap import tp_overlap_args
from simulate.trace import expand_ops

__all__ = ["GIB", "TrainingResult", "run_training"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingResult:
    """Prediction for one training scenario; timing fields are None when it does not fit."""

    name: str
    model: str
    hardware: str
    num_gpus: int
    fits: bool
    memory: TrainingMemory
    memory_capacity_bytes: float
    num_microbatches: int
    model_flops_per_iteration: float
    iteration_time_s: float | None = None
    tokens_per_s: float | None = None
    tflops_per_gpu: float | None = None
    mfu: float | None = None
    bubble_fraction: float | None = None
    breakdown_s: dict[str, float] | None = None
    engine_coverage: dict[str, float] = field(default_factory=dict)
    engines_available: dict[str, bool] = field(default_factory=dict)
    critical_stage: int | None = None
    warnings: tuple[str, ...] = ()
    records: tuple[TaskRecord, ...] = ()

    @property
    def memory_per_gpu_gib(self) -> float:
        """What torch.cuda reports as the reserved peak (torchtitan's memory line)."""
        return self.memory.total_bytes / GIB


_rpn = ranks_per_node


def _gpn(scenario: Scenario, hw: HardwareSpec) -> int:
    return scenario.cluster.node_size(hw.gpus_per_node)


def spec_memory(model, t: TrainingSpec) -> TrainingMemory:
    """The memory of one training spec, as `run_training` judges it (also the search's pruning)."""
    return offload_memory(model, t, memory_before_offload(model, t))


def memory_before_offload(model, t: TrainingSpec) -> TrainingMemory:
    """`spec_memory` with every state on the GPU (the search reuses it per offload setting)."""
    return training_memory(model, t.parallel, micro_batch=t.micro_batch, seq_len=t.seq_len,
                           recompute=t.recompute, recompute_modules=t.recompute_modules,
                           schedule=t.schedule, num_microbatches=t.num_microbatches,
                           dropout=model.norm == "layernorm", compiled_loss=t.compiled_loss,
                           compiled=t.compile,
                           flash_attention=t.fused_attention,
                           framework=t.framework, fp8=t.precision == DType.FP8,
                           grad_dtype_bytes=t.grad_buffer_bytes,
                           optimizer_state_bytes=float(t.optimizer_state_dtype.bytes),
                           combined_1f1b=combined_1f1b(t),
                           lora_params=(lora_trainable_params(model, t.lora_rank, t.lora_targets)
                                        if t.lora_rank else None),
                           lora_base_bytes=float(t.lora_base_dtype.bytes),
                           lora_targets=t.lora_targets)


def combined_1f1b(t: TrainingSpec) -> bool:
    """Whether Megatron-Core's combined 1F1B order runs: the a2a overlap
    (``training.overlap.moe_a2a``) without a pipeline or interleaved, the only layouts it
    takes (`analytical.memory._merged_passes`)."""
    par = t.parallel
    return t.overlap.moe_a2a and t.schedule != Schedule.GPIPE and (par.pp == 1 or par.vpp > 1)


def _lora_stage(model, t: TrainingSpec, sp: StageParams) -> StageParams:
    """Stage parameters that train under LoRA: the adapters of this stage's layers per TP rank
    (an even split over tp; A or B of each adapter is replicated, so this slightly undercounts)."""
    adapters = lora_trainable_params(model, t.lora_rank, t.lora_targets)
    layers = len(sp.layer_is_moe)
    local = adapters * layers / model.layers / t.parallel.tp
    return replace(sp, dense=local, expert=0.0)


def _train_step(t: TrainingSpec, gpn: int) -> TrainStep:
    """Sharding and precision of one rank, ranks placed in Megatron-Core's order (tp fastest,
    then cp, then dp; experts: etp fastest, then ep)."""
    par = t.parallel
    sh = Sharding(tp=par.tp, cp=par.cp, ep=par.ep, etp=par.etp, sp=par.sp,
                  tp_rpn=_rpn(par.tp, 1, gpn), cp_rpn=_rpn(par.cp, par.tp, gpn),
                  ep_rpn=_rpn(par.ep, par.expert_tp, gpn), fsdp_group=par.fsdp_group,
                  fsdp_rpn=_rpn(par.fsdp_group, par.tp, gpn),
                  **cp_sharding(t.framework, t.cp_algorithm))
    lora = LoraSpec(rank=t.lora_rank, targets=t.lora_targets) if t.lora_rank else None
    return TrainStep(sharding=sh, micro_batch=t.micro_batch, seq_len=t.seq_len, lora=lora,
                     precision=Precision(gemm=t.precision, act=act_dtype(t)), recompute=t.recompute,
                     attention=t.attention, recompute_modules=t.recompute_modules,
                     framework=t.framework, compiled=t.compile, fp8_recipe=t.fp8_recipe,
                     ce_fusion=t.cross_entropy_fusion, tp_overlap=t.overlap.tp_comm,
                     compiled_loss=t.compiled_loss, router_fusion=t.moe_router_fusion,
                     fused_expert_mlp=t.moe_fused_mlp, bias_dropout_fusion=t.bias_dropout_fusion)


def act_dtype(t: TrainingSpec) -> DType:
    """Activation (and bf16/fp16 parameter copy) dtype: fp16 runs keep fp16, others bf16."""
    return DType.FP16 if t.precision == DType.FP16 else DType.BF16


def grad_bytes(t: TrainingSpec) -> float:
    """Bytes per gradient in the data-parallel reduction (`efficiency.grad_reduce_dtype`)."""
    return float((t.grad_reduce_dtype or grad_reduce_dtype(t.framework, act_dtype(t))).bytes)


def dp_bucket_bytes(t: TrainingSpec) -> float:
    """One gradient bucket's bytes for ``t`` (`dp_sync.bucket_bytes`: the framework's rule or
    the stated ``dp_bucket_mb``); the search's evaluator sizes its buckets with it too."""
    return bucket_bytes(t.framework, t.dp_bucket_mb, t.parallel.dp, grad_bytes(t),
                        t.overlap.dp_grad)


def run_training(scenario: Scenario, *, chain: EngineChain | None = None,
                 store_path: str | None = None, use_store: bool = True,
                 use_predictors: bool = True, tracking_uri: str | None = None,
                 record: bool = False) -> TrainingResult:
    """Predict one training iteration of ``scenario`` (which must have a training block)."""
    t = scenario.training
    if t is None:
        raise ValueError("run_training needs a scenario with a training block")
    model = load_model(scenario.model)
    hw = chain.hardware if chain is not None else get_hardware(scenario.cluster.gpu)
    warnings = validate_layout(model, hw, scenario.cluster, t)
    memory = spec_memory(model, t)
    m, gpus = t.num_microbatches, scenario.cluster.num_gpus
    flops = model.flops_per_token(t.seq_len, training=True) * t.global_batch * t.seq_len
    if t.lora_rank:  # frozen base: no weight-gradient GEMMs, so 4N instead of 6N per token
        flops *= 2.0 / 3.0
    base = dict(name=scenario.name, model=model.name, hardware=hw.name, num_gpus=gpus,
                memory=memory, memory_capacity_bytes=hw.memory_bytes, num_microbatches=m,
                model_flops_per_iteration=flops, warnings=tuple(warnings))
    # What must fit is the allocated peak: the caching allocator hands its free cached segments
    # back and retries before an OOM (`analytical.step_peak`); the reserved total is reported.
    if memory.allocated_bytes > hw.memory_bytes:
        return TrainingResult(fits=False, **base)
    if chain is None:
        chain = EngineChain(hw, store_path=store_path, use_store=use_store,
                            use_predictors=use_predictors, tracking_uri=tracking_uri)
    return _simulate(model, hw, scenario, t, chain, base, record)


def _pp_send(model, par: ParallelConfig, step: TrainStep, gpn: int) -> CollectiveSpec:
    """The activation send between pipeline stages (one micro-batch, sequence-parallel shard),
    inside the node when the stage stride leaves room."""
    act_bytes = step.tokens * model.hidden * step.precision.act.bytes / (par.tp if par.sp else 1)
    pp_stride = par.tp * par.cp * par.dp
    return collective_spec(CollectiveKind.SEND_RECV, act_bytes, 2, 2 if pp_stride * 2 <= gpn else 1)


def _simulate(model, hw: HardwareSpec, scenario: Scenario, t: TrainingSpec, chain: EngineChain,
              base: dict[str, Any], record: bool) -> TrainingResult:
    par, m, gpn = t.parallel, t.num_microbatches, _gpn(scenario, hw)
    slowdown = t.overlap.compute_slowdown or default_compute_slowdown(hw, t.overlap.comm_sms)
    step = _train_step(t, gpn)
    blocks = _blocks(model, par, step)
    ops = [n.op for b in blocks.values() for n in (*b.fwd, *b.bwd)] + [_pp_send(model, par, step, gpn)]

    def estimate(o: list[OpSpec]) -> list[Estimate]:
        return framework_estimates(o, sliced_estimates(chain, o), hw, t.framework,
                                   kernel=t.attention, compiled=t.compile)

    priced = estimate(ops)
    # the pipeline's send (priced last) keeps its price where a capped CP send shares its key
    est = cp_capped_estimates(ops, priced, blocks.values(), hw, t.overlap.cp_max_ctas)
    p2p_e = priced[-1]
    tpo = tp_overlap_args(t.framework, par.tp, hw, blocks, estimate, t.overlap.tp_comm,
                          t.transformer_engine)
    costs: dict[Any, BlockCost] = {k: block_cost(b, est, tp_overlap=t.overlap.tp_comm,
                                                 slowdown=slowdown, **tpo)
                                   for k, b in blocks.items()}
    costs = a2a_overlap_costs(costs, blocks, est, t, slowdown)
    costs = host_bound_costs(costs, blocks, step, est, hw, t.cuda_graph)
    costs = offload_costs(costs, model, t, hw)
    p2p_s = p2p_e.latency_s if par.pp > 1 else 0.0

    fwd, bwd, compute, engine_s = _stage_passes(model, par, costs, m)
    pipe = simulate_pipeline(schedule=t.schedule, pp=par.pp, vpp=par.vpp, num_microbatches=m,
                             fwd_s=fwd, bwd_s=bwd, p2p_s=p2p_s, record=record,
                             combined=t.overlap.moe_a2a)
    if par.pp > 1:
        sends = 2 * m * par.vpp  # activations forward and gradients backward per chunk
        for s in range(par.pp):
            add_engine_time(engine_s[s], {p2p_e.engine: p2p_s}, sends)
    finish, extra = _after_pipeline(model, hw, t, chain, pipe, fwd, gpn, slowdown, engine_s)
    ref = max(range(par.pp), key=lambda s: (finish[s], -s))
    iteration = finish[ref]
    busy = pipe.stage_busy_s[ref]
    breakdown = {
        "compute": compute[ref],
        "exposed_communication": busy - compute[ref] + extra[ref]["dp_exposed_s"],
        "pipeline_bubble": pipe.stage_end_s[ref] - busy,
        "optimizer": extra[ref]["optimizer_s"],
    }
    total_engine = sum(engine_s[ref].values())
    coverage = {e: engine_s[ref].get(e, 0.0) / total_engine for e in ENGINE_ORDER}
    tokens = t.global_batch * t.seq_len
    records = pipe.records + tuple(r for s in range(par.pp) for r in extra[s]["records"])
    if record:  # operators and collectives inside the first micro-batch of each stage
        records += tuple(expand_ops(pipe.records, _op_timelines(model, par, blocks, est,
                                                                t.overlap.tp_comm)))
    return TrainingResult(
        fits=True, iteration_time_s=iteration, tokens_per_s=tokens / iteration,
        tflops_per_gpu=base["model_flops_per_iteration"] / iteration / base["num_gpus"] / 1e12,
        mfu=base["model_flops_per_iteration"] / (iteration * base["num_gpus"]
                                                 * hw.peak_flops(t.precision)),
        bubble_fraction=pipe.bubble_fraction(ref), breakdown_s=breakdown,
        engine_coverage=coverage, engines_available=dict(chain.available), critical_stage=ref,
        records=records if record else (), **base)


def _layer_key(model, index: int) -> tuple[bool, AttentionKind]:
    """What makes layers differ in cost: routed experts or not, and the attention kind."""
    return is_moe_layer(model, index), model.layer_kinds[index]


def _blocks(model, par: ParallelConfig, step: TrainStep) -> dict[Any, Block]:
    """The distinct blocks of a rank: one per layer kind (`_layer_key`: dense or MoE, full or
    windowed attention), embedding, head. Per-layer parameters on this rank size the
    ZeRO-3/FSDP gathers."""
    one = stage_params(model, tp=par.tp, pp=1, vpp=1, ep=par.ep, stage=0, etp=par.etp)
    blocks: dict[Any, Block] = {}
    for key in sorted({_layer_key(model, i) for i in range(model.layers)}):
        blocks[key] = layer_block(model, step, moe=key[0], attention=key[1],
                                  layer_params_per_rank=one.largest_layer)
    blocks["embedding"] = embedding_block(model, step)
    blocks["head"] = head_block(model, step)
    return blocks | fsdp_root_blocks(model, step, pp=par.pp)


def _chunk_blocks(model, par: ParallelConfig) -> list[list[Any]]:
    """Block keys of each virtual chunk v (stage v % pp, chunk v // pp), in forward order:
    embedding first, layers (as `analytical.stage.stage_layers`), head last."""
    chunks = chunk_layers(model.layers, par.pp * par.vpp, par.pipeline_split)
    out = []
    for v, layers in enumerate(chunks):
        keys: list[Any] = ["embedding"] if v == 0 else []
        keys += [_layer_key(model, i) for i in layers]
        out.append(keys + (["head"] if v == len(chunks) - 1 else []))
    return with_root_keys(out, par)


def _stage_passes(model, par: ParallelConfig, costs: dict[Any, BlockCost], m: int):
    """Per stage and chunk: forward/backward time of one micro-batch; per stage: compute time
    and engine seconds of all ``m`` micro-batches."""
    fwd, bwd = ([[0.0] * par.vpp for _ in range(par.pp)] for _ in range(2))
    compute = [0.0] * par.pp
    engine_s: list[dict[str, float]] = [{} for _ in range(par.pp)]
    for v, keys in enumerate(_chunk_blocks(model, par)):
        stage, chunk = v % par.pp, v // par.pp
        for c in (costs[k] for k in keys):
            fwd[stage][chunk] += c.fwd.elapsed_s
            bwd[stage][chunk] += c.bwd.elapsed_s
            compute[stage] += m * (c.fwd.compute_s + c.bwd.compute_s)
            add_engine_time(engine_s[stage], c.fwd.engine_s, m)
            add_engine_time(engine_s[stage], c.bwd.engine_s, m)
    return fwd, bwd, compute, engine_s


def _op_timelines(model, par: ParallelConfig, blocks: dict[Any, Block], est: dict[str, Any],
                  tp_overlap: bool) -> dict[tuple[int, int, str], list[OpEvent]]:
    """Each (stage, chunk) pass's operators end to end: embedding, layers, head forward; the
    reverse in backward (`simulate.costs.pass_timeline` per block)."""
    passes = {k: (pass_timeline(b.fwd, est, tp_overlap=tp_overlap),
                  pass_timeline(b.bwd, est, tp_overlap=tp_overlap)) for k, b in blocks.items()}
    out: dict[tuple[int, int, str], list[OpEvent]] = {}
    for v, keys in enumerate(_chunk_blocks(model, par)):
        for direction, index, order in (("F", 0, keys), ("B", 1, keys[::-1])):
            events: list[OpEvent] = []
            offset = 0.0
            for key in order:
                events += [replace(e, start_s=e.start_s + offset, end_s=e.end_s + offset)
                           for e in passes[key][index]]
                offset = max((e.end_s for e in events), default=offset)
            out[(v % par.pp, v // par.pp, direction)] = events
    return out


def _after_pipeline(model, hw: HardwareSpec, t: TrainingSpec, chain: EngineChain,
                    pipe: PipelineResult, fwd: list[list[float]], gpn: int, slowdown: float,
                    engine_s: list[dict[str, float]]) -> tuple[list[float], list[dict[str, Any]]]:
    """DP gradient sync (bucketed, overlapped with the last backward), optimizer step and the
    ZeRO parameter all-gather, per stage. Returns each stage's finish time and its parts."""
    par = t.parallel
    finish, extra = [], []
    for s in range(par.pp):
        sp = stage_params(model, tp=par.tp, pp=par.pp, vpp=par.vpp, ep=par.ep, stage=s,
                          etp=par.etp, split=par.pipeline_split)
        if t.lora_rank:  # only the adapters train: their share of this stage, split over tp
            sp = _lora_stage(model, t, sp)
        end = pipe.stage_end_s[s]
        start = pipe.last_bwd_start_s[s] if t.overlap.dp_grad else end
        sync_end, records = _grad_sync(t, chain, sp, s, start=start, end=end, gpn=gpn,
                                       slowdown=slowdown, engine_s=engine_s[s])
        opt_s, gather_s = _optimizer_step(t, chain, sp, gpn=gpn, hide_s=fwd[s][0],
                                          engine_s=engine_s[s])
        records.append(TaskRecord(stage=s, stream=Stream.COMPUTE, name="optimizer",
                                  start_s=sync_end, end_s=sync_end + opt_s))
        finish.append(sync_end + opt_s + gather_s)
        extra.append({"dp_exposed_s": sync_end - end + gather_s,
                      "optimizer_s": opt_s, "records": records})
    return finish, extra


def _grad_sync(t: TrainingSpec, chain: EngineChain, sp, stage: int, *, start: float,
               end: float, gpn: int, slowdown: float,
               engine_s: dict[str, float]) -> tuple[float, list[TaskRecord]]:
    """One stage's gradient buckets (dense over dp*cp, expert over the expert shard group)
    released evenly over ``start..end`` and sharing one link; the backward they overlap runs
    at 1/slowdown. Returns when the sync ends (>= the stretched compute end) and its record."""
    kind, queues = grad_bucket_queues(t.parallel, sp, gpn, chain, dp_bucket_bytes(t),
                                      grad_bytes(t))
    jobs, estimates = [], []
    for queue, (n, full, last) in enumerate(queues):
        estimates += [full] * (n - 1) + [last]
        jobs += [(start + (end - start) * (i + 1) / n, queue) for i in range(n)]
    comm_s = sum(e.latency_s for e in estimates)
    for e in estimates:
        add_engine_time(engine_s, {e.engine: e.latency_s}, 1)
    window = end - start
    # Backward compute sharing the GPU with gradient buckets runs at 1/slowdown.
    lost = min(window * slowdown, comm_s) * (1.0 - 1.0 / slowdown) if window > 0 else 0.0
    compute_end = end + lost
    sync_end = compute_end
    records = []
    if jobs:
        scale = (compute_end - start) / window if window > 0 else 1.0
        done = share_link([(start + (r - start) * scale, e.latency_s, q)
                           for (r, q), e in zip(jobs, estimates, strict=True)])
        sync_end = max(compute_end, max(done))
        records.append(TaskRecord(stage=stage, stream=Stream.DP, name=f"grad_{kind}",
                                  start_s=start, end_s=sync_end))
    return sync_end, records


def _optimizer_step(t: TrainingSpec, chain: EngineChain, sp, *, gpn: int, hide_s: float,
                    engine_s: dict[str, float]) -> tuple[float, float]:
    """The optimizer over this rank's (ZeRO-sharded) parameters, then, for the distributed
    optimizer, the exposed part of the bf16 parameter all-gather (hidden behind ``hide_s`` of
    the first forward when overlapped). Returns (optimizer_s, exposed gather_s)."""
    par, zero, shard = t.parallel, t.parallel.zero_stage, t.parallel.dp * t.parallel.cp
    local = sp.dense / shard + sp.expert / par.expert_shard_group if zero >= 1 else sp.total
    opt_e = optimizer_estimate(chain, local, t.framework)
    add_engine_time(engine_s, {opt_e.engine: opt_e.latency_s}, 1)
    gathers = param_gathers(par, sp, gpn, chain)
    for ag in gathers:
        add_engine_time(engine_s, {ag.engine: ag.latency_s}, 1)
    gather_s = sum(ag.latency_s for ag in gathers)
    return opt_e.latency_s, max(0.0, gather_s - (hide_s if t.overlap.param_gather else 0.0))
