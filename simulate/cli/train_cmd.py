# SPDX-License-Identifier: Apache-2.0
"""``llmsim train``: train, report and promote the XGBoost latency predictors.

``llmsim train --hardware H --op FAMILY`` is short for ``llmsim train run ...``. The tracking
store is ``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else SQLite under ``$LLMSIM_HOME``.
"""

from __future__ import annotations

from pathlib import Path

import click

from analytical.ops import OP_FAMILIES
from predictors.train_config import (
    AUTO_TARGET,
    DEFAULTS,
    MAX_CONFIGS,
    MIN_ROWS,
    target_choices,
    train_config,
)
from predictors.transfer_features import TRANSFER_FAMILIES
from profiler.progress import advance, bar
from simulate.cli.output import PROGRESS, OutputPath, print_json, print_table

_FAMILIES = list(OP_FAMILIES)


def _common(func):
    options = [
        click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Store file (default: $LLMSIM_DB or $LLMSIM_HOME/llmsim.duckdb)."),
        click.option("--tracking-uri", default=None,
                     help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI or SQLite under "
                     "$LLMSIM_HOME)."),
        click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=DEFAULTS.seed,
                     show_default=True),
        click.option("--configs", "n_configs", type=click.IntRange(1, MAX_CONFIGS),
                     default=DEFAULTS.n_configs, show_default=True,
                     help="Hyper-parameter draws in the search (each fits every target, "
                     "log-latency free and monotone in work; gated and anchored join two "
                     "boosters)."),
        click.option("--max-train-rows", type=click.IntRange(min=1),
                     default=DEFAULTS.max_train_rows, show_default=True,
                     help="Training rows per fit (larger sets are subsampled, seeded)."),
        click.option("--no-promote", is_flag=True,
                     help="Register the version but do not try to move the champion alias."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
        PROGRESS,
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _outcome_dict(outcome) -> dict:
    result = outcome.result
    splits = {name: {model: m.as_dict() for model, m in s.metrics.items()}
              for name, s in result.splits.items()}
    promotion = outcome.promotion
    return {
        "hardware": result.data.hardware, "family": result.data.family,
        "provenance": result.data.provenance, "rows": len(result.data),
        "data_fingerprint": str(result.data.fingerprint), "target": result.target.value,
        "target_reason": result.target_reason, "n_trees": result.model.n_trees,
        "run_id": outcome.logged.run_id, "registered_model": outcome.logged.name,
        "version": outcome.logged.version, "splits": splits,
        "promotion": None if promotion is None else {
            "promoted": promotion.promoted, "reason": promotion.reason},
    }


def _print_outcome(outcome) -> None:
    d = _outcome_dict(outcome)
    rows = [{"split": split, "model": model, **metrics}
            for split, models in d["splits"].items() for model, metrics in models.items()]
    print_table(rows, ["split", "model", "n", "mape", "median_ape", "p90_ape", "max_ape"],
                title=f"{d['registered_model']} v{d['version']} ({d['provenance']}, "
                      f"{d['rows']} shapes, target {d['target']})")
    click.echo(f"target: {d['target_reason']}")
    click.echo(f"run {d['run_id']}; data {d['data_fingerprint']}")
    if d["promotion"] is not None:
        verb = "promoted to champion" if d["promotion"]["promoted"] else "not promoted"
        click.echo(f"{verb}: {d['promotion']['reason']}")


def _run(hardware: str, op: str, db, tracking_uri, seed, n_configs, max_train_rows, no_promote,
         as_json, provenance, dtype, target=None, progress: bool = True) -> None:
    from predictors.fit import FIT_UNIT
    from predictors.pipeline import train_and_log

    with bar(f"train {hardware}/{op}", unit=FIT_UNIT, enabled=progress and not as_json):
        outcome = train_and_log(hardware, op, db=db, provenance=provenance, dtype=dtype,
                                config=train_config(seed=seed, n_configs=n_configs,
                                                    max_train_rows=max_train_rows,
                                                    target=target),
                                tracking_uri=tracking_uri, auto_promote=not no_promote)
    if as_json:
        print_json(_outcome_dict(outcome))
    else:
        _print_outcome(outcome)


_HW = click.option("--hardware", help="Catalog hardware name (the store's hardware column).")
_OP = click.option("--op", type=click.Choice(_FAMILIES), help="Operator family.")
_PROV = click.option("--provenance", default=None,
                     help="Provenance group to train on (default: the one covering the most "
                     "categorical configurations, e.g. kind x dtype, then the largest).")
_DTYPE = click.option("--dtype", default=None, help="Only rows of this dtype.")
_TARGET = click.option("--target", default=AUTO_TARGET, show_default=True,
                       type=click.Choice(target_choices()),
                       help="What the trees learn; auto: picked by inner validation.")


@click.group(invoke_without_command=True)
@_HW
@_OP
@_PROV
@_DTYPE
@_TARGET
@_common
@click.pass_context
def group(ctx: click.Context, hardware, op, provenance, dtype, target, db, tracking_uri, seed,
          n_configs, max_train_rows, no_promote, as_json, progress) -> None:
    """Train, report and promote latency predictors (``llmsim train --hardware H --op F``)."""
    if ctx.invoked_subcommand is not None:
        return
    if not hardware or not op:
        raise click.UsageError("give --hardware and --op, or a sub-command (run, all, report, "
                               "promote)")
    _run(hardware, op, db, tracking_uri, seed, n_configs, max_train_rows, no_promote, as_json,
         provenance, dtype, target, progress)


@group.command("run")
@click.option("--hardware", required=True, help="Catalog hardware name.")
@click.option("--op", required=True, type=click.Choice(_FAMILIES), help="Operator family.")
@_PROV
@_DTYPE
@_TARGET
@_common
def run_cmd(hardware, op, provenance, dtype, target, db, tracking_uri, seed, n_configs,
            max_train_rows, no_promote, as_json, progress) -> None:
    """Train one (hardware, family) predictor, log it to MLflow and try to promote it."""
    _run(hardware, op, db, tracking_uri, seed, n_configs, max_train_rows, no_promote, as_json,
         provenance, dtype, target, progress)


@group.command("all")
@click.option("--min-rows", type=click.IntRange(min=1), default=MIN_ROWS,
              show_default=True, help="Distinct shapes a group needs to be trained.")
@_common
def all_cmd(min_rows, db, tracking_uri, seed, n_configs, max_train_rows, no_promote,
            as_json, progress) -> None:
    """Train every (hardware, family) in the store with at least --min-rows shapes."""
    from predictors.fit import FIT_UNIT
    from predictors.pipeline import train_and_log, trainable_groups

    results = []
    groups = trainable_groups(db, min_rows=min_rows)
    with bar("train all", unit="models", total=len(groups), enabled=progress and not as_json):
        for hardware, family, rows in groups:
            if not as_json:
                click.echo(f"training {hardware}/{family} ({rows} shapes)")
            with bar(f"{hardware}/{family}", unit=FIT_UNIT, enabled=progress and not as_json):
                outcome = train_and_log(hardware, family, db=db,
                                        config=train_config(seed=seed, n_configs=n_configs,
                                                            max_train_rows=max_train_rows),
                                        tracking_uri=tracking_uri, auto_promote=not no_promote)
            advance(1, unit="models", label=f"{hardware}/{family}")
            results.append(_outcome_dict(outcome))
            if not as_json:
                _print_outcome(outcome)
    if as_json:
        print_json(results)


@group.command("report")
@click.option("--tracking-uri", default=None, help="MLflow tracking URI.")
@click.option("--all-splits", is_flag=True, help="Also the random split.")
@click.option("--per-provenance", is_flag=True,
              help="The newest version per (model, provenance) instead of the champions; the "
              "champion's version is marked with *.")
@click.option("--markdown", is_flag=True, help="Print a Markdown table.")
@click.option("--write-readme", type=OutputPath((".md",)), default=None,
              help="Replace the accuracy-table section of this README.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def report_cmd(tracking_uri, all_splits, per_provenance, markdown, write_readme, as_json) -> None:
    """Every champion's held-out error (XGBoost and the baselines), with n."""
    from predictors.report import (
        COLUMNS,
        champion_rows,
        markdown_table,
        without_champion,
        write_readme_section,
    )
    from predictors.splits import HELDOUT_LARGE, HELDOUT_SEQ, HELDOUT_SHAPE, RANDOM

    splits = (HELDOUT_SHAPE, HELDOUT_SEQ, HELDOUT_LARGE)
    if all_splits:
        splits += (RANDOM,)
    rows = champion_rows(tracking_uri, splits=splits, per_provenance=per_provenance)
    if write_readme is not None:
        write_readme_section(write_readme, markdown_table(rows))
    if as_json:
        print_json(rows)
    elif markdown:
        click.echo(markdown_table(rows))
    elif not rows:
        click.echo("no champions yet: run `llmsim train run --hardware H --op FAMILY`")
    else:
        print_table(rows, list(COLUMNS), title="Champion predictors: error in percent")
    if not as_json and not markdown:
        for row in without_champion(tracking_uri):
            click.echo(f"{row['registered_model']}: no champion (newest v{row['version']}: "
                       f"{row['reason']})")


@group.command("promote")
@click.option("--hardware", required=True, help="Catalog hardware name.")
@click.option("--op", required=True, type=click.Choice(_FAMILIES), help="Operator family.")
@click.option("--version", default=None, help="Candidate version (default: the latest).")
@click.option("--tracking-uri", default=None, help="MLflow tracking URI.")
@click.option("--force", is_flag=True,
              help="Promote even if it does not beat the baselines or the champion.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def promote_cmd(hardware, op, version, tracking_uri, force, as_json) -> None:
    """Move the champion alias to --version only if it beats the baselines on its held-out
    split and the champion on held-out rows (or --force)."""
    from predictors.promote import promote

    p = promote(hardware, op, version=version, tracking_uri=tracking_uri, force=force)
    d = {"registered_model": p.name, "candidate_version": p.candidate_version,
         "champion_version_before": p.champion_version, "promoted": p.promoted,
         "reason": p.reason, "candidate": p.candidate.as_dict() if p.candidate else None,
         "champion": p.champion.as_dict() if p.champion else None}
    if as_json:
        print_json(d)
        return
    if p.candidate is not None:
        rows = [{"model": f"candidate v{p.candidate_version}", **p.candidate.as_dict()}]
        if p.champion is not None:
            rows.append({"model": f"champion v{p.champion_version}", **p.champion.as_dict()})
        print_table(rows, ["model", "n", "mape", "median_ape", "p90_ape", "max_ape"],
                    title=f"{p.name}: held-out comparison")
    verb = "promoted" if p.promoted else "not promoted"
    click.echo(f"{p.name} v{p.candidate_version} {verb}: {p.reason}")


_TRANSFER_FAMILIES = list(TRANSFER_FAMILIES)


@group.command("transfer")
@click.option("--op", "ops", required=True, multiple=True, type=click.Choice(_TRANSFER_FAMILIES),
              help="Operator family (repeat for several).")
@click.option("--leave-out", default=None,
              help="Train without this GPU and score it (one leave-one-GPU-out fold).")
@click.option("--loo", is_flag=True,
              help="Also run leave-one-GPU-out over every GPU with rows and print the table.")
@click.option("--rows-per-gpu", type=int, default=None,
              help="Rows per GPU (stratified, seeded sample; default per family: gemm and "
              "attention 6000, collective 3000, memory 4000).")
@click.option("--write-readme", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="With --loo: replace the transfer-table section of this README.")
@click.option("--no-log", is_flag=True, help="Do not log or register anything in MLflow.")
@click.option("--residuals", is_flag=True,
              help="Also print each held-out GPU's error by stack, dtype, kernel class and "
              "latency band.")
@click.option("--db", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Store file (default: $LLMSIM_DB or $LLMSIM_HOME/llmsim.duckdb).")
@click.option("--tracking-uri", default=None, help="MLflow tracking URI.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def transfer_cmd(ops, leave_out, loo, rows_per_gpu, write_readme, no_log, residuals, db,
                 tracking_uri, seed, as_json) -> None:
    """Train the cross-GPU predictor of each family on every GPU in the store (it answers
    for GPUs with a hardware YAML and no rows), log it to MLflow, and with --loo score it
    leave-one-GPU-out beside the roofline."""
    import sys

    from predictors.transfer_pipeline import run_transfer
    from predictors.transfer_report import COLUMNS, fold_rows, markdown_table

    if write_readme is not None and not loo:
        raise click.UsageError("--write-readme needs --loo (the table is the leave-one-out one)")
    if rows_per_gpu is not None and rows_per_gpu < 10:
        raise click.BadParameter("must be at least 10", param_hint="--rows-per-gpu")
    outcomes = [run_transfer(op, db=db, tracking_uri=tracking_uri, seed=seed, cap=rows_per_gpu,
                             leave_out=leave_out, loo=loo, log=not no_log,
                             progress=None if as_json else click.echo) for op in ops]
    rows = [r for o in outcomes for r in fold_rows(o.folds, tracking_uri=tracking_uri)]
    if write_readme is not None:
        from predictors.transfer_report import write_readme_section

        command = "llmsim train " + " ".join(sys.argv[sys.argv.index("transfer"):]) \
            if "transfer" in sys.argv else "llmsim train transfer --loo --write-readme"
        write_readme_section(write_readme, markdown_table(rows), command)
    groups = [{"family": f.family, "heldout": f.heldout, **g}
              for o in outcomes for f in o.folds for g in f.residuals] if residuals else []
    if as_json:
        print_json({"models": [o.as_dict() for o in outcomes], "leave_one_out": rows,
                    **({"residuals": groups} if residuals else {})})
        return
    for outcome in outcomes:
        click.echo(outcome.summary())
    if rows:
        print_table(rows, list(COLUMNS), title="Leave-one-GPU-out: error in percent")
    if groups:
        print_table(groups, list(groups[0]), title="Held-out error by group: MAPE and signed "
                    "median in percent (+ = predicted too slow)")
