# SPDX-License-Identifier: Apache-2.0
"""Turn the JSONs of `scripts/gpu_train_step.py` into rows of the training corpus format, so
`llmsim validate published --corpus` scores our own GPU runs by the same code path as published
ones.

Each JSON is one configuration on one GPU: a torchtitan-style step (FSDP2 at world size 1,
bf16 parameters over fp32 masters, foreach AdamW, no activation checkpointing). Measured:
tokens/s (micro-batch x sequence / median step time) and peak memory as torchtitan reports it
(the caching allocator's reserved peak, GiB).

    python3 scripts/gpu_step_corpus.py datasets/validation/gpu-step/h100-sxm-2026-11-26 \
        > datasets/validation/gpu-step/runs.csv
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "datasets" / "validation" / "training" / "published_runs.csv"


def corpus_row(path: Path, columns: list[str]) -> dict[str, str] | None:
    """One corpus row of a step JSON, or None for a run that did not finish (out of memory)."""
    data = json.loads(path.read_text())
    if "step_median_s" not in data:
        return None
    device = data["device"]
    config = Path(data["config"])
    rel = path.relative_to(ROOT) if path.is_absolute() else path
    row = dict.fromkeys(columns, "")
    mb, seq = data["micro_batch"], data["seq"]
    row.update(
        source="llmsim-gpu-step", url=str(rel), section=data["label"],
        version=f"torch {device['torch']}, fingerprint {device.get('fingerprint', '')}",
        model=f"datasets/validation/gpu-step/configs/{config.name}", gpu=device["hardware"],
        num_gpus="1", gpus_per_node="1", tp="1", pp="1", dp="1", cp="1", ep="1", vpp="1",
        sp="false", zero="3", fsdp="true", global_batch=str(mb), micro_batch=str(mb),
        seq_len=str(seq), precision="bf16", recompute="none", attention="flash",
        framework="torchtitan", framework_version="scripts/gpu_train_step.py (torchtitan 9dec370 recipe)",
        step_time_s=f"{data['step_median_s']:.6f}",
        tokens_per_s_per_gpu=f"{mb * seq / data['step_median_s']:.1f}",
        peak_memory_gib=f"{data['memory']['max_reserved_gib']:.2f}",
        compile="true" if data["compile"] else "false", compile_loss="false",
        notes=(f"median of {len(data['step_s'])} steps after {data['warmup']}; "
               f"max allocated {data['memory']['max_allocated_gib']:.2f} GiB"))
    return row


def main() -> None:
    columns = next(csv.reader(CORPUS.open()))
    writer = csv.DictWriter(sys.stdout, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for folder in sys.argv[1:]:
        for path in sorted(Path(folder).resolve().glob("*.json")):
            row = corpus_row(path, columns)
            if row is not None:
                writer.writerow(row)


if __name__ == "__main__":
    main()
