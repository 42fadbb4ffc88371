# SPDX-License-Identifier: Apache-2.0
"""What one serving step of a corpus row costs, operator by operator: the dense part and LM head
of a step of N tokens as the row's engine runs them (`simulate.inference.step_cost.DenseCost`,
graph replay and custom all-reduce included), each distinct operator with its count, price and
answering engine, then the decode-attention fit (c + a x seqs + b x keys) and the eager launch
time. For comparing a step's price with per-kernel measurements (e.g. AIConfigurator's tables).
Uses the store and champions of LLMSIM_HOME.

Usage: python scripts/serving_step_ops.py ROW_ID [--tokens 1] [--context 1000]
(e.g. ``sglang-cookbook-qwen3-235b-b200/0/0``; ids as in the `--rows` CSV of the validation).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from unittest import mock

import simulate.inference.run as inference_run
from simulate.api import run
from simulate.inference.dense_cost import DenseCost
from simulate.inference.step_cost import StepCostTables
from simulate.validate.serving_corpus import load_corpus, row_scenario


def row_tables(row_id: str) -> StepCostTables:
    """The step-cost tables the row's simulation builds (a short run, its first instance)."""
    rows = {r.id: r for r in load_corpus()}
    if row_id not in rows:
        raise SystemExit(f"unknown row id {row_id!r}")
    built: list[StepCostTables] = []
    original = inference_run.build_tables

    def capture(*args: object, **kwargs: object) -> StepCostTables:
        tables = original(*args, **kwargs)  # type: ignore[arg-type]
        built.append(tables)
        return tables

    with mock.patch.object(inference_run, "build_tables", capture):
        run(row_scenario(rows[row_id], max_prompts=4))
    return built[0]


def op_prices(dense: DenseCost, tokens: int) -> Iterator[tuple[str, float, float, str]]:
    """(operator, count, seconds each, engine) of a step's dense part and LM head, priced as
    `DenseCost.prewarm` prices them (`DenseCost.priced_ops`)."""
    for part in ("dense", "lm"):
        for _, op, n, seconds, engine in dense.priced_ops(part, [tokens]):
            yield repr(op), float(n), seconds, engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("row")
    ap.add_argument("--tokens", type=int, default=1, help="tokens in the step (decode: seqs)")
    ap.add_argument("--context", type=int, default=1000, help="keys per sequence (decode)")
    args = ap.parse_args()
    tables = row_tables(args.row)
    merged: dict[tuple[str, str], list[float]] = {}
    for name, n, each, engine in op_prices(tables.dense, args.tokens):
        slot = merged.setdefault((name, engine), [0.0, each])
        slot[0] += n
    for (name, engine), (n, each) in sorted(merged.items(), key=lambda kv: -kv[1][0] * kv[1][1]):
        print(f"{n * each * 1e3:8.3f} ms  {n:6.0f} x {each * 1e6:7.2f} us  {engine:9s} {name}")
    dense, lm = tables.dense.get("dense", args.tokens)[0], tables.dense.get("lm", args.tokens)[0]
    keys = args.tokens * (args.context + 1)
    attn = (tables.decode_per_step_s + args.tokens * tables.decode_per_seq_s
            + keys * tables.decode_per_kv_s)
    print(f"dense {dense * 1e3:.3f} ms + LM head {lm * 1e3:.3f} ms + decode attention "
          f"{attn * 1e3:.3f} ms ({args.tokens} x {args.context} keys) = "
          f"{(dense + lm + attn) * 1e3:.3f} ms; dense + LM-head kernels per step {tables.dense.kernels():.0f}; "
          f"eager launch {tables.eager_step_s * 1e3:.1f} ms, graphs up to "
          f"{tables.graph_max_tokens} tokens")


if __name__ == "__main__":
    main()
