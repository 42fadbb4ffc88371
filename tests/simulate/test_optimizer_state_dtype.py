# SPDX-License-Identifier: Apache-2.0
"""The optimizer-state dtype (apex DistributedFusedAdam ``dtype``, NeMo ``optim.dtype``)."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.model import load_model
from analytical.optimizer_states import model_states_bytes, second_moment_bytes
from simulate.scenario import parse_training
from simulate.training import spec_memory
from simulate.validate import published as pub


def test_bf16_state_keeps_the_copy_and_both_moments_in_two_bytes():
    """apex at f9f19d5c: ``params_shard`` (store_params, default True), ``exp_avg_shard`` and
    ``exp_avg_sq_shard`` are all allocated in ``dtype``: 6 bytes per parameter, not 12."""
    _, _, fp32 = model_states_bytes(1.0, zero_stage=0, shard=1)
    _, _, bf16 = model_states_bytes(1.0, zero_stage=0, shard=1, state_dtype_bytes=2.0)
    assert (fp32, bf16) == (12.0, 6.0)
    _, _, sharded = model_states_bytes(8.0, zero_stage=1, shard=4, state_dtype_bytes=2.0)
    assert sharded == 12.0  # 8 params x 6 bytes over 4 ranks
    assert second_moment_bytes(bf16, optimizer="adam", param_dtype_bytes=2.0,
                               state_dtype_bytes=2.0) == 2.0


def test_optimizer_state_dtype_is_a_training_field():
    block = {"parallel": {"dp": 8}, "global_batch": 8, "seq_len": 4096, "framework": "nemo"}
    assert parse_training(block).optimizer_state_dtype.bytes == 4.0
    assert parse_training({**block, "optimizer_state_dtype": "bf16"}).optimizer_state_dtype.bytes \
        == 2.0
    with pytest.raises(SpecError, match="optimizer_state_dtype"):
        parse_training({**block, "optimizer_state_dtype": "fp8"})


def test_nemo_sft_70b_fits_without_recompute_with_its_recipes_bf16_state():
    """NeMo-Framework-Launcher 24.07 conf/peft/llama/sft.yaml: no activation checkpointing,
    distributed_fused_adam ``dtype: bf16``, ``grad_sync_dtype: bf16``. With fp32 states and
    gradients nothing but full recompute fits an 80 GiB H100."""
    row = next(r for r in pub.load_corpus() if r["source"] == "nemo-24.07"
               and r["model"] == "llama-2-70b" and "SFT" in r["section"])
    assert row["optimizer_state_dtype"] == "bf16" and row["grad_reduce_dtype"] == "bf16"
    scenario = pub.row_scenario(row, "sft-70b")
    block = {**scenario["training"], "recompute": "none"}
    model, capacity = load_model(scenario["model"]), get_hardware(row["gpu"]).memory_bytes
    assert spec_memory(model, parse_training(block)).allocated_bytes < capacity
    fp32 = {k: v for k, v in block.items()
            if k not in ("optimizer_state_dtype", "grad_reduce_dtype")}
    assert spec_memory(model, parse_training(fp32)).allocated_bytes > capacity
