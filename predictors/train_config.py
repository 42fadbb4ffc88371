# SPDX-License-Identifier: Apache-2.0
"""How a predictor is trained: `TrainConfig` and `train_config`, the one place that turns the
options a user gives (`llmsim train`, `llmsim validate`) into a config, so the defaults, the
limits and the derived settings live in the package and not in a command-line parser."""

from __future__ import annotations

from dataclasses import dataclass

from analytical.errors import SpecError
from predictors.model import Target

# Distinct shapes a (hardware, family) group needs before it is trained (`llmsim train`,
# `train all`): fewer leave each held-out split a handful of test shapes.
MIN_ROWS = 50
# A `--target` value meaning "picked by the search" (`TrainConfig.target` None).
AUTO_TARGET = "auto"
# Upper bound on the hyper-parameter draws of one search: each draw fits every target on
# every inner fold, so beyond this a training run takes days.
MAX_CONFIGS = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    seed: int = 0
    nthread: int = 2  # fixed: XGBoost hist is deterministic for a given thread count
    n_configs: int = 10
    search_rows: int = 20_000  # inner-train rows used by the search (subsampled, seeded)
    # random validation rows the search wants: a small set is scored over several inner folds
    # so that a choice between targets rests on this many rows, not on one ninth of a table
    search_valid_rows: int = 400
    max_train_rows: int = 80_000  # training rows per protocol/final fit (subsampled, seeded)
    max_rounds: int = 3000
    early_stopping_rounds: int = 30
    rf_trees: int = 50
    baselines: bool = True
    target: Target | None = None  # None: picked by the search; else forced (params still searched)


DEFAULTS = TrainConfig()  # a slots dataclass keeps no defaults on the class


def target_choices() -> list[str]:
    """What ``--target`` accepts: `AUTO_TARGET` and every `Target`."""
    return [AUTO_TARGET, *(t.value for t in Target)]


def train_config(*, seed: int = DEFAULTS.seed, n_configs: int = DEFAULTS.n_configs,
                 max_train_rows: int = DEFAULTS.max_train_rows,
                 target: str | None = None) -> TrainConfig:
    """The config of a training run from the user's options. The search never uses more rows
    than a fit may (``search_rows`` at most ``max_train_rows``); ``target`` None or
    `AUTO_TARGET` leaves the choice to the search. Raises SpecError naming the option."""
    if not 1 <= n_configs <= MAX_CONFIGS:
        raise SpecError("configs", f"must be in 1..{MAX_CONFIGS}, got {n_configs}")
    if max_train_rows < 1:
        raise SpecError("max-train-rows", f"must be at least 1, got {max_train_rows}")
    if target not in (None, *target_choices()):
        raise SpecError("target", f"unknown target {target!r}; known: "
                        f"{', '.join(target_choices())}")
    return TrainConfig(seed=seed, n_configs=n_configs, max_train_rows=max_train_rows,
                       search_rows=min(DEFAULTS.search_rows, max_train_rows),
                       target=None if target in (None, AUTO_TARGET) else Target(target))
