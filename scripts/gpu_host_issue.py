# SPDX-License-Identifier: Apache-2.0
"""CPU time to issue one eager PyTorch op on this host, with a GPU taking the kernels.

Why: `simulate.moe_host` prices a host-bound Megatron-Core MoE layer by the CPU time per issued
kernel, citing Transformer Engine issue 2053 (a bf16 ``torch.nn.Linear`` forward: 13.48 us of
CPU on a DGX H100's Xeon Platinum 8480C, 37.08 us on GB200's Grace) and a blog's 5-25 us per op.
This script measures the same kind of figure on the machine it runs on, so a GPU host of our own
adds a data point with its CPU model, clock and torch version beside it.

Each op runs ``--calls`` times back to back after a warm-up, with tiny tensors so the GPU is
never the bottleneck (the GPU time per call is printed beside the CPU's: the row counts only
where the CPU is slower). CPU time is the issuing thread's (``time.thread_time``); wall time is
until the last call returned (not the GPU's completion).

    python3 scripts/gpu_host_issue.py OUT_DIR [--calls 3000]
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiler.fingerprint import cpu_model_name, current_fingerprint  # noqa: E402


def _ops() -> dict[str, object]:
    """Closures of eager ops a Megatron-Core MoE layer issues, on small bf16 CUDA tensors."""
    dev, bf16 = "cuda", torch.bfloat16
    lin = torch.nn.Linear(4096, 4096, bias=False, device=dev, dtype=bf16)  # TE issue 2053's op
    x = torch.randn(16, 4096, device=dev, dtype=bf16)
    x_grad = torch.randn(16, 4096, device=dev, dtype=bf16, requires_grad=True)
    small = torch.randn(256, 128, device=dev, dtype=bf16)
    idx = torch.randint(0, 256, (256,), device=dev)
    logits = torch.randn(256, 128, device=dev, dtype=torch.float32)

    def linear_no_grad() -> object:
        with torch.no_grad():
            return lin(x)

    return {
        "nn.Linear fwd (autograd)": lambda: lin(x_grad),
        "nn.Linear fwd (no_grad)": linear_no_grad,
        "add": lambda: small + small,
        "mul scalar": lambda: small * 0.5,
        "index_select": lambda: small.index_select(0, idx),
        "cat": lambda: torch.cat([small, small]),
        "softmax fp32": lambda: torch.softmax(logits, dim=-1),
        "topk": lambda: torch.topk(logits, 4, dim=-1),
        "sum dim0": lambda: small.sum(dim=0),
    }


def _measure(fn, calls: int) -> dict[str, float]:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start_ev.record()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for _ in range(calls):
        fn()
    wall1, cpu1 = time.perf_counter(), time.thread_time()
    end_ev.record()
    torch.cuda.synchronize()
    return {"cpu_us": (cpu1 - cpu0) / calls * 1e6, "wall_us": (wall1 - wall0) / calls * 1e6,
            "gpu_us": start_ev.elapsed_time(end_ev) / calls * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    result = {"cpu": cpu_model_name(), "python": platform.python_version(),
              "torch": torch.__version__, "gpu_fingerprint": current_fingerprint("cuda").id,
              "gpu": torch.cuda.get_device_name(0), "lscpu": lscpu, "calls": args.calls,
              "ops": {name: _measure(fn, args.calls) for name, fn in _ops().items()}}
    (args.out_dir / "host_issue.json").write_text(json.dumps(result, indent=1))
    for name, row in result["ops"].items():
        print(f"{name:28s} cpu {row['cpu_us']:6.2f} us  wall {row['wall_us']:6.2f} us  "
              f"gpu {row['gpu_us']:6.2f} us")
    print(result["cpu"], result["torch"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
