# SPDX-License-Identifier: Apache-2.0
"""Score some serving-corpus rows with one `serving.*` field forced to each of several values:
what an engine setting would move before it goes into a preset (datasets/validation/serving/
README.md, "The API server's token streaming"). Prints, per row, the signed error % of each
measure at each value; rows as `llmsim validate published --kind serving` scores them (the
store and champions of LLMSIM_HOME, `--max-prompts` as given).

Usage: python scripts/serving_override.py SOURCE FIELD V1,V2,... [--min-clients N]
[--max-clients N] [--engine E] [--gpu G] [--max-prompts 300] [--frontend-ms-less MS]
(e.g. ``silybench stream_token_us 0,40,76.3 --min-clients 128``; offline rows count as 0
clients). FIELD ``hardware.gpu`` takes GPU names instead (a what-if on the GPU a source ran,
e.g. ``gpustack-performance-lab hardware.gpu h100-sxm,h100-pcie --gpu h100-sxm --max-gpus 1``).
"""

from __future__ import annotations

import argparse
from typing import Any

from simulate.validate.published_serving import score_row, simulate_json
from simulate.validate.serving_corpus import load_corpus


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source")
    ap.add_argument("field")
    ap.add_argument("values")
    ap.add_argument("--min-clients", type=int, default=0)
    ap.add_argument("--max-clients", type=int, default=10**9)
    ap.add_argument("--engine", default="")
    ap.add_argument("--gpu", default="", help="only rows on this GPU")
    ap.add_argument("--max-gpus", type=int, default=10**9, help="only rows on at most N GPUs")
    ap.add_argument("--max-prompts", type=int, default=300)
    ap.add_argument("--frontend-ms-less", type=float, default=None, metavar="MS",
                    help="also set frontend_ms to MS less the value (us): a serial part taken "
                         "out of the one-client front-end latency rather than added to it")
    args = ap.parse_args()
    section, _, key = args.field.rpartition(".")
    section = section or "serving"
    values: list[Any] = [v if section == "hardware" else float(v)
                         for v in args.values.split(",")]
    rows = [r for r in load_corpus() if r.source == args.source
            and args.min_clients <= (r.concurrency or 0) <= args.max_clients
            and (not args.engine or r.engine == args.engine)
            and (not args.gpu or r.gpu == args.gpu) and r.num_gpus <= args.max_gpus]
    base = simulate_json(use_store=True, use_predictors=True)
    print(f"row | clients | {' | '.join(f'{args.field}={_show(v)}' for v in values)}")
    errors: dict[Any, dict[str, list[float]]] = {v: {} for v in values}
    for row in rows:
        cells = []
        for value in values:
            def predict(doc: dict[str, Any], value: Any = value) -> Any:
                doc[section][key] = value
                if args.frontend_ms_less is not None:
                    doc["serving"]["frontend_ms"] = args.frontend_ms_less - value / 1e3
                return base(doc)

            err = score_row(row, predict, max_prompts=args.max_prompts).get("error", {})
            for k, e in err.items():
                errors[value].setdefault(k, []).append(e * 100)
            cells.append(" ".join(f"{k.removesuffix('_ms')} {err[k] * 100:+.0f}"
                                  for k in sorted(err)))
        print(f"{row.id} | {row.concurrency or 0} | {' | '.join(cells)}", flush=True)
    for value in values:  # MAPE and signed mean over the rows, per measure
        print(f"{args.field}={_show(value)}: " + "; ".join(
            f"{k.removesuffix('_ms')} MAPE {sum(map(abs, e)) / len(e):.1f} signed "
            f"{sum(e) / len(e):+.1f} (n={len(e)})" for k, e in sorted(errors[value].items())))


if __name__ == "__main__":
    main()
