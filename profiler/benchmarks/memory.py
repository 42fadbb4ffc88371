# SPDX-License-Identifier: Apache-2.0
"""Memory-bound operator benchmarks over a [rows, cols] tensor, forward or backward (eager torch).

Forward times the op; backward times ``out.backward(grad)`` after an untimed forward. The
optimizer step is ``torch.optim.AdamW`` over one [rows, cols] parameter (fused on CUDA).
"""

from __future__ import annotations

from collections.abc import Callable

from analytical.ops import MemoryBoundSpec, MemoryOpKind
from profiler.benchmarks.common import Bench, Unsupported, device_kind, torch_dtype

__all__ = ["build_memory"]


def _forward(op: MemoryBoundSpec, device: str, dtype: object
             ) -> tuple[Callable[[], object], list[object]]:
    """The op as a closure over its inputs, and the inputs a backward differentiates."""
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: N812, PLC0415

    rows, cols = op.rows, op.cols
    x = torch.randn(rows, cols, device=device, dtype=dtype)
    kind = op.kind
    if kind == MemoryOpKind.LAYERNORM:
        weight = torch.ones(cols, device=device, dtype=dtype)
        bias = torch.zeros(cols, device=device, dtype=dtype)
        return (lambda: F.layer_norm(x, (cols,), weight, bias)), [x, weight, bias]
    if kind == MemoryOpKind.RMSNORM:
        weight = torch.ones(cols, device=device, dtype=dtype)
        return (lambda: F.rms_norm(x, (cols,), weight, 1e-6)), [x, weight]
    if kind == MemoryOpKind.GELU:
        return (lambda: F.gelu(x, approximate="tanh")), [x]
    if kind == MemoryOpKind.SILU:
        return (lambda: F.silu(x)), [x]
    if kind == MemoryOpKind.DROPOUT:
        return (lambda: F.dropout(x, 0.1, training=True)), [x]
    if kind == MemoryOpKind.SOFTMAX:
        return (lambda: torch.softmax(x, dim=-1)), [x]
    if kind == MemoryOpKind.COPY:
        return (lambda: x.clone()), [x]
    if kind in (MemoryOpKind.SWIGLU, MemoryOpKind.ADD, MemoryOpKind.MUL):
        y = torch.randn_like(x)
        fn = {MemoryOpKind.SWIGLU: lambda: F.silu(x) * y, MemoryOpKind.ADD: lambda: x + y,
              MemoryOpKind.MUL: lambda: x * y}[kind]
        return fn, [x, y]
    if kind == MemoryOpKind.ROTARY:
        if cols % 2:
            raise ValueError(f"rotary needs an even number of columns, got {cols}")
        angle = torch.rand(rows, cols // 2, device=device) * 6.28
        cos = torch.cat([angle.cos()] * 2, dim=-1).to(dtype)
        sin = torch.cat([angle.sin()] * 2, dim=-1).to(dtype)

        def rotary() -> object:  # rotate-half RoPE (Su et al. 2021, eq. 34)
            first, second = x[:, : cols // 2], x[:, cols // 2:]
            return x * cos + torch.cat((-second, first), dim=-1) * sin

        return rotary, [x]
    if kind == MemoryOpKind.EMBEDDING:
        table = torch.randn(rows, cols, device=device, dtype=dtype)
        ids = torch.randint(0, rows, (rows,), device=device)
        return (lambda: F.embedding(ids, table)), [table]
    if kind == MemoryOpKind.CROSS_ENTROPY:
        target = torch.randint(0, cols, (rows,), device=device)
        return (lambda: F.cross_entropy(x, target)), [x]
    raise Unsupported(f"no eager benchmark for memory op {kind}")


def _optimizer(op: MemoryBoundSpec, device: str, dtype: object) -> Bench:
    import torch  # noqa: PLC0415

    param = torch.nn.Parameter(torch.randn(op.rows, op.cols, device=device, dtype=dtype))
    param.grad = torch.randn_like(param)
    fused = device_kind(device) == "cuda"
    optimizer = torch.optim.AdamW([param], lr=1e-4, fused=fused, foreach=None if fused else False)
    return Bench(run=optimizer.step)


def build_memory(op: MemoryBoundSpec, backend: str, device: str) -> Bench:
    """The op on ``device``: forward, or backward after an untimed forward."""
    import torch  # noqa: PLC0415

    if backend != "torch.eager":
        raise Unsupported(f"memory backend {backend!r}")
    dtype = torch_dtype(op.dtype, device)
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise Unsupported(f"memory ops are measured in float types, not {op.dtype}")
    if op.kind == MemoryOpKind.OPTIMIZER:
        return _optimizer(op, device, dtype)
    forward, inputs = _forward(op, device, dtype)
    if not op.backward:
        return Bench(run=forward)
    for tensor in inputs:
        tensor.requires_grad_(True)
    sample = forward()
    grad = torch.randn_like(sample) if sample.dim() else None
    del sample
    state: dict[str, object] = {}

    def prepare() -> None:
        for tensor in inputs:
            tensor.grad = None
        state["out"] = forward()

    def run() -> None:
        state.pop("out").backward(grad)

    return Bench(run=run, prepare=prepare)
