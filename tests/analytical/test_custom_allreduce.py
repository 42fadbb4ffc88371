# SPDX-License-Identifier: Apache-2.0
"""The serving engines' custom all-reduce: where it applies (vLLM's conditions), which kernel
runs (one-shot / two-shot thresholds of custom_all_reduce.cuh), and its price against the
small-message latencies of sgl-project/sglang PR #2904 and NCCL's model."""

from __future__ import annotations

import pytest

from analytical.custom_allreduce import applies, custom_all_reduce_time, one_shot
from analytical.hardware import get_hardware
from analytical.nccl import nccl_time
from analytical.ops import CollectiveKind, CollectiveSpec

MIB = 2**20
VLLM_MAX = 8 * MIB


def _ar(size: int, n: int, rpn: int | None = None,
        kind: CollectiveKind = CollectiveKind.ALL_REDUCE) -> CollectiveSpec:
    return CollectiveSpec(kind=kind, size_bytes=size, group_size=n,
                          ranks_per_node=n if rpn is None else rpn)


def test_applies_only_in_one_nvlink_node_at_supported_sizes_under_the_buffer():
    h100 = get_hardware("h100-sxm")
    assert all(applies(_ar(16384, n), h100, VLLM_MAX) for n in (2, 4, 6, 8))
    assert not applies(_ar(16384, 3), h100, VLLM_MAX)  # world size not supported
    assert not applies(_ar(16384, 16, 8), h100, VLLM_MAX)  # two nodes
    assert not applies(_ar(VLLM_MAX, 8), h100, VLLM_MAX)  # inp_size < max_size
    assert not applies(_ar(16384, 8), h100, 0.0)  # engine without one (or disabled)
    assert not applies(_ar(16384, 8, kind=CollectiveKind.ALL_GATHER), h100, VLLM_MAX)
    assert not applies(_ar(16384, 4), get_hardware("l40s"), VLLM_MAX)  # PCIe only
    nvl = get_hardware("h100-nvl")  # NVLink bridge between pairs, PCIe beyond
    assert applies(_ar(16384, 2), nvl, VLLM_MAX)
    assert not applies(_ar(16384, 4), nvl, VLLM_MAX)


def test_one_shot_below_the_thresholds_of_the_kernel_dispatch():
    assert one_shot(_ar(4 * MIB, 2))  # two ranks: always one stage
    assert one_shot(_ar(511 * 1024, 4)) and not one_shot(_ar(512 * 1024, 4))
    assert one_shot(_ar(255 * 1024, 8)) and not one_shot(_ar(256 * 1024, 8))


def test_small_messages_cost_what_the_copy_free_kernel_measures_and_beat_ncclmodel():
    h100 = get_hardware("h100-sxm")
    measured_us = {2: (3.7, 3.9), 4: (3.7, 4.8), 8: (5.7, 5.9)}  # PR #2904, 512 B and 4 KB
    for n, (low, high) in measured_us.items():
        seconds = custom_all_reduce_time(_ar(4096, n), h100)
        assert low - 0.5 <= seconds * 1e6 <= high + 0.5
        assert seconds < 0.7 * nccl_time(_ar(4096, n), h100)


def test_time_grows_with_the_bytes_each_algorithm_moves():
    h100 = get_hardware("h100-sxm")
    small, big = (custom_all_reduce_time(_ar(s, 8), h100) for s in (64 * 1024, 4 * MIB))
    assert big > small
    # two-shot moves 2 (n-1)/n x S, one-shot (n-1) x S: at 8 ranks two-shot is cheaper per byte
    one = custom_all_reduce_time(_ar(255 * 1024, 8), h100)
    two = custom_all_reduce_time(_ar(256 * 1024, 8), h100)
    assert two < one
    assert custom_all_reduce_time(_ar(4096, 8), h100) > custom_all_reduce_time(
        _ar(4096, 2), h100)  # a barrier flag per peer


def test_larger_messages_move_at_the_rate_the_kernel_measures_not_the_links():
    h100 = get_hardware("h100-sxm")
    measured_us = {(262144, 2): 7.9, (262144, 4): 13.9, (262144, 8): 16.7,
                   (1048576, 2): 19.9, (1048576, 4): 31.1, (1048576, 8): 33.8}  # PR #2904
    for (size, n), us in measured_us.items():
        assert custom_all_reduce_time(_ar(size, n), h100) * 1e6 == pytest.approx(us, rel=0.2)
