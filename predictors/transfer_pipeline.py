# SPDX-License-Identifier: Apache-2.0
"""One call per ``llmsim train transfer`` family: load every GPU's rows, fit, optionally score
leave-one-GPU-out, log to MLflow."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from analytical.errors import SpecError
from predictors.dataset import open_store
from predictors.transfer import TransferConfig, TransferModel, all_rows
from predictors.transfer_data import TransferData, load_transfer_data
from predictors.transfer_eval import FoldResult, evaluate_fold, fit_shrunk


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferOutcome:
    model: TransferModel
    data: TransferData
    folds: list[FoldResult] = field(default_factory=list)
    run_id: str | None = None
    version: str | None = None
    champion: bool = False
    gate: str = ""
    fit_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return {"family": self.model.family, "gpus": list(self.model.gpus),
                "rows": self.model.rows, "rows_per_gpu": {n: len(g) for n, g in
                                                          self.data.gpus.items()},
                "skipped": dict(self.data.skipped), "stacks": list(self.model.stacks),
                "below_dram_bound": dict(self.data.below_bound),
                "default_stack": self.model.default_stack,
                "data_fingerprint": str(self.data.fingerprint), "n_trees": self.model.n_trees,
                "fit_s": round(self.fit_s, 2), "run_id": self.run_id, "version": self.version,
                "champion": self.champion, "gate": self.gate}

    def summary(self) -> str:
        d = self.as_dict()
        logged = ("not logged" if self.run_id is None else
                  f"run {self.run_id}, version {self.version}"
                  f"{' (champion)' if self.champion else ' (not champion)'}: {self.gate}")
        skipped = "; ".join([f"{k}: {v}" for k, v in self.data.skipped.items()]
                            + [f"{k}: {n} rows below their DRAM bound"
                               for k, n in self.data.below_bound.items()]) or "none"
        return (f"transfer {d['family']}: trained on {', '.join(self.model.gpus)} "
                f"({d['rows']} rows: {d['rows_per_gpu']}), stacks {d['stacks']} (asked as "
                f"{d['default_stack']}), {d['n_trees']} trees in {d['fit_s']} s; data "
                f"{d['data_fingerprint']}; skipped: {skipped}; {logged}")


def run_transfer(family: str, *, db: str | Path | None = None, tracking_uri: str | None = None,
                 seed: int = 0, cap: int | None = None, leave_out: str | None = None,
                 loo: bool = False, log: bool = True,
                 progress: Callable[[str], None] | None = None) -> TransferOutcome:
    """Fit the ``family`` transfer model (without ``leave_out``, then scored on it), with
    ``loo`` score every GPU leave-one-out first, and log the model unless ``log`` is False."""
    if leave_out is not None and loo:
        raise SpecError("--leave-out", "give either --leave-out GPU or --loo, not both")
    say = progress or (lambda _: None)
    config = TransferConfig(seed=seed)
    with open_store(db) as store:
        data = load_transfer_data(store, family, cap=cap, seed=seed)
    if leave_out is not None and leave_out not in data.gpus:
        raise SpecError("--leave-out", f"no {family} rows for {leave_out!r}; GPUs with rows: "
                        f"{', '.join(data.gpus)}")
    say(f"{family}: {sum(len(g) for g in data.gpus.values())} rows from "
        f"{', '.join(data.gpus)}")
    rows = all_rows(data)
    folds: list[FoldResult] = []
    if loo:
        for name in data.gpus:
            say(f"{family}: leave out {name} ...")
            folds.append(evaluate_fold(data, rows, name, config))
    start = time.perf_counter()
    model = fit_shrunk(data, config, rows=rows,
                       leave_out=() if leave_out is None else (leave_out,))
    fit_s = time.perf_counter() - start
    if leave_out is not None:
        folds.append(evaluate_fold(data, rows, leave_out, config))
    run_id = version = None
    champion, why = False, ""
    if log:
        from predictors.transfer_tracking import gate, log_transfer

        logged, champion = log_transfer(model, data, config, folds=folds,
                                        tracking_uri=tracking_uri)
        run_id, version = logged.run_id, logged.version
        why = gate(folds)[1]
    return TransferOutcome(model=model, data=data, folds=folds, run_id=run_id,
                           version=version, champion=champion, gate=why, fit_s=fit_s)
