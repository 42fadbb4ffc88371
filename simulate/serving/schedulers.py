# SPDX-License-Identifier: Apache-2.0
"""Batch-forming policies, one function each, registered by name in `SCHEDULERS`.

- ``continuous``: vLLM (v0) continuous batching on a paged KV cache: a step runs either waiting
  prompts (whole, up to `max_batched_tokens`) or one decode token for every running sequence;
  when a decode cannot get a block, the most recently admitted sequence is preempted (recompute:
  its blocks are freed and it re-runs its prefill; swap: its KV goes to host memory).
- ``chunked_prefill``: Sarathi-Serve / vLLM v1: every step carries the running requests (decode
  slots and prefill chunks, in admission order) within a fixed token budget, then new prompts;
  decodes never stall behind long prompts.
- ``prefill_first``: SGLang's default: a step runs either prefill chunks (up to the token budget,
  a partly prefilled prompt first) or one decode token for every running sequence, prefill first
  (sglang managers/scheduler.py get_next_batch_to_run; no mixing without --enable-mixed-chunk).
- ``static``: classic static batching: a batch of up to `max_num_seqs` requests is prefilled
  together and decoded until its last member finishes; nothing joins mid-batch.

Two admission options come from engine presets: `chunk_prompts=False` makes the mixed scheduler
take prompts whole (TensorRT-LLM without chunked context; a prompt longer than the whole budget
is still chunked, as it could never run otherwise), and `reserve_output=True` admits a request
only when KV blocks for its prompt and whole output are free (TensorRT-LLM's
GUARANTEED_NO_EVICT capacity policy), so it never needs preemption. With `prefix_caching` a
recompute-preempted sequence's full blocks stay cached in the free pool (`SchedulerState.cached`)
and it resumes from those nobody took meanwhile, as vLLM V1's free-block queue does.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from analytical.errors import SpecError
from simulate.serving.choices import Preemption
from simulate.serving.kv_cache import BlockPool, blocks_for
from simulate.serving.state import Batch, Sequence


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig:
    max_num_seqs: int = 256  # running sequences at most
    max_batched_tokens: int = 8192  # prefill tokens per step (continuous) / step budget (chunked)
    block_size: int = 16  # tokens per KV block
    preemption: Preemption = Preemption.RECOMPUTE
    decode_q: int = 1  # KV slots a decode step appends per sequence (k+1 with speculation)
    chunk_prompts: bool = True  # chunked_prefill: split prompts over steps
    reserve_output: bool = False  # admission reserves KV for prompt + whole output
    # (layer share, span) of windowed layers that keep only their window's blocks (engine
    # preset `window_kv`; vLLM's SlidingWindowManager); empty: every layer keeps every token
    kv_windows: tuple[tuple[float, int], ...] = ()
    prefix_caching: bool = False  # a preempted request's full blocks stay cached (LRU) for reuse

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_batched_tokens", "block_size", "decode_q"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise SpecError(f"serving.{name}", f"must be a positive int, got {value!r}")
        if self.preemption not in ("recompute", "swap"):
            raise SpecError("serving.preemption",
                            f"unknown {self.preemption!r}; known: recompute, swap")


class SchedulerState:
    """Queues of one serving instance."""

    def __init__(self, pool: BlockPool, config: SchedulerConfig) -> None:
        self.pool = pool
        self.config = config
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.static_batch: list[Sequence] = []
        self.preemptions = 0
        self.kv_bytes_per_token = 0.0  # set by the loop for swap accounting
        # preempted sequence -> its full blocks still cached in the free pool, oldest first
        # (an LRU stand-in for vLLM's free-block queue; the pool's size bounds it)
        self.cached: dict[Sequence, int] = {}
        self.cached_blocks = 0

    def held_blocks(self, tokens: int) -> int:
        """Blocks (of every layer) a sequence of ``tokens`` cached tokens occupies: a windowed
        layer keeps at most its span plus the block being filled."""
        windows, size = self.config.kv_windows, self.pool.block_size
        if not windows:
            return blocks_for(tokens, size)
        full = 1.0 - sum(share for share, _ in windows)
        held = full * tokens + sum(share * min(tokens, span + size) for share, span in windows)
        return blocks_for(math.ceil(held - 1e-9), size)

    def _blocks_needed(self, seq: Sequence, new_tokens: int) -> int:
        return self.held_blocks(seq.prefilled + new_tokens) - seq.blocks

    def grow(self, seq: Sequence, new_tokens: int) -> bool:
        """Allocate blocks so `seq` can hold `new_tokens` more; False if the pool is short."""
        need = self._blocks_needed(seq, new_tokens)
        if need <= 0:
            return True
        if not self.pool.can_allocate(need):
            return False
        self._evict(need - (self.pool.free - self.cached_blocks))
        self.pool.allocate(need)
        seq.blocks += need
        return True

    def _evict(self, blocks: int) -> None:
        """Reuse ``blocks`` cached free blocks, the least recently freed first and a sequence's
        tail before its head: vLLM's FreeKVCacheBlockQueue pops from its head, and
        KVCacheManager.free appends a request's blocks in reverse order (block_pool.py
        get_new_blocks / _maybe_evict_cached_block; kv_cache_manager.py free)."""
        while blocks > 0 and self.cached:
            seq, held = next(iter(self.cached.items()))
            drop = min(held, blocks)
            if drop == held:
                del self.cached[seq]
            else:
                self.cached[seq] = held - drop
            self.cached_blocks -= drop
            blocks -= drop

    def cache_hit(self, seq: Sequence) -> int:
        """Tokens of ``seq``'s context still cached since it was preempted. At least one token
        is left to compute, as vLLM recomputes the last one for its logits
        (kv_cache_manager.py get_computed_blocks: max_cache_hit_length = num_tokens - 1)."""
        held = self.cached.get(seq, 0)
        size = self.pool.block_size
        return min(held, (seq.context_target - 1) // size) * size

    def resume(self, seq: Sequence, hit: int) -> None:
        """Take ``seq``'s cached prefix back (its blocks leave the free pool)."""
        self.cached_blocks -= self.cached.pop(seq, 0)
        seq.prefilled = hit
        if not self.grow(seq, 0):
            raise RuntimeError("KV pool short for a cached prefix")

    def free(self, seq: Sequence) -> None:
        self.pool.release(seq.blocks)
        seq.blocks = 0

    def preempt_last(self, batch: Batch) -> Sequence | None:
        """Evict the most recently admitted running sequence back to the head of the queue."""
        if not self.running:
            return None
        victim = self.running.pop()
        self.preemptions += 1
        victim.preemptions += 1
        if self.config.preemption == "swap":
            batch.swap_bytes += 2 * victim.prefilled * self.kv_bytes_per_token  # out and back
            victim.swapped = True
        else:
            if self.config.prefix_caching and not self.config.kv_windows:
                # vLLM V1 hashes every full computed block (kv_cache_manager.py allocate_slots
                # -> cache_blocks); freed, they stay in the free queue until reused
                held = victim.prefilled // self.pool.block_size
                self.cached_blocks -= self.cached.pop(victim, 0)
                self.cached[victim] = held
                self.cached_blocks += held
            victim.prefilled = 0  # recompute what is no longer cached on re-admission
        self.free(victim)
        self.waiting.appendleft(victim)
        return victim


def _decode_all(state: SchedulerState, batch: Batch) -> None:
    """Give every running sequence its next decode slot, preempting from the back if short."""
    q = state.config.decode_q
    i = 0
    while i < len(state.running):
        seq = state.running[i]
        if state.grow(seq, q):
            batch.decode.append(seq)
            i += 1
            continue
        # the victim is the last running sequence, so never one already in this batch
        if state.preempt_last(batch) is seq:
            break  # `seq` itself was the last one; it is back in the queue


def _admit(state: SchedulerState, batch: Batch, budget: int, *, chunked: bool,
           split_long: bool = False) -> int:
    """Move waiting sequences into the batch while budget, slots and KV blocks allow
    (`split_long`: a prompt longer than the whole budget is chunked even when `chunked` is off)."""
    cfg = state.config
    while state.waiting and budget > 0:
        seq = state.waiting[0]
        if seq not in state.running and len(state.running) >= cfg.max_num_seqs:
            break
        if seq.swapped:  # swapped-out KV comes back whole; no recompute
            need = state.held_blocks(seq.prefilled)
            if not state.pool.can_allocate(need):
                break
            state.pool.allocate(need)
            seq.blocks = need
            seq.swapped = False
            state.waiting.popleft()
            state.running.append(seq)
            continue
        hit = state.cache_hit(seq)
        remaining = seq.remaining_prefill - hit
        whole = not chunked and not (split_long and remaining > cfg.max_batched_tokens)
        chunk = remaining if whole else min(remaining, budget)
        if seq in state.cached:  # admitted only if its new blocks fit beside its cached ones
            if chunk > budget or state.held_blocks(hit + chunk) > state.pool.free:
                break
            state.resume(seq, hit)
        if cfg.reserve_output and seq not in state.running and not state.grow(
                seq, seq.req.input_len + seq.req.output_len - seq.prefilled):
            break
        if chunk > budget or not state.grow(seq, chunk):
            break
        state.waiting.popleft()
        batch.prefill.append((seq, chunk))
        budget -= chunk
        if seq not in state.running:
            state.running.append(seq)
    return budget


def schedule_continuous(state: SchedulerState) -> Batch:
    return _prefill_or_decode(state, chunked=False)


def schedule_chunked(state: SchedulerState) -> Batch:
    """vLLM V1's order (vllm/v1/core/sched/scheduler.py `schedule`): running requests in
    admission order each take their next tokens (a decode slot or a prefill chunk) from the
    budget; when KV is short the last running request is preempted (it may be a half-prefilled
    one); new requests are admitted only in a step that preempted nothing."""
    batch = Batch()
    cfg = state.config
    budget = cfg.max_batched_tokens
    preempted = state.preemptions
    i = 0
    while i < len(state.running) and budget > 0:
        seq = state.running[i]
        prefill = seq.in_prefill
        need = min(seq.remaining_prefill, budget) if prefill else cfg.decode_q
        if need > budget:
            break
        ok = state.grow(seq, need)
        while not ok and state.preempt_last(batch) is not seq:
            ok = state.grow(seq, need)
        if not ok:
            break  # `seq` itself was the last running request and went back to the queue
        if prefill:
            batch.prefill.append((seq, need))
        else:
            batch.decode.append(seq)
        budget -= need
        i += 1
    if state.preemptions == preempted:
        _admit(state, batch, budget, chunked=cfg.chunk_prompts, split_long=True)
    return batch


def schedule_prefill_first(state: SchedulerState) -> Batch:
    return _prefill_or_decode(state, chunked=True)


def _prefill_or_decode(state: SchedulerState, *, chunked: bool) -> Batch:
    """A prefill step if any prompt can run (a partly prefilled one first), else one decode
    token for every running sequence. Unchunked, a prompt longer than the whole budget (or a
    recomputed one that grew past it) is still split, as it could never run otherwise."""
    batch = Batch()
    prefilling = [s for s in state.running if s.in_prefill]
    budget = state.config.max_batched_tokens
    for seq in prefilling:
        chunk = min(seq.remaining_prefill, budget)
        if chunk > 0 and state.grow(seq, chunk):
            batch.prefill.append((seq, chunk))
            budget -= chunk
    if state.waiting and budget > 0:
        _admit(state, batch, budget, chunked=chunked, split_long=True)
    if batch.prefill:
        return batch
    state.running = [s for s in state.running if not s.in_prefill]
    _decode_all(state, batch)
    state.running += prefilling
    return batch


def schedule_static(state: SchedulerState) -> Batch:
    batch = Batch()
    state.static_batch = [s for s in state.static_batch if not s.done]
    if not state.static_batch:
        # a new batch: prompts of up to max_num_seqs waiting requests, all at once
        _admit(state, batch, 1 << 62, chunked=False)
        state.static_batch = list(state.running)
        return batch
    _decode_all(state, batch)
    return batch


SCHEDULERS: dict[str, Callable[[SchedulerState], Batch]] = {
    "continuous": schedule_continuous,
    "chunked_prefill": schedule_chunked,
    "prefill_first": schedule_prefill_first,
    "static": schedule_static,
}
