# SPDX-License-Identifier: Apache-2.0
"""Top-level inference prediction: one scenario's ``inference`` (+ ``serving``) blocks -> JSON.

Handles the plain case (one instance, or `dp` replicas behind a load balancer), speculative
decoding (a draft model on the same GPUs), disaggregated prefill/decode pools with KV transfer
over the network, and several models co-located on the same GPUs (``colocate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from analytical.comm import p2p_time
from analytical.errors import SpecError
from analytical.hardware import HardwareSpec
from analytical.model import ModelSpec, load_model
from simulate.inference.layer_ops import LoraSpec
from simulate.inference.run import (
    InstancePlan,
    coverage,
    lora_weight_bytes,
    make_tenant,
    memory_report,
    plan_instance,
    resolve_serving,
    single_batch_serving,
    split_workload,
)
from simulate.inference.spec import InferenceSpec, ServingSpec, parse_inference, parse_serving
from simulate.inference.step_cost import EstimateFn, MeteredCost
from simulate.serving.loop import Speculation, Tenant, run_tenants
from simulate.serving.metrics import (
    Slo,
    kv_timeline,
    latency_arrays,
    summarize_latencies,
    summarize_tenants,
)
from simulate.serving.trace_formats import has_trace
from simulate.serving.workload import Request, Workload, make_workload


def _lora(inf: InferenceSpec) -> LoraSpec | None:
    return LoraSpec(rank=inf.lora_rank, targets=inf.lora_targets) if inf.lora_rank else None


def _plan(model: ModelSpec, hw: HardwareSpec, inf: InferenceSpec, serving: ServingSpec,
          estimate: EstimateFn, *, tp: int | None = None, memory_fraction: float = 1.0
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
                                   serving=serving, estimate=estimate,
                                   memory_fraction=memory_fraction)
        extra = draft_plan.weight_bytes + draft_plan.activation_reserve_bytes
        speculation = Speculation(k=inf.speculative.k, acceptance=inf.speculative.acceptance,
                                  draft_cost=MeteredCost(draft_plan.tables))
    plan = plan_instance(model, hw, tp=tp, pp=inf.pp, ep=inf.ep, weight_dtype=inf.precision,
                         kv_dtype=inf.kv_cache_dtype, serving=serving, estimate=estimate,
                         memory_fraction=memory_fraction, extra_weight_bytes=extra,
                         decode_q=inf.speculative.k + 1 if inf.speculative else 1, lora=lora,
                         lora_bytes=lora_weight_bytes(model, lora, inf.lora_adapters, tp))
    return plan, speculation, draft_plan


def _check_gpus(num_gpus: int, used: int, what: str) -> None:
    if used != num_gpus:
        raise SpecError("hardware.num_gpus", f"{what} uses {used} GPUs but the scenario has "
                        f"{num_gpus}")


def _scalar(stats: Mapping[str, float]) -> float:
    return stats["mean"]


def predict_inference(doc: Mapping[str, Any], *, model: ModelSpec, hw: HardwareSpec,
                      num_gpus: int, estimate: EstimateFn, base_dir: Path | None = None,
                      record_steps: bool = False) -> dict[str, Any]:
    """Predict the scenario's inference; returns the JSON-ready result."""
    inf = parse_inference(doc["inference"], lengths_from_trace=has_trace(doc))
    serving = parse_serving(doc["serving"]) if "serving" in doc else None
    if serving is not None:  # an engine preset fills what the scenario left unset
        serving = resolve_serving(serving, hw, tp=inf.tp, pp=inf.pp)
    if serving and serving.prefill_pool:
        return _disaggregated(inf, serving, model=model, hw=hw, num_gpus=num_gpus,
                              estimate=estimate, base_dir=base_dir)
    _check_gpus(num_gpus, inf.gpus, "inference.parallel (tp*pp*dp)")
    single = serving is None
    serving = serving or single_batch_serving(inf)
    plan, speculation, draft = _plan(model, hw, inf, serving, estimate)
    arrival = serving.arrival
    workload = make_workload(arrival, input_len=inf.input_len, output_len=inf.output_len,
                             prefix_hit=inf.prefix_hit_ratio, base_dir=base_dir)
    tenants, costs, steps = [], [], []
    for i, part in enumerate(split_workload(workload, inf.dp)):
        tenant, cost = make_tenant(f"replica{i}", plan, part, serving, hw, speculation)
        tenants.append(tenant)
        costs.append(cost)
        steps += run_tenants([tenant], record_steps=record_steps)
    if speculation:
        costs.append(speculation.draft_cost)  # type: ignore[arg-type]
    metrics = summarize_tenants(tenants, Slo(ttft_s=serving.slo_ttft_s, tpot_s=serving.slo_tpot_s))
    result: dict[str, Any] = {
        "mode": "single_batch" if single else "serving",
        "fits": True,
        "memory": memory_report(plan, serving.block_size),
        "engine_coverage": coverage(costs),
        "step_model": {"decode_attention_fit_max_rel_error": plan.tables.fit_error},
    }
    if single:
        result.update({
            "ttft_s": _scalar(metrics["ttft_s"]),
            "tpot_s": _scalar(metrics["tpot_s"]),
            "e2e_latency_s": _scalar(metrics["e2e_latency_s"]),
            "throughput_tokens_per_s": metrics["throughput_tokens_per_s"],
            "requests_per_s": metrics["requests_per_s"],
            "batch_size": inf.batch_size,
        })
    else:
        result.update(metrics)
        result["kv_utilisation_timeline"] = kv_timeline(tenants[0])
    if speculation:
        result["speculative"] = {"k": speculation.k, "acceptance": speculation.acceptance,
                                 "expected_tokens_per_step": speculation.expected_tokens,
                                 "draft_memory_gib": draft.weight_bytes / 2**30 if draft else 0}
    if record_steps:  # private keys for --trace / --plot; the CLI drops them from the JSON
        result["_steps"] = steps
        result["_latencies"] = latency_arrays([s for t in tenants for s in t.sequences])
    return result


def _disaggregated(inf: InferenceSpec, serving: ServingSpec, *, model: ModelSpec,
                   hw: HardwareSpec, num_gpus: int, estimate: EstimateFn,
                   base_dir: Path | None) -> dict[str, Any]:
    """Prefill pool -> KV transfer over the network -> decode pool (DistServe/Splitwise-style)."""
    pre, dec = serving.prefill_pool, serving.decode_pool
    assert pre is not None and dec is not None
    _check_gpus(num_gpus, pre.instances * pre.tp + dec.instances * dec.tp,
                "serving.disaggregated (instances*tp of both pools)")
    pre_plan, _, _ = _plan(model, hw, inf, serving, estimate, tp=pre.tp)
    dec_plan, speculation, _ = _plan(model, hw, inf, serving, estimate, tp=dec.tp)
    workload = make_workload(serving.arrival, input_len=inf.input_len, output_len=inf.output_len,
                             prefix_hit=inf.prefix_hit_ratio, base_dir=base_dir)
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
    metrics = summarize_latencies(arr, Slo(ttft_s=serving.slo_ttft_s, tpot_s=serving.slo_tpot_s))
    metrics.update({
        "mode": "disaggregated",
        "fits": True,
        "preemptions": sum(t.state.preemptions for t in pre_tenants + dec_tenants if t.state),
        "memory": {"prefill": memory_report(pre_plan, serving.block_size),
                   "decode": memory_report(dec_plan, serving.block_size)},
        "kv_transfer_s": {"mean": float(np.mean(list(transfer.values()))) if transfer else 0.0,
                          "max": float(max(transfer.values(), default=0.0))},
        "pools": {"prefill": {"instances": pre.instances, "tp": pre.tp},
                  "decode": {"instances": dec.instances, "tp": dec.tp}},
        "engine_coverage": coverage(costs),
    })
    return metrics


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


def predict_colocated(doc: Mapping[str, Any], *, hw: HardwareSpec, num_gpus: int,
                      estimate: EstimateFn, base_dir: Path | None = None) -> dict[str, Any]:
    """Several models on the same GPUs: each gets `memory_fraction` of the memory (like vLLM's
    gpu_memory_utilization per process) and the GPUs run their steps time-sliced, so each
    model's steps wait behind the others' (the compute interference)."""
    entries = doc["colocate"]
    if not isinstance(entries, list) or len(entries) < 2:
        raise SpecError("colocate", "expected a list of at least two tenants")
    total_fraction = 0.0
    tenants: list[Tenant] = []
    costs: list[MeteredCost] = []
    plans: dict[str, InstancePlan] = {}
    slos: dict[str, Slo] = {}
    for i, entry in enumerate(entries):
        path = f"colocate[{i}]"
        if not isinstance(entry, Mapping):
            raise SpecError(path, "expected a mapping")
        unknown = sorted(set(entry) - {"name", "model", "memory_fraction", "inference",
                                       "serving"})
        if unknown:
            raise SpecError(f"{path}.{unknown[0]}", "unknown key; allowed: name, model, "
                            "memory_fraction, inference, serving")
        for key in ("name", "model", "inference", "serving"):
            if key not in entry:
                raise SpecError(f"{path}.{key}", "missing")
        fraction = entry.get("memory_fraction", 1.0 / len(entries))
        if not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
            raise SpecError(f"{path}.memory_fraction", f"must be in (0, 1], got {fraction!r}")
        total_fraction += fraction
        inf = parse_inference(entry["inference"], f"{path}.inference",
                              lengths_from_trace=has_trace(entry))
        serving = parse_serving(entry["serving"], f"{path}.serving")
        serving = resolve_serving(serving, hw, tp=inf.tp, pp=inf.pp)
        _check_gpus(num_gpus, inf.tp * inf.pp, f"{path}.inference.parallel (tp*pp)")
        model = load_model(str(entry["model"]))
        plan, speculation, _ = _plan(model, hw, inf, serving, estimate,
                                     memory_fraction=float(fraction))
        workload = make_workload(serving.arrival, input_len=inf.input_len,
                                 output_len=inf.output_len, prefix_hit=inf.prefix_hit_ratio,
                                 base_dir=base_dir)
        name = str(entry["name"])
        tenant, cost = make_tenant(name, plan, workload, serving, hw, speculation)
        tenants.append(tenant)
        costs.append(cost)
        plans[name] = plan
        slos[name] = Slo(ttft_s=serving.slo_ttft_s, tpot_s=serving.slo_tpot_s)
    if total_fraction > 1.0 + 1e-9:
        raise SpecError("colocate", f"memory fractions sum to {total_fraction:.2f} > 1")
    run_tenants(tenants)
    per_tenant = {}
    for tenant in tenants:
        metrics = summarize_tenants([tenant], slos[tenant.name])
        metrics["memory"] = memory_report(plans[tenant.name], tenant.config.block_size)
        per_tenant[tenant.name] = metrics
    return {"mode": "colocated", "fits": True, "tenants": per_tenant,
            "engine_coverage": coverage(costs)}
