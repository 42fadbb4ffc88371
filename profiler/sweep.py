# SPDX-License-Identifier: Apache-2.0
"""Sweep files: YAML describing which operator shapes to measure, expanded into specs.

A sweep names a device (cpu | cuda | auto), an optional global ``budget`` and a list of
``families`` entries, each with ``dtypes``, optional ``backends`` and ``budget``, and ``shapes``
given as one of ``grid`` (cartesian; a key like ``"n,k"`` couples axes), ``sample`` (seeded
log-uniform integers), ``list`` or ``model`` (the shapes a model needs, see
`profiler.sweep_model`). Expansion is deterministic: the same file gives the same ordered,
de-duplicated list of points. Errors name the file and the dotted field. Points are run by
`profiler.runner`.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from analytical.dtypes import DType, parse_dtype
from analytical.errors import SpecError
from analytical.inputs import check_work, load_yaml
from analytical.ops import OP_FAMILIES, OpSpec, op_fields, op_from_dict
from profiler.sweep_model import model_shapes
from profiler.timers import Budget

__all__ = ["BACKENDS", "DEVICES", "Sweep", "SweepEntry", "SweepPoint", "default_backends",
           "load_sweep", "parse_shard", "parse_sweep", "select_shard"]

DEVICES = ("cpu", "cuda", "auto")

# Backends each family can be measured with (see profiler.benchmarks).
BACKENDS: dict[str, tuple[str, ...]] = {
    "gemm": ("torch.matmul", "torch._scaled_mm"),
    "attention": ("sdpa.auto", "sdpa.math", "sdpa.flash", "sdpa.efficient", "sdpa.cudnn"),
    "memory": ("torch.eager",),
    "collective": ("gloo", "nccl"),
    "moe": ("torch.eager",),
}

_TOP_KEYS = ("name", "description", "device", "budget", "families")
_ENTRY_KEYS = ("family", "dtypes", "backends", "budget", "shapes")
_SHAPE_KINDS = ("grid", "sample", "list", "model")
_SAMPLE_KEYS = ("count", "seed", "ranges", "log", "multiple", "choices")
_BUDGET_KEYS = {"warmup_ms": "warmup_s", "measure_ms": "measure_s",
                "min_reps": "min_reps", "max_reps": "max_reps"}
# Our largest shipped sweep has ~4k points; each point costs at least its warm-up + measure
# budget (0.125 s by default), so 100k points is already ~3.5 h of measuring. Larger grids are
# refused before they are expanded (an 8-million-point grid would exhaust memory first).
MAX_SWEEP_POINTS = 100_000


def default_backends(family: str, device: str, dtype: DType) -> tuple[str, ...]:
    """The backends used when an entry names none."""
    if family == "gemm":
        return ("torch._scaled_mm",) if dtype == DType.FP8 else ("torch.matmul",)
    if family == "attention":
        return ("sdpa.auto",)
    if family == "collective":
        return ("nccl",) if device == "cuda" else ("gloo",)
    return ("torch.eager",)


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepPoint:
    """One operator to measure with one backend under one budget."""

    op: OpSpec
    backend: str
    budget: Budget


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepEntry:
    """One ``families`` entry after shape expansion (backends resolved per device later)."""

    family: str
    ops: tuple[OpSpec, ...]
    backends: tuple[str, ...]  # empty: `default_backends`
    budget: Budget


@dataclass(frozen=True, slots=True, kw_only=True)
class Sweep:
    """A parsed sweep file."""

    name: str
    device: str  # cpu | cuda | auto
    entries: tuple[SweepEntry, ...]
    source: str = ""

    def points(self, device: str) -> tuple[SweepPoint, ...]:
        """Ordered points for a resolved device ("cpu" or "cuda"), unique by (op key, backend)."""
        seen: set[tuple[str, str]] = set()
        out: list[SweepPoint] = []
        for entry in self.entries:
            for op in entry.ops:
                for backend in entry.backends or default_backends(entry.family, device,
                                                                  op.dtype):
                    if (op.key, backend) not in seen:
                        seen.add((op.key, backend))
                        out.append(SweepPoint(op=op, backend=backend, budget=entry.budget))
        return tuple(out)


def load_sweep(path: str | Path) -> Sweep:
    """Read and expand a sweep YAML file."""
    data = load_yaml(path, "sweep")
    path = Path(path)
    return parse_sweep(data, source=str(path), default_name=path.stem)


def parse_sweep(data: Any, *, source: str = "<sweep>", default_name: str = "sweep") -> Sweep:
    """Validate and expand a sweep mapping (already loaded from YAML/JSON)."""
    mapping = _mapping(data, "sweep", source)
    _check_keys(mapping, _TOP_KEYS, "", source)
    device = str(mapping.get("device", "auto"))
    if device not in DEVICES:
        raise SpecError("device", f"unknown device {device!r}; known: {', '.join(DEVICES)}",
                        source=source)
    budget = _budget(mapping.get("budget"), Budget(), "budget", source)
    families = mapping.get("families")
    if not isinstance(families, list) or not families:
        raise SpecError("families", "must be a non-empty list of family entries", source=source)
    entries = tuple(_entry(item, f"families[{i}]", budget, source)
                    for i, item in enumerate(families))
    check_work("families", sum(len(e.ops) * max(1, len(e.backends)) for e in entries),
               MAX_SWEEP_POINTS, "sweep points", "split the sweep into several files", source=source)
    return Sweep(name=str(mapping.get("name", default_name)), device=device, entries=entries,
                 source=source)


def _entry(item: Any, field: str, budget: Budget, source: str) -> SweepEntry:
    item = _mapping(item, field, source)
    _check_keys(item, _ENTRY_KEYS, field, source)
    family = item.get("family")
    if family not in OP_FAMILIES:
        raise SpecError(f"{field}.family", f"unknown family {family!r}; known: "
                        f"{', '.join(OP_FAMILIES)}", source=source)
    dtypes_raw = item.get("dtypes")
    if not isinstance(dtypes_raw, list) or not dtypes_raw:
        raise SpecError(f"{field}.dtypes", "must be a non-empty list of dtypes", source=source)
    dtypes = [parse_dtype(d, field=f"{field}.dtypes[{j}]", source=source)
              for j, d in enumerate(dtypes_raw)]
    backends = item.get("backends") or []
    if not isinstance(backends, list):
        raise SpecError(f"{field}.backends", "must be a list", source=source)
    for j, backend in enumerate(backends):
        if backend not in BACKENDS[family]:
            raise SpecError(f"{field}.backends[{j}]", f"unknown {family} backend {backend!r}; "
                            f"known: {', '.join(BACKENDS[family])}", source=source)
    shapes = _mapping(item.get("shapes"), f"{field}.shapes", source)
    kinds = [k for k in shapes if k in _SHAPE_KINDS]
    _check_keys(shapes, _SHAPE_KINDS, f"{field}.shapes", source)
    if len(kinds) != 1:
        raise SpecError(f"{field}.shapes", f"needs exactly one of {', '.join(_SHAPE_KINDS)}",
                        source=source)
    kind = kinds[0]
    where = f"{field}.shapes.{kind}"
    if kind == "model":
        values = model_shapes(family, shapes["model"], field=where, source=source)
    else:
        values = {"grid": _grid, "sample": _sample, "list": _list}[kind](
            family, shapes[kind], where, source)
    check_work(where, len(values) * len(dtypes), MAX_SWEEP_POINTS, "sweep points",
               "split the sweep into several files", source=source)
    ops: list[OpSpec] = []
    seen: set[str] = set()
    for dtype in dtypes:
        for shape, shape_field, strict in values:
            if "dtype" in shape:
                raise SpecError(f"{shape_field}.dtype", "set dtypes on the entry, not the shape",
                                source=source)
            op = _build(family, {**shape, "dtype": dtype.value}, shape_field, source, strict)
            if op is not None and op.key not in seen:
                seen.add(op.key)
                ops.append(op)
    if not ops:
        raise SpecError(f"{field}.shapes", "expands to no valid shape", source=source)
    return SweepEntry(family=family, ops=tuple(ops), backends=tuple(backends),
                      budget=_budget(item.get("budget"), budget, f"{field}.budget", source))


def _build(family: str, values: dict[str, Any], field: str, source: str,
           strict: bool) -> OpSpec | None:
    """A spec from values; a combination a grid or sample makes invalid is dropped, not fatal."""
    try:
        return op_from_dict(family, values, field=field, source=source)
    except SpecError:
        if strict:
            raise
        return None


def _grid(family: str, grid: Any, field: str, source: str) -> list[tuple[dict, str, bool]]:
    """Cartesian product of the axes; a key "n,k" is one axis of coupled [n, k] tuples."""
    grid = _mapping(grid, field, source)
    allowed = op_fields(family)
    axes: list[tuple[list[str], list[tuple]]] = []
    for key, value in grid.items():
        names = [part.strip() for part in str(key).split(",")]
        for name in names:
            if name not in allowed:
                raise SpecError(f"{field}.{key}", f"unknown key; allowed: {', '.join(allowed)}",
                                source=source)
        values = value if isinstance(value, list) else [value]
        if not values:
            raise SpecError(f"{field}.{key}", "empty list", source=source)
        if len(names) > 1:
            for i, item in enumerate(values):
                if not isinstance(item, list) or len(item) != len(names):
                    raise SpecError(f"{field}.{key}[{i}]", f"expected a list of {len(names)} "
                                    f"values ({key}), got {item!r}", source=source)
        axes.append((names, [tuple(v) if len(names) > 1 else (v,) for v in values]))
    check_work(field, math.prod(len(values) for _, values in axes), MAX_SWEEP_POINTS,
               "grid points", "split the sweep into several files", source=source)
    out = []
    for combo in itertools.product(*(values for _, values in axes)):
        shape: dict[str, Any] = {}
        for (names, _), values in zip(axes, combo, strict=True):
            shape.update(zip(names, values, strict=True))
        out.append((shape, field, False))
    return out


def _list(family: str, items: Any, field: str, source: str) -> list[tuple[dict, str, bool]]:
    if not isinstance(items, list) or not items:
        raise SpecError(field, "must be a non-empty list of shapes", source=source)
    out = []
    for i, item in enumerate(items):
        item = _mapping(item, f"{field}[{i}]", source)
        out.append((dict(item), f"{field}[{i}]", True))
    return out


def _sample(family: str, spec: Any, field: str, source: str) -> list[tuple[dict, str, bool]]:
    spec = _mapping(spec, field, source)
    _check_keys(spec, _SAMPLE_KEYS, field, source)
    count = spec.get("count")
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SpecError(f"{field}.count", f"must be an integer >= 1, got {count!r}", source=source)
    check_work(f"{field}.count", count, MAX_SWEEP_POINTS, "sampled points", source=source)
    seed = spec.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SpecError(f"{field}.seed", f"must be an integer, got {seed!r}", source=source)
    log = spec.get("log", True)
    if not isinstance(log, bool):
        raise SpecError(f"{field}.log", f"expected true/false, got {log!r}", source=source)
    ranges = _mapping(spec.get("ranges"), f"{field}.ranges", source)
    choices = _mapping(spec.get("choices") or {}, f"{field}.choices", source)
    allowed = op_fields(family)
    _check_keys(ranges, allowed, f"{field}.ranges", source)
    _check_keys(choices, allowed, f"{field}.choices", source)
    bounds = {name: _range(value, f"{field}.ranges.{name}", source)
              for name, value in ranges.items()}
    multiple = spec.get("multiple", 1)
    multiples = {name: _multiple(multiple.get(name, 1) if isinstance(multiple, Mapping)
                                 else multiple, f"{field}.multiple", source) for name in bounds}
    rng = random.Random(seed)
    out: list[tuple[dict, str, bool]] = []
    seen: set[tuple] = set()
    for _ in range(count * 50):  # invalid or repeated draws are redrawn; stop if too few exist
        if len(out) == count:
            break
        shape = {name: _draw(rng, lo, hi, log, multiples[name])
                 for name, (lo, hi) in bounds.items()}
        for name, value in choices.items():
            shape[name] = rng.choice(value) if isinstance(value, list) else value
        ident = tuple(sorted((k, str(v)) for k, v in shape.items()))
        if ident in seen:
            continue
        seen.add(ident)
        try:
            op_from_dict(family, {**shape, "dtype": "fp32"}, field=field, source=source)
        except SpecError as exc:
            if "unknown" in exc.reason or "expected" in exc.reason or "missing" in exc.reason:
                raise
            continue
        out.append((shape, field, True))
    return out


def _range(value: Any, field: str, source: str) -> tuple[int, int]:
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        raise SpecError(field, f"expected [lo, hi] integers, got {value!r}", source=source)
    lo, hi = value
    if lo < 1 or hi < lo:
        raise SpecError(field, f"bad range [{lo}, {hi}]: need 1 <= lo <= hi", source=source)
    return lo, hi


def _multiple(value: Any, field: str, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(field, f"must be an integer >= 1, got {value!r}", source=source)
    return value


def _draw(rng: random.Random, lo: int, hi: int, log: bool, multiple: int) -> int:
    """One integer in [lo, hi], log-uniform or uniform, rounded to a multiple inside the range."""
    x = math.exp(rng.uniform(math.log(lo), math.log(hi))) if log else rng.uniform(lo, hi)
    value = int(round(x / multiple)) * multiple
    if value < lo:
        value = -(-lo // multiple) * multiple
    if value > hi:
        value = (hi // multiple) * multiple
    return min(max(value, lo), hi)  # no multiple inside [lo, hi]: the nearest bound


def _budget(raw: Any, base: Budget, field: str, source: str) -> Budget:
    if raw is None:
        return base
    raw = _mapping(raw, field, source)
    _check_keys(raw, tuple(_BUDGET_KEYS), field, source)
    changes: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
                value) or value < 0:
            raise SpecError(f"{field}.{key}", f"must be a finite number >= 0, got {value!r}",
                            source=source)
        changes[_BUDGET_KEYS[key]] = value / 1e3 if key.endswith("_ms") else value
    try:
        return replace(base, **changes)
    except SpecError as exc:
        raise SpecError(f"{field}.{exc.field.split('.', 1)[-1]}", exc.reason,
                        source=source) from None


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` -> (i, N) with 0 <= i < N (Slurm array task ids start at 0)."""
    try:
        index_text, count_text = text.split("/")
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise SpecError("shard", f"expected i/N (e.g. 0/4), got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise SpecError("shard", f"need 0 <= i < N, got {text!r}")
    return index, count


def select_shard(points: Sequence[SweepPoint], shard: tuple[int, int] | None
                 ) -> tuple[SweepPoint, ...]:
    """Round-robin share ``i`` of ``N`` (points i, i+N, ...); all points when shard is None."""
    if shard is None:
        return tuple(points)
    index, count = shard
    return tuple(points[index::count])


def _mapping(value: Any, field: str, source: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError(field or "sweep", f"expected a mapping, got {type(value).__name__}",
                        source=source)
    return value


def _check_keys(mapping: Mapping[str, Any], allowed: Sequence[str], field: str,
                source: str) -> None:
    for key in mapping:
        if key not in allowed:
            where = f"{field}.{key}" if field else str(key)
            raise SpecError(where, f"unknown key; allowed: {', '.join(allowed)}", source=source)
