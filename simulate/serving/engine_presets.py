# SPDX-License-Identifier: Apache-2.0
"""What a serving engine does by default: vLLM, SGLang or TensorRT-LLM as they start without flags.

The values are data (``datasets/engines/<engine>.yaml``), one entry per setting with the engine
code it was read from; some depend on the GPU's memory, its name or the tensor-parallel degree
(the engines pick them at start-up from the device they find). A scenario's explicit
``serving.*`` fields override a preset (see `simulate.inference.run.resolve_serving`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

from analytical.errors import SpecError
from analytical.paths import DATASETS_DIR, REPO_ROOT
from simulate.inference.fp8_gemm import Fp8GemmRatios, load_ratio_table, ratios_from
from simulate.inference.fused_moe import FusedMoeTable, load_fused_moe_table
from simulate.inference.layer_ops import Fusions
from simulate.serving.choices import Scheduler, ServingEngine
from simulate.serving.engine_versions import versioned_data

ENGINES_DIR = DATASETS_DIR / "engines"
ENGINES = tuple(ServingEngine)
MIB = 2**20
GIB = 2**30


class ActQuant(StrEnum):
    """How an engine quantizes a linear layer's bf16 input for an fp8 GEMM (its
    `fp8_activation_quant` entry); `bytes_per_element` is the extra memory traffic."""

    DYNAMIC = "dynamic"  # amax pass (read 2 B) + cast pass (read 2 B, write 1 B)
    STATIC = "static"  # cast with a stored scale (read 2 B, write 1 B)
    NONE = "none"  # fused into the producer or the GEMM: nothing extra
    # a kernel of its own whose time the GEMM's measured price holds: it launches, no pass
    IN_GEMM = "in_gemm"

    @property
    def bytes_per_element(self) -> float:
        return {ActQuant.DYNAMIC: 5.0, ActQuant.STATIC: 3.0, ActQuant.NONE: 0.0,
                ActQuant.IN_GEMM: 0.0}[self]


class MemoryRule(StrEnum):
    """How an engine turns its memory setting into a KV-cache size."""

    TOTAL_FRACTION = "total_fraction"  # vLLM: total * util - weights - activations
    STATIC_FRACTION = "static_fraction"  # SGLang: total * mem_fraction_static - weights
    FREE_AFTER_WEIGHTS = "free_after_weights"  # TensorRT-LLM: (total - weights - act.) * frac


@dataclass(frozen=True, slots=True, kw_only=True)
class EnginePreset:
    """One engine's defaults resolved for a GPU and a parallel layout."""

    engine: ServingEngine
    version: str  # the release range whose defaults these are (`engine_versions`)
    scheduler: Scheduler
    chunk_prompts: bool  # long prompts are split over steps
    reserve_output_kv: bool  # admission reserves KV for the whole output (no eviction later)
    window_kv: bool  # sliding/chunked layers hold only their window's blocks (hybrid KV manager)
    max_batched_tokens: int
    max_num_seqs: int
    block_size: int
    gpu_memory_utilization: float  # meaning depends on memory_rule
    memory_rule: MemoryRule
    prefix_caching: bool
    cuda_graph_max_bs: int
    cuda_graph_padding: bool  # a step's token count is padded to the next captured size
    step_overhead_s: float
    step_overhead_per_seq_s: float  # host time per request scheduled in a step
    frontend_s: float  # per request, API server to engine and back (HTTP, tokenize, stream)
    tokenize_s_per_token: float = 0.0  # the API server's tokenizer, one prompt at a time
    stream_token_s: float = 0.0  # the API server streams each output token, one at a time
    api_server_process: bool = True  # the API server runs beside the engine (own process)
    api_request_s: float = 0.0  # the API server takes each request in, one at a time
    stream_shares_intake: bool = True  # the process that streams tokens also takes requests in
    chat_stream_empty_chunks: int = 0  # chunks without a token in a streamed chat response
    fp8_activation_quant: ActQuant = ActQuant.NONE
    host_overlap: bool = False  # host work of a step runs while the GPU runs the previous one
    fused_add_norm: bool = False  # residual add inside the RMSNorm kernel
    attention_fp8_out: bool = False  # attention writes the output projection's fp8 input
    quant_into_producer: bool = False  # norm / activation write the next GEMM's fp8 input
    # tp > 1, these model families, hidden >= the minimum: all-reduce + add + norm + quant
    allreduce_norm_families: tuple[str, ...] = ()
    allreduce_norm_min_hidden: int = 0
    allreduce_norm_workspace_bytes: float = float("inf")  # larger messages: NCCL, no fusion
    # TP all-reduces under this many bytes run the engine's own kernel (0: always NCCL;
    # `analytical.custom_allreduce`)
    custom_all_reduce_bytes: float = 0.0
    # host time per kernel of a step run eagerly (not a CUDA-graph replay), added to the step
    eager_launch_s: float = 0.0
    # a step's prefill chunks share one attention launch per layer (`PrefillAttention.seconds`)
    batched_prefill_attention: bool = False
    # the engine's fp8 GEMM time over the bf16 GEMM's of the same shape on the listed
    # architectures (`fp8_gemm.Fp8GemmRatios`, `step_cost.DenseCost`; empty: the chain's fp8)
    fp8_gemm_vs_bf16: Fp8GemmRatios = Fp8GemmRatios()
    fp8_gemm_vs_bf16_archs: tuple[str, ...] = ()
    # the engine's fused MoE layer measured per shape (`fused_moe.FusedMoeTable`; empty: per op)
    fused_moe: FusedMoeTable = FusedMoeTable()
    # > 0: the start-up profile's peak is max(forward, sampler over max_num_seqs x vocab at these
    # bytes per logit) as vLLM V1 measures it (`run.activation_reserve_bytes`); 0: their sum
    sampler_profile_bytes_per_logit: float = 0.0
    # the captured sizes as (first size, step) runs, each up to the next run's first size, the
    # last up to cuda_graph_max_bs (`cuda_graph_sizes`; empty: none captured for padding)
    cuda_graph_ladder: tuple[tuple[int, int], ...] = ()

    def fp8_vs_bf16(self, architecture: str) -> Fp8GemmRatios:
        """The ratios that apply on a GPU of ``architecture`` (empty: none)."""
        return (self.fp8_gemm_vs_bf16 if architecture in self.fp8_gemm_vs_bf16_archs
                else Fp8GemmRatios())

    def fusions(self) -> Fusions:
        """The operator composition of a step under this engine (`layer_ops.Fusions`)."""
        return Fusions(act_quant_bytes=self.fp8_activation_quant.bytes_per_element,
                       act_quant_launches=self.fp8_activation_quant == ActQuant.IN_GEMM,
                       add_into_norm=self.fused_add_norm,
                       attention_fp8_out=self.attention_fp8_out,
                       quant_into_producer=self.quant_into_producer,
                       allreduce_norm_families=self.allreduce_norm_families,
                       allreduce_norm_min_hidden=self.allreduce_norm_min_hidden,
                       allreduce_norm_workspace_bytes=self.allreduce_norm_workspace_bytes)


@functools.cache
def engine_data(engine: str) -> Mapping[str, Any]:
    """The engine's YAML (each entry: value or tiers or rule, plus its source)."""
    if engine not in ENGINES:
        raise SpecError("serving.engine", f"unknown {engine!r}; known: {', '.join(ENGINES)}")
    with (ENGINES_DIR / f"{engine}.yaml").open() as fh:
        return yaml.safe_load(fh)


def _tier(entry: Mapping[str, Any], *, gib: float, device: str, tp: int) -> Any:
    """A value chosen by GPU memory / name / tp, as the engine does at start-up."""
    if "value" in entry:
        return entry["value"]
    tier = _matching_tier(entry, gib=gib, device=device, tp=tp)
    return tier["tp_ge_4"] if tp >= 4 and "tp_ge_4" in tier else tier["value"]


def _matching_tier(entry: Mapping[str, Any], *, gib: float, device: str,
                   tp: int) -> Mapping[str, Any]:
    """The first of the entry's ``tiers`` whose GPU memory / name / tp bounds hold."""
    for tier in entry["tiers"]:
        if "min_gib" in tier and gib < tier["min_gib"]:
            continue
        if "below_gib" in tier and gib >= tier["below_gib"]:
            continue
        if "min_tp" in tier and tp < tier["min_tp"]:
            continue
        if any(word in device.lower() for word in tier.get("exclude", ())):
            continue
        if "only" in tier and not any(word in device.lower() for word in tier["only"]):
            continue
        return tier
    raise SpecError("serving.engine", f"no tier matches a {gib:.0f} GiB {device}")


def sglang_mem_fraction_static(*, gpu_mib: float, chunked_prefill: int, graph_max_bs: int,
                               tp: int, pp: int) -> float:
    """SGLang's default mem_fraction_static (server_args.py _handle_gpu_memory_settings)."""
    reserved = 512 + max(chunked_prefill, 2048) * 1.5 + graph_max_bs * 2 + tp * pp / 8 * 1024
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def reserved_mem_fraction(entry: Mapping[str, Any], *, gpu_mib: float, device: str, tp: int,
                          pp: int) -> float:
    """SGLang 0.4.8-0.5.2's default mem_fraction_static: round((gpu_mem - reserved) / gpu_mem, 3)
    with reserved (GiB) = the GPU-memory tier's ``gib`` + ``per_parallel_gib`` x tp x pp (the
    ``reserved_mem`` rule of the engine file; server_args.py ServerArgs.__post_init__ at those
    tags)."""
    tier = _matching_tier(entry, gib=gpu_mib / 1024, device=device, tp=tp)
    reserved = (float(tier["gib"]) + float(tier.get("per_parallel_gib", 0.0)) * tp * pp) * 1024
    return round((gpu_mib - reserved) / gpu_mib, 3)


def _memory_fraction(entry: Mapping[str, Any], pick: Callable[..., Any], *, memory_bytes: float,
                     device: str, budget: int, graph_bs: int, tp: int, pp: int) -> float:
    """The engine's memory setting: a value or tier, or by ``rule`` SGLang's formulas."""
    rule = entry.get("rule")
    if rule == "mem_fraction_static":
        return sglang_mem_fraction_static(gpu_mib=memory_bytes / MIB, chunked_prefill=budget,
                                          graph_max_bs=graph_bs, tp=tp, pp=pp)
    if rule == "reserved_mem":
        return reserved_mem_fraction(entry, gpu_mib=memory_bytes / MIB, device=device, tp=tp,
                                     pp=pp)
    if rule is not None:
        raise SpecError("serving.engine", f"unknown gpu_memory_utilization rule {rule!r}")
    return float(pick("gpu_memory_utilization"))


def _backend_settings(engine: str, backend: str) -> Mapping[str, Any]:
    """The settings an engine backend changes (``backends`` in the engine's YAML; "": none)."""
    if not backend:
        return {}
    known = dict(engine_data(engine).get("backends", {}).get("value", {}))
    if backend not in known:
        raise SpecError("serving.engine_backend", f"{engine} has no backend {backend!r}; known: "
                        f"{', '.join(known) or 'none'}")
    return known[backend] or {}


def _token_budget(entry: Mapping[str, Any], pick: Callable[..., Any], max_model_len: int) -> int:
    """Tokens per step: the entry's value or tier, or by ``rule`` the model's length (vLLM V0
    without chunked prefill: max(max_model_len, 2048), vllm/config.py SchedulerConfig)."""
    if "rule" in entry:
        return max(max_model_len, int(entry["at_least"]))
    return int(pick("max_batched_tokens"))


def _front_end(pick: Callable[..., Any]) -> dict[str, Any]:
    """The API server's costs and layout (`simulate.serving.stream`) from the engine file."""
    return {
        "frontend_s": float(pick("frontend_ms")) / 1e3,
        "tokenize_s_per_token": float(pick("tokenize_us_per_token", 0.0) or 0.0) / 1e6,
        "stream_token_s": float(pick("stream_token_us", 0.0) or 0.0) / 1e6,
        "api_server_process": bool(pick("api_server_process", True)),
        "api_request_s": float(pick("api_request_us", 0.0) or 0.0) / 1e6,
        "stream_shares_intake": bool(pick("stream_shares_intake", True)),
        "chat_stream_empty_chunks": int(pick("chat_stream_empty_chunks", 0) or 0),
    }


@functools.lru_cache(maxsize=256)  # a served prediction asks it per plan, tenant and report
def engine_preset(engine: str, *, memory_bytes: float, device: str, tp: int = 1,
                  pp: int = 1, backend: str = "", version: str = "",
                  max_model_len: int = 0) -> EnginePreset:
    """Resolve `engine`'s defaults for one GPU (its memory in bytes and its name), under one of
    its backends ("": the engine's default), as release ``version`` set them ("": the newest;
    `engine_versions`) for a model of ``max_model_len`` tokens (0: not known)."""
    label, data = versioned_data(engine_data(engine), engine, version, max_model_len)
    gib = memory_bytes / GIB
    override = _backend_settings(engine, backend)

    def pick(key: str, default: Any = None) -> Any:
        """The engine's setting; an operator fusion its file does not list is off."""
        if key in override:
            return override[key]
        if key not in data and default is not None:
            return default
        return _tier(data[key], gib=gib, device=device, tp=tp)

    budget = _token_budget(data["max_batched_tokens"], pick, max_model_len)
    max_seqs = int(pick("max_num_seqs"))
    if engine == "vllm":  # max_num_seqs = min(default, max_num_batched_tokens) (arg_utils.py)
        max_seqs = min(max_seqs, budget)
    graph_bs = (min(2 * max_seqs, 512) if "rule" in data["cuda_graph_max_bs"]
                else int(pick("cuda_graph_max_bs")))
    util = _memory_fraction(data["gpu_memory_utilization"], pick, memory_bytes=memory_bytes,
                            device=device, budget=budget, graph_bs=graph_bs, tp=tp, pp=pp)
    fused_ar = pick("allreduce_norm_fusion", {}) or {}
    custom_ar = pick("custom_all_reduce", {}) or {}
    fp8_ratio = pick("fp8_gemm_vs_bf16", {}) or {}
    return EnginePreset(
        engine=ServingEngine(engine), version=label, scheduler=Scheduler(pick("scheduler")),
        chunk_prompts=bool(pick("chunk_prompts")),
        reserve_output_kv=bool(pick("reserve_output_kv")), window_kv=bool(pick("window_kv")),
        max_batched_tokens=budget, max_num_seqs=max_seqs, block_size=int(pick("block_size")),
        gpu_memory_utilization=util, memory_rule=MemoryRule(pick("memory_rule")),
        prefix_caching=bool(pick("prefix_caching")), cuda_graph_max_bs=graph_bs,
        cuda_graph_padding=bool(pick("cuda_graph_padding")),
        step_overhead_s=float(pick("step_overhead_ms")) / 1e3,
        step_overhead_per_seq_s=float(pick("step_overhead_per_seq_us")) / 1e6,
        **_front_end(pick),
        fp8_activation_quant=ActQuant(pick("fp8_activation_quant")),
        host_overlap=bool(pick("host_overlap")),
        fused_add_norm=bool(pick("fused_add_norm", False)),
        attention_fp8_out=bool(pick("attention_fp8_out", False)),
        quant_into_producer=bool(pick("quant_into_producer", False)),
        allreduce_norm_families=tuple(fused_ar.get("families", ())),
        allreduce_norm_min_hidden=int(fused_ar.get("min_hidden", 0)),
        allreduce_norm_workspace_bytes=float(
            fused_ar.get("workspace_bytes_tp_le_2" if tp <= 2 else "workspace_bytes",
                         float("inf"))),
        custom_all_reduce_bytes=float(
            custom_ar.get("max_bytes_tp_le_2" if tp <= 2 else "max_bytes", 0.0)),
        eager_launch_s=float(pick("eager_launch_us", 0.0)) / 1e6,
        batched_prefill_attention=bool(pick("batched_prefill_attention", False)),
        fp8_gemm_vs_bf16=_fp8_ratios(fp8_ratio),
        fp8_gemm_vs_bf16_archs=tuple(fp8_ratio.get("architectures", ())),
        fused_moe=_fused_moe(pick("fused_moe_table", {}) or {}),
        sampler_profile_bytes_per_logit=float(pick("sampler_profile_bytes_per_logit", 0.0)),
        cuda_graph_ladder=tuple((int(a), int(b)) for a, b in pick("cuda_graph_ladder", [])))


def _fused_moe(entry: Mapping[str, Any]) -> FusedMoeTable:
    """``fused_moe_table``: the measured fused MoE layer of its pinned CSV (empty: none)."""
    if not entry:
        return FusedMoeTable()
    return load_fused_moe_table(REPO_ROOT / entry["file"], fingerprint=str(entry["fingerprint"]),
                                kernel=entry["kernel"], distribution=entry["distribution"],
                                dtype=entry.get("dtype", "fp8"))


def _fp8_ratios(entry: Mapping[str, Any]) -> Fp8GemmRatios:
    """``fp8_gemm_vs_bf16``: its (m, ratio) points, and above them the ratio curves of its
    ``table`` (a measurement CSV pinned by fingerprint, `fp8_gemm.load_ratio_table`), from the
    points' last m on (so the curve joins them)."""
    points = entry.get("points", ())
    table = entry.get("table")
    if not table:
        return ratios_from(points)
    shapes = load_ratio_table(
        REPO_ROOT / table["file"], fingerprint=str(table["fingerprint"]),
        bf16=table["bf16"], fp8=table["fp8"],
        min_m=int(points[-1][0]) if points else 1)
    return ratios_from(points, shapes)


def cuda_graph_sizes(preset: EnginePreset) -> tuple[int, ...]:
    """Token counts a padding engine captured CUDA graphs for (empty: no padding), from the
    release's ``cuda_graph_ladder`` up to ``cuda_graph_max_bs``: vLLM 0.11.1+ [1, 2, 4] +
    range(8, 256, 8) + range(256, max + 1, 16), earlier releases [1, 2, 4] + range(8, max + 1,
    8) (vllm/config at each tag, cited in datasets/engines/vllm.yaml)."""
    if not preset.cuda_graph_padding:
        return ()
    top = preset.cuda_graph_max_bs
    ladder = preset.cuda_graph_ladder
    sizes: list[int] = []
    for i, (first, step) in enumerate(ladder):
        end = ladder[i + 1][0] if i + 1 < len(ladder) else top + 1
        sizes.extend(range(first, min(end, top + 1), step))
    return tuple(sizes)


def kv_cache_bytes(rule: MemoryRule | str, *, capacity: float, utilization: float,
                   weights: float, activations: float) -> float:
    """Bytes an engine gives its KV cache on one GPU under its memory rule."""
    rule = MemoryRule(rule)
    if rule is MemoryRule.STATIC_FRACTION:
        return capacity * utilization - weights
    if rule is MemoryRule.FREE_AFTER_WEIGHTS:
        return (capacity - weights - activations) * utilization
    return capacity * utilization - weights - activations


def preset_sources(engine: str) -> dict[str, str]:
    """Setting -> where its value comes from (for reports and tests)."""
    data = engine_data(engine)
    return {key: " ".join(str(entry.get("source", "")).split()) for key, entry in data.items()
            if isinstance(entry, Mapping) and key != "versions"}
