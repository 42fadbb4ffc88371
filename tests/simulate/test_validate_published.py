# SPDX-License-Identifier: Apache-2.0
"""``llmsim validate published``: the corpus, the scorer registry, the README writer, and that a
row's prediction is the one ``simulate --json`` prints for the same scenario."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.validate import published as pub

ROW = {"source": "src-a", "url": "https://example.org/a", "section": "Table 1", "version": "v1",
       "model": "llama-3-8b", "gpu": "h100-sxm", "num_gpus": "8", "gpus_per_node": "8",
       "tp": "1", "pp": "1", "dp": "8", "cp": "", "ep": "", "vpp": "", "sp": "", "zero": "3",
       "fsdp": "true", "global_batch": "16", "micro_batch": "2", "seq_len": "4096",
       "precision": "bf16", "recompute": "selective", "schedule": "", "attention": "",
       "framework": "torchtitan", "framework_version": "", "step_time_s": "",
       "tokens_per_s_per_gpu": "6000", "tflops_per_gpu": "", "mfu": "", "mfu_peak_tflops": "",
       "peak_memory_gib": "50", "notes": ""}


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    monkeypatch.setenv("LLMSIM_DB", str(tmp_path / "none.duckdb"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")


def _corpus(tmp_path: Path) -> Path:
    rows = [
        ROW,
        # Megatron GPT-3 175B: only TFLOP/s and MFU published (tokens/s derived), bf16 peak 312.
        {**ROW, "source": "src-b", "model": "gpt3-175b", "gpu": "a100-sxm-80gb",
         "num_gpus": "64", "tp": "8", "pp": "8", "dp": "1", "sp": "true", "zero": "0",
         "fsdp": "", "global_batch": "64", "micro_batch": "1", "seq_len": "2048",
         "recompute": "selective", "attention": "unfused", "framework": "megatron",
         "tokens_per_s_per_gpu": "", "tflops_per_gpu": "160", "mfu": "0.514",
         "mfu_peak_tflops": "312", "peak_memory_gib": ""},
        # Llama-3-8B, distributed optimizer over 8 GPUs at 8k, recompute unstated: only full
        # recompute fits (6 + 12/8 bytes per parameter leave no room for 32 stored layers).
        {**ROW, "source": "src-b", "model": "llama-3-8b", "zero": "1", "fsdp": "",
         "global_batch": "8", "micro_batch": "1", "seq_len": "8192", "recompute": "",
         "framework": "megatron", "peak_memory_gib": ""},
        # 70B with DDP on 8 GPUs cannot fit: a false OOM verdict.
        {**ROW, "source": "src-a", "model": "llama-3-70b", "zero": "0", "fsdp": "false",
         "recompute": "full", "peak_memory_gib": ""},
    ]
    path = tmp_path / "corpus.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, list(ROW))
        writer.writeheader()
        writer.writerows(rows)
    return path


def _runner():
    return pub.simulate_runner(use_store=False, use_predictors=False)


def test_shipped_corpus_has_sources_and_loadable_rows():
    rows = pub.load_corpus()
    assert len(rows) >= 60
    assert len({r["source"] for r in rows}) >= 4
    for r in rows:
        assert r["url"].startswith("https://") and r["section"] and r["version"]
        assert r["tokens_per_s_per_gpu"] or r["tflops_per_gpu"] or r["mfu"]
    for name in {r["model"] for r in rows}:
        load_model(name)
    for gpu in {r["gpu"] for r in rows}:
        get_hardware(gpu)


def test_registry_and_scores(tmp_path):
    assert set(pub.SCORERS) == set(pub.CORPORA) == {"training"}
    outcomes = pub.SCORERS["training"](pub.load_corpus(_corpus(tmp_path)), _runner())
    first, derived, unstated, oom = outcomes
    assert first.fits and first.predicted_tps > 0 and first.tps_error is not None
    assert first.mem_error is not None and first.assumed_recompute is None
    assert derived.tps_derived and derived.measured_mfu == 0.514  # 312 = A100 bf16 peak
    assert derived.predicted_mfu is not None and 0 < derived.predicted_mfu < 1
    assert unstated.fits and unstated.assumed_recompute == "full"
    assert oom.fits is False and oom.predicted_tps is None
    summary = {r["source"]: r for r in pub.summarize(outcomes)}
    assert summary["src-a"]["n"] == 2 and summary["src-a"]["false_oom"] == 1
    assert summary["src-a"]["n_tps"] == 1 and summary["src-b"]["n_mfu"] == 1
    assert summary["overall"]["n"] == 4 and summary["overall"]["false_oom"] == 1
    expected = abs(first.tps_error) * 100
    assert summary["src-a"]["tps_mape_pct"] == pytest.approx(expected)
    per_source = [summary[s]["tps_mape_pct"] for s in ("src-a", "src-b")]
    assert summary["mean of sources"]["tps_mape_pct"] == pytest.approx(sum(per_source) / 2)


def test_a_row_keeps_its_corpus_name_in_a_subset(tmp_path):
    """`--sources` scores a subset: each row is still named by its index in the file, so a
    per-row CSV of a subset joins the corpus the same way as one of the whole corpus."""
    rows = pub.load_corpus(_corpus(tmp_path))
    subset = [r for r in rows if r["source"] == "src-b"]
    names = [o.name for o in pub.score_training(subset, _runner())]
    assert names == ["src-b-1", "src-b-2"]
    assert [o.name for o in pub.score_training(rows[:1], _runner())] == ["src-a-0"]


def test_mfu_not_compared_when_the_peak_differs(tmp_path):
    row = {**ROW, "mfu": "0.4", "mfu_peak_tflops": "1979"}  # an fp8 peak on a bf16 run
    outcome = pub.score_row(row, 0, _runner())
    assert outcome.measured_mfu is None and outcome.mfu_error is None


def test_row_prediction_equals_simulate_json(tmp_path):
    from simulate.cli.simulate_cmd import command

    outcome = pub.score_row(ROW, 0, _runner())
    path = tmp_path / "row.yaml"
    path.write_text(yaml.safe_dump(pub.row_scenario(ROW, "src-a-0")))
    out = CliRunner().invoke(command, [str(path), "--json", "--no-store", "--no-predictors"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["tokens_per_s_per_gpu"] == pytest.approx(outcome.predicted_tps, rel=1e-12)
    assert data["memory_per_gpu_gib"] == pytest.approx(outcome.predicted_mem_gib, rel=1e-12)


def test_write_readme_replaces_between_markers(tmp_path):
    path = tmp_path / "README.md"
    path.write_text("# Title\n\nintro\n")
    pub.write_readme(path, "table one")
    pub.write_readme(path, "table two")
    text = path.read_text()
    assert text.startswith("# Title\n\nintro\n")
    assert text.count(pub.README_START) == 1 and "table two" in text and "table one" not in text
    path.write_text(text + "\n## After\n")
    pub.write_readme(path, "table three")
    assert path.read_text().endswith("## After\n") and "table three" in path.read_text()


def test_cli_published_writes_the_table(tmp_path):
    from simulate.cli.validate_cmd import group

    readme = tmp_path / "README.md"
    out = CliRunner().invoke(group, ["published", "--corpus", str(_corpus(tmp_path)),
                                     "--no-store", "--no-predictors", "--write-readme",
                                     str(readme), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert [r["source"] for r in data["summary"]] == ["src-a", "src-b", "overall",
                                                      "mean of sources"]
    assert "leave-one-source-out" in data["calibration"]
    text = readme.read_text()
    assert "| src-a | 2 |" in text and "--no-store --no-predictors" in text
    assert "tok/s/GPU MAPE %" in text and "false OOM" in text


def test_unstated_micro_batch_follows_the_framework():
    """torchtitan splits each DP rank's batch into pp micro-batches; others default to 1."""
    row = {**ROW, "model": "llama-3-70b", "tp": "8", "pp": "4", "dp": "2", "num_gpus": "64",
           "global_batch": "32", "micro_batch": "", "sp": "true"}
    assert pub.row_scenario(row, "x")["training"]["micro_batch"] == 4  # 32 / 2 / 4
    megatron = {**row, "framework": "megatron"}
    assert pub.row_scenario(megatron, "x")["training"]["micro_batch"] == 1
    stated = {**row, "micro_batch": "2"}
    assert pub.row_scenario(stated, "x")["training"]["micro_batch"] == 2


def test_full_attention_flops_convention_lowers_derived_tokens():
    """A source whose TFLOP/s counts every s^2 score (Megatron, NeMo before 2025-08) derives
    fewer tokens/s from the same TFLOP/s than a causal count; the gap grows with seq_len."""
    row = {**ROW, "tokens_per_s_per_gpu": "", "tflops_per_gpu": "400", "seq_len": "65536"}
    causal, derived = pub._measured_tps(row)
    full, _ = pub._measured_tps({**row, "attention_flops": "full"})
    assert derived and causal and full
    assert full < 0.8 * causal


def test_unstated_loss_fusion_follows_megatron_bridge_and_a_stated_value_wins():
    bridge = {**ROW, "framework": "megatron", "framework_version": "Megatron-Bridge, NeMo 25.11"}
    assert pub.row_scenario(bridge, "x")["training"]["cross_entropy_fusion"] is True
    stated = {**bridge, "cross_entropy_fusion": "false"}
    assert pub.row_scenario(stated, "x")["training"]["cross_entropy_fusion"] is False
    plain = {**ROW, "framework": "megatron", "framework_version": "Megatron-Core r0.8.0"}
    assert "cross_entropy_fusion" not in pub.row_scenario(plain, "x")["training"]


def test_megatron_bridge_rows_fuse_the_router_and_other_rows_keep_megatron_core_default():
    bridge = {**ROW, "framework": "megatron", "framework_version": "Megatron-Bridge, NeMo 26.02"}
    assert pub.row_scenario(bridge, "x")["training"]["moe_router_fusion"] is True
    plain = {**ROW, "framework": "megatron", "framework_version": "Megatron-Core r0.8.0"}
    assert "moe_router_fusion" not in pub.row_scenario(plain, "x")["training"]
    # a stated --moe-router-fusion (the Megatron-LM DeepSeek-V3 GB200 launch script) wins
    assert pub.row_scenario({**plain, "moe_router_fusion": "true"}, "x")["training"][
        "moe_router_fusion"] is True
    assert pub.row_scenario({**bridge, "moe_router_fusion": "false"}, "x")["training"][
        "moe_router_fusion"] is False


def test_nemo_sft_rows_carry_the_launcher_layout():
    """NeMo 24.07's SFT table gives no VP; NeMo-Framework-Launcher tag 24.07
    examples/peft/llama/h100/13b_1node.sh and 70b_2node.sh (the table's GPUs, GBS, MBS, TP/PP
    and packed length) set VP 10 / 20 and, on the 70B, TP communication overlap."""
    sft = {r["model"]: r for r in pub.load_corpus()
           if r["source"] == "nemo-24.07" and "SFT" in r["section"]}
    assert sft["llama-2-13b"]["vpp"] == "10" and sft["llama-2-70b"]["vpp"] == "20"
    assert sft["llama-2-70b"]["tp_comm_overlap"] == "true"
    assert sft["llama-2-7b"]["vpp"] == "" and sft["llama-2-13b"]["tp_comm_overlap"] == ""


def test_nemo_llama2_70b_pretraining_row_overlaps_tp_communication():
    """NeMo-Framework-Launcher tag 24.07 conf/training/llama/llama2_70b.yaml
    (ub_tp_comm_overlap: true), run by examples/training/llama/h100/llama2_70b_fp8.sh at the
    table's 8 nodes and GBS 128."""
    row = next(r for r in pub.load_corpus() if r["source"] == "nemo-24.07"
               and r["model"] == "llama-2-70b" and "Pretraining" in r["section"])
    assert row["tp_comm_overlap"] == "true" and row["vpp"] == "20"


def test_nemo_long_seq_h100_rows_load_with_their_cp_layout():
    """NeMo's long-sequence page (docs/source/performance/performance_long_sequence.md, 2024-10
    to 2025-05) LLAMA2-7B (FP8) DGX-H100 table: the with-CP column's TP/PP/DP/CP as stated, the
    GBS of its Batch Size column, TFLOP/s counted over the full s^2 scores; the scenario carries
    the layout (1M tokens: TP 8, DP 4, CP 32 on 1024 GPUs)."""
    rows = [r for r in pub.load_corpus()
            if r["source"] == "nemo-long-seq" and r["gpu"] == "h100-sxm"]
    assert [int(r["seq_len"]) // 1024 for r in rows] == [4, 8, 16, 32, 64, 128, 256, 512, 1024]
    for r in rows:
        dims = int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"])
        assert dims == int(r["num_gpus"]) == int(r["seq_len"]) // 1024
        assert int(r["global_batch"]) * int(r["seq_len"]) == 1024 * 4096  # 4M tokens a step
        assert r["attention_flops"] == "full" and r["sp"] == str(int(r["tp"]) > 1).lower()
        assert r["attention"] == "flash2"  # launcher 24.03.01 conf/config.yaml NVTE_FUSED_ATTN: 0
    training = pub.row_scenario(rows[-1], "x")["training"]
    parallel = training["parallel"]
    assert (parallel["tp"], parallel["pp"], parallel["dp"], parallel["cp"]) == (8, 1, 4, 32)
    assert parallel["sp"] is True and parallel["zero"] == 1
    assert (training["seq_len"], training["global_batch"]) == (1048576, 4)


def test_nemo_24_07_rows_run_flash_attention_2():
    """NeMo-Framework-Launcher tag 24.07 (8325688d) conf/config.yaml ``NVTE_FUSED_ATTN: 0`` for
    every job (pretraining, SFT and the LoRA `*_1node_lora.sh` runs alike); no example of the tag
    overrides it (the 175B one's override came at 24.09)."""
    rows = [r for r in pub.load_corpus() if r["source"] == "nemo-24.07"]
    assert len(rows) == 18 and {r["attention"] for r in rows} == {"flash2"}


def test_megatron_bridge_dense_rows_carry_their_release_recipes():
    """Megatron-Bridge's dense Llama tables, 25.11 and the archive's 25.09 and 26.02-26.06
    (corpus README): layouts as published, the recipes' TP overlap (TP > 1), 405B pipeline split, bf16
    gradient reduction, and the 70B Megatron-FSDP GB200/GB300 presets' activation offload
    (40 / 20); the 256-GPU GB rows leave their placement to the scorer (64 per NVL72 rack)."""
    rows = [r for r in pub.load_corpus() if r["source"] == "megatron-bridge-dense"]
    versions = {r["framework_version"].split("NeMo ")[-1] for r in rows}
    assert versions == {"25.09", "25.11", "26.02", "26.02.01", "26.04", "26.04.01", "26.06"}
    for r in rows:
        dims = int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"] or 1)
        assert dims == int(r["num_gpus"])
        # the LoRA rows' llama3_70b_peft_config turns the fused loss off (v0.5.0 recipes)
        fused = "false" if r.get("lora_rank") else "true"
        assert r["grad_reduce_dtype"] == "bf16" and r["cross_entropy_fusion"] == fused
        if r["model"] == "llama-3-405b":
            assert r["pipeline_split"] == "embedding-loss"
        if int(r["tp"]) > 1 and r["model"] != "llama-3-8b":
            assert r["tp_comm_overlap"] == "true" and r["sp"] == "true"
        if r["fsdp"] == "true" and r["model"] == "llama-3-70b":
            assert r["activation_offload_layers"] == {"gb200": "40", "gb300": "20"}[r["gpu"]]
    # 25.09 (stop 42): v0.1.0rc3 perf_matrix fp8_cs; the 405B GB200 Megatron-FSDP preset
    # offloads 95 layers' activations
    r2509 = {(r["gpu"], r["model"]): r for r in rows if r["framework_version"].endswith("25.09")}
    assert len(r2509) == 8 and r2509[("gb200", "llama-3-405b")]["activation_offload_layers"] == "95"
    assert r2509[("h100-sxm", "llama-3-8b")]["fsdp"] == "true"
    sft = [r for r in rows if "SFT" in r["section"]]
    assert {r["gpu"] for r in sft} == {"gb200", "gb300", "h100-sxm"}
    assert {r["seq_len"] for r in sft} == {"4096"}
    wide = [r for r in rows if r["num_gpus"] == "256"]
    assert wide and all(r["gpus_per_node"] == "" for r in wide)
    assert {pub.row_scenario(r, "r")["hardware"]["gpus_per_node"] for r in wide} == {64}
def test_transformer_engine_follows_the_framework_version():
    """The corpus's Megatron-Core r0.8.0 runs (README, 2024-07) predate TE 2.0, so they run TE
    1.x's TP-overlap defaults; an unlisted framework version keeps the spec's default."""
    row = {**ROW, "framework": "megatron", "framework_version": "Megatron-Core r0.8.0"}
    assert pub.row_scenario(row, "x")["training"]["transformer_engine"] == "1"
    nemo = {**row, "framework": "nemo", "framework_version": "NeMo 24.07"}
    assert pub.row_scenario(nemo, "x")["training"]["transformer_engine"] == "1.8"
    assert "transformer_engine" not in pub.row_scenario(ROW, "x")["training"]
def test_a_stated_gradient_bucket_reaches_the_scenario():
    """``dp_bucket_mb``: the run's DDP gradient bucket (MLPerf NeMo GPT-3: apex
    DistributedFusedAdam ``bucket_cap_mb`` 100 / 125 / 200); empty keeps the scenario default."""
    assert pub.row_scenario({**ROW, "dp_bucket_mb": "200"}, "x")["training"]["dp_bucket_mb"] == 200.0
    assert "dp_bucket_mb" not in pub.row_scenario(ROW, "x")["training"]


def test_mlperf_rows_carry_their_logged_batch_and_stated_bucket():
    """MLPerf Training v4.0 NVIDIA GPT-3 175B on 10,752 H100 (config_DGXH100_1344x8x6x4x6_mbs1_cg.sh:
    TP 4, PP 6, VP 8, BUCKET_CAP_MB=200 in config_common.sh; the log's global_batch_size 2688)."""
    row = next(r for r in pub.load_corpus() if r["source"] == "mlperf-training"
               and r["num_gpus"] == "10752" and "v4.0" in r["version"])
    assert (row["tp"], row["pp"], row["vpp"], row["dp"]) == ("4", "6", "8", "448")
    assert row["global_batch"] == "2688" and row["dp_bucket_mb"] == "200"
    assert pub.row_scenario(row, "x")["training"]["dp_bucket_mb"] == 200.0


def test_a_cell_that_does_not_parse_names_its_column():
    row = dict(pub.load_corpus()[0])
    row["dp_bucket_mb"] = "forty"
    with pytest.raises(SpecError, match=r"corpus\.dp_bucket_mb.*forty"):
        pub.row_scenario(row, "bad")
    row = dict(pub.load_corpus()[0], global_batch="")
    with pytest.raises(SpecError, match=r"corpus\.global_batch.*empty"):
        pub.row_scenario(row, "bad")


def test_kimi_k2_rows_carry_their_gb300_preset():
    """The archive's four Kimi_K2 rows (26.02.01-26.06, corpus README): GB300, 256 GPUs, MXFP8,
    PP 4 / VP 4 / EP 64, MBS 2, and `KIMI_K2_PRETRAIN_CONFIG_GB300_FP8_MX` (identical in v0.3.1-
    v0.5.0): selective mla_up_proj recompute, no CUDA graph, no EP overlap, bf16 reduction."""
    rows = [r for r in pub.load_corpus() if r["model"] == "kimi-k2"]
    assert sorted(r["framework_version"].split("NeMo ")[-1] for r in rows) == [
        "26.02.01", "26.04", "26.04.01", "26.06"]
    for r in rows:
        assert r["source"] == "megatron-bridge" and r["gpu"] == "gb300"
        scenario = pub.row_scenario(r, "k")
        t = scenario["training"]
        assert (t["parallel"]["pp"], t["parallel"]["vpp"], t["parallel"]["ep"], t["parallel"]["dp"],
                t["micro_batch"], t["global_batch"]) == (4, 4, 64, 64, 2, 4096)
        assert t["recompute"] == "selective" and t["recompute_modules"] == ["mla_up_proj"]
        assert t["grad_reduce_dtype"] == "bf16" and t["moe_router_fusion"] is True
        assert "cuda_graph" not in t and t["overlap"]["moe_a2a"] is False
        assert scenario["hardware"]["gpus_per_node"] == 64
def test_megatron_lm_strong_scaling_rows_keep_the_177b_layout():
    """README 'Strong Scaling Results' (d98e8a64): GPT-3 175B, 1,152 sequences, 96 to 4,608 H100;
    the layout is the model table's 177B row (tp 8, pp 6) with dp = GPUs / 48. The 2304-GPU
    point is that table row itself, so it is not repeated."""
    rows = [r for r in pub.load_corpus() if r["source"] == "megatron-lm-readme"
            and r["url"].endswith("strong_scaling.png")]
    assert sorted(int(r["num_gpus"]) for r in rows) == [96, 144, 288, 576, 1152, 3072, 4608]
    for r in rows:
        par = pub.row_scenario(r, "r")["training"]["parallel"]
        assert (par["tp"], par["pp"], par["dp"] * 48) == (8, 6, int(r["num_gpus"]))
        assert (r["model"], r["global_batch"], r["seq_len"]) == ("megatron-gpt-177b", "1152", "4096")
    assert {r["num_gpus"]: r["mfu"] for r in rows if r["mfu"]} == {"96": "0.47", "4608": "0.42"}


def test_megatron_lm_deepseek_v3_gb200_row_carries_its_launch_script():
    """docs/discussions/deepseek-v3-gb200-optimization at eb0783b6: 970.01 TFLOPS/GPU on 256
    GB200, TP1/PP8/VPP4/EP32, layout "Et|(tt|)*30L" (the embedding and one layer, 30 chunks of
    two, the loss alone), 32-GPU NVLink segments, the launch script's recompute, CUDA graph and
    fusion flags."""
    from analytical.parallel import PipelineSplit
    from simulate.layout import chunk_layers

    (row,) = [r for r in pub.load_corpus() if r["source"] == "megatron-lm-docs"]
    scenario = pub.row_scenario(row, "r")
    training, par = scenario["training"], scenario["training"]["parallel"]
    assert (par["tp"], par["pp"], par["vpp"], par["ep"], par["etp"], par["dp"]) == (1, 8, 4, 32, 1, 32)
    assert scenario["hardware"] == {"gpu": "gb200", "num_gpus": 256, "gpus_per_node": 32}
    assert (training["global_batch"], training["micro_batch"], training["seq_len"]) == (2048, 1, 4096)
    assert training["recompute_modules"] == ["moe_act", "mlp"]
    assert training["cuda_graph"] == ["attn", "moe_router", "moe_preprocess"]
    assert training["moe_router_fusion"] is True and training["cross_entropy_fusion"] is True
    layers = chunk_layers(61, 32, PipelineSplit(par["pipeline_split"]))
    assert [len(c) for c in layers] == [1] + [2] * 30 + [0]


def test_mlperf_partner_rows_carry_their_configs_layout():
    """Partner submissions of the same benchmarks (corpus README, MLPerf Training): Nebius v5.0
    Llama 3.1 405B on 64 x 8 H200 (config_DGXH200_64x8x144xtp4pp8cp2.sh: TP 4, PP 8, CP 2, VP 8,
    log GBS 1152 = dp 8 x 144); University of Florida v5.1 Llama 3.1 8B on 4 x 8 B200
    (config_DGXB200_4x8x1xtp1pp1cp2_8b.sh, whose BUCKET_SIZE falls back to custom.yaml's
    134217728 parameters = 256 MB of bf16 gradients, unlike NVIDIA's 768000000)."""
    rows = [r for r in pub.load_corpus() if r["source"] == "mlperf-training"
            and r["notes"].startswith("partner submission")]
    assert len({r["url"] for r in rows}) == len(rows) >= 30
    neb = next(r for r in rows if "Nebius" in r["version"] and r["num_gpus"] == "512")
    scenario = pub.row_scenario(neb, "neb")
    t, par = scenario["training"], scenario["training"]["parallel"]
    assert scenario["hardware"]["gpu"] == "h200"
    assert (par["tp"], par["pp"], par["cp"], par["vpp"], par["dp"]) == (4, 8, 2, 8, 8)
    assert (t["global_batch"], t["micro_batch"], t["seq_len"]) == (1152, 1, 8192)
    uf = next(r for r in rows if r["url"].endswith("hpg.dgxb200x8.n4/llama31_8b"))
    scenario = pub.row_scenario(uf, "uf")
    t, par = scenario["training"], scenario["training"]["parallel"]
    assert scenario["hardware"]["gpu"] == "b200"
    assert (par["tp"], par["cp"], par["dp"], t["global_batch"]) == (1, 2, 16, 16)
    assert t["dp_bucket_mb"] == 256.0 and t["overlap"]["cp_max_ctas"] == 1


def test_nemo_perf_summary_rows_load_with_their_stated_layout():
    """NeMo 2.0 performance summary (docs.nvidia.com NeMo Framework user guide): the 25.02
    DGX-B200 and 25.04 DGX-GB200 fp8 pre-training tables, six dense rows each (the Mixtral rows
    run NeMo's MegatronTokenDropCallback: left out), TP x PP x DP x CP = GPUs; the 25.04 Llama3-70B
    row runs Megatron-FSDP; every row reduces gradients in bf16 (the fp8 scripts'
    grad_reduce_in_fp32 False)."""
    rows = [r for r in pub.load_corpus() if r["source"] == "nemo-perf-summary"]
    assert [(r["gpu"], len([x for x in rows if x["gpu"] == r["gpu"]])) for r in rows[::6]] == [
        ("b200", 6), ("gb200", 6)]
    assert not [r for r in rows if r["model"].startswith("mixtral")]
    for r in rows:
        dims = int(r["tp"]) * int(r["pp"]) * int(r["dp"]) * int(r["cp"])
        assert dims == int(r["num_gpus"]) and r["precision"] == "fp8"
        assert r["sp"] == str(int(r["tp"]) > 1).lower() and r["grad_reduce_dtype"] == "bf16"
        assert float(r["tokens_per_s_per_gpu"]) > 0 and r["framework"] == "nemo"
    fsdp = [r for r in rows if r["fsdp"] == "true"]
    assert [(r["model"], r["gpu"]) for r in fsdp] == [("llama-3-70b", "gb200")]
    big = next(r for r in rows if r["model"] == "llama-3-405b" and r["gpu"] == "b200")
    training = pub.row_scenario(big, "x")["training"]
    parallel = training["parallel"]
    assert (parallel["tp"], parallel["pp"], parallel["cp"], parallel["dp"]) == (4, 8, 2, 2)
    assert (training["seq_len"], training["global_batch"]) == (8192, 64)
