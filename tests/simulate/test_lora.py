# SPDX-License-Identifier: Apache-2.0
"""LoRA: trainable parameters and optimizer memory against the closed form (PEFT numbers)."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from analytical.layer_spec import LoraSpec, Param, Sharding
from analytical.memory import training_memory
from analytical.model import load_model
from analytical.parallel import ParallelConfig, Recompute, Schedule
from simulate.graph import TrainStep, layer_block
from simulate.lora import (
    LORA_TARGETS,
    LoraConfig,
    lora_state_bytes,
    lora_trainable_params,
    lora_training_memory,
)


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))


def test_llama2_7b_qv_rank8_is_the_peft_number():
    # PEFT's print_trainable_parameters for Llama-2-7B, r=8, target_modules=[q_proj, v_proj]:
    # "trainable params: 4,194,304" = 32 layers * 2 targets * 8 * (4096 + 4096).
    assert lora_trainable_params(load_model("llama-2-7b"), 8, ["q", "v"]) == 4_194_304


def test_gqa_and_mlp_targets_closed_form():
    m = load_model("llama-3-8b")  # h 4096, 8 kv heads x 128, ffn 14336, 32 layers
    per_layer = 16 * ((4096 + 4096) + (4096 + 1024) * 2 + (4096 + 4096)
                      + 2 * (4096 + 14336) + (14336 + 4096))
    assert lora_trainable_params(m, 16, ["q", "k", "v", "o", "gate", "up", "down"]) \
        == 32 * per_layer


def test_memory_frozen_base_matches_closed_form():
    m = load_model("llama-2-7b")
    p = 4_194_304
    par = ParallelConfig()
    mem = lora_training_memory(m, par, rank=8, targets=["q", "v"], micro_batch=1, seq_len=2048,
                               num_microbatches=1)
    closed = lora_state_bytes(p)
    assert mem.gradients_bytes == pytest.approx(closed["gradients_bytes"])  # 2 B/param
    assert mem.optimizer_bytes == pytest.approx(closed["optimizer_bytes"])  # 12 B/param
    assert mem.weights_bytes == pytest.approx(2.0 * m.params_total + 2.0 * p)
    full = training_memory(m, par, micro_batch=1, seq_len=2048, recompute=Recompute.NONE,
                           schedule=Schedule.ONE_F_ONE_B, num_microbatches=1)
    # a frozen linear saves no input for a weight gradient (TE Linear / LayerNormLinear keep it
    # only if weight.requires_grad): with adapters on q and v the QKV input stays, fc1's and
    # fc2's inputs go (32 layers x 2048 tokens x (4096 + 11008) bf16 elements)
    freed = 32 * 2048 * 2.0 * (4096 + 11008)
    assert full.activations_bytes - mem.activations_bytes == pytest.approx(freed)


def test_adapter_gemms_and_frozen_block():
    """Adapters on q and o at tp=2: forward x@A, u@B per target; backward four GEMMs each
    (twice the forward FLOPs); the base weights lose their wgrad, nothing else does."""
    m = load_model("llama-2-7b")
    sh = Sharding(tp=2, tp_rpn=2)
    lora = TrainStep(sharding=sh, micro_batch=1, seq_len=4096,
                     lora=LoraSpec(rank=8, targets=("q", "o")))
    base = layer_block(m, TrainStep(sharding=sh, micro_batch=1, seq_len=4096), moe=False)
    frozen = layer_block(m, lora, moe=False)
    fwd = [n.op for n in frozen.fwd if n.param == Param.ADAPTER]
    bwd = [n.op for n in frozen.bwd if n.param == Param.ADAPTER]
    assert sum(g.flops for g in fwd) == pytest.approx(
        2 * 4096 * 8 * ((4096 + 4096 // 2) + (4096 // 2 + 4096)))
    assert sum(g.flops for g in bwd) == pytest.approx(2 * sum(g.flops for g in fwd))
    assert not any(n.name.endswith(".wgrad") and n.param == Param.BASE for n in frozen.bwd)
    base_wgrads = [n for n in base.bwd if n.name.endswith(".wgrad")]
    assert base_wgrads and all(n.param == Param.BASE for n in base_wgrads)
    assert len(frozen.fwd) == len(base.fwd) + len(fwd)


def test_both_target_spellings_normalise_to_one():
    assert LoraSpec(rank=4, targets=("qkv", "gate_up", "o")).targets == \
        ("q", "k", "v", "o", "gate", "up")
    assert LoraSpec(rank=4, targets=("v", "q", "q")).targets == ("q", "v")
    m = load_model("llama-3-8b")
    assert lora_trainable_params(m, 8, ["qkv"]) == lora_trainable_params(m, 8, ["q", "k", "v"])


def test_bad_lora_config_names_field():
    # "qkv" is now accepted (vLLM's merged spelling, normalised to q, k, v); "qk" is not a name
    with pytest.raises(SpecError, match="training.lora.targets"):
        lora_trainable_params(load_model("llama-2-7b"), 8, ["qk"])
    with pytest.raises(SpecError, match="training.lora.rank"):
        lora_trainable_params(load_model("llama-2-7b"), 0, ["q"])
    with pytest.raises(SpecError, match="training.lora.targets"):
        LoraConfig(rank=8, targets=())


def test_lora_scenario_through_simulate() -> None:
    """`training.lora` in a scenario: frozen base (no wgrad GEMMs, no base optimizer state)."""
    from pathlib import Path

    from analytical.model import load_model
    from simulate.api import run
    from simulate.lora import lora_trainable_params

    path = Path(__file__).resolve().parents[2] / "datasets" / "scenarios" / "llama2-7b-lora-a100.yaml"
    import yaml

    lora = run(path, use_store=False, use_predictors=False).data
    doc = yaml.safe_load(path.read_text())
    del doc["training"]["lora"]
    doc["training"]["parallel"]["zero"] = 2  # full fine-tuning only fits with sharded states
    # (and sharded gradients: Megatron's fp32 main grads would not fit beside ZeRO-1 states)
    full = run(doc, use_store=False, use_predictors=False).data
    # no base weight-gradient GEMMs: backward is ~half as long, so the step is ~2/3 or less
    assert lora["iteration_time_s"] < 0.8 * full["iteration_time_s"]
    assert lora["memory"]["optimizer_gib"] < 0.05 * full["memory"]["optimizer_gib"]
    adapters = lora_trainable_params(load_model("llama-2-7b"), 16, ("q", "k", "v", "o"))
    assert adapters == 32 * 4 * 16 * (4096 + 4096)
    # optimizer: fp32 master + 2 moments = 12 B per adapter parameter, none for the base
    assert lora["memory"]["optimizer_gib"] * 2**30 == pytest.approx(12 * adapters, rel=1e-9)
    assert lora["fits"] and lora["iteration_time_s"] > 0


def test_an_fp8_base_stores_the_frozen_linear_weights_in_one_byte():
    """``training.lora.base_dtype: fp8`` (Transformer Engine ``fp8_model_init``, NeMo
    ``fp8_params``): the frozen block matmul weights take 1 byte instead of 2; embeddings,
    LM head and norms stay bf16, and the adapters' states do not change."""
    from analytical.dtypes import DType
    from analytical.model import load_model
    from analytical.stage import stage_params
    from simulate.scenario import load_scenario
    from simulate.training import spec_memory

    doc = {"name": "x", "model": "llama-2-70b", "hardware": {"gpu": "b200", "num_gpus": 8},
           "training": {"parallel": {"tp": 1, "pp": 1, "dp": 8}, "global_batch": 8,
                        "seq_len": 8192, "precision": "fp8", "recompute": "none",
                        "lora": {"rank": 16, "targets": ["q", "k", "v", "o"]}}}
    model = load_model("llama-2-70b")
    bf16 = load_scenario(doc).training
    doc["training"]["lora"]["base_dtype"] = "fp8"
    fp8 = load_scenario(doc).training
    assert (bf16.lora_base_dtype, fp8.lora_base_dtype) == (DType.BF16, DType.FP8)
    a, b = spec_memory(model, bf16), spec_memory(model, fp8)
    linear = stage_params(model, tp=1, pp=1, vpp=1, ep=1, stage=0).linear
    assert a.weights_bytes - b.weights_bytes == pytest.approx(linear, rel=1e-9)
    assert linear > 0.95 * model.params_total
    assert (a.gradients_bytes, a.optimizer_bytes) == (b.gradients_bytes, b.optimizer_bytes)


def test_a_lora_base_dtype_outside_bf16_and_fp8_is_refused():
    from simulate.scenario import load_scenario

    doc = {"name": "x", "model": "llama-2-7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"parallel": {"tp": 1, "pp": 1, "dp": 8}, "global_batch": 8,
                        "seq_len": 4096, "lora": {"rank": 16, "base_dtype": "fp32"}}}
    with pytest.raises(SpecError, match=r"training\.lora\.base_dtype"):
        load_scenario(doc)


def test_frozen_linears_save_no_input_unless_an_adapter_reads_it():
    """MLPerf llama2_70b_lora (adapters on qkv and proj, fp8): fc1's and fc2's fp8 inputs go;
    adapters on every linear keep every input; none on the attention frees the QKV input too."""
    from analytical.activations import frozen_linear_input_bytes

    m, par = load_model("llama-2-70b"), ParallelConfig()
    kw = dict(micro_batch=1, seq_len=8192)
    attn = frozen_linear_input_bytes(m, par, ("q", "k", "v", "o"), fp8=True, **kw)
    assert attn == pytest.approx(8192 * 1.0 * (8192 + 28672))
    assert frozen_linear_input_bytes(m, par, LORA_TARGETS, **kw) == 0.0
    mlp = frozen_linear_input_bytes(m, par, ("gate", "up"), **kw)
    assert mlp == pytest.approx(8192 * 2.0 * (8192 + 28672))
