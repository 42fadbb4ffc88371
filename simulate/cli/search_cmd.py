# SPDX-License-Identifier: Apache-2.0
"""``llmsim search SCENARIO``: design-space search (training layouts or serving configs)."""

from __future__ import annotations

import csv
import json
import shlex
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click
import yaml

from analytical.errors import InfeasibleError
from analytical.inputs import output_errors
from simulate.cli.output import (
    PLOT_SUFFIXES,
    FiniteFloat,
    InputPath,
    OutputPath,
    print_json,
    print_table,
)
from simulate.scenario import apply_overrides, read_document
from simulate.search.answers import collapse_ties, scenario_doc, set_flags
from simulate.search.columns import layout_row
from simulate.search.executors import DEFAULT_EXECUTOR, EXECUTORS
from simulate.search.serving_search import search_serving
from simulate.search.training_search import OBJECTIVES, search_training


def _write_out(path: Path, rows: list[dict]) -> None:
    """Every timed layout: JSON (full rows) or CSV (flat columns), by suffix."""
    if path.suffix == ".json":
        with output_errors(path, "--out"):
            path.write_text(json.dumps(rows, indent=1, default=str))
        return
    flat = [{**layout_row(r), **{f"engine_{k}": v for k, v in r["engine_coverage"].items()}}
            for r in rows]
    with output_errors(path, "--out"), path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in flat for k in r)))
        writer.writeheader()
        writer.writerows(flat)


def _plot(points: list[tuple[float, float]], frontier: list[tuple[float, float]], xlabel: str,
          ylabel: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter(*zip(*points, strict=True), s=6, alpha=0.4, label="configurations")
    if frontier:
        ax.plot(*zip(*sorted(frontier), strict=True), "r-o", label="Pareto frontier")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    with output_errors(path, "--plot"):
        fig.savefig(path)
    plt.close(fig)


def _write_csv(path: Path, rows: list[dict], keys: list[str]) -> None:
    with output_errors(path, "--csv"), path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


@click.command(name="search")
@click.argument("scenario", type=InputPath())
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1),
              help="How many best layouts to print.")
@click.option("--objective", type=click.Choice(sorted(OBJECTIVES)), default="tokens_per_s",
              show_default=True, help="Training: rank by tokens/s, MFU or cost per token.")
@click.option("--usd-per-gpu-hour", type=FiniteFloat(min=0, min_open=True, max=1e6),
              help="Price for cost per token ($/GPU-h).")
@click.option("--executor", type=click.Choice(sorted(EXECUTORS)), default=DEFAULT_EXECUTOR,
              show_default=True, help="Where the candidates are simulated.")
@click.option("--workers", type=click.IntRange(1, 1024), help="Worker processes (default: all cores).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--csv", "csv_file", type=OutputPath((".csv",)),
              help="Write every timed configuration as CSV.")
@click.option("--plot", "plot_file", type=OutputPath(PLOT_SUFFIXES),
              help="Write the frontier plot (PNG/SVG/PDF by suffix).")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help="Override a scenario field (repeatable).")
@click.option("--out", "out_file", type=OutputPath((".csv", ".json")),
              help="Write every timed layout (.csv flat, .json full rows).")
@click.option("--auto", is_flag=True, help="Training: search every layout axis around the "
              "scenario's own layout and report the gain over it.")
@click.option("--prune-top", type=click.IntRange(1, 100_000), metavar="K", help="Training: time only layouts that can "
              "still enter the top K (same top K as the exhaustive search; fewer rows).")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Measurement store (default: $LLMSIM_DB or ~/.llmsim/llmsim.duckdb).")
@click.option("--tracking-uri", help="MLflow tracking URI for the predictors.")
@click.option("--no-store", is_flag=True, help="Do not use measured latencies.")
@click.option("--no-predictors", is_flag=True, help="Do not use learned predictors.")
@click.option("--progress/--no-progress", default=True, show_default=True,
              help="Training: a progress bar with ETA on stderr while layouts are timed.")
def command(scenario: Path, top: int, objective: str, usd_per_gpu_hour: float | None,
            executor: str, workers: int | None, as_json: bool, csv_file: Path | None,
            plot_file: Path | None, overrides: tuple[str, ...], out_file: Path | None,
            auto: bool, prune_top: int | None, db_path: Path | None,
            tracking_uri: str | None, no_store: bool, no_predictors: bool,
            progress: bool) -> None:
    """Search SCENARIO's design space: a training block with lists/ranges/auto (layouts ranked
    by tokens/s, MFU or cost, frontier of tokens/s vs GPU count), or an inference scenario with a
    ``search`` block (frontier of tokens/s per GPU vs TPOT under its SLO, gain over the default).
    """
    from simulate.engines import EngineOptions

    doc = apply_overrides(read_document(scenario), overrides)  # input errors before the store
    engines = EngineOptions(store_path=str(db_path) if db_path else None, use_store=not no_store,
                            use_predictors=not no_predictors, tracking_uri=tracking_uri).checked()
    if "training" not in doc:
        _serving(scenario, overrides, executor, workers, engines, as_json, csv_file, plot_file,
                 top)
        return
    with _progress_bar(progress and prune_top is None and not as_json) as report:
        res = search_training(scenario, overrides=overrides, objective=objective,
                              usd_per_gpu_hour=usd_per_gpu_hour, executor=executor,
                              workers=workers, engines=engines, prune_top=prune_top, auto=auto,
                              progress=report)
    if res.valid == 0:
        raise InfeasibleError(f"none of the {res.candidates} candidate layouts passes the layout "
                              "checks (degrees vs GPUs, heads, layers, batch); run `llmsim "
                              "simulate` on one of them to see why")
    if csv_file is not None and res.rows:
        _write_out(csv_file, res.rows)
    if out_file is not None:
        _write_out(out_file, res.rows)
    if plot_file is not None and res.rows:
        front = res.frontiers.get("num_gpus")
        if front:
            _plot([(r["num_gpus"], r["tokens_per_s"]) for r in res.rows],
                  [(r["num_gpus"], r["tokens_per_s"]) for r in front], "GPUs", "tokens/s",
                  plot_file)
        else:
            front = res.frontiers["memory_headroom"]
            _plot([(r["memory_headroom_gib"], r["tokens_per_s"]) for r in res.rows],
                  [(r["memory_headroom_gib"], r["tokens_per_s"]) for r in front],
                  "memory headroom per GPU (GiB)", "tokens/s", plot_file)
    _print_training(res, top, objective, as_json, scenario, overrides)


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """The shared bar (`profiler.progress`) over timed layouts; None when disabled."""
    if not enabled:
        yield None
        return
    from profiler.progress import advance, bar, expect

    seen = {"done": 0, "total": 0}

    def report(done: int, total: int) -> None:
        expect(total - seen["total"], unit="layouts")
        advance(done - seen["done"], unit="layouts")
        seen.update(done=done, total=total)

    with bar("timing", unit="layouts"):
        yield report


def _print_training(res, top: int, objective: str, as_json: bool, scenario: Path,
                    overrides: tuple[str, ...]) -> None:
    key = OBJECTIVES[objective][0]
    summary = {"name": res.name, "objective": res.objective, "candidates": res.candidates,
               "valid": res.valid, "fit_in_memory": res.fit, "timed": res.timed,
               "pruned": res.pruned, "elapsed_s": res.elapsed_s,
               "timed_per_s": res.timed / res.elapsed_s if res.elapsed_s else None,
               "executor": res.executor, "workers": res.workers}
    answers = collapse_ties(res.rows, key, top)
    best = answers[0] if answers else None
    scenario_out = scenario_doc(res.doc, best) if best else None
    flags = set_flags(best) if best else []
    if as_json:
        print_json({**summary, "top": answers, "frontier": res.frontier,
                    "frontiers": res.frontiers, "baseline": res.baseline, "gain": res.gain,
                    "best_scenario": scenario_out, "best_set_flags": flags})
        return
    print_table([{"field": k, "value": v} for k, v in summary.items()], ["field", "value"],
                title=res.name)
    if not answers:
        click.secho(f"no layout fits: {res.valid} valid layouts, {res.fit} fit in memory",
                    fg="red", err=True)
        return
    rows = [layout_row(r) for r in answers]
    every = [layout_row(x) for x in res.rows]
    varied = [c for c in ("gpu", "gpus", "seq_len", "global_batch", "cp", "ep", "vpp", "sp",
                          "zero", "mb", "recompute", "schedule", "tp_overlap", "dp_overlap",
                          "offload")
              if len({str(r[c]) for r in every}) > 1]
    outer = [c for c in varied if c in ("gpu", "gpus", "seq_len", "global_batch")]
    layout = ["tp", "pp", "dp", *[c for c in varied if c not in outer]]
    cols = ["rank", *outer, *layout, "tokens/s", "MFU", "GiB", "compute_s",
            "exposed_communication_s", "pipeline_bubble_s"]
    cols += [c for c in rows[0] if c == "$/Mtok"]
    cols += ["ties"] if any("ties" in r for r in rows) else []
    print_table([{**r, "recompute": str(r["recompute"])[:4], "schedule": r["schedule"][:5],
                  "ties": r.get("ties", "")} for r in rows], cols,
                title=f"top {len(rows)} by {objective} (equal-{key} layouts on one line: the "
                      "least memory shown, the others under ties)")
    titles = {"memory_headroom": "tokens/s vs memory headroom per GPU",
              "num_gpus": "tokens/s vs GPU count", "cost": "tokens/s vs $ per 1e6 tokens"}
    for name, front in res.frontiers.items():
        print_table([layout_row(r) for r in front],
                    [*outer, *layout, "tokens/s", "MFU", "GiB", "headroom_GiB"]
                    + (["$/Mtok"] if name == "cost" else []),
                    title=f"Pareto frontier: {titles[name]}")
    if res.baseline is not None:
        if res.baseline["fits"]:
            click.echo(f"baseline (the scenario's own layout): "
                       f"{res.baseline['tokens_per_s']:.0f} tokens/s, MFU "
                       f"{res.baseline['mfu']:.3f}; best is {res.gain:.2f}x on {objective}")
        else:
            click.echo("baseline (the scenario's own layout) does not fit in memory")
    click.echo("best layout as a scenario (llmsim simulate FILE):")
    click.echo(yaml.safe_dump(scenario_out, sort_keys=False).rstrip())
    paths = {f.split("=", 1)[0] for f in flags}
    kept = [o for o in overrides if o.split("=", 1)[0].strip() not in paths]
    sets = " ".join(f"--set {shlex.quote(f)}" for f in [*kept, *flags])
    click.echo(f"or: llmsim simulate {shlex.quote(str(scenario))} {sets}")


def _serving(scenario, overrides, executor, workers, engines, as_json, csv_file, plot_file,
             top) -> None:
    res = search_serving(scenario, overrides=overrides, executor=executor, workers=workers,
                         engines=engines)
    if csv_file is not None and res.rows:
        flat = [{**{k: json.dumps(v) if isinstance(v, dict) else v
                    for k, v in r["config"].items()},
                 **{k: v for k, v in r.items() if k not in ("config", "engine_coverage")}}
                for r in res.rows]
        keys = list(dict.fromkeys(k for r in flat for k in r))
        _write_csv(csv_file, flat, keys)
    ok = [r for r in res.rows if r["fits"]]
    if plot_file is not None and ok:
        _plot([(r["tpot_p90_s"], r["tokens_per_s_per_gpu"]) for r in ok],
              [(r["tpot_p90_s"], r["tokens_per_s_per_gpu"]) for r in res.frontier],
              "TPOT p90 (s)", "output tokens/s per GPU", plot_file)
    if as_json:
        print_json({"name": res.name, "slo": res.slo, "candidates": res.candidates,
                    "elapsed_s": res.elapsed_s, "default": res.default, "best": res.best,
                    "improvement": res.improvement, "frontier": res.frontier,
                    "top": res.rows[:top]})
        return

    def fmt(r: dict) -> dict:
        return {"config": json.dumps(r["config"], separators=(",", ":")),
                "tok/s/GPU": round(r["tokens_per_s_per_gpu"], 1),
                "TPOT p90 ms": round(1e3 * r["tpot_p90_s"], 1),
                "TTFT p90 s": round(r["ttft_p90_s"], 3), "SLO": r["meets_slo"]}

    cols = ["config", "tok/s/GPU", "TPOT p90 ms", "TTFT p90 s", "SLO"]
    print_table([fmt(r) for r in res.frontier], cols,
                title=f"{res.name}: frontier under SLO {res.slo} ({res.candidates} configs, "
                      f"{res.elapsed_s:.1f} s)")
    if res.default:
        print_table([fmt(res.default)], cols, title="default (the scenario as written)")
    if res.improvement is not None:
        click.echo(f"best point: {res.improvement:.2f}x the default's tokens/s per GPU")
