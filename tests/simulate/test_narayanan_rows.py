# SPDX-License-Identifier: Apache-2.0
"""The `narayanan-2021` rows (corpus README): Megatron-LM's A100 weak-scaling table (Narayanan
et al. 2021, Table 1, as the README at 2d767f48 prints it) with the layouts of the SC21 script
examples/sc21/run_table_1.sh at 6985e589, and the README's GPT-3 175B example; their TFLOP/s
count the full-recompute forward pass (eq. 3), which `source_flops_per_token` follows."""

from __future__ import annotations

import pytest

from analytical.errors import SpecError
from analytical.model import load_model
from simulate.validate import corpus_row
from simulate.validate import published as pub

# run_table_1.sh: model, GPUs (NNODES x 8), TP, PP, MBS, GBS, vpp (layers / PP / the
# --num-layers-per-virtual-pipeline-stage), README parameters (billion) and TFLOP/s per GPU.
TABLE_1 = [
    ("megatron-sc21-1.7b", 32, 1, 1, 16, 512, 1, 1.7, 137),
    ("megatron-sc21-3.6b", 64, 2, 1, 16, 512, 1, 3.6, 138),
    ("megatron-sc21-7.5b", 128, 4, 1, 16, 512, 1, 7.5, 142),
    ("megatron-sc21-18b", 256, 8, 1, 8, 1024, 1, 18.4, 135),
    ("megatron-sc21-39b", 512, 8, 2, 4, 1536, 1, 39.1, 138),
    ("megatron-sc21-76b", 1024, 8, 4, 2, 1792, 60 // 4 // 5, 76.1, 140),
    ("megatron-sc21-145b", 1536, 8, 8, 2, 2304, 80 // 8 // 5, 145.6, 148),
    ("megatron-sc21-310b", 1920, 8, 16, 1, 2160, 96 // 16 // 3, 310.1, 155),
    ("megatron-gpt-530b", 2520, 8, 35, 1, 2520, 105 // 35 // 1, 529.6, 163),
    ("megatron-gpt-1t", 3072, 8, 64, 1, 3072, 1, 1008.0, 163),
]


def _rows() -> list[dict[str, str]]:
    return [r for r in pub.load_corpus() if r["source"] == "narayanan-2021"]


def test_table_1_rows_load_with_the_sc21_script_layouts():
    rows = [r for r in _rows() if "run_table_1.sh" in r["section"]]
    assert len(rows) == len(TABLE_1)
    for r, (model, gpus, tp, pp, mbs, gbs, vpp, _, tflops) in zip(rows, TABLE_1, strict=True):
        scenario = pub.row_scenario(r, "r")
        t, par = scenario["training"], scenario["training"]["parallel"]
        assert scenario["model"] == model and scenario["hardware"] == {
            "gpu": "a100-sxm-80gb", "num_gpus": gpus, "gpus_per_node": 8}
        assert (par["tp"], par["pp"], par["dp"] * tp * pp, par["vpp"]) == (tp, pp, gpus, vpp)
        assert par["sp"] is False and par["zero"] == 0
        assert t["schedule"] == ("interleaved" if vpp > 1 else "1f1b")
        assert (t["micro_batch"], t["global_batch"], t["seq_len"]) == (mbs, gbs, 2048)
        assert (t["precision"], t["recompute"], t["attention"]) == ("fp16", "full", "unfused")
        assert float(r["tflops_per_gpu"]) == tflops and not r["mfu"]


def test_table_1_models_have_the_readme_parameter_counts():
    """The README table's 'Number of parameters (billion)' to its one decimal."""
    for model, *_, billions, _ in TABLE_1:
        spec = load_model(model)
        assert round(spec.params_total / 1e9, 1) == billions, model
        assert (spec.vocab, spec.max_seq_len) == (51200, 2048)


def test_gpt3_example_row_matches_its_step_time_with_the_recompute_count():
    """'each iteration takes around 32 seconds resulting in 138 teraFLOPs per GPU' (1,536
    sequences of 2,048 tokens on 1,024 GPUs): eq. 3's count, recompute pass included, gives it."""
    (row,) = [r for r in _rows() if "GPT-3 Example" in r["section"]]
    par = pub.row_scenario(row, "r")["training"]["parallel"]
    assert (par["tp"], par["pp"], par["dp"], par["vpp"]) == (8, 16, 8, 1)
    flops = pub.source_flops_per_token(row) * 1536 * 2048
    assert abs(flops / (1024 * float(row["step_time_s"])) / 1e12 / 138 - 1) < 0.01


def test_recompute_count_adds_one_forward_of_the_layers_only():
    """Eq. 3: 96Bslh^2(1 + s/6h + V/16lh) per iteration, i.e. per token 96lh^2 + 16lsh + 6hV:
    four passes of the layers and their s^2 scores, three of the logits. Without the column the
    count is llmsim's model FLOPs (72lh^2 + 12lsh + 6hV)."""
    row = {"model": "megatron-gpt-1t", "seq_len": "2048", "attention_flops": "full",
           "flops_recompute": "true"}
    spec = load_model("megatron-gpt-1t")
    n, h, s, v = spec.layers, spec.hidden, 2048, spec.vocab
    assert abs(pub.source_flops_per_token(row) / (96 * n * h * h + 16 * n * s * h + 6 * h * v)
               - 1) < 1e-3
    model_flops = pub.source_flops_per_token({**row, "flops_recompute": ""})
    assert abs(model_flops / (72 * n * h * h + 12 * n * s * h + 6 * h * v) - 1) < 1e-3


def test_local_ddp_rows_reduce_gradients_after_the_backward():
    """Megatron-LM at 6985e589 (megatron/training.py `train_step`): with --DDP-impl local the
    gradients are all-reduced after the whole forward-backward (`allreduce_gradients`), so those
    rows set `dp_grad_overlap: false`; the torch-DDP rows overlap in PyTorch DDP's default 25 MB
    buckets. An unset cell keeps the overlap."""
    for r in _rows():
        t = pub.row_scenario(r, "r")["training"]
        local = "--DDP-impl torch" not in r["notes"]
        assert t["overlap"]["dp_grad"] is not local
        assert t.get("dp_bucket_mb") == (None if local else 25.0)
    other = next(r for r in pub.load_corpus() if r["source"] == "korthikanti-2022")
    assert pub.row_scenario(other, "r")["training"]["overlap"]["dp_grad"] is True


def test_a_yes_no_cell_that_is_neither_is_refused_naming_its_column():
    """A typo in a boolean column (here `flops_recompute: ture`) must not read as false: the
    scorer would silently drop the recompute forward from the row's FLOP count."""
    row = {"model": "megatron-gpt-1t", "seq_len": "2048", "flops_recompute": "ture"}
    with pytest.raises(SpecError, match="corpus.flops_recompute"):
        pub.source_flops_per_token(row)
    with pytest.raises(SpecError, match="corpus.sp"):
        corpus_row._bool({"sp": "maybe"}, "sp")
    assert corpus_row._bool({"sp": "No"}, "sp") is False
    assert corpus_row._bool({}, "dp_grad_overlap") is True  # empty: the column's default
