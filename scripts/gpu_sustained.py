# SPDX-License-Identifier: Apache-2.0
"""Isolated vs sustained GEMM time on one GPU: what a training step's back-to-back GEMMs cost
against the same GEMMs timed one at a time the way the profiler times them.

The profiler (`profiler.timers.time_cuda`) times one kernel after an L2 flush and a GPU spin, with
idle gaps between points, so the GPU runs at its boost clock. A training step runs its GEMMs
back to back for minutes under the board power limit, where the SM clock may settle lower. This
script measures both on the same shapes (Llama-3 8B TP1, 70B TP8 and 405B TP8 layers at 8,192
tokens per micro-batch, bf16, forward + data-gradient + weight-gradient GEMMs), with nvidia-smi
sampling SM clock, power and throttle reasons every 250 ms, and writes one JSON.

    python3 scripts/gpu_sustained.py OUT_DIR [--seconds 25]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from profiler.fingerprint import current_fingerprint  # noqa: E402
from profiler.timers import Budget, time_cuda  # noqa: E402

TOKENS = 8192  # one micro-batch of sequence 8,192 (Llama 3 pre-training context)
# (hidden, ffn, q_heads, kv_heads, head_dim, tp[, tokens, gated]): Llama 3 model cards / paper,
# Table 3; the MPT layers (datasets/models/mpt-*.json: GELU MLP of 4 x hidden, no gate) at the
# tokens per micro-batch of llm-foundry's H100 benchmark rows (micro-batch x 2,048), the shapes
# of the small-model training rows the H200's sustained rate was borrowed for.
LAYERS: dict[str, tuple[int, ...]] = {
    "llama3-8b-tp1": (4096, 14336, 32, 8, 128, 1),
    "llama3-70b-tp8": (8192, 28672, 64, 8, 128, 8),
    "llama3-405b-tp8": (16384, 53248, 128, 8, 128, 8),
    "mpt-760m-mb24": (1536, 6144, 12, 12, 128, 1, 24 * 2048, False),
    "mpt-1b-mb12": (2048, 8192, 16, 16, 128, 1, 12 * 2048, False),
    "mpt-3b-mb8": (2560, 10240, 20, 20, 128, 1, 8 * 2048, False),
    "mpt-7b-mb6": (4096, 16384, 32, 32, 128, 1, 6 * 2048, False),
    "mpt-13b-mb2": (5120, 20480, 40, 40, 128, 1, 2 * 2048, False),
}
DEFAULT_LAYERS = ("llama3-8b-tp1", "llama3-70b-tp8", "llama3-405b-tp8")
PROFILER_BUDGET = Budget(warmup_s=0.005, measure_s=0.015, min_reps=5, max_reps=200)  # gpu-h100.yaml


def layer_gemms(hidden: int, ffn: int, q_heads: int, kv_heads: int, head_dim: int,
                tp: int, tokens: int = TOKENS, gated: bool = True
                ) -> list[tuple[str, int, int, int]]:
    """(name, m, n, k) of one layer's Megatron tensor-parallel GEMMs: forward, dgrad, wgrad.
    ``gated``: fc1 computes the gate and the up projection at once (SwiGLU), 2 x ffn columns."""
    qkv = (q_heads + 2 * kv_heads) * head_dim // tp
    fc1 = (2 if gated else 1) * ffn // tp
    fwd = [("qkv", tokens, qkv, hidden), ("proj", tokens, hidden, q_heads * head_dim // tp),
           ("fc1", tokens, fc1, hidden), ("fc2", tokens, hidden, ffn // tp)]
    out = []
    for name, m, n, k in fwd:
        out += [(f"{name}.fwd", m, n, k), (f"{name}.dgrad", m, k, n), (f"{name}.wgrad", n, k, m)]
    return out


def make_calls(gemms: list[tuple[str, int, int, int]]) -> list[tuple[str, object]]:
    """One closure per GEMM on random bf16 operands (never zeros: they run faster)."""
    calls = []
    for name, m, n, k in gemms:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        calls.append((name, lambda a=a, b=b, out=out: torch.mm(a, b, out=out)))
    return calls


def sustained(calls: list[tuple[str, object]], seconds: float) -> dict[str, object]:
    """Run the layer's GEMMs back to back for ``seconds``; per-iteration and per-GEMM times."""
    iters: list[tuple[float, object, object]] = []
    per_gemm: dict[str, list[float]] = {name: [] for name, _ in calls}
    probes = []
    begin = time.perf_counter()
    i = 0
    while time.perf_counter() - begin < seconds:
        probe = i % 25 == 24
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        marks = []
        for name, call in calls:
            call()
            if probe:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                marks.append((name, ev))
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        iters.append((time.perf_counter() - begin, start, end))
        if probe:
            probes.append((start, marks))
        i += 1
        if i % 50 == 0:
            torch.cuda.synchronize()  # keep the host at most ~50 iterations ahead
    torch.cuda.synchronize()
    times = [(t, s.elapsed_time(e) / 1e3) for t, s, e in iters]
    for start, marks in probes:
        prev = start
        for name, ev in marks:
            per_gemm[name].append(prev.elapsed_time(ev) / 1e3)
            prev = ev
    first = [d for t, d in times if t < 2.0] or [times[0][1]]
    last = [d for t, d in times if t > seconds - 10.0]
    return {"iterations": len(times), "first_2s_median_s": statistics.median(first),
            "last_10s_median_s": statistics.median(last),
            "per_gemm_median_s": {k: statistics.median(v) for k, v in per_gemm.items() if v}}


def smi_start(path: Path) -> subprocess.Popen[bytes]:
    reasons = "clocks_event_reasons.active"  # renamed from clocks_throttle_reasons in r535
    probe = subprocess.run(["nvidia-smi", f"--query-gpu={reasons}", "--format=csv"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        reasons = "clocks_throttle_reasons.active"
    fields = f"timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,{reasons}"
    with path.open("wb") as fh:
        return subprocess.Popen(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,nounits",
                                 "-lms", "250"], stdout=fh, stderr=subprocess.DEVNULL)


def smi_window(path: Path, t0: float, t1: float) -> dict[str, object]:
    """Medians of SM clock and power, and the throttle reasons seen, between two epoch times."""
    from datetime import datetime  # noqa: PLC0415

    rows = []
    for line in path.read_text().splitlines()[1:]:
        parts = [p.strip() for p in line.split(",")]
        try:
            ts = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            rows.append((ts, float(parts[1]), float(parts[3]), float(parts[4]), parts[5]))
        except (ValueError, IndexError):
            continue
    sel = [r for r in rows if t0 <= r[0] <= t1]
    if not sel:
        return {"samples": 0}
    return {"samples": len(sel), "sm_mhz_median": statistics.median(r[1] for r in sel),
            "sm_mhz_min": min(r[1] for r in sel), "power_w_median": statistics.median(r[2] for r in sel),
            "temp_c_max": max(r[3] for r in sel), "throttle_reasons": sorted({r[4] for r in sel})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--layers", nargs="+", choices=sorted(LAYERS), default=DEFAULT_LAYERS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    smi_path = args.out / "smi.csv"
    smi = smi_start(smi_path)
    result: dict[str, object] = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                                 "fingerprint": current_fingerprint("cuda").id,
                                 "tokens": TOKENS, "seconds": args.seconds, "layers": {}}
    try:
        for label in args.layers:
            dims = LAYERS[label]
            gemms = layer_gemms(*dims)
            calls = make_calls(gemms)
            time.sleep(3.0)  # let the clock fall back as between profiler points
            iso = {name: time_cuda(call, PROFILER_BUDGET).median_s for name, call in calls}
            t0 = time.time()
            run = sustained(calls, args.seconds)
            t1 = time.time()
            iso_sum = sum(iso.values())
            flops = sum(2 * m * n * k for _, m, n, k in gemms)
            run.update({"isolated_median_s": iso, "isolated_sum_s": iso_sum,
                        "ratio_last_10s_to_isolated": run["last_10s_median_s"] / iso_sum,
                        "ratio_first_2s_to_isolated": run["first_2s_median_s"] / iso_sum,
                        "tflops_isolated": flops / iso_sum / 1e12,
                        "tflops_sustained_last_10s": flops / run["last_10s_median_s"] / 1e12,
                        "smi_last_10s": smi_window(smi_path, t1 - 10.0, t1),
                        "smi_first_2s": smi_window(smi_path, t0, t0 + 2.0),
                        "gemms": [list(g) for g in gemms], "dims": list(dims)})
            result["layers"][label] = run
            print(label, f"isolated {iso_sum*1e3:.3f} ms, sustained first 2 s "
                  f"{run['first_2s_median_s']*1e3:.3f} ms, last 10 s {run['last_10s_median_s']*1e3:.3f} ms, "
                  f"ratio {run['ratio_last_10s_to_isolated']:.3f}, smi {run['smi_last_10s']}", flush=True)
            del calls
            torch.cuda.empty_cache()
    finally:
        smi.terminate()
    (args.out / "sustained.json").write_text(json.dumps(result, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
