# SPDX-License-Identifier: Apache-2.0
"""GPT-OSS's attention as llmsim prices it against cuDNN's measured sink kernels (issue 21).

The kernels: cudnn-frontend's inference benchmark (NVIDIA/cudnn-frontend
``benchmark/attention_inference``, config ``configs/gpt_oss.py`` at 1c46c584: 64 query heads, 8
KV heads, head dim 64, a learned sink per head, the 128-token window of the sliding layers or
full causal attention) run by NVIDIA with cuDNN 9.27 on one GPU, batch 1, bf16, forward
("context" phase, ``backend`` cudnn), 20 iterations each: ``results/gpt_oss/gb200/
gpt_oss_20260928_123038.csv`` (commit f4f19cbe) and ``results/gpt_oss/h200/
gpt_oss_20260928_135723.csv`` (commit 104a33b0). The same cuDNN graph (SDPA with a sink token
and a (127, 0) window) is what Transformer Engine's ``FusedAttention`` builds for the corpus'
Megatron-Bridge GPT-OSS rows (`simulate.efficiency` docstring; ``softmax_type`` learnable).

Prints, per measured point, the forward time llmsim gives the same attention (the sliding
layers as `analytical.layers.windowed_blocks` cuts them, at `simulate.efficiency.
attention_fraction` of the hardware's bf16 peak for Megatron-Core's cuDNN backend) beside the
measured one, then the corpus' shape (4 sequences of 4,096 tokens, one full and one sliding
layer) with the measured time interpolated in the sequence length.

Usage: python scripts/sink_attention_check.py
"""

from __future__ import annotations

import math

from analytical.attention_span import AttentionKind
from analytical.hardware import get_hardware
from analytical.layers import windowed_blocks
from analytical.ops import AttentionSpec
from simulate.efficiency import attention_fraction

HEADS = {"heads": 64, "kv_heads": 8, "head_dim": 64}
WINDOW = 128  # GPT-OSS sliding_window (HF config), keys a sliding layer's query sees
FRAMEWORK = "megatron"  # Megatron-Core's backend: Transformer Engine FusedAttention (cuDNN)

# (hardware, layer kind, sequence) -> measured forward ms (``time_ms``, batch 1; files above)
MEASURED_MS: dict[tuple[str, str, int], float] = {
    ("gb200", "full", 2048): 0.051459, ("gb200", "full", 8192): 0.552673,
    ("gb200", "full", 32768): 8.099202, ("gb200", "sliding", 2048): 0.033569,
    ("gb200", "sliding", 8192): 0.106461, ("gb200", "sliding", 32768): 0.401882,
    ("h200", "full", 2048): 0.098687, ("h200", "full", 8192): 1.201782,
    ("h200", "full", 32768): 18.220574, ("h200", "sliding", 2048): 0.03664,
    ("h200", "sliding", 8192): 0.135487, ("h200", "sliding", 32768): 0.517145,
}


def layer_ops(kind: str, seq: int, batch: int = 1) -> list[AttentionSpec]:
    """The attention ops of one GPT-OSS layer's forward over ``batch`` sequences of ``seq``."""
    if kind == "full":
        return [AttentionSpec(batch=batch, q_len=seq, kv_len=seq, causal=True, **HEADS)]
    return [AttentionSpec(batch=batch * n, q_len=q, kv_len=kv, causal=causal, **HEADS)
            for n, q, kv, causal in windowed_blocks(AttentionKind.SLIDING, seq, seq, WINDOW)]


def modelled_ms(hw_name: str, kind: str, seq: int, batch: int = 1) -> float:
    """llmsim's forward time of that layer, at the framework's attention rate and shape."""
    hw = get_hardware(hw_name)
    return 1e3 * sum(op.flops / (hw.peak_flops(op.dtype)
                                 * attention_fraction(hw, FRAMEWORK, backward=False, op=op))
                     for op in layer_ops(kind, seq, batch))


def measured_ms(hw_name: str, kind: str, seq: int) -> float:
    """The measured time at ``seq``, log-log interpolated between the measured sequences."""
    points = sorted((s, t) for (h, k, s), t in MEASURED_MS.items() if h == hw_name and k == kind)
    for (s0, t0), (s1, t1) in zip(points, points[1:], strict=False):
        if s0 <= seq <= s1:
            slope = math.log(t1 / t0) / math.log(s1 / s0)
            return t0 * (seq / s0) ** slope
    raise ValueError(f"no measured {kind} points around {seq} on {hw_name}")


def rows(batch: int = 4, seq: int = 4096) -> list[str]:
    out = []
    for (hw_name, kind, s), t in sorted(MEASURED_MS.items()):
        m = modelled_ms(hw_name, kind, s)
        out.append(f"{hw_name:6s} {kind:7s} {s:6d}: measured {t:8.4f} ms, model {m:8.4f} ms "
                   f"({m / t:4.2f}x)")
    for hw_name in sorted({h for h, _, _ in MEASURED_MS}):
        meas = {k: batch * measured_ms(hw_name, k, seq) for k in ("full", "sliding")}
        mod = {k: modelled_ms(hw_name, k, seq, batch) for k in ("full", "sliding")}
        out.append(f"{hw_name:6s} {batch} x {seq}, one full + one sliding layer: measured "
                   f"{meas['full']:.4f} + {meas['sliding']:.4f} = {sum(meas.values()):.4f} ms, "
                   f"model {mod['full']:.4f} + {mod['sliding']:.4f} = {sum(mod.values()):.4f} ms "
                   f"({sum(mod.values()) / sum(meas.values()):4.2f}x)")
    return out


if __name__ == "__main__":
    print("\n".join(rows()))
