# SPDX-License-Identifier: Apache-2.0
"""Step-cost tables: how long one batched forward takes, built once from the engine chain.

A serving simulation runs ~10^5 steps, too many to ask the engine chain for every operator of
every step. The dense part of a step (every layer's projections, MLP, norms, TP collectives, LM
head) depends only on the token count, so it is asked from the chain (store -> XGBoost ->
roofline) once per distinct count and memoised: exact, not interpolated. The attention core
depends on each sequence's context, so before the run we evaluate the prefill core at a grid of
chunk lengths (interpolating the time per causal pair) and the decode core at a grid of (batch,
context) points, fitted as ``a * seqs + b * kv_tokens`` by least squares (its cost is streaming
the KV cache); the fit's worst relative error on its grid is kept in `fit_error` for the report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analytical.attention_span import AttentionKind, causal_pairs
from analytical.comm import p2p_time
from analytical.dtypes import DType
from analytical.hardware import HardwareSpec
from analytical.layer_spec import LayerPhase, TokenBatch
from analytical.model import ModelSpec
from analytical.ops import OpSpec
from simulate.costs import add_engine_time
from simulate.engines import Estimator
from simulate.inference.graph_replay import EngineKernels
from simulate.inference.layer_ops import (
    Fusions,
    LoraSpec,
    Sharding,
    attention_specs,
    lm_head_ops,
    step_ops,
)
from simulate.serving.state import Span, StepShape

_DECODE_BATCHES = (1, 4, 16, 64, 256)
_DECODE_CONTEXTS = (128, 512, 2048, 8192, 32768)


def token_grid(max_tokens: int) -> list[int]:
    """1..max_tokens, dense at small counts, then ~1.25x steps (always including max)."""
    grid = {1, 2, 3, 4, 6, 8}
    t = 8.0
    while t < max_tokens:
        t *= 1.25
        grid.add(min(int(round(t)), max_tokens))
    grid.add(max_tokens)
    return sorted(g for g in grid if g <= max_tokens)


def _interp(grid: np.ndarray, values: np.ndarray, x: float) -> float:
    if x <= 0:
        return 0.0
    if x <= grid[-1]:
        return float(np.interp(x, grid, values))
    slope = (values[-1] - values[-2]) / (grid[-1] - grid[-2]) if len(grid) > 1 else 0.0
    return float(values[-1] + slope * (x - grid[-1]))


class DenseCost:
    """Exact time of a step's dense part and LM head per token count, memoised, with the
    seconds each engine answered. With ``kernels`` (a serving engine) each op is priced as the
    engine runs it (`simulate.inference.graph_replay`); None: as measured."""

    def __init__(self, model: ModelSpec, shard: Sharding, weight_dtype: DType,
                 estimator: Estimator, lora: LoraSpec | None, *, fusions: Fusions | None = None,
                 kernels: EngineKernels | None = None) -> None:
        self._args = (model, shard, weight_dtype, lora)
        self._fusions = fusions
        self._estimator = estimator
        self._kernels = kernels
        self._memo: dict[tuple[str, int], tuple[float, dict[str, float]]] = {}

    def _ops(self, part: str, tokens: int) -> list[tuple[OpSpec, float]]:
        model, shard, wdtype, lora = self._args
        if part == "dense":
            return step_ops(model, tokens=tokens, shard=shard, weight_dtype=wdtype, lora=lora,
                            fusions=self._fusions)
        return [(op, 1) for op in lm_head_ops(model, tokens, shard, wdtype)]

    def prewarm(self, part: str, counts: Sequence[int]) -> None:
        """Evaluate many token counts in one batched engine call."""
        todo = [c for c in dict.fromkeys(counts) if c > 0 and (part, c) not in self._memo]
        ops = [(c, op, n) for c in todo for op, n in self._ops(part, c)]
        answers = self._estimator.estimate_many([op for _, op, _ in ops])
        acc: dict[int, dict[str, float]] = {c: {} for c in todo}
        for (c, op, n), est in zip(ops, answers, strict=True):
            seconds, engine = (est.latency_s, est.engine) if self._kernels is None \
                else self._kernels.seconds(est, op, c)
            add_engine_time(acc[c], {engine: seconds}, n)
        for c, engines in acc.items():
            self._memo[(part, c)] = (sum(engines.values()), engines)

    def get(self, part: str, tokens: int) -> tuple[float, dict[str, float]]:
        if tokens <= 0:
            return 0.0, {}
        key = (part, tokens)
        if key not in self._memo:
            self.prewarm(part, [tokens])
        return self._memo[key]


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowTable:
    """The sliding-window or chunked layers of a model: their share of its layers and their
    prefill core time per kept pair (`windowed_blocks` kernels; decode reads capped keys)."""

    kind: AttentionKind
    span: int
    share: float  # fraction of the model's layers of this kind
    prefill_per_pair_s: np.ndarray  # as if every layer were of this kind


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCostTables:
    """Step-cost model of one instance (a request crosses all its pipeline stages)."""

    dense: DenseCost  # exact dense part and LM head per token count
    prefill_len_grid: np.ndarray
    prefill_per_pair_s: np.ndarray  # attention core time per causal pair, all layers full
    decode_per_seq_s: float  # decode attention: a (per sequence)
    decode_per_kv_s: float  # decode attention: b (per KV token read)
    pp_hop_s_per_token: float  # activation send/recv between stages, per token
    pp: int
    fit_error: float  # worst relative error of the decode-attention fit on its grid
    attention_share: dict[str, dict[str, float]]  # prefill/decode -> engine -> fraction
    full_share: float = 1.0  # fraction of full-attention layers
    windowed: tuple[WindowTable, ...] = ()

    @property
    def spans(self) -> tuple[Span, ...]:
        """The windowed (kind, span)s whose pairs and keys `step_shape` must count."""
        return tuple((w.kind, w.span) for w in self.windowed)

    def attention_parts(self, shape: StepShape) -> tuple[float, float, float]:
        """Seconds of (prefill attention, decode attention, pipeline hops); each layer kind
        weighs its own pairs and keys (`StepShape.windowed`) by its share of the layers."""
        prefill = decode = hops = 0.0
        found = {(kind, span): (pairs, keys) for kind, span, pairs, keys in shape.windowed}
        if shape.prefill_chunks:
            mean_chunk = max(1.0, (shape.tokens - shape.decode_q * shape.decode_seqs)
                             / shape.prefill_chunks)
            grid = self.prefill_len_grid
            prefill = self.full_share * shape.prefill_pairs * _interp(
                grid, self.prefill_per_pair_s, mean_chunk) + sum(
                w.share * found[(w.kind, w.span)][0] * _interp(grid, w.prefill_per_pair_s,
                                                               mean_chunk) for w in self.windowed)
        if shape.decode_seqs:
            keys = self.full_share * shape.decode_kv + sum(
                w.share * found[(w.kind, w.span)][1] for w in self.windowed)
            decode = shape.decode_seqs * self.decode_per_seq_s + keys * self.decode_per_kv_s
        if self.pp > 1:
            hops = (self.pp - 1) * self.pp_hop_s_per_token * shape.tokens
        return prefill, decode, hops

    def step_time(self, shape: StepShape) -> float:
        return (self.dense.get("dense", shape.dense_tokens)[0]
                + self.dense.get("lm", shape.logits)[0] + sum(self.attention_parts(shape)))


class MeteredCost:
    """Wraps tables and counts what the simulated steps used, for the engine coverage: token
    counts of the dense part and LM head, seconds of each attention part."""

    def __init__(self, tables: StepCostTables) -> None:
        self.tables = tables
        self.dense_counts: dict[int, int] = {}
        self.lm_counts: dict[int, int] = {}
        self.attention_s = {"prefill": 0.0, "decode": 0.0, "pp": 0.0}

    def step_time(self, shape: StepShape) -> float:
        tables = self.tables
        self.dense_counts[shape.dense_tokens] = self.dense_counts.get(shape.dense_tokens, 0) + 1
        self.lm_counts[shape.logits] = self.lm_counts.get(shape.logits, 0) + 1
        prefill, decode, hops = tables.attention_parts(shape)
        acc = self.attention_s
        acc["prefill"] += prefill
        acc["decode"] += decode
        acc["pp"] += hops
        return (tables.dense.get("dense", shape.dense_tokens)[0]
                + tables.dense.get("lm", shape.logits)[0] + prefill + decode + hops)

    def engine_seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for part, counts in (("dense", self.dense_counts), ("lm", self.lm_counts)):
            for tokens, n in counts.items():
                add_engine_time(out, self.tables.dense.get(part, tokens)[1], n)
        shares = {**self.tables.attention_share, "pp": {"roofline": 1.0}}
        for part, seconds in self.attention_s.items():
            add_engine_time(out, shares.get(part, {}), seconds)
        return out


def build_tables(model: ModelSpec, hw: HardwareSpec, shard: Sharding, *, weight_dtype: DType,
                 kv_dtype: DType, estimator: Estimator, max_tokens: int = 8192, decode_q: int = 1,
                 lora: LoraSpec | None = None, fusions: Fusions | None = None,
                 graph_max_tokens: int | None = None) -> StepCostTables:
    """Build the step-cost model, asking the engine chain in a few batched calls.

    `estimator.estimate_many(ops)` prices each op and names its engine (batched, as the chain);
    the dense part is prewarmed on a grid of token counts and filled exactly on demand. Layers per
    pipeline stage are `model.layers / pp` but a request crosses all stages, so a step's latency
    sums them all (no micro-batch pipelining inside one step, as in vLLM's PP without virtual
    engines). ``fusions``: the serving engine's operator composition (`layer_ops.Fusions`;
    None: every operator a kernel of its own). ``graph_max_tokens`` set (a serving engine's largest CUDA graph, 0 for none) prices
    the dense part as the engine runs it (`graph_replay.EngineKernels`); None: as measured.
    """
    grid = token_grid(max_tokens)
    kernels = None if graph_max_tokens is None else EngineKernels(
        hw=hw, graph_max_tokens=graph_max_tokens)
    dense = DenseCost(model, shard, weight_dtype, estimator, lora,
                      fusions=fusions, kernels=kernels)
    dense.prewarm("dense", grid)
    dense.prewarm("lm", grid)
    attn_dtype = kv_dtype if kv_dtype in (DType.BF16, DType.FP16, DType.FP8) else DType.BF16
    prefill_grid = [L for L in grid if L >= 16] or [grid[-1]]
    counts = Counter(model.layer_kinds)
    decode_points = [(b, c) for b in _DECODE_BATCHES for c in _DECODE_CONTEXTS]
    tables, share = _attention_times(model, shard, estimator, counts, prefill_grid,
                                     decode_points, attn_dtype, decode_q)
    decode = tables["decode"]
    windowed = tuple(
        WindowTable(kind=k, span=model.attention_span(k), share=counts[k] / model.layers,
                    prefill_per_pair_s=tables[k] / np.array(
                        [causal_pairs(k, 0, L, model.attention_span(k)) for L in prefill_grid]))
        for k in counts if k is not AttentionKind.FULL)
    prefill = tables[AttentionKind.FULL]
    pairs = np.array([L * (L + 1) / 2.0 for L in prefill_grid])
    # decode attention ~ a * B + b * (B * ctx): least squares on the grid, relative weighting
    x = np.array([[b, b * (c + decode_q)] for b, c in decode_points], dtype=float)
    w = 1.0 / np.maximum(decode, 1e-12)
    coef, *_ = np.linalg.lstsq(x * w[:, None], decode * w, rcond=None)
    a, b = (max(float(v), 0.0) for v in coef)
    fitted = x @ np.array([a, b])
    fit_error = float(np.max(np.abs(fitted - decode) / np.maximum(decode, 1e-12)))
    hop = 0.0
    if shard.pp > 1:
        same_node = shard.tp * shard.pp <= hw.gpus_per_node
        # per token, from a 1024-token bf16 activation message between stages
        hop = p2p_time(model.hidden * 2.0 * 1024, hw, same_node=same_node) / 1024
    return StepCostTables(
        dense=dense, prefill_len_grid=np.array(prefill_grid, dtype=float),
        prefill_per_pair_s=prefill / pairs, decode_per_seq_s=a, decode_per_kv_s=b,
        pp_hop_s_per_token=hop, pp=shard.pp, fit_error=fit_error, attention_share=share,
        full_share=counts[AttentionKind.FULL] / model.layers, windowed=windowed,
    )


def _attention_times(model: ModelSpec, shard: Sharding, estimator: Estimator,
                     counts: Counter[AttentionKind], prefill_grid: list[int],
                     decode_points: list[tuple[int, int]], attn_dtype: DType, decode_q: int
                     ) -> tuple[dict[str, np.ndarray], dict[str, dict[str, float]]]:
    """All-layer attention core times in one batched call: per attention kind the prefill cores
    on ``prefill_grid`` as if every layer were of that kind, and the decode cores (a windowed
    layer runs the full kernel over its capped keys, `attention_span.decode_keys`); with the
    engines' share of each part, weighted by the layers of each kind."""
    kinds = [AttentionKind.FULL, *(k for k in counts if k is not AttentionKind.FULL)]
    ops: list[OpSpec] = []
    plan: list[tuple[str, int, float, float]] = []  # (table, grid index, multiplicity, share)
    for kind in kinds:
        weight = 1.0 if counts[kind] == model.layers else counts[kind] / model.layers
        for i, length in enumerate(prefill_grid):
            for op, n in attention_specs(model, shard, TokenBatch(seqs=1, q_len=length),
                                         LayerPhase.PREFILL, attn_dtype, kind):
                ops.append(op)
                plan.append((kind, i, float(model.layers) * n, weight))
    for i, (batch, ctx) in enumerate(decode_points):
        ((op, _),) = attention_specs(model, shard, TokenBatch(seqs=batch, q_len=decode_q,
                                                              kv_len=ctx + decode_q),
                                     LayerPhase.DECODE, attn_dtype)
        ops.append(op)
        plan.append(("decode", i, float(model.layers), 1.0))
    answers = estimator.estimate_many(ops)
    tables = {str(k): np.zeros(len(prefill_grid)) for k in kinds}
    tables["decode"] = np.zeros(len(decode_points))
    share: dict[str, dict[str, float]] = {}
    for (table, i, mult, weight), est in zip(plan, answers, strict=True):
        tables[table][i] += mult * est.latency_s
        if weight:
            part = "decode" if table == "decode" else "prefill"
            add_engine_time(share.setdefault(part, {}), {est.engine: est.latency_s},
                            mult if weight == 1.0 else mult * weight)
    for comp in share.values():
        total = sum(comp.values()) or 1.0
        for engine in comp:
            comp[engine] /= total
    return tables, share
