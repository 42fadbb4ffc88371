# SPDX-License-Identifier: Apache-2.0
"""Features of the cross-GPU (transfer) predictor: the shape's work decomposition on a GPU,
measured against that GPU's spec, in units that mean the same thing on every GPU.

A per-(hardware, family) model (`predictors.features`) sees one GPU, so its columns can be raw
dimensions. A model that must answer for a GPU it never saw needs the shape described *relative
to the GPU*: waves of output tiles over its SMs and the idle tail of the last wave (NVIDIA
"Matrix Multiplication Background User's Guide", sections "Tile Quantization" and "Wave
Quantization"), arithmetic intensity against the GPU's ridge point (Williams, Waterman &
Patterson, "Roofline", CACM 2009), working set against its L2, the compute, memory and link time
bounds at its vendor peaks (peak FLOP/s for the op's dtype, HBM and link bandwidth, link
latency), and the roofline's own tile efficiency. The spec enters only through such ratios: raw
spec columns (peak, bandwidth, SM count, L2 size as values) were tried and dropped: with four
training GPUs a tree can only use them to recognise a GPU, and it routes an unseen one to
whichever GPU a split happens to put it with (leave-one-out attention MAPE, 2,000 rows per GPU,
300 trees: A100 34.4% with them and 21.6% without; B200 22.7 / 23.4, H100 28.4 / 27.6, L40S 59.6
/ 60.2). The idea is NeuSight's (Lee et al., "Forecasting GPU Performance for Deep Learning
Training and Inference", ASPLOS 2025, arXiv:2407.13853): predict the utilisation of tile-level
work from the device's specifications, not the latency of a shape on one device. The target
(`predictors.transfer`) is the latency relative to the vendor-peak roofline of that GPU
(`ideal_seconds`).

The hardware YAML (`analytical.hardware`) exposes no clock, so none is used; its measured L2
bandwidth (``memory.l2_bandwidth_gb_per_s``) prices the L2-resident share of a GEMM's or an
attention kernel's operands (`warm_memory_s`). ``TRANSFER_SCHEMA_VERSION`` changes whenever a formula here does. The provenance stack
(`predictors.transfer_data.stack_of`) is appended by the model as one-hot columns; its
vocabulary is stored with the model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from analytical.errors import SpecError, UnknownNameError
from analytical.hardware import HardwareSpec
from analytical.nccl import (
    NcclTransport,
    graph_bandwidth,
    intra_transport,
    nccl_protocol_seconds,
    nccl_time,
    node_link,
    ring_steps,
)
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    GemmSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    OpSpec,
    Phase,
)
from analytical.roofline import gemm_tile_efficiency
from predictors.features import (
    _log2,
    _peak_flops,
    fill_rows,
    ideal_time_s,
    row_alignment_log2,
)
from predictors.transfer_harness import footprint, resident_share
from predictors.transfer_kernels import (
    ATTN_Q_BLOCK,
    DECODE_KERNEL_NAMES,
    SMEM_TILE_NAMES,
    decode_kernel,
    fp8_context_spills,
    smem_tiles,
)

TRANSFER_SCHEMA_VERSION = 15  # 2: vendor-peak roofline target; 3: dtype as bits, floor per class;
# 4: collectives relative to NCCL's own ring model; 5: NCCL's ring + tree model on its topology's
# link credit (`analytical.nccl`); 6: and the warm-L2 memory bound for GEMM and attention;
# 7: the stack's release as a column (`predictors.transfer_data.version_of`); 8: the floor in
# SM clock cycles at the GPU's boost clock (`predictors.transfer.launch_floor`); 9: NCCL's
# intra-node transport of a collective (`_nccl_transport`); 10: attention's FlashAttention
# tiles against the SM's shared memory and the async-MMA architectures
# (`predictors.transfer_kernels.smem_tiles`); 11: no message size over L2 for collectives
# (`collective_row`); 12: TensorRT-LLM's generation kernel (masked MHA or XQA) and its fp8-KV
# dequantization (`predictors.transfer_kernels.decode_kernel`); 13: a send_recv over NVLink
# inside a node at its path's own bandwidth, NCCL's denominator and columns
# (`analytical.nccl._p2p_bandwidth`); 14: GEMMs as their harness repeats them, copies of the
# weight or an emptied L2 (`predictors.transfer_harness`); 15: the Ada fp8 context kernel that
# spills its tile at the 16-bit peak (`predictors.transfer_kernels.fp8_context_spills`)
TRANSFER_FAMILIES = ("gemm", "attention", "collective", "memory")
# Families whose target denominator serves the L2-resident share of the operands from L2
# (`warm_roofline_s`): the curated GEMM and attention rows are TensorRT-LLM's and Vidur's
# repeated launches on the same buffers. Not memory ops: Vidur's eager PyTorch norms and
# activations, held out leave-one-GPU-out (3,000 rows per GPU, 600 trees) with the warm bounds
# as extra columns, were 9.6 / 22.3 / 24.3% on A100 / A40 / H100, with them also as the
# denominator 18.3 / 99.6 / 36.0%.
WARM_L2_FAMILIES = ("gemm", "attention")

# CTA output tiles of CUTLASS/cuBLAS GEMMs (128x128 default, 128x256 and 256x128 Hopper wide
# tiles, 64x128 for skinny problems): each tile runs on one SM.
_GEMM_TILES = ((64, 128), (128, 128), (128, 256), (256, 128))
# FlashAttention-2 forward: one CTA per (batch, head, `ATTN_Q_BLOCK`-query block); split-KV
# decode (FlashDecoding) cuts the KV sequence in blocks of 256.
_ATTN_KV_BLOCK = 256


def _waves(ctas: float, hw: HardwareSpec) -> list[float]:
    """log2 CTAs, waves over the SMs, busy fraction of the issued waves (1.0: no idle tail)."""
    waves = ctas / hw.compute_units
    busy = waves / math.ceil(waves) if waves > 0 else 0.0
    return [_log2(ctas), _log2(waves), busy]


def _wave_names(prefix: str) -> list[str]:
    return [f"{prefix}_log2_ctas", f"{prefix}_log2_waves", f"{prefix}_wave_busy"]


def warm_memory_s(nbytes: float, hw: HardwareSpec, share: float | None = None) -> float:
    """Time to move ``nbytes`` when the share of them that fits in L2 is already there: the
    benchmarks repeat the same kernel on the same buffers without flushing L2, so what fits
    stays resident between repetitions and is read at the L2's bandwidth, the rest at DRAM's.
    The L2 bandwidth is the YAML's measured one (``memory.l2_bandwidth_gb_per_s``, RRZE-HPC
    gpu-benches `gpu-l2-cache`: L40 5.2 TB/s against 0.86 of GDDR6, H200 9.7 against 4.8);
    a GPU without a published figure gets its DRAM bandwidth, i.e. no L2 effect. ``share``:
    the resident share where the harness cycles through copies of the weight
    (`predictors.transfer_harness.resident_share`)."""
    dram = hw.memory_bw_bytes_per_s
    l2_bw = hw.l2_bw_bytes_per_s or dram
    if share is None:
        share = min(1.0, hw.l2_bytes / nbytes) if nbytes > 0 else 1.0
    return nbytes * (share / l2_bw + (1.0 - share) / dram)


def warm_roofline_s(op: OpSpec, hw: HardwareSpec, copies: int = 1) -> float:
    """The vendor-peak roofline with `warm_memory_s` as its memory term, the harness cycling
    through ``copies`` weights (`predictors.transfer_harness`); an fp8 context kernel that
    spills its tile (`predictors.transfer_kernels.fp8_context_spills`) at the 16-bit peak."""
    peak = _peak_flops(op, hw)
    if isinstance(op, AttentionSpec) and fp8_context_spills(op, hw):
        peak = hw.peak_flops_bf16
    return max(op.flops / peak, warm_memory_s(op.bytes, hw, resident_share(op, hw, copies)))


def _work(op: OpSpec, hw: HardwareSpec, working_set: float, *, warm: bool = False,
          copies: int = 1) -> list[float]:
    """FLOPs, bytes, intensity over the ridge point, the three time bounds, working set / L2.
    With ``warm`` the memory and roofline bounds (and the bandwidth of the ridge point) are
    the warm-L2 ones the target is divided by (`warm_roofline_s`), so the columns describe
    what the denominator does: with the cold columns beside a warm denominator, GEMMs held
    out on B200 (whose L2 is 1.4x its HBM where A100's and H100's are 2.6x and 2.9x) went
    from 17.6% to 21.0% and those on A100 to 13.5%; with warm columns 21.1% and 12.6%
    (L40S 28.7% -> 26.3%; 3,000 rows per GPU, 600 trees). Attention keeps the cold columns:
    warm ones moved it from 20.6 / 27.5 / 27.5 / 40.4% to 23.7 / 30.0 / 29.2 / 40.5% (A100,
    B200, H100, L40S)."""
    peak = _peak_flops(op, hw)
    intensity = op.flops / op.bytes if op.bytes else 0.0
    memory_s = op.bytes / hw.memory_bw_bytes_per_s
    roofline_s = ideal_time_s(op, hw)
    if warm:
        share = resident_share(op, hw, copies)
        memory_s, roofline_s = warm_memory_s(op.bytes, hw, share), warm_roofline_s(op, hw, copies)
    bw = op.bytes / memory_s if memory_s > 0 else hw.memory_bw_bytes_per_s
    return [_log2(op.flops), _log2(op.bytes), _log2(intensity), _log2(intensity * bw / peak),
            _log2(op.flops / peak), _log2(memory_s), _log2(roofline_s),
            _log2(working_set / hw.l2_bytes)]


_WORK = ["log2_flops", "log2_bytes", "log2_intensity", "log2_intensity_over_ridge",
         "log2_compute_s", "log2_memory_s", "log2_roofline_s", "log2_working_set_over_l2"]


def _dtype(op: OpSpec) -> list[float]:
    """Bits per element and whether the dtype is a scaled low-precision one (fp8, fp4, int):
    numbers, not a one-hot, so a dtype no training GPU ran (fp4 exists only on Blackwell) is
    placed beside its nearest relative (fp8, also a quantised GEMM with scales and an
    activation-quantisation step) instead of on an all-zero row the trees never saw."""
    bits = 8.0 * op.dtype.bytes
    return [bits, 1.0 if bits <= 8 else 0.0]


_DTYPE = ["dtype_bits", "dtype_quantised"]


def gemm_row(op: GemmSpec, hw: HardwareSpec, copies: int = 1) -> list[float]:
    e = op.dtype.bytes
    row = [_log2(d) for d in (op.m, op.n, op.k, op.batch)]
    row += _work(op, hw, footprint(op, copies), warm=True, copies=copies)
    for tile_m, tile_n in _GEMM_TILES:
        m_tiles, n_tiles = math.ceil(op.m / tile_m), math.ceil(op.n / tile_n)
        ctas = op.batch * m_tiles * n_tiles
        padded = (op.m * op.n) / (m_tiles * tile_m * n_tiles * tile_n)
        # operand bytes every CTA streams through its SM: an A panel and a B panel over k,
        # and the time if all of it came from HBM (the no-L2-reuse bound)
        tile_bytes = (tile_m + tile_n) * op.k * e
        row += _waves(ctas, hw) + [padded, _log2(tile_bytes),
                                   _log2(ctas * tile_bytes / hw.memory_bw_bytes_per_s)]
    row += [gemm_tile_efficiency(op, hw), row_alignment_log2(op.k, op.dtype),
            row_alignment_log2(op.n, op.dtype)]
    return row + _dtype(op)


_GEMM = (["log2_m", "log2_n", "log2_k", "log2_batch"] + _WORK
         + [n for tm, tn in _GEMM_TILES for n in
            (*_wave_names(f"t{tm}x{tn}"), f"t{tm}x{tn}_padding_eff", f"t{tm}x{tn}_log2_tile_bytes",
             f"t{tm}x{tn}_log2_stream_s")]
         + ["roofline_tile_efficiency", "k_row_align_log2_bytes", "n_row_align_log2_bytes"]
         + _DTYPE)


def attention_row(op: AttentionSpec, hw: HardwareSpec) -> list[float]:
    e = op.dtype.bytes
    kv_bytes = 2.0 * op.batch * op.kv_len * op.kv_heads * op.head_dim * e
    row = [_log2(d) for d in (op.batch, op.q_len, op.kv_len, op.heads, op.kv_heads,
                              op.head_dim)]
    row += [op.heads / op.kv_heads, float(op.causal), float(op.phase == Phase.DECODE),
            float(op.backward), _log2(op.score_pairs)]
    row += _work(op, hw, kv_bytes)
    row += _waves(op.batch * op.heads * math.ceil(op.q_len / ATTN_Q_BLOCK), hw)
    row += _waves(op.batch * op.kv_heads * math.ceil(op.kv_len / _ATTN_KV_BLOCK), hw)
    row += _waves(op.batch * op.kv_heads, hw)
    # bytes of K and V one CTA streams per query block: the kernel's inner loop
    row += [_log2(2.0 * op.kv_len * op.head_dim * e)]
    row += _flash_traffic(op, hw)
    row += smem_tiles(op, hw)
    row += decode_kernel(op, hw)
    return row + _dtype(op)


def _flash_traffic(op: AttentionSpec, hw: HardwareSpec) -> list[float]:
    """Time bounds of attention as FlashAttention runs it (Dao 2023, arXiv 2307.08691,
    Algorithm 1): every (batch, head, 128-query tile) CTA re-reads its KV head's keys and
    values (the causal mask halves what it reads on average: score pairs / queries keys per
    query), so K/V traffic from L2 or HBM is q tiles x that, and the time to stream it at
    HBM bandwidth; and the decode bound when the CTAs (one per batch x KV head without a
    split) cover fewer SMs than the GPU has, so only that share of the bandwidth is drawn
    (Flash-Decoding, Dao et al. 2023, splits the KV sequence for exactly this case)."""
    e = op.dtype.bytes
    keys = op.score_pairs / op.q_len
    tiles = math.ceil(op.q_len / ATTN_Q_BLOCK)
    kv_traffic = 2.0 * op.batch * op.heads * tiles * keys * op.head_dim * e
    bw = hw.memory_bw_bytes_per_s
    ctas = op.batch * op.kv_heads
    share = min(1.0, ctas / hw.compute_units)
    return [_log2(kv_traffic / bw), _log2(op.bytes / (bw * share)),
            _log2(max(op.flops / _peak_flops(op, hw), kv_traffic / bw))]


_ATTENTION = (["log2_batch", "log2_q_len", "log2_kv_len", "log2_heads", "log2_kv_heads",
               "log2_head_dim", "gqa_ratio", "causal", "decode", "backward",
               "log2_score_pairs"] + _WORK + _wave_names("qblock")
              + _wave_names("kvsplit") + _wave_names("kvhead") + ["log2_kv_bytes_per_cta"]
              + ["log2_flash_kv_traffic_s", "log2_unsplit_decode_s", "log2_flash_roofline_s"]
              + SMEM_TILE_NAMES + DECODE_KERNEL_NAMES + _DTYPE)


# Collectives are priced relative to NCCL's own cost model (`analytical.nccl`: ring and tree x
# LL / LL128 / Simple on the YAML's links as NCCL's topology credits them, its fastest choice).
_NCCL_FABRICS = ("nvlink", "pcie", "net")


def collective_row(op: CollectiveSpec, hw: HardwareSpec) -> list[float]:
    """Message, group and NCCL's own model of the collective on ``hw`` (``_COLLECTIVE``).
    No message size over the L2 (schema <= 9 had it): NCCL moves a message through fixed-size
    FIFO buffers (NCCL_BUFFSIZE, 4 MiB by default), not through a working set that fits the
    L2 or not, so the column only told the trees which GPU a row came from (L2 6 / 40 / 50 /
    96 / 126 MB on A40 / A100 / H100 / L40S / B200). Leave-one-GPU-out without it (3,000 rows
    per GPU, no copies of the held-out GPU, seeds 0 / 1 / 2): A100 PCIe 66.9 / 90.0 / 93.5 ->
    30.8 / 27.3 / 29.7%, B200 28.5 / 27.7 / 28.8 -> 26.8 / 26.7 / 27.4, mean of the seven
    48.6 / 52.9 / 52.7 -> 46.9 / 47.6 / 47.5; but L40S 59.3 / 65.6 / 61.7 -> 82.3 / 89.7 /
    86.3 and H100 SXM 1-3 points worse: no other GPU has L40S's P2P-less 4- and 8-GPU
    collapse, so what it is told there depends on which GPU the trees place it beside."""
    _, fabric = node_link(op, hw)
    bandwidth = graph_bandwidth(op, hw)
    steps, inter = ring_steps(op)
    protos = nccl_protocol_seconds(op, hw)
    best = min(protos)
    row = [_log2(op.size_bytes), _log2(op.size_bytes / op.group_size), float(op.group_size),
           float(op.ranks_per_node), float(op.nodes), op.bus_factor, _log2(op.bytes)]
    row += [_log2(op.bytes / bandwidth), _log2(ideal_time_s(op, hw))]
    row += [_log2(best), float(steps), float(inter), float(int(np.argmin(protos))),
            _log2(op.bytes / bandwidth / best)]
    row += [1.0 if fabric == f else 0.0 for f in _NCCL_FABRICS[:2]] + [float(op.nodes > 1)]
    row += _nccl_transport(op, hw)
    row += [1.0 if op.kind == k else 0.0 for k in CollectiveKind]
    return row + _dtype(op)


def _nccl_transport(op: CollectiveSpec, hw: HardwareSpec) -> list[float]:
    """How NCCL moves the group's data inside the node, one-hot: NVLink, PCIe P2P, or SHM
    through host memory where its topology refuses P2P (`analytical.nccl.intra_transport`);
    all zero with one rank per node. It separates GPUs whose PCIe links look alike on the
    datasheet but not to NCCL: held out leave-one-GPU-out (3,000 rows per GPU, seeds 0 / 1,
    without copies of the held-out rows, `predictors.transfer_eval.copies_of`), A100 PCIe (P2P
    through PCIe switches) went 92.2 / 120.1% -> 66.9 / 90.0% once L40S's P2P-less rows
    stopped teaching that 4 GPUs on PCIe collapse; the other six GPUs moved by at most 2
    points, except L40S at seed 1 (60.0 -> 65.6). The searched graph's channel count,
    NCCL's chosen algorithm and the latency share of its time were tried beside it and
    rejected: H100 NVL 28.1 -> 146.6%, L40S 60.4 -> 107.2% (the channel count names a GPU)."""
    transport = intra_transport(op, hw)
    return [1.0 if transport == t else 0.0 for t in NcclTransport]


_COLLECTIVE = (["log2_size_bytes", "log2_chunk_bytes", "group_size", "ranks_per_node", "nodes",
                "bus_factor", "log2_bus_bytes", "log2_link_s", "log2_roofline_s", "log2_nccl_s",
                "ring_steps", "ring_inter_steps", "nccl_protocol", "nccl_bandwidth_share"]
               + [f"fabric_{f}" for f in _NCCL_FABRICS]
               + [f"transport_{t.value}" for t in NcclTransport]
               + [f"kind_{k.value}" for k in CollectiveKind] + _DTYPE)


def memory_row(op: MemoryBoundSpec, hw: HardwareSpec) -> list[float]:
    row = [_log2(op.rows), _log2(op.cols), float(op.backward)]
    row += _work(op, hw, op.bytes)
    row += _waves(op.rows, hw)  # one CTA per row: the usual norm/activation launch
    row += [1.0 if op.kind == k else 0.0 for k in MemoryOpKind]
    return row + _dtype(op)


_MEMORY = (["log2_rows", "log2_cols", "backward"] + _WORK + _wave_names("row")
           + [f"kind_{k.value}" for k in MemoryOpKind] + _DTYPE)

TRANSFER_FEATURES: dict[str, tuple[str, ...]] = {
    "gemm": tuple(_GEMM), "attention": tuple(_ATTENTION), "collective": tuple(_COLLECTIVE),
    "memory": tuple(_MEMORY)}
_ROWS: dict[str, tuple[type, Callable[..., list[float]]]] = {
    "gemm": (GemmSpec, gemm_row), "attention": (AttentionSpec, attention_row),
    "collective": (CollectiveSpec, collective_row), "memory": (MemoryBoundSpec, memory_row)}


def transfer_feature_names(family: str) -> list[str]:
    """The ordered hardware + work columns of ``family`` (before the stack one-hot)."""
    try:
        return list(TRANSFER_FEATURES[family])
    except KeyError:
        raise UnknownNameError("transfer family", family, list(TRANSFER_FEATURES)) from None


def transfer_matrix(family: str, ops: Sequence[OpSpec], hw: HardwareSpec,
                    copies: Sequence[int] | None = None) -> np.ndarray:
    """[len(ops), len(names)] float64 matrix of one family on one GPU (GEMMs as their harness
    ran them: ``copies`` per op, `predictors.transfer_harness.harness_copies`)."""
    cls, fn = _ROWS[family]
    out = fill_rows(family, cls, fn, ops, hw, len(transfer_feature_names(family)))
    for i, (op, n) in enumerate(zip(ops, copies or [], strict=False)):
        if n != 1 and isinstance(op, GemmSpec):
            out[i] = gemm_row(op, hw, n)
    return out


def ideal_seconds(ops: Sequence[OpSpec], hw: HardwareSpec,
                  copies: Sequence[int] | None = None) -> np.ndarray:
    """The target's normaliser before the floor: the vendor-peak roofline
    (`predictors.features.ideal_time_s`: max(FLOPs / datasheet peak for the dtype, bytes /
    datasheet memory bandwidth), for GEMM and attention with the L2-resident share of the bytes
    at the YAML's measured L2 bandwidth (`warm_roofline_s`; held out leave-one-GPU-out with
    3,000 rows per GPU and 600 trees, L40S GEMMs 40.9% -> 26.3%, its attention 59.1% ->
    40.4%, B200's 17.6% -> 21.1% and 20.7% -> 27.5%); collectives: NCCL's own model on the
    YAML's links
    (`analytical.nccl.nccl_time`; with the YAML's one link bandwidth and latency instead, the model was
    worse than that link model on three of seven held-out GPUs, docs/validation/transfer-effects.md). Not
    `analytical.roofline.roofline_time`: its efficiency factors are per-GPU guesses (marked
    "uncertain" in most YAMLs), and an unseen GPU has only its datasheet; with them in the
    target a mis-set factor moved the whole GPU (A40 held out: 29.9% with them, 9.3% without;
    see docs/validation/transfer-effects.md). Raises `SpecError` for a dtype the GPU does not support, as the
    roofline does."""
    for op in ops:
        if op.family in ("gemm", "attention") and not hw.supports(op.dtype):
            raise SpecError(f"{op.family}.dtype", f"{op.dtype} is not supported on {hw.name}")
    copies = [1] * len(ops) if copies is None else copies
    return np.array([nccl_time(op, hw) if isinstance(op, CollectiveSpec)
                     else warm_roofline_s(op, hw, n) if op.family in WARM_L2_FAMILIES
                     else ideal_time_s(op, hw) for op, n in zip(ops, copies, strict=True)],
                    dtype=np.float64)

