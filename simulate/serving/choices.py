# SPDX-License-Identifier: Apache-2.0
"""The closed choices of a ``serving`` block, as StrEnums whose values are the YAML spellings.

A member compares and hashes equal to its string, so registries keyed by name
(`simulate.serving.schedulers.SCHEDULERS`, the engine presets in ``datasets/engines/``) and JSON
output read the same as before; `simulate.fields.choice_field` parses them and lists the known
values on a miss. Tests check each enum against the registry it names.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Endpoint", "EngineBackend", "Preemption", "Scheduler", "ServingEngine"]


class ServingEngine(StrEnum):
    """Whose defaults a serving block starts from (``datasets/engines/<engine>.yaml``)."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"


class EngineBackend(StrEnum):
    """How a TensorRT-LLM model runs (``backends`` in ``datasets/engines/trtllm.yaml``): the
    PyTorch backend (trtllm-serve's default) or a prebuilt TensorRT engine (NIM's optimized
    profiles), whose build defaults fuse fewer operators."""

    PYTORCH = "pytorch"
    TENSORRT = "tensorrt"


class Scheduler(StrEnum):
    """Batch-forming policy (one function each in `simulate.serving.schedulers.SCHEDULERS`)."""

    CONTINUOUS = "continuous"  # vLLM v0 continuous batching
    CHUNKED_PREFILL = "chunked_prefill"  # Sarathi-Serve / vLLM v1
    PREFILL_FIRST = "prefill_first"  # SGLang's default
    STATIC = "static"  # classic static batching (a single batch runs this way)


class Preemption(StrEnum):
    """What happens to a sequence evicted for KV blocks (vLLM's PreemptionMode)."""

    RECOMPUTE = "recompute"  # blocks freed; the prompt and generated tokens re-run as a prefill
    SWAP = "swap"  # KV copied to host memory over PCIe and back


class Endpoint(StrEnum):
    """The API the client streams from: OpenAI completions (one chunk per token) or chat
    completions, whose server also streams chunks without a token (engine preset
    ``chat_stream_empty_chunks``), each one more ~0 ms gap in a client's chunk-timed ITL."""

    COMPLETIONS = "completions"
    CHAT = "chat"
