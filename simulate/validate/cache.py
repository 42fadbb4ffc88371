# SPDX-License-Identifier: Apache-2.0
"""Which cache state a validation model's operators are priced in: cold, or warm in the LLC.

The store times every operator alone with a cache flush before each call (`profiler.timers`:
64 MiB written, so operands come from DRAM), the state of an operator inside a model whose data
does not fit the caches: between two calls touching the same weight, the rest of the step's
weights and activations pass through and evict it. When the whole step's working set fits the
last-level cache (LLC), nothing evicts it: the real model runs with its weights in the LLC and
the cold prices overcount. On the lent GPU VM's 16-core Xeon, whose LLC holds these small
models, the sum of the cold per-operator medians exceeded the measured model by +17% (forward)
and +53% (generate, median) while on the 2-core EPYC (32 MiB LLC, too small for them) it was
-9% and -8% (`datasets/validation/cpu/xeon-16c-2026-11-26/`, simulate/validate/README.md).

The rule (`CacheRule.FIT`, the default) is the reuse-distance argument of cache analysis (the
data touched between two uses of a line must fit the cache for the second use to hit; Drepper,
"What every programmer should know about memory", 2007, sections 3.3 and 6.2): a (model, mode)
whose `working_set_bytes` fits this CPU's LLC (`profiler.cpu_caches`, read from sysfs) is
priced from a second store profiled with `warm_flush_bytes` instead: twice the private L2, which
evicts the operator's operands from L1 and L2 but leaves them in the LLC, where the model finds
them. Other models keep the cold store. ``cold`` and ``warm`` force one state for every model.

``measured`` (`CacheRule.MEASURED`, the default) prices every model from both stores, weighted
by how warm this machine keeps a working set of its size, measured with probe models
(`simulate.validate.warmth`): on a VM whose LLC is shared with other tenants, fitting the LLC
that sysfs reports says neither warm nor cold.

The cold flush (`cold_flush_bytes`) writes at least twice the LLC: a flush smaller than the LLC
leaves part of the operands there (the lent Xeon VM's 300 MiB L3 kept them through today's
64 MiB flush, so its "cold" prices were partly warm); twice the LLC displaces every line under
LRU-like replacement even when the LLC is a non-inclusive victim cache that only holds lines
evicted from L2 (Drepper 2007, section 3.3.2).
"""

from __future__ import annotations

from enum import StrEnum

from simulate.frontend.graph import TracedGraph

__all__ = ["CacheRule", "cold_flush_bytes", "fits_llc", "warm_flush_bytes",
           "working_set_bytes"]

MIN_WARM_FLUSH_BYTES = 2**20  # when sysfs names no L2: 1 MiB, at least one L2 of any x86 core
MIN_COLD_FLUSH_BYTES = 64 * 2**20  # the profiler's default CPU flush (profiler.timers)
# At most 4 GiB: twice the largest LLC sold (AMD Genoa-X, 1152 MiB of L3 per socket); an LLC
# size beyond it is a configuration error, and the buffer must fit in memory.
MAX_COLD_FLUSH_BYTES = 4 * 2**30


class CacheRule(StrEnum):
    """How `run_validation` chooses the cache state of a (model, mode)'s operator prices."""

    MEASURED = "measured"  # both stores, weighted by this machine's measured warmth
    FIT = "fit"  # warm in the LLC when the step's working set fits it, else cold
    COLD = "cold"  # always the cold-flushed store (the profiler's default)
    WARM = "warm"  # always the LLC-warm store


def working_set_bytes(traced: TracedGraph) -> int:
    """The bytes one step of ``traced`` keeps reusing: its parameters (twice with a backward:
    the gradients are written beside them) plus the largest activation bytes of one call (its
    bytes less the parameters it reads: a logits GEMM, an attention score matrix).

    A lower bound of the data touched between two uses of a weight: activations of different
    calls reuse the allocator's blocks, and the largest one is the peak the step must hold.
    """
    params = traced.params
    activations = max((op.bytes - sum(params[i].nbytes for i in op.params if i < len(params))
                       for op in traced.ops), default=0)
    return traced.param_bytes * (2 if traced.backward else 1) + max(0, activations)


def fits_llc(traced: TracedGraph, llc_bytes: int, rule: CacheRule = CacheRule.FIT) -> bool:
    """Whether ``traced``'s operators are priced warm in the LLC (module docstring); an
    unknown LLC (0 bytes) is never fitted. ``measured`` answers like ``fit`` (the rule it
    reports beside its own)."""
    if rule in (CacheRule.FIT, CacheRule.MEASURED):
        return 0 < working_set_bytes(traced) <= llc_bytes
    return rule == CacheRule.WARM


def warm_flush_bytes(l2_bytes: int) -> int:
    """The flush before each call of an LLC-warm profile: twice the private L2 (so L1 and L2
    hold the flush buffer, not the operands), at least `MIN_WARM_FLUSH_BYTES`."""
    return max(MIN_WARM_FLUSH_BYTES, 2 * l2_bytes)


def cold_flush_bytes(llc_bytes: int) -> int:
    """The flush before each call of a cold profile: twice the LLC (module docstring), at
    least `MIN_COLD_FLUSH_BYTES` (an unknown LLC keeps the profiler's default), at most
    `MAX_COLD_FLUSH_BYTES`."""
    return min(MAX_COLD_FLUSH_BYTES, max(MIN_COLD_FLUSH_BYTES, 2 * llc_bytes))
