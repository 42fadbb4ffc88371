# SPDX-License-Identifier: Apache-2.0
"""The CPU validation pipeline behind ``llmsim validate cpu``.

1. Trace every (model, mode) weights-free (`trace_validation_model`).
2. Collect the distinct operator specs (deduplicated by key) and profile exactly those on this
   CPU into the store, in fp32 like the models; keys already stored for this fingerprint
   (same thread count) are skipped, so a rerun measures nothing new.
3. Train the CPU predictors (XGBoost per family, `predictors`) or reuse their champions.
4. Measure the host work between operators on this machine (`host.measure_host_gap`: probe
   decoders that are not validation models, against their operators timed alone warm): the
   host work per Python-issued aten call.
   Every shape is also profiled LLC-warm into a second store (`simulate.validate.cache`), and
   probe models measure how warm this machine keeps a working set (`validate.warmth`): each
   (model, mode) is priced ``f * warm + (1 - f) * cold`` with f of its working set (rule
   ``measured``; ``fit`` takes the warm store where the working set fits the LLC, else cold).
5. Predict each trace through the engine chain (`traced.price_traced`): the sum over the
   traced calls in order, one device, no overlap, plus the host term of step 4.
   Unknown aten calls are priced by the roofline of their COPY proxy and listed with their
   share.
6. Time the real model (`measure_model`: warm-up, median of repeats) and report predicted,
   measured, error, the time share per engine and the composition error (sum of the stored
   per-op medians vs the measured model). No per-model correction of any kind.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.ops import OpSpec
from analytical.paths import llmsim_home
from profiler.cpu_caches import cpu_cache_bytes, last_level_cache_bytes
from profiler.fingerprint import Fingerprint, current_fingerprint
from profiler.measurement import point_key
from profiler.runner import RunSummary, run_sweep
from profiler.store import open_for_reading
from profiler.sweep import Sweep, SweepEntry, default_backends
from profiler.timers import Budget
from simulate.engines import EngineChain
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracedGraph
from simulate.frontend.hf import MODES
from simulate.frontend.price import price_traced
from simulate.validate.cache import (
    CacheRule,
    cold_flush_bytes,
    fits_llc,
    warm_flush_bytes,
    working_set_bytes,
)
from simulate.validate.host import PROBE_MODELS, HostGap, measure_host_gap
from simulate.validate.measure import time_models
from simulate.validate.models import VALIDATION_MODELS, trace_validation_model, validation_model
from simulate.validate.report import UnknownRow, ValidationReport, ValidationRow
from simulate.validate.training import train_families
from simulate.validate.warmth import WARMTH_PROBES, blend, measure_warmth

__all__ = ["FAST_BUDGET", "LoopConfig", "needed_ops", "needed_sweep",
           "run_validation", "stored_medians", "validation_db_path", "warm_store_path"]

# Profiling budget of the fast mode (tests): a handful of repetitions per shape.
FAST_BUDGET = Budget(warmup_s=0.0, measure_s=0.002, min_reps=3, max_reps=5)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig:
    """What `run_validation` runs and where it writes."""

    models: tuple[str, ...] = tuple(VALIDATION_MODELS)
    modes: tuple[str, ...] = MODES
    store_path: Path | None = None  # None: `validation_db_path(threads)`
    tracking_uri: str | None = None  # None: $MLFLOW_TRACKING_URI or sqlite under LLMSIM_HOME
    hardware: str = "cpu"  # catalog name (a calibrated $LLMSIM_HOME/hardware/cpu.yaml wins)
    threads: int | None = None  # torch intra-op threads for profiling AND timing (None: current)
    warmup: int = 3  # untimed model calls
    repeats: int = 10  # timed model calls (median)
    budget: Budget = field(default_factory=Budget)  # per profiled shape
    profile: bool = True  # False: use what the store holds
    train: bool = True  # False: reuse the registered champions
    fast_train: bool = False  # a small hyper-parameter search (tests)
    progress: bool = False  # rich progress bar on stderr while profiling
    cache: CacheRule = CacheRule.MEASURED  # operator prices' cache state (validate.cache)
    warmth_probes: tuple[str, ...] = tuple(WARMTH_PROBES)  # rule measured (validate.warmth)
    llc_bytes: int | None = None  # None: this CPU's last-level cache from sysfs

    def __post_init__(self) -> None:
        if not self.models:
            raise SpecError("models", "needs at least one validation model")
        for name in self.models:
            validation_model(name)
        for name in self.warmth_probes:
            if name not in WARMTH_PROBES:
                raise SpecError("warmth_probes", f"unknown probe {name!r}; known: "
                                f"{', '.join(WARMTH_PROBES)}")
        for mode in self.modes:
            if mode not in MODES:
                raise SpecError("modes", f"unknown mode {mode!r}; known: {', '.join(MODES)}")
        if self.repeats < 1 or self.warmup < 1:
            raise SpecError("repeats" if self.repeats < 1 else "warmup", "must be at least 1")
        if self.threads is not None and self.threads < 1:
            raise SpecError("threads", f"must be at least 1, got {self.threads}")


def _costed(traced: TracedGraph) -> list[tuple[OpSpec, bool]]:
    """(spec, is_unknown) for every costed call, in order."""
    return [(op.spec, op.category == Category.UNKNOWN) for op in traced.ops
            if op.spec is not None]


def needed_ops(traces: Sequence[TracedGraph]) -> list[OpSpec]:
    """Distinct specs (by key, first-seen order) of the known calls of ``traces``.

    Unknown calls are left out: they are priced by the roofline and listed, not profiled.
    """
    seen: dict[str, OpSpec] = {}
    for traced in traces:
        for spec, unknown in _costed(traced):
            if not unknown and spec.family != "collective":
                seen.setdefault(spec.key, spec)
    return list(seen.values())


def needed_sweep(ops: Sequence[OpSpec], *, budget: Budget, name: str = "validate-cpu") -> Sweep:
    """A CPU sweep holding exactly ``ops``, one entry per family, default backends."""
    by_family: dict[str, list[OpSpec]] = {}
    for op in ops:
        by_family.setdefault(op.family, []).append(op)
    entries = tuple(SweepEntry(family=family, ops=tuple(specs), backends=(), budget=budget)
                    for family, specs in by_family.items())
    return Sweep(name=name, device="cpu", entries=entries, source=name)


def validation_db_path(threads: int) -> Path:
    """The loop's own store, one per thread count: ``$LLMSIM_HOME/validate/cpu-t<N>.duckdb``.

    The store engine looks rows up by hardware name only, so rows of another thread count
    in a shared store would be mixed into the medians; a store per thread count keeps the
    validation self-contained (``--db`` points it elsewhere).
    """
    return llmsim_home() / "validate" / f"cpu-t{threads}.duckdb"


def warm_store_path(store_path: Path) -> Path:
    """The LLC-warm store beside the cold one: ``cpu-t1.duckdb`` -> ``cpu-t1-llc.duckdb``."""
    return store_path.with_name(f"{store_path.stem}-llc{store_path.suffix}")


def _fingerprint(threads: int) -> Fingerprint:
    """The fingerprint `run_sweep` records for a CPU run with ``threads`` threads."""
    return replace(current_fingerprint("cpu"), device_count=threads)


def stored_medians(ops: Sequence[OpSpec], store_path: Path | str | None,
                   fingerprint: Fingerprint) -> dict[str, float]:
    """Measured median (s) per op key, from the rows profiled here with ``fingerprint``.

    Exact point keys (op, fingerprint, default backend), so rows of another thread count or
    another machine never enter the composition sum.
    """
    path = Path(store_path) if store_path is not None else None
    wanted: dict[str, dict[str, str]] = {}
    for op in ops:
        backend = default_backends(op.family, "cpu", op.dtype)[0]
        wanted.setdefault(op.family, {})[point_key(op, fingerprint, backend)] = op.key
    if path is not None and not path.is_file():
        return {}
    out: dict[str, float] = {}
    with open_for_reading(path, required=True) as store:
        for family, keys in wanted.items():
            frame = store.frame(family, hardware=fingerprint.hardware)
            if frame.empty:
                continue
            hits = frame[frame["point_key"].isin(list(keys))]
            for point, median in zip(hits["point_key"], hits["median_s"], strict=True):
                out[keys[point]] = float(median)
    return out


def _composition(traced: TracedGraph, medians: dict[str, float]) -> tuple[float | None, int]:
    specs = [spec for spec, unknown in _costed(traced) if not unknown]
    missing = sum(1 for spec in specs if spec.key not in medians)
    return (None if missing else sum(medians[s.key] for s in specs)), missing


def run_validation(config: LoopConfig, *,
                   on_stage: Callable[[str], None] | None = None) -> ValidationReport:
    """Trace, profile, train, predict and measure; see the module docstring.

    ``on_stage`` is called with a short label as each stage starts (for a CLI status line).
    """
    import torch  # noqa: PLC0415

    def stage(label: str) -> None:
        if on_stage is not None:
            on_stage(label)

    threads = config.threads or torch.get_num_threads()
    store_path = Path(config.store_path or validation_db_path(threads))
    hw = get_hardware(config.hardware)
    elapsed: dict[str, float] = {}
    stages: dict[str, object] = {"store": str(store_path)}
    started = time.perf_counter()

    stage("trace")
    traces = {(name, mode): trace_validation_model(validation_model(name), mode)
              for name in config.models for mode in config.modes}
    ops = needed_ops(list(traces.values()))
    llc = last_level_cache_bytes() if config.llc_bytes is None else config.llc_bytes
    warm = {key: fits_llc(traced, llc, config.cache) for key, traced in traces.items()}
    measured_rule = config.cache == CacheRule.MEASURED
    warm_ops = ops if measured_rule else needed_ops(
        [traced for key, traced in traces.items() if warm[key]])
    elapsed["trace"] = time.perf_counter() - started

    _profile_and_train(config, ops, hw.name, store_path, threads, stage=stage, stages=stages,
                       elapsed=elapsed, flush_bytes=cold_flush_bytes(llc))
    warm_path = _profile_warm(config, warm_ops, llc, warm_store_path(store_path), threads,
                              stage=stage, stages=stages, elapsed=elapsed)

    host, fractions = _host_and_warmth(config, traces, warm, llc, threads, stage=stage,
                                       stages=stages, elapsed=elapsed)
    stage("predict")
    t0 = time.perf_counter()
    stores = {False: (store_path, ops)} | ({True: (warm_path, warm_ops)} if warm_path else {})
    priced, medians, cache = _predict(traces, fractions, warm, stores, hw, config.tracking_uri,
                                      threads, measured_rule)
    # The same traces without the store: what the predictors alone say (in-sample shapes).
    no_store = EngineChain(hw, use_store=False, tracking_uri=config.tracking_uri)
    model_only = {key: price_traced(traced, no_store, hw) for key, traced in traces.items()}
    elapsed["predict"] = time.perf_counter() - t0

    stage("measure")
    t0 = time.perf_counter()
    timings = time_models(config.models, config.modes, threads=threads,
                          warmup=config.warmup, repeats=config.repeats)
    elapsed["measure"] = time.perf_counter() - t0

    rows, unknown_rows = _report_rows(traces, priced, model_only, medians, timings, host, cache)
    elapsed["total"] = time.perf_counter() - started
    stages["loadavg_1m_end"] = os.getloadavg()[0]  # other work on the machine skews timings
    return ValidationReport(rows=tuple(rows), unknown=tuple(unknown_rows), hardware=hw.name,
                            threads=threads, stages=stages, elapsed_s=elapsed)


def _host_and_warmth(config: LoopConfig, traces, fits: dict[tuple[str, str], bool],
                     llc_bytes: int, threads: int, *, stage: Callable[[str], None],
                     stages: dict[str, object], elapsed: dict[str, float]
                     ) -> tuple[HostGap, dict[tuple[str, str], float]]:
    """The host work per call (`host.py`'s probes) and the weight of the LLC-warm store per
    (model, mode): measured by `warmth.py`'s probes under rule ``measured``, else 1 or 0 as
    the rule says (``fits``)."""
    stage("host")
    t0 = time.perf_counter()
    probes = {name: trace_validation_model(spec, "generate")
              for name, spec in PROBE_MODELS.items()}
    host = measure_host_gap(probes, threads=threads, warmup=config.warmup)
    stages["host"] = host.to_dict()
    elapsed["host"] = time.perf_counter() - t0
    if config.cache != CacheRule.MEASURED:
        return host, {key: float(hot) for key, hot in fits.items()}
    stage("warmth")
    t0 = time.perf_counter()
    curve, points = measure_warmth(
        {name: WARMTH_PROBES[name] for name in config.warmth_probes}, config.modes,
        threads=threads, host=host, cold_flush=cold_flush_bytes(llc_bytes),
        warm_flush=warm_flush_bytes(cpu_cache_bytes(2)), warmup=config.warmup, elapsed=elapsed)
    stages["warmth"] = {"points": [p.to_dict() for p in points], "curve": curve.to_dict()}
    elapsed["warmth"] = time.perf_counter() - t0
    return host, {key: curve.fraction(key[1], working_set_bytes(traced))
                  for key, traced in traces.items()}


def _profile_and_train(config: LoopConfig, ops, hardware: str, store_path, threads: int, *,
                       stage: Callable[[str], None], stages: dict[str, object],
                       elapsed: dict[str, float], flush_bytes: int) -> None:
    """Measure the traced shapes into the store and train each family on them, as configured;
    record what each stage did in ``stages`` and how long it took in ``elapsed``."""
    if config.profile:
        stage(f"profile {len(ops)} shapes")
        t0 = time.perf_counter()
        summary: RunSummary = run_sweep(needed_sweep(ops, budget=config.budget),
                                        store_path, device="cpu", threads=threads,
                                        progress=config.progress, command="validate cpu",
                                        flush_bytes=flush_bytes)
        stages["profile"] = {"shapes": len(ops), "skipped": summary.skipped, "flush_mb":
                             flush_bytes / 2**20,
                             "measured": summary.measured, "statuses": summary.statuses}
        elapsed["profile"] = time.perf_counter() - t0

    families = sorted({op.family for op in ops})
    if config.train:
        stage(f"train {', '.join(families)}")
        t0 = time.perf_counter()
        stages["train"] = train_families(hardware, families, store_path=store_path,
                                         tracking_uri=config.tracking_uri,
                                         fast=config.fast_train)
        elapsed["train"] = time.perf_counter() - t0


def _predict(traces, fractions: dict[tuple[str, str], float],
             fits: dict[tuple[str, str], bool], stores: dict[bool, tuple[Path, list[OpSpec]]],
             hw, tracking_uri: str | None, threads: int, measured_rule: bool
             ) -> tuple[dict, dict, dict]:
    """Each trace priced ``f * warm + (1 - f) * cold`` through the chains of the two stores
    (``stores[hot]``: path and the ops profiled there; f = 0 when no warm store exists), the
    stored medians (warm, cold) for its compositions with f and whether it fits the LLC (the
    ``fit`` rule's composition), and its cache label."""
    fractions = {key: f if True in stores else 0.0 for key, f in fractions.items()}
    fingerprint = _fingerprint(threads)
    medians = {hot: stored_medians(ops, path, fingerprint) for hot, (path, ops) in stores.items()}
    chains = {hot: EngineChain(hw, store_path=path, tracking_uri=tracking_uri)
              for hot, (path, _) in stores.items()}
    priced = {}
    for key, traced in traces.items():
        cold = price_traced(traced, chains[False], hw)
        priced[key] = (cold if fractions[key] == 0 else
                       blend(price_traced(traced, chains[True], hw), cold, fractions[key]))
    warm_medians = medians.get(True, medians[False])
    return (priced,
            {key: (warm_medians, medians[False], fractions[key], fits[key]) for key in traces},
            {key: "measured" if measured_rule else "llc-warm" if fractions[key] else "cold"
             for key in traces})


def _profile_warm(config: LoopConfig, ops: Sequence[OpSpec], llc_bytes: int, path: Path,
                  threads: int, *, stage: Callable[[str], None], stages: dict[str, object],
                  elapsed: dict[str, float]) -> Path | None:
    """Profile ``ops`` LLC-warm into ``path`` (`simulate.validate.cache`); the store to price
    the fitting models from, None when there is none."""
    flush = warm_flush_bytes(cpu_cache_bytes(2))
    stages["cache"] = {"rule": str(config.cache), "llc_mb": llc_bytes / 2**20,
                       "warm_flush_mb": flush / 2**20, "warm_shapes": len(ops),
                       "cold_flush_mb": cold_flush_bytes(llc_bytes) / 2**20}
    if not ops:
        return None
    if config.profile:
        stage(f"profile {len(ops)} shapes LLC-warm")
        t0 = time.perf_counter()
        summary = run_sweep(needed_sweep(ops, budget=config.budget, name="validate-cpu-llc"),
                            path, device="cpu", threads=threads, progress=config.progress,
                            command="validate cpu (LLC-warm)", flush_bytes=flush)
        stages["profile_llc"] = {"shapes": len(ops), "skipped": summary.skipped,
                                 "measured": summary.measured, "statuses": summary.statuses}
        elapsed["profile_llc"] = time.perf_counter() - t0
    return path if path.is_file() else None


def _report_rows(traces, priced, model_only, medians, timings, host: HostGap,
                 cache: dict[tuple[str, str], str]
                 ) -> tuple[list[ValidationRow], list[UnknownRow]]:
    """One row per (model, mode): predicted (operators + host work), measured and composition
    (``medians`` and ``cache``: per (model, mode), the store it is priced from); plus the
    unknown ops."""
    rows: list[ValidationRow] = []
    unknown_rows: list[UnknownRow] = []
    for (name, mode), traced in traces.items():
        pred, alone = priced[(name, mode)], model_only[(name, mode)]
        warm_medians, cold_medians, fraction, fits = medians[(name, mode)]
        hot, missing = _composition(traced, warm_medians)
        cold, cold_missing = _composition(traced, cold_medians)
        composition = (None if hot is None or cold is None
                       else fraction * hot + (1 - fraction) * cold)
        measured, spread, fastest = timings[(name, mode)]
        host_s = host.seconds(traced)
        rows.append(ValidationRow(
            model=name, mode=mode, ops=pred.ops, distinct_ops=pred.distinct_ops,
            predicted_s=pred.serial_s + host_s, host_s=host_s, measured_s=measured,
            measured_spread=spread,
            measured_min_s=fastest,
            engine_share=pred.engine_share, composition_s=composition,
            composition_missing=max(missing, cold_missing),
            predictor_s=alone.serial_s + host_s,
            cache=cache[(name, mode)], working_set_bytes=working_set_bytes(traced),
            composition_cold_s=cold, cache_fraction=fraction,
            composition_fit_s=hot if fits else cold,
            predictor_xgb_share=alone.engine_share["xgboost"]))
        unknown_rows.extend(UnknownRow(model=name, mode=mode, aten=u.aten, count=u.count,
                                       bytes=u.bytes, time_s=u.time_s, share=u.share)
                            for u in pred.unknown)
    return rows, unknown_rows
