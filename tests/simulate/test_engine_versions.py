# SPDX-License-Identifier: Apache-2.0
"""Engine presets by release (`serving.engine_version`): each range resolves to the defaults read
in that release's code (the published wheel of the tag; paths below are inside it), an unread
release is refused, and a prediction says whose defaults it used."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from analytical.errors import SpecError
from analytical.hardware import get_hardware
from simulate.api import run
from simulate.cli.main import main
from simulate.serving import engine_versions
from simulate.serving.engine_presets import engine_preset
from simulate.serving.engine_versions import parse_release
from simulate.validate.serving_corpus import load_corpus, row_scenario

LONG = 131_072  # a model whose max_model_len is above vLLM V0's 32K chunked-prefill switch
SHORT = 8_192


def _preset(engine: str, version: str, gpu: str = "h100-sxm", *, tp: int = 1,
            max_model_len: int = SHORT):
    hw = get_hardware(gpu)
    return engine_preset(engine, memory_bytes=hw.memory_bytes, device=hw.name, tp=tp,
                         version=version, max_model_len=max_model_len)


def test_release_strings_parse_and_nim_is_unversioned() -> None:
    assert parse_release("0.6.3.post1") == (0, 6, 3)
    assert parse_release("v0.11.0rc1") == (0, 11, 0)
    assert parse_release("0.5") == (0, 5, 0)
    assert parse_release("0.5.5.post1") == (0, 5, 5)
    assert parse_release("") is None
    assert parse_release("NIM 1.8.0") is None  # no cited NIM -> TensorRT-LLM release


# --- vLLM -------------------------------------------------------------------------------------

def test_vllm_v0_releases_are_prefill_first_with_256_sequences() -> None:
    # vllm/engine/arg_utils.py @ v0.6.3.post1: max_num_seqs 256, enable_prefix_caching False,
    # block_size 16, gpu_memory_utilization 0.90, enable_chunked_prefill None -> off below 32K;
    # vllm/config.py SchedulerConfig @ v0.6.3.post1: no chunking -> max(max_model_len, 2048);
    # vllm/worker/model_runner.py @ v0.6.3.post1: graphs up to the size covering 256.
    for version in ("0.6.3.post1", "0.7.3"):
        p = _preset("vllm", version)
        assert (p.scheduler, p.chunk_prompts, p.prefix_caching) == (
            "prefill_first", False, False)
        assert (p.max_num_seqs, p.max_batched_tokens, p.cuda_graph_max_bs) == (256, 8192, 256)
        assert (p.block_size, p.gpu_memory_utilization, p.host_overlap) == (16, 0.9, False)
    assert _preset("vllm", "0.6.3", max_model_len=1024).max_batched_tokens == 2048


def test_vllm_v0_chunks_long_context_models_with_the_release_budget() -> None:
    # vllm/engine/arg_utils.py create_engine_config @ v0.5.4 - v0.7.3: "Chunked prefill is
    # enabled by default for models with max_model_len > 32K"; vllm/config.py SchedulerConfig:
    # chunked budget 512 @ v0.5.4, v0.6.3.post1, v0.6.4.post1 and 2048 @ v0.6.5, v0.6.6, v0.7.3.
    old = _preset("vllm", "0.6.4", max_model_len=LONG)
    assert (old.scheduler, old.chunk_prompts, old.max_batched_tokens) == (
        "chunked_prefill", True, 512)
    assert _preset("vllm", "0.6.5", max_model_len=LONG).max_batched_tokens == 2048
    assert _preset("vllm", "0.7.3", max_model_len=32_768).chunk_prompts is False  # not > 32K


def test_vllm_04_to_052_v0_without_the_long_context_switch() -> None:
    # vllm/engine/arg_utils.py @ v0.4.0, v0.4.3, v0.5.0, v0.5.1, v0.5.2: block_size 16,
    # enable_prefix_caching False, gpu_memory_utilization 0.90, max_num_seqs 256,
    # enable_chunked_prefill: bool = False (no use_long_context switch, which is in v0.5.3's
    # arg_utils.py); vllm/config.py SchedulerConfig: max(max_model_len, 2048);
    # vllm/worker/model_runner.py _BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 * i, i in 1..32].
    for version in ("0.4.0", "0.4.0.post1", "0.4.3", "0.5.0", "0.5.2"):
        p = _preset("vllm", version, max_model_len=LONG)
        assert p.version == "0.4.0-0.5.2 (V0)"
        assert (p.scheduler, p.chunk_prompts, p.max_batched_tokens) == (
            "prefill_first", False, LONG)
        assert (p.max_num_seqs, p.block_size, p.gpu_memory_utilization) == (256, 16, 0.9)
        assert (p.prefix_caching, p.cuda_graph_max_bs, p.host_overlap) == (False, 256, False)
    short = _preset("vllm", "0.5.2")
    assert replace(short, version="") == replace(_preset("vllm", "0.5.3"), version="")
    long = _preset("vllm", "0.5.3", max_model_len=LONG)  # arg_utils.py @ v0.5.3: > 32K chunks
    assert (long.scheduler, long.chunk_prompts, long.max_batched_tokens) == (
        "chunked_prefill", True, 512)


def test_vllm_v1_batch_defaults_by_release() -> None:
    # vllm/engine/arg_utils.py _set_default_args_v1 @ v0.8.0 - v0.8.4: "h100"/"h200" in the
    # device name -> 8192 tokens, else 2048; max_num_seqs 1024 fixed.
    assert (_preset("vllm", "0.8.2").max_batched_tokens, _preset("vllm", "0.8.2").max_num_seqs
            ) == (8192, 1024)
    a100 = _preset("vllm", "0.8.4", "a100-sxm-80gb")
    assert (a100.max_batched_tokens, a100.max_num_seqs) == (2048, 1024)
    # @ v0.8.5: device_memory >= 70 GiB -> 8192 / 1024 (an 80 GB A100 included), else 2048 / 256
    a100 = _preset("vllm", "0.8.5", "a100-sxm-80gb")
    assert (a100.max_batched_tokens, a100.max_num_seqs) == (8192, 1024)
    assert _preset("vllm", "0.8.5", "l4").max_num_seqs == 256
    # @ v0.9.0 (PR #17885, NOTE(Kuntai)): "a100" not in the device name as well
    a100 = _preset("vllm", "0.9.0", "a100-sxm-80gb")
    assert (a100.max_batched_tokens, a100.max_num_seqs) == (2048, 256)
    for version in ("0.8.0", "0.8.5", "0.9.2"):
        p = _preset("vllm", version)
        assert (p.scheduler, p.chunk_prompts, p.prefix_caching) == ("chunked_prefill", True, True)


def test_vllm_cuda_graph_capture_sizes_by_release() -> None:
    # vllm/config.py @ v0.9.2: SchedulerConfig.cuda_graph_sizes = [512]; @ v0.10.0
    # [min(max_num_seqs * 2, 512)] -> an L4 (256 sequences) captures up to 512 in both, and a
    # scenario-independent 0.9 capture does not follow max_num_seqs.
    assert _preset("vllm", "0.9.2", "l4").cuda_graph_max_bs == 512
    assert _preset("vllm", "0.10.0", "h100-sxm").cuda_graph_max_bs == 512
    hw = get_hardware("h100-sxm")
    newest = engine_preset("vllm", memory_bytes=hw.memory_bytes, device=hw.name,
                           max_model_len=SHORT)
    assert _preset("vllm", "0.30.0") == newest
    # async scheduling: SchedulerConfig.async_scheduling = False @ v0.10.0-v0.13.0, None (on)
    # @ v0.14.0 (vllm/config/scheduler.py): the 0.11.0 rows differ from the newest only there
    old = _preset("vllm", "0.13.0")
    assert (old.host_overlap, newest.host_overlap) == (False, True)
    assert replace(old, host_overlap=True, version=newest.version) == newest
    assert not any(_preset("vllm", v).host_overlap for v in ("0.8.0", "0.8.5", "0.9.2", "0.13.0"))
    assert _preset("vllm", "0.14.0").host_overlap


def test_vllm_capture_sizes_step_by_8_above_256_before_0_11_1() -> None:
    # [1, 2, 4] + range(8, max + 1, 8): vllm/config/__init__.py _set_cudagraph_sizes @ v0.11.0,
    # vllm/config.py @ v0.10.0; [1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16):
    # vllm/config/vllm.py @ v0.11.1 and v0.12.0. Otherwise 0.11.0 and 0.11.1 resolve alike.
    from simulate.serving.engine_presets import cuda_graph_sizes

    eight = cuda_graph_sizes(_preset("vllm", "0.11.0"))
    sixteen = cuda_graph_sizes(_preset("vllm", "0.11.1"))
    assert eight == (1, 2, 4, *range(8, 513, 8))
    assert sixteen == (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))
    assert cuda_graph_sizes(_preset("vllm", "")) == sixteen
    for version in ("0.10.0", "0.9.2", "0.8.5", "0.8.2"):
        assert cuda_graph_sizes(_preset("vllm", version)) == eight
    # V0 (vllm/worker/model_runner.py _BATCH_SIZES_TO_CAPTURE @ v0.5.4 - v0.7.3): to 256 by 8
    assert cuda_graph_sizes(_preset("vllm", "0.6.3")) == (1, 2, 4, *range(8, 257, 8))
    assert replace(_preset("vllm", "0.11.0"), cuda_graph_ladder=(), version="") == replace(
        _preset("vllm", "0.11.1"), cuda_graph_ladder=(), version="")


# --- SGLang -----------------------------------------------------------------------------------

def test_sglang_04_memory_fraction_by_tp_not_gpu_size() -> None:
    # python/sglang/srt/server_args.py ServerArgs.__post_init__ @ v0.4.0 - v0.4.5:
    # mem_fraction_static 0.88 / 0.87 / 0.85 / 0.81 / 0.79 at tp 1 / 2 / 4 / 8 / 16;
    # chunked_prefill_size 8192 (2048 below 25,000 MiB); cuda_graph_max_bs 160 (8 below it).
    assert [_preset("sglang", "0.4.3", tp=tp).gpu_memory_utilization
            for tp in (1, 2, 4, 8, 16)] == [0.88, 0.87, 0.85, 0.81, 0.79]
    p = _preset("sglang", "0.4.0")
    assert (p.max_batched_tokens, p.cuda_graph_max_bs) == (8192, 160)
    small = _preset("sglang", "0.4.0", "l4")  # 24 GB (< 25,000 MiB)
    assert (small.max_batched_tokens, small.cuda_graph_max_bs) == (2048, 8)
    # @ v0.4.4.post1, v0.4.5: below 25,000 MiB, tp >= 4 captures up to 80
    assert _preset("sglang", "0.4.5", "l4", tp=4).cuda_graph_max_bs == 80
    assert _preset("sglang", "0.4.3", "l4", tp=4).cuda_graph_max_bs == 8


def test_sglang_05_tiers_and_the_small_gpu_graph_change() -> None:
    # server_args.py _handle_gpu_memory_settings @ v0.5.3, v0.5.4: below 35 GiB cuda_graph_max_bs
    # 16 at tp < 4; @ v0.5.5, v0.5.6: 24. Same H100 tiers (8192 / 256) in both.
    assert _preset("sglang", "0.5.4", "l4").cuda_graph_max_bs == 16
    assert _preset("sglang", "0.5.5.post1", "l4").cuda_graph_max_bs == 24
    same = dataclasses.replace(_preset("sglang", "0.5.3"), version="0.5.5+")
    assert same == _preset("sglang", "0.5.6")  # on an H100 nothing but the label differs


def test_sglang_048_to_052_reserved_memory_table() -> None:
    # python/sglang/srt/server_args.py ServerArgs.__post_init__ @ v0.4.7.post1 - v0.5.2 (the
    # same code in every wheel of 0.4.8 - 0.5.2): mem_fraction_static = round((gpu_mem -
    # reserved_mem) / gpu_mem, 3), reserved_mem (MiB) = (2.8 + tp*pp/10) * 1024 below 35 GiB,
    # (9.5 + tp*pp/2) * 1024 below 90 GiB, (12 + tp*pp/2) * 1024 below 160 GiB, else 32 * 1024;
    # chunked_prefill_size 2048 / 8192 / 16384 below 35 GiB / below 160 GiB / above;
    # cuda_graph_max_bs 8 (tp >= 4: 80) below 35 GiB, else model_executor/cuda_graph_runner.py
    # get_batch_sizes_to_capture: up to 160, 256 above 90 GiB, 512 above 160,000 MiB.
    def fraction(gpu_mib: float, reserved_gib: float) -> float:
        return round((gpu_mib - reserved_gib * 1024) / gpu_mib, 3)

    for version in ("0.4.8", "0.4.9.post6", "0.4.10.post2", "0.5.0rc2", "0.5.1.post3", "0.5.2"):
        h100 = _preset("sglang", version)  # 80 GiB (81,920 MiB)
        assert h100.version == "0.4.8-0.5.2"
        assert (h100.max_batched_tokens, h100.cuda_graph_max_bs) == (8192, 160)
        assert h100.gpu_memory_utilization == fraction(81920, 9.5 + 0.5) == 0.875
    assert _preset("sglang", "0.5.2", tp=8).gpu_memory_utilization == fraction(81920, 13.5)
    h200 = _preset("sglang", "0.5.2", "h200")  # 140 GiB
    assert (h200.max_batched_tokens, h200.cuda_graph_max_bs) == (8192, 256)
    assert h200.gpu_memory_utilization == fraction(140 * 1024, 12.5)
    b200 = _preset("sglang", "0.5.2", "b200", tp=8)  # 180 GiB
    assert (b200.max_batched_tokens, b200.cuda_graph_max_bs) == (16384, 512)
    assert b200.gpu_memory_utilization == fraction(180 * 1024, 32)
    l4 = _preset("sglang", "0.5.2", "l4")  # 24 GiB
    assert (l4.max_batched_tokens, l4.cuda_graph_max_bs) == (2048, 8)
    assert l4.gpu_memory_utilization == fraction(24 * 1024, 2.9)
    assert _preset("sglang", "0.5.2", "l4", tp=4).cuda_graph_max_bs == 80
    # the rest (page_size 1, radix cache, overlap schedule, prefill-first) as 0.5.5+
    new = _preset("sglang", "0.5.5")
    assert replace(h100, version="", max_batched_tokens=0, cuda_graph_max_bs=0,
                   gpu_memory_utilization=0.0) == replace(
        new, version="", max_batched_tokens=0, cuda_graph_max_bs=0, gpu_memory_utilization=0.0)
    assert new.gpu_memory_utilization != h100.gpu_memory_utilization  # 0.5.3+: another formula


# --- refusals -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("engine", "version"), [
    ("vllm", "0.3.3"), ("sglang", "0.4.7"), ("sglang", "0.3.6"), ("trtllm", "0.21.0")])
def test_a_release_whose_defaults_were_not_read_is_refused(engine: str, version: str) -> None:
    with pytest.raises(SpecError, match="serving.engine_version") as err:
        _preset(engine, version)
    assert "supported:" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("engine", "version", "why"), [
    # server_args.py: 0.4.6 / 0.4.6.post1 (gpu_mem - 13 GiB) above 80 GiB, 0.4.6.post2 - 0.4.7
    # a 48 GiB / 18 GiB min() above 96 GiB, 0.4.7.post1 the reserved_mem table
    ("sglang", "0.4.6.post2", "between post releases"), ("sglang", "0.4.7", "post releases"),
    ("trtllm", "0.12.0", "TensorRT engine"), ("trtllm", "0.21.0", "1.0+ release")])
def test_a_refused_range_says_why_in_one_line(engine: str, version: str, why: str) -> None:
    with pytest.raises(SpecError, match="serving.engine_version") as err:
        _preset(engine, version)
    assert why in str(err.value) and "\n" not in str(err.value) and "supported:" in str(err.value)


def _scenario(tmp_path: Path, version: str) -> Path:
    doc = {"name": "t", "model": "llama-2-7b", "hardware": {"gpu": "h100-sxm", "num_gpus": 1},
           "inference": {"parallel": {"tp": 1}, "precision": "bf16", "input_len": 256,
                         "output_len": 16},
           "serving": {"engine": "vllm", "engine_version": version,
                       "arrival": {"process": "closed", "concurrency": 2, "num_requests": 4}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_cli_refuses_an_old_release_with_exit_2_and_one_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    assert main(["simulate", str(_scenario(tmp_path, "0.3.3")), "--no-store",
                 "--no-predictors"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "serving.engine_version" in err and "0.5.3-0.6.4" in err


# --- a prediction uses and reports the release's defaults ----------------------------------------

def _served(tmp_path: Path, version: str) -> dict:
    doc = yaml.safe_load(_scenario(tmp_path, version).read_text())
    return run(doc, use_store=False, use_predictors=False).data


def test_prediction_reports_and_uses_the_release_defaults(tmp_path: Path) -> None:
    old, new = _served(tmp_path, "0.6.3"), _served(tmp_path, "")
    assert old["engine_defaults"] == {
        "engine": "vllm", "engine_version": "0.6.3", "defaults_of": "0.5.3-0.6.4 (V0)"}
    assert new["engine_defaults"]["defaults_of"] == "0.14+"
    # V0 runs each prompt in a prefill-only step (no decode beside it): a different stream
    assert (old["steps"], old["ttft_s"]["mean"]) != (new["steps"], new["ttft_s"]["mean"])


def test_corpus_rows_carry_their_release_into_the_scenario() -> None:
    rows = [r for r in load_corpus() if r.engine_version]
    assert rows
    for row in rows:
        assert row_scenario(row)["serving"]["engine_version"] == row.engine_version


@pytest.mark.parametrize(("entry", "field"), [
    ({"from": "0.1", "below": "0.2"}, ".reason"),  # no reason: a refusal says why
    ({"from": "0.2", "below": "0.1", "reason": "x"}, ".below"),  # an empty span
    ({"from": "0.1", "below": "9.0", "reason": "x"}, ": overlaps"),  # covers a read range
])
def test_a_refused_entry_without_reason_span_or_room_is_refused(entry: dict[str, str],
                                                                 field: str) -> None:
    """`versions.refused` is checked when read: every shipped engine file passes (the
    parametrised refusals above), and a broken edit names the entry and field."""
    data = {"version": "1.0", "versions": {"newest": {"label": "1.0+", "from": "1.0"},
                                           "refused": [entry]}}
    with pytest.raises(SpecError) as err:
        engine_versions.refused_ranges(data, "trtllm")
    assert str(err.value).startswith(f"trtllm.versions.refused[0]{field}")
