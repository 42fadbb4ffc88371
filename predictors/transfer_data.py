# SPDX-License-Identifier: Apache-2.0
"""Training data of the transfer predictor: every GPU of the store, one family, subsampled.

Frameworks' kernels for one shape disagree by 20-30% (`predictors.dataset`), so rows keep their
*stack*: the provenance without its version (``trtllm``, ``nccl``, ``vidur``, ``profiled``). The
stack is a one-hot feature; at inference the model answers as the stack measured on the most
GPUs. Per (GPU, stack) one provenance group is used (`dataset.pick_provenance`: most categorical
configurations, then most rows, then the newest version), repeated op keys are folded to their
median, and each GPU is subsampled to at most ``cap`` rows: each stack an equal share (a small
stack such as the NCCL tables, 504 rows beside Vidur's 8,937 on A100, is not drowned), within a
stack stratified by the family's categorical fields (dtype, phase, kind, group size) with
proportional allocation, seeded. Every GPU weighs the same and one fold trains in bounded time.
A GPU of the store without a hardware YAML, or that is not a GPU, is skipped and listed, and
GEMM and attention rows faster than their DRAM traffic allows are left out and counted
(`below_dram_bound`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analytical.errors import LlmsimError
from analytical.hardware import HardwareSpec, get_hardware
from analytical.ops import OpSpec, op_fields, op_from_dict
from predictors.dataset import TARGET_COLUMN, Fingerprint, _plain, fingerprint, pick_provenance
from predictors.transfer_features import WARM_L2_FAMILIES

if TYPE_CHECKING:
    from profiler.store import Store

DEFAULT_CAP = {"gemm": 6000, "attention": 6000, "collective": 3000, "memory": 4000}
_VERSION = re.compile(r"-\d[\w.]*$")
_MAJOR_MINOR = re.compile(r"-(\d+)\.(\d+)")


def stack_of(provenance: str) -> str:
    """``imported:aiconfigurator-0.12.0/trtllm-1.3.0rc20`` -> ``trtllm``,
    ``imported:vidur@7d47513`` -> ``vidur``, ``profiled`` -> ``profiled``."""
    name = provenance.split(":", 1)[-1].rsplit("/", 1)[-1].split("@", 1)[0]
    return _VERSION.sub("", name) or name


def stack_columns(stacks: Sequence[str], vocabulary: Sequence[str]) -> np.ndarray:
    """One-hot [rows, len(vocabulary)]; a stack outside the vocabulary is all zeros."""
    out = np.zeros((len(stacks), len(vocabulary)))
    index = {s: i for i, s in enumerate(vocabulary)}
    for row, stack in enumerate(stacks):
        if stack in index:
            out[row, index[stack]] = 1.0
    return out


def version_of(provenance: str) -> float:
    """The stack's release as major + minor / 100: ``.../trtllm-1.3.0rc20`` -> 1.03,
    ``.../nccl-2.27.3`` -> 2.27; 0.0 where the provenance names none (``vidur@7d47513``,
    ``profiled``). A number, so trees can split one stack's releases (TensorRT-LLM 1.0's
    kernels and heuristics are not 1.3's) and an unseen GPU is asked as the newest."""
    name = provenance.split(":", 1)[-1].rsplit("/", 1)[-1]
    found = _MAJOR_MINOR.search(name)
    return int(found.group(1)) + int(found.group(2)) / 100 if found else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuRows:
    """One GPU's (subsampled) rows of one family, sorted by (stack, op key)."""

    hardware: HardwareSpec
    ops: tuple[OpSpec, ...]
    latency_s: np.ndarray
    stacks: np.ndarray  # str per row
    versions: np.ndarray  # `version_of` the row's provenance
    provenances: tuple[str, ...]  # the group used per stack
    rows_available: int  # distinct (stack, op key) before the subsample
    below_bound: int = 0  # measurements left out by `below_dram_bound`

    def __len__(self) -> int:
        return len(self.ops)


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferData:
    family: str
    gpus: dict[str, GpuRows]  # hardware name -> rows, sorted by name
    skipped: dict[str, str]  # hardware name -> why it has no rows here
    cap: int
    seed: int
    fingerprint: Fingerprint
    # hardware name -> measurements left out by `below_dram_bound` (GPUs with any), counted
    # once here for the outcome's record and summary
    below_bound: dict[str, int] = field(default_factory=dict)

    def names(self) -> list[str]:
        return list(self.gpus)


def _categorical(frame: pd.DataFrame, family: str) -> list[str]:
    return [c for c in op_fields(family) if c in frame.columns and (
        pd.api.types.is_bool_dtype(frame[c]) or not pd.api.types.is_numeric_dtype(frame[c])
        or c in ("group_size", "ranks_per_node"))]


def _fold(frame: pd.DataFrame, family: str) -> pd.DataFrame:
    """One provenance group per stack of one GPU, repeated op keys folded to the median."""
    fields = list(op_fields(family))
    frame = frame[frame[TARGET_COLUMN] > 0].assign(
        stack=frame["provenance"].map(stack_of))
    groups = []
    for stack, rows in frame.groupby("stack", sort=True):
        chosen = pick_provenance(rows, family=family)
        group = rows[rows["provenance"] == chosen]
        folded = group.groupby("op_key", sort=True).agg(
            {**{f: "first" for f in fields}, TARGET_COLUMN: "median"}).reset_index()
        groups.append(folded.assign(stack=stack, provenance=chosen))
    return pd.concat(groups, ignore_index=True)


def stratified_sample(frame: pd.DataFrame, strata: list[str], cap: int,
                      seed: int) -> pd.DataFrame:
    """At most ``cap`` rows, each stratum in proportion to its size (at least one row),
    drawn with a generator seeded by ``seed``; rows in the input order."""
    if len(frame) <= cap:
        return frame
    rng = np.random.default_rng(seed)
    keep: list[np.ndarray] = []
    for _, index in sorted(frame.groupby(strata, sort=True, dropna=False).indices.items(),
                           key=lambda kv: str(kv[0])):
        take = max(1, int(round(cap * len(index) / len(frame))))
        keep.append(np.sort(rng.choice(index, size=min(take, len(index)), replace=False)))
    return frame.iloc[np.sort(np.concatenate(keep))]


def below_dram_bound(frame: pd.DataFrame, family: str, hw: HardwareSpec) -> np.ndarray:
    """Mask of the GEMM and attention rows (`WARM_L2_FAMILIES`) faster than the bytes that
    cannot sit in the L2 take to come from DRAM at the datasheet bandwidth: such a row did not
    move the bytes its shape states, so it is no measurement of that op. Only aiconfigurator's
    A100 TensorRT-LLM 1.0.0 generation rows are (294 of its 9,890 attention rows, up to 1.69x
    the HBM bandwidth; no other GPU's attention row beyond twice its L2 passes 0.93 of its
    DRAM bandwidth, and no GEMM row of any GPU is below the bound): its collector
    allocated the KV cache as ``CacheType.SELFKONLY``, the K-only layout TensorRT-LLM keeps for
    MLA, until ai-dynamo/aiconfigurator PR #1356 (dec5f4cd2, collector/trtllm/collect_attn.py:
    "Serving allocates dense-attention KV cache as CacheType.SELF ... Regular GQA/MHA has
    separate K and V tensors") for the 1.3.0rc20 rows the other GPUs have."""
    if family not in WARM_L2_FAMILIES or "bytes" not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    spill = (frame["bytes"].to_numpy(dtype=np.float64) - hw.l2_bytes).clip(min=0.0)
    return np.asarray(frame[TARGET_COLUMN].to_numpy(dtype=np.float64)
                      < spill / hw.memory_bw_bytes_per_s)


def _gpu_rows(frame: pd.DataFrame, family: str, hw: HardwareSpec, cap: int,
              seed: int) -> GpuRows:
    below = below_dram_bound(frame, family, hw)
    folded = _fold(frame[~below], family).sort_values(["stack", "op_key"], kind="stable")
    stacks = sorted(set(folded["stack"]))
    strata = _categorical(folded, family)
    sample = pd.concat([stratified_sample(folded[folded["stack"] == s], strata,
                                          cap // len(stacks), seed) for s in stacks])
    fields = list(op_fields(family))
    ops = tuple(op_from_dict(family, _plain(row), field=f"{hw.name}.row")
                for row in sample[fields].to_dict("records"))
    return GpuRows(hardware=hw, ops=ops,
                   latency_s=sample[TARGET_COLUMN].to_numpy(dtype=np.float64),
                   stacks=sample["stack"].to_numpy(dtype=str),
                   versions=sample["provenance"].map(version_of).to_numpy(dtype=np.float64),
                   provenances=tuple(sorted(set(sample["provenance"]))),
                   rows_available=len(folded), below_bound=int(below.sum()))


def _spec_or_reason(name: str) -> tuple[HardwareSpec | None, str]:
    try:
        hw = get_hardware(name)
    except LlmsimError:
        return None, "no hardware YAML in the catalog"
    if hw.kind != "gpu":
        return None, f"kind {hw.kind}, not a GPU"
    return hw, ""


def load_transfer_data(store: Store, family: str, *, cap: int | None = None, seed: int = 0,
                       exclude: tuple[str, ...] = ()) -> TransferData:
    """Every GPU's rows of ``family`` from a `profiler.store.Store` (status ok)."""
    cap = cap or DEFAULT_CAP.get(family, 6000)
    frame = store.frame(family, status="ok")
    if frame.empty:
        raise LlmsimError(f"no {family} rows with status ok in the store; import them first "
                          "(llmsim db import-parquet datasets/measurements)")
    gpus: dict[str, GpuRows] = {}
    skipped: dict[str, str] = {}
    for name, rows in frame.groupby("hardware", sort=True):
        name = str(name)
        hw, why = _spec_or_reason(name)
        if name in exclude:
            skipped[name] = "left out"
        elif hw is None:
            skipped[name] = why
        else:
            gpus[name] = _gpu_rows(rows, family, hw, cap, seed)
    if not gpus:
        raise LlmsimError(f"no GPU with a hardware YAML has {family} rows in the store")
    keys = [f"{n}|{s}|{op.key}" for n, g in gpus.items() for s, op in zip(g.stacks, g.ops,
                                                                          strict=True)]
    latency = np.concatenate([g.latency_s for g in gpus.values()])
    return TransferData(family=family, gpus=gpus, skipped=skipped, cap=cap, seed=seed,
                        fingerprint=fingerprint(keys, latency),
                        below_bound={n: g.below_bound for n, g in gpus.items() if g.below_bound})
