# SPDX-License-Identifier: Apache-2.0
"""fp8 GEMM time over bf16 GEMM time on one GPU, for serving shapes, from 1 to 16,384 tokens.

Why: a serving engine's fp8 linear layer runs its own kernel. vLLM's `cutlass_scaled_mm` on
Hopper is a CUTLASS 3 kernel with a per-token activation scale and a per-channel weight scale;
the store's fp8 rows are TensorRT-LLM's (AIConfigurator) or cuBLASLt's tensorwise kernel. No
public H100 table of the row-scaled kernel above 128 tokens was at hand (vLLM PR #49363 stops at
m = 128). This script times, on the same (m, N, K) and under the same conditions:
- ``bf16``: ``torch.nn.functional.linear`` (cuBLAS), what a bf16 engine runs;
- ``fp8_tensorwise``: ``torch._scaled_mm`` with scalar scales (cuBLASLt fp8);
- ``fp8_rowwise``: ``torch._scaled_mm`` with an (m, 1) and a (1, N) fp32 scale, which PyTorch
  runs as a CUTLASS 3 row-scaled kernel on sm90 (aten/src/ATen/native/cuda/RowwiseScaledMM.cu),
  the same kind of kernel as vLLM's per-token x per-channel path.

Timing: each point is a CUDA graph of R back-to-back calls cycling through enough weight copies
to exceed the L2 cache (a serving step's next layer reads other weights), replayed after a
warm-up; the time is the median replay / R. No launch gaps (engines replay graphs for decode),
no L2-resident weights. Random operands (zeros run faster). Writes one CSV row per point and a
JSON header with the device fingerprint.

    python3 scripts/gpu_fp8_gemm.py OUT_DIR [--target-ms 8] [--replays 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiler.fingerprint import current_fingerprint  # noqa: E402

TOKENS = (1, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
L2_EXCEED_BYTES = 160e6  # H100 L2 is 50 MB, H200 60 MB, B200 126 MB: cycle past it


def _model_shapes() -> list[tuple[str, int, int]]:
    """(label, N, K) of each linear layer a serving engine runs, per tensor-parallel rank.
    Dimensions from the HF configs: Llama-3.1-8B (4096 / 14336, 32 q + 8 kv heads x 128),
    Llama-3.1-70B (8192 / 28672, 64 q + 8 kv x 128), Qwen3-32B (5120 / 25600, 64 q + 8 kv x 128);
    gemma-4-31B's N=12288 K=5376 is vLLM PR #49363's shape (a check against its m <= 128 table)."""
    out: list[tuple[str, int, int]] = [("gemma4-31b-pr49363", 12288, 5376)]
    models = {"llama3.1-8b": (4096, 14336, 32, 8, (1,)),
              "llama3.1-70b": (8192, 28672, 64, 8, (1, 2, 4, 8)),
              "qwen3-32b": (5120, 25600, 64, 8, (1, 2))}
    for name, (hidden, ffn, q, kv, tps) in models.items():
        for tp in tps:
            qkv = (q + 2 * kv) * 128 // tp
            out += [(f"{name}-tp{tp}-qkv", qkv, hidden),
                    (f"{name}-tp{tp}-o", hidden, q * 128 // tp),
                    (f"{name}-tp{tp}-gate_up", 2 * ffn // tp, hidden),
                    (f"{name}-tp{tp}-down", hidden, ffn // tp)]
    return out


def _weights(n: int, k: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Random bf16 and fp8 weight copies, enough of them to exceed the L2 when cycled."""
    copies = max(1, min(16, math.ceil(L2_EXCEED_BYTES / (n * k))))
    w16 = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    return w16, [w.to(torch.float8_e4m3fn) for w in w16]


def _kernels(m: int, w16: list[torch.Tensor], w8: list[torch.Tensor]) -> dict[str, object]:
    """A closure per kernel kind over a fresh random (m, K) input and the cycled weights."""
    n, k = w16[0].shape
    copies = len(w16)
    a16 = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    a8 = a16.to(torch.float8_e4m3fn)
    one = torch.ones((), device="cuda", dtype=torch.float32)
    row_a = torch.ones(m, 1, device="cuda", dtype=torch.float32)
    col_b = torch.ones(1, n, device="cuda", dtype=torch.float32)
    return {
        "bf16": lambda i: torch.nn.functional.linear(a16, w16[i % copies]),
        "fp8_tensorwise": lambda i: torch._scaled_mm(a8, w8[i % copies].t(), scale_a=one,
                                                     scale_b=one, out_dtype=torch.bfloat16),
        "fp8_rowwise": lambda i: torch._scaled_mm(a8, w8[i % copies].t(), scale_a=row_a,
                                                  scale_b=col_b, out_dtype=torch.bfloat16),
    }


def _time(fn, est_s: float, target_s: float, replays: int) -> float:
    """Seconds per call: median replay of a graph of R calls, R sized to ``target_s``."""
    reps = int(min(400, max(4, target_s / max(est_s, 1e-7))))
    fn(0)  # the first call picks/loads the kernel outside the capture
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for i in range(reps):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / reps)
    del graph
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--target-ms", type=float, default=8.0)
    parser.add_argument("--replays", type=int, default=3)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    fp = current_fingerprint("cuda")
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.max.sm,power.limit",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    header = {"fingerprint": fp.id, **fp.to_dict(), "nvidia_smi": smi,
              "torch": torch.__version__, "cuda": torch.version.cuda,
              "target_ms": args.target_ms, "replays": args.replays}
    (args.out_dir / "fp8_gemm_header.json").write_text(json.dumps(header, indent=1))
    print(json.dumps(header), flush=True)
    path = args.out_dir / "fp8_gemm.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["shape", "m", "n", "k", "kernel", "seconds", "tflops"])
        for label, n, k in _model_shapes():
            w16, w8 = _weights(n, k)
            for m in TOKENS:
                flops = 2.0 * m * n * k
                est = max(flops / 6e14, (n * k * 2 + m * k * 2) / 3e12)
                for kernel, fn in _kernels(m, w16, w8).items():
                    try:
                        sec = _time(fn, est, args.target_ms / 1e3, args.replays)
                    except RuntimeError as err:  # a kernel this build/GPU does not offer
                        print(f"{label} m={m} {kernel}: {str(err).splitlines()[0]}", flush=True)
                        sec = float("nan")
                    writer.writerow([label, m, n, k, kernel, f"{sec:.9g}",
                                     f"{flops / sec / 1e12:.1f}" if sec == sec else "nan"])
            del w16, w8
            torch.cuda.empty_cache()
            handle.flush()
            print(f"{label} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
