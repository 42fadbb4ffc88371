# SPDX-License-Identifier: Apache-2.0
"""Model FLOP/s per GPU that a published offline serving run implies (issue 22, GPUStack rows):
every request's forward FLOPs over its prompt and output tokens (`ModelSpec.flops_per_token`,
2 x active matmul params + causal attention), times the requests, over the run's duration
(requests x output tokens / output tok/s), per GPU, and as a fraction of the GPU's dense peak for
the row's weight dtype. A row whose GPUs sustain far less than the same GPU type elsewhere in the
corpus is slow for a reason no step-cost model of that GPU sees.

Usage: python scripts/serving_implied_mfu.py [SOURCE] (default gpustack-performance-lab; rows
with an output tok/s and a request count).
"""

from __future__ import annotations

import sys

from analytical.dtypes import DType
from analytical.hardware import get_hardware
from analytical.model import load_model
from simulate.validate.serving_corpus import load_corpus


def main() -> None:
    source = sys.argv[1] if len(sys.argv) > 1 else "gpustack-performance-lab"
    print("row | model | gpus | engine | in/out | TFLOP/s per GPU | of peak")
    for row in load_corpus():
        tok_s = row.measured.get("output_tok_s")
        if row.source != source or not tok_s or not row.num_prompts:
            continue
        model, hw = load_model(row.model), get_hardware(row.gpu)
        length = row.input_len + row.output_len
        flops = row.num_prompts * length * model.flops_per_token(length, training=False)
        seconds = row.num_prompts * row.output_len / tok_s
        per_gpu = flops / seconds / row.num_gpus
        peak = hw.peak_flops(DType.FP8 if row.weight_dtype == "fp8" else DType.BF16)
        print(f"{row.id} | {row.model} | {row.num_gpus} x {row.gpu} | {row.engine} | "
              f"{row.input_len}/{row.output_len} | {per_gpu / 1e12:.0f} | {per_gpu / peak:.2f}")


if __name__ == "__main__":
    main()
