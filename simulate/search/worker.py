# SPDX-License-Identifier: Apache-2.0
"""What a search worker process runs: its engine chains and evaluators (created once per
process and reused, so their caches serve every later chunk) and the chunk functions the
executors map (`evaluate_blocks`, `bound_blocks`: plain data in, plain rows out)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.engines import EngineChain, EngineOptions
from simulate.scenario import ClusterSpec, Scenario, parse_training
from simulate.search.evaluator import GIB, LayoutEvaluator
from simulate.search.prune import optimistic
from simulate.search.worker_cache import RunScopedCache

__all__ = ["worker_chain", "worker_evaluator", "evaluate_blocks", "bound_blocks"]

_WORKER = RunScopedCache()  # this process's chains and evaluators for the current run's tasks


def worker_chain(gpu: str, engines: EngineOptions, *, run: str) -> EngineChain:
    """This process's engine chain for ``gpu`` in search ``run`` (created once, then reused
    by the run's later tasks: its cache persists)."""
    return _WORKER.get(run, ("chain", gpu, engines),
                       lambda: EngineChain.from_options(get_hardware(gpu), engines))


def worker_evaluator(model: str, gpu: str, gpus_per_node: int | None, engines: EngineOptions,
                     *, run: str) -> LayoutEvaluator:
    """This process's evaluator in search ``run`` (its caches persist across the run's tasks)."""

    def make() -> LayoutEvaluator:
        chain = worker_chain(gpu, engines, run=run)
        return LayoutEvaluator(load_model(model), chain.hardware, chain, gpus_per_node)

    return _WORKER.get(run, ("evaluator", model, gpu, gpus_per_node, engines), make)


def evaluate_blocks(task: Mapping[str, Any]) -> list[dict[str, Any] | None]:
    """Time each training block of ``task`` (one chunk); None where the layout does not fit.

    ``task`` holds picklable data only (so any executor can ship it): name, model, gpu,
    num_gpus, gpus_per_node, engines (`EngineOptions`), run (the search's id), usd_per_gpu_hour and
    blocks ((enumeration index, training block, its memory in bytes or None, its parsed
    `TrainingSpec` or None) tuples).
    """
    ev = worker_evaluator(task["model"], task["gpu"], task["gpus_per_node"], task["engines"],
                          run=task["run"])
    cluster = ClusterSpec(gpu=task["gpu"], num_gpus=task["num_gpus"],
                          gpus_per_node=task["gpus_per_node"])
    n, price = task["num_gpus"], task["usd_per_gpu_hour"]
    capacity = ev.hw.memory_bytes / GIB
    out: list[dict[str, Any] | None] = []
    blocks = task["blocks"]
    specs = [spec or parse_training(block) for _, block, _, spec in blocks]
    plain = [i for i, spec in enumerate(specs) if not spec.lora_rank]
    batched = dict(zip(plain, ev.evaluate_many(cluster, [specs[i] for i in plain],
                                               [blocks[i][2] for i in plain]), strict=True))
    for i, (_, block, mem, _) in enumerate(blocks):
        if i in batched:
            metrics = batched[i]
        else:  # LoRA: timed by run_training
            metrics = ev.evaluate(Scenario(name=task["name"], model=task["model"],
                                           cluster=cluster, training=specs[i]),
                                  memory_bytes=mem)
        if metrics is None:
            out.append(None)
            continue
        row = {"gpu": task["gpu"], "num_gpus": n, "layout": dict(block), **metrics,
               "memory_headroom_gib": capacity - metrics["memory_per_gpu_gib"]}
        if price is not None:
            # $ per 1e6 tokens = GPUs * $/GPU-h / 3600 s/h / (tokens/s) * 1e6
            row["usd_per_million_tokens"] = n * price / 3600.0 / row["tokens_per_s"] * 1e6
        out.append(row)
    return out


def bound_blocks(task: Mapping[str, Any]) -> list[dict[str, float]]:
    """The best objective values each block of ``task`` could reach (see `prune`)."""
    ev = worker_evaluator(task["model"], task["gpu"], task["gpus_per_node"], task["engines"],
                          run=task["run"])
    cluster = ClusterSpec(gpu=task["gpu"], num_gpus=task["num_gpus"],
                          gpus_per_node=task["gpus_per_node"])
    peak = ev.hw.peak_flops(DType.BF16)
    out = []
    for _, block, _, parsed in task["blocks"]:
        spec = parsed or parse_training(block)
        out.append(optimistic(task, block, ev.lower_bound_s(cluster, spec),
                              ev.model.flops_per_token(spec.seq_len, training=True), peak))
    return out
