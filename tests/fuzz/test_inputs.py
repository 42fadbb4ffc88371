# SPDX-License-Identifier: Apache-2.0
"""The input contract (`analytical.inputs`) and the strict field readers, unit by unit."""

from __future__ import annotations

import math
import sys

import pytest

from analytical.errors import SpecError
from analytical.inputs import (
    MAX_DEPTH,
    check_latencies,
    check_output_path,
    check_path,
    check_work,
    load_yaml,
    parse_json,
    parse_yaml,
    read_csv_rows,
    read_text,
    write_text,
)
from simulate.cli.main import main
from simulate.fields import float_field, int_field, optional_float


def _bomb(levels: int, width: int = 9) -> str:
    lines = ["l0: &l0 [" + ",".join(['"x"'] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def test_alias_bomb_refused_before_expansion():
    # 9^9 = 387M leaves once expanded; refused from the composed node graph (memoised sizes)
    with pytest.raises(SpecError, match="alias bomb"):
        parse_yaml(_bomb(9), "scenario")


def test_ordinary_aliases_and_merge_keys_still_load():
    doc = parse_yaml("base: &b {tp: 2}\nuse: *b\nmerged: {<<: *b, pp: 4}\n", "scenario")
    assert doc == {"base": {"tp": 2}, "use": {"tp": 2}, "merged": {"tp": 2, "pp": 4}}
    assert parse_yaml(_bomb(3, 3), "s")["l2"][0][0] == ["x", "x", "x"]  # small fan-out is fine


@pytest.mark.parametrize("text", ["a: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1),
                                  "a: &a [*a]"])
def test_deep_or_recursive_yaml_refused(text):
    with pytest.raises(SpecError, match="refused"):
        parse_yaml(text, "scenario")


def test_json_refuses_nan_and_deep_nesting():
    with pytest.raises(SpecError, match="NaN"):
        parse_json('{"x": NaN}', "config.json")
    with pytest.raises(SpecError, match="deeper"):
        parse_json("[" * 100 + "]" * 100, "config.json")
    assert parse_json('{"x": [1, 2.5]}', "config.json") == {"x": [1, 2.5]}


@pytest.mark.parametrize(("body", "match"), [(b"\xff\xfe", "UTF-8"), (b"a\x00b", "NUL")])
def test_bad_encodings_named(tmp_path, body, match):
    path = tmp_path / "f.yaml"
    path.write_bytes(body)
    with pytest.raises(SpecError, match=match) as info:
        load_yaml(path, "sweep")
    assert info.value.field == "sweep" and str(path) in str(info.value)


def test_bom_is_accepted(tmp_path):
    path = tmp_path / "f.yaml"
    path.write_bytes(b"\xef\xbb\xbfname: x\n")
    assert load_yaml(path, "scenario") == {"name": "x"}


@pytest.mark.parametrize(("path", "match"), [("a\x00b", "NUL"), ("x" * 100_000, "characters"),
                                             ("", "empty"), ("d/" + "c" * 256, "255")])
def test_absurd_paths_named(path, match):
    with pytest.raises(SpecError, match=match):
        check_path(path, "scenario")


def test_missing_and_directory_named(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        read_text(tmp_path / "none.yaml", "scenario")
    with pytest.raises(SpecError, match="directory"):
        read_text(tmp_path, "scenario")


def test_csv_rows_checked(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n")
    with pytest.raises(SpecError, match="no rows"):
        read_csv_rows(path, "trace", required=("a",), max_rows=10)
    path.write_text("a,b\n" + "1,2\n" * 11)
    with pytest.raises(SpecError, match="more than 10 rows"):
        read_csv_rows(path, "trace", required=("a",), max_rows=10)
    path.write_text("a,b\n1,2\n")
    assert read_csv_rows(path, "trace", required=("a",), max_rows=10) == (
        ["a", "b"], [{"a": "1", "b": "2"}])


@pytest.mark.parametrize("values", [[1e-3, math.nan], [1e-3, -2e-6], [math.inf], [0.0], ["x"]])
def test_latency_validator_refuses_nonsense(values):
    with pytest.raises(SpecError, match=r"median_s\[\d\]"):
        check_latencies(values, "median_s", source="import.parquet")


def test_latency_validator_passes_good_rows():
    check_latencies([1e-6, 2.5, None], "median_s")
    check_latencies([0.0], "median_s", allow_zero=True)


def test_work_limit_says_how_big():
    check_work("n", 10, 10, "points")
    with pytest.raises(SpecError, match="would be 11 points; the limit is 10; split it"):
        check_work("n", 11, 10, "points", "split it")


def test_output_paths_checked_before_work(tmp_path):
    assert check_output_path(tmp_path / "x.png", "--plot", suffixes=(".png",)) == tmp_path / "x.png"
    with pytest.raises(SpecError, match="suffix"):
        check_output_path(tmp_path / "x.gif", "--plot", suffixes=(".png",))
    with pytest.raises(SpecError, match="does not exist"):
        check_output_path(tmp_path / "no" / "x.png", "--plot")
    assert check_output_path(tmp_path / "no" / "deeper", "--out", directory=True)
    with pytest.raises(SpecError, match="not writable"):
        check_output_path("/proc/llmsim-x.json", "--trace")  # procfs: read-only even for root


def test_write_error_is_named():
    with pytest.raises(SpecError, match="no space left on device"):
        write_text("/dev/full", "x" * 100_000, "--trace")


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, "1", True, [1.0]])
def test_float_field_strict(value):
    with pytest.raises(SpecError, match=r"serving\.slo\.ttft_s"):
        float_field({"ttft_s": value}, "ttft_s", "serving.slo")


@pytest.mark.parametrize("value", [math.nan, 1.0, 2.5, "2", True, -1, 0])
def test_int_field_strict(value):
    with pytest.raises(SpecError, match=r"training\.parallel\.dp"):
        int_field({"dp": value}, "dp", "training.parallel")


def test_readers_accept_good_values():
    assert int_field({"dp": 4}, "dp", "p") == 4
    assert float_field({"x": 2}, "x", "p", exclusive_min=True) == 2.0
    assert optional_float({}, "ttft_s", "serving.slo") is None


def test_missing_xgboost_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path))
    db = str(tmp_path / "m.duckdb")
    parquet = "datasets/measurements/llmsim/h100-sxm/memory.parquet"
    assert main(["db", "import-parquet", parquet, "--db", db]) == 0
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "xgboost", None)  # import xgboost -> ModuleNotFoundError
    code = main(["train", "--hardware", "h100-sxm", "--op", "memory", "--db", db,
                 "--configs", "1", "--no-promote"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "'xgboost'" in err[0] and "llmsim[cpu]" in err[0]


def test_missing_ray_names_the_extra(tmp_path, capsys, monkeypatch):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("model: gpt2\nhardware: {gpu: a100-sxm-80gb, num_gpus: 8}\n"
                        "training: {parallel: {tp: [1, 2]}, global_batch: 64, seq_len: 1024}\n")
    monkeypatch.setitem(sys.modules, "ray", None)
    code = main(["search", str(scenario), "--executor", "ray", "--no-store", "--no-predictors"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "ray" in err[0] and "not installed" in err[0]
