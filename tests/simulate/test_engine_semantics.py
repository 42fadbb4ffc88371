# SPDX-License-Identifier: Apache-2.0
"""Engine semantics the corpus rows carry beyond batch sizes: what KV dtype "auto" picks."""

from __future__ import annotations

import dataclasses

from simulate.validate.serving_corpus import load_corpus, row_scenario


def test_auto_kv_dtype_follows_the_checkpoint_declaration_else_the_activations() -> None:
    # vLLM resolve_kv_cache_dtype_string and TensorRT-LLM ModelLoader._update_from_hf_quant_config
    # take "auto" from hf_quant_config.json kv_cache_quant_algo; without one, the activation
    # dtype (bf16) even for fp8 weights (--quantization fp8, or a linear-only ModelOpt export).
    rows = load_corpus()
    nim = next(r for r in rows if r.source == "nim-benchmarking")
    assert nim.weight_dtype == "fp8" and not nim.checkpoint_kv_dtype
    assert row_scenario(nim)["inference"]["kv_cache_dtype"] == "bf16"
    declared = dataclasses.replace(nim, checkpoint_kv_dtype="fp8")
    assert row_scenario(declared)["inference"]["kv_cache_dtype"] == "fp8"
    forced = dataclasses.replace(declared, kv_dtype="bf16")  # --kv-cache-dtype wins
    assert row_scenario(forced)["inference"]["kv_cache_dtype"] == "bf16"
