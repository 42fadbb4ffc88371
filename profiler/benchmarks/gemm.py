# SPDX-License-Identifier: Apache-2.0
"""GEMM benchmark: ``torch.matmul`` (bmm when batched) per dtype; fp8 via ``torch._scaled_mm``.

On a CPU the second operand is stored ``[n, k]`` and multiplied transposed: the layout of
``torch.nn.functional.linear`` (``input @ weight.T`` with ``weight`` of shape ``[out, in]``,
https://pytorch.org/docs/stable/generated/torch.nn.functional.linear.html), i.e. of every Linear
layer, which a trace records as ``aten.t`` + ``aten.mm``. At decode shapes the CPU BLAS is
slower on it: on this project's 2-core host (fp32, 1 thread, 64 MiB flush, min of 40 calls)
``[m, 384] @ [384, 1024]`` took 1.25-1.64x the time of the ``[k, n]`` layout at m = 1-2 and
1.0-1.16x at m = 8-128; timing the ``[k, n]`` layout left every generate of
``llmsim validate cpu`` too fast. GPU rows keep ``[k, n]`` (the curated stores were measured so).

tf32 is fp32 storage with ``torch.backends.cuda.matmul.allow_tf32`` on during the call; int8
uses ``torch._int_mm`` on CUDA. Anything else a backend cannot do is UNSUPPORTED.
"""

from __future__ import annotations

from analytical.dtypes import DType
from analytical.ops import GemmSpec
from profiler.benchmarks.common import Bench, Unsupported, device_kind, torch_dtype

__all__ = ["build_gemm"]


def build_gemm(op: GemmSpec, backend: str, device: str) -> Bench:
    """Operands on ``device`` and a call computing ``[batch, m, k] @ [batch, k, n]``."""
    import torch  # noqa: PLC0415

    if backend == "torch._scaled_mm":
        return _scaled_mm(op, device)
    if backend != "torch.matmul":
        raise Unsupported(f"gemm backend {backend!r}")
    if op.dtype == DType.FP8:
        raise Unsupported("fp8 GEMMs run on the torch._scaled_mm backend")
    if op.dtype == DType.INT8:
        return _int_mm(op, device)
    if op.dtype == DType.TF32 and device_kind(device) != "cuda":
        raise Unsupported("tf32 needs CUDA tensor cores")
    dtype = torch_dtype(op.dtype, device)
    lead = (op.batch,) if op.batch > 1 else ()
    a = torch.randn(*lead, op.m, op.k, device=device).to(dtype)
    if device_kind(device) == "cpu":  # the Linear layout (module docstring)
        b = torch.randn(*lead, op.n, op.k, device=device).to(dtype).transpose(-1, -2)
    else:
        b = torch.randn(*lead, op.k, op.n, device=device).to(dtype)
    out = torch.empty(*lead, op.m, op.n, device=device, dtype=dtype)
    tf32 = op.dtype == DType.TF32

    def run() -> None:
        if device_kind(device) == "cuda":
            previous = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            try:
                torch.matmul(a, b, out=out)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = previous
        else:
            torch.matmul(a, b, out=out)

    return Bench(run=run)


def _scaled_mm(op: GemmSpec, device: str) -> Bench:
    import torch  # noqa: PLC0415

    if op.dtype != DType.FP8:
        raise Unsupported(f"torch._scaled_mm measures fp8 GEMMs, not {op.dtype}")
    if device_kind(device) != "cuda" or not hasattr(torch, "_scaled_mm"):
        raise Unsupported("torch._scaled_mm needs CUDA (compute capability >= 8.9)")
    major, minor = torch.cuda.get_device_capability(torch.device(device))
    if (major, minor) < (8, 9):
        raise Unsupported(f"fp8 needs compute capability >= 8.9, device has {major}.{minor}")
    if op.batch > 1:
        raise Unsupported("torch._scaled_mm is not batched")
    fp8 = torch_dtype(op.dtype, device)
    a = torch.randn(op.m, op.k, device=device).to(fp8)
    b = torch.randn(op.n, op.k, device=device).to(fp8).t()  # column-major, as cuBLASLt needs
    one = torch.tensor(1.0, device=device)

    def run() -> None:
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

    return Bench(run=run)


def _int_mm(op: GemmSpec, device: str) -> Bench:
    import torch  # noqa: PLC0415

    if device_kind(device) != "cuda" or op.batch > 1:
        raise Unsupported("int8 GEMMs use torch._int_mm: CUDA, unbatched")
    a = torch.randint(-8, 8, (op.m, op.k), dtype=torch.int8, device=device)
    b = torch.randint(-8, 8, (op.k, op.n), dtype=torch.int8, device=device)

    def run() -> None:
        torch._int_mm(a, b)

    return Bench(run=run)
