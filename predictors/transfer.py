# SPDX-License-Identifier: Apache-2.0
"""The transfer predictor: one XGBoost model per operator family across every GPU of the store,
which answers for a GPU that has a hardware YAML and no measurements.

Features: `predictors.transfer_features` (the shape's work decomposition measured against the
GPU's spec) plus a one-hot of the measuring stack (`predictors.transfer_data.stack_of`) and the
stack's release as a number (`predictors.transfer_data.version_of`; an unseen GPU is asked as
the newest release in training). The store's A100 TensorRT-LLM rows are release 1.0, the
others' 1.3: pooled as one stack, the trees read the A100's slower kernels as a property of
its hardware columns and carried it to the GPU nearest them (L40S GEMMs held out: 26.6% ->
22.2%, the same 22.0-22.2% over seeds 0-2 against 26.4-26.8% with the column set to 0).
Target: ln(latency / (roofline of that GPU + floor)), so the trees learn an efficiency, which
moves between GPUs far less than a latency does (collectives apply a share of it, chosen
by nested leave-one-GPU-out: `predictors.transfer_eval.fit_shrunk`). The roofline is the
vendor-peak one (`predictors.transfer_features.ideal_seconds`: datasheet peak for the dtype
and memory bandwidth, link bandwidth and latency for collectives), not the chain's
`roofline_time`, whose per-GPU efficiency factors are guesses an unseen GPU's YAML would carry
into every answer. The floor is the
alpha term of an alpha-beta model for kernels (collectives carry their link latency already and
get none), per (stack, dtype, and phase for attention; `launch_floor`): the smallest over
the training GPUs of each GPU's 1st-percentile latency, about 2-3 us for TensorRT-LLM bf16 GEMMs,
12 us for its fp8 ones, 10-17 us for Vidur's PyTorch GEMMs, 6-15 us for attention kernels in the
curated set, counted in SM cycles at each GPU's boost clock (`launch_floor`). Without a floor TensorRT-LLM decode attention is a median 14x its vendor-peak
roofline on H100 and B200 and 2.3x on L40S: the ratio then encodes the GPU's bandwidth, not how
well the kernel uses it (leave-one-out attention MAPE on L40S in an exploratory run, 2,000 rows
per GPU and 300 trees: 120% without the floor, 60% with it).

At inference the stack is the one measured on the most training GPUs (``default_stack``).
Saved as ``model.ubj`` (XGBoost's own format, never pickle) + ``schema.json`` (schema version,
ordered feature names, stacks, GPUs trained on, training domain, floor, hyper-parameters);
loading checks the schema. Deterministic for the same data, seed and thread count (``hist``,
seeded subsampling). One thread by default: on a shared, oversubscribed machine OpenMP's
spinning threads made a two-thread fit about 15x slower than a one-thread one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analytical.dtypes import DType
from analytical.errors import LlmsimError
from analytical.hardware import HardwareSpec
from analytical.ops import AttentionSpec, OpSpec
from predictors.domain import Domain, outside_domain, training_domain
from predictors.model import HyperParams, fit_booster
from predictors.transfer_data import TransferData, stack_columns
from predictors.transfer_features import (
    TRANSFER_SCHEMA_VERSION,
    ideal_seconds,
    transfer_feature_names,
    transfer_matrix,
)
from predictors.transfer_harness import harness_copies

if TYPE_CHECKING:  # imported where used: xgboost is an optional extra
    import xgboost as xgb

MODEL_FILE = "model.ubj"
SCHEMA_FILE = "schema.json"
MODEL_KIND = "transfer"
# One fixed setting, not searched: a search would need an inner leave-one-GPU-out, and with four
# GPUs per family that costs more than the fit. Shallow-ish trees, strong row/column
# subsampling and min_child_weight 5 keep the trees on the physics columns rather than on the
# few hardware values that identify a training GPU.
DEFAULT_PARAMS = HyperParams(max_depth=7, learning_rate=0.05, min_child_weight=5.0,
                             subsample=0.8, colsample_bytree=0.7, reg_lambda=1.0,
                             max_rounds=600, objective="squarederror")


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferConfig:
    seed: int = 0
    nthread: int = 1
    params: HyperParams = DEFAULT_PARAMS


class TransferModel:
    """A fitted cross-GPU booster for one family and what it needs to return seconds."""

    def __init__(self, *, booster: xgb.Booster, family: str, gpus: Sequence[str], stacks: Sequence[str],
                 default_stack: str, params: HyperParams, domain: Domain,
                 vendors: Sequence[str], floor_cycles: Mapping[str, float],
                 reference_clock_hz: float,
                 stack_versions: Mapping[str, Sequence[float]], rows: int = 0,
                 correction_weight: float = 1.0,
                 schema_version: int = TRANSFER_SCHEMA_VERSION) -> None:
        self.booster = booster
        self.family = family
        self.gpus = tuple(gpus)
        self.stacks = tuple(stacks)
        self.default_stack = default_stack
        self.params = params
        self.domain = domain
        self.vendors = tuple(vendors)
        self.floor_cycles = {str(k): float(v) for k, v in sorted(floor_cycles.items())}
        self.reference_clock_hz = float(reference_clock_hz)
        # releases per stack in training, ascending: a row is asked as the nearest of them
        # (the newest without one), never as a release the trees did not see, which they
        # would put on the side of a split another stack's release 0 happens to fall on
        self.stack_versions = {str(k): sorted(float(x) for x in v)
                               for k, v in sorted(stack_versions.items())}
        self.rows = rows
        # share of the trees' log-ratio applied (`predictors.transfer_eval.fit_shrunk`)
        self.correction_weight = float(correction_weight)
        self.schema_version = schema_version

    @property
    def feature_names(self) -> list[str]:
        return _model_feature_names(self.family, self.stacks)

    @property
    def n_trees(self) -> int:
        return int(self.booster.num_boosted_rounds())

    def features(self, ops: Sequence[OpSpec], hw: HardwareSpec,
                 stacks: Sequence[str] | None = None,
                 versions: Sequence[float] | None = None) -> np.ndarray:
        stacks = [self.default_stack] * len(ops) if stacks is None else stacks
        asked, copies = self.asked(ops, hw, stacks, versions)
        return np.hstack([transfer_matrix(self.family, ops, hw, copies),
                          stack_columns(stacks, self.stacks),
                          np.asarray(asked, dtype=np.float64).reshape(-1, 1)])

    def asked(self, ops: Sequence[OpSpec], hw: HardwareSpec, stacks: Sequence[str],
              versions: Sequence[float] | None) -> tuple[list[float], list[int]]:
        """Each row's release as asked (`release`) and its harness's weight copies there."""
        asked = [self.release(s, None if versions is None else versions[i])
                 for i, s in enumerate(stacks)]
        return asked, harness_copies(self.family, ops, hw, stacks, asked)

    def release(self, stack: str, version: float | None) -> float:
        """The training release of ``stack`` nearest ``version`` (the newer on a tie; the
        newest for None); 0.0 for a stack outside the vocabulary."""
        seen = self.stack_versions.get(stack, [0.0])
        if version is None:
            return seen[-1]
        return min(reversed(seen), key=lambda v: abs(v - version))

    def predict(self, ops: Sequence[OpSpec], hw: HardwareSpec,
                stacks: Sequence[str] | None = None,
                versions: Sequence[float] | None = None) -> np.ndarray:
        """Seconds per op on ``hw`` as measured by ``stacks`` (default: `default_stack`) at
        ``versions`` (default: each stack's newest release in training)."""
        stacks = [self.default_stack] * len(ops) if stacks is None else stacks
        raw, denominator = self.log_ratio(ops, hw, stacks, versions)
        seconds: np.ndarray = np.exp(self.correction_weight * raw) * denominator
        return seconds

    def log_ratio(self, ops: Sequence[OpSpec], hw: HardwareSpec, stacks: Sequence[str],
                  versions: Sequence[float] | None) -> tuple[np.ndarray, np.ndarray]:
        """The trees' ln(seconds / denominator) per op, and the denominator (roofline + floor)."""
        import xgboost as xgb

        if not ops:
            return np.empty(0), np.empty(0)
        matrix = xgb.DMatrix(self.features(ops, hw, stacks, versions), nthread=1)
        raw = self.booster.predict(matrix).astype(np.float64)
        copies = self.asked(ops, hw, stacks, versions)[1]
        return raw, ideal_seconds(ops, hw, copies) + self.floor_seconds(ops, stacks, hw)

    def floor_seconds(self, ops: Sequence[OpSpec], stacks: Sequence[str],
                      hw: HardwareSpec) -> np.ndarray:
        """Each op's floor on ``hw``: `floors` cycles at its boost clock (`sm_clock_hz`)."""
        seconds: np.ndarray = floors(self.floor_cycles, ops, stacks) / sm_clock_hz(
            hw, self.reference_clock_hz)
        return seconds

    def outside_domain(self, op: OpSpec, hw: HardwareSpec) -> str | None:
        """Why this model should not price ``op`` on ``hw`` (a dtype, kind or phase it never
        saw, a device kind or vendor none of its GPUs had), or None."""
        if hw.kind != "gpu":
            return f"kind={hw.kind}"
        if hw.vendor not in self.vendors:
            return f"vendor={hw.vendor}"
        return outside_domain(self.domain, op)

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.booster.save_model(str(folder / MODEL_FILE))
        doc = {"kind": MODEL_KIND, "family": self.family, "schema_version": self.schema_version,
               "features": self.feature_names, "stacks": list(self.stacks),
               "default_stack": self.default_stack, "gpus": list(self.gpus),
               "vendors": list(self.vendors), "domain": self.domain, "rows": self.rows,
               "target": "log_roofline_ratio",
               "floor_cycles": {k: v.hex() for k, v in self.floor_cycles.items()},
               "reference_clock_hz": self.reference_clock_hz,
               "stack_versions": dict(self.stack_versions),
               "correction_weight": self.correction_weight.hex(),
               "params": asdict(self.params),
               "n_trees": self.n_trees}
        (folder / SCHEMA_FILE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> TransferModel:
        """Read a folder written by `save`; the schema must match this llmsim's."""
        import xgboost as xgb

        folder = Path(folder)
        doc = _read_schema(folder / SCHEMA_FILE)
        booster = xgb.Booster()
        if not (folder / MODEL_FILE).exists():
            raise LlmsimError(f"{folder / MODEL_FILE}: missing")
        booster.load_model(str(folder / MODEL_FILE))
        return cls(booster=booster, family=doc["family"], gpus=doc["gpus"],
                   stacks=doc["stacks"], default_stack=doc["default_stack"],
                   params=HyperParams(**doc["params"]), domain=doc["domain"],
                   vendors=doc["vendors"],
                   floor_cycles={k: float.fromhex(v) for k, v in doc["floor_cycles"].items()},
                   reference_clock_hz=float(doc["reference_clock_hz"]),
                   stack_versions=doc["stack_versions"],
                   rows=int(doc.get("rows", 0)),
                   # absent: saved before the weight existed, i.e. the whole correction
                   correction_weight=float.fromhex(doc.get("correction_weight", "0x1p+0")),
                   schema_version=doc["schema_version"])


def _read_schema(path: Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise LlmsimError(f"{path}: missing; a transfer model folder needs {MODEL_FILE} and "
                          f"{SCHEMA_FILE}") from None
    except json.JSONDecodeError as exc:
        raise LlmsimError(f"{path}: not valid JSON ({exc})") from None
    check_transfer_schema(doc, source=str(path))
    return doc


def check_transfer_schema(doc: dict[str, Any], *, source: str) -> None:
    """Raise a clear `LlmsimError` unless ``doc`` matches this llmsim's transfer schema."""
    if doc.get("kind") != MODEL_KIND:
        raise LlmsimError(f"{source}: kind: {doc.get('kind')!r}, expected {MODEL_KIND!r}")
    family = doc.get("family")
    if not isinstance(family, str):
        raise LlmsimError(f"{source}: family: expected a string, got {family!r}")
    retrain = f"retrain with `llmsim train transfer --op {family}`"
    if doc.get("schema_version") != TRANSFER_SCHEMA_VERSION:
        raise LlmsimError(f"{source}: transfer schema version {doc.get('schema_version')} but "
                          f"this llmsim uses {TRANSFER_SCHEMA_VERSION}; {retrain}")
    for key in ("stacks", "default_stack", "gpus", "vendors", "domain", "params", "floor_cycles",
                "reference_clock_hz",
                "stack_versions"):
        if key not in doc:
            raise LlmsimError(f"{source}: {key}: missing")
    expected = _model_feature_names(family, doc["stacks"])
    if doc.get("features") != expected:
        raise LlmsimError(f"{source}: feature names differ from transfer schema version "
                          f"{TRANSFER_SCHEMA_VERSION} for {family!r}; {retrain}")


def _model_feature_names(family: str, stacks: Sequence[str]) -> list[str]:
    """The family's columns, the stack one-hot, the stack's release (`version_of`)."""
    return transfer_feature_names(family) + [f"stack_{s}" for s in stacks] + ["stack_version"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Rows:
    """Rows of several GPUs with their features computed once (the leave-one-out loop slices
    them instead of recomputing)."""

    gpu: np.ndarray  # hardware name per row
    ops: tuple[OpSpec, ...]
    stacks: np.ndarray
    versions: np.ndarray  # `predictors.transfer_data.version_of` per row
    features: np.ndarray  # transfer_matrix columns, without the stack one-hot
    latency_s: np.ndarray
    ideal_s: np.ndarray
    clock_hz: np.ndarray  # the row's GPU's stated boost clock, 0 where its YAML has none

    def select(self, mask: np.ndarray) -> Rows:
        return Rows(gpu=self.gpu[mask], ops=tuple(o for o, m in zip(self.ops, mask, strict=True)
                                                  if m),
                    stacks=self.stacks[mask], versions=self.versions[mask],
                    features=self.features[mask],
                    latency_s=self.latency_s[mask], ideal_s=self.ideal_s[mask],
                    clock_hz=self.clock_hz[mask])


def all_rows(data: TransferData) -> Rows:
    """Every GPU's rows of ``data``, GPUs in name order."""
    gpu, ops, feats, ideal = [], [], [], []
    for name, g in data.gpus.items():
        gpu += [name] * len(g)
        ops += list(g.ops)
        copies = harness_copies(data.family, g.ops, g.hardware, g.stacks.tolist(),
                                g.versions.tolist())
        feats.append(transfer_matrix(data.family, g.ops, g.hardware, copies))
        ideal.append(ideal_seconds(g.ops, g.hardware, copies))
    return Rows(gpu=np.array(gpu, dtype=str), ops=tuple(ops),
                stacks=np.concatenate([g.stacks for g in data.gpus.values()]),
                versions=np.concatenate([g.versions for g in data.gpus.values()]),
                features=np.vstack(feats),
                latency_s=np.concatenate([g.latency_s for g in data.gpus.values()]),
                ideal_s=np.concatenate(ideal),
                clock_hz=np.concatenate([np.full(len(g), g.hardware.boost_clock_hz)
                                         for g in data.gpus.values()]))


def fit_transfer(data: TransferData, config: TransferConfig = TransferConfig(), *,
                 leave_out: Sequence[str] = (), rows: Rows | None = None) -> TransferModel:
    """Fit on every GPU of ``data`` except ``leave_out`` (``rows``: `all_rows` of ``data``,
    computed once by a caller that fits several times)."""
    rows = all_rows(data) if rows is None else rows
    train = rows.select(~np.isin(rows.gpu, list(leave_out)))
    if not len(train.ops):
        raise LlmsimError(f"no GPU left to train the {data.family} transfer model on")
    gpus = sorted(set(train.gpu.tolist()))
    vocabulary = sorted(set(train.stacks.tolist()))
    gpus_per_stack = Counter(s for _, s in set(zip(train.gpu.tolist(), train.stacks.tolist(),
                                                   strict=True)))
    rows_per_stack = Counter(train.stacks.tolist())
    default = max(vocabulary, key=lambda s: (gpus_per_stack[s], rows_per_stack[s], s))
    stated = train.clock_hz[train.clock_hz > 0]
    reference = float(np.median(stated)) if stated.size else 1.0
    clock = np.where(train.clock_hz > 0, train.clock_hz, reference)
    floor = launch_floor(data.family, train, clock)
    x = np.hstack([train.features, stack_columns(train.stacks.tolist(), vocabulary),
                   train.versions.reshape(-1, 1)])
    releases = {s: sorted(set(train.versions[train.stacks == s].tolist())) for s in vocabulary}
    target = np.log(train.latency_s / (train.ideal_s + floors(
        floor, train.ops, train.stacks.tolist()) / clock))
    booster = fit_booster(x, target, config.params,
                          seed=config.seed, nthread=config.nthread)
    return TransferModel(booster=booster, family=data.family, gpus=gpus, stacks=vocabulary,
                         default_stack=default, params=config.params,
                         domain=training_domain(train.ops),
                         vendors=sorted({data.gpus[n].hardware.vendor for n in gpus}),
                         floor_cycles=floor, reference_clock_hz=reference,
                         stack_versions=releases, rows=len(train.ops))


def _floor_key(stack: str, op: OpSpec) -> str:
    """``stack/dtype``, and ``/phase`` for attention (decode and prefill are different kernels:
    XQA / masked MHA against the context FMHA in TensorRT-LLM)."""
    phase = getattr(op, "phase", None) if isinstance(op, AttentionSpec) else None
    return f"{stack}/{op.dtype}" + (f"/{phase}" if phase is not None else "")


def sm_clock_hz(hw: HardwareSpec, reference_hz: float) -> float:
    """``hw``'s boost clock (``clocks.boost_mhz``), or ``reference_hz`` (the median over the
    model's training GPUs) where its YAML states none."""
    return hw.boost_clock_hz or reference_hz


def launch_floor(family: str, rows: Rows, clock_hz: np.ndarray) -> dict[str, float]:
    """SM cycles added to the roofline before the ratio (see the module doc; on a GPU, cycles
    over its boost clock, `TransferModel.floor_seconds`), per `_floor_key`: none for
    collectives, else the smallest over the training GPUs of each GPU's 1st-percentile latency
    times ``clock_hz``, its boost clock. In cycles because a launch-bound kernel's fixed work
    (prologue, the first dependent loads and MMAs, epilogue, the grid's tail) is a count of SM
    cycles, run at the boost clock by a GPU that such a kernel leaves far below its power
    limit: with one floor in seconds the store's smallest TensorRT-LLM bf16 GEMMs held out
    were predicted too fast on the 1,410 MHz A100 (-27% signed median under 10 us) and too
    slow on the 2,520 MHz L40S (+16%); in cycles leave-one-GPU-out GEMM and attention MAPE
    fell on every GPU but B200 (docs/validation/transfer-effects.md). A floor is a lower bound, and a GPU whose sample has no tiny
    shapes (Vidur's A40 GEMMs: 29 us) overstates it (the median instead: docs/validation/transfer-effects.md
    has both). Per stack because each harness times differently
    (Vidur's PyTorch GEMMs: 10-17 us on H100 and A100, TensorRT-LLM's: 2-3 us); per
    dtype because TensorRT-LLM's fp8 and fp4 GEMMs time more than the MMA kernel (activation
    quantisation, scales): their shortest rows are 12 us on H100, B200 and L40S against 2-3 us
    for bf16."""
    if family == "collective":
        return {}
    keys = np.array([_floor_key(s, op) for s, op in zip(rows.stacks, rows.ops, strict=True)])
    out = {}
    for key in sorted(set(keys.tolist())):
        mine = keys == key
        out[key] = float(np.min([np.quantile((rows.latency_s * clock_hz)[
            mine & (rows.gpu == g)], 0.01) for g in np.unique(rows.gpu[mine])]))
    return out


def floors(floor_cycles: Mapping[str, float], ops: Sequence[OpSpec],
           stacks: Sequence[str]) -> np.ndarray:
    """Each op's floor (`launch_floor`); for a key no training GPU ran, the floor of the same
    stack (and phase) whose dtype is nearest in bits per element (fp4 -> fp8, the lower
    precision on a tie), else the median of every floor."""
    if not floor_cycles:
        return np.zeros(len(ops))
    split = {k: k.split("/") for k in floor_cycles}

    def one(stack: str, op: OpSpec) -> float:
        key = _floor_key(stack, op)
        if key in floor_cycles:
            return floor_cycles[key]
        want = key.split("/")
        near = [(abs(DType(p[1]).bytes - op.dtype.bytes), DType(p[1]).bytes, floor_cycles[k])
                for k, p in split.items() if p[0] == want[0] and p[2:] == want[2:]]
        return min(near)[2] if near else float(np.median(list(floor_cycles.values())))

    return np.array([one(s, op) for s, op in zip(stacks, ops, strict=True)], dtype=np.float64)
