# SPDX-License-Identifier: Apache-2.0
"""Serving design-space search: tp, pp, ep, precision, max batch, chunk size, scheduler and the
prefill/decode pool split, each configuration simulated by `predict_inference` on the same
request stream; the frontier of output tokens/s per GPU vs TPOT (p90) among the points that
meet the scenario's SLO, and the best point's gain over the scenario as written (the default).

The scenario is a normal inference scenario (the default deployment) plus a ``search`` block:
``{tp: [..], pp: [..], ep: [..], precision: [..], max_num_seqs: [..], chunk_size: [..],
scheduler: [..], disaggregated: [{prefill: {instances, tp}, decode: {instances, tp}}, ..]}``.
Co-located candidates fill the node with dp = num_gpus / (tp * pp) replicas. A closed-loop
arrival's concurrency follows max_num_seqs (clients keep the batch full).
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.errors import InfeasibleError, SpecError
from analytical.model import load_model
from simulate.engines import EngineOptions
from simulate.scenario import apply_overrides, read_document
from simulate.search.executors import DEFAULT_EXECUTOR, chunked, default_workers, get_executor
from simulate.search.pareto import pareto_front
from simulate.search.space import parse_serving_space
from simulate.search.worker import worker_chain
from simulate.search.worker_cache import new_run_id

__all__ = ["ServingSearchResult", "search_serving", "evaluate_serving", "SERVING_AXES"]

SERVING_AXES = ("tp", "pp", "ep", "precision", "max_num_seqs", "chunk_size", "scheduler",
                "disaggregated")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingSearchResult:
    """Every configuration tried (rows, best first), the SLO frontier and the default point."""

    name: str
    rows: list[dict[str, Any]]
    frontier: list[dict[str, Any]]
    default: dict[str, Any] | None
    best: dict[str, Any] | None
    slo: dict[str, float]
    candidates: int
    elapsed_s: float

    @property
    def improvement(self) -> float | None:
        """Best SLO-meeting tokens/s per GPU over the default's (1.0 = no gain)."""
        if not self.best or not self.default or not self.default.get("tokens_per_s_per_gpu"):
            return None
        return self.best["tokens_per_s_per_gpu"] / self.default["tokens_per_s_per_gpu"]


def _candidate_docs(doc: Mapping[str, Any], space: Mapping[str, Any], num_gpus: int
                    ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(config summary, scenario doc) per candidate, in a fixed order."""
    base = {k: v for k, v in doc.items() if k != "search"}
    inf, srv = base["inference"], base.get("serving", {})
    par = inf.get("parallel", {})
    pick = {a: space.get(a) for a in SERVING_AXES}
    defaults = {"tp": [par.get("tp", 1)], "pp": [par.get("pp", 1)], "ep": [par.get("ep", 1)],
                "precision": [inf.get("precision", "bf16")],
                "max_num_seqs": [srv.get("max_num_seqs", 256)],
                "chunk_size": [srv.get("chunk_size", 2048)],
                "scheduler": [srv.get("scheduler", "continuous")]}
    axes = {k: (pick[k] if isinstance(pick[k], list) else defaults[k]) for k in defaults}
    out = []
    for prec, seqs, sched in itertools.product(axes["precision"], axes["max_num_seqs"],
                                               axes["scheduler"]):
        chunks = axes["chunk_size"] if sched == "chunked_prefill" else [None]
        for chunk in chunks:
            layouts: list[dict[str, Any]] = [
                {"tp": tp, "pp": pp, "ep": ep} for tp, pp, ep in
                itertools.product(axes["tp"], axes["pp"], axes["ep"])
                if num_gpus % (tp * pp) == 0]
            layouts += [{"disaggregated": d} for d in (pick["disaggregated"] or [])]
            for lay in layouts:
                d = copy.deepcopy(base)
                d["inference"]["precision"] = prec
                s = d.setdefault("serving", {})
                s["max_num_seqs"] = seqs
                s["scheduler"] = sched
                s.pop("chunk_size", None)
                if chunk is not None:
                    s["chunk_size"] = chunk
                if s.get("arrival", {}).get("process") == "closed":
                    s["arrival"]["concurrency"] = seqs
                s.pop("disaggregated", None)
                d["inference"].pop("parallel", None)
                cfg = {"precision": prec, "max_num_seqs": seqs, "scheduler": sched,
                       "chunk_size": chunk}
                if "disaggregated" in lay:
                    s["disaggregated"] = lay["disaggregated"]
                    cfg["disaggregated"] = lay["disaggregated"]
                else:
                    dp = num_gpus // (lay["tp"] * lay["pp"])
                    d["inference"]["parallel"] = {**lay, "dp": dp}
                    if sched != "chunked_prefill":
                        d["serving"].pop("chunk_size", None)
                    cfg.update(lay, dp=dp)
                out.append((cfg, d))
    return out


def _summary(cfg: Mapping[str, Any], result: Mapping[str, Any], num_gpus: int,
             slo: Mapping[str, float]) -> dict[str, Any]:
    def stat(key: str, q: str) -> float:
        v = result[key]
        return float(v[q] if isinstance(v, Mapping) else v)

    row = {"config": dict(cfg), "fits": True,
           "tokens_per_s_per_gpu": float(result["throughput_tokens_per_s"]) / num_gpus,
           "tpot_p90_s": stat("tpot_s", "p90"), "ttft_p90_s": stat("ttft_s", "p90"),
           "tpot_mean_s": stat("tpot_s", "mean"), "ttft_mean_s": stat("ttft_s", "mean"),
           "engine_coverage": dict(result.get("engine_coverage", {}))}
    row["meets_slo"] = ((slo.get("tpot_s") is None or row["tpot_p90_s"] <= slo["tpot_s"])
                        and (slo.get("ttft_s") is None or row["ttft_p90_s"] <= slo["ttft_s"]))
    return row


def evaluate_serving(task: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Simulate each (config, doc) of one chunk; infeasible configs come back with fits False."""
    from simulate.inference.predict import predict_inference
    from simulate.inference.setup import parse_inference_setup

    chain = worker_chain(task["gpu"], task["engines"], run=task["run"])
    model = load_model(task["model"])
    out = []
    for cfg, doc in task["items"]:
        try:
            res = predict_inference(parse_inference_setup(doc), model=model, hw=chain.hardware,
                                    num_gpus=task["num_gpus"], estimator=chain).to_dict()
        except (InfeasibleError, SpecError) as exc:
            out.append({"config": dict(cfg), "fits": False, "reason": str(exc),
                        "meets_slo": False})
            continue
        out.append(_summary(cfg, res, task["num_gpus"], task["slo"]))
    return out


def search_serving(scenario: str | Path | Mapping[str, Any], *, overrides: Sequence[str] = (),
                   executor: str = DEFAULT_EXECUTOR, workers: int | None = None,
                   engines: EngineOptions | None = None
                   ) -> ServingSearchResult:
    """Search the ``search`` block of a serving scenario (see module doc)."""
    start = time.perf_counter()
    source = None
    if isinstance(scenario, Mapping):
        doc = apply_overrides(scenario, overrides)
    else:
        source = str(scenario)
        doc = apply_overrides(read_document(scenario), overrides)
    for key in ("inference", "model", "hardware"):
        if key not in doc:
            raise SpecError(key, "a serving search needs it", source=source)
    space, num_gpus = parse_serving_space(doc, SERVING_AXES, source=source)
    slo = dict(doc.get("serving", {}).get("slo", {}))
    engines = EngineOptions() if engines is None else engines
    run_id = new_run_id()
    workers = workers or default_workers()
    base = {k: v for k, v in doc.items() if k != "search"}
    items = [({"default": True}, base)] + _candidate_docs(doc, space, num_gpus)
    tasks = [{"gpu": str(doc["hardware"]["gpu"]), "model": str(doc["model"]),
              "num_gpus": num_gpus, "engines": engines, "run": run_id, "slo": slo,
              "items": chunk}
             for chunk in chunked(items, workers, per_worker=2)]
    rows = [r for chunk in get_executor(executor)(evaluate_serving, tasks, workers)
            for r in chunk]
    default, rows = rows[0], rows[1:]
    ok = [r for r in rows if r["fits"]]
    ranked = sorted(ok, key=lambda r: (not r["meets_slo"], -r["tokens_per_s_per_gpu"]))
    feasible = [r for r in ranked if r["meets_slo"]]
    frontier = pareto_front(feasible, [("tokens_per_s_per_gpu", "max"), ("tpot_p90_s", "min")])
    return ServingSearchResult(
        name=str(doc.get("name", "serving-search")), rows=ranked + [r for r in rows
                                                                    if not r["fits"]],
        frontier=list(frontier), default=default if default["fits"] else None,
        best=feasible[0] if feasible else None, slo=slo, candidates=len(items) - 1,
        elapsed_s=time.perf_counter() - start)
