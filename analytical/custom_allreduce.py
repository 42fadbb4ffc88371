# SPDX-License-Identifier: Apache-2.0
"""The serving engines' own tensor-parallel all-reduce: peer-memory kernels over NVLink, not NCCL.

vLLM (``vllm/distributed/device_communicators/custom_all_reduce.py`` and
``csrc/custom_all_reduce.cuh``, read at 036bb68), SGLang (sgl-kernel's copy of the same kernels
since sgl-project/sglang PR #5079) and TensorRT-LLM (``_torch/distributed/ops.py`` AllReduce,
``cpp/tensorrt_llm/common/customAllReduceUtils.h``) map every rank's buffer into its peers'
address space (CUDA IPC) and reduce with loads over NVLink. When it applies (`applies`):

- one node, a world size of 2, 4, 6 or 8 (``_SUPPORTED_WORLD_SIZES``);
- the GPUs are all NVLink-connected (``is_fully_connected``; 2 PCIe GPUs also qualify in vLLM
  when peer access works, which is not modelled: only an NVLink path, `nccl.node_link`);
- the message is under the engine's buffer (``inp_size < max_size``: 8 MiB in vLLM and SGLang;
  TensorRT-LLM's workspace 16e6 bytes at tp <= 2, 8e6 above), from the engine preset.

The algorithm (``CustomAllreduce::allreduce``): world size 2 always one-shot; fully connected,
one-shot below 512 KB at <= 4 ranks and 256 KB at <= 8, two-shot above.

- one-shot (``cross_device_reduce_1stage``): each rank reads all n-1 peers' whole buffers and
  sums them: (n-1) x S bytes into every GPU over its NVLink;
- two-shot (``cross_device_reduce_2stage``): reduce-scatter (each rank reduces its 1/n from the
  n-1 peers) then all-gather (reads the other n-1 reduced parts): 2 (n-1)/n x S bytes.

Seconds = a fixed latency per kernel + those bytes / the rate the kernel reads its peers at.
Both from sgl-project/sglang PR #2904's H100 table of the kernel that needs no input copy (its
"custom allreduce" rows, no CUDA graph; vLLM's kernel in eager mode first copies the input into
its IPC buffer, 8.7-11.8 us at small sizes in the same PR, a copy a graph replay does not make,
as the captured buffers are registered):

- latency: the 512 B and 4 KB rows, 3.7-3.9 us at TP2, 3.7-4.8 at TP4, 5.7-5.9 at TP8, so
  3.5 us + 0.33 us per peer (the barrier flags each rank writes to and polls on every peer);
  two-shot has a second barrier between its stages, one more per-peer term;
- rate: from 32 KB to 1 MB the rows grow by what each rank reads at ~65-80 GB/s whatever the
  world size (TP2 one-shot 4.5 -> 19.9 us for 1 MB; TP4 one-shot to 256 KB 4.8 -> 13.9 us for
  3 x 224 KB; TP8 two-shot 256 KB -> 1 MB 16.7 -> 33.8 us for 1.4 MB): 0.16 of H100's 450 GB/s
  NVLink per direction, not the link's rate, as the kernels run at most 36 blocks
  (``block_limit = 36``), which bounds their loads in flight. Taken as a share of the link on
  other GPUs (an assumption: no other GPU's table was found).
"""

from __future__ import annotations

from analytical.hardware import HardwareSpec
from analytical.nccl import node_link
from analytical.ops import CollectiveKind, CollectiveSpec

SUPPORTED_WORLD_SIZES = (2, 4, 6, 8)
_BASE_S = 3.5e-6
_PER_PEER_S = 0.33e-6
_LINK_SHARE = 0.16  # the kernel's peer-read rate over the NVLink's per-direction bandwidth


def applies(spec: CollectiveSpec, hw: HardwareSpec, max_bytes: float) -> bool:
    """True where an engine with a custom all-reduce buffer of ``max_bytes`` runs ``spec``
    with it (see the module docstring); False sends it to NCCL."""
    return (spec.kind == CollectiveKind.ALL_REDUCE and spec.nodes == 1
            and spec.group_size in SUPPORTED_WORLD_SIZES and spec.size_bytes < max_bytes
            and node_link(spec, hw)[1] == "nvlink")


def one_shot(spec: CollectiveSpec) -> bool:
    """vLLM's choice of the one-stage kernel (``REDUCE_CASE`` in custom_all_reduce.cuh)."""
    n, size = spec.group_size, spec.size_bytes
    return n == 2 or (n <= 4 and size < 512 * 1024) or (n <= 8 and size < 256 * 1024)


def custom_all_reduce_time(spec: CollectiveSpec, hw: HardwareSpec) -> float:
    """Seconds of the custom all-reduce kernel for ``spec`` on ``hw`` (as a graph replay runs
    it); assumes `applies`."""
    n, size = spec.group_size, spec.size_bytes
    link, _ = node_link(spec, hw)
    bandwidth = link.bandwidth_bytes_per_s * _LINK_SHARE
    if one_shot(spec):
        return _BASE_S + _PER_PEER_S * (n - 1) + (n - 1) * size / bandwidth
    return _BASE_S + 2 * _PER_PEER_S * (n - 1) + 2 * (n - 1) / n * size / bandwidth
