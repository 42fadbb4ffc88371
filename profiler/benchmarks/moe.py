# SPDX-License-Identifier: Apache-2.0
"""MoE token permutation benchmark: dispatch (gather tokens into expert order) and combine
(weighted scatter-add of the top-k expert outputs back to token order), eager torch."""

from __future__ import annotations

from analytical.ops import MoEOpKind, MoESpec
from profiler.benchmarks.common import Bench, Unsupported, torch_dtype

__all__ = ["build_moe"]


def build_moe(op: MoESpec, backend: str, device: str) -> Bench:
    """Random top-k routing of ``tokens`` over ``experts``; time the permutation only."""
    import torch  # noqa: PLC0415

    if backend != "torch.eager":
        raise Unsupported(f"moe backend {backend!r}")
    dtype = torch_dtype(op.dtype, device)
    generator = torch.Generator(device="cpu").manual_seed(0)
    scores = torch.rand(op.tokens, op.experts, generator=generator)
    experts = scores.topk(op.top_k, dim=-1).indices.reshape(-1).to(device)
    order = experts.argsort(stable=True)
    token_of_slot = (order // op.top_k).contiguous()
    if op.kind == MoEOpKind.DISPATCH:
        x = torch.randn(op.tokens, op.hidden, device=device).to(dtype)
        return Bench(run=lambda: x.index_select(0, token_of_slot))
    y = torch.randn(op.tokens * op.top_k, op.hidden, device=device).to(dtype)
    weights = torch.rand(op.tokens * op.top_k, 1, device=device).to(dtype)
    out = torch.empty(op.tokens, op.hidden, device=device, dtype=dtype)

    def combine() -> None:
        out.zero_().index_add_(0, token_of_slot, y * weights)

    return Bench(run=combine)
