# SPDX-License-Identifier: Apache-2.0
"""The way out of the engine: the API server streams every token to its client, one at a time.

An engine's front end is one process (vLLM's OpenAI server: one asyncio event loop on one CPU,
vllm-project/vllm RFC #12705; SGLang's DetokenizerManager and TokenizerManager; trtllm-serve's
HTTP server). Each step's outputs reach it as one message, and it detokenizes each token and
writes one SSE chunk per token, in the order the engine listed them (vLLM V1 `AsyncLLM`
`output_handler` -> `OutputProcessor.process_outputs`, split into slices of
``VLLM_V1_OUTPUT_PROC_CHUNK_SIZE`` = 128 requests, each slice's outputs handed to their
requests' streams before the next slice starts, and each request's stream then formats and
writes its chunk in turn). So a token reaches its client once the server has worked through
everything queued before it, its own chunk included: under many clients the server's
backlog adds to TTFT, TPOT and ITL alike, and caps the token rate at one over the per-token
cost. Where the server runs in its own process (vLLM V1, SGLang, trtllm-serve), the engine
keeps stepping meanwhile; where it shares the engine's process, the engine waits for it.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from dataclasses import dataclass

from simulate.serving.state import Batch, Sequence


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamCost:
    """One engine's serial output path (`datasets/engines/<engine>.yaml` stream_* entries)."""

    per_token_s: float = 0.0  # detokenize + one SSE chunk, per token, on the server's one CPU
    per_request_s: float = 0.0  # taking a request in (HTTP, chat template)
    shared_intake: bool = True  # requests are taken in on the CPU that streams (one process)
    separate_process: bool = True  # the engine steps on while the server works

    @property
    def active(self) -> bool:
        return self.per_token_s > 0 or self.per_request_s > 0


def emitting(batch: Batch) -> list[Sequence]:
    """The requests that get a token from this step, in the engine's output order: the running
    decodes, then the prompts whose last chunk ran (vLLM's scheduler lists running requests
    before new ones; a prompt recomputed after preemption emits nothing new)."""
    done = [seq for seq, new in batch.prefill
            if seq.prefilled + new >= seq.context_target and seq.generated == 0]
    return [*batch.decode, *done]


def deliveries(cost: StreamCost, out: Seq[Sequence], t: float,
               free_s: float) -> tuple[dict[int, float], float]:
    """When each of a step's tokens (`out`, produced at `t`) reaches its client, keyed by
    request id, and when the server is free again (`free_s`: when it finished its backlog)."""
    if not out:
        return {}, free_s
    start = max(t, free_s)
    c = cost.per_token_s
    return ({seq.req.id: start + (i + 1) * c for i, seq in enumerate(out)},
            start + len(out) * c)


def intake(cost: StreamCost, sent: float, free_s: float) -> tuple[float, float]:
    """When the server has taken in a request sent at `sent` (its backlog first: one CPU, FIFO)
    and when it is free again. The loop hands requests over when it admits them, after the
    outputs of the step that ended then, so a request can wait for up to one step's tokens that
    the real server, seeing it earlier, would stream after it."""
    if not cost.active:
        return sent, free_s
    if not cost.shared_intake:  # another process streams: only the request cost
        return sent + cost.per_request_s, free_s
    done = max(sent, free_s) + cost.per_request_s
    return done, done
