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
from simulate.validate.corpus_versions import TE_VERSIONS

TRAINING_CORPUS = DATASETS_DIR / "validation" / "training" / "published_runs.csv"
README_START = "<!-- validate-published:start -->"
README_END = "<!-- validate-published:end -->"
PEAK_MATCH_TOLERANCE = 0.01  # a stated peak within 1% of ours is the same denominator
# Empty corpus fields and what the scorer assumes (datasets/validation/training/README.md).
DEFAULTS: dict[str, Any] = {"cp": 1, "ep": 1, "vpp": 1, "zero": 0, "micro_batch": 1,
                            "recompute": "none", "sp": False, "fsdp": False,
                            "attention": "flash", "framework": "megatron",
                            "tp_comm_overlap": False, "moe_a2a_overlap": False, "compile": True,
                            "fp8_recipe": "tensorwise", "cp_max_ctas": 0}
INTERLEAVED_VPP = 2  # "interleaved" with no stated vpp: the smallest interleaving
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


def _get(row: Mapping[str, str], key: str) -> str:
    return (row.get(key) or "").strip()


def _int(row: Mapping[str, str], key: str) -> int:
    value = _get(row, key)
    return int(value) if value else int(DEFAULTS[key])


def _bool(row: Mapping[str, str], key: str) -> bool:
    value = _get(row, key).lower()
    return value in ("true", "1", "yes") if value else bool(DEFAULTS[key])


def _float(row: Mapping[str, str], key: str) -> float | None:
    value = _get(row, key)
    return float(value) if value else None


def _row_hardware(row: Mapping[str, str]) -> dict[str, Any]:
    """A row's ``hardware`` block; an unstated node size spreads evenly (`_even_domains`)."""
    hardware: dict[str, Any] = {"gpu": _get(row, "gpu"), "num_gpus": int(_get(row, "num_gpus"))}
    if _get(row, "gpus_per_node"):
        hardware["gpus_per_node"] = int(_get(row, "gpus_per_node"))
    elif (spread := _even_domains(hardware["gpu"], hardware["num_gpus"])) is not None:
        hardware["gpus_per_node"] = spread
    return hardware


def row_scenario(row: Mapping[str, str], name: str) -> dict[str, Any]:
    """The scenario mapping of one corpus row; empty fields take `DEFAULTS`."""
    schedule = _get(row, "schedule") or "1f1b"
    vpp = _int(row, "vpp")
    if vpp > 1:
        schedule = "interleaved"
    elif schedule == "interleaved":
        vpp = INTERLEAVED_VPP
    parallel = {k: int(_get(row, k)) for k in ("tp", "pp", "dp")}
    parallel.update(cp=_int(row, "cp"), ep=_int(row, "ep"), vpp=vpp, sp=_bool(row, "sp"),
                    zero=_int(row, "zero"), fsdp=_bool(row, "fsdp"),
                    pipeline_split=_get(row, "pipeline_split") or "even")
    parallel["etp"] = _int(row, "etp") if _get(row, "etp") else _ran_etp(parallel)
    hardware = _row_hardware(row)
    framework = _get(row, "framework") or DEFAULTS["framework"]
    training = {"parallel": parallel, "global_batch": int(_get(row, "global_batch")),
                "micro_batch": _micro_batch(row, parallel, framework),
                "seq_len": int(_get(row, "seq_len")),
                "precision": _get(row, "precision") or "bf16",
                "recompute": _get(row, "recompute") or DEFAULTS["recompute"],
                "schedule": schedule, "attention": _get(row, "attention") or DEFAULTS["attention"]}
    training["framework"] = framework
    training["overlap"] = {"tp_comm": _bool(row, "tp_comm_overlap"),
                           "moe_a2a": _bool(row, "moe_a2a_overlap"),
                           "cp_max_ctas": _int(row, "cp_max_ctas")}  # `simulate.comm_ctas`
    training["compile"] = _bool(row, "compile")
    training["fp8_recipe"] = _get(row, "fp8_recipe") or DEFAULTS["fp8_recipe"]
    for key in ("grad_reduce_dtype", "optimizer_state_dtype"):  # as the recipe states them
        if _get(row, key):
            training[key] = _get(row, key)
    if _get(row, "framework_version") in TE_VERSIONS:
        training["transformer_engine"] = TE_VERSIONS[_get(row, "framework_version")]
    bridge = "megatron-bridge" in _get(row, "framework_version").lower()
    if _get(row, "cross_entropy_fusion"):  # Megatron-Core's fused loss, as the run set it
        training["cross_entropy_fusion"] = _bool(row, "cross_entropy_fusion")
    elif bridge:
        # unstated: Megatron-Bridge's GPTModelProvider fuses it (cross_entropy_loss_fusion=True)
        training["cross_entropy_fusion"] = True
    if bridge:
        # every Megatron-Bridge performance recipe of the corpus's releases (v0.2.0-v0.6.0)
        # sets `cfg.model.moe_router_fusion = True` (datasets/validation/training/README.md)
        training["moe_router_fusion"] = True
        # the GPT-OSS bridge turns bias-dropout-add fusion off (`simulate.bias_kernels`)
        training["bias_dropout_fusion"] = not _get(row, "model").startswith("gpt-oss")
    if _get(row, "compile_loss"):  # torchtitan's loss compiled with the model (since 2025-04)
        training["compile_loss"] = _bool(row, "compile_loss")
    if _get(row, "recompute_modules"):  # Megatron-Core's selective modules, "+"-separated
        training["recompute_modules"] = _get(row, "recompute_modules").split("+")
    if _get(row, "cuda_graph"):  # the recipe's CUDA graph scopes, "+"-separated
        training["cuda_graph"] = _get(row, "cuda_graph").split("+")
    if _get(row, "moe_fused_mlp"):  # the recipe's fused grouped expert MLP (TE op fuser)
        training["moe_fused_mlp"] = _bool(row, "moe_fused_mlp")
    if _get(row, "dp_bucket_mb"):  # the run's DDP gradient bucket (MB of gradients)
        training["dp_bucket_mb"] = float(_get(row, "dp_bucket_mb"))
    if _get(row, "activation_offload_layers"):  # Megatron-Core's cpu_offloading_num_layers
        training["offload"] = {"activations": True,
                               "activation_layers": _int(row, "activation_offload_layers")}
    return {"name": name, "model": _get(row, "model"), "hardware": hardware, "training": training}


def _even_domains(gpu: str, num_gpus: int) -> int | None:
    """Unstated placement of a run that does not fill whole NVLink domains (256 GPUs on
    72-GPU NVL72 racks): the GPUs spread evenly over the fewest domains that hold them, i.e. the
    largest divisor of num_gpus not above the domain size. None where the domains fill."""
    domain = get_hardware(gpu).gpus_per_node
    if num_gpus <= domain or num_gpus % domain == 0:
        return None
    return max(d for d in range(1, domain + 1) if num_gpus % d == 0)


def _ran_etp(parallel: Mapping[str, Any]) -> int:
    """Unstated expert TP of a run that ran: Megatron-Core's default (tp; 0 here) when the
    etp x ep grid then tiles a stage's tp*cp*dp ranks, else the largest divisor of tp that
    does (Megatron-Core refuses a grid that does not tile, so the run used such an etp)."""
    tp, ep = parallel["tp"], parallel["ep"]
    ranks = tp * parallel["cp"] * parallel["dp"]
    if ranks % (tp * ep) == 0:
        return 0
    return max((d for d in range(1, tp + 1) if tp % d == 0 and ranks % (d * ep) == 0),
               default=0)


def _micro_batch(row: Mapping[str, str], parallel: Mapping[str, Any], framework: str) -> int:
    """The stated micro-batch; unstated, the framework's default: torchtitan splits each DP
    rank's batch into pp micro-batches ("The default value will be the number of pipeline
    stages", --experimental.pipeline_parallel_microbatches, config_manager.py at 9dec370);
    otherwise `DEFAULTS`."""
    if _get(row, "micro_batch"):
        return int(_get(row, "micro_batch"))
    local = int(_get(row, "global_batch")) // (parallel["dp"])
    if framework == "torchtitan" and parallel["pp"] > 1 and local % parallel["pp"] == 0:
        return local // parallel["pp"]
    return int(DEFAULTS["micro_batch"])


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
    seq = int(_get(row, "seq_len"))
    causal = _get(row, "attention_flops") != "full"
    per_token = load_model(_get(row, "model")).flops_per_token(seq, training=True, causal=causal)
    return tflops * 1e12 / per_token, True


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
