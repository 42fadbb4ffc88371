# SPDX-License-Identifier: Apache-2.0
"""What an inference prediction returns: a frozen `InferenceResult`, JSON only at the edge.

`InferenceResult.to_dict` is the one place the JSON object (what ``llmsim simulate --json``
prints and the validation and search tables read) is laid out; the step records and per-request
latency arrays (for ``--trace`` / ``--plot`` / ``--format vllm-bench``) are typed fields that never
reach it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from simulate.serving.loop import StepRecord
from simulate.serving.metrics import ServingMetrics

__all__ = ["InferenceMode", "InferenceResult", "PoolReport", "RunHead", "SpeculativeReport",
           "TenantResult"]

# scalar summaries a single batch reports as the mean of its (identical) requests
_SINGLE_BATCH_MEANS = ("ttft_s", "tpot_s", "e2e_latency_s")
_SINGLE_BATCH_RATES = ("throughput_tokens_per_s", "requests_per_s")


class InferenceMode(StrEnum):
    """Which prediction ran (the JSON ``mode``)."""

    SINGLE_BATCH = "single_batch"  # no serving block: one batch of identical requests
    SERVING = "serving"  # a request stream on one instance or dp replicas
    DISAGGREGATED = "disaggregated"  # prefill and decode pools with KV transfer
    COLOCATED = "colocated"  # several models time-sharing the GPUs
    DOES_NOT_FIT = "inference"  # the verdict of a model that does not fit: no latency


@dataclass(frozen=True, slots=True, kw_only=True)
class RunHead:
    """Which scenario, model and hardware a result belongs to (the JSON's leading keys)."""

    name: str
    model: str
    hardware: str
    num_gpus: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculativeReport:
    """Speculative decoding as simulated: draft length, acceptance and the draft's weights."""

    k: int
    acceptance: float
    expected_tokens_per_step: float
    draft_memory_gib: float


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolReport:
    """One pool of a disaggregated deployment."""

    instances: int
    tp: int
    memory: Mapping[str, float]  # `simulate.inference.run.memory_report` of one instance


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantResult:
    """One co-located model: its serving metrics and its memory."""

    metrics: ServingMetrics  # `simulate.serving.metrics.summarize_tenants`
    memory: Mapping[str, float]


@dataclass(frozen=True, slots=True, kw_only=True)
class InferenceResult:
    """One inference prediction. ``metrics`` is the serving summary (latency statistics,
    throughput, goodput, KV use: `simulate.serving.metrics`); the other fields say what ran."""

    mode: InferenceMode
    metrics: ServingMetrics | None = None  # None: the verdict of a model that does not fit
    memory: Mapping[str, Any] = field(default_factory=dict)  # per GPU, GiB (or the verdict's)
    engine_coverage: Mapping[str, float] = field(default_factory=dict)  # engine -> time share
    decode_fit_error: float | None = None  # worst relative error of the decode-attention fit
    batch_size: int = 0  # single batch: requests in the batch
    kv_timeline: tuple[tuple[float, float], ...] = ()  # serving: (time s, KV utilisation)
    speculative: SpeculativeReport | None = None
    pools: Mapping[str, PoolReport] = field(default_factory=dict)  # disaggregated: by role
    kv_transfer_s: Mapping[str, float] = field(default_factory=dict)  # disaggregated: mean, max
    tenants: Mapping[str, TenantResult] = field(default_factory=dict)  # colocated: by name
    reason: str = ""  # why it does not fit
    head: RunHead | None = None
    step_records: tuple[StepRecord, ...] = ()  # executed steps (when asked: for the trace)
    latencies: Mapping[str, np.ndarray] | None = None  # per-request arrays (when asked)
    # serving under an engine preset: engine, the release asked for and the release range whose
    # defaults were used (`simulate.serving.engine_versions`)
    engine_defaults: Mapping[str, str] = field(default_factory=dict)

    @property
    def fits(self) -> bool:
        return self.mode is not InferenceMode.DOES_NOT_FIT

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``llmsim simulate --json`` prints (no step records or arrays)."""
        head = {} if self.head is None else {"name": self.head.name, "model": self.head.model,
                                             "hardware": self.head.hardware,
                                             "num_gpus": self.head.num_gpus}
        return {**head, **_BODIES[self.mode](self)}


def _speculative(r: InferenceResult) -> dict[str, Any]:
    if r.speculative is None:
        return {}
    s = r.speculative
    return {"speculative": {"k": s.k, "acceptance": s.acceptance,
                            "expected_tokens_per_step": s.expected_tokens_per_step,
                            "draft_memory_gib": s.draft_memory_gib}}


def _metrics(r: InferenceResult) -> ServingMetrics:
    if r.metrics is None:
        raise ValueError(f"a {r.mode.value} result needs its serving metrics")
    return r.metrics


def _instance(r: InferenceResult) -> dict[str, Any]:
    return {"mode": r.mode.value, "fits": True, "memory": dict(r.memory),
            "engine_coverage": dict(r.engine_coverage),
            "step_model": {"decode_attention_fit_max_rel_error": r.decode_fit_error}}


def _single_batch(r: InferenceResult) -> dict[str, Any]:
    m = _metrics(r)
    means = {key: getattr(m, key).mean for key in _SINGLE_BATCH_MEANS}
    rates = {key: getattr(m, key) for key in _SINGLE_BATCH_RATES}
    return {**_instance(r), **means, **rates, "batch_size": r.batch_size, **_speculative(r)}


def _serving(r: InferenceResult) -> dict[str, Any]:
    engine = {"engine_defaults": dict(r.engine_defaults)} if r.engine_defaults else {}
    return {**_instance(r), **_metrics(r).to_dict(), "kv_utilisation_timeline": [list(p) for p in r.kv_timeline],
            **_speculative(r), **engine}


def _disaggregated(r: InferenceResult) -> dict[str, Any]:
    return {**_metrics(r).to_dict(), "mode": r.mode.value, "fits": True,
            "memory": {role: dict(p.memory) for role, p in r.pools.items()},
            "kv_transfer_s": dict(r.kv_transfer_s),
            "pools": {role: {"instances": p.instances, "tp": p.tp} for role, p in r.pools.items()},
            "engine_coverage": dict(r.engine_coverage)}


def _colocated(r: InferenceResult) -> dict[str, Any]:
    return {"mode": r.mode.value, "fits": True,
            "tenants": {name: {**t.metrics.to_dict(), "memory": dict(t.memory)}
                        for name, t in r.tenants.items()},
            "engine_coverage": dict(r.engine_coverage)}


def _does_not_fit(r: InferenceResult) -> dict[str, Any]:
    return {"mode": r.mode.value, "fits": False, "reason": r.reason, "memory": dict(r.memory),
            **{key: None for key in _SINGLE_BATCH_MEANS + _SINGLE_BATCH_RATES}}


_BODIES = {InferenceMode.SINGLE_BATCH: _single_batch, InferenceMode.SERVING: _serving,
           InferenceMode.DISAGGREGATED: _disaggregated, InferenceMode.COLOCATED: _colocated,
           InferenceMode.DOES_NOT_FIT: _does_not_fit}
