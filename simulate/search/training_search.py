# SPDX-License-Identifier: Apache-2.0
"""Training design-space search: enumerate valid layouts, prune by memory, time the rest with
`simulate.training.run_training`, rank, and take the Pareto frontier of tokens/s vs GPU count.

The scenario is a normal training scenario whose ``training`` values (and ``hardware.num_gpus``)
may be lists, ranges or ``auto`` (see `simulate.search.space`). Layout enumeration and the
memory verdict run in this process (cheap, analytical); timing runs on an executor in chunks,
each worker keeping one engine chain so every distinct operator shape is estimated once there.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import HardwareSpec, get_hardware
from analytical.model import load_model
from simulate.engines import EngineChain
from simulate.scenario import ClusterSpec, Scenario, apply_overrides, parse_training, read_document
from simulate.search.executors import DEFAULT_EXECUTOR, chunked, default_workers, get_executor
from simulate.search.pareto import pareto_front
from simulate.search.space import enumerate_layouts, expand_space
from simulate.training import run_training, spec_memory

__all__ = ["TrainingSearchResult", "search_training", "evaluate_blocks", "worker_chain",
           "OBJECTIVES"]

# objective -> (row key, sense): rank by it, best first.
OBJECTIVES: dict[str, tuple[str, str]] = {
    "tokens_per_s": ("tokens_per_s", "max"),
    "mfu": ("mfu", "max"),
    "cost": ("usd_per_million_tokens", "min"),
}
_CHAINS: dict[tuple[Any, ...], EngineChain] = {}  # one chain per worker process and engine set


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSearchResult:
    """What a training search found. Rows are dicts (JSON-ready), best first."""

    name: str
    objective: str
    candidates: int  # raw combinations enumerated (all GPU counts)
    valid: int  # accepted by the same validation as `simulate`
    fit: int  # valid and within device memory: timed
    rows: list[dict[str, Any]]  # every timed layout, ranked
    frontier: list[dict[str, Any]]  # best tokens/s per GPU count that more GPUs must beat
    elapsed_s: float
    executor: str
    workers: int

    def top(self, n: int) -> list[dict[str, Any]]:
        return self.rows[:n]


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


def _memory_fits(model, hw: HardwareSpec, spec) -> tuple[bool, float]:
    """The memory verdict `run_training` gives, computed without timing anything."""
    mem = spec_memory(model, spec)
    return mem.total_bytes <= hw.memory_bytes, mem.total_bytes


def worker_chain(gpu: str, engines: Mapping[str, Any]) -> EngineChain:
    """This process's engine chain for ``gpu`` (created once, then reused: its cache persists)."""
    key = (gpu, *sorted(engines.items()))
    if key not in _CHAINS:
        _CHAINS[key] = EngineChain(get_hardware(gpu), **engines)
    return _CHAINS[key]


def _row(result, block: Mapping[str, Any], num_gpus: int, usd_per_gpu_hour: float | None
         ) -> dict[str, Any]:
    row = {
        "num_gpus": num_gpus, "layout": dict(block),
        "tokens_per_s": result.tokens_per_s, "mfu": result.mfu,
        "tflops_per_gpu": result.tflops_per_gpu, "iteration_time_s": result.iteration_time_s,
        "memory_per_gpu_gib": result.memory_per_gpu_gib,
        "bubble_fraction": result.bubble_fraction, "breakdown_s": dict(result.breakdown_s or {}),
        "engine_coverage": dict(result.engine_coverage),
    }
    if usd_per_gpu_hour is not None:
        # $ per 1e6 tokens = GPUs * $/GPU-h / 3600 s/h / (tokens/s) * 1e6
        row["usd_per_million_tokens"] = (num_gpus * usd_per_gpu_hour / 3600.0
                                         / result.tokens_per_s * 1e6)
    return row


def evaluate_blocks(task: Mapping[str, Any]) -> list[dict[str, Any] | None]:
    """Time each training block of ``task`` (one chunk); None where the layout does not fit.

    ``task`` holds plain data only (so any executor can ship it): name, model, gpu, num_gpus,
    gpus_per_node, engines (EngineChain keyword arguments), usd_per_gpu_hour and blocks.
    """
    chain = worker_chain(task["gpu"], task["engines"])
    cluster = ClusterSpec(gpu=task["gpu"], num_gpus=task["num_gpus"],
                          gpus_per_node=task["gpus_per_node"])
    out: list[dict[str, Any] | None] = []
    for block in task["blocks"]:
        spec = parse_training(block)
        scenario = Scenario(name=task["name"], model=task["model"], cluster=cluster,
                            training=spec, doc={"training": block})
        result = run_training(scenario, chain=chain)
        out.append(_row(result, block, task["num_gpus"], task["usd_per_gpu_hour"])
                   if result.fits else None)
    return out


def _rank(rows: list[dict[str, Any]], objective: str) -> list[dict[str, Any]]:
    key, sense = OBJECTIVES[objective]
    sign = -1.0 if sense == "max" else 1.0
    # ties keep enumeration order (the row's "index"), so every executor ranks identically
    ranked = sorted(rows, key=lambda r: (sign * r[key], r["index"]))
    for i, r in enumerate(ranked, 1):
        r["rank"] = i
    return ranked


def search_training(scenario: str | Path | Mapping[str, Any], *, overrides: Sequence[str] = (),
                    objective: str = "tokens_per_s", usd_per_gpu_hour: float | None = None,
                    executor: str = DEFAULT_EXECUTOR, workers: int | None = None,
                    engines: Mapping[str, Any] | None = None) -> TrainingSearchResult:
    """Search the layouts a scenario's searchable ``training`` block describes.

    ``engines`` are `EngineChain` keyword arguments (store_path, use_store, use_predictors,
    tracking_uri). ``objective`` is a key of `OBJECTIVES`; "cost" needs ``usd_per_gpu_hour``.
    """
    start = time.perf_counter()
    if objective not in OBJECTIVES:
        raise UnknownNameError("objective", objective, sorted(OBJECTIVES))
    if objective == "cost" and usd_per_gpu_hour is None:
        raise SpecError("--usd-per-gpu-hour", "the cost objective needs a $/GPU-h price")
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
    model_ref = _model_ref(doc, base_dir)
    model = load_model(model_ref)
    gpu = str(hw_block["gpu"])
    hw = get_hardware(gpu)
    gpn = hw_block.get("gpus_per_node")
    engines = dict(engines or {"use_store": True, "use_predictors": True})
    workers = workers or default_workers()
    run = get_executor(executor)
    name = str(doc.get("name", Path(source).stem if source else "search"))

    raw_total, valid_total, tasks, meta = 0, 0, [], []
    for n in _gpu_counts(hw_block, source):
        cluster = ClusterSpec(gpu=gpu, num_gpus=n, gpus_per_node=gpn)
        space = expand_space(doc["training"], model=model, hw=hw, cluster=cluster, source=source)
        valid, raw = enumerate_layouts(space, model=model, hw=hw, cluster=cluster)
        raw_total += raw
        valid_total += len(valid)
        fitting = []
        for block in valid:
            ok, _ = _memory_fits(model, hw, parse_training(block))
            if ok:
                fitting.append(block)
        for chunk in chunked(fitting, workers):
            tasks.append({"name": name, "model": model_ref, "gpu": gpu, "num_gpus": n,
                          "gpus_per_node": gpn, "engines": engines,
                          "usd_per_gpu_hour": usd_per_gpu_hour, "blocks": chunk})
            meta.append(n)
    results = run(evaluate_blocks, tasks, workers)
    rows = []
    for chunk in results:
        for row in chunk:
            if row is not None:
                row["index"] = len(rows)
                rows.append(row)
    ranked = _rank(rows, objective)
    frontier = pareto_front(ranked, [("num_gpus", "min"), ("tokens_per_s", "max")])
    return TrainingSearchResult(
        name=name, objective=objective, candidates=raw_total, valid=valid_total,
        fit=sum(len(t["blocks"]) for t in tasks), rows=ranked, frontier=list(frontier),
        elapsed_s=time.perf_counter() - start, executor=executor, workers=workers)

