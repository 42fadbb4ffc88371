# SPDX-License-Identifier: Apache-2.0
"""Serving prefill GEMMs back to back on one GPU: bf16 vs fp8, right after idle vs sustained.

Why: `simulate.inference.step_cost.DenseCost` prices a vLLM fp8 GEMM as the bf16 time, capped at
the hardware's sustained bf16 rate (`efficiency.sustained_gemm`, a power-limit ceiling measured on
bf16 GEMMs), times the fp8/bf16 ratio of kernels timed alone (`fp8_gemm_vs_bf16`). That is right
only if the power cap slows fp8 GEMMs as much as bf16 ones. This script runs the four forward
GEMMs of one Qwen3-8B / 14B / 32B layer at 8,192 tokens, TP1 (qkv, o, gate_up, down; HF
config.json dimensions, head_dim 128) as bf16 ``F.linear`` (cuBLAS), fp8 ``torch._scaled_mm``
with scalar scales (cuBLASLt) and with (m, 1) x (1, N) fp32 scales (PyTorch's CUTLASS row-scaled
kernel), each back to back for SECONDS after 3 s idle, and prints one JSON line per (layer,
kernel): the median layer time of the first three iterations (boost clock) and of the last 5 s.
Run it with nvidia-smi sampling clocks and power beside it (datasets/measurements/README.md).

    python3 scripts/gpu_sustained_fp8.py SECONDS
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable

import torch

TOKENS = 8192
# (hidden, ffn, q heads, kv heads), head_dim 128: Qwen/Qwen3-8B, -14B, -32B config.json
LAYERS = {"qwen3-8b": (4096, 12288, 32, 8), "qwen3-14b": (5120, 17408, 40, 8),
          "qwen3-32b": (5120, 25600, 64, 8)}
KINDS = ("bf16", "fp8_tensorwise", "fp8_rowwise")


def shapes(hidden: int, ffn: int, q: int, kv: int) -> list[tuple[int, int]]:
    """(N, K) of one layer's qkv, o, gate_up and down projections at TP1."""
    return [((q + 2 * kv) * 128, hidden), (hidden, q * 128), (2 * ffn, hidden), (hidden, ffn)]


def calls(kind: str, layer: list[tuple[int, int]]) -> list[Callable[[], torch.Tensor]]:
    """One closure per GEMM on random operands (zeros run faster)."""
    out: list[Callable[[], torch.Tensor]] = []
    for n, k in layer:
        a = torch.randn(TOKENS, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        if kind == "bf16":
            out.append(lambda a=a, w=w: torch.nn.functional.linear(a, w))
            continue
        a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        if kind == "fp8_tensorwise":
            sa = sb = torch.ones((), device="cuda")
        else:
            sa, sb = torch.ones(TOKENS, 1, device="cuda"), torch.ones(1, n, device="cuda")
        out.append(lambda a8=a8, w8=w8, sa=sa, sb=sb: torch._scaled_mm(
            a8, w8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
    return out


def run(layer_calls: list[Callable[[], torch.Tensor]], seconds: float) -> list[tuple[float, float]]:
    """(seconds since start, layer time) of every iteration of the layer's GEMMs back to back."""
    marks = []
    begin = time.perf_counter()
    while (t := time.perf_counter() - begin) < seconds:
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        for call in layer_calls:
            call()
        end.record()
        marks.append((t, start, end))
        if len(marks) % 10 == 0:
            torch.cuda.synchronize()  # keep the host at most ~10 iterations ahead
    torch.cuda.synchronize()
    return [(t, start.elapsed_time(end) / 1e3) for t, start, end in marks]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def main() -> None:
    seconds = float(sys.argv[1])
    for model, dims in LAYERS.items():
        layer = shapes(*dims)
        flops = sum(2 * TOKENS * n * k for n, k in layer)
        for kind in KINDS:
            layer_calls = calls(kind, layer)
            for call in layer_calls:
                call()
            torch.cuda.synchronize()
            time.sleep(3)  # idle: the clock climbs back to boost
            t0 = time.time()
            times = run(layer_calls, seconds)
            first = _median([s for _, s in times[:3]])
            last = _median([s for t, s in times if t > seconds - 5])
            print(json.dumps({"model": model, "kind": kind, "t0": t0, "iters": len(times),
                              "first3_s": first, "last5s_s": last,
                              "tflops_first": flops / first / 1e12,
                              "tflops_last": flops / last / 1e12}), flush=True)
            del layer_calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
