# SPDX-License-Identifier: Apache-2.0
"""Host-bound MoE layers: the CPU launches the kernels of an eager Megatron-Core MoE layer no
faster than one per `host_kernel_s`, and the layer cannot hide that behind the GPU.

Why it cannot: Megatron-Core's all-to-all token dispatcher copies the per-expert token counts to
the host and synchronises on them in every MoE layer's forward (``MoEAlltoAllTokenDispatcher``:
``_maybe_dtoh_and_synchronize`` at ``cuda_sync_point`` "before_ep_alltoall" with EP > 1, else
"before_finish"; megatron/core/transformer/moe/token_dispatcher.py at NVIDIA/Megatron-LM
d98e8a64), because the all-to-all splits and the grouped GEMM's ``m_splits`` are Python lists.
After the sync the GPU's queue is empty, so each MoE layer takes at least the CPU time to issue
its kernels. The Megatron-Core MoE README (same commit, "CPU Overhead Bottleneck") names the
symptom and the remedies: CUDA graphs, fewer kernels (router / permute fusion), a larger
micro-batch. The backward pass has no sync, but its layers are alike, so the CPU falls behind
there by the same per-layer margin: the backward pass takes max(GPU time, CPU issue time),
unless it recomputes the dispatcher (full or ``moe`` recompute), whose replayed forward syncs
again.

Where the sync sits: the all-to-all dispatcher copies the token counts to the host at
``cuda_dtoh_point`` (right after ``preprocess`` has computed them from the routing map) and the
CPU waits on that copy (``d2h_event.synchronize()``) before the all-to-all, so the GPU must
finish the layer up to its router before the CPU can issue the rest. The forward pass is
therefore two host-bound halves, not one: max(CPU, GPU) of the attention block and router (the
nodes before ``dispatch``) plus max(CPU, GPU) of the dispatch, experts and combine
(`pass_with_sync`). A CPU slower than the GPU in either half is exposed there even where the
layer's total CPU time is below its GPU time.

Kernels counted per pass (`pass_kernels`): every operator node (one kernel or collective each),
plus per local expert what Transformer Engine's ``GroupedLinear`` issues in its eager path
(``_GroupedLinear.forward`` / ``backward``, transformer_engine/pytorch/module/grouped_linear.py
at NVIDIA/TransformerEngine d0067d0d, with ``_split_quantization._split_quantize``):
- one cuBLAS GEMM per expert per GEMM node (``general_grouped_gemm``: a loop over ``m_splits``);
- with fp8, one quantize per expert of each GEMM input and output gradient (``tex.split_quantize``
  over the per-expert splits); the weights are quantised only on a step's first micro-batch
  (``quantize_weight(update_workspace=is_first_microbatch)``; Megatron-Core's
  ``TEGroupedLinear.forward`` passes ``is_first_microbatch``, set by ``forward_step`` in
  megatron/core/pipeline_parallel/schedules.py at d98e8a64), so not per micro-batch;
- with biased experts (GPT-OSS, `ModelSpec.mlp_bias`), in bf16 the FC1 bias gradient is one
  ``tensor_part.sum(dim=0)`` per expert (``_split_quantize``; fp8 fuses it into
  ``tex.bgrad_quantize``), and Megatron-Core adds the FC2 bias per expert in Python
  (``TEGroupedMLP._apply_bias``: ``t + b * p`` per expert, two kernels forward; autograd's
  ``g * p`` and ``g * b`` with their two reductions backward, four; the ``torch.cat`` is the
  graph's ``experts.down_bias`` node: `simulate.moe_kernels`);
plus the router, load-balancing loss and token-permutation bookkeeping that the operator graph
does not list (`ROUTING_KERNELS`; the router's forward is the fused count under
``training.moe_router_fusion``, Megatron-Bridge's recipes, and `moe_graphs.UNFUSED_ROUTER`
without it, Megatron-Core's default).

The flex dispatcher syncs too, at the same place: DeepEP's ``buffer.dispatch`` returns the
received tokens per expert as a Python list ("the CPU will wait for GPU's signal to arrive, so
this is not compatible with CUDA graph": ``fused_dispatch``, megatron/core/transformer/moe/
fused_a2a.py at d98e8a64), and HybridEP sizes its output on the host ("num_permuted_tokens
stays None; HybridEP sizes buffers dynamically (CPU sync in dispatch)":
``_HybridEPManager.setup_metadata`` in token_dispatcher.py) unless a static budget is set
(``moe_expert_rank_capacity_factor`` or drop-and-pad), which Megatron-Bridge sets only with
full-iteration CUDA graphs (``set_full_iter_cg_configs``, scripts/performance/configs/
{deepseek,gpt_oss}/*_llm_pretrain.py v0.5.0), where no host floor applies anyway. So the
sync model holds for every dispatcher a corpus row runs; there is no dispatcher switch.

The CPU time per kernel (`host_kernel_s`) is the measured host ops per kernel of an eager
Megatron-Core layer (`host_ops_per_kernel`, read from `MEASURED_CPU`) times the host's time per
eager PyTorch op: ``node.host_op_us`` where the hardware file states it, else the DGX H100's
Xeon (`X86_HOST_OP_S`). Transformer Engine issue 2053 measured one bf16 ``torch.nn.Linear``
forward at 37.08 us of CPU on GB200 and 33.17 on GH200 (Grace) against 13.48 on a DGX H100
(Xeon Platinum 8480C): 2.75x on a GB200/GB300 host. The ratio was measured on CPU by
scripts/time_moe_layer_cpu.py: megatron-core 0.15.0's real ``TransformerLayer`` (local spec:
attention, ``TopKRouter``, all-to-all dispatcher, ``SequentialMLP``; unfused router and
permutation, the fused ones being Transformer Engine kernels) forward and backward on EP 1/2/4
gloo ranks at hidden 64, its thread CPU time extrapolated to zero tokens, over a trainable
``torch.nn.Linear`` forward timed in the same process (extrapolated to zero rows), over the
ATen kernels, collectives and device-to-host copies the same pass issues: 2.61 / 2.37 / 3.00
host ops per kernel at EP 1 / 2 / 4 (median 2.61; forward 3.7-4.7, backward 1.7-2.1: the
forward runs Megatron-Core's Python per module, the backward mostly autograd's C++; four runs
of the script gave 2.15-2.73 on the shared machine), where the blog's "~5-25 us of CPU-side
work per op" (jiahuanglin.xyz, "From PyTorch op to kernel launch") had been taken as 15 us, 1.1
host ops. A forward kernel (a recomputed one included) and a backward kernel each take their
pass's measured share of that mean (`pass_shares`: 4.22 / 2.61 and 1.84 / 2.61). The model's
kernels are still counted as the graph lists them (TE's grouped GEMM per expert, the fused
router and permutation); the local spec's Python is not Transformer Engine's
(`TE_EXTRA_OPS` adds TE's per call), and the ratio assumes the same mix of Python and dispatch
on the GPU hosts (a CUDA launch is inside the Linear's 13.48 us there, so a kernel with more
Python than a Linear is priced slightly high).

Each Transformer Engine module call costs CPU time beyond the kernels it issues
(`TE_EXTRA_OPS` host ops per call, TE issue 2053's ``te.Linear`` against ``torch.nn.Linear``;
`te_module_calls` counts the calls of Megatron-Core's TE layer spec), forward, backward and
recomputed forward alike.

Parts a recipe captures in CUDA graphs (`simulate.moe_graphs`: attention, router, dispatcher
preprocessing) cost one graph launch instead of their kernels; a full-iteration graph leaves
no host floor.

Switched by framework (`HOST_BOUND_FRAMEWORKS`: Megatron-Core and NeMo run this dispatcher);
applies to MoE layer blocks only (dense layers have no sync, so the CPU runs ahead).
"""

from __future__ import annotations

import csv
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from analytical.hardware import HardwareSpec
from analytical.layer_spec import Node
from analytical.memory import Framework
from analytical.ops import GemmSpec, MoESpec
from analytical.paths import DATASETS_DIR
from simulate.costs import BlockCost, PassCost
from simulate.engines import Estimate
from simulate.graph import Block, TrainStep
from simulate.moe_graphs import (
    ROUTING_PARTS,
    CudaGraphScope,
    attention_bases,
    eager_nodes,
    eager_routing,
    forward_base,
)

__all__ = ["MEASURED_CPU", "x86_kernel_s", "HostIssue", "host_kernel_s",
           "host_ops_per_kernel", "pass_shares", "pass_with_sync", "host_bound_costs",
           "pass_kernels", "node_kernels", "te_module_calls"]

# CPU time of one eager PyTorch op (a bf16 Linear forward) on an x86 host without its own
# ``node.host_op_us``: a DGX H100's Xeon Platinum 8480C (TE issue 2053).
X86_HOST_OP_S = 13.48e-6

# CPU time of an eager Megatron-Core MoE layer, measured (module docstring); read on first use
# (`host_ops_per_kernel`), so importing the simulator reads no file.
MEASURED_CPU = DATASETS_DIR / "measurements" / "llmsim" / "cpu" / "moe-layer-cpu" / \
    "qwen3-moe-layer.csv"


def _median(xs: Iterable[float]) -> float:
    return statistics.median(list(xs))


def _at_zero(t: Mapping[int, float]) -> float:
    """``t`` (size -> seconds) at size 0, by the line through its two smallest sizes."""
    (a, ta), (b, tb) = sorted(t.items())[:2]
    return ta - (tb - ta) * a / (b - a)


def host_ops_per_kernel(path: Path | None = None, passes: tuple[str, ...] = ("fwd", "bwd")
                        ) -> float:
    """Host ops (a ``torch.nn.Linear`` forward's CPU time) per kernel of an eager Megatron-Core
    MoE layer's ``passes`` (forward plus backward, or one of them), measured at ``path``
    (default `MEASURED_CPU`): per EP size, the layer's CPU time (median over ranks) and the
    Linear's, each extrapolated to zero work (`_at_zero`; the Linear's mean before and after the
    layer), over the kernels, collectives and device-to-host copies of the same passes; the
    median over EP sizes."""
    return _host_ops_per_kernel(path or MEASURED_CPU, passes)


@cache
def _host_ops_per_kernel(path: Path, passes: tuple[str, ...]) -> float:
    if not path.is_file():
        raise FileNotFoundError(f"the MoE host floor needs the measured CPU time of an eager "
                                f"Megatron-Core MoE layer, {path}, which is missing "
                                f"(scripts/time_moe_layer_cpu.py writes it)")
    cpu: defaultdict[tuple[int, str, str, int], list[float]] = defaultdict(list)
    kernels: defaultdict[int, dict[tuple[int, str], int]] = defaultdict(dict)
    with path.open(newline="") as f:
        for r in csv.DictReader(f):  # one or more runs: the op counts are the same in each
            ep, tokens = int(r["ep"]), int(r["tokens"])
            cpu[(ep, r["pass_"], r["part"], tokens)].append(float(r["cpu_us"]))
            if r["part"] == "layer" and int(r["rank"]) == 0 and r["pass_"] in passes:
                kernels[ep][(tokens, r["pass_"])] = sum(
                    int(r[c]) for c in ("kernel", "collective", "d2h_copy"))
    ratios = []
    for ep, counts in sorted(kernels.items()):
        def at_zero(pass_: str, part: str, ep: int = ep) -> float:
            return _at_zero({t: _median(v) for (e, p, pt, t), v in cpu.items()
                             if (e, p, pt) == (ep, pass_, part)})
        op = (at_zero("ref_before", "ref.linear_fwd") + at_zero("ref_after", "ref.linear_fwd")) / 2
        layer = sum(at_zero(p, "layer") for p in passes)
        fewest = min(t for t, _ in counts)
        ratios.append(layer / op / sum(n for (t, _), n in counts.items() if t == fewest))
    return _median(ratios)


def pass_shares() -> tuple[float, float]:
    """CPU time of a forward and of a backward kernel against the mean kernel of the measured
    layer (`host_ops_per_kernel` of each pass over that of both): the forward runs Megatron-Core's
    Python per module, the backward mostly autograd's C++."""
    both = host_ops_per_kernel()
    return host_ops_per_kernel(passes=("fwd",)) / both, host_ops_per_kernel(passes=("bwd",)) / both


def x86_kernel_s() -> float:
    """CPU seconds per kernel on an x86 host without a measured per-op time (`host_kernel_s`)."""
    return host_ops_per_kernel() * X86_HOST_OP_S

# Kernels of the unfused routing path per MoE layer (forward, backward) that the operator graph
# does not list: router, preprocess and permutation bookkeeping (`moe_graphs.ROUTING_PARTS`).
ROUTING_KERNELS = (sum(k[0] for k in ROUTING_PARTS.values()),
                   sum(k[1] for k in ROUTING_PARTS.values()))

# Kernels per local expert of the biased FC2 that Megatron-Core adds in Python
# (`TEGroupedMLP._apply_bias`, module docstring): (forward, backward).
BIAS_KERNELS_PER_EXPERT = (2, 4)

# CPU time of one Transformer Engine module call beyond the PyTorch op it wraps, in host ops
# (`X86_HOST_OP_S` units): TE issue 2053 measured one bf16 ``Linear`` forward (hidden 2048,
# 8192 tokens) at 99.66 us of CPU through ``te.Linear`` against 37.08 us through
# ``torch.nn.Linear`` on GB200 (90.53 / 33.17 on GH200): the FP8 recipe / autocast state,
# workspace and argument checks TE runs in Python per call. Taken as a ratio to the host's
# per-op time, so it follows `host_kernel_s` on every host.
TE_EXTRA_OPS = (99.66 - 37.08) / 37.08

# TE module calls per forward node of an eager Megatron-Core layer (the Transformer Engine layer
# spec, ``get_gpt_layer_with_transformer_engine_spec`` in megatron/core/models/gpt/
# gpt_layer_specs.py at d98e8a64): ``linear_qkv`` is a ``TELayerNormColumnParallelLinear``
# (the input norm fused in), ``q_layernorm`` and ``k_layernorm`` two ``TENorm`` calls,
# ``core_attention`` a ``TEDotProductAttention``, ``linear_proj`` a ``TERowParallelLinear``, an
# MoE layer's ``pre_mlp_layernorm`` a ``TENorm``, each expert GEMM one ``TEGroupedLinear`` call,
# the shared expert's and MLA's projections one TE linear each (MLA's input norm its own
# ``TENorm``). The router's GEMM is PyTorch's (``TopKRouter``), so it is not listed.
TE_MODULE_CALLS = {"qkv_proj": 1, "qk_norm": 2, "attention": 1, "out_proj": 1, "mlp_norm": 1,
                   "experts.up_gate": 1, "experts.up": 1, "experts.down": 1,
                   "shared_expert.up_gate": 1, "shared_expert.up": 1, "shared_expert.down": 1,
                   "q_down": 1, "q_up": 1, "kv_down": 1, "kv_up": 1}
MLA_INPUT_NORM = "attn_norm"  # a separate TENorm where the layer has no fused ``qkv_proj``

HOST_BOUND_FRAMEWORKS = frozenset({Framework.MEGATRON, Framework.NEMO})

SYNC_NODE = "dispatch"  # the first node after the token-count copy the CPU waits on


def _is_moe(block: Block) -> bool:
    return any(isinstance(n.op, MoESpec) for n in block.fwd)


def _local_experts(block: Block) -> int:
    return max((n.op.batch for n in block.fwd
                if n.name.startswith("experts.") and isinstance(n.op, GemmSpec)), default=1)


def _per_expert(n: Node, biased_bf16_bwd: bool) -> float:
    """Kernels per local expert that node ``n`` stands for (0: one kernel for all experts); a
    recomputed forward node (``recompute.``) issues what its forward did."""
    name = n.name.removeprefix("recompute.")
    if not name.startswith("experts."):
        return 0.0
    if ".fp8_cast" in name:
        return 1.0  # tex.split_quantize: one quantize per expert's split
    if isinstance(n.op, GemmSpec):
        # general_grouped_gemm: one cuBLAS GEMM per expert; in bf16 a biased FC1's wgrad
        # comes with one bias-gradient sum per expert (`_split_quantize`).
        return 2.0 if biased_bf16_bwd and name == "experts.up_gate.wgrad" else 1.0
    if name == "experts.down_bias":
        return BIAS_KERNELS_PER_EXPERT[0]
    if name == "experts.down_bias.bwd":
        return BIAS_KERNELS_PER_EXPERT[1]
    return 0.0


def _module_call(name: str) -> tuple[str, str]:
    """(pass part, forward node) of a node: ``recompute.qkv_proj.fp8_cast_input`` ->
    (recompute, qkv_proj), ``out_proj.dgrad`` -> (bwd, out_proj)."""
    inner = name.removeprefix("recompute.")
    base = forward_base(inner)
    if base != inner.split(".fp8_cast")[0]:  # a backward suffix came off
        return "bwd", base
    return ("recompute" if inner != name else "fwd"), base


def te_module_calls(nodes: Iterable[Node]) -> int:
    """Transformer Engine module calls among a pass's nodes (`TE_MODULE_CALLS`): one per
    forward module, counted again for its backward and for a recomputed forward."""
    calls = {_module_call(n.name) for n in nodes}
    fused_norm = any(base == "qkv_proj" for _, base in calls)
    return sum(TE_MODULE_CALLS.get(base, 0) + (base == MLA_INPUT_NORM and not fused_norm)
               for _, base in calls)


def node_kernels(nodes: Iterable[Node], local_experts: int) -> list[float]:
    """Kernels the CPU issues for each node of one pass of an MoE layer (module docstring)."""
    nodes = list(nodes)
    fp8 = any(".fp8_cast" in n.name for n in nodes)
    biased_bf16 = not fp8 and any(n.name.endswith("experts.down_bias.bwd") for n in nodes)
    return [n.count * (local_experts * per if (per := _per_expert(n, biased_bf16)) else 1.0)
            for n in nodes]


def pass_kernels(nodes: Iterable[Node], local_experts: int, routing: int) -> float:
    """Kernels the CPU issues for one pass of an MoE layer (see the module docstring)."""
    return float(routing) + sum(node_kernels(nodes, local_experts))


@dataclass(frozen=True, slots=True, kw_only=True)
class HostIssue:
    """How the CPU issues an MoE layer: seconds per kernel (`host_kernel_s`), the parts
    captured in CUDA graphs and the forward node names of the attention part."""

    kernel_s: float = field(default_factory=x86_kernel_s)
    graphs: frozenset[CudaGraphScope] = frozenset()
    attention: frozenset[str] = frozenset()
    router_fusion: bool = True  # `--moe-router-fusion` (`moe_graphs.UNFUSED_ROUTER`)

    def cpu_s(self, nodes: Iterable[Node], local_experts: int, *, backward: bool,
              routing: bool = True, in_backward: bool = False) -> float:
        """CPU seconds to issue ``nodes`` (and the routing bookkeeping of the pass, forward or
        ``backward``), each kernel at its pass's share (`pass_shares`): in a backward pass
        (``in_backward``) a recomputed forward node (``recompute.``) is a forward kernel."""
        eager, launches = eager_nodes(list(nodes), self.graphs, self.attention)
        kernels = eager_routing(self.graphs, backward=backward,
                                router_fusion=self.router_fusion) if routing else 0
        fwd, bwd = pass_shares()
        issued = (kernels * (bwd if backward else fwd) + launches * fwd
                  + sum(k * (bwd if in_backward and not n.name.startswith("recompute.") else fwd)
                        for n, k in zip(eager, node_kernels(eager, local_experts), strict=True)))
        te = te_module_calls(eager) * TE_EXTRA_OPS / host_ops_per_kernel()  # in kernels
        return (issued + te) * self.kernel_s


def host_kernel_s(hw: HardwareSpec) -> float:
    """CPU seconds to issue one kernel on ``hw``'s host: the measured host ops per kernel
    (`host_ops_per_kernel`) times the host's time per PyTorch op (``node.host_op_us``; the x86
    reference `X86_HOST_OP_S` where the hardware file has no measurement)."""
    return host_ops_per_kernel() * (hw.host_op_s or X86_HOST_OP_S)


def _raise(p: PassCost, elapsed_s: float) -> PassCost:
    if elapsed_s <= p.elapsed_s:
        return p
    # The GPU waits for the CPU inside the compute stream's critical path: counted as compute.
    return PassCost(elapsed_s=elapsed_s, compute_s=p.compute_s + elapsed_s - p.elapsed_s,
                    engine_s=p.engine_s)


def _split(nodes: Sequence[Node], sync: str) -> tuple[list[Node], list[Node]]:
    """Nodes before and after the node ``sync``; a cast node goes with the GEMM it feeds,
    wherever the graph lists it."""
    i = next((i for i, n in enumerate(nodes) if n.name == sync), len(nodes))
    before = {n.name for n in nodes[:i]}
    pre = list(nodes[:i]) + [n for n in nodes[i:] if n.name.split(".fp8_cast")[0] in before]
    return pre, [n for n in nodes[i:] if n not in pre]


def pass_with_sync(p: PassCost, nodes: Sequence[Node], est: Mapping[str, Estimate],
                   local_experts: int, *, backward: bool, issue: HostIssue | None = None
                   ) -> PassCost:
    """One pass of an MoE layer whose CPU waits on the GPU at the dispatcher's token-count
    copy: max(CPU, GPU) before the sync plus max(CPU, GPU) after it. The backward pass syncs
    only where it recomputes the dispatcher (full or ``moe`` recompute: ``recompute.dispatch``),
    which replays the forward's routing bookkeeping before the sync; else it is max(CPU, GPU)."""
    issue = issue or HostIssue()
    sync = f"recompute.{SYNC_NODE}" if backward else SYNC_NODE
    pre, post = _split(nodes, sync)
    if not post:  # no sync in this pass (a backward without recompute of the dispatcher)
        return _raise(p, issue.cpu_s(nodes, local_experts, backward=backward,
                                     in_backward=backward))
    gpu_pre = min(p.elapsed_s, sum(est[n.op.key].latency_s * n.count for n in pre))
    cpu_pre = issue.cpu_s(pre, local_experts, backward=False, in_backward=backward)
    cpu_post = issue.cpu_s(post, local_experts, backward=True, routing=backward,
                           in_backward=backward)
    return _raise(p, max(cpu_pre, gpu_pre) + max(cpu_post, p.elapsed_s - gpu_pre))


def host_bound_costs(costs: Mapping[Any, BlockCost], blocks: Mapping[Any, Block],
                     step: TrainStep, est: Mapping[str, Estimate], hw: HardwareSpec,
                     graphs: Iterable[CudaGraphScope] = ()) -> dict[Any, BlockCost]:
    """``costs`` with each MoE layer pass raised to its CPU issue time (`host_kernel_s` of
    ``hw``'s host per kernel, ``graphs`` captured, ``step``'s router fusion) under a framework
    that synchronises in the dispatcher (unchanged otherwise, and under a full-iteration CUDA
    graph)."""
    out = dict(costs)
    graphs = frozenset(graphs)
    if Framework(step.framework) not in HOST_BOUND_FRAMEWORKS or \
            CudaGraphScope.FULL_ITERATION in graphs:
        return out
    for key, block in blocks.items():
        if key not in costs or not _is_moe(block):
            continue
        local = _local_experts(block)
        c = costs[key]
        issue = HostIssue(kernel_s=host_kernel_s(hw), graphs=graphs,
                          attention=attention_bases(block.fwd),
                          router_fusion=step.router_fusion)
        out[key] = BlockCost(
            fwd=pass_with_sync(c.fwd, block.fwd, est, local, backward=False, issue=issue),
            bwd=pass_with_sync(c.bwd, block.bwd, est, local, backward=True, issue=issue))
    return out
