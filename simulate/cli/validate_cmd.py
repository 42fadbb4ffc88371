# SPDX-License-Identifier: Apache-2.0
"""``llmsim validate``: predicted vs measured on this CPU (real models, and a DDP step)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from profiler.progress import advance, bar
from simulate.cli.output import PROGRESS, print_json, print_mapping, print_table

_DB = click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                   help="Store (default: $LLMSIM_HOME/validate/cpu-t<threads>.duckdb).")
_JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


@click.group()
def group() -> None:
    """Validate the predictions against real runs: on this CPU, or published GPU runs."""


# short headers so the summary is two tables of 100 columns (numbers right-aligned, in %)
_SHORT = {"n_tps": "n tps", "n_derived": "derived", "tps_mape_pct": "tps MAPE %",
          "tps_median_pct": "tps median err %", "n_mfu": "n MFU", "mfu_mape_pct": "MFU MAPE %",
          "false_oom": "false OOM", "errors": "not run", "n_mem": "n mem",
          "mem_mape_pct": "mem MAPE %", "mem_median_pct": "mem median err %"}


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' deprecation notices (FutureWarning, its logger) say nothing about the
    validation and bury the table: silenced while the real models run."""
    import warnings  # noqa: PLC0415

    try:
        from transformers.utils import logging as hf_logging  # noqa: PLC0415
    except ImportError:  # validate cpu then fails with its own message
        hf_logging = None
    previous = hf_logging.get_verbosity() if hf_logging else 0
    if hf_logging:
        hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            yield
    finally:
        if hf_logging:
            hf_logging.set_verbosity(previous)


def _status(label: str) -> None:
    click.echo(f"[validate] {label}", err=True)
    advance(1, unit="stages", label=label)


@group.command("cpu")
@click.option("--models", default=None,
              help="Comma-separated validation models (default: all; see simulate.validate).")
@click.option("--modes", default="forward,train_step,generate", show_default=True,
              help="Comma-separated: forward, train_step (forward + backward), generate.")
@_DB
@click.option("--tracking-uri", default=None, help="MLflow tracking URI for the predictors.")
@click.option("--repeats", type=click.IntRange(1, 10_000), default=10, show_default=True,
              help="Timed calls of each real model (median).")
@click.option("--warmup", type=click.IntRange(0, 10_000), default=3, show_default=True)
@click.option("--threads", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="torch intra-op threads for profiling and timing alike (1 resists other "
                   "load on the machine best).")
@click.option("--cache", type=click.Choice(["measured", "fit", "cold", "warm"]),
              default="measured", show_default=True,
              help="Operator prices cold-flushed, warm in the last-level cache, 'fit': warm "
                   "where the model's working set fits this CPU's LLC, or 'measured': both, "
                   "weighted by the warmth probe models measure here (simulate.validate.cache).")
@click.option("--skip-profile", is_flag=True, help="Use what the store holds; profile nothing.")
@click.option("--skip-train", is_flag=True, help="Reuse the registered champion predictors.")
@click.option("--fast", is_flag=True,
              help="Tiny profiling budget and a small predictor search (smoke tests).")
@_JSON
@PROGRESS
def cpu_cmd(models: str | None, modes: str, db: Path | None, tracking_uri: str | None,
            repeats: int, warmup: int, threads: int, cache: str, skip_profile: bool,
            skip_train: bool,
            fast: bool, as_json: bool, progress: bool) -> None:
    """Trace, profile, train, predict and time >= 5 real architectures on this CPU."""
    from profiler.timers import Budget
    from simulate.validate.cache import CacheRule
    from simulate.validate.loop import FAST_BUDGET, LoopConfig, run_validation
    from simulate.validate.models import VALIDATION_MODELS
    from simulate.validate.report import UNKNOWN_COLUMNS, report_dict, table_rows, unknown_dict

    if skip_profile:  # the store must already hold the shapes: check it before tracing
        from profiler.store import open_for_reading
        from simulate.validate.loop import validation_db_path

        open_for_reading(db or validation_db_path(threads), missing_hint=(
            "run without --skip-profile to measure the shapes into it")).close()
    names = tuple(m.strip() for m in models.split(",") if m.strip()) if models else tuple(
        VALIDATION_MODELS)
    config = LoopConfig(models=names, modes=tuple(m.strip() for m in modes.split(",")
                                                  if m.strip()),
                        store_path=db, tracking_uri=tracking_uri, threads=threads,
                        warmup=warmup, repeats=repeats,
                        budget=FAST_BUDGET if fast else Budget(), profile=not skip_profile,
                        train=not skip_train, fast_train=fast, progress=progress and not as_json,
                        cache=CacheRule(cache))
    # stages: trace, profile, train, host, predict, measure (each counted as it starts)
    with bar("validate cpu", unit="stages", total=4 + (not skip_profile) + (not skip_train)
             + (cache == "measured"),
             enabled=progress and not as_json), _quiet_transformers():
        report = run_validation(config, on_stage=_status)
    if as_json:
        print_json(report_dict(report))
        return
    print_table(table_rows(report),
                title=f"validate cpu ({report.threads} thread(s); errors are signed %, "
                      "engine columns are % of the operators' time, host ms comes on top)")
    if report.unknown:
        print_table([unknown_dict(r) for r in report.unknown], UNKNOWN_COLUMNS,
                    title="unknown aten ops (priced by the roofline)")
    else:
        click.echo("unknown aten ops: none (every traced call mapped)")
    summary = report.summary()
    flat = {k: v for k, v in summary.items() if not isinstance(v, dict)}
    for key in ("worst_fwd_bwd", "worst_overall"):
        worst = summary.get(key)
        flat[key] = (f"{worst['model']} {worst['mode']} {worst['error_pct']:+.1f}%"
                     if worst else None)
    flat.update({f"elapsed_{k}_s": v for k, v in report.elapsed_s.items()})
    flat.update({k: v for k, v in report.stages.items() if not isinstance(v, dict)})
    for name, stage in report.stages.items():
        if name == "host" and isinstance(stage, dict):
            flat[name] = (f"{stage['per_call_us']:.2f} us per Python-issued call (probes: "
                          + ", ".join(f"{probe} {row['per_call_us']:.2f}"
                                      for probe, row in stage["probes"].items()) + ")")
        elif isinstance(stage, dict):
            flat[name] = ", ".join(f"{k}: {v.get('status', v) if isinstance(v, dict) else v}"
                                   for k, v in stage.items())
    print_mapping(flat, title="summary")


@group.command("ddp")
@_DB
@click.option("--width", type=click.IntRange(1, 65_536), default=512, show_default=True)
@click.option("--depth", type=click.IntRange(1, 1_000), default=4, show_default=True)
@click.option("--batch", type=click.IntRange(1, 1_000_000), default=64, show_default=True, help="Rows per rank.")
@click.option("--repeats", type=click.IntRange(1, 10_000), default=10, show_default=True)
@click.option("--warmup", type=click.IntRange(0, 10_000), default=3, show_default=True)
@_JSON
def ddp_cmd(db: Path | None, width: int, depth: int, batch: int, repeats: int, warmup: int,
            as_json: bool) -> None:
    """Two gloo processes train an MLP with DDP: predicted vs measured step time."""
    from simulate.validate.ddp import DdpConfig, run_ddp_check

    check = run_ddp_check(DdpConfig(width=width, depth=depth, batch=batch, repeats=repeats,
                                    warmup=warmup, store_path=db))
    result = check.to_dict()
    if as_json:
        print_json(result)
        return
    shown = {k: v for k, v in result.items() if not isinstance(v, dict)}
    shown.update({f"engine_{k}_pct": v * 100 for k, v in check.engine_share.items()})
    shown.update({f"profile_{k}": v for k, v in check.profile.items()})
    print_mapping(shown, title="validate ddp (dp=2, gloo, CPU)")


@group.command("published")
@click.option("--kind", type=click.Choice(["training", "serving"]), default="training",
              show_default=True, help="Which published corpus to score.")
@click.option("--max-prompts", type=click.IntRange(1, 200_000), default=1000, show_default=True,
              help="Serving: cap the request count of throughput-only bursts (closed "
                   "loops and bursts timed per request run whole).")
@click.option("--corpus", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Corpus CSV (default: datasets/validation/<kind>/published_runs.csv).")
@click.option("--sources", default=None, help="Comma-separated source ids to score (default: all).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Measurement store (default: $LLMSIM_DB or ~/.llmsim/llmsim.duckdb).")
@click.option("--tracking-uri", default=None, help="MLflow tracking URI for the predictors.")
@click.option("--no-store", is_flag=True, help="Do not use measured latencies.")
@click.option("--no-predictors", is_flag=True, help="Do not use learned predictors.")
@click.option("--rows", "rows_file", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write every row's measured and predicted values as CSV "
                                 "(serving: with the signed error, leave-one-source-out).")
@click.option("--write-readme", "readme", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Write the summary table between the validate-published "
                                 "markers of this Markdown file.")
@_JSON
@PROGRESS
def published_cmd(kind: str, max_prompts: int, corpus: Path | None, sources: str | None,
                  db_path: Path | None, tracking_uri: str | None, no_store: bool,
                  no_predictors: bool, rows_file: Path | None, readme: Path | None,
                  as_json: bool, progress: bool) -> None:
    """Predict published runs (the code path of simulate --json) and score them per source:
    training runs (tokens/s/GPU, MFU, memory, false OOM) or serving measurements (TTFT, TPOT,
    ITL, throughput, signed error by concurrency band, leave-one-source-out)."""
    import csv
    import dataclasses

    from analytical.errors import UnknownNameError
    from simulate.validate import published as pub

    if kind == "serving":
        if readme is not None or corpus is not None:  # named, so refused rather than ignored
            raise click.UsageError(f"{'--write-readme' if readme else '--corpus'} is for "
                                   "--kind training; the serving corpus is "
                                   "datasets/validation/serving/")
        with bar("validate published serving", unit="runs", enabled=progress and not as_json):
            _published_serving(max_prompts, sources, db_path, tracking_uri, no_store,
                               no_predictors, as_json, rows_file)
        return
    if kind not in pub.SCORERS:
        raise UnknownNameError("--kind", kind, sorted(pub.SCORERS))
    rows = pub.load_corpus(corpus or pub.CORPORA[kind])
    if sources:
        wanted = {s.strip() for s in sources.split(",") if s.strip()}
        rows = [r for r in rows if r.get("source") in wanted]
    runner = pub.simulate_runner(store_path=db_path, use_store=not no_store,
                                 use_predictors=not no_predictors, tracking_uri=tracking_uri)
    with bar(f"validate published {kind}", unit="runs", enabled=progress and not as_json):
        outcomes = pub.SCORERS[kind](rows, runner)
    summary = pub.summarize(outcomes)
    note = pub.calibration_note()
    if rows_file is not None:
        with rows_file.open("w", newline="") as handle:
            fields = [f.name for f in dataclasses.fields(pub.RowOutcome)] + ["tps_error"]
            writer = csv.DictWriter(handle, fields)
            writer.writeheader()
            for o in outcomes:
                writer.writerow({**dataclasses.asdict(o), "tps_error": o.tps_error})
    if readme is not None:
        flags = " ".join(f for f, on in (("--no-store", no_store),
                                          ("--no-predictors", no_predictors)) if on)
        command = f"llmsim validate published --kind {kind} {flags}".strip()
        pub.write_readme(readme, pub.markdown_table(summary, command, note))
    if as_json:
        print_json({"kind": kind, "calibration": note, "summary": summary,
                    "rows": [{**dataclasses.asdict(o), "tps_error": o.tps_error}
                             for o in outcomes]})
        return
    print_table([{_SHORT.get(c, c): r.get(c) for c in pub.SUMMARY_COLUMNS} for r in summary],
                title=f"validate published ({kind}): errors in % of measured, "
                      "tps = tokens/s/GPU")
    click.echo(f"calibration: {note}")
    failed = [o for o in outcomes if o.fits is None]
    for o in failed[:10]:
        click.echo(f"not simulated: {o.name}: {o.error}")


def _write_serving_rows(path: Path, results: list[dict[str, Any]], measures: Sequence[str]
                        ) -> None:
    """One CSV line per scored row (leave-one-source-out): its id, source, engine, mode and
    concurrency, then each measure's measured and predicted value and signed error."""
    import csv

    fields = ["id", "source", "engine", "mode", "concurrency"] + [
        f"{m}_{part}" for m in measures for part in ("measured", "predicted", "error")]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fields)
        writer.writeheader()
        for r in results:
            line: dict[str, Any] = {k: r.get(k) for k in fields[:5]}
            for m in measures:
                line[f"{m}_measured"] = r.get("measured", {}).get(m)
                line[f"{m}_predicted"] = (r.get("predicted") or {}).get(m)
                line[f"{m}_error"] = (r.get("error") or {}).get(m)
            writer.writerow(line)


def _published_serving(max_prompts: int, sources: str | None, db_path: Path | None,
                       tracking_uri: str | None, no_store: bool, no_predictors: bool,
                       as_json: bool, rows_file: Path | None = None) -> None:
    """Score the serving corpus with engine presets, then leave-one-source-out (the one
    calibrated value, a host step overhead per engine, fitted without the source scored)."""
    from simulate.engines import EngineOptions
    from simulate.validate.published_serving import score_serving_loso
    from simulate.validate.serving_corpus import MEASURES, load_corpus

    rows = load_corpus()
    if sources:
        wanted = {s.strip() for s in sources.split(",") if s.strip()}
        rows = [r for r in rows if r.source in wanted]
    store = EngineOptions(store_path=str(db_path) if db_path else None,
                          use_store=not no_store).checked()
    report = score_serving_loso(rows, max_prompts=max_prompts, use_store=store.use_store,
                                store_path=store.store_path,
                                use_predictors=not no_predictors, tracking_uri=tracking_uri)
    if rows_file is not None:
        _write_serving_rows(rows_file, report["loso"]["rows"], MEASURES)
    if as_json:
        print_json(report)
        return
    for title, part in (("engine presets", report["base"]),
                        ("leave-one-source-out", report["loso"])):
        table = []
        for name, summary in [*part["by_source"].items(), ("overall", part["overall"])]:
            row: dict[str, object] = {"source": name, "rows": summary["rows"],
                                      "false_oom": summary["false_oom"]}
            for m in MEASURES:
                if m in summary:
                    row[f"{m} MAPE % (n)"] = (f"{summary[m]['mape_pct']:.1f} "
                                              f"({summary[m]['n']})")
            table.append(row)
        columns = list(dict.fromkeys(k for r in table for k in r))  # every measure any row has
        print_table(table, columns, title=f"validate published (serving), {title}")
    bands = [{"band": band, **{f"{m} signed %": f"{v['mean_signed_pct']:+.1f} ({v['n']})"
                               for m, v in measures.items() if m != "ttft_parts_pct"},
              **{f"TTFT {k} %": f"{v:.0f}"
                 for k, v in measures.get("ttft_parts_pct", {}).items()}}
             for band, measures in report["loso"]["by_band"].items() if measures]
    if bands:
        print_table(bands, list(dict.fromkeys(k for r in bands for k in r)), title="signed error by concurrency band (leave-one-source-out)")
