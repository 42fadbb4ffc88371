# SPDX-License-Identifier: Apache-2.0
"""The ``llmsim`` entry point: one lazily imported click group per use.

Groups live in their own modules and are listed in `COMMANDS` (name -> "module:attribute"), so
``llmsim --help`` starts without importing torch or xgboost. Domain errors (`LlmsimError`) exit 2
with one line naming the field; anything else exits 1; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from analytical.errors import LlmsimError
from simulate.cli.output import plain_help
from simulate.version import llmsim_version

COMMANDS: dict[str, tuple[str, str]] = {
    "hardware": ("simulate.cli.hardware_cmd:group", "Hardware catalog: list, show, calibrate."),
    "models": ("simulate.cli.models_cmd:group", "Model catalog: list, show."),
    "profile": ("simulate.cli.profile_cmd:group", "Run microbenchmark sweeps (local, torchrun, Slurm)."),
    "db": ("simulate.cli.db_cmd:group", "The measurement store: info, query, merge, export, import."),
    "train": ("simulate.cli.train_cmd:group", "Train, report and promote latency predictors."),
    "simulate": ("simulate.cli.simulate_cmd:command", "Predict one scenario end to end."),
    "simulate-torch": ("simulate.cli.torch_cmd:command",
                       "Trace a PyTorch / Hugging Face model and predict its step."),
    "validate": ("simulate.cli.validate_cmd:group",
                 "Profile, train, predict and measure real models on this CPU."),
    "search": ("simulate.cli.search_cmd:command", "Search parallel layouts and serving configs."),
    "suite": ("simulate.cli.suite_cmd:command", "Run the survey's scenario suite."),
    "compare": ("simulate.cli.compare_cmd:command", "Predict two scenarios side by side."),
}

# Optional dependencies (import name -> what to install). XGBoost is not a base dependency on
# purpose: its CPU wheel (`xgboost-cpu`) and full wheel (`xgboost`, with NCCL) install the same
# package and must not both be present, so the user picks one through an extra.
OPTIONAL: dict[str, str] = {
    "xgboost": "pip install 'llmsim[cpu]' (or 'llmsim[gpu]' for the CUDA build)",
    "ray": "pip install 'llmsim[search]' (or use --executor process)",
    "transformers": "pip install 'llmsim[hf]'",
    "triton": "pip install 'llmsim[gpu]'",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        target, help_text = COMMANDS[name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return click.Command(name, help=f"{help_text} (not available in this build)",
                                 callback=lambda: _unavailable(name))
        command = getattr(module, attr)
        command.help = command.help or help_text
        return plain_help(command)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _unavailable(name: str) -> None:
    raise click.UsageError(f"'{name}' is not available in this build")


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(llmsim_version(), prog_name="llmsim", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """llmsim: how fast will this LLM train or serve on that cluster, and which layout is best."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 2 bad input, 1 internal error)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="llmsim", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 1
    except click.ClickException as exc:  # bad flags: one line, as for any bad input
        click.echo(f"error: {_one_line(_click_message(exc))}", err=True)
        return 2
    except LlmsimError as exc:
        if debug:
            raise
        click.echo(f"error: {_one_line(str(exc))}", err=True)
        return 2
    except ModuleNotFoundError as exc:
        root = (exc.name or "").split(".")[0]
        if root not in OPTIONAL or debug:
            raise
        click.echo(f"error: this command needs {root!r}, which is not installed: "
                   f"{OPTIONAL[root]}", err=True)
        return 2
    except Exception as exc:  # noqa: BLE001 - the one place internal errors are reported
        if debug:
            raise
        click.echo(f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)", err=True)
        return 1
    return 0


def _click_message(exc: click.ClickException) -> str:
    """Click's message, prefixed with the command it concerns (``simulate: no such option``)."""
    ctx = getattr(exc, "ctx", None)
    message = exc.format_message()
    return f"{ctx.command_path}: {message}" if ctx is not None else message


def _one_line(text: str) -> str:
    """Errors are one line on stderr; multi-line causes (YAML marks) are joined."""
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
