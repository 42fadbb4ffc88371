# SPDX-License-Identifier: Apache-2.0
"""The torchtitan rows added at stop 41 (corpus README, torchtitan paragraph): the 2024
docs/performance.md tables load with their stated layout, batch, precision, recompute and
compile; the MXFP8 doc's power-capped 8x B200 table is left out."""

from __future__ import annotations

from simulate.validate import published as pub


def _rows(url_part: str) -> list[dict[str, str]]:
    return [r for r in pub.load_corpus()
            if r["source"] == "torchtitan" and url_part in r["url"] + r["section"]]


def test_power_capped_b200_table_is_left_out():
    """docs/mxfp8.md's 8x B200 table ran on B200s capped at 750 W, which no hardware file
    describes (corpus README, torchtitan "Left out"): no torchtitan row runs on b200."""
    assert not [r for r in pub.load_corpus() if r["source"] == "torchtitan" and r["gpu"] == "b200"]


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
