# SPDX-License-Identifier: Apache-2.0
"""How warm this CPU's caches keep a model of a given working set, measured with probe models.

The store prices every operator alone in one of two states (`simulate.validate.cache`): cold
(a flush of at least twice the LLC before each call, operands from DRAM) or LLC-warm (a flush
of twice the private L2, operands still in the LLC). A real model runs somewhere in between:
between two uses of a weight the rest of the step passes through the caches (the reuse-distance
argument, Drepper, "What every programmer should know about memory", 2007, sections 3.3 and
6.2), and on a virtual machine the LLC that sysfs reports is shared with other tenants whose
share the guest cannot see. The Xeon VMs lent for GPU work (16 vCPUs, one 300 MiB L3) showed
it: the `fit` rule priced every validation model LLC-warm (all fit 300 MiB) and most rows came
out too fast (median |error| up to 23%; `datasets/validation/cpu/xeon-16c-*`).

So this machine's warmth is measured instead of assumed. Probe decoders (GPT-NeoX, an
architecture of the framework that is NOT validated, like `host.py`'s probes) at several
widths and depths, so that their working sets span from ~2 MiB to well past a small LLC, run
each mode warm-started exactly as `measure.measure_model` times a validation model; each of
their distinct operators is timed alone cold and LLC-warm by the profiler's benchmark, and
with T the probe's measured time and H its host term (`host.HostGap`), the warm fraction is

    f = (cold_sum - (T - H)) / (cold_sum - warm_sum), clamped to [0, 1]

(1: the model runs as warm as the LLC-warm singles, 0: as cold as the cold ones). `WarmthCurve`
interpolates f per mode linearly in log(working set), constant beyond the probes' range; a
validation model is priced ``f * warm + (1 - f) * cold + host``. Probe timings stay out of the
store: the predictors train on the validation shapes only.
"""

from __future__ import annotations

import bisect
import gc
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from analytical.ops import OpSpec
from profiler.benchmarks import measure_point
from profiler.measurement import Status
from profiler.sweep import default_backends
from profiler.timers import Budget
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracedGraph
from simulate.frontend.price import TracedPrediction
from simulate.validate.cache import working_set_bytes
from simulate.validate.host import HostGap
from simulate.validate.measure import measure_model
from simulate.validate.models import (
    ValidationModel,
    build_validation_model,
    trace_validation_model,
    validation_inputs,
)

__all__ = ["WARMTH_PROBES", "WarmthCurve", "WarmthPoint", "blend", "fit_curve",
           "measure_warmth", "non_increasing", "warm_fraction"]

_TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def _neox(hidden: int, layers: int, vocab: int) -> ValidationModel:
    """A GPT-NeoX probe, 64-wide heads, a 4x MLP; 64 prompt tokens and 4 generated."""
    name = f"neox-{hidden}x{layers}-probe"
    return ValidationModel(
        name=name, config={"model_type": "gpt_neox", "hidden_size": hidden,
                           "num_hidden_layers": layers, "num_attention_heads": max(2, hidden // 64),
                           "intermediate_size": 4 * hidden, "vocab_size": vocab,
                           "max_position_embeddings": 256, "attention_dropout": 0.0,
                           "hidden_dropout": 0.0, **_TOKENS},
        batch=1, seq_len=64, new_tokens=4)


# Forward working sets ~1.9, 7.5, 30, 63 and 168 MiB (twice that with a backward): from inside
# a server core's L2-to-LLC range to past 4x a 32 MiB LLC; the whole warmth stage took
# 52-75 s on one core of the loaded 2-core dev box.
WARMTH_PROBES: dict[str, ValidationModel] = {
    p.name: p for p in (_neox(64, 2, 2048), _neox(128, 2, 4096), _neox(256, 2, 8192),
                        _neox(384, 4, 8192), _neox(512, 6, 16384))}

# Per-operator budget of the probes' singles: a few flushed calls each (they are many and only
# their sums enter f).
PROBE_BUDGET = Budget(warmup_s=0.0, measure_s=0.01, min_reps=3, max_reps=10)
PROBE_REPEATS = 5  # timed calls of each probe and mode (median)


def warm_fraction(cold_s: float, warm_s: float, measured_s: float, host_s: float
                  ) -> float | None:
    """``(cold - (measured - host)) / (cold - warm)`` clamped to [0, 1]; None when the two
    stores do not differ (cold <= warm: the point says nothing about the cache state)."""
    gap = cold_s - warm_s
    if gap <= 0 or not all(math.isfinite(v) for v in (cold_s, warm_s, measured_s, host_s)):
        return None
    return min(1.0, max(0.0, (cold_s - (measured_s - host_s)) / gap))


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmthPoint:
    """One probe and mode: its working set, measured time, both operator sums and host term."""

    probe: str
    mode: str
    working_set_bytes: int
    measured_s: float
    cold_s: float
    warm_s: float
    host_s: float

    @property
    def fraction(self) -> float | None:
        return warm_fraction(self.cold_s, self.warm_s, self.measured_s, self.host_s)

    def to_dict(self) -> dict[str, object]:
        return {"probe": self.probe, "mode": self.mode,
                "working_set_mb": self.working_set_bytes / 2**20,
                "measured_ms": self.measured_s * 1e3, "cold_ms": self.cold_s * 1e3,
                "warm_ms": self.warm_s * 1e3, "host_ms": self.host_s * 1e3, "f": self.fraction}


@dataclass(frozen=True, slots=True, kw_only=True)
class WarmthCurve:
    """f against log(working set), per mode: (bytes, f) knots sorted by bytes."""

    knots: dict[str, tuple[tuple[int, float], ...]] = field(hash=False)

    def fraction(self, mode: str, working_set: int) -> float:
        """Linear in log(working set) between knots, the end value beyond them; 0 (cold, the
        profiler's default) for a mode with no knot."""
        knots = self.knots.get(mode, ())
        if not knots:
            return 0.0
        sizes = [math.log(max(1, b)) for b, _ in knots]
        x = math.log(max(1, working_set))
        i = bisect.bisect_left(sizes, x)
        if i == 0:
            return knots[0][1]
        if i == len(knots):
            return knots[-1][1]
        (x0, f0), (x1, f1) = (sizes[i - 1], knots[i - 1][1]), (sizes[i], knots[i][1])
        return f0 if x1 == x0 else f0 + (f1 - f0) * (x - x0) / (x1 - x0)

    def to_dict(self) -> dict[str, object]:
        return {mode: [{"working_set_mb": b / 2**20, "f": f} for b, f in knots]
                for mode, knots in self.knots.items()}


def non_increasing(values: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The weighted least-squares non-increasing fit of ``values`` (pool adjacent violators,
    Barlow et al., "Statistical inference under order restrictions", 1972)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(values, weights, strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            mean, w, n = blocks.pop()
            prev = blocks[-1]
            total = prev[1] + w
            prev[0], prev[1], prev[2] = (prev[0] * prev[1] + mean * w) / total, total, prev[2] + n
    return [mean for mean, _, n in blocks for _ in range(int(n))]


def fit_curve(points: Sequence[WarmthPoint]) -> WarmthCurve:
    """Knots per mode from the points that carry a fraction: equal working sets averaged, then
    made non-increasing in the working set (a larger working set has longer reuse distances,
    so it cannot run warmer, Drepper 2007 section 3.3; what breaks the order is noise)."""
    by_mode: dict[str, dict[int, list[float]]] = {}
    for point in points:
        if (f := point.fraction) is not None:
            by_mode.setdefault(point.mode, {}).setdefault(point.working_set_bytes, []).append(f)
    knots = {}
    for mode, ws in by_mode.items():
        sizes = sorted(ws)
        fitted = non_increasing([sum(ws[b]) / len(ws[b]) for b in sizes],
                                [float(len(ws[b])) for b in sizes])
        knots[mode] = tuple(zip(sizes, fitted, strict=True))
    return WarmthCurve(knots=knots)


def _single_s(spec: OpSpec, flush_bytes: int) -> float | None:
    backend = default_backends(spec.family, "cpu", spec.dtype)[0]
    outcome = measure_point(spec, backend, PROBE_BUDGET, "cpu", flush_bytes=flush_bytes)
    return outcome.timing.median_s if outcome.status == Status.OK and outcome.timing else None


def _costable(traced: TracedGraph) -> list[OpSpec] | None:
    """The specs of every costed call in order; None when one is unknown (no store price)."""
    known = [op for op in traced.ops if op.spec is not None]
    if any(op.category in (Category.UNKNOWN, Category.COLLECTIVE) for op in known):
        return None
    return [op.spec for op in known if op.spec is not None]


def measure_warmth(probes: Mapping[str, ValidationModel], modes: Sequence[str], *,
                   threads: int, host: HostGap, cold_flush: int, warm_flush: int,
                   warmup: int = 2, repeats: int = PROBE_REPEATS,
                   elapsed: dict[str, float] | None = None
                   ) -> tuple[WarmthCurve, list[WarmthPoint]]:
    """Trace, time and price every probe in every mode (module docstring); the curve and its
    points. A (probe, mode) with an operator that is unknown or cannot run here is left out.
    ``elapsed`` receives the seconds of each part (trace, singles, models)."""
    import torch  # noqa: PLC0415

    clock = elapsed if elapsed is not None else {}
    t0 = time.perf_counter()
    traces: dict[tuple[str, str], tuple[TracedGraph, list[OpSpec]]] = {}
    for name, spec in probes.items():
        for mode in modes:
            traced = trace_validation_model(spec, mode)  # type: ignore[arg-type]
            if (specs := _costable(traced)) is not None:
                traces[(name, mode)] = (traced, specs)
    distinct = {s.key: s for _, specs in traces.values() for s in specs}
    clock["warmth_trace"], t0 = time.perf_counter() - t0, time.perf_counter()
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:  # cold and warm alternately per operator: drift of the machine hits both alike
        singles = {key: (_single_s(s, cold_flush), _single_s(s, warm_flush))
                   for key, s in distinct.items()}
    finally:
        torch.set_num_threads(previous)
    clock["warmth_singles"], t0 = time.perf_counter() - t0, time.perf_counter()
    points: list[WarmthPoint] = []
    for name, spec in probes.items():
        if not any(key[0] == name for key in traces):
            continue
        model = build_validation_model(spec)
        model.eval()
        for mode in modes:
            if (name, mode) not in traces:
                continue
            traced, specs = traces[(name, mode)]
            cold = [singles[s.key][0] for s in specs]
            warm = [singles[s.key][1] for s in specs]
            if any(v is None for v in cold + warm):
                continue
            measured = measure_model(model, validation_inputs(spec, mode),  # type: ignore[arg-type]
                                     mode=mode, warmup=warmup,  # type: ignore[arg-type]
                                     repeats=repeats, threads=threads,
                                     new_tokens=spec.new_tokens).median_s
            points.append(WarmthPoint(probe=name, mode=mode,
                                      working_set_bytes=working_set_bytes(traced),
                                      measured_s=measured, cold_s=sum(v or 0.0 for v in cold),
                                      warm_s=sum(v or 0.0 for v in warm),
                                      host_s=host.seconds(traced)))
        del model
        gc.collect()
    clock["warmth_models"] = time.perf_counter() - t0
    return fit_curve(points), points


def blend(warm: TracedPrediction, cold: TracedPrediction, fraction: float) -> TracedPrediction:
    """``fraction * warm + (1 - fraction) * cold``: the serial time and its split per engine
    and category (the unknown calls are the roofline's either way: the cold pricing's)."""
    def mix(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
        return {k: fraction * a.get(k, 0.0) + (1 - fraction) * b.get(k, 0.0)
                for k in dict.fromkeys([*a, *b])}

    return replace(cold, serial_s=fraction * warm.serial_s + (1 - fraction) * cold.serial_s,
                   per_engine_s=mix(warm.per_engine_s, cold.per_engine_s),
                   per_category_s=mix(warm.per_category_s, cold.per_category_s))
