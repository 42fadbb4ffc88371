# SPDX-License-Identifier: Apache-2.0
"""Training design space: a ``training`` block whose values are lists, ranges or ``auto``
-> the candidate training blocks (plain dicts) that `simulate` would accept.

A searchable value is a scalar (fixed), a list (those values), ``{min: a, max: b}`` (powers of
two in [a, b]) or ``auto`` (the default domain below). ``dp`` left at ``auto`` (or absent) is
derived as num_gpus / (tp * pp * cp). Validation is `simulate.layout.validate_layout` itself, so a
candidate that survives enumeration is one `simulate` accepts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from analytical.errors import SpecError
from analytical.hardware import HardwareSpec
from analytical.inputs import check_work
from simulate.fields import int_value
from simulate.layout import validate_layout
from simulate.scenario import (
    PARALLEL_KEYS,
    TRAINING_KEYS,
    ClusterSpec,
    TrainingSpec,
    parse_training,
)

__all__ = ["AUTO", "SearchSpace", "enumerate_layouts", "expand_space", "parse_serving_space",
           "quick_reject"]

AUTO = "auto"
PARALLEL_AXES = ("tp", "pp", "dp", "cp", "ep", "vpp", "sp", "zero", "fsdp")
TRAINING_AXES = ("micro_batch", "recompute", "schedule", "precision")
SEARCH_AXES = PARALLEL_AXES + TRAINING_AXES
# Enumeration validates every raw combination (~1e4 per second on one core), so a space larger
# than this is refused before enumeration starts; narrow an axis instead.
MAX_CANDIDATES = 1_000_000
MAX_RANGE = 2**20  # the largest degree or micro-batch a {min, max} range may reach
MAX_LIST = 1_000  # values listed for one axis


def _pow2(lo: int, hi: int) -> list[int]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


def _auto_domain(axis: str, model, hw: HardwareSpec, cluster: ClusterSpec) -> list[Any]:
    """Default values tried for ``auto`` (the choices Megatron-style tuning guides sweep)."""
    gpn = cluster.gpus_per_node or hw.gpus_per_node
    n = cluster.num_gpus
    if axis == "tp":
        return _pow2(1, min(gpn, n))
    if axis == "pp":
        return [p for p in _pow2(1, min(n, model.layers)) if n % p == 0]
    if axis == "cp":
        return _pow2(1, min(8, n))
    if axis == "ep":
        return [e for e in _pow2(1, model.num_experts) if model.num_experts % e == 0] \
            if model.is_moe else [1]
    if axis == "vpp":
        return [1, 2, 4]
    if axis == "sp":
        return [False, True]
    if axis == "zero":
        return [0, 1, 2, 3]
    if axis == "fsdp":
        return [False]
    if axis == "micro_batch":
        return [1, 2, 4, 8]
    if axis == "recompute":
        return ["none", "selective", "full"]
    if axis == "schedule":
        return ["1f1b", "interleaved", "gpipe"]
    if axis == "precision":
        return ["bf16"]
    raise SpecError(f"training.{axis}", "has no auto domain")


def _values(raw: Any, axis: str, path: str, model, hw: HardwareSpec,
            cluster: ClusterSpec, source: str | None) -> list[Any]:
    if raw == AUTO:
        return _auto_domain(axis, model, hw, cluster)
    if isinstance(raw, list):
        if not raw:
            raise SpecError(path, "an empty list leaves nothing to search", source=source)
        check_work(path, len(raw), MAX_LIST, "listed values", source=source)
        try:
            return list(dict.fromkeys(raw))
        except TypeError:
            raise SpecError(path, "list values must be scalars", source=source) from None
    if isinstance(raw, Mapping):
        if set(raw) != {"min", "max"}:
            raise SpecError(path, "a range is {min: int >= 1, max: int >= 1}", source=source)
        for key in ("min", "max"):
            int_value(raw[key], f"{path}.{key}", source=source, maximum=MAX_RANGE)
        values = _pow2(raw["min"], raw["max"])
        if not values:
            raise SpecError(path, f"no power of two in [{raw['min']}, {raw['max']}]",
                            source=source)
        return values
    return [raw]


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """The axes being searched (name -> values) and the fixed rest of the training block."""

    axes: dict[str, list[Any]]
    fixed: dict[str, Any]  # training keys other than the searched axes (seq_len, ...)
    fixed_parallel: dict[str, Any]  # parallel keys that are not searched (cp_algorithm)
    derive_dp: bool

    @property
    def size(self) -> int:
        """Raw candidates: the product of every axis' values."""
        total = 1
        for values in self.axes.values():
            total *= len(values)
        return total


def expand_space(training: Mapping[str, Any], *, model, hw: HardwareSpec, cluster: ClusterSpec,
                 source: str | None = None) -> SearchSpace:
    """Parse a searchable ``training`` block into a `SearchSpace`."""
    if not isinstance(training, Mapping):
        raise SpecError("training", "expected a mapping", source=source)
    unknown = sorted(set(training) - TRAINING_KEYS)
    if unknown:
        raise SpecError(f"training.{unknown[0]}", "unknown key", source=source)
    parallel = training.get("parallel", {}) or {}
    if parallel == AUTO:
        parallel = {k: AUTO for k in ("tp", "pp", "cp", "vpp", "zero")}
    if not isinstance(parallel, Mapping):
        raise SpecError("training.parallel", "expected a mapping or 'auto'", source=source)
    bad = sorted(set(parallel) - PARALLEL_KEYS)
    if bad:
        raise SpecError(f"training.parallel.{bad[0]}", "unknown key", source=source)
    axes: dict[str, list[Any]] = {}
    for axis in PARALLEL_AXES:
        if axis == "dp":
            continue
        if axis in parallel:
            axes[axis] = _values(parallel[axis], axis, f"training.parallel.{axis}", model, hw,
                                 cluster, source)
    if model.is_moe and "ep" not in axes:
        axes["ep"] = [1]
    dp_raw = parallel.get("dp", AUTO)
    derive_dp = dp_raw == AUTO
    if not derive_dp:
        axes["dp"] = _values(dp_raw, "dp", "training.parallel.dp", model, hw, cluster, source)
    for axis in TRAINING_AXES:
        if axis in training:
            axes[axis] = _values(training[axis], axis, f"training.{axis}", model, hw, cluster,
                                 source)
    fixed = {k: v for k, v in training.items() if k not in TRAINING_AXES and k != "parallel"}
    fixed_parallel = {k: v for k, v in parallel.items() if k not in PARALLEL_AXES}
    space = SearchSpace(axes=axes, fixed=fixed, fixed_parallel=fixed_parallel,
                        derive_dp=derive_dp)
    check_work("training", space.size, MAX_CANDIDATES, "candidate layouts",
               "narrow an axis (a list or a {min, max} range)", source=source)
    return space


def _candidate(space: SearchSpace, combo: dict[str, Any], num_gpus: int) -> dict[str, Any] | None:
    par = {k: combo[k] for k in PARALLEL_AXES if k in combo}
    par.update(space.fixed_parallel)
    if space.derive_dp:
        denom = par.get("tp", 1) * par.get("pp", 1) * par.get("cp", 1)
        if num_gpus % denom:
            return None
        par["dp"] = num_gpus // denom
    if par.get("fsdp") and par.get("zero", 0) not in (0, 3):
        return None  # fsdp is ZeRO-3: keep one spelling of it
    block = dict(space.fixed)
    block.update({k: combo[k] for k in TRAINING_AXES if k in combo})
    block["parallel"] = par
    return block


def candidate_blocks(space: SearchSpace, num_gpus: int) -> Iterator[dict[str, Any]]:
    """Every raw combination as a training block (dp derived); None-combinations skipped."""
    names = list(space.axes)
    for values in itertools.product(*(space.axes[n] for n in names)):
        block = _candidate(space, dict(zip(names, values, strict=True)), num_gpus)
        if block is not None:
            yield block


def check_block(block: Mapping[str, Any], *, model, hw: HardwareSpec, cluster: ClusterSpec,
                source: str | None = None) -> TrainingSpec:
    """The same checks `simulate` applies: field parsing, then `validate_layout`."""
    spec = parse_training(block, source)
    validate_layout(model, hw, cluster, spec, source=source)
    par = spec.parallel
    chunks = par.pp * par.vpp
    # NOTE: validate_layout only warns on uneven splits, but with ceil(layers/chunks) layers per
    # virtual stage the last ones can end up empty, which the simulator cannot run; skip them.
    if -(-model.layers // chunks) * (chunks - 1) >= model.layers:
        raise SpecError("training.parallel.pp", f"pp*vpp={chunks} leaves a stage without layers "
                        f"(layers={model.layers})", source=source)
    return spec


def quick_reject(block: Mapping[str, Any]) -> bool:
    """Combinations `validate_layout` rejects, found without parsing (a subset of its rules:
    vpp > 1 only with the interleaved schedule and back, whole micro-batches per DP rank)."""
    par = block["parallel"]
    vpp, pp, dp = par.get("vpp", 1), par.get("pp", 1), par.get("dp", 1)
    mb, gb, sched = block.get("micro_batch", 1), block.get("global_batch"), \
        block.get("schedule", "1f1b")
    if not all(type(v) is int for v in (vpp, pp, dp, mb, gb)) or sched not in \
            ("1f1b", "interleaved", "gpipe"):
        return False  # let the full checks name the problem
    if (sched == "interleaved") != (vpp > 1) or (sched == "interleaved" and pp < 2):
        return True
    return gb % (mb * dp) != 0


def enumerate_layouts(space: SearchSpace, *, model, hw: HardwareSpec, cluster: ClusterSpec
                      ) -> tuple[list[dict[str, Any]], int]:
    """(valid training blocks in enumeration order, raw candidates examined)."""
    valid, raw = [], 0
    for block in candidate_blocks(space, cluster.num_gpus):
        raw += 1
        try:
            check_block(block, model=model, hw=hw, cluster=cluster)
        except SpecError:
            continue
        valid.append(block)
    return valid, raw


_SERVING_INT_AXES = ("tp", "pp", "ep", "max_num_seqs", "chunk_size")


def parse_serving_space(doc: Mapping[str, Any], axes: tuple[str, ...], *,
                        source: str | None = None) -> tuple[Mapping[str, Any], int]:
    """(the ``search`` block, hardware.num_gpus) of a serving search, every value checked: an
    axis is a non-empty list; degrees and batch sizes integers >= 1; the product bounded."""
    hardware = doc.get("hardware")
    if not isinstance(hardware, Mapping):
        raise SpecError("hardware", "expected a mapping", source=source)
    num_gpus = int_value(hardware.get("num_gpus"), "hardware.num_gpus", source=source)
    space = doc.get("search", {})
    if not isinstance(space, Mapping):
        raise SpecError("search", "expected a mapping", source=source)
    bad = sorted((k for k in space if k not in axes), key=str)
    if bad:
        raise SpecError(f"search.{bad[0]}", f"unknown axis; known: {', '.join(axes)}",
                        source=source)
    size = 1
    for axis, values in space.items():
        path = f"search.{axis}"
        if not isinstance(values, list) or not values:
            raise SpecError(path, f"must be a non-empty list, got {values!r}", source=source)
        check_work(path, len(values), MAX_LIST, "listed values", source=source)
        for i, value in enumerate(values):
            if axis in _SERVING_INT_AXES:
                int_value(value, f"{path}[{i}]", source=source, maximum=MAX_RANGE)
            elif axis == "disaggregated" and not isinstance(value, Mapping):
                raise SpecError(f"{path}[{i}]", "expected {prefill: ..., decode: ...}",
                                source=source)
            elif axis in ("precision", "scheduler") and not isinstance(value, str):
                raise SpecError(f"{path}[{i}]", f"expected a name, got {value!r}",
                                source=source)
        size *= len(values)
    check_work("search", size, MAX_CANDIDATES, "candidate configurations", source=source)
    return space, num_gpus
