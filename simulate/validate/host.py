# SPDX-License-Identifier: Apache-2.0
"""Host work between operators on a CPU, measured on this machine with probe decoders.

With one intra-op thread nothing overlaps on a CPU: the framework's Python (module calls, the
KV-cache object, mask and position helpers, output containers) and the dispatcher run between
the kernels, one after the other. The store times every operator alone, its own call included,
so the sum of its medians misses that work; at decode shapes, where kernels take microseconds,
it is a large part of a step.

`measure_host_gap` measures it per recorded aten call with probes: Hugging Face decoders of
architectures NOT in `VALIDATION_MODELS`, so narrow (32 wide, weights of a few KB) that every
kernel is nearly free and every operand stays in the caches, traced and run exactly like a
validation ``generate`` (`generate_steps`). Each distinct operator of a probe is timed alone by
the profiler's own benchmark WARM (no flush: inside the probe its operands and code are warm),
and with T the probe's measured generate, ``per_call_s = (T - sum of its calls' warm singles) /
recorded calls``, the median over the probes. The probes' timings stay out of the store, so the
predictors train on the validation shapes only.

`HostGap.seconds` adds ``per_call_s`` for every call Python issues (`host_calls`: the forward
phase, views included; the backward pass is run by the C++ autograd engine, with no Python
between its calls) on top of the per-operator prices. Those stay the store's cold-flushed
singles: in a model whose weights do not fit the caches, other layers' data passes through
them between two calls of an operator (the premise of the flush, `profiler.timers`); only the
probe, small enough to run warm, is compared with warm singles.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from analytical.ops import OpSpec
from profiler.benchmarks import measure_point
from profiler.measurement import Status
from profiler.sweep import default_backends
from profiler.timers import Budget
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracedGraph, TracePhase
from simulate.validate.measure import measure_model
from simulate.validate.models import (
    ValidationModel,
    build_validation_model,
    validation_inputs,
)

__all__ = ["HOST_REPEATS", "PROBE_MODELS", "HostGap", "host_calls", "measure_host_gap"]

_TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
_NARROW = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
           "intermediate_size": 64, "vocab_size": 64, "max_position_embeddings": 256}

# Architectures of the framework the validation models use, none of them validated: their
# host work per call is the framework's, not a validation model's.
PROBE_MODELS: dict[str, ValidationModel] = {
    "gpt-neox-probe": ValidationModel(
        name="gpt-neox-probe", config={"model_type": "gpt_neox", **_NARROW,
                                       "attention_dropout": 0.0, "hidden_dropout": 0.0,
                                       **_TOKENS},
        batch=2, seq_len=16),
    "phi3-probe": ValidationModel(
        name="phi3-probe", config={"model_type": "phi3", **_NARROW, "num_key_value_heads": 1,
                                   **_TOKENS},
        batch=2, seq_len=16),
}

HOST_REPEATS = 30  # timed generates per probe (a few ms each): a steadier median
_WARM_BUDGET = Budget(warmup_s=0.005, measure_s=0.02, min_reps=20, max_reps=2000)


@dataclass(frozen=True, slots=True, kw_only=True)
class HostGap:
    """Host seconds per Python-issued aten call on this machine, and what each probe gave."""

    per_call_s: float  # host work per Python-issued call
    probes: dict[str, dict[str, float]] = field(default_factory=dict, hash=False)

    def seconds(self, traced: TracedGraph) -> float:
        """The host work of ``traced``: `per_call_s` for each of its `host_calls`."""
        return self.per_call_s * host_calls(traced)

    def to_dict(self) -> dict[str, object]:
        return {"per_call_us": self.per_call_s * 1e6, "probes": self.probes}


def host_calls(traced: TracedGraph) -> int:
    """Recorded calls issued from Python: every forward-phase call, views included."""
    return sum(1 for op in traced.ops if op.phase == TracePhase.FORWARD)


def _single_s(spec: OpSpec, budget: Budget, flush_bytes: int) -> float | None:
    """Median of one operator alone, measured as the profiler measures it (`measure_point`,
    the benchmark's context included); None when it cannot run here."""
    backend = default_backends(spec.family, "cpu", spec.dtype)[0]
    outcome = measure_point(spec, backend, budget, "cpu", flush_bytes=flush_bytes)
    return outcome.timing.median_s if outcome.status == Status.OK and outcome.timing else None


def _warm_ops_s(traced: TracedGraph, threads: int) -> float | None:
    """Sum over the costed calls of their warm single-call medians; None when a call is unknown
    or its benchmark cannot run here."""
    import torch  # noqa: PLC0415

    known = [op for op in traced.ops if op.spec is not None]
    if any(op.category in (Category.UNKNOWN, Category.COLLECTIVE) for op in known):
        return None
    distinct = {op.spec.key: op.spec for op in known if op.spec is not None}
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        warm = {key: _single_s(spec, _WARM_BUDGET, 0) for key, spec in distinct.items()}
    finally:
        torch.set_num_threads(previous)
    if any(v is None for v in warm.values()):
        return None  # a probe whose operator cannot run here is left out
    keys = [op.spec.key for op in known if op.spec is not None]
    return sum(warm[k] or 0.0 for k in keys)


def measure_host_gap(traces: Mapping[str, TracedGraph], *, threads: int, warmup: int = 3,
                     repeats: int = HOST_REPEATS) -> HostGap:
    """Time each probe's generate and its operators warm (module docstring).

    ``traces`` maps probe names (`PROBE_MODELS`) to their generate traces. A probe with an
    unknown or failing operator is left out; with none left the gap is 0. A negative gap
    (noise) counts as 0.
    """
    probes: dict[str, dict[str, float]] = {}
    for name, traced in traces.items():
        ops_s = _warm_ops_s(traced, threads)
        if ops_s is None:
            continue
        spec = PROBE_MODELS[name]
        model = build_validation_model(spec)
        model.eval()
        measured = measure_model(model, validation_inputs(spec, "generate"), mode="generate",
                                 warmup=warmup, repeats=repeats, threads=threads,
                                 new_tokens=spec.new_tokens).median_s
        del model
        gc.collect()
        calls = host_calls(traced)
        probes[name] = {"measured_ms": measured * 1e3, "warm_ops_ms": ops_s * 1e3,
                        "calls": calls, "per_call_us": max(0.0, measured - ops_s) / calls * 1e6}
    per_call = (statistics.median(p["per_call_us"] for p in probes.values()) * 1e-6
                if probes else 0.0)
    return HostGap(per_call_s=per_call, probes=probes)
