# SPDX-License-Identifier: Apache-2.0
"""Training design-space search: enumerate valid layouts, drop those over device memory (closed
form), time the rest with `LayoutEvaluator` (the numbers `simulate.training.run_training`
gives, with shared layer shapes, pipeline classes and stage tails computed once), rank, and
take Pareto frontiers.

The scenario is a normal training scenario whose ``training`` values may be lists, ranges or
``auto`` (see `simulate.search.space`); ``hardware.num_gpus``, ``hardware.gpu``,
``training.seq_len`` and ``training.global_batch`` may be lists too. Enumeration and the memory
verdict run in this process; timing runs on an executor in chunks (`simulate.search.worker`),
each worker keeping one evaluator (and engine chain) per GPU type, so its caches serve every
later chunk.
"""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.offload import offloaded_memory
from simulate.engines import EngineOptions
from simulate.offload import layer_bytes
from simulate.scenario import (
    ClusterSpec,
    TrainingSpec,
    apply_overrides,
    parse_training,
    read_document,
)
from simulate.search.answers import auto_space, baseline_scenario, frontiers
from simulate.search.executors import DEFAULT_EXECUTOR, chunked, default_workers, get_executor
from simulate.search.pareto import pareto_front
from simulate.search.prune import pruned_search
from simulate.search.space import candidate_blocks, check_block, expand_space, quick_reject
from simulate.search.worker import bound_blocks, evaluate_blocks
from simulate.search.worker_cache import new_run_id
from simulate.training import memory_before_offload

__all__ = ["TrainingSearchResult", "search_training", "OBJECTIVES"]

OUTER_TRAINING_AXES = ("seq_len", "global_batch")  # may be lists: searched outside the layout
# training.overlap.* and training.offload.* may be lists too
NESTED_AXES = {"overlap": ("tp_comm", "dp_grad", "param_gather"),
               "offload": ("weights", "activations", "optimizer")}
# objective -> (row key, sense): rank by it, best first.
OBJECTIVES: dict[str, tuple[str, str]] = {
    "tokens_per_s": ("tokens_per_s", "max"),
    "mfu": ("mfu", "max"),
    "cost": ("usd_per_million_tokens", "min"),
}
CHUNKS_PER_WORKER = 12  # chunks per worker: progress steps and load balance vs batch sizes


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSearchResult:
    """What a training search found. Rows are dicts (JSON-ready), best first."""

    name: str
    objective: str
    candidates: int  # raw combinations enumerated (all GPU types, counts and outer values)
    valid: int  # accepted by the same validation as `simulate`
    fit: int  # valid and within device memory
    timed: int  # fit and timed (= fit unless pruned)
    rows: list[dict[str, Any]]  # every timed layout, ranked
    frontier: list[dict[str, Any]]  # best tokens/s per GPU count that more GPUs must beat
    frontiers: dict[str, list[dict[str, Any]]]  # name -> Pareto rows (see answers.frontiers)
    baseline: dict[str, Any] | None  # the scenario's own layout, timed (None: none given)
    doc: dict[str, Any]  # the searched scenario (for writing the best one back)
    elapsed_s: float
    executor: str
    workers: int
    pruned: bool = False

    def top(self, n: int) -> list[dict[str, Any]]:
        return self.rows[:n]

    @property
    def gain(self) -> float | None:
        """Best / baseline on the objective (> 1 is better for every objective)."""
        if not self.rows or not self.baseline or not self.baseline.get("fits"):
            return None
        key, sense = OBJECTIVES[self.objective]
        best, base = self.rows[0][key], self.baseline[key]
        return best / base if sense == "max" else base / best


def _model_ref(doc: Mapping[str, Any], base_dir: Path | None) -> str:
    model = str(doc.get("model", ""))
    if not model:
        raise SpecError("model", "missing")
    if base_dir is not None and model.endswith(".json") and not Path(model).is_absolute():
        model = str(base_dir / model)
    return model


def _gpu_counts(hw_block: Mapping[str, Any], source: str | None) -> list[int]:
    raw = hw_block.get("num_gpus")
    values = raw if isinstance(raw, list) else [raw]
    if raw is None or not values or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                        for v in values):
        raise SpecError("hardware.num_gpus", f"an integer >= 1 or a list of them, got {raw!r}",
                        source=source)
    return sorted(set(values))


def evaluate_baseline(doc: Mapping[str, Any], model_ref: str, engines: EngineOptions,
                      usd: float | None, source: str | None, *, run: str) -> dict[str, Any]:
    """The scenario's own layout, timed like every candidate (``fits`` False if it does not
    fit); its checks are `simulate`'s, so a layout `simulate` refuses is refused here."""
    hw_block = doc["hardware"]
    gpu, n = str(hw_block["gpu"]), hw_block.get("num_gpus")
    model = load_model(model_ref)
    cluster = ClusterSpec(gpu=gpu, num_gpus=n, gpus_per_node=hw_block.get("gpus_per_node"))
    check_block(doc["training"], model=model, hw=get_hardware(gpu), cluster=cluster,
                source=source)
    task = {"name": "baseline", "model": model_ref, "gpu": gpu, "num_gpus": n,
            "gpus_per_node": cluster.gpus_per_node, "engines": engines, "run": run,
            "usd_per_gpu_hour": usd, "blocks": [(0, doc["training"], None, None)]}
    row = evaluate_blocks(task)[0]
    return {"fits": False, "gpu": gpu, "num_gpus": n, "layout": dict(doc["training"])} \
        if row is None else {"fits": True, **row}


def _rank(rows: list[dict[str, Any]], objective: str) -> list[dict[str, Any]]:
    key, sense = OBJECTIVES[objective]
    sign = -1.0 if sense == "max" else 1.0
    # ties keep enumeration order (the row's "index"), so every executor ranks identically
    ranked = sorted(rows, key=lambda r: (sign * r[key], r["index"]))
    for i, r in enumerate(ranked, 1):
        r["rank"] = i
    return ranked


def _as_list(value: Any) -> list[Any]:
    return list(dict.fromkeys(value)) if isinstance(value, list) else [value]


def _outer_axes(doc: Mapping[str, Any], source: str | None
                ) -> tuple[list[str], list[tuple[dict, list[dict]]]]:
    """Axes beyond the layout: GPU types, training fields given as lists (seq_len,
    global_batch), the overlap switches given as lists (tp_comm: TP collectives hidden
    behind GEMMs or not; dp_grad: gradient buckets overlapped with the last backward or not;
    param_gather) and the offload switches (weights, activations, optimizer state in host
    memory) -> (GPU names, [(training block with the outer fields fixed, the switch
    settings: {"overlap": {...}, "offload": {...}} per combination)], in product order)."""
    gpus = [str(g) for g in _as_list(doc["hardware"]["gpu"])]
    training = doc["training"]
    if not isinstance(training, Mapping):
        raise SpecError("training", "expected a mapping", source=source)
    outer = {k: _as_list(training[k]) for k in OUTER_TRAINING_AXES if k in training}
    switches: dict[tuple[str, str], list[Any]] = {}
    for group, axes in NESTED_AXES.items():
        sub = training.get(group)
        if isinstance(sub, Mapping):
            switches.update({(group, k): _as_list(sub[k]) for k in axes
                             if isinstance(sub.get(k), list)})
    for path, values in [*(((k,), v) for k, v in outer.items()), *switches.items()]:
        if not values:
            raise SpecError(f"training.{'.'.join(path)}", "an empty list leaves nothing to "
                            "search", source=source)
    settings = []
    for combo in itertools.product(*switches.values()):
        setting = {g: dict(training[g]) for g in NESTED_AXES if isinstance(training.get(g),
                                                                            Mapping)}
        for (group, key), value in zip(switches, combo, strict=True):
            setting[group][key] = value
        settings.append(setting)
    bases = []
    for combo in itertools.product(*outer.values()):
        base = {**training, **dict(zip(outer, combo, strict=True)), **settings[0]}
        bases.append((base, settings))
    return gpus, bases


@dataclass(slots=True)
class _Plan:
    """Enumeration output: plain-data tasks plus the counts of what was looked at."""

    tasks: list[dict[str, Any]]
    raw: int = 0
    valid: int = 0


def _valid_layouts(training: Mapping[str, Any], model, hw, cluster: ClusterSpec,
                   source: str | None) -> tuple[list[tuple[dict, TrainingSpec, Any]], int]:
    """(valid training blocks with their spec and memory before offload, raw candidates)."""
    space = expand_space(training, model=model, hw=hw, cluster=cluster, source=source)
    valid, raw = [], 0
    for block in candidate_blocks(space, cluster.num_gpus):
        raw += 1
        if quick_reject(block):
            continue
        try:
            spec = check_block(block, model=model, hw=hw, cluster=cluster)
        except SpecError:
            continue
        valid.append((block, spec, memory_before_offload(model, spec)))
    return valid, raw


def _enumerate(doc, model, model_ref: str, name: str, engines: EngineOptions, run: str,
               usd: float | None, source: str | None) -> _Plan:
    """Every (GPU, GPU count, outer value, switch setting, layout) that is valid and fits in
    memory. Validity and memory before offload do not depend on the overlap and offload
    switches, so they are computed once per layout and reused for every setting."""
    hw_block = doc["hardware"]
    gpn = hw_block.get("gpus_per_node")
    gpus, bases = _outer_axes(doc, source)
    plan = _Plan(tasks=[])
    index = 0
    for gpu in gpus:
        hw = get_hardware(gpu)
        for n in _gpu_counts(hw_block, source):
            cluster = ClusterSpec(gpu=gpu, num_gpus=n, gpus_per_node=gpn)
            blocks = []
            for training, settings in bases:
                valid, raw = _valid_layouts(training, model, hw, cluster, source)
                plan.raw += raw * len(settings)
                plan.valid += len(valid) * len(settings)
                if not valid:
                    continue
                parsed = [parse_training({**valid[0][0], **setting}) for setting in settings]
                offload = any(p.offload.any for p in parsed)
                layers = [layer_bytes(model, spec) if offload else None for _, spec, _ in valid]
                for setting, p in zip(settings, parsed, strict=True):
                    for (block, spec, mem0), layer in zip(valid, layers, strict=True):
                        mem = (offloaded_memory(mem0, *layer, p.offload) if p.offload.any
                               else mem0).allocated_bytes
                        if mem <= hw.memory_bytes:
                            blocks.append((index, {**block, **setting}, mem,
                                           _with_switches(spec, p)))
                            index += 1
            plan.tasks.append({"name": name, "model": model_ref, "gpu": gpu, "num_gpus": n,
                               "gpus_per_node": gpn, "engines": engines, "run": run,
                               "usd_per_gpu_hour": usd, "blocks": blocks})
    return plan


def _with_switches(spec: TrainingSpec, parsed: TrainingSpec) -> TrainingSpec:
    """``spec`` with ``parsed``'s overlap and offload settings (what `dataclasses.replace`
    gives, without re-running the constructor for each of many layouts)."""
    out = copy.copy(spec)
    object.__setattr__(out, "overlap", parsed.overlap)
    object.__setattr__(out, "offload", parsed.offload)
    return out


def _split(tasks: list[dict[str, Any]], workers: int) -> list[dict[str, Any]]:
    """Each (GPU, count) task cut into chunks for the executor, its layouts ordered by
    pipeline class first (schedule, pp, vpp, micro-batch, dp: a chunk then holds many layouts
    of few classes, which `LayoutEvaluator.evaluate_many` times together; rows keep their
    enumeration index, so the ranking does not depend on this order)."""
    out = []
    for task in tasks:
        blocks = sorted(task["blocks"], key=_class_key)
        for chunk in chunked(blocks, workers, per_worker=CHUNKS_PER_WORKER):
            out.append({**task, "blocks": chunk})
    return out


def _class_key(item: tuple[Any, ...]) -> tuple[Any, ...]:
    index, block = item[0], item[1]
    par = block["parallel"]
    return (str(block.get("schedule", "")), par.get("pp", 1), par.get("vpp", 1),
            block.get("micro_batch", 1), par.get("dp", 1), index)


def _collect(results: Sequence[list[dict[str, Any] | None]], tasks) -> list[dict[str, Any]]:
    rows = []
    for task, chunk in zip(tasks, results, strict=True):
        for (index, *_), row in zip(task["blocks"], chunk, strict=True):
            if row is not None:
                row["index"] = index
                rows.append(row)
    return rows


def search_training(scenario: str | Path | Mapping[str, Any], *, overrides: Sequence[str] = (),
                    objective: str = "tokens_per_s", usd_per_gpu_hour: float | None = None,
                    executor: str = DEFAULT_EXECUTOR, workers: int | None = None,
                    engines: EngineOptions | None = None,
                    prune_top: int | None = None,
                    auto: bool = False,
                    progress: Callable[[int, int], None] | None = None
                    ) -> TrainingSearchResult:
    """Search the layouts a scenario's searchable ``training`` block describes.

    ``engines``: which engines time the layouts (`EngineOptions`; None: every
    engine). ``objective`` is a key of `OBJECTIVES`; "cost" needs ``usd_per_gpu_hour``.
    ``prune_top`` = k: time only layouts that can still enter the top k (see `prune`); the
    top k is the exhaustive search's. ``auto``: search every layout axis around a plain
    scenario, whose own layout becomes the baseline the gain is measured against.
    ``progress(timed, total)`` is called as chunks finish (exhaustive search only).
    """
    start = time.perf_counter()
    _check_options(objective, usd_per_gpu_hour, prune_top)
    doc, source, base_dir = _search_document(scenario, overrides)
    baseline_doc = baseline_scenario(doc, auto=auto, source=source)
    if auto:
        doc = auto_space(doc)
    model_ref = _model_ref(doc, base_dir)
    model = load_model(model_ref)
    engines = EngineOptions() if engines is None else engines
    run_id = new_run_id()  # scopes the worker caches to this search
    workers = workers or default_workers()
    run = get_executor(executor)
    name = str(doc.get("name", Path(source).stem if source else "search"))

    plan = _enumerate(doc, model, model_ref, name, engines, run_id, usd_per_gpu_hour, source)
    fit = sum(len(t["blocks"]) for t in plan.tasks)
    if executor == "process" and workers > 1:
        _warm_up(plan.tasks)
    if prune_top is None:
        chunks = _split(plan.tasks, workers)
        rows = _collect(run(evaluate_blocks, chunks, workers, _counter(progress, fit)), chunks)
    else:
        key, sense = OBJECTIVES[objective]
        rows = pruned_search(plan.tasks, key=key, sense=sense, k=prune_top, run=run,
                             workers=workers, evaluate=evaluate_blocks, bound=bound_blocks,
                             collect=_collect)
    ranked = _rank(rows, objective)
    baseline = None
    if baseline_doc is not None:
        baseline = evaluate_baseline(baseline_doc, model_ref, engines, usd_per_gpu_hour,
                                     source, run=run_id)
    return TrainingSearchResult(
        name=name, objective=objective, candidates=plan.raw, valid=plan.valid, fit=fit,
        timed=len(ranked),
        rows=ranked, frontier=pareto_front(ranked, [("num_gpus", "min"),
                                                    ("tokens_per_s", "max")]),
        frontiers=frontiers(ranked, usd=usd_per_gpu_hour is not None),
        baseline=baseline, doc={k: v for k, v in doc.items() if k != "baseline"},
        elapsed_s=time.perf_counter() - start, executor=executor,
        workers=workers, pruned=prune_top is not None)


def _warm_up(tasks: list[dict[str, Any]]) -> None:
    """Time one layout per task here first: the process pool's workers are forked from this
    process, so they start with its engine chains (the store read and the predictors loaded
    once, not once per worker) and evaluator caches."""
    for task in tasks:
        if task["blocks"]:
            evaluate_blocks({**task, "blocks": task["blocks"][:1]})


def _counter(progress: Callable[[int, int], None] | None, total: int
             ) -> Callable[[Mapping[str, Any]], None] | None:
    """An executor's ``done`` callback that reports layouts finished out of ``total``."""
    if progress is None:
        return None
    count = [0]

    def done(task: Mapping[str, Any]) -> None:
        count[0] += len(task["blocks"])
        progress(count[0], total)

    return done


def _check_options(objective: str, usd_per_gpu_hour: float | None,
                   prune_top: int | None) -> None:
    """The search options name a known objective, a price for "cost" and a positive top k."""
    if objective not in OBJECTIVES:
        raise UnknownNameError("objective", objective, sorted(OBJECTIVES))
    if objective == "cost" and usd_per_gpu_hour is None:
        raise SpecError("--usd-per-gpu-hour", "the cost objective needs a $/GPU-h price")
    if prune_top is not None and prune_top < 1:
        raise SpecError("--prune-top", f"must be >= 1, got {prune_top}")


def _search_document(scenario: str | Path | Mapping[str, Any], overrides: Sequence[str]
                     ) -> tuple[Mapping[str, Any], str | None, Path | None]:
    """The scenario mapping with overrides applied, its source file and directory (None for
    a mapping); it must have a training block and a hardware.gpu."""
    source, base_dir = None, None
    if isinstance(scenario, Mapping):
        doc = apply_overrides(scenario, overrides)
    else:
        source, base_dir = str(scenario), Path(scenario).resolve().parent
        doc = apply_overrides(read_document(scenario), overrides)
    if "training" not in doc:
        raise SpecError("training", "a training search needs a training block", source=source)
    hw_block = doc.get("hardware")
    if not isinstance(hw_block, Mapping) or "gpu" not in hw_block:
        raise SpecError("hardware.gpu", "missing", source=source)
    return doc, source, base_dir
