# SPDX-License-Identifier: Apache-2.0
"""LoRA rows of the training corpus: ``lora_rank`` / ``lora_targets`` become ``training.lora``
(NeMo 24.07, Megatron-Bridge 26.06 and MLPerf Training ``llama2_70b_lora`` publish LoRA runs)."""

from __future__ import annotations

import pytest

from analytical.dtypes import DType
from analytical.errors import SpecError
from simulate.scenario import load_scenario
from simulate.validate import published as pub


def _corpus_row(source: str, model: str, lora: bool) -> dict[str, str]:
    return next(r for r in pub.load_corpus() if r["source"] == source and r["model"] == model
                and bool(r.get("lora_rank")) == lora)


def test_a_lora_row_maps_to_its_rank_and_targets():
    """NeMo 24.07 Llama-2-7B LoRA: adapter_dim 32 on NeMo's default fused QKV adapter."""
    row = _corpus_row("nemo-24.07", "llama-2-7b", lora=True)
    training = load_scenario(pub.row_scenario(row, "x")).training
    assert training is not None
    assert (training.lora_rank, training.lora_targets) == (32, ("q", "k", "v"))


def test_mlperf_lora_rows_train_rank_16_on_attention():
    """MLPerf llama2_70b_lora: rank 16 on linear_qkv and linear_proj (the output projection)."""
    rows = [r for r in pub.load_corpus() if r["source"] == "mlperf-training" and r.get("lora_rank")]
    assert len(rows) == 20
    training = load_scenario(pub.row_scenario(rows[0], "x")).training
    assert training is not None
    assert (training.lora_rank, training.lora_targets) == (16, ("q", "k", "v", "o"))


def test_a_row_without_lora_trains_every_weight():
    row = _corpus_row("nemo-24.07", "llama-2-7b", lora=False)
    assert "lora" not in pub.row_scenario(row, "x")["training"]
    training = load_scenario(pub.row_scenario(row, "x")).training
    assert training is not None and training.lora_rank == 0


def test_the_lora_rows_load():
    """3 NeMo 24.07 + 3 Megatron-Bridge 26.06 + 20 MLPerf rows, each a valid scenario."""
    rows = [r for r in pub.load_corpus() if r.get("lora_rank")]
    assert {s: sum(r["source"] == s for r in rows) for s in {r["source"] for r in rows}} == {
        "nemo-24.07": 3, "megatron-bridge-dense": 3, "mlperf-training": 20}
    for i, row in enumerate(rows):
        training = load_scenario(pub.row_scenario(row, f"r{i}")).training
        assert training is not None and training.lora_rank > 0


@pytest.mark.parametrize(("cells", "column"), [
    ({"lora_rank": "sixteen", "lora_targets": "qkv"}, r"corpus\.lora_rank.*sixteen"),
    ({"lora_rank": "0", "lora_targets": "qkv"}, r"corpus\.lora_rank.*positive"),
    ({"lora_rank": "16", "lora_targets": ""}, r"corpus\.lora_targets.*empty"),
    ({"lora_rank": "16", "lora_targets": "q+attn"}, r"corpus\.lora_targets.*attn"),
    ({"lora_rank": "", "lora_targets": "qkv"}, r"corpus\.lora_rank.*empty"),
])
def test_a_bad_lora_cell_is_refused_naming_its_column(cells, column):
    row = {**_corpus_row("nemo-24.07", "llama-2-7b", lora=True), **cells}
    with pytest.raises(SpecError, match=column):
        pub.row_scenario(row, "bad")


def test_lora_base_dtype_reaches_the_scenario():
    """MLPerf llama2_70b_lora builds the model under TE ``fp8_model_init``: ``lora_base_dtype``
    fp8 becomes ``training.lora.base_dtype``; empty keeps the bf16 base."""
    rows = [r for r in pub.load_corpus() if r["source"] == "mlperf-training" and r.get("lora_rank")]
    assert {r["lora_base_dtype"] for r in rows} == {"fp8"}
    training = load_scenario(pub.row_scenario(rows[0], "x")).training
    assert training is not None and training.lora_base_dtype == DType.FP8
    bridge = _corpus_row("megatron-bridge-dense", "llama-3-70b", lora=True)
    assert "base_dtype" not in pub.row_scenario(bridge, "x")["training"]["lora"]
    with pytest.raises(SpecError, match=r"base_dtype"):
        load_scenario(pub.row_scenario({**bridge, "lora_base_dtype": "int4"}, "x"))
