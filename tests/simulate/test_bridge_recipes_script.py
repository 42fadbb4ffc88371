# SPDX-License-Identifier: Apache-2.0
"""`scripts/bridge_recipes.py`: a corpus row matches the preset of its model, GPU, precision and
layout, and a preset's settings read as the corpus columns spell them."""

from __future__ import annotations

import dataclasses

from script_loader import load_script

bridge_recipes = load_script("bridge_recipes")


@dataclasses.dataclass
class _Preset:
    num_gpus: int = 8
    tensor_model_parallel_size: int = 1
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    expert_model_parallel_size: int = 8
    micro_batch_size: int = 1
    global_batch_size: int = 512
    cuda_graph_impl: str | None = "transformer_engine"
    cuda_graph_scope: list[str] | None = dataclasses.field(
        default_factory=lambda: ["moe_router", "moe_preprocess"])
    recompute_modules: list[str] | None = None
    moe_a2a_overlap: bool = False


ROW = {"model": "qwen3-30b-a3b", "gpu": "b200", "num_gpus": "8", "tp": "1", "pp": "1",
       "vpp": "", "ep": "8", "micro_batch": "1", "global_batch": "512",
       "notes": "precision MXFP8 as published; force-balanced routing"}


def test_the_row_matches_its_layout_gpu_and_precision_only():
    presets = {"QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1": _Preset(),
               "QWEN3_30B_A3B_PRETRAIN_CONFIG_B300_FP8_MX_V1": _Preset(),
               "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1": _Preset()}
    name, preset = bridge_recipes.match(ROW, presets)
    assert name == "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1"
    assert bridge_recipes._settings(preset) == ("moe_router+moe_preprocess", "", "")
    assert bridge_recipes.match({**ROW, "micro_batch": "4"}, presets) is None
    assert bridge_recipes.match({**ROW, "gpu": "gb200"}, presets) is None


def test_full_iteration_and_overlap_read_as_the_corpus_columns():
    preset = _Preset(cuda_graph_impl="full_iteration", cuda_graph_scope=[],
                     recompute_modules=["mla_up_proj"], moe_a2a_overlap=True)
    assert bridge_recipes._settings(preset) == ("full_iteration", "mla_up_proj", "true")
    assert bridge_recipes._settings(_Preset(cuda_graph_impl=None))[0] == ""
