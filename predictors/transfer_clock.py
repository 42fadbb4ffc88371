# SPDX-License-Identifier: Apache-2.0
"""The sustained-clock cap of the transfer target's compute bound.

A datasheet tensor peak is SMs x FLOP per SM per clock x the boost clock (the figures each
hardware YAML's ``clocks`` comment derives it from: A100 108 x 2,048 x 1.41 GHz, L40S 142 x
1,024 x 2.49 GHz, H100 132 x 4,096 x 1.83 GHz, B200 148 x 8,192 x 1.86 GHz). Under dense
tensor work a GPU does not hold that clock: it settles where the board's power limit allows
(our H200 at 700 W: 1,440-1,455 MHz under back-to-back bf16 GEMMs against its 1,980 MHz boost,
``datasets/measurements/llmsim/h200/sustained/smi.csv``; Chips and Cheese saw the 350 W H100
PCIe drop to 1,395 MHz of 1,755 while microbenchmarking, "Nvidia's H100: Funny L2, and Tons of
Bandwidth", 2023). The store's large TensorRT-LLM bf16 GEMMs reach 0.83 / 0.75 / 0.66 / 0.54
of the boost-clock peak on A100 / H100 / B200 / L40S, i.e. an SM clock of 1.18 / 1.38 / 1.22 /
1.35 GHz at the whitepaper FLOP per clock: the highest boost clock (L40S's 2.52 GHz) gives the
lowest share, and trees cannot extrapolate a share below every training GPU's. So the
compute bound of the target's denominator is taken at min(peak clock, cap), the peak clock being
the one the datasheet peak is stated at (``clocks.peak_mhz``, else the boost: H100's 989 TF is at
1.83 GHz, not its 1.98 GHz boost; `tensor_clock_hz`): one cap, fitted on the training GPUs only
(`fit_clock_cap`), as the clock above which a faster-clocked peak bought the training GPUs no
more sustained tensor throughput. A GPU whose peak clock is under the cap keeps its datasheet
peak. Not a per-GPU figure (none is published for most of them, and a column per GPU
names the GPU, predictors/README.md); not the base clock (L40S's 1,110 MHz is below the 1.35 GHz
it sustains; the base-clock derating was tried and not kept, predictors/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from analytical.hardware import HardwareSpec

# candidate caps: 1.00 GHz up to the fastest training GPU's peak clock, 10 MHz apart
_CAP_FROM_HZ = 1.0e9
_CAP_STEP_HZ = 10e6
# rows that judge the cap: bound by the tensor peak (compute bound above the memory bound) and
# long enough that no launch floor (at most 17 us in the store) weighs in
_COMPUTE_BOUND_MIN_S = 100e-6


def sm_clock_hz(hw: HardwareSpec, reference_hz: float) -> float:
    """``hw``'s boost clock (``clocks.boost_mhz``), or ``reference_hz`` (the median over the
    model's training GPUs) where its YAML states none: the launch floor's clock
    (`predictors.transfer.launch_floor`)."""
    return hw.boost_clock_hz or reference_hz


def tensor_clock_hz(hw: HardwareSpec) -> float:
    """The SM clock ``hw``'s datasheet tensor peak is stated at (``clocks.peak_mhz``), else
    its boost clock (0 where neither is stated)."""
    return hw.peak_clock_hz or hw.boost_clock_hz


def clock_derate(boost_hz: np.ndarray | float, cap_hz: float) -> np.ndarray:
    """clock / min(clock, cap), the clock being the peak's (`tensor_clock_hz`): how much
    longer the compute bound takes at the capped clock (1 where the clock or the cap is not
    stated, or the clock is under the cap)."""
    boost = np.asarray(boost_hz, dtype=np.float64)
    if cap_hz <= 0:
        return np.ones_like(boost)
    return np.where(boost > cap_hz, boost / cap_hz, 1.0)


def capped_roofline(ideal_s: np.ndarray, compute_s: np.ndarray, boost_hz: np.ndarray | float,
                    cap_hz: float) -> np.ndarray:
    """The roofline ``ideal_s`` (max of the compute bound ``compute_s`` at the datasheet peak
    and the memory bound) with its compute bound at the capped clock."""
    out: np.ndarray = np.maximum(ideal_s, compute_s * clock_derate(boost_hz, cap_hz))
    return out


def fit_clock_cap(gpu: np.ndarray, stacks: np.ndarray, latency_s: np.ndarray,
                  ideal_s: np.ndarray, compute_s: np.ndarray, boost_hz: np.ndarray) -> float:
    """The cap (Hz) that makes the training GPUs' compute-bound rows the most alike (``boost_hz``:
    each row's `tensor_clock_hz`): for each
    candidate, the variance across GPUs of each GPU's median ln(latency / capped compute
    bound), summed over the stacks measured on two or more GPUs; the highest cap on a tie (no
    cap where no stack tells). 0.0 (no cap) for a family without tensor compute."""
    rows = (compute_s >= ideal_s) & (compute_s >= _COMPUTE_BOUND_MIN_S) & (boost_hz > 0)
    medians: dict[str, list[tuple[float, float]]] = {}
    for stack, name in sorted({(str(s), str(g)) for s, g in zip(stacks[rows], gpu[rows],
                                                                strict=True)}):
        mine = rows & (stacks == stack) & (gpu == name)
        medians.setdefault(stack, []).append(
            (float(np.median(np.log(latency_s[mine] / compute_s[mine]))),
             float(boost_hz[mine][0])))
    groups = [g for g in medians.values() if len(g) >= 2]
    if not groups:
        return 0.0
    top = max(clock for g in groups for _, clock in g)
    best, best_cap = np.inf, 0.0
    for cap in _candidates(top):
        spread = sum(float(np.var([m - np.log(clock_derate(clock, cap)) for m, clock in g]))
                     for g in groups)
        if spread < best - 1e-12:
            best, best_cap = spread, cap
    return 0.0 if best_cap >= top else best_cap


def _candidates(top_hz: float) -> Sequence[float]:
    """Descending, so that the first of equal spreads (the highest cap) is kept."""
    n = int((top_hz - _CAP_FROM_HZ) // _CAP_STEP_HZ)
    return [top_hz] + [_CAP_FROM_HZ + i * _CAP_STEP_HZ for i in range(n, -1, -1)]
