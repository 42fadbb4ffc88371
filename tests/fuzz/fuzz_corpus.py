# SPDX-License-Identifier: Apache-2.0
"""The bad-input corpus: several hundred malformed files, fields and flags over every command.

`cases()` is deterministic: each `Case` is argv (``{d}`` stands for the case's own folder), the
files to write there first, and a regular expression the one stderr line must match (the field
or cause it names). Bases are shipped scenarios, sweeps, hardware and model files, mutated one
field at a time, so a case fails for exactly one reason. ``python tests/fuzz/fuzz_corpus.py
OUT`` writes the corpus out as files (one folder per case with ``argv.json``).
"""

from __future__ import annotations

import copy
import json
import math
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "datasets"
NAN, INF = math.nan, math.inf
INT_BAD = [NAN, INF, -4, "abc", True, 1.5, [1], {"a": 1}, None]
SIMULATE = ["--no-store", "--no-predictors"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Case:
    """One bad input: run ``argv`` after writing ``files`` into the case folder ``{d}``."""

    id: str
    argv: tuple[str, ...]
    match: str  # regex (case-insensitive) the single stderr line must contain
    files: dict[str, bytes] = field(default_factory=dict)
    timeout_s: int = 60


def _yaml(doc: Any) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False).encode()


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _set(doc: dict, path: str, value: Any) -> dict:
    out = copy.deepcopy(doc)
    node = out
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return out


def _tag(value: Any) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return json.dumps(value, default=str).replace(" ", "")[:20]


def _leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _scenario(cid: str, doc: Any, match: str, *, command: str = "simulate",
              extra: tuple[str, ...] = ()) -> Case:
    flags = SIMULATE if command in ("simulate", "search") else []
    return Case(id=cid, argv=(command, "{d}/s.yaml", *flags, *extra), match=match,
                files={"s.yaml": _yaml(doc) if not isinstance(doc, bytes) else doc})


def _training() -> Iterator[Case]:
    base = _load(DATA / "scenarios" / "gpt2-dp8-a100.yaml")
    ints = {"hardware.num_gpus": 1, "training.global_batch": 1,
            "training.micro_batch": 1, "training.seq_len": 1, "training.parallel.tp": 1,
            "training.parallel.pp": 1, "training.parallel.dp": 1, "training.parallel.cp": 1,
            "training.parallel.ep": 1, "training.parallel.vpp": 1, "training.parallel.zero": 0,
            "training.overlap.comm_sms": 0, "training.overlap.cp_max_ctas": 0}
    for path, minimum in ints.items():
        for value in [*INT_BAD, minimum - 1]:
            yield _scenario(f"train-{path}={_tag(value)}", _set(base, path, value), _leaf(path))
    floats = {"training.dp_bucket_mb": [NAN, INF, -INF, -1, 0, "abc", True, [1]],
              "training.overlap.compute_slowdown": [NAN, INF, 0.5, -1, "x", True]}
    for path, values in floats.items():
        for value in values:
            yield _scenario(f"train-{path}={_tag(value)}", _set(base, path, value), _leaf(path))
    for value in [NAN, -1, 0, "x", 1.5, True]:
        yield _scenario(f"train-lora.rank={_tag(value)}",
                        _set(base, "training.lora", {"rank": value}), "lora.rank")
    for value in ["qv", [1], [], ["zz"]]:
        yield _scenario(f"train-lora.targets={_tag(value)}",
                        _set(base, "training.lora", {"rank": 8, "targets": value}), "targets")
    choices = {"training.precision": "fp64", "training.recompute": "bogus",
               "training.schedule": 3, "training.attention": "x", "training.optimizer": "sgd",
               "training.parallel.cp_algorithm": 5, "training.foo": 1,
               "training.parallel.sp": "yes", "training.parallel.fsdp": 1, "hardware.gpu": 123,
               "hardware.gpu@long": "x" * 300, "hardware.gpu@nul": "a\x00b",
               "hardware.extra": 1, "model": "no-such-model", "model@num": 5,
               "model@missing": "nowhere/none.json", "surprise": 1}
    for key, value in choices.items():
        path = key.split("@")[0]
        leaf = "gpu" if path == "hardware.gpu" else _leaf(path)
        yield _scenario(f"train-{key}={_tag(value)}", _set(base, path, value),
                        f"{leaf}|unknown|model|no such file")
    yield _scenario("train-microbatches-2^39", _set(base, "training.global_batch", 2**39),
                    "micro-batches")
    for cid, doc in (("no-model", {k: v for k, v in base.items() if k != "model"}),
                     ("no-hardware", {k: v for k, v in base.items() if k != "hardware"}),
                     ("two-modes", {**base, "inference": {"input_len": 1, "output_len": 1}}),
                     ("no-mode", {k: v for k, v in base.items() if k != "training"})):
        yield _scenario(f"train-{cid}", doc, "model|hardware|training|inference")


def _inference() -> Iterator[Case]:
    base = _load(DATA / "scenarios" / "llama2-7b-continuous-qps2-a100.yaml")
    base = _set(base, "serving.arrival.num_requests", 20)
    for path in ("inference.batch_size", "inference.parallel.tp", "inference.parallel.pp",
                 "inference.parallel.dp", "inference.parallel.ep"):
        for value in [NAN, -4, 0, "abc", 1.5, True]:
            yield _scenario(f"inf-{path}={_tag(value)}", _set(base, path, value), _leaf(path))
    for path in ("inference.input_len", "inference.output_len"):
        for value in [NAN, -1, 0, "abc", 10**12]:
            yield _scenario(f"inf-{path}={_tag(value)}", _set(base, path, value), _leaf(path))
    lognormal = {"dist": "lognormal", "mean": 512, "sigma": 0.6, "max": 3072}
    bad_dists = [("mean", v) for v in (NAN, INF, 0, -5, "x")] + [
        ("sigma", v) for v in (NAN, -1, INF)] + [("max", v) for v in (0, -1, NAN, 2.5)]
    for key, value in bad_dists:
        yield _scenario(f"inf-lognormal.{key}={_tag(value)}",
                        _set(base, "inference.input_len", {**lognormal, key: value}),
                        f"input_len.{key}")
    for cid, spec, match in (("uniform-min>max", {"dist": "uniform", "min": 9, "max": 2}, "min"),
                             ("uniform-min0", {"dist": "uniform", "min": 0, "max": 2}, "min"),
                             ("uniform-maxstr", {"dist": "uniform", "min": 1, "max": "x"}, "max"),
                             ("zipf", {"dist": "zipf"}, "dist")):
        yield _scenario(f"inf-{cid}", _set(base, "inference.input_len", spec), match)
    spec = {"draft_model": "llama-2-7b", "k": 4, "acceptance": 0.7}
    for key, values in (("k", [0, -1, NAN, "x"]), ("acceptance", [NAN, 1.5, -0.1, INF])):
        for value in values:
            yield _scenario(f"inf-spec.{key}={_tag(value)}",
                            _set(base, "inference.speculative", {**spec, key: value}),
                            f"speculative.{key}")
    for value in [NAN, 1.0, -0.5, INF, "x"]:
        yield _scenario(f"inf-hit_ratio={_tag(value)}",
                        _set(base, "inference.prefix_cache", {"hit_ratio": value}), "hit_ratio")
    lora = {"rank": 8, "adapters": 2}
    for key, value in (("rank", 0), ("rank", NAN), ("rank", "x"), ("adapters", 0),
                       ("adapters", -1), ("targets", "qkv"), ("targets", []), ("targets", ["zz"])):
        yield _scenario(f"inf-lora.{key}={_tag(value)}",
                        _set(base, "inference.lora", {**lora, key: value}), f"lora.{key}")
    for path, value in (("inference.precision", "fp64"), ("inference.kv_cache_dtype", "fp4")):
        yield _scenario(f"inf-{path}={value}", _set(base, path, value), _leaf(path))
    yield from _serving(base)


def _serving(base: dict) -> Iterator[Case]:
    for path in ("serving.max_num_seqs", "serving.max_batched_tokens", "serving.block_size"):
        for value in [NAN, 0, -1, "x", 1.5]:
            yield _scenario(f"srv-{path}={_tag(value)}", _set(base, path, value), _leaf(path))
    chunked = _set(base, "serving.scheduler", "chunked_prefill")
    del chunked["serving"]["max_batched_tokens"]
    for value in [0, NAN, "x"]:
        yield _scenario(f"srv-chunk_size={_tag(value)}", _set(chunked, "serving.chunk_size",
                                                             value), "chunk_size")
    floats = {"serving.step_overhead_ms": [NAN, INF, -1, "x"],
              "serving.step_overhead_per_seq_us": [NAN, INF, -1, "x"],
              "serving.frontend_ms": [NAN, INF, -1, "x"],
              "serving.tokenize_us_per_token": [NAN, INF, -1, "x"],
              "serving.stream_token_us": [NAN, INF, -1, "x"],
              "serving.api_request_us": [NAN, INF, -1, "x"],
              "serving.endpoint": ["", "sse", 1],
              "serving.gpu_memory_utilization": [NAN, 0, 1.5, -0.1, INF],
              "serving.slo.ttft_s": [NAN, INF, -1, 0, "x"],
              "serving.slo.tpot_s": [NAN, INF, -1, 0, "x"],
              "serving.arrival.qps": [NAN, INF, -2, 0, "x", True],
              "serving.arrival.num_requests": [NAN, 0, -5, 1.5, "x", 10**7],
              "serving.arrival.seed": [-1, "x", 1.5, NAN]}
    for path, values in floats.items():
        for value in values:
            yield _scenario(f"srv-{path}={_tag(value)}", _set(base, path, value), _leaf(path))
    gamma = _set(base, "serving.arrival.process", "gamma")
    for value in [NAN, 0, -1, INF]:
        yield _scenario(f"srv-cv={_tag(value)}", _set(gamma, "serving.arrival.cv", value), "cv")
    closed = _set(base, "serving.arrival", {"process": "closed", "num_requests": 20})
    for value in [0, -1, NAN, "x"]:
        yield _scenario(f"srv-concurrency={_tag(value)}",
                        _set(closed, "serving.arrival.concurrency", value), "concurrency")
    for path, value in (("serving.arrival.process", "weird"), ("serving.arrival.process", 5),
                        ("serving.arrival.rate", 3), ("serving.scheduler", "fifo"),
                        ("serving.preemption", "kill"), ("serving.slo.p99", 1)):
        yield _scenario(f"srv-{path}={_tag(value)}", _set(base, path, value),
                        f"{_leaf(path)}|unknown")
    yield from _traces(base)


def _traces(base: dict) -> Iterator[Case]:
    header = b"arrival_s,input_len,output_len\n"
    bodies = {"empty": (b"", "column|empty"), "header-only": (header, "no rows"),
              "missing-col": (b"arrival_s,input_len\n0,1\n", "missing columns"),
              "arrival-nan": (header + b"nan,10,10\n", "arrival_s"),
              "arrival-neg": (header + b"-1,10,10\n", "arrival_s"),
              "arrival-inf": (header + b"inf,10,10\n", "arrival_s"),
              "input-0": (header + b"0,0,10\n", "input_len"),
              "input-abc": (header + b"0,abc,10\n", "input_len"),
              "input-float": (header + b"0,1.5,10\n", "input_len"),
              "output-neg": (header + b"0,10,-3\n", "output_len"),
              "cached-neg": (b"arrival_s,input_len,output_len,cached_prefix\n0,10,10,-1\n",
                             "cached_prefix"),
              "short-row": (header + b"0,10\n", "output_len"),
              "latin1": (header + b"0,10,10 \xe9\n", "UTF-8"),
              "nul": (header + b"0,1\x000,10\n", "NUL"),
              "too-many-rows": (header + b"0,1,1\n" * 200_001, "rows")}
    for cid, (body, match) in bodies.items():
        doc = _set(base, "serving.arrival", {"trace": "t.csv"})
        yield Case(id=f"trace-{cid}", argv=("simulate", "{d}/s.yaml", *SIMULATE), match=match,
                   files={"s.yaml": _yaml(doc), "t.csv": body})
    for cid, value, match in (("int", 5, "trace"), ("missing", "none.csv", "no such file"),
                              ("dir", ".", "directory"), ("nul", "a\x00b.csv", "NUL")):
        yield _scenario(f"trace-path-{cid}", _set(base, "serving.arrival", {"trace": value}),
                        match)


def _bomb(prefix: bytes = b"") -> bytes:
    lines = [b'a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [".encode() + b",".join([f"*{prev}".encode()] * 9) + b"]")
    return prefix + b"\n".join(lines) + b"\n"


BAD_FILES: dict[str, tuple[bytes, str]] = {
    "latin1": (b"name: caf\xe9\n", "UTF-8"),
    "nul": (b"name: a\x00b\n", "NUL"),
    "utf16": ("name: x\n".encode("utf-16"), "NUL|UTF-8"),
    "empty": (b"", "mapping"),
    "list": (b"- 1\n- 2\n", "mapping"),
    "scalar": (b"42\n", "mapping"),
    "alias-bomb": (_bomb(), "alias bomb|expands"),
    "deep": (b"a: " + b"[" * 1000 + b"]" * 1000 + b"\n", "deeper"),
    "deep-map": (b"".join(b"  " * i + b"k:\n" for i in range(200)) + b"  " * 200 + b"v: 1\n",
                 "deeper"),
    "recursive": (b"a: &a [*a]\n", "refers to itself|alias"),
    "syntax": (b"name: [unclosed\n  x: y\n", "not valid YAML"),
    "tabs": (b"name:\n\t- x\n", "not valid YAML"),
}


def _files() -> Iterator[Case]:
    for cid, (body, match) in BAD_FILES.items():
        yield Case(id=f"scenario-file-{cid}", argv=("simulate", "{d}/s.yaml", *SIMULATE),
                   match=match, files={"s.yaml": body})
        yield Case(id=f"sweep-file-{cid}", argv=("profile", "expand", "{d}/w.yaml"),
                   match=match, files={"w.yaml": body})
        yield Case(id=f"hardware-file-{cid}", argv=("hardware", "show", "{d}/hw.yaml"),
                   match=match, files={"hw.yaml": body})
    for cid in ("latin1", "alias-bomb", "deep", "syntax"):
        body, match = BAD_FILES[cid]
        yield Case(id=f"search-file-{cid}", argv=("search", "{d}/s.yaml", *SIMULATE),
                   match=match, files={"s.yaml": body})
    json_bad = {"invalid": (b"{name: 1}", "not valid JSON"),
                "nan": (b'{"name": NaN}', "NaN"),
                "infinity": (b'{"name": Infinity}', "Infinity"),
                "deep": (b"[" * 100_000 + b"]" * 100_000, "deeper"),
                "list": (b"[1, 2]", "mapping|object"),
                "latin1": (b'{"name": "caf\xe9"}', "UTF-8")}
    for cid, (body, match) in json_bad.items():
        yield Case(id=f"scenario-json-{cid}", argv=("simulate", "{d}/s.json", *SIMULATE),
                   match=match, files={"s.json": body})
    long_path = "{d}/" + "a" * 100_000 + ".yaml"
    for cmd in (("simulate",), ("search",), ("profile", "expand"), ("hardware", "show"),
                ("models", "show")):
        tag = "-".join(cmd)
        yield Case(id=f"path-missing-{tag}", argv=(*cmd, "{d}/none.yaml"),
                   match="no such|unknown")
        yield Case(id=f"path-long-{tag}", argv=(*cmd, long_path), match="characters")
        yield Case(id=f"path-nul-{tag}", argv=(*cmd, "{d}/a\x00b.yaml"), match="NUL")
        yield Case(id=f"path-component-{tag}", argv=(*cmd, "{d}/" + "b" * 300 + ".yaml"),
                   match="255|no such|unknown")
    yield Case(id="path-dir-simulate", argv=("simulate", "{d}", *SIMULATE),
               match="directory|folder")


def _sweeps() -> Iterator[Case]:
    base = _load(DATA / "sweeps" / "cpu-smoke.yaml")
    entry = next(e for e in base["families"] if "grid" in e.get("shapes", {}))
    one = {**base, "families": [entry]}

    def sweep(cid: str, doc: Any, match: str, cmd: tuple[str, ...] = ("profile", "expand")
              ) -> Case:
        return Case(id=f"sweep-{cid}", argv=(*cmd, "{d}/w.yaml"), match=match,
                    files={"w.yaml": _yaml(doc)})

    yield sweep("families-missing", {"name": "x"}, "families")
    yield sweep("families-empty", {**base, "families": []}, "families")
    yield sweep("families-map", {**base, "families": {"a": 1}}, "families")
    yield sweep("unknown-family", {**one, "families": [{**entry, "family": "conv"}]}, "family")
    yield sweep("dtypes-str", {**one, "families": [{**entry, "dtypes": "bf16"}]}, "dtypes")
    yield sweep("dtype-unknown", {**one, "families": [{**entry, "dtypes": ["fp64x"]}]}, "dtypes")
    yield sweep("backend-unknown", {**one, "families": [{**entry, "backends": ["cudnn9"]}]},
                "backends")
    yield sweep("device", {**one, "device": "tpu"}, "device")
    yield sweep("unknown-top", {**one, "owner": "me"}, "owner")
    yield sweep("two-kinds", {**one, "families": [{**entry, "shapes": {
        **entry["shapes"], "list": [{"m": 1}]}}]}, "shapes")
    huge = {"m": list(range(1, 201)), "n": list(range(1, 201)), "k": list(range(1, 201))}
    gemm = {"family": "gemm", "dtypes": ["fp32"], "shapes": {"grid": huge}}
    yield sweep("grid-8M", {"families": [gemm]}, "8,000,000")
    yield sweep("grid-8M-run", {"families": [gemm]}, "8,000,000",
                ("profile", "run", "--db", "{d}/store.duckdb", "--no-progress"))
    sample = {"family": "gemm", "dtypes": ["fp32"],
              "shapes": {"sample": {"count": 10**9, "ranges": {"m": [1, 64], "n": [1, 64],
                                                               "k": [1, 64]}}}}
    yield sweep("sample-1e9", {"families": [sample]}, "count")
    for key, value in (("count", 0), ("count", "x"), ("seed", "x"), ("log", "yes")):
        bad = copy.deepcopy(sample)
        bad["shapes"]["sample"].update({"count": 10, key: value})
        yield sweep(f"sample-{key}={_tag(value)}", {"families": [bad]}, key)
    for key, value in (("warmup_ms", NAN), ("measure_ms", -1), ("measure_ms", INF),
                       ("min_reps", 0), ("max_reps", "x"), ("warmup_ms", True), ("speed", 1)):
        yield sweep(f"budget-{key}={_tag(value)}", {**one, "budget": {key: value}}, key)
    for value in (NAN, -5, "x", 0):
        listed = {"family": "gemm", "dtypes": ["fp32"],
                  "shapes": {"list": [{"m": value, "n": 8, "k": 8}]}}
        yield sweep(f"list-m={_tag(value)}", {"families": [listed]}, r"\bm\b")
    yield Case(id="sweep-run-alias-bomb", argv=("profile", "run", "{d}/w.yaml", "--db",
                                                "{d}/store.duckdb", "--no-progress"),
               match="alias bomb|expands", files={"w.yaml": _bomb()})
    for shard in ("x", "5/2", "-1/2", "1/0"):
        yield Case(id=f"sweep-shard={shard}", argv=(
            "profile", "expand", str(DATA / "sweeps" / "cpu-smoke.yaml"), "--shard", shard),
            match="shard")


def _hardware() -> Iterator[Case]:
    base = _load(DATA / "hardware" / "h100-sxm.yaml")
    muts = {"memory.capacity_gib": [NAN, -1, "x", INF], "memory.bandwidth_gb_per_s": [NAN, 0],
            "compute_units": [NAN, "x"], "l2_mb": [-1, INF], "peak_dense_tflops.bf16": [NAN, INF,
                                                                                         "x"],
            "interconnect.intra_node.bandwidth_gb_per_s": [NAN, -1],
            "interconnect.inter_node.latency_us": [NAN, -3],
            "efficiency.gemm": [NAN, "x", -0.5], "node.gpus_per_node": [NAN, "x"],
            "memory.type": [3], "node.network": [[1]], "notes": [{"a": 1}],
            "vendor_extra": [1]}
    for path, values in muts.items():
        for value in values:
            doc = _set(base, path, value)
            yield Case(id=f"hw-{path}={_tag(value)}", argv=("hardware", "show", "{d}/hw.yaml"),
                       match=f"{_leaf(path)}", files={"hw.yaml": _yaml(doc)})
    bad = _set(base, "memory.capacity_gib", NAN)
    scen = _set(_load(DATA / "scenarios" / "gpt2-dp8-a100.yaml"), "hardware.gpu", "hw.yaml")
    scen["hardware"]["gpu"] = "{d}/hw.yaml"
    yield Case(id="hw-via-scenario", argv=("simulate", "{d}/s.yaml", *SIMULATE),
               match="capacity_gib", files={"hw.yaml": _yaml(bad), "s.yaml": _yaml(scen)})


def _models() -> Iterator[Case]:
    base = json.loads((DATA / "models" / "llama-2-7b.json").read_text())
    muts = {"hidden_size": [-1, 0, "x", 1.5, None, True], "num_hidden_layers": [0, -2, "x"],
            "num_attention_heads": [0, "x"], "vocab_size": [-1], "intermediate_size": ["x"],
            "num_key_value_heads": [0]}
    for key, values in muts.items():
        for value in values:
            doc = {**base, key: value}
            yield Case(id=f"model-{key}={_tag(value)}", argv=("models", "show", "{d}/m.json"),
                       match=key, files={"m.json": json.dumps(doc).encode()})
    files = {"nan": (json.dumps({**base, "rope_theta": NAN}).encode(), "NaN"),
             "infinity": (json.dumps({**base, "hidden_size": INF}).encode(), "Infinity"),
             "list": (b"[1]", "object"), "latin1": (b'{"a": "\xe9"}', "UTF-8"),
             "deep": (b"[" * 5000 + b"]" * 5000, "deeper"), "invalid": (b"{", "not valid JSON"),
             "empty": (b"", "not valid JSON"), "nul": (b'{"a": 1}\x00', "NUL")}
    for cid, (body, match) in files.items():
        yield Case(id=f"model-file-{cid}", argv=("models", "show", "{d}/m.json"), match=match,
                   files={"m.json": body})
    for cid in ("nan", "latin1", "deep", "invalid"):
        body, match = files[cid]
        yield Case(id=f"hf-config-{cid}", argv=("simulate-torch", "--hf-config", "{d}/m.json"),
                   match=match, files={"m.json": body})
    yield Case(id="hf-config-long", argv=("simulate-torch", "--hf-config", "x" * 100_000),
               match="characters")
    scen = _load(DATA / "scenarios" / "gpt2-dp8-a100.yaml")
    scen["model"] = "m.json"
    yield Case(id="model-via-scenario", argv=("simulate", "{d}/s.yaml", *SIMULATE),
               match="NaN", files={"m.json": files["nan"][0], "s.yaml": _yaml(scen)})


def _flags() -> Iterator[Case]:
    scen = str(DATA / "scenarios" / "gpt2-dp8-a100.yaml")
    serve = str(DATA / "scenarios" / "llama2-7b-single-a100.yaml")
    search = str(DATA / "scenarios" / "search" / "llama3-70b-1024-h100.yaml")
    sweep = str(DATA / "sweeps" / "cpu-smoke.yaml")
    flags = [
        (("search", search, "--workers", "0"), "workers"),
        (("search", search, "--workers", "-1"), "workers"),
        (("search", search, "--workers", "abc"), "workers"),
        (("search", search, "--top", "0"), "top"),
        (("search", search, "--usd-per-gpu-hour", "nan"), "usd-per-gpu-hour"),
        (("search", search, "--usd-per-gpu-hour", "-1"), "usd-per-gpu-hour"),
        (("search", search, "--plot", "{d}/x.gif"), "suffix"),
        (("search", search, "--csv", "{d}/x.txt"), "suffix"),
        (("search", search, "--csv", "/proc/x.csv"), "not writable|permission"),
        (("search", search, "--plot", "{d}/nodir/x.png"), "does not exist"),
        (("search", search, "--objective", "speed"), "objective"),
        (("simulate", scen, "--plot", "{d}/x.gif"), "suffix"),
        (("simulate", scen, "--plot", "/proc/x.png"), "not writable|permission"),
        (("simulate", scen, "--trace", "{d}/nodir/t.json"), "does not exist"),
        (("simulate", scen, "--trace", "{d}"), "folder"),
        (("simulate", scen, *SIMULATE, "--trace", "/dev/full"), "no space left"),
        (("simulate", serve, *SIMULATE, "--trace", "/dev/full"), "no space left"),
        (("simulate", scen, "--emit-missing", "/proc/need.yaml"), "not writable|permission"),
        (("simulate", scen, "--plot", "{d}/" + "p" * 100_000 + ".png"), "characters"),
        (("simulate", scen, "--set", "training.parallel.dp"), "path=value"),
        (("simulate", scen, "--set", "=3"), "empty path"),
        (("simulate", scen, "--set", "name.x=1"), "not a mapping"),
        (("simulate", scen, *SIMULATE, "--set", "training.parallel.dp=-4"), "dp"),
        (("simulate", scen, *SIMULATE, "--set", "training.parallel.tp=.nan"), "tp"),
        (("simulate", scen, *SIMULATE, "--set",
          "training.x=" + _bomb().decode().replace("\n", "\n")), "alias bomb|expands"),
        (("simulate", scen, "--bogus"), "bogus"),
        (("train", "--configs", "0"), "configs"),
        (("train", "--configs", "-3"), "configs"),
        (("train", "--max-train-rows", "-5"), "max-train-rows"),
        (("train", "--seed", "-1"), "seed"),
        (("train", "all", "--min-rows", "0"), "min-rows"),
        (("train", "report", "--write-readme", "{d}/x.txt"), "suffix"),
        (("train", "--hardware", "h100-sxm"), "--op"),
        (("profile", "run", sweep, "--threads", "0"), "threads"),
        (("profile", "collectives", sweep, "--nproc", "0"), "nproc"),
        (("profile", "collectives", sweep, "--nproc", "2", "--master-port", "70000"),
         "master-port"),
        (("profile", "submit", sweep, "--array-size", "0"), "array-size"),
        (("profile", "submit", sweep, "--timeout", "-1"), "timeout"),
        (("profile", "submit", sweep, "--gpus-per-task", "0"), "gpus-per-task"),
        (("simulate-torch", "--batch", "0"), "batch"),
        (("simulate-torch", "--dp", "-4"), "dp"),
        (("simulate-torch", "--seq-len", "0"), "seq-len"),
        (("validate", "cpu", "--repeats", "0"), "repeats"),
        (("validate", "cpu", "--threads", "0"), "threads"),
        (("validate", "ddp", "--width", "0"), "width"),
        (("hardware", "calibrate", "--budget-s", "0"), "budget-s"),
        (("hardware", "calibrate", "--budget-s", "nan"), "budget-s"),
        (("hardware", "calibrate", "--out", "{d}/x.txt"), "suffix"),
        (("db", "export", "--parquet", "/etc/passwd"), "not a folder"),
        (("db", "curate", "--data-dir", "datasets", "--out", "/proc/x"), "not writable"),
        (("db", "import-parquet", "{d}/a\x00b.parquet"), "NUL"),
        (("db", "compare", "{d}/none", "{d}/none2"), "no such"),
        (("db", "merge", "{d}/none.duckdb"), "no such"),
        (("suite", "--dir", "{d}/nodir"), "no such"),
        (("nosuchcommand",), "nosuchcommand"),
    ]
    for i, (argv, match) in enumerate(flags):
        tag = "-".join(a[:12] for a in argv if not a.startswith(("/", "{"))
                       and len(a) < 40)[:50]
        yield Case(id=f"flag-{i:02d}-{tag}", argv=argv, match=match)


def _search() -> Iterator[Case]:
    base = _load(DATA / "scenarios" / "gpt2-dp8-a100.yaml")
    muts = [("training.parallel.tp", {"min": 1, "max": 2**40}, "tp.max"),
            ("training.parallel.tp", list(range(1, 2002)), "listed values"),
            ("training.parallel.pp", {"min": 0, "max": 4}, "pp.min"),
            ("training.parallel.pp", {"min": "a", "max": 4}, "pp.min"),
            ("training.parallel.tp", [], "empty list"),
            ("training.parallel.tp", {"lo": 1}, "range"),
            ("training.parallel.tp", [3], "none of the"),
            ("training.micro_batch", [[1, 2]], "scalars|none of the")]
    for path, value, match in muts:
        yield _scenario(f"search-{path}={_tag(value)}", _set(base, path, value), match,
                        command="search")
    big = _set(base, "training.parallel", {k: list(range(1, 40)) for k in ("tp", "pp", "cp",
                                                                           "vpp")})
    big["training"]["micro_batch"] = list(range(1, 40))
    yield _scenario("search-space-too-big", big, "candidate layouts", command="search")


def _serving_search() -> Iterator[Case]:
    base = _load(DATA / "scenarios" / "search" / "serving-llama3-70b-h100.yaml")
    muts = [("search.tp", [0]), ("search.tp", ["x"]), ("search.tp", [NAN]), ("search.pp", 2),
            ("search.max_num_seqs", []), ("search.chunk_size", [-1]),
            ("search.precision", [5]), ("search.disaggregated", [1]),
            ("search.batch", [1]), ("search.tp", list(range(1, 1100))),
            ("hardware.num_gpus", "x"), ("hardware.num_gpus", NAN)]
    for path, value in muts:
        leaf = "batch" if path.endswith("batch") else _leaf(path)
        yield _scenario(f"serving-search-{path}={_tag(value)}", _set(base, path, value),
                        re.escape(leaf), command="search")
    wide = _set(base, "search", {k: list(range(1, 60)) for k in ("tp", "pp", "ep",
                                                                 "max_num_seqs")})
    yield _scenario("serving-search-too-big", wide, "candidate configurations", command="search")


def _parquet() -> Iterator[Case]:
    yield Case(id="parquet-garbage-compare", argv=("db", "compare", "{d}/a.parquet",
                                                   "{d}/a.parquet"),
               match="parquet|a.parquet", files={"a.parquet": b"PAR1 not really"})


def cases() -> list[Case]:
    """Every case, in a fixed order, ids unique."""
    out = [*_training(), *_inference(), *_files(), *_sweeps(), *_hardware(), *_models(),
           *_flags(), *_search(), *_serving_search(), *_parquet()]
    ids = [c.id for c in out]
    if len(ids) != len(set(ids)):
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        raise AssertionError(f"duplicate case ids: {dupes[:5]}")
    return out


def main(out_dir: str) -> None:
    """Write every case as a folder: its files plus argv.json (for running outside pytest)."""
    root = Path(out_dir)
    for i, case in enumerate(cases()):
        folder = root / f"{i:04d}"
        folder.mkdir(parents=True, exist_ok=True)
        for name, body in case.files.items():
            (folder / name).write_bytes(body)
        (folder / "argv.json").write_text(json.dumps(
            {"id": case.id, "argv": list(case.argv), "match": case.match}))


if __name__ == "__main__":
    main(sys.argv[1])
