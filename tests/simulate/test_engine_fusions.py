# SPDX-License-Identifier: Apache-2.0
"""The operator composition of a serving step under an engine's fusions
(`simulate.inference.layer_ops.Fusions`, switched by ``datasets/engines/<engine>.yaml``):
TensorRT-LLM's PyTorch backend runs the residual add inside the RMSNorm
(``modules/rms_norm.py`` flashinfer_fused_add_rmsnorm), writes o_proj's fp8 input from the
attention kernel (``modules/attention.py`` out_scale), and at tp > 1 with hidden > 4096 runs
residual + RMSNorm + fp8 quantization inside the all-reduce (``models/modeling_llama.py``
LlamaDecoderLayer, AllReduceFusionOp.RESIDUAL_RMS_NORM_QUANT_FP8)."""

from __future__ import annotations

from collections import Counter

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.ops import CollectiveSpec, GemmSpec, MemoryBoundSpec, MemoryOpKind
from analytical.roofline import roofline_time
from simulate.inference.layer_ops import Fusions, inference_sharding, step_ops
from simulate.inference.spec import parse_serving
from simulate.serving.choices import EngineBackend
from simulate.serving.engine_presets import engine_preset
from simulate.validate.serving_corpus import CORPUS_DIR, load_corpus, row_scenario


def _preset(engine: str, tp: int = 1):
    hw = get_hardware("h100-sxm")
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name, tp=tp)


def _kinds(ops) -> Counter[str]:
    out: Counter[str] = Counter()
    for op, n in ops:
        key = op.kind.value if isinstance(op, (MemoryBoundSpec, CollectiveSpec)) else "gemm"
        out[key] += int(n)
    return out


def _ops(model: str, tp: int, fusions: Fusions | None, tokens: int = 64):
    spec = load_model(model)
    shard = inference_sharding(tp=tp, gpus_per_node=8)
    return spec, step_ops(spec, tokens=tokens, shard=shard, weight_dtype=DType.FP8,
                          act_quant_bytes=3.0, fusions=fusions)


def test_only_trtllm_lists_the_fusions() -> None:
    trt = _preset("trtllm").fusions()
    assert trt.add_into_norm and trt.attention_fp8_out
    assert trt.allreduce_norm_min_hidden == 4097  # modeling_llama.py: hidden_size > 4096
    assert trt.allreduce_norm_families == ("llama",)  # modeling_qwen3.py: a plain all-reduce
    assert trt.act_quant_bytes == 3.0
    for engine in ("vllm", "sglang"):
        other = _preset(engine).fusions()
        assert not (other.add_into_norm or other.attention_fp8_out)
        assert other.allreduce_norm_families == ()


def test_tp1_fuses_the_residual_add_and_the_output_projection_quantization() -> None:
    model, plain = _ops("llama-3-8b", 1, None)
    _, fused = _ops("llama-3-8b", 1, _preset("trtllm").fusions())
    before, after = _kinds(plain), _kinds(fused)
    layers = model.layers
    assert before["add"] == 2 * layers and after["add"] == 0
    assert before["copy"] == 4 * layers  # a quantization pass per fp8 GEMM
    assert after["copy"] == 3 * layers  # qkv, gate_up, down; o_proj's input comes from attention
    assert after["gemm"] == before["gemm"] and after["rmsnorm"] == before["rmsnorm"]
    # the fused norm reads x and the residual and writes both: twice a plain norm's traffic
    norms = [op for op, _ in fused if isinstance(op, MemoryBoundSpec)
             and op.kind is MemoryOpKind.RMSNORM and op.cols == 2 * model.hidden]
    assert sum(n for op, n in fused if op in norms) == 2 * layers  # both norms of each layer


def test_allreduce_fusion_needs_tp_and_a_hidden_size_above_4096() -> None:
    fusions = _preset("trtllm", tp=2).fusions()
    model, fused = _ops("llama-3-70b", 2, fusions)
    kinds = _kinds(fused)
    assert model.hidden == 8192 and fusions.allreduce_norm(model, inference_sharding(tp=2))
    # per layer: 4 GEMMs, 2 all-reduces (carrying add + norm + quant), rotary, SwiGLU and the
    # down projection's input quantization; the final norm stays
    assert kinds["add"] == 0 and kinds["rmsnorm"] == 1
    assert kinds["copy"] == model.layers
    assert kinds["gemm"] == 4 * model.layers
    # Llama-3.1-8B (hidden 4096) at tp 2: no all-reduce fusion, the add still goes into the norm
    small, at_tp2 = _ops("llama-3-8b", 2, _preset("trtllm", tp=2).fusions())
    assert not fusions.allreduce_norm(small, inference_sharding(tp=2))
    assert _kinds(at_tp2)["rmsnorm"] == 2 * small.layers + 1
    assert _kinds(at_tp2)["copy"] == 3 * small.layers
    # past the custom all-reduce workspace (16e6 bytes at tp 2) TensorRT-LLM falls back to NCCL,
    # then a fused add + RMSNorm kernel and a quantization pass (allreduceOp.cpp)
    assert fusions.allreduce_norm_workspace_bytes == 16e6
    assert _preset("trtllm", tp=8).fusions().allreduce_norm_workspace_bytes == 8e6
    tokens = 1024  # 1024 x 8192 x 2 B = 16.8 MB > 16e6
    _, large = _ops("llama-3-70b", 2, fusions, tokens=tokens)
    assert not fusions.allreduce_norm(model, inference_sharding(tp=2), tokens)
    assert _kinds(large)["add"] == 0 and _kinds(large)["rmsnorm"] == 2 * model.layers + 1
    assert _kinds(large)["copy"] == 3 * model.layers
    # Qwen3-32B (hidden 5120): TensorRT-LLM's Qwen3 layer keeps a plain all-reduce
    qwen, qwen_ops = _ops("qwen3-32b", 2, fusions)
    assert qwen.hidden > 4096 and not fusions.allreduce_norm(qwen, inference_sharding(tp=2))
    assert _kinds(qwen_ops)["add"] == 0 and _kinds(qwen_ops)["copy"] == 3 * qwen.layers


def test_fewer_kernels_make_a_faster_decode_step() -> None:
    hw = get_hardware("h200")
    _, plain = _ops("llama-3-70b", 2, Fusions(act_quant_bytes=3.0), tokens=8)
    _, fused = _ops("llama-3-70b", 2, _preset("trtllm", tp=2).fusions(), tokens=8)

    def seconds(ops) -> float:
        return sum(n * roofline_time(op, hw) for op, n in ops)

    saved = seconds(plain) - seconds(fused)
    kernels = sum(n for _, n in plain) - sum(n for _, n in fused)
    assert kernels == 7 * 80  # 2 adds, 2 norms, 3 quantization passes per layer
    # each dropped kernel saves at least its fixed time (efficiency.kernel_latency_us)
    assert saved >= kernels * hw.efficiency.kernel_latency_s * 0.99
    assert all(isinstance(op, (GemmSpec, MemoryBoundSpec, CollectiveSpec)) for op, _ in fused)


def test_without_fusions_step_ops_is_unchanged() -> None:
    _, default = _ops("llama-3-8b", 1, None)
    _, explicit = _ops("llama-3-8b", 1, Fusions(act_quant_bytes=3.0))
    assert default == explicit
    assert pytest.approx(sum(n for _, n in default)) == sum(n for _, n in explicit)


def test_perf_overview_throughput_needs_the_checkpoints_fp8_kv_cache() -> None:
    # Output tok/s <= HBM bandwidth / (mean context x KV bytes per token): every decode step
    # reads each running request's whole KV. With a bf16 KV the Llama-3.1-8B 128/4096 rows of
    # the TensorRT-LLM perf overview would break that bound; with the fp8 KV that trtllm-bench's
    # "auto" takes from a ModelOpt checkpoint they hold.
    from analytical.memory import kv_cache_bytes
    from simulate.validate.serving_corpus import load_corpus

    rows = [r for r in load_corpus() if r.source == "trtllm-perf-overview"
            and r.model == "llama-3-8b" and (r.input_len, r.output_len) == (128, 4096)]
    assert len(rows) == 2
    model = load_model("llama-3-8b")
    for row in rows:
        kv_dtype = row_scenario(row)["inference"]["kv_cache_dtype"]
        assert kv_dtype == "fp8"
        bw = get_hardware(row.gpu).memory_bw_bytes_per_s
        context = row.input_len + row.output_len / 2
        bound = {dtype: bw / (context * kv_cache_bytes(model, tokens=1, kv_dtype=dtype,
                                                       tp=row.tp, pp=1))
                 for dtype in (DType.BF16, DType.FP8)}
        assert bound[DType.BF16] < row.measured["output_tok_s"] < bound[DType.FP8]


def test_a_prebuilt_tensorrt_engine_keeps_the_norm_and_allreduce_kernels() -> None:
    """trtllm-build's defaults (tensorrt_llm/plugin/plugin.py: norm_quant_fusion and
    reduce_fusion False): all-reduce, residual add, RMSNorm and quantization run apart."""
    hw = get_hardware("h100-sxm")
    trt = engine_preset("trtllm", memory_bytes=hw.memory_bytes, device=hw.name, tp=2,
                        backend="tensorrt").fusions()
    assert engine_preset("trtllm", memory_bytes=hw.memory_bytes, device=hw.name, tp=2,
                         backend="pytorch").fusions() == _preset("trtllm", tp=2).fusions()
    assert not trt.add_into_norm and trt.attention_fp8_out and trt.act_quant_bytes == 3.0
    model, ops = _ops("llama-3-70b", 2, trt)
    assert not trt.allreduce_norm(model, inference_sharding(tp=2))
    kinds = _kinds(ops)
    assert kinds["add"] == 2 * model.layers and kinds["rmsnorm"] == 2 * model.layers + 1
    assert kinds["copy"] == 3 * model.layers  # o_proj's input still comes from attention
    with pytest.raises(SpecError, match="engine_backend"):
        engine_preset("vllm", memory_bytes=hw.memory_bytes, device=hw.name, backend="tensorrt")


def test_engine_backend_is_checked_and_reaches_the_nim_rows() -> None:
    arrival = {"process": "closed", "concurrency": 1, "num_requests": 2}
    spec = parse_serving({"arrival": arrival, "engine": "trtllm", "engine_backend": "tensorrt"})
    assert spec.engine_backend is EngineBackend.TENSORRT
    assert parse_serving({"arrival": arrival, "engine": "trtllm"}).engine_backend is None
    with pytest.raises(SpecError, match="serving.engine_backend"):
        parse_serving({"arrival": arrival, "engine": "trtllm", "engine_backend": "onnx"})
    with pytest.raises(SpecError, match="serving.engine_backend"):
        parse_serving({"arrival": arrival, "engine": "vllm", "engine_backend": "tensorrt"})
    nim = load_corpus([CORPUS_DIR / "nim-llama33-70b-h100.yaml"])
    assert nim and all(row.engine_backend == "tensorrt" for row in nim)
    assert row_scenario(nim[0])["serving"]["engine_backend"] == "tensorrt"
    perf = [r for r in load_corpus() if r.source == "trtllm-perf-overview"]
    assert perf and not any(r.engine_backend for r in perf)


def test_vllm_quantizes_fp8_inputs_inside_the_norm_and_the_activation() -> None:
    """vLLM compiles with Inductor, which runs QuantFP8's native code inside the RMSNorm's and
    SiluAndMul's generated kernel (`quant_into_producer` in datasets/engines/vllm.yaml): of the
    four fp8 GEMMs per layer only o_proj, fed by the attention op, keeps a quantization pass.
    SGLang (no torch.compile by default) keeps all four."""
    vllm = _preset("vllm").fusions()
    assert vllm.quant_into_producer and vllm.act_quant_bytes == 5.0
    assert not _preset("sglang").fusions().quant_into_producer
    assert not _preset("trtllm").fusions().quant_into_producer
    model, plain = _ops("qwen3-8b", 1, Fusions(act_quant_bytes=5.0), tokens=1)
    _, fused = _ops("qwen3-8b", 1, vllm, tokens=1)
    assert _kinds(plain)["copy"] == 4 * model.layers
    assert _kinds(fused)["copy"] == model.layers
    quant = [op for op, _ in fused if isinstance(op, MemoryBoundSpec)
             and op.kind is MemoryOpKind.COPY]
    assert {op.rows for op in quant} == {1}  # o_proj's [tokens, heads x head_dim] input
    others = {k: v for k, v in _kinds(fused).items() if k != "copy"}
    assert others == {k: v for k, v in _kinds(plain).items() if k != "copy"}
    hw = get_hardware("h100-sxm")
    saved = sum(n * roofline_time(op, hw) for op, n in plain) - sum(
        n * roofline_time(op, hw) for op, n in fused)
    assert saved >= 3 * model.layers * hw.efficiency.kernel_latency_s * 0.99
