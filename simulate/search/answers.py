# SPDX-License-Identifier: Apache-2.0
"""Turning search rows into answers a user can act on: the best layout as a scenario and as
``--set`` flags, the baseline it is compared with, ties collapsed onto the layout that needs the
least memory, and Pareto frontiers that have more than one axis actually varying."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from analytical.errors import SpecError
from simulate.search.pareto import pareto_front

__all__ = ["auto_space", "baseline_scenario", "frontiers", "collapse_ties", "flat_layout",
           "scenario_doc", "set_flags"]

TIE_REL = 1e-9  # two objective values this close (relative) are one value
# Searched with ``auto`` when --auto turns a plain scenario into a search around it.
AUTO_PARALLEL = ("tp", "pp", "cp", "vpp", "sp", "zero")
AUTO_TRAINING = ("micro_batch", "recompute", "schedule")


def _searchable(value: Any) -> bool:
    return isinstance(value, (list, Mapping)) or value == "auto"


def auto_space(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with every layout axis set to ``auto`` (dp derived, the rest kept)."""
    out = copy.deepcopy(dict(doc))
    training = out["training"]
    parallel = {k: v for k, v in (training.get("parallel") or {}).items()
                if k not in (*AUTO_PARALLEL, "dp", "ep")}
    parallel.update({k: "auto" for k in AUTO_PARALLEL})
    parallel["ep"] = "auto"
    training["parallel"] = parallel
    training.update({k: "auto" for k in AUTO_TRAINING})
    return out


def baseline_scenario(doc: Mapping[str, Any], *, auto: bool, source: str | None
                      ) -> dict[str, Any] | None:
    """The layout the best one is compared with: the scenario itself under ``auto``, else its
    optional ``baseline`` block ({hardware: ..., training: ...} laid over the scenario)."""
    if auto:
        base = copy.deepcopy(dict(doc))
        where = "--auto"
    elif "baseline" in doc:
        over = doc["baseline"]
        if not isinstance(over, Mapping) or set(over) - {"hardware", "training"}:
            raise SpecError("baseline", "expected a mapping with hardware and/or training",
                            source=source)
        base = copy.deepcopy(dict(doc))
        for section in ("hardware", "training"):
            _merge(base[section], over.get(section) or {})
        where = "baseline"
    else:
        return None
    base.pop("baseline", None)
    flat = {**{f"hardware.{k}": v for k, v in base["hardware"].items()},
            **flat_layout({"layout": base["training"]})}
    for path, value in flat.items():
        if _searchable(value):
            raise SpecError(path, f"{where} needs one value here (the layout to compare "
                            f"with), got {value!r}", source=source)
    return base


def _merge(into: dict[str, Any], over: Mapping[str, Any]) -> None:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def flat_layout(row: Mapping[str, Any]) -> dict[str, Any]:
    """``training.*`` paths -> values of a row's layout (the ``--set`` spelling)."""
    out: dict[str, Any] = {}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if isinstance(value, Mapping) and key in ("parallel", "overlap", "offload", "lora"):
                walk(value, f"{prefix}{key}.")
            else:
                out[f"{prefix}{key}"] = value

    walk(row["layout"], "training.")
    return out


def set_flags(row: Mapping[str, Any]) -> list[str]:
    """``--set PATH=VALUE`` arguments that turn the searched scenario into this row's."""
    flags = [f"hardware.gpu={row['gpu']}", f"hardware.num_gpus={row['num_gpus']}"]
    for path, value in flat_layout(row).items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        flags.append(f"{path}={text}")
    return flags


def scenario_doc(doc: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
    """The searched scenario with this row's GPU, GPU count and layout: `simulate` input."""
    out = {k: copy.deepcopy(v) for k, v in doc.items() if k != "baseline"}
    out["hardware"] = {**out["hardware"], "gpu": row["gpu"], "num_gpus": row["num_gpus"]}
    out["training"] = copy.deepcopy(row["layout"])
    return out


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TIE_REL * max(abs(a), abs(b))


def collapse_ties(rows: Sequence[Mapping[str, Any]], key: str, limit: int
                  ) -> list[dict[str, Any]]:
    """The first ``limit`` distinct answers of ranked ``rows``: rows on the same GPU type and
    count whose objective values are equal (within `TIE_REL`) are one answer, shown as its
    member with the least memory per GPU; ``ties`` lists what the others change."""
    groups: list[list[Mapping[str, Any]]] = []
    run_start = 0
    for row in rows:
        if groups and not _close(row[key], groups[run_start][0][key]):
            if len(groups) >= limit:
                break
            run_start = len(groups)
        for group in groups[run_start:]:
            if (group[0]["gpu"], group[0]["num_gpus"]) == (row["gpu"], row["num_gpus"]):
                group.append(row)
                break
        else:
            groups.append([row])
    out = []
    for group in groups[:limit]:
        rep = min(group, key=lambda r: (r["memory_per_gpu_gib"], r["rank"]))
        base = flat_layout(rep)
        ties = []
        for other in group:
            if other is rep:
                continue
            flat = flat_layout(other)
            diff = {p: v for p, v in flat.items() if base.get(p) != v}
            ties.append({**diff, "memory_per_gpu_gib": other["memory_per_gpu_gib"]})
        out.append({**rep, "ties": ties})
    return out


def frontiers(rows: Sequence[Mapping[str, Any]], *, usd: bool) -> dict[str, list[dict]]:
    """Pareto frontiers whose second axis varies: tokens/s vs memory headroom (always), vs GPU
    count and vs $ per 1e6 tokens (when the GPU count or GPU type varies)."""
    out = {"memory_headroom": pareto_front(rows, [("tokens_per_s", "max"),
                                                  ("memory_headroom_gib", "max")])}
    if len({r["num_gpus"] for r in rows}) > 1:
        out["num_gpus"] = pareto_front(rows, [("num_gpus", "min"), ("tokens_per_s", "max")])
    if usd and len({(r["gpu"], r["num_gpus"]) for r in rows}) > 1:
        out["cost"] = pareto_front(rows, [("tokens_per_s", "max"),
                                          ("usd_per_million_tokens", "min")])
    return out
