# SPDX-License-Identifier: Apache-2.0
"""The engine chain: store (exact measurement) -> XGBoost champion -> cross-GPU transfer model
-> roofline / link model.

Every answer is an `Estimate` naming the engine that produced it. Requests are batched and
deduplicated by ``op.key``; answers are cached per chain, so a layer estimated once costs a dict
lookup afterwards. A store given is a store used: a named store that is missing, locked or corrupt
is a `StoreError` (exit 2), and only ``use_store=False`` skips it; the default store missing is
said once on stderr and the chain goes on without it (`profiler.store.open_for_reading`). A
missing registered model falls through to the next engine; `EngineChain.available` says which
engines could answer. A champion is not asked about
an operator with a categorical value its training rows never held (a collective kind, a dtype:
`predictors.domain`); the roofline answers it and its detail says why. The transfer model
answers only the families this GPU has no champion of.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

import numpy as np

from analytical.errors import LlmsimError
from analytical.hardware import HardwareSpec
from analytical.ops import OpSpec
from analytical.roofline import roofline_time

ENGINE_ORDER: tuple[str, ...] = ("store", "xgboost", "xgboost-transfer", "roofline")


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """One operator's predicted latency and who predicted it."""

    latency_s: float
    engine: str  # one of ENGINE_ORDER
    detail: str = ""
    stack: str = ""  # who timed the data behind it (`transfer_data.stack_of`); "" unknown


class Estimator(Protocol):
    """What prices operators: one `Estimate` per op, in order. `EngineChain` is the one the
    simulator uses; tests pass closed-form ones."""

    def estimate_many(self, ops: Sequence[OpSpec]) -> Sequence[Estimate]: ...


def _tracking_store_exists(tracking_uri: str | None) -> bool:
    """False for a local SQLite tracking store that does not exist yet: it can hold no champion,
    and opening it would create it (and take MLflow seconds to migrate)."""
    from analytical.paths import default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    if uri.startswith("sqlite:///"):
        return Path(uri.removeprefix("sqlite:///")).is_file()
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineOptions:
    """Which engines a chain may ask, passed explicitly to whatever builds a chain (hashable, so
    a search worker keys the chains it keeps on it)."""

    use_store: bool = True
    store_path: str | None = None  # None: $LLMSIM_DB or the home's default store
    use_predictors: bool = True
    tracking_uri: str | None = None  # MLflow store of the champions; None: the home's

    def checked(self) -> EngineOptions:
        """The store checked once, here, before work fans out to processes: a named store that
        cannot be used raises `StoreError` now (not once per worker), and a missing default
        store is said once and becomes ``use_store=False``."""
        if not self.use_store:
            return replace(self, store_path=None)
        from profiler.store import open_for_reading

        store = open_for_reading(self.store_path)
        if store is None:
            return replace(self, store_path=None, use_store=False)
        with store:
            return replace(self, store_path=str(store.path))


class EngineChain:
    """Ask each engine in `ENGINE_ORDER` until one answers, per operator shape."""

    def __init__(self, hardware: HardwareSpec, *, store_path: str | Path | None = None,
                 use_store: bool = True, use_predictors: bool = True,
                 tracking_uri: str | None = None) -> None:
        self.hardware = hardware
        self.options = EngineOptions(use_store=use_store, use_predictors=use_predictors,
                                     store_path=None if store_path is None else str(store_path),
                                     tracking_uri=tracking_uri)
        self._cache: dict[str, Estimate] = {}
        self._predictors: dict[str, object | None] = {}
        self._stacks: dict[str, str] = {}  # family -> stack of its champion's training rows
        self._use_predictors = use_predictors
        self._tracking_uri = tracking_uri
        self._store = self._open_store(store_path) if use_store else None
        self._ops: dict[str, OpSpec] = {}
        self._store_index: dict[str, dict[str, tuple[float, str]]] = {}  # key -> median, stack
        self.available: dict[str, bool] = {"store": self._store is not None,
                                           "xgboost": False, "xgboost-transfer": False,
                                           "roofline": True}

    @classmethod
    def from_options(cls, hardware: HardwareSpec, options: EngineOptions) -> EngineChain:
        return cls(hardware, store_path=options.store_path, use_store=options.use_store,
                   use_predictors=options.use_predictors, tracking_uri=options.tracking_uri)

    @staticmethod
    def _open_store(store_path: str | Path | None) -> object | None:
        from profiler.store import open_for_reading

        return open_for_reading(store_path)

    def _predictor(self, family: str) -> object | None:
        if family not in self._predictors:
            predictor = None
            if self._use_predictors and _tracking_store_exists(self._tracking_uri):
                from predictors.loader import load_champion
                from predictors.tracking import NoChampionError, registered_name, say_unusable
                from predictors.transfer_data import stack_of

                try:
                    predictor = load_champion(self.hardware.name, family,
                                              tracking_uri=self._tracking_uri)
                    self._stacks[family] = stack_of(predictor.info.tags.get("provenance", ""))
                except NoChampionError:  # none registered: the next engine, by design
                    predictor = None
                except Exception as exc:  # noqa: BLE001 - registered but unusable: said
                    say_unusable(registered_name(self.hardware.name, family), exc)
                    predictor = None
            self._predictors[family] = predictor
            self.available["xgboost"] |= predictor is not None
        return self._predictors[family]

    def _store_medians(self, family: str) -> dict[str, tuple[float, str]]:
        """All of this hardware's measured medians of one family, with the stack whose rows
        give each (`predictors.transfer_data.stack_of`), read once (one query) and kept: a
        serving simulation asks for hundreds of shapes one token count at a time.
        A store that fails to read (a corrupt block) raises `StoreError`: never a silent
        fall-through to the roofline."""
        if family not in self._store_index:
            from predictors.transfer_data import stack_of

            measured = self._store.measured_by_key(  # type: ignore[union-attr]
                family, self.hardware.name)
            self._store_index[family] = {key: (value, stack_of(prov) if prov else "")
                                         for key, (value, prov) in measured.items()}
        return self._store_index[family]

    def estimate(self, op: OpSpec) -> Estimate:
        """One operator (see `estimate_many`)."""
        return self.estimate_many([op])[0]

    def estimate_many(self, ops: Sequence[OpSpec]) -> list[Estimate]:
        """Estimates in the order of ``ops``; distinct shapes are asked once and cached."""
        todo: dict[str, OpSpec] = {}
        for op in ops:
            key = op.key
            if key not in self._cache and key not in todo:
                todo[key] = op
                self._ops[key] = op
        if todo:
            self._fill(todo)
        return [self._cache[op.key] for op in ops]

    def _fill(self, todo: dict[str, OpSpec]) -> None:
        if self._store is not None:
            medians = {}
            for key in list(todo):
                measured = self._store_medians(todo[key].family).get(key)
                if measured is not None:
                    medians[key] = measured
            for key, (value, stack) in medians.items():
                if value > 0:
                    self._cache[key] = Estimate(latency_s=value, engine="store",
                                                detail="median of measured runs", stack=stack)
                    todo.pop(key, None)
        by_family: dict[str, list[OpSpec]] = {}
        for op in todo.values():
            by_family.setdefault(op.family, []).append(op)
        declined: dict[str, str] = {}
        for family, all_ops in by_family.items():
            predictor = self._predictor(family)
            if predictor is None:
                continue
            family_ops = []
            for op in all_ops:
                why = predictor.outside_domain(op)  # type: ignore[attr-defined]
                if why is None:
                    family_ops.append(op)
                else:
                    declined[op.key] = f"{family} champion never trained on {why}"
            if not family_ops:
                continue
            try:
                values = np.asarray(predictor.predict(family_ops), dtype=float)  # type: ignore[attr-defined]
            except (LlmsimError, ValueError):
                continue
            for op, value in zip(family_ops, values, strict=True):
                if np.isfinite(value) and value > 0:
                    self._cache[op.key] = Estimate(latency_s=float(value), engine="xgboost",
                                                   detail=f"champion model for {family}",
                                                   stack=self._stacks.get(family, ""))
                    todo.pop(op.key, None)
        self._ask_transfer(todo, declined)
        for key, op in todo.items():
            detail = "link model" if op.family == "collective" else "roofline"
            if key in declined:
                detail = f"{detail} ({declined[key]})"
            self._cache[key] = Estimate(latency_s=roofline_time(op, self.hardware),
                                        engine="roofline", detail=detail)

    def ops_served_by(self, engines: Sequence[str]) -> list[OpSpec]:
        """Every operator asked so far whose answer came from one of ``engines``."""
        return [self._ops[k] for k, e in self._cache.items() if e.engine in engines]

    def _ask_transfer(self, todo: dict[str, OpSpec], declined: dict[str, str]) -> None:
        """The cross-GPU model (`predictors.transfer`) for the families this GPU has no
        champion of: it prices a GPU from its hardware YAML. Answers leave ``todo``.

        Where a champion exists, what it declines (a dtype, kind or phase this GPU's rows never
        held: attention backward, dropout, layernorm, fp32 optimizer passes) stays with the
        roofline, which `simulate.efficiency` re-times at the framework's own kernel (FA2 or
        cuDNN attention, fused or eager norms); the transfer model would price it as the kernel
        other GPUs' stacks timed, and did worse there (docs/validation/transfer-effects.md)."""
        if not (todo and self._use_predictors and _tracking_store_exists(self._tracking_uri)):
            return
        from predictors.transfer_answer import transfer_answers

        by_family: dict[str, list[OpSpec]] = {}
        for op in todo.values():
            if self._predictors.get(op.family) is None:
                by_family.setdefault(op.family, []).append(op)
        for family, family_ops in by_family.items():
            answer = transfer_answers(family, family_ops, self.hardware,
                                      tracking_uri=self._tracking_uri)
            self.available["xgboost-transfer"] |= answer.loaded
            for key, value in answer.seconds.items():
                self._cache[key] = Estimate(latency_s=value, engine="xgboost-transfer",
                                            detail=f"transfer model for {family}",
                                            stack=answer.stack)
                todo.pop(key, None)
                declined.pop(key, None)
            for key, why in answer.declined.items():
                declined.setdefault(key, f"{family} transfer model never trained on {why}")
