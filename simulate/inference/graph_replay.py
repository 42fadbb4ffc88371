# SPDX-License-Identifier: Apache-2.0
"""What a kernel costs inside a CUDA-graph replay, from a measurement of it timed alone.

vLLM, SGLang and TensorRT-LLM capture their decode steps as CUDA graphs, up to a batch size
(`EnginePreset.cuda_graph_max_bs`, read from each engine's code in ``datasets/engines/``), and
replay them: the GPU runs the captured kernels back to back, with no host launch and no timer
between them. A kernel measured alone carries whatever the measuring stack's timer put around
it, and summing those over the few hundred kernels of a decode step counts that once per kernel.
What each stack's timer adds, by the provenance of the rows a champion was trained on
(`predictors.transfer_data.stack_of`):

- ``profiled`` (ours, `profiler.timers`): one CUDA start/end event pair per call, after a
  256 MB buffer is zeroed (the L2 flush) and a GPU spin. On the 159 H100 bf16 GEMM shapes that
  both this project and AIConfigurator measured (``llmsim db compare
  datasets/measurements/aiconfigurator/h100-sxm datasets/measurements/llmsim/h100-sxm
  --across-backends`` lists the pairs), ours are slower by a median 3.0 us where ours take
  under 8 us (n=24, median 5.9 us), 4.4 us at 8-16 us (n=24, median 11.9), 6.2 us at 16-32 us
  (n=33, median 21.5) and 6.7 us above (n=78, median 79.0): the event pair and the launch it
  waits on, plus the flushed L2's dirty lines written back while the kernel streams its first
  operands, which slows a kernel until the write-back ends and so grows with its length up to
  a plateau. Taken off as a piecewise-linear function of the measured time through those four
  (median time, median difference) points, flat beyond them (`TIMER_OVERHEAD_S`).
- ``trtllm`` (AIConfigurator): its collectors time CUDA-graph replays of the op
  (ai-dynamo/aiconfigurator ``collector/helper.py`` ``benchmark_with_power``: warm-up, graph
  capture, timed replays), so its rows are the graph-replay cost already: nothing removed.
- ``vidur``: Sarathi-Serve's ops timed by the torch profiler's CUDA kernel times
  (microsoft/vidur ``vidur/profiling/common/cuda_timer.py``, ``record_function`` by default):
  kernel time only; A100 bf16 GEMMs within 5% of AIConfigurator's graph-replayed ones on the same
  shapes in our store. Nothing removed.
- ``nccl``: nccl-tests average a loop of back-to-back calls. Nothing removed.

Memory-bound ops are a second case. Our rows time them as eager PyTorch composites
(`profiler.benchmarks.memory`: SwiGLU as silu then mul, rotary as slices, a concatenation and
three elementwise ops) at training sizes (1,024 to 32,768 rows on H100; 11-51 us at the
smallest), while the engines run one fused kernel per op (vLLM ``csrc/layernorm_kernels.cu``
``fused_add_rms_norm``, ``csrc/activation_kernels.cu`` ``silu_and_mul``,
``csrc/pos_encoding_kernels.cu`` ``rotary_embedding``; SGLang's sgl-kernel and TensorRT-LLM's
plugins the same ops). Under an engine preset such an op is priced by the roofline, as it was
before any champion existed, and counted as the roofline's; Vidur's rows (Sarathi-Serve's fused
kernels) keep their champion's answer.

Switched by the engine (a preset, and its largest captured graph) and the stack; never fitted to
a serving measurement. Steps above the largest captured size run eagerly and keep the measured
times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from analytical.custom_allreduce import applies, custom_all_reduce_time
from analytical.dtypes import DType
from analytical.hardware import HardwareSpec
from analytical.ops import CollectiveSpec, GemmSpec, OpSpec
from analytical.roofline import roofline_time
from simulate.engines import Estimate
from simulate.inference.layer_ops import act_quant_pass

# Per-call cost a stack's timer adds to a kernel measured alone: (measured s, added s) points,
# interpolated in the measured time and flat beyond the ends; stacks not named add nothing a
# graph replay would not also pay.
TIMER_OVERHEAD_S: Mapping[str, tuple[tuple[float, float], ...]] = {
    "profiled": ((5.86e-6, 3.04e-6), (11.94e-6, 4.44e-6), (21.54e-6, 6.17e-6),
                 (78.99e-6, 6.70e-6))}


def timer_overhead_s(latency_s: float, stack: str) -> float:
    """What ``stack``'s timer added to a kernel it measured at ``latency_s`` (seconds)."""
    points = TIMER_OVERHEAD_S.get(stack)
    if not points:
        return 0.0
    return float(np.interp(latency_s, [t for t, _ in points], [o for _, o in points]))


# Stacks whose fp8 GEMM rows time the input's quantization with the GEMM, and its traffic per
# input element: AIConfigurator times TensorRT-LLM's ``Linear.forward`` on a bf16 input
# (ai-dynamo/aiconfigurator ``collector/trtllm/collect_gemm.py`` ``run_gemm``), which runs
# ``static_quantize_e4m3_per_tensor`` before the fp8 GEMM (read bf16, write fp8: 3 bytes).
FP8_GEMM_QUANT_BYTES: Mapping[str, float] = {"trtllm": 3.0}


def gemm_kernel_seconds(latency_s: float, op: OpSpec, stack: str, hw: HardwareSpec) -> float:
    """An fp8 GEMM's measured time without the quantization pass its stack timed with it:
    under an engine preset the input's quantization is an op of its own
    (`layer_ops.Fusions.act_quant_bytes`, or fused into its producer), so keeping the stack's
    would count it twice. Never below half the measurement."""
    per_element = FP8_GEMM_QUANT_BYTES.get(stack, 0.0)
    if not per_element or not isinstance(op, GemmSpec) or op.dtype != DType.FP8:
        return latency_s
    quant = roofline_time(act_quant_pass(op, per_element), hw)
    return max(latency_s - quant, 0.5 * latency_s)


# Stacks whose memory-bound rows are eager PyTorch composites, not an engine's fused kernel.
EAGER_MEMORY_STACKS = frozenset({"profiled"})


def graph_replay_seconds(latency_s: float, stack: str) -> float:
    """``latency_s`` of one kernel timed alone by ``stack``, as a CUDA-graph replay runs it:
    the stack's per-call timer cost removed (never below half the measurement)."""
    return max(latency_s - timer_overhead_s(latency_s, stack), 0.5 * latency_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineKernels:
    """How a serving engine runs a step's kernels: fused memory-bound ops always, CUDA-graph
    replay for steps of up to ``graph_max_tokens`` tokens (0: never), and its own all-reduce
    kernel for TP all-reduces under ``custom_all_reduce_bytes`` where the GPUs qualify
    (`analytical.custom_allreduce`; 0: NCCL's measured or modelled time)."""

    hw: HardwareSpec
    graph_max_tokens: int
    custom_all_reduce_bytes: float = 0.0

    def seconds(self, est: Estimate, op: OpSpec, tokens: int) -> tuple[float, str]:
        """(seconds, engine it is counted to) of ``op`` in a step of ``tokens`` tokens."""
        if isinstance(op, CollectiveSpec) and applies(op, self.hw, self.custom_all_reduce_bytes):
            return custom_all_reduce_time(op, self.hw), "roofline"
        if op.family == "memory" and est.stack in EAGER_MEMORY_STACKS:
            return roofline_time(op, self.hw), "roofline"
        latency = gemm_kernel_seconds(est.latency_s, op, est.stack, self.hw)
        if tokens <= self.graph_max_tokens:
            return graph_replay_seconds(latency, est.stack), est.engine
        return latency, est.engine
