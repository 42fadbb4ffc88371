# SPDX-License-Identifier: Apache-2.0
"""Leave-one-GPU-out evaluation of the transfer predictor.

For each GPU with rows of the family: fit on every other GPU, predict the held-out GPU's rows
from its hardware YAML alone, and score them beside the analytical roofline
(`analytical.roofline.roofline_time`, the engine the chain falls back to) on the same rows.
Rows of a stack no other GPU was measured with (e.g. our own ``profiled`` H100 rows) cannot be
asked as that stack, so they are counted and left out of the score. Rows of another GPU that
are the held-out GPU's own measurements under another name (`copies_of`) are left out of its
fold's training. The per-hardware
champion's own held-out error (its ``heldout_shape`` split, other rows) is read from MLflow
where one exists.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from analytical.errors import LlmsimError, SpecError
from analytical.hardware import HardwareSpec
from analytical.ops import OpSpec
from analytical.roofline import roofline_time
from predictors.evaluate import ErrorMetrics, error_metrics
from predictors.transfer import Rows, TransferConfig, TransferModel, all_rows, fit_transfer
from predictors.transfer_data import TransferData
from predictors.transfer_residuals import residual_groups

ALL = "all"
# Families whose trees' correction is shrunk by nested leave-one-GPU-out (`fit_shrunk`), and
# the shares of it tried (0: the target's denominator alone, NCCL's model for collectives).
SHRUNK_FAMILIES = ("collective",)
WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class FoldResult:
    """One held-out GPU: scores per stack and over every scorable row (``ALL``)."""

    family: str
    heldout: str
    train_gpus: tuple[str, ...]
    train_rows: int
    fit_s: float
    transfer: dict[str, ErrorMetrics]  # stack or ALL -> metrics
    roofline: dict[str, ErrorMetrics]  # same rows
    unscored: dict[str, int] = field(default_factory=dict)  # stack -> rows (stack unseen)
    # the target's denominator alone (vendor-peak roofline + floor; collectives: NCCL's ring
    # model), same rows: what the trees add over it
    denominator: dict[str, ErrorMetrics] = field(default_factory=dict)
    # the transfer model's error by stack, dtype, kernel class and latency band
    # (`predictors.transfer_residuals`)
    residuals: list[dict[str, object]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {"family": self.family, "heldout": self.heldout,
                "train_gpus": list(self.train_gpus), "train_rows": self.train_rows,
                "fit_s": round(self.fit_s, 2),
                "transfer": {k: m.as_dict() for k, m in self.transfer.items()},
                "roofline": {k: m.as_dict() for k, m in self.roofline.items()},
                "denominator": {k: m.as_dict() for k, m in self.denominator.items()},
                "unscored": dict(self.unscored), "residuals": list(self.residuals)}


def roofline_seconds(rows: Rows, hw: HardwareSpec) -> np.ndarray:
    """The analytical engine's answer per row (NaN where it has none, e.g. an unsupported
    dtype: such rows are left out of both scores)."""
    out = np.empty(len(rows.ops))
    for i, op in enumerate(rows.ops):
        try:
            out[i] = roofline_time(op, hw)
        except SpecError:
            out[i] = np.nan
    return out


COPY_SHARE = 0.9  # of the op keys two GPUs share in a class, bit-identical: one table
COPY_MIN_KEYS = 8  # shared keys below which a class is too small to call a copy


def _class(stack: str, op: OpSpec) -> tuple[str, str]:
    """(stack, op key without its last field): a collective's kind, dtype, group size and
    ranks per node; a GEMM's dtype and batch."""
    return stack, op.key.rsplit("/", 1)[0]


def copies_of(rows: Rows, gpu: str) -> np.ndarray:
    """Mask of the rows of other GPUs whose table (`_class`) is ``gpu``'s under another name:
    at least ``COPY_SHARE`` of the op keys it shares with ``gpu`` (``COPY_MIN_KEYS`` or more)
    have the same latency to the bit. Vidur's repository ships one send/recv table for two
    systems (microsoft/vidur data/profiling/network/{a100,h100}_pairwise_nvlink/send_recv.csv
    are one git blob, a3bc5eb), so the store holds A100 PCIe's and H100 NVL's 993 + 993
    send/recv points twice, and holding out one GPU would otherwise train on its own rows.
    Per class, not per row: Vidur's whole-microsecond timings make single rows of different
    GPUs coincide (198 memory ops of A40 and H100 at 1-16 us, 149 collectives of H100 NVL and
    H100 SXM at 7-147 us), which are measurements of their own."""
    stacks, lat = rows.stacks.tolist(), rows.latency_s.tolist()
    mine = {(stacks[i], op.key): lat[i] for i, op in enumerate(rows.ops) if rows.gpu[i] == gpu}
    tally: dict[tuple[str, str, str], list[int]] = {}
    for i, op in enumerate(rows.ops):
        theirs = mine.get((stacks[i], op.key))
        if rows.gpu[i] != gpu and theirs is not None:
            count = tally.setdefault((str(rows.gpu[i]), *_class(stacks[i], op)), [0, 0])
            count[0] += theirs == lat[i]
            count[1] += 1
    copied = {k for k, (same, shared) in tally.items()
              if shared >= COPY_MIN_KEYS and same >= COPY_SHARE * shared}
    return np.array([(str(rows.gpu[i]), *_class(stacks[i], op)) in copied
                     for i, op in enumerate(rows.ops)], dtype=bool)


def _fold_logs(data: TransferData, rows: Rows, heldout: str, config: TransferConfig
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fit without ``heldout`` (and copies of its rows): the trees' log-ratio on its rows of
    stacks the fit saw, their denominator (`TransferModel.log_ratio`) and measured latency."""
    model = fit_transfer(data, config, leave_out=(heldout,),
                         rows=rows.select(~copies_of(rows, heldout)))
    test = rows.select(rows.gpu == heldout)
    test = test.select(np.isin(test.stacks, model.stacks))
    raw, denominator = model.log_ratio(test.ops, data.gpus[heldout].hardware,
                                       test.stacks.tolist(), test.versions.tolist())
    return raw, denominator, test.latency_s


def correction_weight(data: TransferData, train: Rows, config: TransferConfig) -> float:
    """The share of the trees' correction (`WEIGHTS`) with the lowest mean over ``train``'s
    GPUs of their leave-one-GPU-out MAPE, each GPU held out from the others (nested: the GPU a
    caller holds out is not in ``train``); 1.0 outside `SHRUNK_FAMILIES` or with fewer than
    three GPUs. Why: on collectives the trees learn what each harness and machine adds to
    NCCL's model (nccl-tests' small messages 1.3-1.7x NCCL's latency on the A100 and B200
    nodes, 0.7-1.0x on the H100 and L40S ones, the same NCCL releases), which an unseen GPU
    does not share; the per-hardware anchored target chooses its correction's share on inner
    folds in the same way (`predictors.search_folds`). Among the shares, the smallest within one
    standard error of the best (`parsimonious_weight`)."""
    gpus = sorted(set(train.gpu.tolist()))
    if data.family not in SHRUNK_FAMILIES or len(gpus) < 3:
        return 1.0
    errors = np.zeros((len(gpus), len(WEIGHTS)))
    for i, gpu in enumerate(gpus):
        raw, denominator, latency = _fold_logs(data, train, gpu, config)
        errors[i] = [np.mean(np.abs(np.exp(w * raw) * denominator / latency - 1.0))
                     for w in WEIGHTS]
    return parsimonious_weight(errors)


def parsimonious_weight(errors: np.ndarray) -> float:
    """The smallest share of `WEIGHTS` whose mean error over the inner folds (rows of
    ``errors``, one column per share) is within one standard error of the best share's, the
    standard error of their paired per-fold difference: the one-standard-error rule (Hastie,
    Tibshirani & Friedman, "The Elements of Statistical Learning", 2nd ed., section 7.10;
    Breiman et al., "Classification and Regression Trees", 1984), here toward NCCL's model
    alone, which the trees' correction must beat by more than the folds' spread. With six inner
    folds the lowest mean alone moved with each fold's sample: held out on H100 SXM it chose
    0.75 of the correction (28.3%) where 0.25 gives 15.3% (`--op collective --loo`, seed 0)."""
    mean = errors.mean(axis=0)
    best = int(np.argmin(mean))
    for j in range(len(WEIGHTS)):
        diff = errors[:, j] - errors[:, best]
        if mean[j] - mean[best] <= diff.std(ddof=1) / np.sqrt(len(errors)):
            return WEIGHTS[j]
    return WEIGHTS[best]


def fit_shrunk(data: TransferData, config: TransferConfig, *, rows: Rows,
               leave_out: Sequence[str] = ()) -> TransferModel:
    """`fit_transfer` on ``rows`` without ``leave_out``, its correction shrunk by
    `correction_weight` chosen on those rows alone."""
    train = rows.select(~np.isin(rows.gpu, list(leave_out)))
    model = fit_transfer(data, config, rows=train)
    model.correction_weight = correction_weight(data, train, config)
    return model


def evaluate_fold(data: TransferData, rows: Rows, heldout: str,
                  config: TransferConfig) -> FoldResult:
    """Train without ``heldout`` or copies of its rows (`copies_of`) and score its rows."""
    start = time.perf_counter()
    model = fit_shrunk(data, config, leave_out=(heldout,),
                       rows=rows.select(~copies_of(rows, heldout)))
    fit_s = time.perf_counter() - start
    test = rows.select(rows.gpu == heldout)
    seen = np.isin(test.stacks, model.stacks)
    unscored = {str(s): int(n) for s, n in zip(*np.unique(test.stacks[~seen],
                                                         return_counts=True), strict=True)}
    test = test.select(seen)
    hw = data.gpus[heldout].hardware
    predicted = model.predict(test.ops, hw, test.stacks.tolist(), test.versions.tolist())
    alone = test.ideal_s + model.floor_seconds(test.ops, test.stacks.tolist(), hw)
    analytic = roofline_seconds(test, hw)
    ok = np.isfinite(analytic)
    transfer, roof, denominator = {}, {}, {}
    for stack in [ALL, *sorted(set(test.stacks.tolist()))]:
        mask = ok & ((test.stacks == stack) if stack != ALL else True)
        transfer[stack] = error_metrics(test.latency_s[mask], predicted[mask])
        roof[stack] = error_metrics(test.latency_s[mask], analytic[mask])
        denominator[stack] = error_metrics(test.latency_s[mask], alone[mask])
    residuals = residual_groups(test.ops, test.stacks.tolist(), test.latency_s, predicted)
    return FoldResult(family=data.family, heldout=heldout, train_gpus=model.gpus,
                      train_rows=model.rows, fit_s=fit_s, transfer=transfer, roofline=roof,
                      unscored=unscored, denominator=denominator, residuals=residuals)


def leave_one_out(data: TransferData, config: TransferConfig = TransferConfig(), *,
                  gpus: Sequence[str] | None = None) -> list[FoldResult]:
    """One fold per GPU of ``data`` (or of ``gpus``); needs at least two GPUs."""
    if len(data.gpus) < 2:
        raise LlmsimError(f"leave-one-GPU-out needs two GPUs with {data.family} rows; the "
                          f"store has {list(data.gpus)}")
    names = list(data.gpus) if gpus is None else list(gpus)
    unknown = [n for n in names if n not in data.gpus]
    if unknown:
        raise SpecError("--leave-out", f"no {data.family} rows for {unknown[0]!r}; GPUs with "
                        f"rows: {', '.join(data.gpus)}")
    rows = all_rows(data)
    return [evaluate_fold(data, rows, name, config) for name in names]


def champion_heldout(hardware: str, family: str, tracking_uri: str | None
                     ) -> dict[str, object] | None:
    """The per-hardware champion's ``heldout_shape`` MAPE and n (its own split), or None."""
    try:
        from predictors.tracking import champion_version, client_for, registered_name, run_of

        client = client_for(tracking_uri)
        version = champion_version(client, registered_name(hardware, family))
        if version is None:
            return None
        run = client.get_run(run_of(version))
    except Exception:  # noqa: BLE001 - no tracking store or model: the column stays empty
        return None
    metrics = run.data.metrics
    if "heldout_shape.xgb.mape" not in metrics:
        return None
    return {"mape": metrics["heldout_shape.xgb.mape"], "n": int(metrics["heldout_shape.xgb.n"]),
            "provenance": run.data.tags.get("provenance", ""), "version": str(version.version)}
