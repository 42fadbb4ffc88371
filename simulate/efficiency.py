# SPDX-License-Identifier: Apache-2.0
"""Kernel choices of a training framework that the hardware file's efficiencies do not know.

The hardware file gives one achieved fraction of peak per resource (`analytical.hardware
.Efficiency`); which kernel a framework runs decides how much of it is reached. Applied to
roofline estimates, and to attention measured on a kernel the framework does not run. Used by
`simulate.training.run_training` and the search's evaluator alike, so search == simulate.

Attention backend: Megatron-Core and NeMo run Transformer Engine's fused attention (cuDNN
flash attention on Hopper; TE docs "Attention backends": FusedAttention is preferred over
FlashAttention-2 on sm90); torchtitan runs PyTorch SDPA, whose flash backend is
FlashAttention-2 (PyTorch 2.2 release notes); Composer/llm-foundry (``attn_impl: flash``) and
DeepSpeed call the flash-attn 2 package.

Memory-bound reductions (`reduction_fraction`): PyTorch-generated norms, softmax and cross
entropy reach a fraction of a hand-written kernel's bandwidth.

fp8 quantisation passes (`fp8_cast_nodes`): an fp8 linear layer's GEMMs read fp8 copies of
their input, weight and output gradient, made by cast kernels the GEMM count does not include.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum

from analytical.attention_tiles import CUDNN_SOFTMAX_DIMS, FLASH2_SOFTMAX_DIMS, shape_rate
from analytical.dtypes import DType
from analytical.hardware import Architecture, HardwareSpec, get_hardware
from analytical.layer_spec import Node, Stream
from analytical.memory import Framework
from analytical.ops import (
    AttentionSpec,
    CollectiveKind,
    CollectiveSpec,
    MemoryBoundSpec,
    MemoryOpKind,
    OpSpec,
)
from analytical.roofline import roofline_estimate
from simulate.dtensor_tp import float8_tp
from simulate.engines import EngineChain, Estimate
from simulate.store_kernels import composite_in_store, fused_in_store
from simulate.sustained import sustained
from simulate.torch_kernels import (
    SHARED_INPUT,
    SYMM_MEM_TP,
    TORCHAO_FP8,
    Fp8Recipe,
    eager_traffic,
    fp8_weight_gemm,
    optimizer_traffic,
    rowwise_backward,
)

__all__ = ["AttentionBackend", "attention_backend", "attention_fraction", "fp8_cast_nodes",
           "framework_estimates", "grad_reduce_dtype", "kernel_backend", "optimizer_estimate",
           "power_scale", "reduction_fraction",
           "tp_overlap_rs_splits"]


class AttentionBackend(StrEnum):
    FLASH2 = "flash-attention-2"  # Dao 2023, arXiv 2307.08691
    CUDNN = "cudnn"  # cuDNN fused flash attention (Transformer Engine FusedAttention)


FRAMEWORK_ATTENTION: dict[Framework, AttentionBackend] = {
    Framework.MEGATRON: AttentionBackend.CUDNN,
    Framework.NEMO: AttentionBackend.CUDNN,
    Framework.TORCHTITAN: AttentionBackend.FLASH2,
    Framework.COMPOSER: AttentionBackend.FLASH2,
    Framework.DEEPSPEED: AttentionBackend.FLASH2,
}

# Achieved fraction of the dense bf16 peak (989.4 TFLOP/s) on H100 SXM5, head dim 128, sequence
# 8k, (forward, backward): Shah et al. 2024, "FlashAttention-3", arXiv 2407.08608, Fig. 5
# (forward, causal) and Fig. 6 (backward, the paper's only backward plot, not causal):
# FlashAttention-2 333 / ~320 TFLOP/s ("only 35% utilization on H100", its introduction),
# cuDNN 529 / ~515 TFLOP/s. The same SMs and tensor cores in every Hopper part, so the fraction
# carries over; other architectures keep the hardware file's value.
HOPPER_ATTENTION: dict[AttentionBackend, tuple[float, float]] = {
    AttentionBackend.FLASH2: (333 / 989.4, 320 / 989.4),
    AttentionBackend.CUDNN: (529 / 989.4, 515 / 989.4),
}
HOPPER_REFERENCE = "h100-sxm"  # the GPU of the FlashAttention-3 figures
# The same figures' head dim 64 against 128 (`analytical.attention_tiles.head_dim_rate`): the
# softmax's share of a score pair, in matmul-dimension units, per backend.
SOFTMAX_DIMS: dict[AttentionBackend, float] = {
    AttentionBackend.FLASH2: FLASH2_SOFTMAX_DIMS,
    AttentionBackend.CUDNN: CUDNN_SOFTMAX_DIMS,
}


def is_hopper(hw: HardwareSpec) -> bool:
    """Gated on the hardware file's ``architecture``, not on a list of names: every Hopper
    part (H100 SXM/PCIe/NVL, H200, GH200, H20, a calibrated file made from one) has it."""
    return hw.architecture == Architecture.HOPPER


# FlashAttention's Triton port (`training.attention: flash-triton`; llm-foundry's `attn_impl:
# triton` runs flash_attn/flash_attn_triton.py copied from the flash-attention repository at
# eff9fe6b, llmfoundry/models/layers/flash_attn_triton.py): "FlashAttention-2 is around 1.3-1.5x
# faster than FlashAttention in Triton in the forward pass and around 2x faster in the backward
# pass" (Dao 2023, arXiv 2307.08691, section 4.1). (forward, backward) time against
# FlashAttention-2; the forward at the middle of the stated range.
TRITON_SLOWDOWN = (1.4, 2.0)


def attention_backend(framework: str) -> AttentionBackend:
    return FRAMEWORK_ATTENTION[Framework(framework)]


# `training.attention: flash2`: the flash-attn 2 package where a run turned Transformer Engine's
# cuDNN attention off. NeMo-Framework-Launcher 24.01-24.07 `launcher_scripts/conf/config.yaml`
# sets ``NVTE_FUSED_ATTN: 0 # Disable cudnn FA until we've tested it more`` for every job (24.07
# turns it back on for the GPT-3 175B example only; gone at 24.09), and TE then runs flash-attn
# (TE v1.4 `DotProductAttention.forward`: FusedAttention wins on sm90 only where it is enabled).
FLASH2_KERNELS = frozenset({"flash2", "flash-triton"})


def kernel_backend(framework: str, kernel: str) -> AttentionBackend:
    """The attention backend a run's kernel choice gives: FlashAttention-2 (or its Triton port)
    where the scenario names it, else the framework's own (`FRAMEWORK_ATTENTION`)."""
    return AttentionBackend.FLASH2 if kernel in FLASH2_KERNELS else attention_backend(framework)


def attention_fraction(hw: HardwareSpec, framework: str, *, backward: bool,
                       kernel: str = "flash", op: AttentionSpec | None = None) -> float:
    """Achieved fraction of peak of the attention kernel the framework (or, for
    ``kernel="flash-triton"``, the Triton port) runs on ``hw``; at ``op``'s shape
    (`analytical.attention_tiles.shape_rate`, head dim at the backend's softmax share) when
    given, else at the long causal head-dim-128 shape of the figures."""
    backend = kernel_backend(framework, kernel)
    shape = 1.0 if op is None else shape_rate(op, SOFTMAX_DIMS[backend])
    if kernel == "flash-triton":
        flash2 = (HOPPER_ATTENTION[AttentionBackend.FLASH2][int(backward)]
                  if is_hopper(hw) else hw.efficiency.attention)
        return flash2 / TRITON_SLOWDOWN[int(backward)] * shape
    if not is_hopper(hw):
        return hw.efficiency.attention * shape
    return HOPPER_ATTENTION[backend][int(backward)] * power_scale(hw) * shape


def power_scale(hw: HardwareSpec) -> float:
    """The Hopper part's achieved fraction of its own peak against the H100 SXM5 at 700 W that
    the FlashAttention-3 figures were measured on, read from their GEMM efficiencies (hardware
    files): a power-limited part clocks every tensor-core kernel down alike (h100-hbm2e-96gb at
    500 W: 0.63 / 0.75 = 0.84; h100-pcie 0.93; the others 1)."""
    return hw.efficiency.gemm / get_hardware(HOPPER_REFERENCE).efficiency.gemm


# Memory-bound reductions as PyTorch generates them (torchtitan: its RMSNorm module and plain
# cross entropy, eager or torch.compile/Inductor) reach a fraction of the hand-written kernels'
# bandwidth, which the hardware file's memory efficiency stands for (QuACK, Dao-AILab/quack:
# RMSNorm / softmax / cross entropy near the H100's speed of light). Norms: "torch.compile ~50%
# of Quack performance typically" on H100 (PyTorch blog, "SOTA Normalization Performance with
# torch.compile", Zhang et al. 2025,
# https://pytorch.org/blog/sota-normalization-performance-with-torch-compile/, before the
# Inductor fixes it describes; the torchtitan corpus rows ran torch builds of 2024-12 and
# 2025-06). Softmax and cross entropy: QuACK "33%-50% faster than torch.compile and Liger" on
# H100 (Guo, Zadouri & Dao 2025, QuACK announcement / README), the middle of the range: 1/1.4.
# Hopper only, as those measurements; other frameworks run fused TE / Apex / flash-attn
# kernels, for which no published bandwidth was found.
PYTORCH_REDUCTIONS: dict[MemoryOpKind, float] = {
    MemoryOpKind.RMSNORM: 0.5, MemoryOpKind.LAYERNORM: 0.5,
    MemoryOpKind.SOFTMAX: 1 / 1.4, MemoryOpKind.CROSS_ENTROPY: 1 / 1.4,
}
FRAMEWORK_REDUCTIONS: dict[Framework, dict[MemoryOpKind, float]] = {
    Framework.TORCHTITAN: PYTORCH_REDUCTIONS,
}


# ATen's own LayerNorm kernels, which Composer's MPT runs eagerly (`LPLayerNorm`: F.layer_norm
# in bf16 with autocast off, llmfoundry/models/layers/norm.py; the benchmark sweep sets
# `norm_type: low_precision_layernorm`, scripts/train/benchmarking/submit_benchmarks.py at
# 8c8dd48f): the backward is two kernels (dx, then dgamma/dbeta reading x and dy again).
# (forward, backward) fraction of the roofline measured for that call,
# `F.layer_norm(x, (cols,), weight, bias)` in bf16 (profiler/benchmarks/memory.py), on H100:
# median `fraction_of_roofline` of the store's torch.eager layernorm rows over 100 MB (torch
# 2.11, 9 shapes each). The same ATen code runs on every CUDA GPU, so the fraction is not
# gated on the architecture; it stands where no measurement of the op answers.
ATEN_EAGER_NORM: dict[MemoryOpKind, tuple[float, float]] = {MemoryOpKind.LAYERNORM: (0.63, 0.38)}
ATEN_EAGER = frozenset({Framework.COMPOSER})


def reduction_fraction(hw: HardwareSpec, framework: str, kind: MemoryOpKind, *,
                       backward: bool = False) -> float:
    """Fraction of the hardware file's memory bandwidth the framework's ``kind`` kernel reaches."""
    fw = Framework(framework)
    if fw in ATEN_EAGER and kind in ATEN_EAGER_NORM:
        return ATEN_EAGER_NORM[kind][int(backward)]
    if not is_hopper(hw):
        return 1.0
    return FRAMEWORK_REDUCTIONS.get(fw, {}).get(kind, 1.0)


def _retimed(op: OpSpec, e: Estimate, hw: HardwareSpec, framework: str, kernel: str,
             compiled: bool = True) -> Estimate:
    """One roofline estimate at the framework's attention / reduction kernel speed (eager:
    `torch_kernels.eager_traffic`'s composite traffic instead)."""
    if isinstance(op, AttentionSpec):
        base = hw.efficiency.attention * shape_rate(op)  # what the roofline ran it at
        target = attention_fraction(hw, framework, backward=op.backward, kernel=kernel, op=op)
        if target != base:
            r = roofline_estimate(op, hw)
            name = kernel if kernel == "flash-triton" else kernel_backend(framework, kernel)
            return _repriced(e, hw, r.compute_s * base / target, r.memory_s, name)
    elif isinstance(op, MemoryBoundSpec):
        traffic = eager_traffic(framework, compiled, op.kind, backward=op.backward)
        if traffic != 1.0:
            r = roofline_estimate(op, hw)
            return _repriced(e, hw, r.compute_s, r.memory_s * traffic,
                             f"eager x{traffic:.2f} traffic")
        frac = reduction_fraction(hw, framework, op.kind, backward=op.backward)
        if frac != 1.0:
            r = roofline_estimate(op, hw)
            return _repriced(e, hw, r.compute_s, r.memory_s / frac, f"{frac:.2f} of bandwidth")
        if composite_in_store(op, e, framework, compiled):
            r = roofline_estimate(op, hw)
            return replace(_repriced(e, hw, r.compute_s, r.memory_s,
                                     "fused kernel: the store times the eager composite"),
                           engine="roofline")
    return e


def _repriced(e: Estimate, hw: HardwareSpec, compute_s: float, memory_s: float,
              note: str) -> Estimate:
    """``e`` re-timed as the roofline does (the slower of its two terms, plus the hardware's
    fixed time per kernel) from re-rated terms; one place adds the kernel alpha."""
    latency = max(compute_s, memory_s) + hw.efficiency.kernel_latency_s
    return replace(e, latency_s=latency, detail=f"{e.detail}; {note}")


def framework_estimates(ops: Sequence[OpSpec], estimates: Sequence[Estimate],
                        hw: HardwareSpec, framework: str, *, kernel: str = "flash",
                        compiled: bool = True) -> list[Estimate]:
    """``estimates`` with roofline (or `_foreign_kernel`) attention at the framework backend's
    fraction of peak (compute term), reductions at its bandwidth (eager: the composite's traffic,
    also over a fused store kernel: `fused_in_store`), 16-bit GEMMs no faster than `sustained`."""
    return [sustained(op, _retimed(op, e, hw, framework, kernel, compiled)
                      if e.engine == "roofline" or _foreign_kernel(op, e, hw, framework, kernel)
                      or fused_in_store(op, framework, compiled)
                      or composite_in_store(op, e, framework, compiled)
                      else e, hw)
            for op, e in zip(ops, estimates, strict=True)]


# Measured attention that is not the framework's kernel. No store holds FlashAttention's Triton
# port (`TRITON_SLOWDOWN`), on any GPU. And the store's Hopper attention at 16k queries, with the
# champion learned from it, is TensorRT-LLM's context FMHA (the aiconfigurator import), a
# Hopper-native kernel, where FlashAttention-2 uses neither wgmma nor TMA ("only 35%
# utilization on H100", FlashAttention-3, arXiv 2407.08608). Those answers take the
# framework's own figures (`HOPPER_ATTENTION`); our profiled SDPA sweeps are kept.
def _foreign_kernel(op: OpSpec, e: Estimate, hw: HardwareSpec, framework: str,
                    kernel: str) -> bool:
    if not isinstance(op, AttentionSpec):
        return False
    return kernel == "flash-triton" or (
        is_hopper(hw) and e.stack == "trtllm"
        and kernel_backend(framework, kernel) == AttentionBackend.FLASH2)


# Transformer Engine's LayerNormLinear fuses the norm with the fp8 cast of its output (TE docs,
# "transformer_engine.pytorch.LayerNormLinear"), so the QKV and FC1 inputs of Megatron-Core /
# NeMo cost no extra pass; the attention output and the activation still go through a cast.
NORM_FUSED_CAST = frozenset({Framework.MEGATRON, Framework.NEMO})
# torchao's Float8Linear with dynamic scaling (torchtitan's float8 converter) casts the weight
# on every forward call. TE keeps the fp8 weight across micro-batches only when the caller
# passes is_first_microbatch (Megatron-Core / NeMo do); with it None TE casts (and transposes)
# the weight on every call (`update_fp8_weights = is_first_microbatch is None or
# is_first_microbatch`, transformer_engine/pytorch/module/linear.py), as MPT's `te.Linear`
# layers under Composer (llm-foundry `fc_type: te`, its H100 fp8 table: TE v0.10) are called.
WEIGHT_CAST_PER_CALL = frozenset({Framework.TORCHTITAN, Framework.COMPOSER})
_NORMS = frozenset({MemoryOpKind.LAYERNORM, MemoryOpKind.RMSNORM})


def _cast(name: str, rows: int, cols: int) -> Node:
    """One cast of a [rows, cols] bf16 tensor to fp8: read 2 bytes, write the fp8 value and its
    transpose (TE cast_transpose) or read it again for the amax (dynamic scaling): ~4 bytes per
    element, a bf16 copy's traffic."""
    return Node(name=name, op=MemoryBoundSpec(kind=MemoryOpKind.COPY, rows=rows, cols=cols,
                                              dtype=DType.BF16))


def fp8_cast_nodes(fwd: Sequence[Node], framework: str, recipe: str = "tensorwise"
                   ) -> tuple[list[Node], list[Node]]:
    """The forward and backward cast passes of a layer's fp8 weight GEMMs: the input (unless
    fused into the preceding norm), the weight (frameworks that cast it per call) and, in
    backward, the output gradient; ``recipe`` rowwise adds `torch_kernels.rowwise_backward`."""
    fw = Framework(framework)
    out_f: list[Node] = []
    out_b: list[Node] = []
    prev: Node | None = None
    gathered = 1  # the TP all-gather just before this GEMM: its input, cast before it
    for n in fwd:
        op = n.op
        if (gemm := fp8_weight_gemm(n)) is not None:
            rows = gemm.m * gemm.batch
            fused = (fw in NORM_FUSED_CAST and prev is not None
                     and isinstance(prev.op, MemoryBoundSpec) and prev.op.kind in _NORMS)
            if not fused and not n.name.endswith(SHARED_INPUT):
                shard = gathered if float8_tp(framework, recipe) else 1
                out_f.append(_cast(f"{n.name}.fp8_cast_input", rows // shard, gemm.k))
            if fw in WEIGHT_CAST_PER_CALL:
                out_f.append(_cast(f"{n.name}.fp8_cast_weight", gemm.k, gemm.n))
            out_b.append(_cast(f"{n.name}.fp8_cast_grad", rows, gemm.n))
        gathered = (op.group_size if isinstance(op, CollectiveSpec) and n.stream == Stream.TP
                    and op.kind == CollectiveKind.ALL_GATHER else 1)
        if n.stream == Stream.COMPUTE:
            prev = n
    if Fp8Recipe(recipe) == Fp8Recipe.ROWWISE and fw in TORCHAO_FP8:
        out_b += rowwise_backward(fwd)
    return out_f, out_b


# Gradient reduction precision (FSDP reduce-scatter and data-parallel bucket reduction):
# torchtitan's `training.mixed_precision_reduce` defaults to float32 (config_manager.py; FSDP2
# MixedPrecisionPolicy(reduce_dtype=float32)), Composer's FSDP `mixed_precision: DEFAULT` reduces
# in float32 (Composer docs, "FSDP: mixed precision"). Megatron-LM turns
# accumulate_allreduce_grads_in_fp32 on for bf16 ("bfloat16 requires gradient accumulation and
# all-reduce to be done in fp32", megatron/training/arguments.py at 8a78edd2, 2024-07) and
# passes it as the DDP's grad_reduce_in_fp32 (training.py); fp16 runs reduce in fp16. Llama 3
# states the same for its FSDP ("reduce-scatter gradients in FP32", arXiv 2407.21783, 3.3.2).
GRAD_REDUCE_FP32 = frozenset({Framework.TORCHTITAN, Framework.COMPOSER})
GRAD_REDUCE_FP32_BF16 = frozenset({Framework.MEGATRON})


def grad_reduce_dtype(framework: str, act: DType) -> DType:
    """The dtype gradients travel in through the FSDP reduce-scatter or the DP reduction."""
    fw = Framework(framework)
    if fw in GRAD_REDUCE_FP32 or (fw in GRAD_REDUCE_FP32_BF16 and act == DType.BF16):
        return DType.FP32
    return act


# TP communication overlap as Transformer Engine userbuffers runs it (Megatron-Core / NeMo
# --tp-comm-overlap): the forward reduce-scatters after the attention projection and FC2
# (proj_fprop, fc2_fprop) use the "pipeline" method, the GEMM cut into num_splits = 4 chunks,
# each chunk's reduce-scatter overlapping the next chunk's GEMM, so the last chunk's share is
# exposed; the all-gathers (ring_exchange, tp chunks, the local one first) and the backward
# "bulk" overlaps hide whole (transformer_engine/pytorch/module/base.py, initialize_ub defaults:
# "num_splits": tp_size if method == "ring_exchange" else 4). torchtitan's async TP (PyTorch
# SymmetricMemory) pipelines the reduce-scatter in tp chunks (`torch_kernels.SYMM_MEM_TP`).
# Other frameworks keep the paired-GEMM model.
TE_PIPELINE_SPLITS = 4
TE_USERBUFFERS = frozenset({Framework.MEGATRON, Framework.NEMO})


def tp_overlap_rs_splits(framework: str, tp: int = 1) -> int:
    """Chunks a forward TP reduce-scatter is pipelined in (0: overlapped whole)."""
    fw = Framework(framework)
    if fw in TE_USERBUFFERS:
        return TE_PIPELINE_SPLITS
    return tp if fw in SYMM_MEM_TP and tp > 1 else 0


# torchtitan's async TP is Inductor's micro-pipeline TP pass (torch/_inductor/fx_passes/
# micro_pipeline_tp.py, `fuse_matmul_reduce_scatter`, torch 2.6-2.8): a reduce-scatter is fused
# only when its input is one matmul's output (`_find_producer_matmul`: mm / _scaled_mm, or
# reshape -> mm -> reshape; "no producer matmul found for reduce scatter, skipping"). The
# backward reduce-scatters of sequence parallelism, the adjoints of the all-gathers in front of
# wq / wk / wv and w1 / w3, take the sum of those matmuls' input gradients (autograd adds the
# gradients of a tensor used several times), so they stay NCCL reduce-scatters, exposed as in
# vanilla TP. The all-gathers (forward, recomputed, and the backward ones that feed the wo / w2
# input-gradient matmuls) and the forward reduce-scatters are fused.
SYMM_MEM_BWD_RS_EXPOSED = SYMM_MEM_TP


def tp_overlap_exposes_bwd_rs(framework: str) -> bool:
    """Whether the framework's TP overlap leaves the backward's reduce-scatters exposed."""
    return Framework(framework) in SYMM_MEM_BWD_RS_EXPOSED


def optimizer_estimate(chain: EngineChain, params: float, framework: str) -> Estimate:
    """The optimizer step over ``params`` fp32 parameters: the fused Adam kernel's estimate at
    the framework's traffic (`torch_kernels.optimizer_traffic`, gradient clipping included)."""
    e = chain.estimate(MemoryBoundSpec(kind=MemoryOpKind.OPTIMIZER, rows=1,
                                       cols=max(1, int(params)), dtype=DType.FP32))
    scale = optimizer_traffic(framework)
    return e if scale == 1.0 else replace(e, latency_s=e.latency_s * scale)
