# SPDX-License-Identifier: Apache-2.0
"""Where search work runs: ``serial`` (this process), ``process`` (a process pool over all
cores, the default) or ``ray`` (a Ray cluster, or a local instance started on demand).

Every executor maps one picklable, module-level function over a list of tasks and returns the
results in task order, so a search gives the same answer whichever runs it; ``done`` (optional)
is called with each task as its result arrives (a progress bar). Each worker process
keeps its own engine chain (see `worker_chain`), so a layer shape is estimated once per worker
and reused for every later task it runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from analytical.errors import UnknownNameError

__all__ = ["EXECUTORS", "DEFAULT_EXECUTOR", "get_executor", "chunked", "default_workers"]

Task = Any
Done = Callable[[Task], None] | None
Executor = Callable[..., list[Any]]  # (fn, tasks, workers, done=None) -> results in task order
DEFAULT_EXECUTOR = "process"


def default_workers() -> int:
    """All cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def chunked(items: Sequence[Any], workers: int, per_worker: int = 4) -> list[list[Any]]:
    """Split ``items`` into about ``workers * per_worker`` contiguous chunks, in order."""
    if not items:
        return []
    n = max(1, min(len(items), workers * per_worker))
    size = -(-len(items) // n)
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def _serial(fn: Callable[[Task], Any], tasks: Sequence[Task], workers: int,
            done: Done = None) -> list[Any]:
    out = []
    for t in tasks:
        out.append(fn(t))
        if done is not None:
            done(t)
    return out


def _process(fn: Callable[[Task], Any], tasks: Sequence[Task], workers: int,
             done: Done = None) -> list[Any]:
    if len(tasks) <= 1 or workers <= 1:
        return _serial(fn, tasks, workers, done)
    out = []
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        for t, result in zip(tasks, pool.map(fn, tasks), strict=True):
            out.append(result)
            if done is not None:
                done(t)
    return out


def _ray(fn: Callable[[Task], Any], tasks: Sequence[Task], workers: int,
         done: Done = None) -> list[Any]:
    try:
        import ray
    except ImportError:
        raise UnknownNameError("executor", "ray (not installed: pip install ray)",
                               [k for k in EXECUTORS if k != "ray"]) from None
    if not ray.is_initialized():
        # Joins the cluster named by RAY_ADDRESS when set, else starts a local instance.
        ray.init(num_cpus=None if os.environ.get("RAY_ADDRESS") else workers,
                 include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    remote = ray.remote(fn)
    refs = [remote.remote(t) for t in tasks]
    if done is not None:
        task_of = {ref: t for ref, t in zip(refs, tasks, strict=True)}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done(task_of[ready[0]])
    return ray.get(refs)


EXECUTORS: dict[str, Executor] = {"serial": _serial, "process": _process, "ray": _ray}


def get_executor(name: str) -> Executor:
    """The executor registered under ``name``; unknown names list the known ones."""
    if name not in EXECUTORS:
        raise UnknownNameError("executor", name, sorted(EXECUTORS))
    return EXECUTORS[name]
