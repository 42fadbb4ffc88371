# SPDX-License-Identifier: Apache-2.0
"""How far NCCL's own cost model (`analytical.nccl.nccl_time`, the analytical collective price
and the collective transfer target's denominator) is from the store's measured collectives, per
GPU and stack, and (``--groups``) per (kind, dtype, group size, ranks per node, size band) with
its signed median (+ = predicted too slow) and the (algorithm, protocol) it chose; ``--busbw``:
per (GPU, stack, kind, group size, ranks per node) the measured and modelled bus bandwidth of
the largest message (nccl-tests' busbw: bus bytes / time), the smallest message's measured and
modelled time, and NCCL's intra-node transport (`analytical.nccl.intra_transport`); ``--ramp``:
per such group the measured and modelled bus bandwidth at the sizes nearest 1, 4, 16, 64 and
512 MiB (how fast each machine's bandwidth approaches NCCL's with the message size). Repeated op
keys are folded to their median first, as the transfer data does.

Usage: python scripts/nccl_model_error.py [--db FILE] [--groups] [--busbw] [--ramp]
"""

from __future__ import annotations

import argparse
import math
from collections import Counter, defaultdict

import numpy as np

from analytical.dtypes import parse_dtype
from analytical.hardware import get_hardware
from analytical.nccl import intra_transport, nccl_choice
from analytical.ops import CollectiveKind, CollectiveSpec
from profiler.store import open_for_reading

_QUERY = """select hardware, case when provenance like '%nccl%' then 'nccl' else 'vidur' end,
    kind, dtype, group_size, ranks_per_node, size_bytes, median(median_s)
    from collective where status = 'ok' group by all"""
_RAMP_MIB = (1, 4, 16, 64, 512)
Point = tuple[int, float, float, float, str]  # size, bus bytes, measured s, modelled s, transport


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default=None)
    parser.add_argument("--groups", action="store_true")
    parser.add_argument("--busbw", action="store_true")
    parser.add_argument("--ramp", action="store_true")
    args = parser.parse_args()
    with open_for_reading(args.db, required=True) as store:  # type: ignore[union-attr]
        rows = store.connection.execute(_QUERY).fetchall()
    per_gpu, per_stack = defaultdict(list), defaultdict(list)
    groups: dict[tuple[object, ...], list[tuple[float, str]]] = defaultdict(list)
    ends: dict[tuple[object, ...], list[Point]] = defaultdict(list)
    for hw, stack, kind, dtype, n, local, size, measured in rows:
        spec = CollectiveSpec(kind=CollectiveKind(kind), size_bytes=int(size), group_size=int(n),
                              ranks_per_node=int(local), dtype=parse_dtype(dtype))
        best = nccl_choice(spec, get_hardware(hw))
        signed = (best.seconds - measured) / measured * 100
        per_gpu[hw].append(abs(signed))
        per_stack[(hw, stack)].append(abs(signed))
        band = "small" if size <= 65536 else "mid" if size < 16 << 20 else "large"
        groups[(hw, stack, kind, dtype, n, local, band)].append((signed, best.name))
        if dtype == "fp16":
            ends[(hw, stack, kind, n, local)].append(
                (int(size), spec.bytes, measured, best.seconds,
                 str(intra_transport(spec, get_hardware(hw)))))
    print("gpu | stack | n | NCCL model MAPE %")
    for (hw, stack), errors in sorted(per_stack.items()):
        print(f"{hw} | {stack} | {len(errors)} | {np.mean(errors):.2f}")
    for hw, errors in sorted(per_gpu.items()):
        print(f"{hw} | all | {len(errors)} | {np.mean(errors):.2f}")
    print(f"median over GPUs: {np.median([np.mean(e) for e in per_gpu.values()]):.2f}")
    if args.groups:
        for key, values in sorted(groups.items()):
            chosen = Counter(name for _, name in values).most_common(2)
            print(*key, f"signed median {np.median([v for v, _ in values]):+.1f} "
                  f"n={len(values)}", chosen)
    if args.busbw:
        print("gpu stack kind n local transport | largest: MB, busbw GB/s measured / model | "
              "smallest: bytes, us measured / model")
        for key, points in sorted(ends.items()):
            (big, bus, t, t_model, transport), small = max(points), min(points)
            print(*key, transport, f"| {big >> 20} {bus / t / 1e9:.1f} / {bus / t_model / 1e9:.1f}"
                  f" | {small[0]} {small[2] * 1e6:.1f} / {small[3] * 1e6:.1f}")
    if args.ramp:
        _print_ramp(ends)


def _print_ramp(ends: dict[tuple[object, ...], list[Point]]) -> None:
    """Measured / modelled bus bandwidth per group at the sizes nearest `_RAMP_MIB`."""
    print("gpu stack kind n local | MiB: bus bandwidth GB/s measured / modelled")
    for key, points in sorted(ends.items()):
        picks = sorted({min(points, key=lambda p: abs(math.log(p[0] / (mib << 20))))
                        for mib in _RAMP_MIB})
        print(*key, "| " + " | ".join(f"{size / (1 << 20):.0f}: {bus / t / 1e9:.0f} / "
                                      f"{bus / t_model / 1e9:.0f}"
                                      for size, bus, t, t_model, _ in picks))


if __name__ == "__main__":
    main()
