# SPDX-License-Identifier: Apache-2.0
"""The serving event loop: one or more tenants (models) time-share one group of GPUs.

Each iteration every tenant admits the requests that have arrived and its scheduler forms a
batch; the GPUs run the ready tenants' steps one after another (time slicing, as separate
processes without MPS do), each step costing `StepCostModel.step_time` plus a per-step CPU
overhead (hidden under the GPU step where the engine overlaps the two: `Tenant.host_overlap`). Time jumps to the next arrival when nothing is runnable. Deterministic: no wall clock,
ties broken by request id.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from analytical.errors import InfeasibleError, SpecError
from profiler.progress import advance, expect
from simulate.serving.kv_cache import BlockPool
from simulate.serving.schedulers import SCHEDULERS, SchedulerConfig, SchedulerState
from simulate.serving.state import Batch, Sequence, Span, StepShape, step_shape
from simulate.serving.stream import StreamCost, deliveries, emitting, intake
from simulate.serving.workload import Request, Workload


class StepCostModel(Protocol):
    def step_time(self, shape: StepShape) -> float: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Speculation:
    """Speculative decoding: a draft proposes k tokens, the target verifies k+1 at once.

    Each drafted token is accepted independently with probability `acceptance` until the first
    rejection; the target then adds one token of its own, so a step yields 1..k+1 tokens, with
    mean (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, eq. 1).
    """

    k: int
    acceptance: float
    draft_cost: StepCostModel  # the draft model's step-cost model
    seed: int = 0

    @property
    def expected_tokens(self) -> float:
        a = self.acceptance
        return float(self.k + 1) if a >= 1 else (1 - a ** (self.k + 1)) / (1 - a)


@dataclass(slots=True, kw_only=True)
class Tenant:
    """One model instance with its scheduler, KV pool and step costs."""

    name: str
    workload: Workload
    scheduler: str
    config: SchedulerConfig
    cost: StepCostModel
    kv_blocks: int
    kv_bytes_per_token: float
    step_overhead_s: float = 0.0  # scheduler / CPU time per step (calibratable)
    step_overhead_per_seq_s: float = 0.0  # plus this per request in the step (calibratable)
    frontend_s: float = 0.0  # a request reaches the scheduler this long after the client sent it
    # the API server tokenizes one prompt at a time, this long per token (`_send`)
    tokenize_s_per_token: float = 0.0
    host_overlap: bool = False  # the step overhead runs under the GPU step (async scheduling)
    stream: StreamCost = StreamCost()  # the API server's serial per-token output path (`stream`)
    # chunks without a token the server streams per request beside its tokens (a chat
    # response's role delta...: engine preset `chat_stream_empty_chunks`), each sent right
    # next to a token: one more ~0 s gap per chunk in a chunk-timing client's ITL
    empty_chunks: int = 0
    graph_sizes: tuple[int, ...] = ()  # CUDA-graph token counts a step is padded up to
    swap_bw_bytes_per_s: float = 0.0  # host link for swap preemption
    speculation: Speculation | None = None
    attention_spans: tuple[Span, ...] = ()  # windowed layer kinds (`StepCostTables.spans`)
    # filled while running
    state: SchedulerState | None = None
    sequences: list[Sequence] = field(default_factory=list)
    in_frontend: list[Sequence] = field(default_factory=list)  # sent, not yet at the scheduler
    # an overlapping engine formed the next batch when the running step started: requests that
    # reached it later wait one more step (None: idle or not overlapping, admit up to now)
    sched_cutoff_s: float | None = None
    tokenizer_free_s: float = 0.0  # when the API server's tokenizer finishes its queue
    stream_free_s: float = 0.0  # when the API server has streamed every token handed to it
    # closed loop: when finished requests' last tokens reached their clients (a heap), and the
    # send times of the slots freed so far, in order (request concurrency + i is sent at [i])
    slot_heap: list[float] = field(default_factory=list)
    sends: list[float] = field(default_factory=list)
    kv_trace: list[tuple[float, float]] = field(default_factory=list)
    steps: int = 0
    busy_s: float = 0.0
    # inter-token gaps (seconds) -> how many token arrivals had that gap; a step's decodes share
    # one end time, so few distinct values (vLLM bench serve's ITL: every gap between chunks)
    itl_gaps: dict[float, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord:
    """One executed step, for traces: who ran, when, and its shape."""

    tenant: str
    start_s: float
    end_s: float
    prefill_tokens: int
    decode_seqs: int


def _spec_tokens(rng: np.random.Generator, spec: Speculation, n: int) -> np.ndarray:
    """Tokens produced per sequence in one verify step: 1 + accepted drafts (truncated geom.)."""
    accepted = np.zeros(n, dtype=np.int64)
    alive = np.ones(n, dtype=bool)
    for _ in range(spec.k):
        alive &= rng.random(n) < spec.acceptance
        accepted += alive
    return accepted + 1


def run_tenants(tenants: Seq[Tenant], *, record_steps: bool = False,
                max_steps: int = 50_000_000) -> list[StepRecord]:
    """Simulate until every request of every tenant has finished."""
    records: list[StepRecord] = []
    t = 0.0
    pending = [_start(tenant) for tenant in tenants]
    cursor = [0] * len(tenants)
    closed_next = [t.workload.concurrency for t in tenants]
    in_system = [0] * len(tenants)
    rngs = [np.random.default_rng(t.speculation.seed if t.speculation else 0) for t in tenants]
    remaining = sum(len(t.workload.requests) for t in tenants)
    expect(remaining, unit="requests")
    for _ in range(max_steps):
        if remaining == 0:
            return records
        ran = False
        for ti, tenant in enumerate(tenants):
            _admit_arrivals(tenant, pending[ti], cursor, ti, t, closed_next, in_system)
            state = tenant.state
            assert state is not None
            fn = SCHEDULERS[tenant.scheduler]
            batch = fn(state)
            if batch.empty:
                _check_stuck(tenant, state)
                tenant.sched_cutoff_s = None  # idle: the next batch is formed on arrival
                continue
            dt = _step_time(tenant, batch)
            if tenant.stream.active and not tenant.stream.separate_process:
                dt += len(emitting(batch)) * tenant.stream.per_token_s  # the engine waits
            start = t
            for seq, _ in batch.prefill:
                if seq.admitted_s is None:
                    seq.admitted_s = start
            t += dt
            tenant.sched_cutoff_s = start if tenant.host_overlap else None
            tenant.busy_s += dt
            tenant.steps += 1
            finished = _apply(tenant, batch, t, rngs[ti])
            remaining -= finished
            if finished:
                advance(finished, unit="requests")
            in_system[ti] -= finished
            tenant.kv_trace.append((t, state.pool.utilisation))
            if record_steps:
                records.append(StepRecord(tenant=tenant.name, start_s=start, end_s=t,
                                          prefill_tokens=batch.prefill_tokens,
                                          decode_seqs=len(batch.decode)))
            ran = True
        if not ran:
            nxt = _next_arrival(tenants, pending, cursor, closed_next)
            if nxt is None:
                raise InfeasibleError("serving loop stalled: nothing runnable, nothing arriving")
            t = max(t, nxt)
    raise InfeasibleError(f"serving simulation exceeded {max_steps} steps")


def _start(tenant: Tenant) -> list[Request]:
    """Give the tenant a fresh scheduler state and return its requests in arrival order (a
    closed workload's first `concurrency` clients send at t=0)."""
    if tenant.scheduler not in SCHEDULERS:
        raise SpecError("serving.scheduler",
                        f"unknown {tenant.scheduler!r}; known: {', '.join(SCHEDULERS)}")
    tenant.state = SchedulerState(BlockPool(tenant.kv_blocks, tenant.config.block_size),
                                  tenant.config)
    tenant.sched_cutoff_s = None
    tenant.tokenizer_free_s = tenant.stream_free_s = 0.0
    tenant.slot_heap, tenant.sends = [], []
    tenant.state.kv_bytes_per_token = tenant.kv_bytes_per_token
    reqs = list(tenant.workload.requests)
    if tenant.workload.closed:
        reqs = [Request(id=r.id, arrival_s=0.0, input_len=r.input_len,
                        output_len=r.output_len, cached_prefix=r.cached_prefix)
                for r in reqs]
    return reqs


def _check_stuck(tenant: Tenant, state: SchedulerState) -> None:
    """An empty batch is fine while waiting for arrivals; raise when the tenant cannot move:
    running sequences without progress, or a waiting request larger than the whole KV cache."""
    if state.running and not state.waiting:
        raise InfeasibleError(f"{tenant.name}: scheduler made no progress")
    if state.waiting and not state.running:
        seq = state.waiting[0]
        raise InfeasibleError(
            f"{tenant.name}: request {seq.req.id} needs "
            f"{seq.context_target + seq.req.output_len} KV tokens; the cache holds "
            f"{tenant.kv_blocks * tenant.config.block_size}",
            details={"kv_tokens": float(tenant.kv_blocks * tenant.config.block_size)})


def _admit_arrivals(tenant: Tenant, reqs: list[Request], cursor: list[int], ti: int, t: float,
                    closed_next: list[int], in_system: list[int]) -> None:
    state = tenant.state
    assert state is not None
    while tenant.slot_heap and tenant.slot_heap[0] <= t:  # a client got its last token: resend
        tenant.sends.append(heapq.heappop(tenant.slot_heap))
        closed_next[ti] += 1
    while cursor[ti] < len(reqs):
        req = reqs[cursor[ti]]
        if tenant.workload.closed:
            if cursor[ti] >= closed_next[ti]:
                break
            # the client sends when its previous response ended (streamed: its last token
            # reached it; otherwise the step that finished it, seen now)
            slot = cursor[ti] - tenant.workload.concurrency
            sent = tenant.sends[slot] if slot >= 0 and tenant.stream.active else t
            req = Request(id=req.id, arrival_s=sent, input_len=req.input_len,
                          output_len=req.output_len, cached_prefix=req.cached_prefix)
        elif req.arrival_s > t:
            break
        seq = Sequence(req)
        _send(tenant, seq)
        tenant.sequences.append(seq)
        tenant.in_frontend.append(seq)
        cursor[ti] += 1
        in_system[ti] += 1
    # the API server (HTTP, tokenization, hand-off to the engine) delays every request by
    # frontend_s; TTFT and E2E are timed from the client's send (`req.arrival_s`). An engine
    # scheduling one step ahead (async scheduling, overlap schedulers) formed this batch when
    # the previous step started, so only requests that were there by then join it.
    cutoff = t if tenant.sched_cutoff_s is None else tenant.sched_cutoff_s
    ready = 0
    for seq in tenant.in_frontend:
        if (seq.ready_s or 0.0) > cutoff:
            break
        ready += 1
    if ready:
        state.waiting.extend(tenant.in_frontend[:ready])
        del tenant.in_frontend[:ready]


def _send(tenant: Tenant, seq: Sequence) -> None:
    """When a request just sent reaches the scheduler (`Sequence.ready_s`): after the front-end
    time, and after the API server has tokenized it, one prompt at a time in send order (vLLM's
    OpenAI server tokenizes on a single-thread executor, serving_engine.py
    ``ThreadPoolExecutor(max_workers=1)``, vllm-project/vllm issue #25301; SGLang's
    TokenizerManager and trtllm-serve tokenize in their one server process). Requests that a
    closed loop's clients send together thus reach the engine one after another, and an idle
    engine starts its step with the first (vLLM EngineCore ``run_busy_loop`` blocks on its input
    queue and steps as soon as a request is there), which is how real clients drift apart.
    Before that, the server's one CPU takes the request in (`StreamCost.per_request_s`: HTTP,
    chat template, request objects) in turn with the tokens it streams (`stream.intake`)."""
    arrived, tenant.stream_free_s = intake(tenant.stream, seq.req.arrival_s, tenant.stream_free_s)
    start = max(arrived, tenant.tokenizer_free_s)
    done = start + tenant.tokenize_s_per_token * seq.req.input_len
    if tenant.tokenize_s_per_token > 0:
        tenant.tokenizer_free_s = done
    seq.ready_s = done + tenant.frontend_s


def _next_arrival(tenants: Seq[Tenant], pending: list[list[Request]], cursor: list[int],
                  closed_next: list[int]) -> float | None:
    times = [pending[i][cursor[i]].arrival_s for i, t in enumerate(tenants)
             if cursor[i] < len(pending[i]) and not t.workload.closed]
    times += [t.in_frontend[0].ready_s or 0.0 for t in tenants if t.in_frontend]
    times += [t.slot_heap[0] for i, t in enumerate(tenants)
              if t.slot_heap and cursor[i] < len(pending[i])]
    return min(times) if times else None


def _step_time(tenant: Tenant, batch: Batch) -> float:
    spec = tenant.speculation
    q = spec.k + 1 if spec else 1
    spans = tenant.attention_spans
    shape = _padded(step_shape(batch, decode_q=q, spans=spans), tenant.graph_sizes)
    gpu = tenant.cost.step_time(shape)
    per_seq = tenant.step_overhead_per_seq_s * (len(batch.decode) + len(batch.prefill))
    # an overlapping engine prepares step n+1 while the GPU runs step n: host time shows only
    # where it outlasts the GPU step (datasets/engines/*.yaml host_overlap)
    dt = (max(gpu, tenant.step_overhead_s + per_seq) if tenant.host_overlap
          else gpu + tenant.step_overhead_s + per_seq)
    if spec and batch.decode:
        draft_shape = step_shape(Batch(decode=batch.decode), decode_q=1, spans=spans)
        dt += spec.k * spec.draft_cost.step_time(draft_shape)
    if batch.swap_bytes and tenant.swap_bw_bytes_per_s:
        dt += batch.swap_bytes / tenant.swap_bw_bytes_per_s
    return dt


def _padded(shape: StepShape, sizes: tuple[int, ...]) -> StepShape:
    """The step as the GPU runs it: its token count padded to the next captured CUDA-graph size
    (the dense layers compute the padding rows; steps above the largest size run unpadded)."""
    if not sizes or shape.tokens > sizes[-1]:
        return shape
    return replace(shape, graph_tokens=sizes[bisect.bisect_left(sizes, shape.tokens)])


def _apply(tenant: Tenant, batch: Batch, t: float, rng: np.random.Generator) -> int:
    """Advance sequences by the step's results; returns how many finished."""
    state = tenant.state
    assert state is not None
    finished = 0
    when: dict[int, float] = {}
    if tenant.stream.active and tenant.stream.separate_process:
        when, tenant.stream_free_s = deliveries(tenant.stream, emitting(batch), t,
                                                tenant.stream_free_s)
    for seq, new in batch.prefill:
        seq.prefilled += new
        if not seq.in_prefill:
            if seq.generated == 0:
                seq.generated = 1  # the prefill step samples the first token
            if seq.first_token_s is None:
                seq.first_token_s = when.get(seq.req.id, t)
                seq.last_token_s = seq.first_token_s  # a recompute emits nothing new
                if tenant.empty_chunks and seq.req.id >= tenant.workload.warmup:
                    tenant.itl_gaps[0.0] = tenant.itl_gaps.get(0.0, 0) + tenant.empty_chunks
    spec = tenant.speculation
    gaps = tenant.itl_gaps
    warmup = tenant.workload.warmup
    for seq in batch.decode:
        got = when.get(seq.req.id, t)
        if seq.last_token_s is not None and seq.req.id >= warmup:
            gap = got - seq.last_token_s
            gaps[gap] = gaps.get(gap, 0) + 1
        seq.last_token_s = got
    if batch.decode and spec:
        produced = _spec_tokens(rng, spec, len(batch.decode)).tolist()
        for seq, k in zip(batch.decode, produced, strict=True):
            seq.prefilled += k  # the KV of every accepted token stays
            seq.generated += k
    else:
        for seq in batch.decode:
            seq.prefilled += 1
            seq.generated += 1
    done = [s for s in state.running if s.done]
    if done:
        state.running = [s for s in state.running if not s.done]
        for seq in done:
            seq.generated = seq.req.output_len
            seq.finish_s = when.get(seq.req.id, t)
            state.free(seq)
            finished += 1
            if tenant.workload.closed:
                heapq.heappush(tenant.slot_heap, seq.finish_s)
    return finished

