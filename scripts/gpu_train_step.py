# SPDX-License-Identifier: Apache-2.0
"""Time a real training step of a Llama-style model on one GPU, the way torchtitan runs it, so a
whole-step prediction of llmsim can be checked against a run of our own (not only published ones).

Why: `llmsim validate published` scores compositions against runs we cannot inspect. This runs
one we can: torchtitan's recipe (pytorch/torchtitan at 9dec370, the version of the corpus's
torchtitan rows) at world size 1:
- the model: torchtitan's Llama 3 (`torchtitan/models/llama/model.py`): RMSNorm, separate
  wq/wk/wv/wo without bias, RoPE, SDPA with ``is_causal`` (FlashAttention backend), SwiGLU
  w1/w3/w2, fp32 parameters;
- FSDP2 `fully_shard` per block and on the root with `MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)` (torchtitan `parallelize_llama.apply_fsdp`), one rank;
- loss `cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))` (train.py);
- `clip_grad_norm_(max_norm=1.0, foreach=True)` then `AdamW(lr=8e-4, weight_decay=0.1,
  foreach=True)` (torchtitan `build_optimizers`: "foreach", not fused);
- optionally `torch.compile` per block (`apply_compile`, fullgraph) with the loss eager.

Per configuration: ``--warmup`` steps, then ``--steps`` timed steps (CUDA events around the
whole step, zero_grad to optimizer step), peak allocated and reserved memory (torchtitan's
memory line is the reserved peak), and one step under torch.profiler with the GPU kernel time
summed by kind (GEMM, attention, NCCL, optimizer, other) and the GPU busy fraction. One JSON per
configuration under OUT, each with the device fingerprint.

    python3 scripts/gpu_train_step.py OUT --config PATH --seq 8192 --mb 1 [--compile]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F  # noqa: N812 (the usual name)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


class RMSNorm(nn.Module):
    """torchtitan's eager RMSNorm (fp32 weight, computed in the input dtype's float upcast)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


def rope_tables(head_dim: int, seq: int, theta: float, device: torch.device) -> torch.Tensor:
    """Complex rotations, as torchtitan's `precompute_freqs_cis`."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device)[: head_dim // 2].float()
                             / head_dim))
    t = torch.arange(seq, device=device, dtype=torch.float32)
    return torch.polar(torch.ones(seq, head_dim // 2, device=device), torch.outer(t, freqs))


def apply_rope(xq: torch.Tensor, xk: torch.Tensor, freqs: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    f = freqs.view(1, xq_.shape[1], 1, xq_.shape[-1])
    return (torch.view_as_real(xq_ * f).flatten(3).type_as(xq),
            torch.view_as_real(xk_ * f).flatten(3).type_as(xk))


class Block(nn.Module):
    """One Llama 3 transformer block as torchtitan writes it."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        h, self.heads, self.kv = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
        self.hd = cfg["head_dim"]
        self.wq = nn.Linear(h, self.heads * self.hd, bias=False)
        self.wk = nn.Linear(h, self.kv * self.hd, bias=False)
        self.wv = nn.Linear(h, self.kv * self.hd, bias=False)
        self.wo = nn.Linear(self.heads * self.hd, h, bias=False)
        self.w1 = nn.Linear(h, cfg["ffn"], bias=False)
        self.w3 = nn.Linear(h, cfg["ffn"], bias=False)
        self.w2 = nn.Linear(cfg["ffn"], h, bias=False)
        self.attention_norm = RMSNorm(h, cfg["eps"])
        self.ffn_norm = RMSNorm(h, cfg["eps"])

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        y = self.attention_norm(x)
        q = self.wq(y).view(b, s, self.heads, self.hd)
        k = self.wk(y).view(b, s, self.kv, self.hd)
        v = self.wv(y).view(b, s, self.kv, self.hd)
        q, k = apply_rope(q, k, freqs)
        rep = self.heads // self.kv  # torchtitan repeats kv heads before SDPA (repeat_kv)
        k = k.repeat_interleave(rep, dim=2) if rep > 1 else k
        v = v.repeat_interleave(rep, dim=2) if rep > 1 else v
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2), is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        y = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(y)) * self.w3(y))


class Llama(nn.Module):
    def __init__(self, cfg: dict[str, Any], seq: int, device: torch.device) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(cfg["vocab"], cfg["hidden"])
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg["layers"]))
        self.norm = RMSNorm(cfg["hidden"], cfg["eps"])
        self.output = nn.Linear(cfg["hidden"], cfg["vocab"], bias=False)
        if cfg["tied"]:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer("freqs", rope_tables(cfg["head_dim"], seq, cfg["theta"], device),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.freqs)
        return self.output(self.norm(h))


def read_config(path: Path) -> dict[str, Any]:
    """The fields this model needs from an HF Llama ``config.json``."""
    c = json.loads(path.read_text())
    heads = c["num_attention_heads"]
    return {"hidden": c["hidden_size"], "ffn": c["intermediate_size"],
            "layers": c["num_hidden_layers"], "heads": heads,
            "kv_heads": c.get("num_key_value_heads", heads),
            "head_dim": c.get("head_dim") or c["hidden_size"] // heads,
            "vocab": c["vocab_size"], "eps": c.get("rms_norm_eps", 1e-5),
            "theta": c.get("rope_theta", 10000.0), "tied": bool(c.get("tie_word_embeddings"))}


KINDS = (("nccl", ("nccl",)), ("attention", ("flash", "fmha", "attention", "sdpa")),
         ("gemm", ("gemm", "xmma", "cutlass", "nvjet", "cublas", "sm90_", "sm80_", "ampere_")),
         ("optimizer", ("multi_tensor", "foreach", "adam")))


def kernel_kind(name: str) -> str:
    low = name.lower()
    for kind, keys in KINDS:
        if any(k in low for k in keys):
            return kind
    return "other"


# GPU-side ranges the profiler lists beside kernels (torch.optim's "Optimizer.step#AdamW.step",
# FSDP2's "FSDP::pre_forward (layers.3)", record_function scopes): spans, not kernels.
ANNOTATION_MARKS = ("#", "FSDP::", "Optimizer.", "ProfilerStep")


def is_annotation(name: str) -> bool:
    return any(mark in name for mark in ANNOTATION_MARKS)


def profile_step(step: Any, device: str) -> dict[str, Any]:
    """One step under torch.profiler: device kernel time by kind, busy fraction, top kernels."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    by_kind: dict[str, float] = {}
    kernels = []
    for ev in prof.events():
        if device == "cuda" and ev.device_type == torch.autograd.DeviceType.CUDA \
                and not is_annotation(ev.name):
            start, end = ev.time_range.start / 1e6, ev.time_range.end / 1e6
            kernels.append((ev.name, end - start, start, end))
    for name, dur, _, _ in kernels:
        by_kind[kernel_kind(name)] = by_kind.get(kernel_kind(name), 0.0) + dur
    busy = 0.0
    end = -math.inf
    for _, _, s, e in sorted(kernels, key=lambda k: k[2]):  # union of kernel intervals
        if s > end:
            busy += e - s
            end = e
        elif e > end:
            busy += e - end
            end = e
    top: dict[str, list[float]] = {}
    for name, dur, _, _ in kernels:
        top.setdefault(name[:120], [0.0, 0])
        top[name[:120]][0] += dur
        top[name[:120]][1] += 1
    top_list = sorted(([n, t, c] for n, (t, c) in top.items()), key=lambda r: -r[1])[:40]
    return {"wall_s": wall, "kernels": len(kernels), "kernel_s_by_kind": by_kind,
            "gpu_busy_s": busy, "top_kernels": top_list}


def run(cfg_path: Path, seq: int, mb: int, compile_blocks: bool, steps: int, warmup: int,
        device: str) -> dict[str, Any]:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: PLC0415

    cfg = read_config(cfg_path)
    dev = torch.device(device)
    torch.manual_seed(0)
    with torch.device(dev):
        model = Llama(cfg, seq, dev)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, block in enumerate(model.layers):
        if compile_blocks:
            block = torch.compile(block, fullgraph=True)  # torchtitan apply_compile
            model.layers[i] = block
        # torchtitan: every block but the last reshards after forward
        fully_shard(block, mp_policy=mp, reshard_after_forward=i < len(model.layers) - 1)
    fully_shard(model, mp_policy=mp, reshard_after_forward=False)
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1, foreach=True)
    tokens = torch.randint(0, cfg["vocab"], (mb, seq + 1), device=dev)
    inp, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        pred = model(inp)
        loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
        del pred
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0, foreach=True)
        opt.step()

    t_build = time.perf_counter()
    for _ in range(warmup):
        step()
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    warmup_s = time.perf_counter() - t_build
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        if device == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
    mem = {}
    if device == "cuda":
        mem = {"max_allocated_gib": torch.cuda.max_memory_allocated() / 2**30,
               "max_reserved_gib": torch.cuda.max_memory_reserved() / 2**30}
    prof = profile_step(step, device)
    n_params = sum(p.numel() for p in model.parameters())
    return {"config": str(cfg_path), "model": cfg, "seq": seq, "micro_batch": mb,
            "compile": compile_blocks, "steps": steps, "warmup": warmup,
            "warmup_s": warmup_s, "step_s": times, "step_median_s": statistics.median(times),
            "tokens_per_s": mb * seq / statistics.median(times), "params": n_params,
            "memory": mem, "profile": prof}


def fingerprint(device: str) -> dict[str, Any]:
    out: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                           "host": platform.node(), "cpu": platform.processor()}
    try:
        from profiler.fingerprint import cpu_model_name, current_fingerprint  # noqa: PLC0415
        out["cpu"] = cpu_model_name()
        fp = current_fingerprint(device)
        out["fingerprint"] = fp.id
        out.update(fp.to_dict())
    except Exception as exc:  # the fingerprint is context, never a reason to lose the timing
        out["fingerprint_error"] = repr(exc)
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=p.name, sms=p.multi_processor_count, gpu_mem_gib=p.total_memory / 2**30,
                   cuda=torch.version.cuda)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--mb", type=int, default=1)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--label", default=None)
    args = parser.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo", rank=0, world_size=1)
    label = args.label or (f"{args.config.stem}-s{args.seq}-mb{args.mb}"
                           f"{'-compile' if args.compile else ''}")
    result: dict[str, Any] = {"label": label, "device": fingerprint(args.device)}
    try:
        result.update(run(args.config, args.seq, args.mb, args.compile, args.steps, args.warmup,
                          args.device))
    except torch.OutOfMemoryError as exc:
        result["error"] = f"out of memory: {str(exc)[:300]}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{label}.json").write_text(json.dumps(result, indent=1, default=str))
    print(label, result.get("step_median_s"), result.get("memory"), result.get("error"),
          {k: round(v, 4) for k, v in result.get("profile", {}).get("kernel_s_by_kind", {}).items()},
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
