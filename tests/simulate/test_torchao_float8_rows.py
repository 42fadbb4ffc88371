# SPDX-License-Identifier: Apache-2.0
"""The `torchao-float8` rows (corpus README): pytorch/ao's torchao/float8/README.md at 853f87d1
publishes torchtitan Llama 3 8B runs on 8x MI300X (FSDP2 over 8, local batch 1, seq 8192,
compile, per-op SAC) in bf16 and float8 tensorwise / rowwise; they load with that layout."""

from __future__ import annotations

from simulate.validate import published as pub


def _rows() -> list[dict[str, str]]:
    return [r for r in pub.load_corpus() if r["source"] == "torchao-float8"]


def test_mi300x_rows_load_with_their_stated_layout():
    rows = _rows()
    assert len(rows) == 3
    for r in rows:
        assert r["gpu"] == "mi300x" and r["framework"] == "torchtitan"
        t = pub.row_scenario(r, "r")["training"]
        par = t["parallel"]
        assert (par["dp"], par["tp"], par["pp"], par["cp"]) == (8, 1, 1, 1)
        assert (t["global_batch"], t["micro_batch"], t["seq_len"]) == (8, 1, 8192)
        assert t["recompute"] == "selective" and t["compile"] is True
    recipes = {(r["precision"], pub.row_scenario(r, "r")["training"]["fp8_recipe"]) for r in rows
               if r["precision"] == "fp8"}
    assert recipes == {("fp8", "tensorwise"), ("fp8", "rowwise")}
    assert {float(r["tokens_per_s_per_gpu"]) for r in rows} == {5376.5, 6166.0, 5891.0}


def test_rows_not_from_the_torchtitan_repository_keep_their_own_source():
    """Leave-one-source-out holds out a repository's measurements together: the pytorch/ao rows
    are not in source `torchtitan`, and no torchtitan row runs on an AMD GPU."""
    assert all("github.com/pytorch/ao/" in r["url"] for r in _rows())
    titan = [r for r in pub.load_corpus() if r["source"] == "torchtitan"]
    assert titan and all("github.com/pytorch/torchtitan/" in r["url"] for r in titan)
