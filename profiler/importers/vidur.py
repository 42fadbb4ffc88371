# SPDX-License-Identifier: Apache-2.0
"""Import Microsoft Vidur's profiling data (``data/profiling/`` @7d47513, MIT).

Layout: ``<data>/vidur/data/profiling/compute/<gpu>/<org>/<model>/mlp.csv`` (per-model layer
timings measured through Sarathi-Serve) and ``network/<system>/{all_reduce,send_recv}.csv``.
This snapshot has no ``attention.csv``, so no attention rows are imported. Provenance is
``imported:vidur@7d47513``; backend ``sarathi`` (compute) or ``nccl`` (network).

Units, verified against known cases and Vidur's profiler source:
- All ``time_stats.*`` are milliseconds. H100 Llama-2-7B ``mlp_up_proj`` at 4096 tokens, tp 1
  (GEMM 4096 x 22016 x 4096, fp16) has median 0.987 ms = 749 TFLOP/s (76 % of the 989 TFLOP/s
  dense peak); ``mlp_down_proj`` 0.441 ms = 837 TFLOP/s. The latter exceeds the H100 PCIe and
  NVL peaks, so Vidur's ``h100`` compute profile is the SXM part.
- Network ``size`` is BYTES: the profiler logs ``size * 2`` of an fp16 buffer of ``size``
  elements (``collectives_wrapper.py``). Check: H100 DGX 8-GPU all_reduce of 64 MiB, median
  0.322 ms -> bus bandwidth 2*(7/8)*67.1 MB / 0.322 ms = 365 GB/s (NVLink4; nccl-tests
  350-480 GB/s); as elements it would be 729 GB/s, above the 450 GB/s link. Send/recv 64 MiB
  H100 0.193 ms = 348 GB/s, A100 DGX 0.294 ms = 228 GB/s (P2P over NVLink, as expected).
- The model runs in fp16 (``mlp_wrapper.py`` casts it), so every spec is fp16.

Mapping of ``mlp.csv`` (m = ``num_tokens``, tp = ``num_tensor_parallel_workers``,
head_dim = n_embd / n_head), GEMMs as Sarathi's column/row-parallel linears shard them:
``attn_pre_proj`` k=n_embd, n=(n_head + 2 n_kv_head) head_dim / tp; ``attn_post_proj``
k=n_head head_dim / tp, n=n_embd; ``mlp_up_proj`` k=n_embd, n=(2 if gated else 1)
n_expanded / tp; ``mlp_down_proj`` k=n_expanded / tp, n=n_embd. Memory-bound ops:
``mlp_act`` -> swiglu (gated) or gelu over [tokens, n_expanded / tp]; where the
``post_attention_layernorm`` column exists the block is sequential with RMSNorm (Vidur's model
code allows no other norm there), so both norms -> rmsnorm and ``add`` -> add over
[tokens, n_embd]. Skipped as ambiguous from the columns: ``emb`` (vocab-parallel gather),
``attn_rope`` (rotates q and k of different head counts) and, for parallel-block models
(phi-2: no post-attention norm), the norm type and the three-way ``add``.
Repeated points (the same shape from two models, or both norms) are summarised: median of
medians, min of mins, max of maxes, mean of means; ``n`` counts them.

GPU names: ``a100`` -> a100-sxm-80gb (Vidur does not record the form factor), ``h100`` ->
h100-sxm, ``a40`` -> a40. Network systems: ``a100_dgx`` -> a100-sxm-80gb, ``h100_dgx`` ->
h100-sxm; the Azure pairwise-NVLink nodes use PCIe cards bridged in pairs, so
``a100_pairwise_nvlink`` -> a100-pcie-80gb, ``h100_pairwise_nvlink`` -> h100-nvl,
``a40_pairwise_nvlink`` -> a40; the system name is kept as the fingerprint's ``host``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import pandas as pd

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.ops import (
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    OpSpec,
)
from profiler.fingerprint import Fingerprint
from profiler.importers.common import timing_from_ms
from profiler.measurement import Measurement, Status

SOURCE = "vidur@7d47513"
PROVENANCE = f"imported:{SOURCE}"
GPU_NAMES: dict[str, str] = {"a100": "a100-sxm-80gb", "h100": "h100-sxm", "a40": "a40"}
SYSTEM_NAMES: dict[str, str] = {
    "a100_dgx": "a100-sxm-80gb",
    "h100_dgx": "h100-sxm",
    "a100_pairwise_nvlink": "a100-pcie-80gb",
    "h100_pairwise_nvlink": "h100-nvl",
    "a40_pairwise_nvlink": "a40",
}
_DEVICE_NAMES = {"a100": "NVIDIA A100", "h100": "NVIDIA H100", "a40": "NVIDIA A40"}
_COLLECTIVES = {"all_reduce": CollectiveKind.ALL_REDUCE, "send_recv": CollectiveKind.SEND_RECV}
_STATS = ("median", "min", "max", "mean", "std")
_DTYPE = DType.FP16


def root(data_dir: str | Path) -> Path:
    return Path(data_dir) / "vidur" / "data" / "profiling"


def _stats(row: pd.Series, name: str) -> tuple[float, ...] | None:
    values = tuple(row.get(f"time_stats.{name}.{stat}", math.nan) for stat in _STATS)
    return None if any(pd.isna(values[i]) for i in range(4)) else tuple(map(float, values))


def _mlp_ops(row: pd.Series) -> Iterator[tuple[str, OpSpec]]:
    """(vidur op name, spec) for every unambiguous operator of one mlp.csv row."""
    tokens, tp = int(row["num_tokens"]), int(row["num_tensor_parallel_workers"])
    heads, kv_heads = int(row["n_head"]), int(row["n_kv_head"])
    embd, expanded = int(row["n_embd"]), int(row["n_expanded_embd"])
    gated = str(row["use_gated_mlp"]).lower() == "true"
    if embd % heads or heads % tp or kv_heads % tp or expanded % tp:
        return
    head_dim = embd // heads
    up = (2 if gated else 1) * expanded // tp
    gemms = {
        "attn_pre_proj": (embd, (heads + 2 * kv_heads) * head_dim // tp),
        "attn_post_proj": (heads * head_dim // tp, embd),
        "mlp_up_proj": (embd, up),
        "mlp_down_proj": (expanded // tp, embd),
    }
    for name, (k, n) in gemms.items():
        yield name, GemmSpec(m=tokens, n=n, k=k, dtype=_DTYPE)
    act = MemoryOpKind.SWIGLU if gated else MemoryOpKind.GELU
    yield "mlp_act", MemoryBoundSpec(kind=act, rows=tokens, cols=expanded // tp, dtype=_DTYPE)
    if "time_stats.post_attention_layernorm.median" in row.index:
        for name in ("input_layernorm", "post_attention_layernorm"):
            yield name, MemoryBoundSpec(kind=MemoryOpKind.RMSNORM, rows=tokens, cols=embd,
                                        dtype=_DTYPE)
        yield "add", MemoryBoundSpec(kind=MemoryOpKind.ADD, rows=tokens, cols=embd, dtype=_DTYPE)


def _combine(points: dict[tuple[str, str], list[tuple[OpSpec, tuple[float, ...]]]],
             fingerprint_for: dict[tuple[str, str], Fingerprint],
             backend: str) -> Iterator[Measurement]:
    for key, found in points.items():
        stats = [s for _, s in found]
        single = len(stats) == 1
        timing = timing_from_ms(
            median=float(pd.Series([s[0] for s in stats]).median()),
            minimum=min(s[1] for s in stats), maximum=max(s[2] for s in stats),
            mean=sum(s[3] for s in stats) / len(stats),
            std=stats[0][4] if single else math.nan, n=len(stats))
        yield Measurement(op=found[0][0], fingerprint=fingerprint_for[key], backend=backend,
                          status=Status.OK, timing=timing, provenance=PROVENANCE)


def compute_measurements(data_dir: str | Path, *, gpus: Iterable[str] | None = None,
                         limit: int | None = None) -> Iterator[Measurement]:
    """GEMM and memory-bound rows from every ``mlp.csv`` (``limit`` rows per file)."""
    base = root(data_dir) / "compute"
    if not base.is_dir():
        raise SpecError("data_dir", f"no Vidur compute profiles at {base}")
    for gpu in sorted(set(gpus) if gpus is not None else set(GPU_NAMES)):
        if gpu not in GPU_NAMES:
            continue
        fingerprint = Fingerprint(hardware=GPU_NAMES[gpu], device_name=_DEVICE_NAMES[gpu],
                                  device_count=1)
        points: dict[tuple[str, str], list[tuple[OpSpec, tuple[float, ...]]]] = {}
        for path in sorted((base / gpu).glob("*/*/mlp.csv")):
            frame = pd.read_csv(path)
            if limit is not None:
                frame = frame.head(limit)
            for _, row in frame.iterrows():
                for name, op in _mlp_ops(row):
                    stats = _stats(row, name)
                    if stats is not None:
                        points.setdefault((op.key, gpu), []).append((op, stats))
        yield from _combine(points, dict.fromkeys(points, fingerprint), "sarathi")


def network_measurements(data_dir: str | Path, *, systems: Iterable[str] | None = None,
                         limit: int | None = None) -> Iterator[Measurement]:
    """all_reduce and send_recv rows of every network system (``limit`` rows per file)."""
    base = root(data_dir) / "network"
    if not base.is_dir():
        raise SpecError("data_dir", f"no Vidur network profiles at {base}")
    for system in sorted(set(systems) if systems is not None else set(SYSTEM_NAMES)):
        if system not in SYSTEM_NAMES:
            continue
        gpu = system.split("_", 1)[0]
        for path in sorted((base / system).glob("*.csv")):
            frame = pd.read_csv(path)
            if limit is not None:
                frame = frame.head(limit)
            points: dict[tuple[str, str], list[tuple[OpSpec, tuple[float, ...]]]] = {}
            fingerprints: dict[tuple[str, str], Fingerprint] = {}
            for _, row in frame.iterrows():
                kind = _COLLECTIVES.get(str(row["collective"]))
                stats = _stats(row, str(row["collective"]))
                if kind is None or stats is None:
                    continue
                workers, per_node = int(row["num_workers"]), int(row["devices_per_node"])
                op = CollectiveSpec(kind=kind, size_bytes=int(row["size"]), group_size=workers,
                                    ranks_per_node=per_node, dtype=_DTYPE)
                points.setdefault((op.key, system), []).append((op, stats))
                fingerprints[(op.key, system)] = Fingerprint(
                    hardware=SYSTEM_NAMES[system], device_name=_DEVICE_NAMES[gpu],
                    device_count=workers, host=system)
            yield from _combine(points, fingerprints, "nccl")


def measurements(data_dir: str | Path, *, gpus: Iterable[str] | None = None,
                 families: Iterable[str] | None = None,
                 limit: int | None = None) -> Iterator[Measurement]:
    """Every importable Vidur measurement under ``data_dir`` (the folder holding ``vidur/``).

    ``gpus`` filters both compute GPUs (``a100``) and network systems by their GPU prefix.
    """
    wanted = set(families) if families is not None else {"gemm", "memory", "collective"}
    if wanted & {"gemm", "memory"}:
        for m in compute_measurements(data_dir, gpus=gpus, limit=limit):
            if m.op.family in wanted:
                yield m
    if "collective" in wanted:
        systems = None if gpus is None else [s for s in SYSTEM_NAMES
                                             if s.split("_", 1)[0] in set(gpus)]
        yield from network_measurements(data_dir, systems=systems, limit=limit)
