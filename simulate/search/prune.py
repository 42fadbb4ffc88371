# SPDX-License-Identifier: Apache-2.0
"""Top-k search that times only layouts that can still enter the top k.

Each fitting layout first gets an optimistic objective from a lower bound on its iteration time
(`LayoutEvaluator.lower_bound_s`: the busiest pipeline stage's compute stream alone, which every
timed iteration contains). Layouts are then timed best-bound first, in batches; once the next
layout's optimistic value is strictly worse than the k-th best timed value, no later layout can
enter the top k (its real value is no better than its bound), so the search stops. The top k
(ties included, ranked by enumeration order) is the exhaustive search's; the test
`tests/simulate/test_search_fast.py` checks it on small spaces.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from simulate.search.executors import chunked

__all__ = ["pruned_search", "optimistic"]


def optimistic(task: Mapping[str, Any], block: Mapping[str, Any], bound_s: float,
               flops_per_token: float, peak_flops: float) -> dict[str, float]:
    """The best tokens/s, MFU and $/Mtok a layout could reach with iteration time >= bound_s."""
    n = task["num_gpus"]
    tokens = block["global_batch"] * block["seq_len"]
    if bound_s <= 0:
        return {"tokens_per_s": float("inf"), "mfu": float("inf"), "usd_per_million_tokens": 0.0}
    out = {"tokens_per_s": tokens / bound_s,
           "mfu": flops_per_token * tokens / (bound_s * n * peak_flops)}
    price = task["usd_per_gpu_hour"]
    if price is not None:
        out["usd_per_million_tokens"] = n * price / 3600.0 / out["tokens_per_s"] * 1e6
    return out


def pruned_search(tasks: Sequence[Mapping[str, Any]], *, key: str, sense: str, k: int,
                  run: Callable, workers: int, evaluate: Callable, bound: Callable,
                  collect: Callable) -> list[dict[str, Any]]:
    """Rows of the layouts timed (every one that could enter the top k, and a batch's rest).

    ``bound`` maps a task to one optimistic row (dict with ``key``) per block; ``evaluate``
    and ``collect`` are the exhaustive search's own.
    """
    split = [{**t, "blocks": c} for t in tasks for c in chunked(t["blocks"], workers)]
    sign = -1.0 if sense == "max" else 1.0
    items = []  # (optimistic sort key, enumeration index, task, (index, block))
    for task, opts in zip(split, run(bound, split, workers), strict=True):
        for item, opt in zip(task["blocks"], opts, strict=True):
            items.append((sign * opt[key], item[0], task, item))
    items.sort(key=lambda x: (x[0], x[1]))
    best: list[float] = []  # sign * value of the k best timed so far, sorted
    rows: list[dict[str, Any]] = []
    batch, pos = max(k, 8) * workers, 0
    while pos < len(items):
        if len(best) >= k and items[pos][0] > best[k - 1]:
            break  # every remaining layout is strictly worse than the k-th best: pruned
        take, pos = items[pos:pos + batch], pos + batch
        groups: dict[int, dict[str, Any]] = {}
        for _, _, task, item in take:
            groups.setdefault(id(task), {**task, "blocks": []})["blocks"].append(item)
        chunks = [c for g in groups.values() for c in
                  ({**g, "blocks": b} for b in chunked(g["blocks"], workers))]
        new = collect(run(evaluate, chunks, workers), chunks)
        rows += new
        best = sorted(best + [sign * r[key] for r in new])[:k]
    return rows
