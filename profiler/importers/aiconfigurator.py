# SPDX-License-Identifier: Apache-2.0
"""Import NVIDIA AIConfigurator's operator database (aiconfigurator-core 0.12.0, Apache-2.0).

Layout: ``<data>/aiconfigurator/systems/data/<gpu>/<family>/<framework>/<version>/*.parquet``.
Imported here: ``gemm_perf`` (GEMMs), ``context_attention_perf`` / ``generation_attention_perf``
(prefill / decode attention) and ``comm/nccl/*/nccl_perf`` (NCCL collectives), for every
framework and version present. Provenance is
``imported:aiconfigurator-0.12.0/<framework>-<version>`` (from the folder names); backend is
``<framework>/<kernel_source>`` (just ``nccl`` for NCCL), with the quantisation mode appended
where two modes share one dtype (``/fp8_block``, ``/int8_wo``).

Units, verified against known cases:
- ``latency`` is milliseconds. H100 bf16 GEMM 8192x65536x51200 (trtllm 1.3.0rc20) takes
  79.2 ms = 694 TFLOP/s, 70 % of the 989 TFLOP/s dense peak; read as seconds or microseconds
  it would be absurd.
- ``message_size`` is ELEMENTS of ``nccl_dtype`` (half = 2 bytes, int8 = 1 byte): the collector
  passes nccl-tests ``-b <bytes>`` and logs ``bytes // bytes_per_element``. Check: H100 8-GPU
  half all_reduce, message_size 268435456 (512 MiB), 2.111 ms -> bus bandwidth
  2*(7/8)*536.9 MB / 2.111 ms = 445 GB/s (NVLink4 + NVLS; nccl-tests reports 350-480 GB/s);
  read as bytes it would be 222 GB/s. A100: 222 GB/s (NVLink3, ~230 expected). So
  ``size_bytes = message_size * element bytes``, the nccl-tests size convention, and
  ``latency`` is nccl-tests' out-of-place time converted to ms.
- Generation rows have ``isl = 1`` and ``step`` = tokens already cached, so the decode step
  attends over ``kv_len = step + 1`` keys; context rows have ``step = 0``, ``q_len = kv_len =
  isl``, causal.

Mapping choices: attention rows with a sliding window (``window_size > 0``) are skipped (our
spec has no window); context rows whose ``attn_dtype`` and ``kv_cache_dtype`` differ are
skipped (the spec has one dtype); decode rows take the KV-cache dtype (decode attention is
bound by reading the cache). Repeated points (e.g. a folder holding two copies) are summarised:
``n`` counts the repeats, ``median_s`` is their median. ``custom_allreduce``, MoE, MLA and other
tables are not imported yet. Some NCCL folders hold rows whose ``version`` column names another
NCCL release than the folder; the folder names the provenance, the column goes to the
fingerprint's ``nccl`` field.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.ops import AttentionSpec, CollectiveKind, CollectiveSpec, GemmSpec, Phase
from profiler.fingerprint import Fingerprint
from profiler.importers.common import aggregate_latency, timing_from_ms
from profiler.measurement import Measurement, Status

SOURCE = "aiconfigurator-0.12.0"
GPU_NAMES: dict[str, str] = {
    "a100_sxm": "a100-sxm-80gb",
    "h100_sxm": "h100-sxm",
    "b200_sxm": "b200",
    "l40s": "l40s",
}
# Device names for legacy tables that lack the ``device`` column.
_DEVICE_NAMES = {"a100_sxm": "NVIDIA A100-SXM4-80GB", "h100_sxm": "NVIDIA H100 80GB HBM3",
                 "b200_sxm": "NVIDIA B200", "l40s": "NVIDIA L40S"}
# gemm_dtype -> (our dtype, backend suffix when the dtype alone does not name the kernel).
GEMM_DTYPES: dict[str, tuple[DType, str]] = {
    "bfloat16": (DType.BF16, ""),
    "float16": (DType.FP16, ""),
    "fp8": (DType.FP8, ""),  # per-tensor scaled fp8
    "fp8_block": (DType.FP8, "fp8_block"),  # DeepSeek-style 128-block scaled fp8
    "nvfp4": (DType.FP4, ""),
    "sq": (DType.INT8, ""),  # SmoothQuant W8A8
    "int8_wo": (DType.INT8, "int8_wo"),  # weight-only int8, bf16 activations
    "int4_wo": (DType.INT4, ""),  # weight-only int4 (our INT4 is weight-only)
}
_ATTN_DTYPES = {"bfloat16": DType.BF16, "float16": DType.FP16, "fp8": DType.FP8}
_NCCL_DTYPES = {"half": DType.FP16, "int8": DType.INT8}
_NCCL_OPS = {"all_reduce": CollectiveKind.ALL_REDUCE, "all_gather": CollectiveKind.ALL_GATHER,
             "reduce_scatter": CollectiveKind.REDUCE_SCATTER,
             "alltoall": CollectiveKind.ALL_TO_ALL}
# our family -> (folder under <gpu>/, table file stems)
TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemm": ("gemm", ("gemm_perf",)),
    "attention": ("attention", ("context_attention_perf", "generation_attention_perf")),
    "collective": ("comm", ("nccl_perf",)),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """One published Parquet table and where it came from."""

    path: Path
    gpu: str  # folder name, e.g. "h100_sxm"
    family: str  # our family
    framework: str  # folder name, e.g. "trtllm", "nccl"
    version: str  # folder name

    @property
    def hardware(self) -> str:
        return GPU_NAMES[self.gpu]

    @property
    def provenance(self) -> str:
        return f"imported:{SOURCE}/{self.framework}-{self.version}"


def root(data_dir: str | Path) -> Path:
    return Path(data_dir) / "aiconfigurator" / "systems" / "data"


def tables(data_dir: str | Path, *, gpus: Iterable[str] | None = None,
           families: Iterable[str] | None = None) -> list[Table]:
    """The importable tables under ``data_dir``, sorted by path."""
    base = root(data_dir)
    if not base.is_dir():
        raise SpecError("data_dir", f"no AIConfigurator data at {base}")
    wanted_gpus = set(gpus) if gpus is not None else set(GPU_NAMES)
    wanted = set(families) if families is not None else set(TABLES)
    found: list[Table] = []
    for gpu in sorted(wanted_gpus & set(GPU_NAMES)):
        for family in sorted(wanted & set(TABLES)):
            folder, stems = TABLES[family]
            for stem in stems:
                for path in sorted((base / gpu / folder).glob(f"*/*/{stem}.parquet")):
                    framework, version = path.parent.parent.name, path.parent.name
                    if family == "collective" and framework != "nccl":
                        continue
                    found.append(Table(path=path, gpu=gpu, family=family,
                                       framework=framework, version=version))
    return found


def _fingerprint(table: Table, device: str, count: int, nccl: str = "") -> Fingerprint:
    return Fingerprint(hardware=table.hardware, device_name=device or _DEVICE_NAMES[table.gpu],
                       device_count=count, nccl=nccl)


def _backend(table: Table, kernel_source: str, suffix: str = "") -> str:
    base = table.framework if kernel_source.lower() == table.framework else \
        f"{table.framework}/{kernel_source}"
    return f"{base}/{suffix}" if suffix else base


def _device(frame: pd.DataFrame) -> str:
    return str(frame["device"].iloc[0]) if "device" in frame and len(frame) else ""


def _timing(row: object):  # noqa: ANN202 - a Timing
    return timing_from_ms(median=row.lat_median, minimum=row.lat_min, maximum=row.lat_max,
                          mean=row.lat_mean, n=row.lat_count)


def _gemm(table: Table, frame: pd.DataFrame) -> Iterator[Measurement]:
    frame = frame[frame["gemm_dtype"].isin(list(GEMM_DTYPES))]
    fingerprint = _fingerprint(table, _device(frame), 1)
    rows = aggregate_latency(frame, ["kernel_source", "gemm_dtype", "m", "n", "k"])
    for row in rows.itertuples(index=False):
        dtype, suffix = GEMM_DTYPES[row.gemm_dtype]
        yield Measurement(op=GemmSpec(m=int(row.m), n=int(row.n), k=int(row.k), dtype=dtype),
                          fingerprint=fingerprint,
                          backend=_backend(table, row.kernel_source, suffix),
                          status=Status.OK, timing=_timing(row), provenance=table.provenance)


def _attention(table: Table, frame: pd.DataFrame) -> Iterator[Measurement]:
    decode = table.path.stem.startswith("generation")
    if "window_size" in frame:
        frame = frame[frame["window_size"] == 0]
    frame = frame[frame["attn_dtype"].isin(list(_ATTN_DTYPES))
                  & frame["kv_cache_dtype"].isin(list(_ATTN_DTYPES))]
    if not decode:
        frame = frame[frame["attn_dtype"] == frame["kv_cache_dtype"]]
    frame = frame[frame["num_heads"] % frame["num_key_value_heads"] == 0]
    fingerprint = _fingerprint(table, _device(frame), 1)
    keys = ["kernel_source", "batch_size", "isl", "step", "num_heads", "num_key_value_heads",
            "head_dim", "attn_dtype", "kv_cache_dtype"]
    for row in aggregate_latency(frame, keys).itertuples(index=False):
        if decode:
            q_len, kv_len, dtype = 1, int(row.step) + int(row.isl), row.kv_cache_dtype
        else:
            q_len = kv_len = int(row.isl)
            kv_len += int(row.step)
            dtype = row.attn_dtype
        op = AttentionSpec(batch=int(row.batch_size), q_len=q_len, kv_len=kv_len,
                           heads=int(row.num_heads), kv_heads=int(row.num_key_value_heads),
                           head_dim=int(row.head_dim), causal=True,
                           phase=Phase.DECODE if decode else Phase.PREFILL,
                           dtype=_ATTN_DTYPES[dtype])
        yield Measurement(op=op, fingerprint=fingerprint,
                          backend=_backend(table, row.kernel_source), status=Status.OK,
                          timing=_timing(row), provenance=table.provenance)


def _collective(table: Table, frame: pd.DataFrame) -> Iterator[Measurement]:
    frame = frame[frame["op_name"].isin(list(_NCCL_OPS)) & frame["nccl_dtype"].isin(
        list(_NCCL_DTYPES))]
    device = _device(frame)
    nccl = str(frame["version"].iloc[0]) if "version" in frame and len(frame) else table.version
    for row in aggregate_latency(frame, ["op_name", "nccl_dtype", "num_gpus",
                                         "message_size"]).itertuples(index=False):
        dtype = _NCCL_DTYPES[row.nccl_dtype]
        gpus = int(row.num_gpus)
        op = CollectiveSpec(kind=_NCCL_OPS[row.op_name],
                            size_bytes=int(row.message_size * dtype.bytes), group_size=gpus,
                            ranks_per_node=gpus, dtype=dtype)
        yield Measurement(op=op, fingerprint=_fingerprint(table, device, gpus, nccl),
                          backend="nccl", status=Status.OK, timing=_timing(row),
                          provenance=table.provenance)


_READERS = {"gemm": _gemm, "attention": _attention, "collective": _collective}


def table_measurements(table: Table, *, limit: int | None = None) -> Iterator[Measurement]:
    """Measurements of one table; ``limit`` reads only its first rows (for quick checks)."""
    frame = pd.read_parquet(table.path)
    if limit is not None:
        frame = frame.head(limit)
    yield from _READERS[table.family](table, frame)


def measurements(data_dir: str | Path, *, gpus: Iterable[str] | None = None,
                 families: Iterable[str] | None = None,
                 limit: int | None = None) -> Iterator[Measurement]:
    """Every importable measurement under ``data_dir`` (the folder holding ``aiconfigurator/``)."""
    for table in tables(data_dir, gpus=gpus, families=families):
        yield from table_measurements(table, limit=limit)
