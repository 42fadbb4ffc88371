# SPDX-License-Identifier: Apache-2.0
"""Host work between operators on a CPU, measured on this machine with probe decoders.

With one intra-op thread nothing overlaps on a CPU: the framework's Python (module calls, the
KV-cache object, mask and position helpers, output containers) and the dispatcher run between
the kernels, one after the other. The store times every operator alone after a 64 MiB cache
flush: its median holds the call's own dispatch, COLD (the flush also evicts the dispatcher's
and the kernel's code and tables), and none of the Python between calls. Inside a model the
code is warm and the Python is there; at decode shapes, where kernels take microseconds, both
differences are a large part of a step.

`measure_host_gap` measures both on this machine with probes: Hugging Face decoders of
architectures NOT in `VALIDATION_MODELS`, so narrow that every kernel is nearly free, traced and
run exactly like a validation ``generate`` (`generate_steps`). Each distinct operator of a probe
is timed alone by the profiler's own benchmark twice: COLD, as the store times it (64 MiB
flush before each call), and WARM (no flush; a probe's operands are a few hundred bytes). The
probes' timings stay out of the store, so the predictors train on the validation shapes only.
With T the probe's measured generate:

* ``per_call_s = (T - sum of warm singles) / recorded calls``: the host work per call;
* ``cold_call_s = (sum of cold singles - sum of warm singles) / costed calls``: what a cold
  single adds to a call whose data is tiny, i.e. the cold start of the call itself;

each the median over the probes. `HostGap.seconds` adds ``per_call_s`` for every call Python
issues (`host_calls`: the forward phase, views included; the backward pass is run by the C++
autograd engine, no Python between its calls) and takes ``cold_call_s`` off every costed call
priced from a cold single (data coldness, e.g. weights streamed from DRAM, stays in them).
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field

from analytical.ops import OpSpec
from profiler.benchmarks import BUILDERS, Unsupported
from profiler.sweep import default_backends
from profiler.timers import Budget, time_cpu
from simulate.frontend.aten_map import Category
from simulate.frontend.graph import TracedGraph, TracePhase
from simulate.validate.measure import measure_model
from simulate.validate.models import (
    ValidationModel,
    build_validation_model,
    validation_inputs,
)

__all__ = ["HOST_REPEATS", "PROBE_MODELS", "HostGap", "cold_calls", "host_calls",
           "measure_host_gap"]

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
_COLD_BUDGET = Budget(warmup_s=0.0, measure_s=0.05, min_reps=5, max_reps=20)  # flush ~10 ms


@dataclass(frozen=True, slots=True, kw_only=True)
class HostGap:
    """Host seconds per Python-issued aten call on this machine, and what each probe gave."""

    per_call_s: float  # host work per Python-issued call
    cold_call_s: float = 0.0  # cold start a cold single adds to each costed call
    probes: dict[str, dict[str, float]] = field(default_factory=dict, hash=False)

    def seconds(self, traced: TracedGraph) -> float:
        """What ``traced`` costs beyond its cold singles (module docstring); may be < 0."""
        return self.per_call_s * host_calls(traced) - self.cold_call_s * cold_calls(traced)

    def to_dict(self) -> dict[str, object]:
        return {"per_call_us": self.per_call_s * 1e6, "cold_call_us": self.cold_call_s * 1e6,
                "probes": self.probes}


def host_calls(traced: TracedGraph) -> int:
    """Recorded calls issued from Python: every forward-phase call, views included."""
    return sum(1 for op in traced.ops if op.phase == TracePhase.FORWARD)


def cold_calls(traced: TracedGraph) -> int:
    """Calls priced from a cold single: the costed ones, minus unknowns (roofline-priced)."""
    return sum(1 for op in traced.ops
               if op.spec is not None and op.category not in (Category.UNKNOWN,
                                                              Category.COLLECTIVE))


def _single_s(spec: OpSpec, budget: Budget, flush_bytes: int | None) -> float:
    """Median of one operator alone: the profiler's benchmark and CPU timer."""
    bench = BUILDERS[spec.family](spec, default_backends(spec.family, "cpu", spec.dtype)[0],
                                  "cpu")
    return time_cpu(bench.run, budget, prepare=bench.prepare, flush_bytes=flush_bytes).median_s


def _ops_s(traced: TracedGraph, threads: int) -> tuple[float, float] | None:
    """(cold, warm) sums over the costed calls of their single-call medians; None when a call
    is unknown or its benchmark cannot run here."""
    import torch  # noqa: PLC0415

    known = [op for op in traced.ops if op.spec is not None]
    if any(op.category in (Category.UNKNOWN, Category.COLLECTIVE) for op in known):
        return None
    distinct = {op.spec.key: op.spec for op in known if op.spec is not None}
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cold = {key: _single_s(spec, _COLD_BUDGET, None) for key, spec in distinct.items()}
        warm = {key: _single_s(spec, _WARM_BUDGET, 0) for key, spec in distinct.items()}
    except (Unsupported, RuntimeError, ValueError, TypeError, NotImplementedError):
        return None  # a probe whose operator cannot run here is left out
    finally:
        torch.set_num_threads(previous)
    keys = [op.spec.key for op in known if op.spec is not None]
    return sum(cold[k] for k in keys), sum(warm[k] for k in keys)


def measure_host_gap(traces: Mapping[str, TracedGraph], *, threads: int, warmup: int = 3,
                     repeats: int = HOST_REPEATS) -> HostGap:
    """Time each probe's generate and its operators cold and warm (module docstring).

    ``traces`` maps probe names (`PROBE_MODELS`) to their generate traces. A probe with an
    unknown or failing operator is left out; with none left both figures are 0. Negative
    figures (noise) count as 0.
    """
    probes: dict[str, dict[str, float]] = {}
    for name, traced in traces.items():
        sums = _ops_s(traced, threads)
        if sums is None:
            continue
        cold_s, ops_s = sums
        spec = PROBE_MODELS[name]
        model = build_validation_model(spec)
        model.eval()
        measured = measure_model(model, validation_inputs(spec, "generate"), mode="generate",
                                 warmup=warmup, repeats=repeats, threads=threads,
                                 new_tokens=spec.new_tokens).median_s
        del model
        gc.collect()
        calls, costed = host_calls(traced), cold_calls(traced)
        probes[name] = {"measured_ms": measured * 1e3, "warm_ops_ms": ops_s * 1e3,
                        "cold_ops_ms": cold_s * 1e3, "calls": calls, "costed": costed,
                        "per_call_us": max(0.0, measured - ops_s) / calls * 1e6,
                        "cold_call_us": max(0.0, cold_s - ops_s) / costed * 1e6}

    def median_s(key: str) -> float:
        return statistics.median(p[key] for p in probes.values()) * 1e-6 if probes else 0.0

    return HostGap(per_call_s=median_s("per_call_us"), cold_call_s=median_s("cold_call_us"),
                   probes=probes)
