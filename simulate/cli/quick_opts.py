# SPDX-License-Identifier: Apache-2.0
"""The quick-path flags of ``llmsim simulate`` (``--model --gpu --gpus ...``).

`quick_options` decorates the simulate command: it adds the flags and, when ``--model`` is
given instead of a SCENARIO file, hands the command the scenario `simulate.quick` builds (the
defaults and their sources live there). ``--save FILE`` writes that scenario as YAML.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import yaml

from simulate.quick import (
    SERVE_INPUT_LEN,
    SERVE_OUTPUT_LEN,
    SERVE_REQUESTS,
    TRAIN_GLOBAL_BATCH,
    TRAIN_SEQ_LEN,
    Mode,
    QuickSpec,
    quick_scenario,
)

_OPTIONS = (
    click.option("--model", "q_model", metavar="NAME|config.json",
                 help="Quick path, no SCENARIO file: a catalog model or a Hugging Face "
                 "config.json."),
    click.option("--gpu", "q_gpu", metavar="NAME", help="Quick path: catalog GPU name."),
    click.option("--gpus", "q_gpus", type=int, help="Quick path: number of GPUs."),
    click.option("--tp", "q_tp", type=int, help="Quick path: tensor parallel size (train: 1; "
                 "serve: all GPUs up to one node)."),
    click.option("--pp", "q_pp", type=int, help="Quick path: pipeline parallel size (1)."),
    click.option("--train", "q_mode", flag_value=Mode.TRAIN.value,
                 help=f"Quick path: a training step (seq {TRAIN_SEQ_LEN}, global batch "
                 f"{TRAIN_GLOBAL_BATCH}, FSDP)."),
    click.option("--serve", "q_mode", flag_value=Mode.SERVE.value, default=True,
                 help=f"Quick path: serving (the default; {SERVE_REQUESTS} requests of "
                 f"{SERVE_INPUT_LEN} in / {SERVE_OUTPUT_LEN} out tokens, all at t=0)."),
    click.option("--seq-len", "q_seq_len", type=int, help="Quick path, train: sequence length."),
    click.option("--global-batch", "q_global_batch", type=int,
                 help="Quick path, train: sequences per step."),
    click.option("--input-len", "q_input_len", type=int, help="Quick path, serve: prompt tokens."),
    click.option("--output-len", "q_output_len", type=int,
                 help="Quick path, serve: output tokens."),
    click.option("--qps", "q_qps", type=float,
                 help="Quick path, serve: Poisson arrivals at this rate (default: all at t=0)."),
    click.option("--requests", "q_requests", type=int, help="Quick path, serve: requests."),
    click.option("--save", "q_save", type=click.Path(dir_okay=False, path_type=Path),
                 help="Quick path: also write the scenario built from the flags as YAML."),
)


def quick_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the quick-path flags; the wrapped command receives ``scenario`` (a path or a dict)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        quick = {key[2:]: kwargs.pop(key) for key in list(kwargs) if key.startswith("q_")}
        scenario = kwargs.get("scenario")
        given = [f"--{k.replace('_', '-')}" for k, v in quick.items()
                 if v is not None and k not in ("mode",)]
        if scenario is not None and given:
            raise click.UsageError(f"give a SCENARIO file or the quick-path flags, not both "
                                   f"({', '.join(given)})")
        if scenario is None:
            kwargs["scenario"] = _build(quick)
        return func(*args, **kwargs)

    for option in reversed(_OPTIONS):
        wrapper = option(wrapper)
    return wrapper


def _build(quick: dict[str, Any]) -> dict[str, Any]:
    missing = [f"--{k}" for k in ("model", "gpu", "gpus") if quick.get(k) is None]
    if missing:
        raise click.UsageError("give a SCENARIO file, or --model, --gpu and --gpus (missing "
                               f"{', '.join(missing)})")
    save = quick.pop("save")
    spec = QuickSpec(mode=Mode(quick.pop("mode") or Mode.SERVE), **quick)
    doc = quick_scenario(spec)
    if save is not None:
        save.write_text(yaml.safe_dump(doc, sort_keys=False))
        click.echo(f"wrote {save}", err=True)
    return doc
