# SPDX-License-Identifier: Apache-2.0
"""The survey's benchmark suite (Table 3: T1-T4 training, I1-I5 inference), one scenario file
per scenario in ``datasets/scenarios/suite/``; `run_suite` predicts each and reports, per
scenario, the metric practitioners optimise, its predicted value, the engines that answered and
an honest support level (supported / partial / unsupported, with the reason when not supported).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.errors import LlmsimError
from analytical.paths import DATASETS_DIR
from profiler.progress import advance, expect
from simulate.engines import EngineOptions

__all__ = ["SUITE", "SuiteEntry", "suite_dir", "run_suite"]

@dataclass(frozen=True, slots=True, kw_only=True)
class SuiteEntry:
    """One scenario: file stem, category, metric (label and how to read it from the output)."""

    file: str
    category: str
    metric: str  # what the practitioner optimises, in words with its unit
    path: tuple[str, ...]  # keys into the `llmsim simulate --json` object


def _e(file: str, category: str, metric: str, *path: str, **kw: Any) -> SuiteEntry:
    return SuiteEntry(file=file, category=category, metric=metric, path=path, **kw)


SUITE: dict[str, SuiteEntry] = {
    "T1.1": _e("t1.1-gpt2-medium-dp8-a100", "T1 data parallel", "tokens/s", "tokens_per_s"),
    "T1.2": _e("t1.2-llama2-7b-zero3-8xa100", "T1 data parallel", "MFU", "mfu"),
    "T1.3": _e("t1.3-llama3-8b-fsdp-64xh100", "T1 data parallel", "MFU", "mfu"),
    "T2.1": _e("t2.1-llama2-13b-tp4-a100", "T2 tensor parallel", "MFU", "mfu"),
    "T2.2": _e("t2.2-llama2-70b-tp8-64xh100", "T2 tensor parallel", "MFU", "mfu"),
    "T3.1": _e("t3.1-gpt3-175b-megatron-a100", "T3 pipeline parallel", "iteration time (s)",
               "iteration_time_s"),
    "T3.2": _e("t3.2-gpt3-175b-pp8-tp8-h100", "T3 pipeline parallel", "iteration time (s)",
               "iteration_time_s"),
    "T4.1": _e("t4.1-llama3-70b-fp8-h100", "T4 advanced (FP8)", "MFU", "mfu"),
    "T4.2": _e("t4.2-llama2-7b-lora-a100", "T4 advanced (LoRA)", "tokens/s", "tokens_per_s",
               ),
    "T4.3": _e("t4.3-llama3-70b-sp-cp-32k-h100", "T4 advanced (SP/CP)", "MFU", "mfu"),
    "T4.4": _e("t4.4-mixtral-8x7b-ep-h100", "T4 advanced (MoE EP)", "tokens/s", "tokens_per_s"),
    "I1.1": _e("i1.1-llama2-7b-single-a100", "I1 single request", "TTFT (s)", "ttft_s"),
    "I1.2": _e("i1.2-llama2-13b-single-tp2-a100", "I1 single request", "TPOT (s)", "tpot_s"),
    "I1.3": _e("i1.3-llama2-70b-single-tp4-h100", "I1 single request", "E2E latency (s)",
               "e2e_latency_s"),
    "I2.1": _e("i2.1-llama2-7b-vllm-qps4-a100", "I2 batched serving (vLLM)", "TTFT p90 (s)",
               "ttft_s", "p90"),
    "I2.2": _e("i2.2-llama2-13b-sarathi-a100", "I2 batched serving (Sarathi)", "TPOT p90 (s)",
               "tpot_s", "p90"),
    "I2.3": _e("i2.3-llama3-70b-tp8-closed-h100", "I2 batched serving", "output tokens/s",
               "throughput_tokens_per_s"),
    "I3.1": _e("i3.1-llama2-13b-kv-pressure-a100", "I3 KV cache", "preemptions",
               "preemptions"),
    "I3.2": _e("i3.2-llama3-8b-fp8-kv-32k-h100", "I3 KV cache", "peak KV utilisation",
               "kv_cache", "peak_utilisation"),
    "I4.1": _e("i4.1-colocated-two-7b-a100", "I4 multi-model", "TPOT p90 of 'chat' (s)",
               "tenants", "chat", "tpot_s", "p90"),
    "I5.1": _e("i5.1-spec-decode-llama2-70b-h100", "I5 speculative decoding", "TPOT mean (s)",
               "tpot_s", "mean"),
    "I5.2": _e("i5.2-prefix-cache-llama2-7b-a100", "I5 prefix caching", "TTFT mean (s)",
               "ttft_s", "mean"),
    "I5.3": _e("i5.3-int4-llama3-70b-h100", "I5 INT4 quantisation", "TPOT mean (s)",
               "tpot_s", "mean"),
    "I5.4": _e("i5.4-disaggregated-llama3-70b-h100", "I5 disaggregated serving",
               "TTFT p90 (s)", "ttft_s", "p90"),
}


def suite_dir() -> Path:
    """``datasets/scenarios/suite`` of this checkout."""
    return DATASETS_DIR / "scenarios" / "suite"


def _get(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = data
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _engines(coverage: Mapping[str, float]) -> list[str]:
    return [k for k, v in coverage.items() if v > 0]


def run_suite(*, directory: Path | None = None, engines: EngineOptions | None = None
              ) -> list[dict[str, Any]]:
    """Predict every suite scenario with the ``engines`` chain (None: every engine); one row
    per scenario, in suite order."""
    from simulate.api import run

    directory = directory or suite_dir()
    rows = []
    expect(len(SUITE), unit="scenarios")
    for sid, entry in SUITE.items():
        path = directory / f"{entry.file}.yaml"
        row: dict[str, Any] = {"id": sid, "category": entry.category, "metric": entry.metric,
                               "scenario": entry.file}
        try:
            out = run(path, options=engines)
            value = _get(out.data, entry.path)
            fits = bool(out.data.get("fits", True))
            row.update({"value": value,
                        "engines": _engines(out.data.get("engine_coverage", {})),
                        "status": "supported" if fits and value is not None else "partial",
                        "note": "" if fits else "does not fit in memory"})
        except LlmsimError as exc:
            row.update({"value": None, "engines": [], "status": "unsupported",
                        "note": str(exc)})
        rows.append(row)
        advance(1, unit="scenarios", label=sid)
    return rows
