# SPDX-License-Identifier: Apache-2.0
"""Attention benchmark: ``torch.nn.functional.scaled_dot_product_attention``.

Backends pin an SDPA kernel with ``torch.nn.attention.sdpa_kernel`` (``sdpa.flash``,
``sdpa.efficient``, ``sdpa.cudnn``, ``sdpa.math``), entered once around the timing, or let
torch choose (``sdpa.auto``); on a CPU only math and auto exist. Causal masks are aligned
bottom-right, so S queries are the last S of T keys (a prefix-cached prefill or decode); one
query against the cache needs no mask. GQA uses ``enable_gqa=True``. The backward is timed
alone: the forward runs untimed before each call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from analytical.ops import AttentionSpec
from profiler.benchmarks.common import Bench, Unsupported, device_kind, torch_dtype

__all__ = ["SDPA_BACKENDS", "build_attention"]

SDPA_BACKENDS = {"sdpa.flash": "FLASH_ATTENTION", "sdpa.efficient": "EFFICIENT_ATTENTION",
                 "sdpa.math": "MATH", "sdpa.cudnn": "CUDNN_ATTENTION", "sdpa.auto": ""}


def _context(backend: str, device: str) -> Callable[[], contextlib.AbstractContextManager]:
    if backend not in SDPA_BACKENDS:
        raise Unsupported(f"attention backend {backend!r}")
    name = SDPA_BACKENDS[backend]
    if not name:
        return contextlib.nullcontext
    if device_kind(device) != "cuda" and backend != "sdpa.math":
        raise Unsupported(f"{backend} needs CUDA; on a CPU use sdpa.math or sdpa.auto")
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415

    kernel = getattr(SDPBackend, name, None)
    if kernel is None:
        raise Unsupported(f"this torch has no SDPBackend.{name}")
    return lambda: sdpa_kernel(kernel)


def build_attention(op: AttentionSpec, backend: str, device: str) -> Bench:
    """Q [B, H, S, D], K/V [B, G, T, D] on ``device``; forward or backward per the spec."""
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: N812, PLC0415

    context = _context(backend, device)
    dtype = torch_dtype(op.dtype, device)
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported(f"SDPA does not take {op.dtype}")
    q = torch.randn(op.batch, op.heads, op.q_len, op.head_dim, device=device, dtype=dtype)
    k = torch.randn(op.batch, op.kv_heads, op.kv_len, op.head_dim, device=device, dtype=dtype)
    v = torch.randn_like(k)
    mask, is_causal = None, False
    if op.causal and op.q_len == op.kv_len:
        is_causal = True
    elif op.causal and op.q_len > 1:
        from torch.nn.attention.bias import causal_lower_right  # noqa: PLC0415

        mask = causal_lower_right(op.q_len, op.kv_len)
    gqa = op.kv_heads != op.heads

    def forward() -> object:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                              enable_gqa=gqa)

    if not op.backward:
        return Bench(run=forward, context=context)
    for tensor in (q, k, v):
        tensor.requires_grad_(True)
    grad_out = torch.randn_like(q)
    state: dict[str, object] = {}

    def prepare() -> None:
        q.grad = k.grad = v.grad = None
        state["out"] = forward()

    def run() -> None:
        state.pop("out").backward(grad_out)

    return Bench(run=run, prepare=prepare, context=context)
