# SPDX-License-Identifier: Apache-2.0
"""A cap on the NCCL CTAs of the context-parallel communicator, and what it does to the ring.

Megatron-Core's ``nccl_communicator_config_path`` gives each process group its own NCCL
``maxCTAs`` (NVIDIA's MLPerf Training NeMo configs set ``cp: max_ctas: 1`` in
``conf/nccl/custom_communicator_cta.yaml``, training_results_v5.0 / v5.1). NCCL's
point-to-point channels honour that cap (src/graph/paths.cc ``ncclTopoComputeP2pChannels``:
"here we already honor comm->max/minCTAs for p2pnChannels"), and NCCL sizes one peer's
channels at two per NVLink (``ncclTopoGetNchannels``: ``2 * path->bw / nvlBw``), so one
channel carries half of one NVLink (``SM*_NVLINK_BW`` / 2: 20 GB/s on SM100). The CP ring's
send/recv inside an NVLink domain therefore moves at most ``max_ctas x nvlink_gbps / 2``
whatever engine priced it. Sends across nodes keep their price (NCCL's per-NIC channels are
not reproduced). ``training.overlap.cp_max_ctas`` 0 (default): no cap, NCCL's own channels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from analytical.hardware import HardwareSpec
from analytical.layer_spec import Stream
from analytical.nccl_graph import nvlink_gbps
from analytical.ops import CollectiveKind, CollectiveSpec, OpSpec
from simulate.engines import Estimate

CHANNELS_PER_NVLINK = 2  # ncclTopoGetNchannels: 2 * (path->bw / nvlBw) p2p channels per link


def cp_p2p_floor_s(spec: CollectiveSpec, hw: HardwareSpec, max_ctas: int) -> float:
    """Seconds one CP send/recv takes at least on ``max_ctas`` channels; 0 without a cap, across
    nodes, or without an NVLink topology."""
    topo = hw.topology
    if max_ctas <= 0 or spec.nodes > 1 or topo is None or not topo.nvlink_links:
        return 0.0
    per_channel = nvlink_gbps(topo.compute_capability) / CHANNELS_PER_NVLINK * 1e9
    return spec.size_bytes / (max_ctas * per_channel)


def cp_capped_estimates(ops: Sequence[OpSpec], estimates: Sequence[Estimate],
                        blocks: Iterable[Any], hw: HardwareSpec,
                        max_ctas: int) -> dict[str, Estimate]:
    """The estimates by op key, every CP-stream send/recv of ``blocks`` no faster than
    `cp_p2p_floor_s`."""
    out = dict(zip((o.key for o in ops), estimates, strict=True))
    if max_ctas <= 0:
        return out
    for block in blocks:
        for node in (*block.fwd, *block.bwd):
            op = node.op
            if (node.stream != Stream.CP or not isinstance(op, CollectiveSpec)
                    or op.kind != CollectiveKind.SEND_RECV or op.key not in out):
                continue
            floor = cp_p2p_floor_s(op, hw, max_ctas)
            if floor > out[op.key].latency_s:
                out[op.key] = replace(out[op.key], latency_s=floor,
                                      detail=f"{out[op.key].detail} cp_max_ctas={max_ctas}")
    return out
