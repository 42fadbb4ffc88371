# SPDX-License-Identifier: Apache-2.0
"""Score llmsim's serving predictions against published measurements (the serving corpus).

Every row becomes the scenario `llmsim simulate --json` would run (`serving_corpus.row_scenario`)
and goes through `simulate.api.run`, the same code path. Predicted and measured values are
compared on the statistic the source states (mean, median, p95...; unstated = mean): TTFT,
TPOT, ITL, E2E latency and output throughput. The report gives n and MAPE per source and
overall, the signed error by concurrency band (a trend there means queueing is modelled wrong),
and the false out-of-memory verdicts (a published run exists, so "does not fit" is wrong).
`score_serving` calibrates nothing on the corpus. `score_serving_loso` adds the one calibrated
quantity, the host overhead of a step per engine (scheduling, input preparation, sampling and
output handling, which the engines do not publish): a fixed part plus a part per request in the
step, fitted by least squares on the measured-minus-predicted decode steps of the *other*
sources against their batch sizes and applied to the held-out one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from analytical.errors import LlmsimError
from profiler.progress import advance, expect
from simulate.serving.engine_presets import engine_data
from simulate.serving.engine_versions import versioned_data
from simulate.validate.serving_corpus import MEASURES, ServingRow, load_corpus, row_scenario

BANDS = (("1-4", 1, 4), ("5-16", 5, 16), ("17-64", 17, 64), (">64", 65, 1 << 30))
_STAT = {"": "mean", "mean": "mean", "median": "p50", "p50": "p50", "p90": "p90", "p95": "p95",
         "p99": "p99"}
_KEY = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "itl_ms": "itl_s", "e2e_ms": "e2e_latency_s"}

Predict = Callable[[dict[str, Any]], Mapping[str, Any]]


def simulate_json(*, use_store: bool = False, use_predictors: bool = False,
                  store_path: str | Path | None = None, tracking_uri: str | None = None
                  ) -> Predict:
    """A predictor that runs a scenario exactly as ``llmsim simulate --json`` does, plus the
    mean TTFT split into front end, queueing and prefill (``ttft_parts_s``, from the run's
    per-request times)."""
    from simulate.api import run
    from simulate.serving.metrics import ttft_parts

    def predict(doc: dict[str, Any]) -> Mapping[str, Any]:
        out = run(doc, store_path=store_path, tracking_uri=tracking_uri, use_store=use_store,
                  use_predictors=use_predictors, latencies=True)
        data = dict(out.data)
        if out.latencies is not None and "admitted" in out.latencies:
            warmup = int(doc.get("serving", {}).get("arrival", {}).get("warmup_requests", 0))
            data["ttft_parts_s"] = ttft_parts(out.latencies, warmup)
        return data

    return predict


def predicted_value(data: Mapping[str, Any], measure: str, stat: str = "") -> float | None:
    """The predicted counterpart of a measured value (ms, or tokens/s for throughput)."""
    if measure == "output_tok_s":
        value = data.get("throughput_tokens_per_s")
        return float(value) if value is not None else None
    value = data.get(_KEY[measure])
    if isinstance(value, Mapping):
        value = value.get(_STAT.get(stat, "mean"))
    return float(value) * 1e3 if value is not None else None


def score_row(row: ServingRow, predict: Predict, *, engine_presets: bool = True,
              max_prompts: int | None = None, step_overhead_ms: float | None = None,
              step_overhead_per_seq_us: float | None = None) -> dict[str, Any]:
    """One row: predicted and measured values and signed relative errors ((pred - meas) / meas)."""
    out: dict[str, Any] = {"id": row.id, "source": row.source, "engine": row.engine,
                           "mode": row.mode, "concurrency": row.concurrency,
                           "measured": dict(row.measured)}
    try:
        data = predict(row_scenario(row, engine_presets=engine_presets, max_prompts=max_prompts,
                                    step_overhead_ms=step_overhead_ms,
                                    step_overhead_per_seq_us=step_overhead_per_seq_us))
    except LlmsimError as exc:  # a row llmsim cannot take (unknown model/GPU...): reported
        return {**out, "fits": None, "failure": f"{type(exc).__name__}: {exc}"}
    out["fits"] = bool(data.get("fits", True))
    if not out["fits"]:
        return {**out, "reason": str(data.get("reason", ""))}
    pred = {m: predicted_value(data, m, row.stats.get(m, "")) for m in row.measured}
    out["predicted"] = pred
    parts = data.get("ttft_parts_s")
    if isinstance(parts, Mapping) and parts:
        out["ttft_parts_ms"] = {k: float(v) * 1e3 for k, v in parts.items()}
    coverage = data.get("engine_coverage")
    if isinstance(coverage, Mapping) and coverage:  # GPU time not from the roofline
        out["measured_share"] = 1.0 - float(coverage.get("roofline", 0.0))
    errors: dict[str, float] = {}
    for m, v in row.measured.items():
        p = pred.get(m)
        if p is not None and v > 0:
            errors[m] = (p - v) / v
    out["error"] = errors
    return out


def _band(result: Mapping[str, Any]) -> str:
    if result["mode"] != "closed":
        return result["mode"]
    conc = int(result["concurrency"])
    return next(name for name, lo, hi in BANDS if lo <= conc <= hi)


def summarize(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """n, MAPE (%), median APE and mean signed error (%) per measure; false OOM and failures."""
    summary: dict[str, Any] = {
        "rows": len(results),
        "false_oom": sum(1 for r in results if r.get("fits") is False),
        "not_run": sum(1 for r in results if r.get("fits") is None)}
    for measure in MEASURES:
        errs = np.array([r["error"][measure] for r in results
                         if isinstance(r.get("error"), Mapping) and measure in r["error"]])
        if errs.size:
            summary[measure] = {"n": int(errs.size),
                                "mape_pct": float(np.mean(np.abs(errs)) * 100),
                                "median_ape_pct": float(np.median(np.abs(errs)) * 100),
                                "mean_signed_pct": float(np.mean(errs) * 100),
                                "median_signed_pct": float(np.median(errs) * 100)}
    return summary


def by_band(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Signed TTFT / TPOT / ITL error per concurrency band (and offline / latency rows)."""
    bands: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        bands.setdefault(_band(r), []).append(r)
    out = {}
    for name, group in bands.items():
        s = summarize(group)
        out[name] = {m: {"n": s[m]["n"], "mean_signed_pct": s[m]["mean_signed_pct"],
                         "median_signed_pct": s[m]["median_signed_pct"]}
                     for m in ("ttft_ms", "tpot_ms", "itl_ms") if m in s}
        parts = ttft_shares(group)
        if parts:
            out[name]["ttft_parts_pct"] = parts
    return out


def ttft_shares(results: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Where the predicted mean TTFT goes, in % of it, averaged over rows: front end, queueing
    for the first scheduled step, prefill steps (`simulate.serving.metrics.ttft_parts`)."""
    shares: dict[str, list[float]] = {}
    for r in results:
        parts = r.get("ttft_parts_ms")
        total = sum(parts.values()) if isinstance(parts, Mapping) else 0.0
        if total > 0:
            for k, v in parts.items():
                shares.setdefault(k, []).append(100.0 * v / total)
    return {k: float(np.mean(v)) for k, v in shares.items()}


def score_serving(rows: Sequence[ServingRow] | None = None, *, engine_presets: bool = True,
                  predict: Predict | None = None, use_store: bool = False,
                  use_predictors: bool = False, store_path: str | Path | None = None,
                  tracking_uri: str | None = None, max_prompts: int | None = None
                  ) -> dict[str, Any]:
    """Score serving predictions against published rows (default: the whole corpus).

    rows: `ServingRow`s (`serving_corpus.load_corpus`, or `rows_from_vllm_bench` for a user's
    own ``vllm bench serve`` JSON files). engine_presets: pass each row's engine to the scenario
    (``serving.engine``); False scores llmsim's engine-less default (``continuous``).
    predict: scenario -> result JSON; default runs `simulate.api.run` (``llmsim simulate
    --json``) with the store / predictors as asked (default: neither, roofline only).
    max_prompts: cap the request count of throughput-only bursts (speed: their throughput
    settles far sooner than the 30,000 requests some offline rows list; closed loops and
    bursts timed per request run whole, `serving_corpus.row_scenario`).

    Returns {"overall", "by_source", "by_band", "rows"}: per measure n, MAPE %, median APE %
    and mean signed error %, plus false-OOM and not-run counts.
    """
    rows = load_corpus() if rows is None else list(rows)
    predict = predict or simulate_json(use_store=use_store, use_predictors=use_predictors,
                                       store_path=store_path, tracking_uri=tracking_uri)
    expect(len(rows), unit="runs")
    results = []
    for r in rows:
        results.append(score_row(r, predict, engine_presets=engine_presets,
                                 max_prompts=max_prompts))
        advance(1, unit="runs", label=r.id)
    sources = sorted({r["source"] for r in results})
    return {
        "settings": {"engine_presets": engine_presets, "use_store": use_store,
                     "use_predictors": use_predictors, "max_prompts": max_prompts},
        "overall": summarize(results),
        "by_source": {s: summarize([r for r in results if r["source"] == s]) for s in sources},
        "by_band": by_band(results),
        "rows": results,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class HostOverhead:
    """Host (CPU) time of one engine step: a fixed part plus a part per request in the step
    (see `step_overhead_per_seq_us` in datasets/engines/*.yaml for the engine code behind it)."""

    step_ms: float
    per_seq_us: float

    def at(self, requests: float) -> float:
        """Milliseconds per step with `requests` requests scheduled."""
        return self.step_ms + self.per_seq_us * requests / 1e3


def step_residual(row: ServingRow, result: Mapping[str, Any]) -> tuple[int, float] | None:
    """(requests per step, measured minus predicted ms of one step) from a row predicted without
    host overhead: the median ITL (a decode step) at any concurrency, else TPOT at concurrency
    <= 16, where queueing barely enters, or E2E over the output tokens of a one-batch latency
    row. None where the row says nothing about it."""
    pred = result.get("predicted") or {}
    meas = row.measured
    if row.mode == "latency" and "e2e_ms" in meas and pred.get("e2e_ms") is not None:
        return max(row.batch_size, 1), (meas["e2e_ms"] - pred["e2e_ms"]) / max(row.output_len, 1)
    if row.mode != "closed":
        return None
    if "itl_ms" in meas and pred.get("itl_ms") is not None and row.stats.get("itl_ms") in (
            "median", "p50"):
        return row.concurrency, meas["itl_ms"] - pred["itl_ms"]
    if row.concurrency <= 16:
        for m in ("tpot_ms", "itl_ms"):
            if m in meas and pred.get(m) is not None:
                return row.concurrency, meas[m] - pred[m]
    return None


def _slope_us(points: Sequence[tuple[int, float]]) -> float | None:
    """Per-request slope (us) of one source's residuals against its batch sizes, where they span
    at least 4x (a source varying its concurrency under one setup); never negative."""
    n = np.array([p[0] for p in points], dtype=float)
    if n.size < 2 or n.max() < 4 * n.min():
        return None
    r = np.array([p[1] for p in points], dtype=float)
    return max(float(np.polyfit(n, r, 1)[0]), 0.0) * 1e3


def _fit_engine(by_source: Mapping[str, list[tuple[int, float]]],
                fallback_us: float) -> HostOverhead:
    """Slope: median of the engine's within-source slopes (else `fallback_us`); step: median of
    what is left of every residual; never negative. Slopes are never taken across sources:
    two sources at different batch sizes differ in model, GPU and tool as well."""
    slopes = [s for s in (_slope_us(p) for p in by_source.values()) if s is not None]
    per_seq = float(np.median(slopes)) if slopes else fallback_us
    rest = [r - per_seq * n / 1e3 for pts in by_source.values() for n, r in pts]
    return HostOverhead(step_ms=max(float(np.median(rest)), 0.0), per_seq_us=per_seq)


def fit_host_overhead(pairs: Sequence[tuple[ServingRow, Mapping[str, Any]]]
                      ) -> dict[str, HostOverhead]:
    """Host overhead per engine from its rows' step residuals, and under "" from all rows; an
    engine none of whose sources spans batch sizes takes the median slope of all sources."""
    points: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for row, result in pairs:
        p = step_residual(row, result)
        if p is not None:
            points.setdefault(row.engine, {}).setdefault(row.source, []).append(p)
            points.setdefault("", {}).setdefault(row.source, []).append(p)
    if not points:
        return {}
    slopes = [s for s in (_slope_us(p) for p in points[""].values()) if s is not None]
    pooled_us = float(np.median(slopes)) if slopes else 0.0
    return {engine: _fit_engine(by_source, pooled_us) for engine, by_source in points.items()}


def hides_host_time(engine: str, version: str = "") -> bool:
    """Whether the engine's ``version`` runs a step's host work while the GPU runs the previous
    step (`host_overlap` in datasets/engines/*.yaml, by release): its residuals are not host
    time, and a fitted host overhead would be hidden under the GPU step anyway."""
    if not engine:
        return False
    _, data = versioned_data(engine_data(engine), engine, version)
    return bool(data["host_overlap"]["value"])


def _host_time_rows(rows: Sequence[ServingRow], by_id: Mapping[str, Mapping[str, Any]]
                    ) -> list[ServingRow]:
    """Rows whose residual measures host time. Where some rows' GPU time is mostly measured (store
    or learned engines answer at least half of it), only those: a roofline-dominated row's
    residual is mostly the roofline's own error (vllm-ci on H200, which the store lacks, would
    hand ~3 ms of it to every vLLM row). In a roofline-only run every row is used, and the fit
    then also absorbs what the roofline misses."""
    rows = [r for r in rows if not hides_host_time(r.engine, r.engine_version)]
    measured = [r for r in rows if by_id[r.id].get("measured_share", 0.0) >= 0.5]
    return measured or list(rows)


def score_serving_loso(rows: Sequence[ServingRow] | None = None, *,
                       predict: Predict | None = None, max_prompts: int | None = None,
                       base: Mapping[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    """`score_serving` with engine presets, then again with a host overhead per engine (per
    step and per request in the step) fitted on every source but the one scored
    (leave-one-source-out). `base`: a finished `score_serving(rows, max_prompts=...)` report to
    reuse (same rows and settings). Returns {"base", "loso", "fitted_host_overhead"} (base
    without its "rows"; fitted: source -> engine -> {step_ms, per_seq_us})."""
    rows = load_corpus() if rows is None else list(rows)
    predict = predict or simulate_json(**options)
    if base is None:
        base = score_serving(rows, predict=predict, max_prompts=max_prompts,
                             use_store=options.get("use_store", False),
                             use_predictors=options.get("use_predictors", False))
    by_id = {r["id"]: r for r in base["rows"]}
    usable = _host_time_rows(rows, by_id)
    results, fitted = [], {}
    expect(len(rows), unit="runs")
    for source in sorted({r.source for r in rows}):
        fit = fit_host_overhead([(r, by_id[r.id]) for r in usable if r.source != source])
        fitted[source] = {e: {"step_ms": h.step_ms, "per_seq_us": h.per_seq_us}
                          for e, h in fit.items()}
        for row in (r for r in rows if r.source == source):
            if hides_host_time(row.engine, row.engine_version):  # nothing to add: the presets' prediction stands
                results.append(by_id[row.id])
                advance(1, unit="runs", label=f"{row.id} (host time overlapped)")
                continue
            host = fit.get(row.engine, fit.get("", HostOverhead(step_ms=0.0, per_seq_us=0.0)))
            results.append(score_row(row, predict, max_prompts=max_prompts,
                                     step_overhead_ms=host.step_ms,
                                     step_overhead_per_seq_us=host.per_seq_us))
            advance(1, unit="runs", label=f"{row.id} (leave {source} out)")
    sources = sorted({r["source"] for r in results})
    loso = {"overall": summarize(results),
            "by_source": {s: summarize([r for r in results if r["source"] == s])
                          for s in sources},
            "by_band": by_band(results), "rows": results}
    return {"base": {k: v for k, v in base.items() if k != "rows"}, "loso": loso,
            "fitted_host_overhead": fitted}


def _compact(report: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k != "rows"}


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m simulate.validate.published_serving [--no-presets] [--loso]
    [--max-prompts N] [--out FILE]``: score the corpus, roofline + store as configured."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--no-presets", action="store_true")
    parser.add_argument("--loso", action="store_true")
    parser.add_argument("--max-prompts", type=int)
    parser.add_argument("--use-store", action="store_true")
    parser.add_argument("--out", type=Path, help="also write every row's result here (JSON)")
    args = parser.parse_args(argv)
    if args.loso:
        report = score_serving_loso(max_prompts=args.max_prompts, use_store=args.use_store)
        shown = {"base": report["base"], "loso": _compact(report["loso"]),
                 "fitted_host_overhead": report["fitted_host_overhead"]}
    else:
        report = score_serving(engine_presets=not args.no_presets, max_prompts=args.max_prompts,
                               use_store=args.use_store)
        shown = _compact(report)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(shown, indent=1))


if __name__ == "__main__":
    main()
