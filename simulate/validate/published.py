# SPDX-License-Identifier: Apache-2.0
"""``llmsim validate published``: predictions against runs other people published.

Each corpus row (``datasets/validation/training/published_runs.csv``) becomes a scenario and is
predicted by `simulate.api.run`, the code path of ``llmsim simulate --json``. Scores per source
and overall: tokens/s/GPU MAPE and signed median error, MFU error only where the row's stated
peak is the dense peak we divide by, peak-memory error where published, and false OOM verdicts
(a run that ran, predicted not to fit). `SCORERS` maps a corpus kind to its scorer so that a
serving corpus can be added beside the training one.
"""

from __future__ import annotations

import csv
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.dtypes import parse_dtype
from analytical.errors import LlmsimError, SpecError
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.paths import DATASETS_DIR
from profiler.progress import advance, expect
from simulate.validate.corpus_row import _bool, _float, _get, _parsed, row_scenario

TRAINING_CORPUS = DATASETS_DIR / "validation" / "training" / "published_runs.csv"
README_START = "<!-- validate-published:start -->"
README_END = "<!-- validate-published:end -->"
PEAK_MATCH_TOLERANCE = 0.01  # a stated peak within 1% of ours is the same denominator
# A row that does not state its recompute policy takes the first of these that fits, as a
# practitioner sizing the run would (and as NeMo's auto-configurator searches recompute).
UNSTATED_RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True, slots=True, kw_only=True)
class RowOutcome:
    """One corpus row: what was measured, what we predict, and whether they compare."""

    source: str
    name: str
    fits: bool | None  # None: the row could not be simulated (error says why)
    measured_tps: float | None = None  # tokens/s/GPU, published or derived from TFLOP/s
    tps_derived: bool = False
    predicted_tps: float | None = None
    measured_mfu: float | None = None
    predicted_mfu: float | None = None
    measured_mem_gib: float | None = None
    predicted_mem_gib: float | None = None
    error: str | None = None
    assumed_recompute: str | None = None  # set where the row left recompute empty

    @property
    def tps_error(self) -> float | None:
        """Signed relative error of tokens/s/GPU (predicted / measured - 1)."""
        if self.predicted_tps is None or not self.measured_tps:
            return None
        return self.predicted_tps / self.measured_tps - 1.0

    @property
    def mfu_error(self) -> float | None:
        if self.predicted_mfu is None or not self.measured_mfu:
            return None
        return self.predicted_mfu / self.measured_mfu - 1.0

    @property
    def mem_error(self) -> float | None:
        if self.predicted_mem_gib is None or not self.measured_mem_gib:
            return None
        return self.predicted_mem_gib / self.measured_mem_gib - 1.0


ROW_KEY = "_corpus_row"  # not a CSV column: the row's index in its corpus file


def load_corpus(path: str | Path = TRAINING_CORPUS) -> list[dict[str, str]]:
    """The corpus rows as string dicts (empty string = not published), each with its index in
    the file under `ROW_KEY`, so a row keeps its name (``<source>-<index>``) in any subset."""
    path = Path(path)
    if not path.is_file():
        raise SpecError("corpus", f"no corpus file at {path}")
    with path.open(newline="") as handle:
        return [{**r, ROW_KEY: str(i)} for i, r in enumerate(csv.DictReader(handle))]


def _measured_tps(row: Mapping[str, str]) -> tuple[float | None, bool]:
    """Published tokens/s/GPU; else TFLOP/s/GPU (or MFU x stated peak) converted with our model
    FLOPs per token counted as the source counts them: ``attention_flops = full`` when its
    formula takes every s^2 score (Narayanan et al. 2021 eq. 3 / Korthikanti et al. 2022 appendix
    s/(6h) term; Megatron-LM `num_floating_point_operations` 12*s/h term; NeMo
    `flops_formulas.py` before its causal discount, 6251117f, 2025-08-09), else causal (half)."""
    tps = _float(row, "tokens_per_s_per_gpu")
    if tps:
        return tps, False
    tflops = _float(row, "tflops_per_gpu")
    mfu, peak = _float(row, "mfu"), _float(row, "mfu_peak_tflops")
    if tflops is None and mfu and peak:
        tflops = mfu * peak
    if not tflops:
        return None, False
    return tflops * 1e12 / source_flops_per_token(row), True


def source_flops_per_token(row: Mapping[str, str]) -> float:
    """Training FLOPs per token as the row's source counts them in its TFLOP/s.

    ``attention_flops`` full: every s^2 score, else causal (see `_measured_tps`).
    ``flops_recompute`` true: one more forward of every Transformer layer, the full-recompute
    pass (Narayanan et al. 2021 eq. 3, 96Bslh^2(1 + s/6h + V/16lh) = 4 passes of the layers, 3 of
    the logits; Megatron-DeepSpeed `throughput_calculator`, megatron/utils.py at 0782d753: "the
    factor of 4 is when used with activation check-pointing"). Model FLOPs otherwise.
    """
    seq = _parsed(row, "seq_len", int)
    causal = _get(row, "attention_flops") != "full"
    model = load_model(_get(row, "model"))
    per_token = model.flops_per_token(seq, training=True, causal=causal)
    if _bool(row, "flops_recompute"):
        layers_matmul = model.matmul_params_active - model.vocab * model.hidden  # LM head kept out
        per_token += 2.0 * layers_matmul + model.attention_flops_per_token(
            seq, training=False, causal=causal)
    return per_token


def _measured_mfu(row: Mapping[str, str]) -> float | None:
    """The published MFU where its stated peak is the dense peak of the training precision."""
    mfu, peak = _float(row, "mfu"), _float(row, "mfu_peak_tflops")
    if not mfu or not peak:
        return None
    hw = get_hardware(_get(row, "gpu"))
    ours = hw.peak_flops(parse_dtype(_get(row, "precision") or "bf16")) / 1e12
    return mfu if abs(peak / ours - 1.0) <= PEAK_MATCH_TOLERANCE else None


Runner = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def simulate_runner(*, store_path: str | Path | None = None, use_store: bool = True,
                    use_predictors: bool = True, tracking_uri: str | None = None) -> Runner:
    """``scenario mapping -> simulate --json data`` through `simulate.api.run`."""
    from simulate.api import run

    def runner(scenario: Mapping[str, Any]) -> Mapping[str, Any]:
        return run(scenario, store_path=store_path, use_store=use_store,
                   use_predictors=use_predictors, tracking_uri=tracking_uri).data

    return runner


def run_as_ran(row: Mapping[str, str], scenario: dict[str, Any], runner: Runner
               ) -> tuple[Mapping[str, Any], str | None]:
    """``runner``'s output for ``scenario`` at the row's recompute policy or, unstated, at the
    least of `UNSTATED_RECOMPUTE` that fits (the run ran, so it fit); with the policy assumed
    (None where the row states one). ``scenario`` is left at the policy run last."""
    stated = _get(row, "recompute")
    for policy in (stated,) if stated else UNSTATED_RECOMPUTE:
        scenario["training"]["recompute"] = policy
        data = runner(scenario)
        if data.get("fits"):
            break
    return data, None if stated else policy


def score_row(row: Mapping[str, str], index: int, runner: Runner) -> RowOutcome:
    """Predict one row; a row the simulator rejects keeps its error message."""
    source = _get(row, "source")
    name = f"{source}-{index}"
    try:
        measured_tps, derived = _measured_tps(row)
        measured_mfu = _measured_mfu(row)
        data, assumed = run_as_ran(row, row_scenario(row, name), runner)
    except (LlmsimError, ValueError, KeyError) as exc:
        return RowOutcome(source=source, name=name, fits=None, error=str(exc))
    fits = bool(data.get("fits"))
    tps = data.get("tokens_per_s_per_gpu")
    if tps is None and data.get("tokens_per_s") is not None:
        tps = data["tokens_per_s"] / data["num_gpus"]
    return RowOutcome(source=source, name=name, fits=fits, measured_tps=measured_tps,
                      tps_derived=derived, predicted_tps=tps if fits else None,
                      measured_mfu=measured_mfu,
                      predicted_mfu=data.get("mfu") if fits and measured_mfu else None,
                      measured_mem_gib=_float(row, "peak_memory_gib"),
                      predicted_mem_gib=data.get("memory_per_gpu_gib"),
                      assumed_recompute=assumed)


def score_training(rows: Sequence[Mapping[str, str]], runner: Runner) -> list[RowOutcome]:
    """Score every training row (nothing is calibrated from the corpus: see `calibration_note`)."""
    expect(len(rows), unit="runs")
    outcomes = []
    for i, row in enumerate(rows):
        outcomes.append(score_row(row, int(row.get(ROW_KEY) or i), runner))
        advance(1, unit="runs", label=outcomes[-1].name)
    return outcomes


def calibration_note() -> str:
    return ("no parameter is fitted on this corpus (the engine chain is built from operator "
            "measurements only), so leave-one-source-out equals the plain score")


SCORERS: dict[str, Callable[[Sequence[Mapping[str, str]], Runner], list[RowOutcome]]] = {
    "training": score_training,
}
CORPORA: dict[str, Path] = {"training": TRAINING_CORPUS}


def _mape(errors: Iterable[float]) -> float | None:
    values = [abs(e) for e in errors]
    return 100.0 * statistics.fmean(values) if values else None


def _median(errors: Iterable[float]) -> float | None:
    values = list(errors)
    return 100.0 * statistics.median(values) if values else None


def summarize(outcomes: Sequence[RowOutcome]) -> list[dict[str, Any]]:
    """One row per source, then ``overall`` and ``mean of sources`` (per-source MAPE mean)."""
    groups: dict[str, list[RowOutcome]] = {}
    for o in outcomes:
        groups.setdefault(o.source, []).append(o)
    table = [_summary_row(src, rows) for src, rows in sorted(groups.items())]
    table.append(_summary_row("overall", list(outcomes)))
    per_source = [r["tps_mape_pct"] for r in table[:-1] if r["tps_mape_pct"] is not None]
    table.append({"source": "mean of sources", "n": len(outcomes),
                  "tps_mape_pct": statistics.fmean(per_source) if per_source else None})
    return table


def _summary_row(source: str, rows: Sequence[RowOutcome]) -> dict[str, Any]:
    tps = [o.tps_error for o in rows if o.tps_error is not None]
    mfu = [o.mfu_error for o in rows if o.mfu_error is not None]
    mem = [o.mem_error for o in rows if o.mem_error is not None]
    return {"source": source, "n": len(rows), "n_tps": len(tps),
            "n_derived": sum(o.tps_error is not None and o.tps_derived for o in rows),
            "tps_mape_pct": _mape(tps), "tps_median_pct": _median(tps),
            "n_mfu": len(mfu), "mfu_mape_pct": _mape(mfu),
            "false_oom": sum(o.fits is False for o in rows),
            "errors": sum(o.fits is None for o in rows),
            "n_mem": len(mem), "mem_mape_pct": _mape(mem), "mem_median_pct": _median(mem)}


SUMMARY_COLUMNS = ("source", "n", "n_tps", "n_derived", "tps_mape_pct", "tps_median_pct",
                   "n_mfu", "mfu_mape_pct", "false_oom", "errors", "n_mem", "mem_mape_pct",
                   "mem_median_pct")
LABELS = {"n_tps": "n tok/s", "n_derived": "of which derived", "tps_mape_pct": "tok/s/GPU MAPE %",
          "tps_median_pct": "tok/s/GPU median %", "n_mfu": "n MFU", "mfu_mape_pct": "MFU MAPE %",
          "false_oom": "false OOM", "errors": "not simulated", "n_mem": "n mem",
          "mem_mape_pct": "mem MAPE %", "mem_median_pct": "mem median %"}


def display_rows(summary: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The summary with readable headers and one decimal (the CLI table and the README)."""
    def cell(v: Any) -> str:
        if v is None:
            return ""
        return f"{v:+.1f}" if isinstance(v, float) and v < 0 else (
            f"{v:.1f}" if isinstance(v, float) else str(v))

    return [{LABELS.get(c, c): cell(r.get(c)) for c in SUMMARY_COLUMNS} for r in summary]


def markdown_table(summary: Sequence[Mapping[str, Any]], command: str, note: str) -> str:
    """The summary as a Markdown table, with the command that produced it."""
    rows = display_rows(summary)
    header = list(rows[0]) if rows else [LABELS.get(c, c) for c in SUMMARY_COLUMNS]
    lines = [f"`{command}` ({note}):", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r[h] for h in header) + " |" for r in rows]
    return "\n".join(lines)


def write_readme(path: str | Path, block: str) -> None:
    """Put ``block`` between the validate-published markers of ``path`` (appended if absent)."""
    path = Path(path)
    text = path.read_text() if path.exists() else ""
    body = f"{README_START}\n{block}\n{README_END}"
    if README_START in text and README_END in text:
        head, rest = text.split(README_START, 1)
        tail = rest.split(README_END, 1)[1]
        text = head + body + tail
    else:
        text = text.rstrip("\n") + ("\n\n" if text else "") + body + "\n"
    path.write_text(text)
