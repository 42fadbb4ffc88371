# SPDX-License-Identifier: Apache-2.0
"""Training results as JSON-ready dicts, summary rows, a breakdown chart and a missing-shape
sweep. Printing is the CLI's job (`simulate.cli.simulate_cmd`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from analytical.ops import OpSpec, op_to_dict
from simulate.cli.output import format_seconds
from simulate.training import GIB, TrainingResult

MFU_NOTE = ("mfu = model FLOPs (ModelSpec.flops_per_token, no recompute) / (iteration time * "
            "GPUs * dense peak of the training precision: bf16/fp16, or fp8 for fp8 runs, as "
            "Composer's GPU_AVAILABLE_FLOPS per precision); model_tflops_per_gpu is the same "
            "numerator per GPU and second")


def result_to_dict(result: TrainingResult) -> dict[str, Any]:
    """The scenario contract's training keys; timing keys are None when it does not fit."""
    mem = result.memory
    memory = {f"{f.name.removesuffix('_bytes')}_gib": getattr(mem, f.name) / GIB
              for f in fields(mem)}
    memory["allocated_gib"] = mem.allocated_bytes / GIB  # what must fit
    memory["total_gib"] = mem.total_bytes / GIB  # reserved: allocated + allocator
    memory["capacity_gib"] = result.memory_capacity_bytes / GIB
    return {
        "mode": "training",
        "name": result.name,
        "model": result.model,
        "hardware": result.hardware,
        "num_gpus": result.num_gpus,
        "fits": result.fits,
        "iteration_time_s": result.iteration_time_s,
        "tokens_per_s": result.tokens_per_s,
        "tflops_per_gpu": result.tflops_per_gpu,
        "model_tflops_per_gpu": result.tflops_per_gpu,
        "tokens_per_s_per_gpu": (None if result.tokens_per_s is None
                                 else result.tokens_per_s / result.num_gpus),
        "mfu": result.mfu,
        "memory_per_gpu_gib": result.memory_per_gpu_gib,
        "memory": memory,
        "breakdown": result.breakdown_s,
        "engine_coverage": result.engine_coverage if result.fits else None,
        "engines_available": result.engines_available if result.fits else None,
        "num_microbatches": result.num_microbatches,
        "bubble_fraction": result.bubble_fraction,
        "model_flops_per_iteration": result.model_flops_per_iteration,
        "critical_stage": result.critical_stage,
        "warnings": list(result.warnings),
        "notes": {"mfu": MFU_NOTE},
    }


def summary_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """(field, value) rows of a training result dict for the human table."""
    rows: list[dict[str, Any]] = [
        {"field": "model", "value": data["model"]},
        {"field": "hardware", "value": f"{data['num_gpus']:,} x {data['hardware']}"},
        {"field": "memory per GPU",
         "value": f"{data['memory_per_gpu_gib']:.1f} of {data['memory']['capacity_gib']:.1f} GiB"},
        {"field": "allocated peak (must fit)", "value": f"{data['memory']['allocated_gib']:.1f} GiB"},
    ]
    if not data["fits"]:
        return rows
    rows += [
        {"field": "iteration time (s)", "value": data["iteration_time_s"]},
        {"field": "tokens/s", "value": data["tokens_per_s"]},
        {"field": "TFLOP/s per GPU", "value": data["tflops_per_gpu"]},
        {"field": "MFU", "value": f"{100 * data['mfu']:.1f}%"},
        {"field": "micro-batches", "value": data["num_microbatches"]},
        {"field": "bubble fraction", "value": data["bubble_fraction"]},
    ]
    total = data["iteration_time_s"]
    for key, value in data["breakdown"].items():
        rows.append({"field": f"  {key.replace('_', ' ')}",
                     "value": f"{format_seconds(value)} ({100 * value / total:.1f}%)"})
    coverage = ", ".join(f"{k} {100 * v:.1f}%" for k, v in data["engine_coverage"].items())
    rows.append({"field": "engine coverage", "value": coverage})
    return rows


def plot_breakdown(data: dict[str, Any], path: str | Path) -> None:
    """A horizontal stacked bar of the iteration-time breakdown (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 2.2))
    left = 0.0
    for key, value in (data["breakdown"] or {}).items():
        ax.barh([data["name"]], [value], left=left, label=key.replace("_", " "))
        left += value
    ax.set_xlabel("seconds per iteration")
    ax.set_title(f"{data['name']}: {data['iteration_time_s'] or 0:.3g} s, "
                 f"MFU {100 * (data['mfu'] or 0):.1f}%")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def missing_sweep(ops: Sequence[OpSpec], name: str) -> dict[str, Any]:
    """Operators the store did not serve, in the profiler's sweep format (``shapes: list``)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for op in sorted(ops, key=lambda o: o.key):
        values = op_to_dict(op)
        dtype = str(values.pop("dtype"))
        groups.setdefault((op.family, dtype), []).append(
            {k: (v.value if hasattr(v, "value") else v) for k, v in values.items()})
    families = [{"family": family, "dtypes": [dtype], "shapes": {"list": shapes}}
                for (family, dtype), shapes in sorted(groups.items())]
    return {"name": f"{name}-missing", "device": "cuda", "families": families}
