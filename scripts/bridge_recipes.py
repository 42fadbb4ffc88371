# SPDX-License-Identifier: Apache-2.0
"""Which Megatron-Bridge performance preset each ``megatron-bridge`` corpus row ran (issue 21):
every preset of ``scripts/performance/configs/*/*workload_base_configs.py`` at the release the
row's NeMo container ships (`RELEASES`), loaded with that release's own ``WorkloadBaseConfig``
fields, matched on the row's model, GPU, precision and layout (GPUs, TP, PP, VPP, EP, micro and
global batch). Prints per row the matching preset's CUDA graph, recompute modules, EP
all-to-all overlap and flex-dispatcher backend beside the row's columns, "!" where a column
disagrees; rows without a match are listed with no preset. The 26.08 rows (v0.6.0's flat
``perf_recipes``) are not covered, nor v0.4.2 (the DeepSeek-V3 B200/B300 26.04.01 rows).

Usage: python scripts/bridge_recipes.py GIT_DIR (a clone of NVIDIA-NeMo/Megatron-Bridge with
its release tags). Reads the tags with ``git show``; runs nothing from them but the preset files.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

CORPUS = Path(__file__).resolve().parents[1] / "datasets/validation/training/published_runs.csv"
RELEASES = {"25.11": "v0.2.0", "26.02": "v0.3.0", "26.02.01": "v0.3.1", "26.04": "v0.4.0",
            "26.04.01": "v0.4.1", "26.06": "v0.5.0", "26.06.01": "v0.5.1"}
MODELS = {"qwen3-30b-a3b": "QWEN3_30B_A3B", "qwen3-235b-a22b": "QWEN3_235B_A22B",
          "deepseek-v3": "DEEPSEEK_V3", "gpt-oss-120b": "GPT_OSS_120B", "kimi-k2": "KIMI_K2"}
PRECISIONS = {"BF16": "BF16", "FP8-CS": "FP8_CS", "FP8": "FP8_CS", "MXFP8": "FP8_MX",
              "FP8-MX": "FP8_MX"}


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True,
                          check=True).stdout


def _install_stub(repo: str, tag: str) -> None:
    """``utils.utils.WorkloadBaseConfig`` as the release declares it (fields and defaults)."""
    src = _git(repo, "show", f"{tag}:scripts/performance/utils/utils.py")
    fields = []
    for line in src[src.index("class WorkloadBaseConfig"):].splitlines()[1:]:
        if line.startswith(("    @property", "    def ")):
            break
        if m := re.match(r"    (\w+): [^=]+= (.+)$", line):
            fields.append((m.group(1), object, dataclasses.field(default=eval(m.group(2)))))
    module = types.ModuleType("utils.utils")
    module.WorkloadBaseConfig = dataclasses.make_dataclass("WorkloadBaseConfig", fields)
    sys.modules["utils"] = types.ModuleType("utils")
    sys.modules["utils.utils"] = module


def presets(repo: str, tag: str) -> dict[str, Any]:
    """Every preset object of the release's workload base config files, by name."""
    _install_stub(repo, tag)
    out: dict[str, Any] = {}
    for path in _git(repo, "ls-tree", "-r", "--name-only", tag,
                     "scripts/performance/configs").split():
        if path.endswith("workload_base_configs.py"):
            namespace: dict[str, Any] = {}
            exec(_git(repo, "show", f"{tag}:{path}"), namespace)  # noqa: S102 - preset data
            out.update({k: v for k, v in namespace.items()
                        if dataclasses.is_dataclass(v) and not isinstance(v, type)})
    return out


def _int(value: str, default: int = 1) -> int:
    return int(float(value)) if value else default


def _layout(row: dict[str, str]) -> tuple[int, ...]:
    return (int(row["num_gpus"]), int(row["tp"]), int(row["pp"]), _int(row["vpp"]),
            _int(row["ep"]), _int(row["micro_batch"]), int(row["global_batch"]))


def _preset_layout(p: Any) -> tuple[int, ...]:
    return (p.num_gpus, p.tensor_model_parallel_size, p.pipeline_model_parallel_size,
            p.virtual_pipeline_model_parallel_size or 1, p.expert_model_parallel_size,
            p.micro_batch_size, p.global_batch_size)


def match(row: dict[str, str], found: dict[str, Any]) -> tuple[str, Any] | None:
    """The preset of the row's model, GPU and precision whose layout equals the row's."""
    precision = PRECISIONS[re.search(r"precision (\S+) as published", row["notes"]).group(1)]
    gpu = row["gpu"].split("-")[0].upper()
    for name, p in found.items():
        if name.startswith(MODELS[row["model"]]) and f"_{gpu}_" in name and \
                precision in name and "LARGE_SCALE" not in name and \
                _preset_layout(p) == _layout(row):
            return name, p
    return None


def _settings(p: Any) -> tuple[str, str, str]:
    graph = "full_iteration" if p.cuda_graph_impl == "full_iteration" else \
        "+".join(p.cuda_graph_scope or []) if p.cuda_graph_impl == "transformer_engine" else ""
    return graph, "+".join(p.recompute_modules or []), "true" if p.moe_a2a_overlap else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir")
    repo = parser.parse_args().git_dir
    cache: dict[str, dict[str, Any]] = {}
    matched = 0
    with CORPUS.open() as f:
        rows = [r for r in csv.DictReader(f) if r["source"] == "megatron-bridge"]
    for i, row in enumerate(rows):
        tag = RELEASES.get(row["framework_version"].split("NeMo ")[-1])
        if tag is None:
            continue
        if tag not in cache:
            cache[tag] = presets(repo, tag)
        hit = match(row, cache[tag])
        if hit is None:
            print(f"{i:3d} {row['model']} {row['gpu']} {tag}: no preset")
            continue
        matched += 1
        want = _settings(hit[1])
        have = (row["cuda_graph"], row["recompute_modules"], row["moe_a2a_overlap"])
        flag = "" if want == have else "!"
        backend = getattr(hit[1], "moe_flex_dispatcher_backend", None) or "alltoall"
        print(f"{i:3d} {row['model']} {row['gpu']} {tag} {hit[0]}: graph={want[0] or '-'} "
              f"recompute={want[1] or '-'} a2a_overlap={want[2] or '-'} dispatcher={backend}"
              f" {flag}")
    print(f"{matched} rows matched a preset")


if __name__ == "__main__":
    main()
