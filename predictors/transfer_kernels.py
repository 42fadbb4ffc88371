# SPDX-License-Identifier: Apache-2.0
"""Transfer columns that say which attention kernel a GPU runs and how its tiles fit the SM:
what the store's attention rows timed (TensorRT-LLM's fused FMHA for the context phase, its
XQA or masked-MHA kernels for generation; PyTorch SDPA for the ``profiled`` rows) differs by
architecture in ways the datasheet's peak and bandwidth do not state. Each rule names the
kernel source or the CUDA guide it comes from; the values come from the hardware YAML's compute
capability and the shape, never from a GPU's name.
"""

from __future__ import annotations

import math

from analytical.hardware import HardwareSpec
from analytical.ops import AttentionSpec, Phase
from predictors.features import _log2

ATTN_Q_BLOCK = 128  # query rows per CTA of FlashAttention-2's forward (Dao 2023, section 3.2)

# Shared memory an SM can give its resident CTAs, by compute capability x10 (CUDA C++
# Programming Guide, "Technical Specifications per Compute Capability", maximum shared memory
# per SM: 7.0 96 KB; 8.0 and 8.7 164 KB; 8.6, 8.9 and 12.0 100 KB; 9.0, 10.0 and 10.3 228 KB).
_SMEM_KIB = {70: 96, 80: 164, 86: 100, 87: 164, 89: 100, 90: 228, 100: 228, 103: 228, 120: 100}
_ATTN_KV_TILE = 64  # keys per K/V tile of FlashAttention-2's forward (Dao 2023, section 3.3)
_ASYNC_MMA_CC = 90  # TMA + warpgroup MMA from Hopper (compute capability 9.0) on


def smem_tiles(op: AttentionSpec, hw: HardwareSpec) -> list[float]:
    """How FlashAttention's tiles fit the SM (the kernel the store's rows timed is TensorRT-LLM's
    fused FMHA / XQA, built the same way): a 128-query Q tile stays in shared memory while 64-key
    K and V tiles stream past it, so the K/V tile pairs that fit beside the Q tile are the depth
    of the load pipeline (at head_dim 256 in bf16: 0.56 on a 100 KB Ada SM, 1.56 on a 164 KB
    A100 SM, 2.56 on a 228 KB Hopper or Blackwell SM), the CTAs that fit whole set how many run
    per SM, and the query-block waves count SMs x those. And whether the architecture has the
    Tensor Memory Accelerator and warpgroup-wide asynchronous MMA (Hopper's wgmma, Blackwell's
    tcgen05; NVIDIA H100 Tensor Core GPU Architecture whitepaper), which the sm90 and sm100
    kernels are written for (FlashAttention-3, Shah et al. 2024, arXiv:2407.08608; TensorRT-LLM
    `cpp/kernels/xqa/mha_sm90.cu`) and the sm80/sm89 ones are not. Held out leave-one-GPU-out
    (`--op attention --loo`, 6,000 rows per GPU, seed 0), all four columns: A100 20.38 -> 20.21,
    B200 26.16 -> 23.66, H100 21.43 -> 18.54 (its TensorRT-LLM rows 29.30 -> 24.04), H200 9.24 ->
    9.11, L40S 31.52 -> 32.46; the shared-memory columns alone 20.45 / 24.35 / 18.98 / 9.26 /
    32.88 (docs/validation/transfer-effects.md). NaN (missing to the trees) where the YAML states no compute
    capability."""
    cc = hw.topology.compute_capability if hw.topology is not None else None
    kib = _SMEM_KIB.get(cc) if cc is not None else None
    if cc is None or kib is None:
        return [math.nan] * len(SMEM_TILE_NAMES)
    smem = kib * 1024.0
    e = op.dtype.bytes
    q_tile = ATTN_Q_BLOCK * op.head_dim * e
    kv_tile = 2.0 * _ATTN_KV_TILE * op.head_dim * e
    resident = max(1.0, math.floor(smem / (q_tile + 2.0 * kv_tile)))
    ctas = op.batch * op.heads * math.ceil(op.q_len / ATTN_Q_BLOCK)
    return [max(0.0, (smem - q_tile) / kv_tile), resident,
            _log2(ctas / (hw.compute_units * resident)), float(cc >= _ASYNC_MMA_CC)]


SMEM_TILE_NAMES = ["smem_kv_tiles", "smem_resident_ctas", "qblock_log2_resident_waves", "async_mma"]

# TensorRT-LLM's generation-kernel dispatch (NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/
# decoderMaskedMultiheadAttention/decoderXQAImplJIT/kernelUtils.cpp, supportConfigCommon /
# supportConfigHMMA / supportConfigQGMMA): no XQA for vanilla MHA at beam width 1, nor for more
# than 32 query heads per KV head; the fp8-KV XQA kernel with fp8 MMA only on SM 9.0. From SM
# 10.0 (not 12.0 / 12.1) every generation step runs TensorRT-LLM's trtllm-gen kernels instead
# (cpp/tensorrt_llm/common/attentionOp.h: ``mUseTllmGen = (mSM >= 100) && (mSM != 120) &&
# (mSM != 121)``).
_XQA_MAX_GROUP = 32
_FP8_KV_MMA_CC = 90
_TLLM_GEN_CC = 100
_NOT_TLLM_GEN_CC = (120, 121)


def decode_kernel(op: AttentionSpec, hw: HardwareSpec) -> list[float]:
    """Which generation kernel TensorRT-LLM runs (`_XQA_MAX_GROUP`): masked MHA where XQA is
    not dispatched below SM 10.0 (one query head per CTA: a KV head is re-read once per query
    head of its group; the data show another regime there: fp8 / bf16 latency at group 48-128
    is 1.0 on H100 and 3.0 on L40S, at group 2-32 0.5-0.7 and 1.0-1.3); and whether an fp8 KV
    cache is dequantized to 16 bits in registers before a 16-bit MMA, as the generic XQA kernel
    does below compute capability 9.0 (`cpp/kernels/xqa/mha.cu`: ``static_assert(inputElemSize
    >= cacheElemSize)``, ``cvtExpansion``), where Hopper's runs fp8 MMA on it
    (supportConfigQGMMA). Held out leave-one-GPU-out (`--op attention --loo`, seeds 0 / 1 / 2)
    the two columns moved H100 18.54 / 18.34 / 18.49 -> 17.25 / 17.48 / 17.54 and B200 23.66 /
    24.27 / 23.55 -> 22.77 / 23.03 / 23.16, the others by less than the seeds move them; only
    L40S's fp8 decode rows take the dequantizing path, so held out it cannot learn it
    (docs/validation/transfer-effects.md). NaN where the YAML states no compute capability."""
    if op.phase != Phase.DECODE:
        return [0.0, 0.0]
    group = op.heads / op.kv_heads
    cc = hw.topology.compute_capability if hw.topology is not None else None
    if cc is None:
        return [math.nan, math.nan]
    tllm_gen = cc >= _TLLM_GEN_CC and cc not in _NOT_TLLM_GEN_CC
    masked = not tllm_gen and (group <= 1 or group > _XQA_MAX_GROUP)
    dequant = op.dtype.bytes < 2 and cc < _FP8_KV_MMA_CC
    return [float(masked), float(dequant)]


DECODE_KERNEL_NAMES = ["decode_masked_mha", "kv_fp8_dequantized"]

# TensorRT-LLM's Ada e4m3 context FMHA (NVIDIA/TensorRT-LLM cpp/kernels/fmha_v2/setup.py,
# ``enumerate_qmma_flash_kernels``, built for sm89 under ``ENABLE_SM89_QMMA``): query x key loop
# steps of (128, 128) up to head_size 64 and (64, 32) from 72 to 256, 4 warps along the queries
# (``warps_m=4, warps_n=1``), no fragment limiting (``limit_qk_fragments`` and
# ``limit_v_fragments`` False, where the bf16 kernels limit them at head_size 256 and step the
# keys by 16 above 128). A thread holds at most 255 registers (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability", maximum number of 32-bit registers per
# thread, every compute capability here).
_QMMA_CC = 89
_QMMA_WARPS_M = 4
_QMMA_WIDE_HEAD = 64  # head sizes up to this one take the (128, 128) tile
_MAX_REGISTERS = 255


def qmma_tile_registers(head_dim: int, elem_bytes: float) -> float:
    """32-bit registers per thread that the sm89 e4m3 context tile keeps live (`_QMMA_CC`): one
    warp's query rows against the key step as fp32 scores S, against the head as the fp32
    output O, and the Q, K, V and P operand fragments at ``elem_bytes`` each, spread over the
    warp's 32 lanes: head_dim 64 368, 128 164, 192 236, 256 308."""
    q_step, kv_step = (128, 128) if head_dim <= _QMMA_WIDE_HEAD else (64, 32)
    rows = q_step / _QMMA_WARPS_M
    accumulators = rows * (kv_step + head_dim) / 32
    fragments = (rows * head_dim + 2 * kv_step * head_dim + rows * kv_step) * elem_bytes / 128
    return accumulators + fragments


def fp8_context_spills(op: AttentionSpec, hw: HardwareSpec) -> bool:
    """Whether TensorRT-LLM's fp8 context kernel on this GPU needs more registers than a thread
    has (`qmma_tile_registers`), so that the compiler spills its tile to local memory: on SM
    8.9 at head_dim 64 and 256, not at 128 and 192. Such a kernel is priced at the 16-bit MMA
    peak (`predictors.transfer_features.warm_roofline_s`): its fp8 MMAs no longer set its
    pace. The store shows it on the one SM 8.9 GPU with attention rows, which held out cannot
    learn it from any other (check only, not the source of the rule): the L40S's fp8 / bf16
    prefill latency on the same shape is a median 1.3 at head_dim 64 and 1.9 at 256 against
    0.55 and 0.40 at 128 and 192, where H100 and B200 run fp8 at 0.66-0.96 of bf16 at every
    head_dim. NOTE: the tile is TensorRT-LLM's, the only stack with fp8 attention rows; the
    denominator does not see the stack, so another stack's fp8 prefill on SM 8.9 is priced the
    same way."""
    cc = hw.topology.compute_capability if hw.topology is not None else None
    return (op.phase == Phase.PREFILL and op.dtype.bytes < 2 and cc == _QMMA_CC
            and qmma_tile_registers(op.head_dim, op.dtype.bytes) > _MAX_REGISTERS)
