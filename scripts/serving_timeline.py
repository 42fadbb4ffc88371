# SPDX-License-Identifier: Apache-2.0
"""Where a serving-corpus row's predicted TTFT goes: the row's scenario (as `llmsim validate
published --kind serving` builds it) run with its steps recorded, then per row the measured
values, the predicted TTFT statistics, the mean split of TTFT into front end (client send to the
scheduler's queue), queueing (to the step that takes the first prefill chunk) and prefill (that
step to the first token), apart for the first wave (the first C requests of a closed loop, sent
together) and the later requests, which requests hold the slowest 5% (what a p95 reads), and
the first steps (start, end, prefill tokens, decoding sequences). Uses the store and champions
of LLMSIM_HOME.

Usage: python scripts/serving_timeline.py ROW_ID [ROW_ID ...] [--steps 12] [--max-prompts 300]
(e.g. ``silybench-qwen3-8b-h100/3/4``; ids as in the `--rows` CSV of the validation).
"""

from __future__ import annotations

import argparse

import numpy as np

from simulate.api import run
from simulate.validate.serving_corpus import load_corpus, row_scenario


def _split(lat: dict[str, np.ndarray], keep: np.ndarray) -> str:
    ready, admitted = lat["ready"][keep], lat["admitted"][keep]
    arrival, ttft = lat["arrival"][keep], lat["ttft"][keep]
    return (f"TTFT mean {ttft.mean() * 1e3:.1f} ms = front end {(ready - arrival).mean() * 1e3:.1f}"
            f" + queue {(admitted - ready).mean() * 1e3:.1f}"
            f" + prefill {(arrival + ttft - admitted).mean() * 1e3:.1f} (n={keep.sum()})")


def show(row_id: str, *, steps: int, max_prompts: int) -> None:
    rows = {r.id: r for r in load_corpus()}
    if row_id not in rows:
        raise SystemExit(f"unknown row id {row_id!r}")
    row = rows[row_id]
    out = run(row_scenario(row, max_prompts=max_prompts), trace=True, latencies=True)
    lat = out.latencies
    if lat is None or "admitted" not in lat:
        raise SystemExit(f"{row_id}: no per-request times (does not fit, or not a serving run)")
    ttft = lat["ttft"] * 1e3
    first_wave = lat["request_id"] < max(row.concurrency, 1)
    print(f"== {row_id}: {row.mode}, {row.concurrency} clients, {ttft.size} requests; "
          f"measured {dict(row.measured)}")
    print(f"  predicted TTFT p50 / p95 / p99 / mean: {np.percentile(ttft, 50):.1f} / "
          f"{np.percentile(ttft, 95):.1f} / {np.percentile(ttft, 99):.1f} / {ttft.mean():.1f} ms")
    print(f"  first wave: {_split(lat, first_wave)}")
    if (~first_wave).any():
        print(f"  later:      {_split(lat, ~first_wave)}")
    top = np.argsort(ttft)[-max(int(0.05 * ttft.size), 1):]
    print(f"  slowest 5%: {int(first_wave[top].sum())} of {top.size} are first-wave requests")
    records = out.inference.step_records if out.inference is not None else []
    for rec in records[:steps]:
        print(f"    step {rec.start_s * 1e3:9.1f} -> {rec.end_s * 1e3:9.1f} ms: "
              f"{rec.prefill_tokens:6d} prefill tokens, {rec.decode_seqs:4d} decodes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", nargs="+")
    ap.add_argument("--steps", type=int, default=12, help="first steps to list")
    ap.add_argument("--max-prompts", type=int, default=300)
    args = ap.parse_args()
    for row_id in args.rows:
        show(row_id, steps=args.steps, max_prompts=args.max_prompts)


if __name__ == "__main__":
    main()
