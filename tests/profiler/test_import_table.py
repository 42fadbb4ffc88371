# SPDX-License-Identifier: Apache-2.0
"""``llmsim db import``: a CSV a user writes by hand serves `simulate` and trains a predictor.

The fixture ``tests/fixtures/user_gemm_h100.csv`` holds 112 real H100 bf16 GEMM timings
(NVIDIA AIConfigurator's published gemm_perf table, trtllm 1.3.0rc20, torch_flow kernels, median
of repeats, in ms; Apache-2.0) rewritten in the minimal import schema: m, n, k, dtype, hardware,
latency_ms.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analytical.errors import SpecError
from profiler.import_table import import_table, read_table, rows_to_measurements
from profiler.store import Store
from simulate.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
USER_CSV = ROOT / "tests" / "fixtures" / "user_gemm_h100.csv"

SCENARIO = {
    "name": "l8b-h100-decode",
    "model": "llama-3-8b",
    "hardware": {"gpu": "h100-sxm", "num_gpus": 1, "gpus_per_node": 8},
    "inference": {"parallel": {"tp": 1}, "precision": "bf16", "batch_size": 1,
                  "input_len": 512, "output_len": 16},
}


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LLMSIM_DB", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_user_csv_import_derives_the_rest(tmp_path: Path, capsys) -> None:
    db = tmp_path / "s.duckdb"
    code, out, _ = _cli(capsys, "db", "import", str(USER_CSV), "--db", str(db))
    assert code == 0 and "112 rows -> 112 gemm points, 112 inserted" in out
    code, out, _ = _cli(capsys, "db", "import", str(USER_CSV), "--db", str(db))
    assert code == 0 and "0 inserted, 112 already stored" in out
    with Store(db, read_only=True) as store:
        frame = store.frame("gemm", hardware="h100-sxm")
        comments = store.query("SELECT comment FROM duckdb_columns() WHERE table_name = 'gemm' "
                               "AND column_name = 'median_s'")
    assert len(frame) == 112
    assert set(frame["provenance"]) == {"imported:user_gemm_h100"}
    row = frame[frame["op_key"] == "gemm/bf16/b1/1x4096x4096"].iloc[0]
    assert row["median_s"] == pytest.approx(0.01656e-3, rel=1e-9)  # latency_ms -> seconds
    assert row["roofline_s"] > 0 and 0 < row["fraction_of_roofline"] < 1.05
    assert row["point_key"] and row["fingerprint_id"] and row["device_name"] == "h100-sxm"
    assert "median latency" in str(comments["comment"].iloc[0])


def test_imported_rows_serve_simulate(tmp_path: Path, capsys) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps(SCENARIO))
    db = tmp_path / "s.duckdb"
    args = ("simulate", str(scenario), "--db", str(db), "--no-predictors", "--json")
    assert _cli(capsys, "db", "import", str(USER_CSV), "--db", str(db))[0] == 0
    code, out, _ = _cli(capsys, *args)
    with_store = json.loads(out)
    code2, out2, _ = _cli(capsys, *args, "--no-store")
    without = json.loads(out2)
    assert code == code2 == 0
    assert with_store["engine_coverage"].get("store", 0) > 0  # the m=1 decode GEMMs
    assert "store" not in without["engine_coverage"]
    assert with_store["tpot_s"] != pytest.approx(without["tpot_s"], rel=1e-6)


@pytest.mark.slow
def test_imported_rows_train_a_predictor(tmp_path: Path) -> None:
    from predictors.pipeline import train_and_log
    from predictors.train import TrainConfig

    db = tmp_path / "s.duckdb"
    with Store(db) as store:
        import_table(store, USER_CSV)
    config = TrainConfig(seed=0, n_configs=1, max_rounds=20, early_stopping_rounds=5,
                         rf_trees=5, search_valid_rows=0, baselines=False)
    outcome = train_and_log("h100-sxm", "gemm", db=db, config=config, auto_promote=False)
    assert outcome.result.data.provenance == "imported:user_gemm_h100"
    assert len(outcome.result.data) == 112
    assert outcome.result.splits["heldout_shape"].metrics["xgb"].n > 0


@pytest.mark.parametrize(("text", "message"), [
    ("m,n,k,dtype,latency_ms\n64,64,64,bf16,0.1\n", "column hardware: missing"),
    ("m,n,k,dtype,hardware,latency_ms\n64,64,0,bf16,h100-sxm,0.1\n",
     "row 2: column k: must be a positive int"),
    ("m,n,k,dtype,hardware,latency_ms\n64,64,64,bf16,h100-sxm,0.1\n64,64,64,bf16,h100-sxm,x\n",
     "row 3: column latency_ms: expected a number"),
    ("m,n,k,hardware,latency_ms\n64,64,64,h100-sxm,0.1\n", "row 2: column dtype: missing"),
    ("m,n,k,dtype,hardware\n64,64,64,bf16,h100-sxm\n", "need exactly one latency column"),
    ("m,n,k,dtype,hardware,latency_ms,colour\n64,64,64,bf16,h100-sxm,0.1,red\n",
     "column colour: .*not a gemm column"),
    ("m,n,k,dtype,hardware,latency_ms\n64,64,64,bf16,h999,0.1\n", "unknown hardware 'h999'"),
    ("a,b\n1,2\n", "cannot tell the operator family"),
])
def test_bad_rows_name_row_and_column(tmp_path: Path, capsys, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SpecError, match=message):
        rows_to_measurements(read_table(path), path)
    code, _, err = _cli(capsys, "db", "import", str(path), "--db", str(tmp_path / "s.duckdb"))
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1


def test_other_families_json_and_parquet(tmp_path: Path) -> None:
    rows = [{"kind": "all_reduce", "bytes": 1 << 20, "num_gpus": 8, "dtype": "bf16",
             "latency_us": 30.5, "hardware": "h100-sxm"},
            {"kind": "all_reduce", "bytes": 1 << 20, "num_gpus": 8, "dtype": "bf16",
             "latency_us": 31.5, "hardware": "h100-sxm"}]
    path = tmp_path / "nccl.json"
    path.write_text(json.dumps(rows))
    family, ms = rows_to_measurements(read_table(path), path)
    assert family == "collective" and len(ms) == 1  # repeats fold into one point
    assert ms[0].op.key == "collective/all_reduce/bf16/n8/r8/1048576"
    assert ms[0].timing.median_s == pytest.approx(31e-6) and ms[0].timing.n == 2
    assert ms[0].fingerprint.device_count == 8
    import pandas as pd

    attn = tmp_path / "attn.parquet"
    pd.DataFrame([{"batch_size": 2, "seq_len": 1024, "num_heads": 32, "num_kv_heads": 8,
                   "head_dim": 128, "dtype": "bf16", "median_s": 1e-4}]).to_parquet(attn)
    family, ms = rows_to_measurements(read_table(attn), attn, hardware="h100-sxm")
    assert family == "attention"
    assert ms[0].op.key == "attention/prefill/bf16/b2/s1024/t1024/h32g8d128/cf"


def test_schema_command_lists_required_columns(capsys) -> None:
    code, out, _ = _cli(capsys, "db", "schema", "--json")
    assert code == 0
    schema = json.loads(out)
    gemm = {r["column"]: r["need"] for r in schema["gemm"]}
    assert gemm["m"] == gemm["n"] == gemm["k"] == gemm["dtype"] == "required"
    assert "latency_ms" in " ".join(schema["attention"][i]["column"]
                                    for i in range(len(schema["attention"])))
    code, out, _ = _cli(capsys, "db", "schema", "--store", "--json")
    tables = {r["table"] for r in json.loads(out)}
    assert {"gemm", "fingerprints", "runs"} <= tables


def test_schema_writes_column_comments(tmp_path: Path, capsys) -> None:
    db = tmp_path / "s.duckdb"
    code, out, _ = _cli(capsys, "db", "schema", "--write-comments", "--db", str(db))
    assert code == 0 and "column comments written" in out
    with Store(db, read_only=True) as store:
        frame = store.query("SELECT table_name, column_name, comment FROM duckdb_columns() "
                            "WHERE table_name IN ('attention', 'fingerprints')")
    comments = {(r.table_name, r.column_name): r.comment for r in frame.itertuples()}
    assert comments[("attention", "kv_heads")].startswith("key/value heads")
    assert comments[("fingerprints", "driver")] == "driver version"
