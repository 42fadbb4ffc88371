# SPDX-License-Identifier: Apache-2.0
"""Top-level inference prediction: a parsed `InferenceSetup` -> `InferenceResult`.

Handles the plain case (one instance, or `dp` replicas behind a load balancer), speculative
decoding (a draft model on the same GPUs), disaggregated prefill/decode pools with KV transfer
over the network, and several models co-located on the same GPUs (``colocate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from analytical.comm import p2p_time
from analytical.errors import SpecError
from analytical.hardware import HardwareSpec
from analytical.model import ModelSpec, load_model
from simulate.engines import Estimator
from simulate.inference.layer_ops import LoraSpec
from simulate.inference.result import (
    InferenceMode,
    InferenceResult,
    PoolReport,
    SpeculativeReport,
    TenantResult,
)
from simulate.inference.run import (
    InstancePlan,
    coverage,
    lora_weight_bytes,
    make_tenant,
    memory_report,
    plan_instance,
    preset_for,
    resolve_serving,
    single_batch_serving,
    split_workload,
)
from simulate.inference.setup import ColocatedTenant, InferenceSetup
from simulate.inference.spec import InferenceSpec, ServingSpec
from simulate.inference.step_cost import MeteredCost
from simulate.serving.loop import Speculation, Tenant, run_tenants
from simulate.serving.metrics import (
    Slo,
    kv_timeline,
    latency_arrays,
    summarize_latencies,
    summarize_tenants,
)
from simulate.serving.workload import Request, Workload, make_workload


def _lora(inf: InferenceSpec) -> LoraSpec | None:
    return LoraSpec(rank=inf.lora_rank, targets=inf.lora_targets) if inf.lora_rank else None


def _plan(model: ModelSpec, hw: HardwareSpec, inf: InferenceSpec, serving: ServingSpec,
          estimator: Estimator, *, tp: int | None = None, memory_fraction: float = 1.0
          ) -> tuple[InstancePlan, Speculation | None, InstancePlan | None]:
    tp = tp or inf.tp
    lora = _lora(inf)
    draft_plan = None
    speculation = None
    extra = 0.0
    if inf.speculative:
        draft_model = load_model(inf.speculative.draft_model)
        draft_plan = plan_instance(draft_model, hw, tp=inf.speculative.draft_tp or tp, pp=1, ep=1,
                                   weight_dtype=inf.precision, kv_dtype=inf.kv_cache_dtype,
                                   serving=serving, estimator=estimator,
                                   memory_fraction=memory_fraction)
        extra = draft_plan.weight_bytes + draft_plan.activation_reserve_bytes
        speculation = Speculation(k=inf.speculative.k, acceptance=inf.speculative.acceptance,
                                  draft_cost=MeteredCost(draft_plan.tables))
    plan = plan_instance(model, hw, tp=tp, pp=inf.pp, ep=inf.ep, weight_dtype=inf.precision,
                         kv_dtype=inf.kv_cache_dtype, serving=serving, estimator=estimator,
                         memory_fraction=memory_fraction, extra_weight_bytes=extra,
                         decode_q=inf.speculative.k + 1 if inf.speculative else 1, lora=lora,
                         lora_bytes=lora_weight_bytes(model, lora, inf.lora_adapters, tp))
    return plan, speculation, draft_plan


def _check_gpus(num_gpus: int, used: int, what: str) -> None:
    if used != num_gpus:
        raise SpecError("hardware.num_gpus", f"{what} uses {used} GPUs but the scenario has "
                        f"{num_gpus}")


def predict_inference(setup: InferenceSetup, *, model: ModelSpec, hw: HardwareSpec,
                      num_gpus: int, estimator: Estimator, base_dir: Path | None = None,
                      record_steps: bool = False, keep_latencies: bool = False
                      ) -> InferenceResult:
    """Predict one model's inference: a single batch, a served stream or disaggregated pools.
    ``record_steps`` keeps the executed steps and per-request latencies (trace, plots);
    ``keep_latencies`` the per-request latencies alone (no step records)."""
    inf, serving = setup.inference, setup.serving
    if serving is not None:  # an engine preset fills what the scenario left unset
        serving = resolve_serving(serving, hw, tp=inf.tp, pp=inf.pp,
                                  max_model_len=model.max_seq_len)
    if serving and serving.prefill_pool:
        return _disaggregated(inf, serving, model=model, hw=hw, num_gpus=num_gpus,
                              estimator=estimator, base_dir=base_dir)
    _check_gpus(num_gpus, inf.gpus, "inference.parallel (tp*pp*dp)")
    single = serving is None
    serving = serving or single_batch_serving(inf)
    plan, speculation, draft = _plan(model, hw, inf, serving, estimator)
    workload = make_workload(serving.arrival, input_len=inf.input_len, output_len=inf.output_len,
                             prefix_hit=inf.prefix_hit_ratio,
                             warm_requests=inf.prefix_warm_requests, base_dir=base_dir)
    tenants, costs, steps = [], [], []
    for i, part in enumerate(split_workload(workload, inf.dp)):
        tenant, cost = make_tenant(f"replica{i}", plan, part, serving, hw, speculation)
        tenants.append(tenant)
        costs.append(cost)
        steps += run_tenants([tenant], record_steps=record_steps)
    if speculation:
        costs.append(speculation.draft_cost)  # type: ignore[arg-type]
    report = None if speculation is None else SpeculativeReport(
        k=speculation.k, acceptance=speculation.acceptance,
        expected_tokens_per_step=speculation.expected_tokens,
        draft_memory_gib=draft.weight_bytes / 2**30 if draft else 0)
    return InferenceResult(
        mode=InferenceMode.SINGLE_BATCH if single else InferenceMode.SERVING,
        metrics=summarize_tenants(tenants, Slo(ttft_s=serving.slo_ttft_s,
                                               tpot_s=serving.slo_tpot_s)),
        memory=memory_report(plan, serving.block_size), engine_coverage=coverage(costs),
        decode_fit_error=plan.tables.fit_error, batch_size=inf.batch_size,
        kv_timeline=() if single else tuple(kv_timeline(tenants[0])), speculative=report,
        step_records=tuple(steps),
        latencies=latency_arrays([s for t in tenants for s in t.sequences])
        if record_steps or keep_latencies else None,
        engine_defaults=_engine_defaults(serving, hw, inf, model))


def _engine_defaults(serving: ServingSpec, hw: HardwareSpec, inf: InferenceSpec,
                     model: ModelSpec) -> dict[str, str]:
    """Which engine release's defaults a served prediction used (empty: no engine named)."""
    preset = preset_for(serving, hw, tp=inf.tp, pp=inf.pp, max_model_len=model.max_seq_len)
    if preset is None:
        return {}
    return {"engine": preset.engine.value, "engine_version": serving.engine_version,
            "defaults_of": preset.version}


def _disaggregated(inf: InferenceSpec, serving: ServingSpec, *, model: ModelSpec,
                   hw: HardwareSpec, num_gpus: int, estimator: Estimator,
                   base_dir: Path | None) -> InferenceResult:
    """Prefill pool -> KV transfer over the network -> decode pool (DistServe/Splitwise-style)."""
    pre, dec = serving.prefill_pool, serving.decode_pool
    assert pre is not None and dec is not None
    _check_gpus(num_gpus, pre.instances * pre.tp + dec.instances * dec.tp,
                "serving.disaggregated (instances*tp of both pools)")
    pre_plan, _, _ = _plan(model, hw, inf, serving, estimator, tp=pre.tp)
    dec_plan, speculation, _ = _plan(model, hw, inf, serving, estimator, tp=dec.tp)
    workload = make_workload(serving.arrival, input_len=inf.input_len, output_len=inf.output_len,
                             prefix_hit=inf.prefix_hit_ratio,
                             warm_requests=inf.prefix_warm_requests, base_dir=base_dir)
    prefill_only = Workload(requests=tuple(
        Request(id=r.id, arrival_s=r.arrival_s, input_len=r.input_len, output_len=1,
                cached_prefix=r.cached_prefix) for r in workload.requests))
    costs: list[MeteredCost] = []
    pre_tenants = _run_pool("prefill", pre_plan, prefill_only, pre.instances, serving, hw, None,
                            costs)
    first_token = {s.req.id: s.first_token_s for t in pre_tenants for s in t.sequences}
    decode_reqs, transfer = _kv_handoff(workload, first_token, pre_plan, pre.tp, hw)
    dec_tenants = _run_pool("decode", dec_plan, Workload(requests=tuple(decode_reqs)),
                            dec.instances, serving, hw, speculation, costs)
    finish = {s.req.id: s.finish_s for t in dec_tenants for s in t.sequences}
    arr = _end_to_end(workload, first_token, finish)
    metrics = replace(
        summarize_latencies(arr, Slo(ttft_s=serving.slo_ttft_s, tpot_s=serving.slo_tpot_s)),
        preemptions=sum(t.state.preemptions for t in pre_tenants + dec_tenants if t.state))
    pools = {"prefill": PoolReport(instances=pre.instances, tp=pre.tp,
                                   memory=memory_report(pre_plan, serving.block_size)),
             "decode": PoolReport(instances=dec.instances, tp=dec.tp,
                                  memory=memory_report(dec_plan, serving.block_size))}
    return InferenceResult(
        mode=InferenceMode.DISAGGREGATED, metrics=metrics, pools=pools,
        kv_transfer_s={"mean": float(np.mean(list(transfer.values()))) if transfer else 0.0,
                       "max": float(max(transfer.values(), default=0.0))},
        engine_coverage=coverage(costs))


def _run_pool(name: str, plan, workload: Workload, instances: int, serving: ServingSpec,
              hw: HardwareSpec, speculation, costs: list[MeteredCost]) -> list[Tenant]:
    """Split the workload over the pool's instances and run each alone; their costs go to
    ``costs``."""
    tenants: list[Tenant] = []
    for i, part in enumerate(split_workload(workload, instances)):
        tenant, cost = make_tenant(f"{name}{i}", plan, part, serving, hw, speculation)
        run_tenants([tenant])
        tenants.append(tenant)
        costs.append(cost)
    return tenants


def _kv_handoff(workload: Workload, first_token: dict[int, float], pre_plan, pre_tp: int,
                hw: HardwareSpec) -> tuple[list[Request], dict[int, float]]:
    """The decode pool's requests (arriving once their KV cache crossed the network after the
    first token) and each request's transfer time."""
    kv_bytes_full = pre_plan.kv_bytes_per_token * pre_plan.shard.tp  # whole model, per token
    same_node = False  # pools sit on different nodes: KV crosses the network
    decode_reqs = []
    transfer = {}
    for r in workload.requests:
        if r.output_len <= 1:
            continue
        # each GPU of the prefill instance sends its KV shard in parallel to the decode instance
        per_gpu = r.input_len * kv_bytes_full / max(pre_tp, 1)
        transfer[r.id] = p2p_time(per_gpu, hw, same_node=same_node)
        decode_reqs.append(Request(id=r.id, arrival_s=first_token[r.id] + transfer[r.id],
                                   input_len=r.input_len + 1, output_len=r.output_len - 1,
                                   cached_prefix=r.input_len))
    decode_reqs.sort(key=lambda r: (r.arrival_s, r.id))
    return decode_reqs, transfer


def _end_to_end(workload: Workload, first_token: dict[int, float],
                finish: dict[int, float]) -> dict[str, np.ndarray]:
    """Latency arrays per original request, from its first token (prefill pool) and its finish
    (decode pool; the first token for single-token outputs)."""
    reqs = workload.requests
    arrival = np.array([r.arrival_s for r in reqs])
    first = np.array([first_token[r.id] for r in reqs])
    done = np.array([finish.get(r.id, first_token[r.id]) for r in reqs])
    outs = np.array([r.output_len for r in reqs])
    return {"arrival": arrival, "ttft": first - arrival, "e2e": done - arrival, "finish": done,
            "tpot": np.where(outs > 1, (done - first) / np.maximum(outs - 1, 1), 0.0),
            "input_len": np.array([r.input_len for r in reqs]), "output_len": outs}


def predict_colocated(tenants: Sequence[ColocatedTenant], *, hw: HardwareSpec, num_gpus: int,
                      estimator: Estimator, base_dir: Path | None = None) -> InferenceResult:
    """Several models on the same GPUs: each gets `memory_fraction` of the memory (like vLLM's
    gpu_memory_utilization per process) and the GPUs run their steps time-sliced, so each
    model's steps wait behind the others' (the compute interference)."""
    running: list[Tenant] = []
    costs: list[MeteredCost] = []
    plans: dict[str, InstancePlan] = {}
    slos: dict[str, Slo] = {}
    for i, spec in enumerate(tenants):
        inf = spec.inference
        model = load_model(spec.model)
        serving = resolve_serving(spec.serving, hw, tp=inf.tp, pp=inf.pp,
                                  max_model_len=model.max_seq_len)
        _check_gpus(num_gpus, inf.tp * inf.pp, f"colocate[{i}].inference.parallel (tp*pp)")
        plan, speculation, _ = _plan(model, hw, inf, serving, estimator,
                                     memory_fraction=spec.memory_fraction)
        workload = make_workload(serving.arrival, input_len=inf.input_len,
                                 output_len=inf.output_len, prefix_hit=inf.prefix_hit_ratio,
                                 warm_requests=inf.prefix_warm_requests, base_dir=base_dir)
        tenant, cost = make_tenant(spec.name, plan, workload, serving, hw, speculation)
        running.append(tenant)
        costs.append(cost)
        plans[spec.name] = plan
        slos[spec.name] = Slo(ttft_s=serving.slo_ttft_s, tpot_s=serving.slo_tpot_s)
    run_tenants(running)
    results = {t.name: TenantResult(metrics=summarize_tenants([t], slos[t.name]),
                                    memory=memory_report(plans[t.name], t.config.block_size))
               for t in running}
    return InferenceResult(mode=InferenceMode.COLOCATED, tenants=results,
                           engine_coverage=coverage(costs))
