# SPDX-License-Identifier: Apache-2.0
"""The torchtitan rows added at stop 41 (corpus README, torchtitan paragraph): the MXFP8 doc's
8x B200 Llama 3 8B table and the 2024 docs/performance.md tables load with their stated
layout, batch, precision, recompute and compile."""

from __future__ import annotations

from simulate.validate import published as pub


def _rows(url_part: str) -> list[dict[str, str]]:
    return [r for r in pub.load_corpus()
            if r["source"] == "torchtitan" and url_part in r["url"] + r["section"]]


def test_b200_dense_table_rows_carry_fsdp8_batch1_selective_compiled():
    """docs/mxfp8.md at b3da1a2d (+ the torchao README's rowwise row): Llama3-8b on 8 B200,
    batch 1, seq 8192, FSDP2, per-op SAC, torch.compile; bf16 and four fp8 scalings."""
    rows = _rows("Dense Models")
    assert sorted(float(r["tokens_per_s_per_gpu"]) for r in rows) == [
        8307.5, 8640.5, 9642.0, 9969.0, 10417.0]
    for r in rows:
        s = pub.row_scenario(r, "r")
        t, par = s["training"], s["training"]["parallel"]
        assert s["model"] == "llama-3-8b"
        assert s["hardware"] == {"gpu": "b200", "num_gpus": 8, "gpus_per_node": 8}
        assert (par["tp"], par["dp"], par["zero"], par["fsdp"]) == (1, 8, 3, True)
        assert (t["global_batch"], t["micro_batch"], t["seq_len"]) == (8, 1, 8192)
        assert (t["recompute"], t["compile"], t["framework"]) == ("selective", True, "torchtitan")
        assert "compile_loss" not in t  # compiled with the model since bbb1b616 (2025-04)
    recipes = {r["section"].split(" (", 1)[1][:-1]: (r["precision"], pub.row_scenario(
        r, "r")["training"]["fp8_recipe"]) for r in rows}
    assert recipes["None (bfloat16)"][0] == "bf16"
    assert recipes["float8 rowwise"] == ("fp8", "rowwise")
    assert recipes["mxfp8_cublas"] == ("fp8", "tensorwise")


def test_2024_performance_page_rows_run_eager_fsdp_on_64_a100_and_2d_on_128_h100():
    """docs/performance.md at 3faaa1a0: Llama 3 / Llama 2 with FSDP2 on 64 A100 80GB (eager, the
    tomls' compile = false) and Llama 3.1 405B FSDP 16 x TP 8 on 128 H100 (compiled)."""
    rows = _rows("3faaa1a0dee68ce028400e3dafd1735d152cb4f8/docs/performance.md")
    a100 = [r for r in rows if r["gpu"] == "a100-sxm-80gb"]
    h100 = [r for r in rows if r["gpu"] == "h100-hbm2e-96gb"]
    assert (len(a100), len(h100)) == (6, 3)
    for r in a100:
        t = pub.row_scenario(r, "r")["training"]
        assert t["parallel"]["dp"] == 64 and t["global_batch"] == 64 * t["micro_batch"]
        assert t["compile"] is False and t["compile_loss"] is False
        assert t["seq_len"] == (8192 if r["model"].startswith("llama-3") else 4096)
    for r in h100:
        t = pub.row_scenario(r, "r")["training"]
        par = t["parallel"]
        assert (par["tp"], par["dp"], par["sp"], t["global_batch"], t["micro_batch"]) == (
            8, 16, True, 32, 2)
        assert t["recompute"] == "full" and t["compile"] is True
    assert {r["section"]: r["tp_comm_overlap"] for r in h100}[
        "Llama 3.1 performance numbers (Float8 + Async TP)"] == "true"
