# SPDX-License-Identifier: Apache-2.0
"""Side by side with Microsoft Vidur (PyPI ``vidur`` 0.0.26): same model, GPU, trace, scheduler.

Vidur runs in its own virtual environment (``--vidur-venv``; ``--install-vidur`` creates it), never
inside llmsim's. Vidur 0.0.26 downloads its profiling data from the Hugging Face hub at start-up;
here `vidur_driver.py` replaces that download with a local copy of Vidur's ``data/profiling/``
(``--vidur-data``, the repository's MIT-licensed CSVs). Those files hold no ``attention.csv``, so
the attention profile Vidur trains on is written from llmsim's engine chain (the same estimates
llmsim itself uses): attention is shared, the linear layers, norms and activations are Vidur's
own measurements, and each simulator runs its own scheduler and batching model. The first Vidur
run trains random forests; later runs load them from ``--work-dir``. Usage: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from analytical.dtypes import DType
from analytical.errors import LlmsimError, SpecError
from analytical.hardware import HardwareSpec, get_hardware
from analytical.model import ModelSpec, load_model
from analytical.ops import AttentionSpec, Phase
from analytical.paths import llmsim_home
from simulate.engines import EngineChain
from simulate.inference.predict import predict_inference
from simulate.inference.setup import parse_inference_setup
from simulate.serving.metrics import summarize_latencies
from simulate.serving.workload import make_workload

VIDUR_VERSION = "0.0.26"
# Packages Vidur's simulation path imports (its wheel also asks for streamlit/kaleido/ninja,
# used only by its dashboard and plot export).
VIDUR_DEPS = ("numpy", "pandas", "scikit-learn", "wandb", "ddsketch", "plotly_express",
              "matplotlib", "seaborn", "fasteners", "click", "huggingface_hub", "paretoset",
              "randomname")
# llmsim model name -> (Vidur model name, directory under data/profiling/compute/<gpu>/).
VIDUR_MODELS = {
    "llama-2-7b": ("meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-7b-hf"),
    "llama-2-70b": ("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-70b-hf"),
    "llama-3-8b": ("meta-llama/Llama-3-8B", "meta-llama/Meta-Llama-3-8B"),
}
# llmsim hardware name -> (Vidur device SKU, Vidur network SKU); Vidur's "a100"/"h100" compute
# profiles are the SXM parts (see profiler/importers/vidur.py).
VIDUR_GPUS = {"a100-sxm-80gb": ("a100", "a100_dgx"), "h100-sxm": ("h100", "h100_dgx")}
# Vidur's RandomForest grid search: its own default, or one point of it (a quick first run).
RF_GRIDS = {"vidur": {"num_estimators": [250, 500, 750], "max_depth": [8, 16, 32],
                      "min_samples_split": [2, 5, 10]},
            "small": {"num_estimators": [250], "max_depth": [16], "min_samples_split": [2]}}
ATTN_DECODE_BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
ATTN_CHUNKS = (32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
BLOCK_SIZE = 16
DRIVER = Path(__file__).with_name("vidur_driver.py")  # runs inside Vidur's venv


def write_trace(path: Path, *, qps: float, num_requests: int, seed: int) -> Path:
    """A Poisson trace with the lognormal lengths of the QPS-2 Llama-2-7B scenario."""
    workload = make_workload({"process": "poisson", "qps": qps, "num_requests": num_requests,
                              "seed": seed},
                             input_len={"dist": "lognormal", "mean": 512, "sigma": 0.6,
                                        "max": 3072},
                             output_len={"dist": "lognormal", "mean": 192, "sigma": 0.6,
                                         "max": 1024})
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["arrival_s", "input_len", "output_len"])
        for r in workload.requests:
            out.writerow([f"{r.arrival_s:.6f}", r.input_len, r.output_len])
    return path


def read_trace(path: Path) -> dict[str, np.ndarray]:
    """The trace's columns, in file order (Vidur numbers requests in this order)."""
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows or not {"arrival_s", "input_len", "output_len"} <= set(rows[0]):
        raise SpecError("--trace", f"{path}: needs columns arrival_s, input_len, output_len")
    return {"arrival": np.array([float(r["arrival_s"]) for r in rows]),
            "input_len": np.array([int(r["input_len"]) for r in rows]),
            "output_len": np.array([int(r["output_len"]) for r in rows])}


def scenario_doc(args: argparse.Namespace, trace: Path) -> dict[str, Any]:
    """The llmsim scenario matching Vidur's replica and scheduler settings."""
    serving: dict[str, Any] = {
        "scheduler": args.scheduler, "arrival": {"trace": str(trace)},
        "max_num_seqs": args.max_num_seqs, "block_size": BLOCK_SIZE,
        "gpu_memory_utilization": args.gpu_memory_utilization}
    if args.scheduler == "chunked_prefill":
        serving["chunk_size"] = args.chunk_size
    else:
        serving["max_batched_tokens"] = args.max_batched_tokens
    return {"name": "vidur-side-by-side", "model": args.model,
            "hardware": {"gpu": args.gpu, "num_gpus": args.tp, "gpus_per_node": 8},
            "inference": {"parallel": {"tp": args.tp, "pp": 1, "dp": 1}, "precision": "fp16",
                          "input_len": 512, "output_len": 192},
            "serving": serving}


def run_llmsim(args: argparse.Namespace, trace: Path, repeats: int = 5) -> dict[str, Any]:
    """predict_inference with a fresh engine chain per repeat; the median wall time."""
    hw, model = get_hardware(args.gpu), load_model(args.model)
    doc = scenario_doc(args, trace)
    times, cpu, result = [], [], {}
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        chain = make_chain(hw, args.engines)
        result = predict_inference(parse_inference_setup(doc), model=model, hw=hw,
                                   num_gpus=args.tp, estimator=chain).to_dict()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return {"wall_s": float(np.median(times)), "cpu_s": float(np.median(cpu)), "result": result}


def make_chain(hw: HardwareSpec, engines: str) -> EngineChain:
    roofline = engines == "roofline"
    return EngineChain(hw, use_store=not roofline, use_predictors=not roofline)


def attention_rows(model: ModelSpec, hw: HardwareSpec, engines: str, tp: int
                   ) -> tuple[list[dict], set]:
    """Vidur ``attention.csv`` rows (ms per tensor-parallel worker, as Vidur logs them)."""
    chain = make_chain(hw, engines)
    heads, kv_heads, head_dim = model.heads // tp, max(model.kv_heads // tp, 1), model.head_dim
    shapes = []  # (batch, prefill_chunk, kv_cache, spec)
    max_len = 4096
    for chunk in ATTN_CHUNKS:
        for kv in range(0, max_len - chunk + 1, 256):
            shapes.append((1, chunk, kv, AttentionSpec(
                batch=1, q_len=chunk, kv_len=kv + chunk, heads=heads, kv_heads=kv_heads,
                head_dim=head_dim, causal=True, phase=Phase.PREFILL, dtype=DType.FP16)))
    for batch in ATTN_DECODE_BATCHES:
        for kv in range(256, max_len + 1, 256):
            shapes.append((batch, 0, kv, AttentionSpec(
                batch=batch, q_len=1, kv_len=kv, heads=heads, kv_heads=kv_heads,
                head_dim=head_dim, causal=True, phase=Phase.DECODE, dtype=DType.FP16)))
    estimates = chain.estimate_many([s[3] for s in shapes])
    rows = []
    for (batch, chunk, kv, _), est in zip(shapes, estimates, strict=True):
        ms = est.latency_s * 1e3
        rows.append({"n_embd": model.hidden, "n_q_head": model.heads,
                     "n_kv_head": model.kv_heads, "block_size": BLOCK_SIZE,
                     "num_tensor_parallel_workers": tp,
                     "max_model_len": max_len, "batch_size": batch,
                     "prefill_chunk_size": chunk, "kv_cache_size": kv,
                     "is_prefill": chunk > 0,
                     "time_stats.attn_prefill.median": ms if chunk else "",
                     "time_stats.attn_decode.median": "" if chunk else ms})
    return rows, {e.engine for e in estimates}


def _write_xz(src_or_rows: Path | list[dict], dest: Path) -> None:
    with lzma.open(dest, "wt", newline="") as out:
        if isinstance(src_or_rows, Path):
            with src_or_rows.open() as src:
                shutil.copyfileobj(src, out)
        else:
            writer = csv.DictWriter(out, fieldnames=list(src_or_rows[0]))
            writer.writeheader()
            writer.writerows(src_or_rows)


def _dataset_id(kind: str, folder: Path) -> str:
    """Vidur keys its trained-model cache by dataset name only: put the content's hash in it."""
    digest = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        digest.update(f.name.encode() + f.read_bytes())
    return f"local/{kind}-{folder.name}-{digest.hexdigest()[:12]}"


def prepare_vidur_data(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The compute and network "datasets" Vidur's predictor would fetch from the hub."""
    vidur_model, model_dir = VIDUR_MODELS[args.model]
    device, network = VIDUR_GPUS[args.gpu]
    data = Path(args.vidur_data)
    mlp = data / "compute" / device / model_dir / "mlp.csv"
    net = data / "network" / network
    for need in (mlp, net / "all_reduce.csv", net / "send_recv.csv"):
        if not need.is_file():
            raise SpecError("--vidur-data", f"missing {need}")
    compute_dir = work / "data" / f"compute-{device}-{model_dir.replace('/', '--')}"
    network_dir = work / "data" / f"network-{network}"
    compute_dir.mkdir(parents=True, exist_ok=True)
    network_dir.mkdir(parents=True, exist_ok=True)
    _write_xz(mlp, compute_dir / "mlp.csv.xz")
    attn_csv = mlp.with_name("attention.csv")
    if attn_csv.is_file():  # a full Vidur checkout (Git LFS) has the measured one
        _write_xz(attn_csv, compute_dir / "attention.csv.xz")
        attn_engines = {"vidur-measured"}
    else:
        rows, attn_engines = attention_rows(load_model(args.model), get_hardware(args.gpu),
                                            args.engines, args.tp)
        _write_xz(rows, compute_dir / "attention.csv.xz")
    (compute_dir / "config.json").write_text(json.dumps(
        {"model": vidur_model, "device_sku": device}))
    for name in ("all_reduce", "send_recv"):
        _write_xz(net / f"{name}.csv", network_dir / f"{name}.csv.xz")
    (network_dir / "config.json").write_text(json.dumps({"sku": network}))
    return {"compute": _dataset_id("compute", compute_dir), "compute_dir": str(compute_dir),
            "network": _dataset_id("network", network_dir), "network_dir": str(network_dir),
            "attention_engines": sorted(attn_engines)}


def vidur_argv(args: argparse.Namespace, trace_vidur: Path, work: Path,
               data: dict[str, Any]) -> list[str]:
    vidur_model, _ = VIDUR_MODELS[args.model]
    device, network = VIDUR_GPUS[args.gpu]
    p = "--random_forrest_execution_time_predictor_config_"
    argv = ["--seed", "0", "--replica_config_model_name", vidur_model,
            "--replica_config_device", device, "--replica_config_network_device", network,
            "--replica_config_tensor_parallel_size", str(args.tp),
            "--replica_config_num_pipeline_stages", "1",
            "--replica_config_gpu_memory_utilization", str(args.gpu_memory_utilization),
            "--cache_config_block_size", str(BLOCK_SIZE),
            "--request_generator_config_type", "trace_replay",
            "--trace_request_generator_config_trace_file", str(trace_vidur),
            "--trace_request_generator_config_date", "1970-01-01",
            "--trace_request_generator_config_prefill_scale_factor", "1",
            "--trace_request_generator_config_decode_scale_factor", "1",
            "--trace_request_generator_config_time_scale_factor", "1",
            "--trace_request_generator_config_max_tokens", "4096",
            "--execution_time_predictor_config_type", "random_forrest",
            p + "model_profiling_dataset", data["compute"],
            p + "network_profiling_dataset", data["network"],
            p + "cache_dir", str(work / "cache" / args.rf_grid),
            p + "prediction_max_tokens_per_request", "4096",
            p + "prediction_max_batch_size", str(max(args.max_num_seqs, 128)),
            p + "prediction_max_prefill_chunk_size", "4096",
            p + "num_training_job_threads", str(args.vidur_threads),
            "--metrics_config_output_dir", str(work / "out"),
            "--no-metrics_config_store_plots", "--no-metrics_config_write_json_trace",
            "--no-metrics_config_enable_chrome_trace"]
    for key, values in RF_GRIDS[args.rf_grid].items():
        argv += [p + key, *map(str, values)]
    if args.scheduler == "chunked_prefill":
        argv += ["--replica_scheduler_config_type", "sarathi",
                 "--sarathi_scheduler_config_batch_size_cap", str(args.max_num_seqs),
                 "--sarathi_scheduler_config_chunk_size", str(args.chunk_size)]
    else:
        argv += ["--replica_scheduler_config_type", "vllm",
                 "--vllm_scheduler_config_batch_size_cap", str(args.max_num_seqs),
                 "--vllm_scheduler_config_max_tokens_in_batch", str(args.max_batched_tokens)]
    return argv


def run_vidur(args: argparse.Namespace, trace: Path, work: Path) -> dict[str, Any]:
    """One Vidur simulation in its own venv; its wall and CPU times and request metrics."""
    python = Path(args.vidur_venv) / "bin" / "python"
    if not python.is_file():
        raise SpecError("--vidur-venv", f"no {python}; run with --install-vidur first")
    data = prepare_vidur_data(args, work)
    cols = read_trace(trace)
    if (cols["input_len"] + cols["output_len"]).max() > 4096:
        raise SpecError("--trace", "input_len + output_len > 4096 (Vidur would cut the prompt)")
    trace_vidur = work / "trace_vidur.csv"
    with trace_vidur.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["Date", "Time", "PromptTokenCount", "CompletionTokenCount"])
        for a, i, o in zip(cols["arrival"], cols["input_len"], cols["output_len"], strict=True):
            out.writerow(["1970-01-01", f"{a:.6f}", int(i), int(o)])
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled", HF_HUB_OFFLINE="1",
               LLMSIM_VIDUR_LOCAL=json.dumps({data["compute"]: data["compute_dir"],
                                              data["network"]: data["network_dir"]}))
    cmd = [str(python), str(DRIVER), *vidur_argv(args, trace_vidur, work, data)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    (work / "vidur.log").write_text(proc.stdout + proc.stderr)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("LLMSIM_VIDUR_TIMES")),
                None)
    if proc.returncode or line is None:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise LlmsimError(f"vidur failed (rc {proc.returncode}), log {work / 'vidur.log'}: "
                          + " | ".join(tail))
    times = json.loads(line.split(" ", 1)[1])
    return {"wall_s": wall, **times, "attention_engines": data["attention_engines"],
            "metrics": vidur_metrics(Path(times["output_dir"]) / "request_metrics.csv", cols)}


def vidur_metrics(path: Path, cols: dict[str, np.ndarray]) -> dict[str, Any]:
    """Vidur's per-request times through llmsim's own summariser (same TPOT definition)."""
    with path.open(newline="") as fh:
        rows = sorted(csv.DictReader(fh), key=lambda r: int(float(r["Request Id"])))
    n = len(rows)
    ttft = np.array([float(r["prefill_e2e_time"]) for r in rows])
    e2e = np.array([float(r["request_e2e_time"]) for r in rows])
    arrival, outs = cols["arrival"][:n], cols["output_len"][:n]
    first = arrival + ttft
    finish = arrival + e2e
    return summarize_latencies({
        "ttft": ttft, "e2e": e2e, "arrival": arrival, "finish": finish,
        "tpot": np.where(outs > 1, (finish - first) / np.maximum(outs - 1, 1), 0.0),
        "input_len": cols["input_len"][:n], "output_len": outs}).to_dict()


def install_vidur(venv: Path) -> None:
    """Create ``venv`` and install vidur (no deps), then the packages its simulator imports."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, "--no-deps", f"vidur=={VIDUR_VERSION}"], check=True)
    subprocess.run([*pip, *VIDUR_DEPS], check=True)


def _fmt(stats: dict[str, float], key: str) -> str:
    return f"{stats[key] * 1e3:9.1f}"


def print_report(llm: dict[str, Any], vid: dict[str, Any] | None) -> None:
    """Wall times, their ratio, and TTFT / TPOT / E2E (ms) and throughput of each."""
    print(f"llmsim : {llm['wall_s']:.3f} s wall, {llm['cpu_s']:.3f} s CPU per prediction (median"
          " of 5, fresh engine chain); share of predicted time by engine: "
          + ", ".join(f"{k} {100 * v:.0f}%" for k, v in llm["result"]["engine_coverage"].items()))
    metrics = {"llmsim": llm["result"]}
    if vid is not None:
        sim_s = vid["init_s"] + vid["run_s"]
        print(f"vidur  : {sim_s:.3f} s wall, {vid['cpu_s']:.3f} s CPU (predictor init "
              f"{vid['init_s']:.2f} s + simulation {vid['run_s']:.2f} s; whole process with "
              f"interpreter start and imports {vid['wall_s']:.2f} s); attention profile from: "
              + ", ".join(vid["attention_engines"]))
        print(f"speed-up (vidur / llmsim): wall {sim_s / llm['wall_s']:.1f}x, "
              f"CPU {vid['cpu_s'] / llm['cpu_s']:.1f}x")
        metrics["vidur"] = vid["metrics"]
    print(f"\n{'':8}{'metric':<10}{'mean ms':>9} {'p50 ms':>9} {'p90 ms':>9}")
    for name, m in metrics.items():
        for key in ("ttft_s", "tpot_s", "e2e_latency_s"):
            s = m[key]
            print(f"{name:<8}{key[:-2]:<10}{_fmt(s, 'mean')} {_fmt(s, 'p50')} {_fmt(s, 'p90')}")
        print(f"{name:<8}throughput {m['throughput_tokens_per_s']:.1f} output tok/s, "
              f"{m['requests_per_s']:.3f} req/s over {m['duration_s']:.1f} s")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    home = Path(os.environ.get("LLMSIM_HOME") or llmsim_home())
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, help="CSV arrival_s,input_len,output_len "
                    "(default: a Poisson trace from --qps/--num-requests/--seed)")
    ap.add_argument("--model", default="llama-2-7b", choices=sorted(VIDUR_MODELS))
    ap.add_argument("--gpu", default="a100-sxm-80gb", choices=sorted(VIDUR_GPUS))
    ap.add_argument("--tp", type=int, default=1, help="tensor parallel GPUs (one replica)")
    ap.add_argument("--qps", type=float, default=2.0)
    ap.add_argument("--num-requests", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scheduler", default="continuous", choices=("continuous",
                                                                  "chunked_prefill"),
                    help="continuous = Vidur's vllm scheduler; chunked_prefill = sarathi")
    ap.add_argument("--max-num-seqs", type=int, default=128)
    ap.add_argument("--max-batched-tokens", type=int, default=4096)
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--engines", default="chain", choices=("chain", "roofline"),
                    help="chain: store -> xgboost -> roofline; roofline: roofline only")
    ap.add_argument("--vidur-venv", type=Path, default=home / "vidur-venv")
    ap.add_argument("--vidur-data", type=Path, default=os.environ.get("VIDUR_DATA_DIR"),
                    help="Vidur's data/profiling directory (or $VIDUR_DATA_DIR)")
    ap.add_argument("--work-dir", type=Path, default=home / "vidur-bench",
                    help="Vidur's trained-predictor cache and outputs live here")
    ap.add_argument("--rf-grid", default="vidur", choices=sorted(RF_GRIDS),
                    help="vidur: its default 27-point grid search; small: one point")
    ap.add_argument("--vidur-threads", type=int, default=1, help="grid-search jobs")
    ap.add_argument("--nice", type=int, default=19, help="niceness of this run and Vidur's")
    ap.add_argument("--cpu", type=int, default=1,
                    help="pin this run and Vidur to one core (-1: no pinning)")
    ap.add_argument("--install-vidur", action="store_true")
    ap.add_argument("--skip-vidur", action="store_true", help="print only llmsim")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.nice(args.nice)  # both simulators run under the same niceness and core (shared machine)
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    try:
        work = args.work_dir.resolve()
        work.mkdir(parents=True, exist_ok=True)
        trace = args.trace or write_trace(
            work / f"trace-qps{args.qps:g}-n{args.num_requests}-s{args.seed}.csv",
            qps=args.qps, num_requests=args.num_requests, seed=args.seed)
        trace = trace.resolve()
        if args.install_vidur and not (args.vidur_venv / "bin" / "python").is_file():
            install_vidur(args.vidur_venv)
        print(f"model {args.model}, gpu {args.gpu}, scheduler {args.scheduler}, "
              f"trace {trace} ({len(read_trace(trace)['arrival'])} requests)")
        llm = run_llmsim(args, trace)
        vid = None
        if not args.skip_vidur:
            if args.vidur_data is None:
                raise SpecError("--vidur-data", "required unless --skip-vidur")
            vid = run_vidur(args, trace, work)
        print_report(llm, vid)
    except LlmsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
