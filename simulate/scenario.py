# SPDX-License-Identifier: Apache-2.0
"""Scenarios: a YAML/JSON file (or dict) parsed once into frozen specs.

The ``training`` block becomes `TrainingSpec`, ``hardware`` a `ClusterSpec`, ``inference`` (+
``serving``) an `InferenceSetup` and ``colocate`` a tuple of `ColocatedTenant`
(`simulate.inference.setup`); the model stays a reference (name or config.json path) resolved by
`analytical.model.load_model`. Layout checks that need the model or the device live in
`simulate.layout`; checks that need the hardware happen when predicting.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analytical.dtypes import DType, parse_dtype
from analytical.errors import SpecError
from analytical.inputs import check_path, check_work, parse_json, parse_yaml, read_text, show_path
from analytical.memory import Framework, framework_grad_bytes
from analytical.offload import Offload
from analytical.parallel import ParallelConfig, PipelineSplit, Recompute, RecomputeModule, Schedule
from simulate.fields import (
    bool_field,
    check_keys,
    choice_field,
    dtype_field,
    int_field,
    names_field,
    optional_float,
    version_field,
)
from simulate.inference.setup import (
    ColocatedTenant,
    InferenceSetup,
    parse_colocation,
    parse_inference_setup,
)
from simulate.lora import parse_lora
from simulate.moe_graphs import CudaGraphScope
from simulate.torch_kernels import Fp8Recipe

TOP_KEYS = {"name", "description", "model", "hardware", "training", "inference", "serving",
            "colocate"}
HARDWARE_KEYS = {"gpu", "num_gpus", "gpus_per_node"}
TRAINING_KEYS = {"parallel", "global_batch", "micro_batch", "seq_len", "precision", "recompute",
                 "recompute_modules", "grad_reduce_dtype", "optimizer_state_dtype", "cuda_graph",
                 "transformer_engine",
                 "schedule", "overlap", "dp_bucket_mb", "optimizer", "attention", "lora",
                 "framework", "offload", "compile", "fp8_recipe", "cross_entropy_fusion",
                 "compile_loss", "moe_router_fusion", "moe_fused_mlp", "bias_dropout_fusion"}
PARALLEL_KEYS = {"tp", "pp", "dp", "cp", "ep", "etp", "vpp", "sp", "zero", "fsdp",
                 "cp_algorithm", "pipeline_split"}
OVERLAP_KEYS = {"tp_comm", "dp_grad", "param_gather", "compute_slowdown", "comm_sms", "moe_a2a",
                "cp_max_ctas"}
OFFLOAD_KEYS = {"weights", "activations", "optimizer"}  # analytical.offload.Offload
TRAIN_PRECISIONS = (DType.BF16, DType.FP16, DType.FP8)
GRAD_DTYPES = (DType.FP32, DType.BF16, DType.FP16)
STATE_DTYPES = GRAD_DTYPES  # apex DistributedFusedAdam's supported_dtypes (fp32, fp16, bf16)
CP_ALGORITHMS = ("ring", "all_gather")
# unfused: Megatron-LM's 2021-22 core attention; flash-triton: FlashAttention's Triton port
# (llm-foundry `attn_impl: triton`), the same fused operator at its own speed (`efficiency.py`);
# flash2: flash-attn 2 where a run turned TE's cuDNN attention off (`efficiency.FLASH2_KERNELS`)
ATTENTION_KERNELS = ("flash", "unfused", "flash-triton", "flash2")
# The pipeline is simulated event by event (pp * vpp * micro-batches); Megatron runs use tens to
# a few thousand micro-batches, so this bound only stops typos (2^39 would run for days) up front.
MAX_MICROBATCHES = 100_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """Which GPU and how many; ``gpus_per_node`` defaults to the hardware file's."""

    gpu: str
    num_gpus: int
    gpus_per_node: int | None = None

    def node_size(self, hw_gpus_per_node: int) -> int:
        """GPUs sharing one NVLink domain in this job: a job smaller than the hardware's domain
        (64 GPUs of a GB200 NVL72) sits inside one; `analytical.layer_spec.ranks_per_node`'s
        gcd(group, domain) would put 8 of an EP group of 64 on one 72-GPU domain."""
        return min(self.num_gpus, self.gpus_per_node or hw_gpus_per_node)


@dataclass(frozen=True, slots=True, kw_only=True)
class OverlapSpec:
    """Which communication hides behind compute, and what overlapping costs.

    ``compute_slowdown`` is Charon's ratio: compute running beside a collective takes this factor
    longer. None derives it from the SMs NCCL occupies: units / (units - comm_sms).
    """

    tp_comm: bool = False  # TP/SP collectives overlapped with GEMMs (TE userbuffers style)
    dp_grad: bool = True  # bucketed gradient reduction overlapped with the last backward
    param_gather: bool = True  # ZeRO param all-gather overlapped with the next forward
    moe_a2a: bool = False  # EP all-to-all behind the paired micro-batch (`moe_overlap`)
    compute_slowdown: float | None = None
    comm_sms: int = 16  # CTAs (one per SM) NCCL channels use while overlapping
    cp_max_ctas: int = 0  # NCCL maxCTAs of the CP communicator (`simulate.comm_ctas`); 0: none


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSpec:
    """One training iteration: layout, batch, sequence, precision and schedule."""

    parallel: ParallelConfig
    global_batch: int  # sequences per iteration
    micro_batch: int  # sequences per micro-batch per DP rank
    seq_len: int  # tokens per sequence
    precision: DType = DType.BF16
    recompute: Recompute = Recompute.NONE
    # Megatron-Core's selective modules (`RecomputeModule`); empty: the attention core
    recompute_modules: tuple[RecomputeModule, ...] = ()
    schedule: Schedule = Schedule.ONE_F_ONE_B
    overlap: OverlapSpec = OverlapSpec()
    dp_bucket_mb: float | None = None  # gradient bucket, MB; None: the framework's (dp_sync)
    cp_algorithm: str | None = None  # None: the framework's (`torch_kernels.cp_sharding`)
    attention: str = "flash"  # "unfused": QK^T and PV GEMMs with a materialised softmax
    lora_rank: int = 0  # > 0: LoRA fine-tuning, base weights frozen (survey T4.2)
    lora_targets: tuple[str, ...] = ()
    lora_base_dtype: DType = DType.BF16  # the frozen base's linear weights (`simulate.lora`)
    framework: Framework = Framework.MEGATRON  # whose memory behaviour (analytical.memory)
    offload: Offload = Offload()  # states kept in host memory (analytical.offload)
    compile: bool = True  # torch.compile'd model; false: eager kernels (`torch_kernels`)
    fp8_recipe: Fp8Recipe = Fp8Recipe.TENSORWISE  # fp8 scaling (`torch_kernels`)
    # gradient buffer and DP reduction dtype (Megatron DDP grad_reduce_in_fp32); None: the
    # framework's (`analytical.memory.framework_grad_bytes`, `efficiency.grad_reduce_dtype`)
    grad_reduce_dtype: DType | None = None
    # optimizer master copy and moments (apex DistributedFusedAdam ``dtype``,
    # `analytical.optimizer_states`)
    optimizer_state_dtype: DType = DType.FP32
    # parts captured in CUDA graphs (Megatron-Core cuda_graph_scope, `simulate.moe_graphs`)
    cuda_graph: tuple[CudaGraphScope, ...] = ()
    # Megatron-Core's fused cross entropy (`torch_kernels.unfused_loss_nodes`); None: framework's
    cross_entropy_fusion: bool | None = None
    # torchtitan's loss under torch.compile; None: with the model (torchtitan since 2025-04)
    compile_loss: bool | None = None
    moe_router_fusion: bool = False  # Megatron-Core `--moe-router-fusion`, off as there (`moe_host`)
    moe_fused_mlp: bool = False  # the recipe's fused grouped expert MLP (`moe_kernels`)
    bias_dropout_fusion: bool = True  # Megatron-Core's fused bias-dropout-add (`bias_kernels`)
    transformer_engine: str = "2"  # the run's TE version: its TP-overlap defaults (`tp_overlap`)

    @property
    def compiled_loss(self) -> bool:
        return self.compile if self.compile_loss is None else self.compile_loss

    @property
    def num_microbatches(self) -> int:
        return self.global_batch // (self.micro_batch * self.parallel.dp)

    @property
    def grad_buffer_bytes(self) -> float:
        """Bytes per gradient in the (pre-ZeRO) gradient buffer."""
        if self.grad_reduce_dtype is not None:
            return float(self.grad_reduce_dtype.bytes)
        return framework_grad_bytes(self.framework)

    @property
    def fused_attention(self) -> bool:
        """A fused kernel (no [s, s] scores kept): every `ATTENTION_KERNELS` entry but unfused."""
        return self.attention != "unfused"


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """A parsed scenario: exactly one of ``training``, ``inference`` and ``colocate`` is set."""

    name: str
    model: str  # catalog name or path to a config.json ("" for colocate: each tenant names one)
    cluster: ClusterSpec
    training: TrainingSpec | None = None
    inference: InferenceSetup | None = None
    colocate: tuple[ColocatedTenant, ...] = ()
    base_dir: Path | None = None  # relative model and trace paths are resolved against it


def _check_keys(block: Any, path: str, allowed: set[str], source: str | None) -> Mapping[str, Any]:
    return check_keys(block, path, allowed, source=source)


def _int(block: Mapping[str, Any], key: str, path: str, source: str | None,
         default: int | None = None, minimum: int = 1) -> int:
    return int_field(block, key, path, source=source, default=default, minimum=minimum)


def _bool(block: Mapping[str, Any], key: str, path: str, source: str | None,
          default: bool) -> bool:
    return bool_field(block, key, path, default, source=source)


def _opt_bool(block: Mapping[str, Any], key: str, path: str, source: str | None
              ) -> bool | None:
    return None if block.get(key) is None else _bool(block, key, path, source, False)


def _choice(block: Mapping[str, Any], key: str, path: str, source: str | None, enum: Any,
            default: Any) -> Any:
    return choice_field(block, key, path, enum, default, source=source)


def parse_parallel(block: Any, source: str | None, path: str = "training.parallel"
                   ) -> tuple[ParallelConfig, str | None]:
    block = _check_keys(block or {}, path, PARALLEL_KEYS, source)
    kwargs = {k: _int(block, k, path, source, 1) for k in ("tp", "pp", "dp", "cp", "ep", "vpp")}
    zero = _int(block, "zero", path, source, 0, minimum=0)
    cp_algorithm = block.get("cp_algorithm")
    if cp_algorithm is not None and cp_algorithm not in CP_ALGORITHMS:
        raise SpecError(f"{path}.cp_algorithm", f"unknown {cp_algorithm!r}; known: "
                        f"{', '.join(CP_ALGORITHMS)}", source=source)
    sp, fsdp = _bool(block, "sp", path, source, False), _bool(block, "fsdp", path, source, False)
    try:
        parallel = ParallelConfig(**kwargs, zero=zero, sp=sp, fsdp=fsdp,
                                  etp=_int(block, "etp", path, source, 0, minimum=0),
                                  pipeline_split=_choice(block, "pipeline_split", path, source,
                                                         PipelineSplit, "even"))
    except SpecError as exc:
        raise SpecError(f"training.{exc.field}", exc.reason, source=source) from None
    return parallel, cp_algorithm


def _overlap(block: Any, source: str | None) -> OverlapSpec:
    path = "training.overlap"
    block = _check_keys(block or {}, path, OVERLAP_KEYS, source)
    slowdown = optional_float(block, "compute_slowdown", path, source=source, minimum=1.0)
    return OverlapSpec(tp_comm=_bool(block, "tp_comm", path, source, False),
                       dp_grad=_bool(block, "dp_grad", path, source, True),
                       param_gather=_bool(block, "param_gather", path, source, True),
                       moe_a2a=_bool(block, "moe_a2a", path, source, False),
                       compute_slowdown=slowdown,
                       comm_sms=_int(block, "comm_sms", path, source, 16, minimum=0),
                       cp_max_ctas=_int(block, "cp_max_ctas", path, source, 0, minimum=0))


def parse_training(block: Any, source: str | None = None) -> TrainingSpec:
    """The ``training`` block -> `TrainingSpec` (field-level checks only)."""
    path, block = "training", _check_keys(block, "training", TRAINING_KEYS, source)
    parallel, cp_algorithm = parse_parallel(block.get("parallel"), source)
    precision = parse_dtype(block.get("precision", "bf16"), field=f"{path}.precision",
                            source=source)
    if precision not in TRAIN_PRECISIONS:
        raise SpecError(f"{path}.precision", f"{precision} is not a training precision; use "
                        f"{', '.join(TRAIN_PRECISIONS)}", source=source)
    bucket = optional_float(block, "dp_bucket_mb", path, source=source, exclusive_min=True)
    attention = str(block.get("attention", "flash"))
    if attention not in ATTENTION_KERNELS:
        raise SpecError(f"{path}.attention", f"unknown {attention!r}; known: "
                        f"{', '.join(ATTENTION_KERNELS)}", source=source)
    optimizer = block.get("optimizer", "adam")
    if optimizer != "adam":
        raise SpecError(f"{path}.optimizer", f"only 'adam' is modelled, got {optimizer!r}",
                        source=source)
    lora = parse_lora(block["lora"], f"{path}.lora", source) if "lora" in block else None
    spec = TrainingSpec(
        lora_rank=lora.rank if lora else 0, lora_targets=lora.targets if lora else (),
        lora_base_dtype=lora.base_dtype if lora else DType.BF16, parallel=parallel,
        global_batch=_int(block, "global_batch", path, source),
        micro_batch=_int(block, "micro_batch", path, source, 1),
        seq_len=_int(block, "seq_len", path, source),
        precision=precision,
        recompute=_choice(block, "recompute", path, source, Recompute, "none"),
        recompute_modules=_recompute_modules(block, path, source),
        schedule=_choice(block, "schedule", path, source, Schedule, "1f1b"),
        overlap=_overlap(block.get("overlap"), source),
        dp_bucket_mb=bucket,
        cp_algorithm=cp_algorithm,
        attention=attention,
        framework=_choice(block, "framework", path, source, Framework, "megatron"),
        offload=_offload(block.get("offload"), source),
        compile=_bool(block, "compile", path, source, True),
        fp8_recipe=_choice(block, "fp8_recipe", path, source, Fp8Recipe, "tensorwise"),
        grad_reduce_dtype=dtype_field(block, "grad_reduce_dtype", path, GRAD_DTYPES, source=source),
        optimizer_state_dtype=dtype_field(block, "optimizer_state_dtype", path, STATE_DTYPES,
                                          source=source) or DType.FP32,
        cuda_graph=names_field(block, "cuda_graph", path, CudaGraphScope, source=source),
        cross_entropy_fusion=_opt_bool(block, "cross_entropy_fusion", path, source),
        compile_loss=_opt_bool(block, "compile_loss", path, source),
        moe_router_fusion=_bool(block, "moe_router_fusion", path, source, False),
        moe_fused_mlp=_bool(block, "moe_fused_mlp", path, source, False),
        bias_dropout_fusion=_bool(block, "bias_dropout_fusion", path, source, True),
        transformer_engine=version_field(block, "transformer_engine", path, "2", source=source))
    check_work(f"{path}.global_batch", spec.num_microbatches, MAX_MICROBATCHES,
               "micro-batches per iteration", "raise micro_batch or dp, or lower global_batch")
    return spec


def _recompute_modules(block: Mapping[str, Any], path: str, source: str | None
                       ) -> tuple[RecomputeModule, ...]:
    """``recompute_modules``: Megatron-Core module names, only with ``recompute: selective``
    (Megatron's ``--recompute-modules``)."""
    mods = names_field(block, "recompute_modules", path, RecomputeModule, source=source)
    if mods and block.get("recompute") != Recompute.SELECTIVE:
        raise SpecError(f"{path}.recompute_modules", "needs recompute: selective, got "
                        f"{block.get('recompute', 'none')!r}", source=source)
    return mods


def _offload(block: Any, source: str | None) -> Offload:
    path, block = "training.offload", _check_keys(block or {}, "training.offload",
                                                  OFFLOAD_KEYS | {"activation_layers"}, source)
    return Offload(**{k: _bool(block, k, path, source, False) for k in sorted(OFFLOAD_KEYS)},
                   activation_layers=_int(block, "activation_layers", path, source, 0, minimum=0))


def _coerce(text: str) -> Any:
    """An override value: YAML scalar rules (``8`` -> int, ``true`` -> bool, ``1e-3`` -> float)."""
    try:
        return parse_yaml(text, "--set")
    except SpecError as exc:
        if exc.reason.startswith("refused"):  # an alias bomb or deep nesting is still refused
            raise
        return text


def apply_overrides(doc: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a copy of ``doc`` with each ``a.b.c=value`` set (intermediate maps created)."""
    result: dict[str, Any] = copy.deepcopy(dict(doc))
    for item in overrides:
        if "=" not in item:
            raise SpecError("--set", f"expected path=value, got {item!r}")
        path, text = item.split("=", 1)
        keys = [k for k in path.strip().split(".") if k]
        if not keys:
            raise SpecError("--set", f"empty path in {item!r}")
        node = result
        for i, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise SpecError(".".join(keys[: i + 1]), "is not a mapping; cannot set inside it")
            node = child
        node[keys[-1]] = _coerce(text)
    return result


def read_document(path: str | Path) -> dict[str, Any]:
    """Parse a YAML or JSON scenario file; errors name the file."""
    path = check_path(path, "scenario")
    text = read_text(path, "scenario")
    parse = parse_json if path.suffix == ".json" else parse_yaml
    doc = parse(text, "scenario", source=show_path(path))
    if not isinstance(doc, dict):
        raise SpecError("scenario", "top level must be a mapping", source=show_path(path))
    return doc


def parse_scenario(doc: Mapping[str, Any], *, source: str | None = None,
                   base_dir: Path | None = None) -> Scenario:
    """Validate a scenario mapping and parse each of its blocks into its spec."""
    _check_keys(doc, "", TOP_KEYS, source)
    if "colocate" not in doc and "model" not in doc:
        raise SpecError("model", "missing (a catalog name or a path to a config.json)",
                        source=source)
    if "hardware" not in doc:
        raise SpecError("hardware", "missing", source=source)
    hw = _check_keys(doc["hardware"], "hardware", HARDWARE_KEYS, source)
    if "gpu" not in hw:
        raise SpecError("hardware.gpu", "missing", source=source)
    gpn = hw.get("gpus_per_node")
    cluster = ClusterSpec(gpu=str(hw["gpu"]), num_gpus=_int(hw, "num_gpus", "hardware", source),
                          gpus_per_node=None if gpn is None else _int(hw, "gpus_per_node",
                                                                      "hardware", source))
    modes = [k for k in ("training", "inference", "colocate") if k in doc]
    if len(modes) != 1:
        raise SpecError("training", "a scenario needs exactly one of training, inference, "
                        f"colocate; found {modes or 'none'}", source=source)
    model = str(doc.get("model", ""))
    if model and base_dir is not None and model.endswith(".json") and not Path(model).is_absolute():
        model = str(base_dir / model)
    try:  # the inference parsers do not take the file: its errors get it here
        inference = parse_inference_setup(doc) if "inference" in doc else None
        colocate = parse_colocation(doc["colocate"]) if "colocate" in doc else ()
    except SpecError as exc:
        if exc.source is not None or source is None:
            raise
        raise SpecError(exc.field, exc.reason, source=source) from None
    return Scenario(name=str(doc.get("name", Path(source).stem if source else "scenario")),
                    model=model, cluster=cluster,
                    training=parse_training(doc["training"], source) if "training" in doc else None,
                    inference=inference, colocate=colocate, base_dir=base_dir)


def load_scenario(scenario: str | Path | Mapping[str, Any], overrides: Sequence[str] = ()
                  ) -> Scenario:
    """A path or mapping (plus ``--set`` overrides) -> validated `Scenario`."""
    if isinstance(scenario, Mapping):
        return parse_scenario(apply_overrides(scenario, overrides))
    path = Path(scenario)
    doc = apply_overrides(read_document(path), overrides)
    return parse_scenario(doc, source=str(path), base_dir=path.resolve().parent)
