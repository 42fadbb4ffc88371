# SPDX-License-Identifier: Apache-2.0
"""Activation memory of training: what one transformer layer stores for its backward pass.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
section 4 and Table 2, counted per token in bytes with 2-byte activations and 1-byte dropout
masks (s = sequence, b = micro-batch, h = hidden, a = heads, t = tensor-parallel degree):

- no parallelism            s*b*h*(34 + 5*a*s/h)
- tensor parallel           s*b*h*(10 + 24/t + 5*a*s/(h*t))
- tensor + sequence par.    s*b*h/t*(34 + 5*a*s/h)
- TP + selective recompute  s*b*h*(10 + 24/t)
- TP + SP + selective       34*s*b*h/t
- full recompute            2*s*b*h (the layer input)

The terms are kept by tensor so that GQA/MLA attention, gated (SwiGLU) MLPs, MoE layers (each
token stored top_k times in the experts), context parallelism (s -> s/cp for stored tensors, the
score matrix is (s/cp) x s), runs without dropout and fused (flash) attention, which stores no
s x s matrix (the same saving as selective recompute), all follow; the GPT shape (MHA, 4h GELU
MLP, dropout, unfused attention) reduces exactly to the table. Pipeline in-flight micro-batches
and the whole-stage total live in `analytical.memory`.
"""

from __future__ import annotations

from collections.abc import Collection

from analytical.errors import SpecError
from analytical.model_spec import ModelSpec
from analytical.parallel import ParallelConfig, Recompute, RecomputeModule

DROPOUT_MASK_BYTES = 1.0  # Korthikanti et al. 2022 section 4.1: masks stored as bytes
ROUTER_PROB_BYTES = 4.0  # fp32 router logits/probabilities saved for the softmax backward


def _div(value: int, degree: int, field: str, what: str) -> int:
    if value % degree:
        raise SpecError(field, f"{what}={value} is not divisible by {field.rsplit('.', 1)[-1]}="
                        f"{degree}")
    return value // degree


def local_kv_heads(kv_heads: int, tp: int) -> int:
    """KV heads per tensor-parallel rank: split by tp, replicated (1 per rank) when tp > kv_heads.

    Raises SpecError when neither divides the other.
    """
    if tp <= kv_heads:
        return _div(kv_heads, tp, "parallel.tp", "kv_heads")
    if tp % kv_heads:
        raise SpecError("parallel.tp", f"tp={tp} is neither a divisor nor a multiple of "
                        f"kv_heads={kv_heads}")
    return 1


def check_tensor_parallel(model: ModelSpec, tp: int) -> None:
    """Heads must split evenly over tp (SpecError naming parallel.tp)."""
    _div(model.heads, tp, "parallel.tp", "heads")
    if not model.is_mla:
        local_kv_heads(model.kv_heads, tp)


def _attention_widths(model: ModelSpec, tp: int) -> tuple[float, float, float, float]:
    """Per-rank per-token element counts of (Q, K, V, attention output) stored for backward."""
    heads = model.heads // tp
    if model.is_mla:
        qk_dim = model.qk_nope_head_dim + model.qk_rope_head_dim
        return heads * qk_dim, heads * qk_dim, heads * model.v_head_dim, heads * model.v_head_dim
    kv = local_kv_heads(model.kv_heads, tp) * model.head_dim
    return heads * model.head_dim, kv, kv, heads * model.head_dim


def _mlp_stored(width: float, gated: bool, e: float) -> float:
    """Bytes per token inside the MLP: GELU keeps fc1 output and activation output (2 x width);
    SwiGLU keeps the gate and up outputs and their product (3 x width)."""
    return (3.0 if gated else 2.0) * width * e


def activation_bytes_per_layer(model: ModelSpec, parallel: ParallelConfig, *, micro_batch: int,
                               seq_len: int, recompute: Recompute = Recompute.NONE,
                               flash_attention: bool = True, dropout: bool = False,
                               moe_layer: bool | None = None,
                               activation_dtype_bytes: float = 2.0) -> float:
    """Bytes one layer of one micro-batch keeps for backward on one GPU.

    Args:
        model: an `analytical.model.ModelSpec`.
        parallel: uses tp, cp and sp.
        micro_batch, seq_len: b and the full (pre-CP) sequence length s.
        recompute: NONE stores everything; SELECTIVE drops the attention core (the s x s
            scores); FULL keeps only the layer input.
        flash_attention: fused attention stores no s x s matrix (as SELECTIVE does).
        dropout: count dropout masks and the attention-dropout output (GPT-style training).
        moe_layer: whether this layer's MLP is the routed-expert one (default: model.is_moe).
        activation_dtype_bytes: bytes per stored activation element (bf16: 2).
    """
    tp, cp = parallel.tp, parallel.cp
    check_tensor_parallel(model, tp)
    if seq_len % cp:
        raise SpecError("training.seq_len", f"seq_len={seq_len} is not divisible by cp={cp}")
    e, h = float(activation_dtype_bytes), model.hidden
    tokens = micro_batch * seq_len / cp  # tokens this rank stores per layer
    # Outside the TP region (norms, dropout, the inputs of the first linear of each block) each TP
    # rank holds the full sequence, unless sequence parallelism splits it (Korthikanti 4.2.2).
    rep = 1.0 / tp if parallel.sp else 1.0
    if recompute == Recompute.FULL:
        return e * h * rep * tokens
    mask = DROPOUT_MASK_BYTES if dropout else 0.0
    moe = model.is_moe if moe_layer is None else moe_layer

    q, k, v, out = _attention_widths(model, tp)
    per_token = e * h * rep  # input of the attention norm
    per_token += e * h * rep  # input of the QKV (or MLA down-) projections
    if model.is_mla:
        latents = model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim
        per_token += 2.0 * e * latents * rep  # latent norm inputs and up-projection inputs
    per_token += e * (q + k + v)  # Q and K for QK^T, V for the weighted sum
    per_token += e * out  # input of the output projection
    per_token += mask * h * rep  # dropout after the output projection
    per_token += e * h * rep  # input of the MLP norm
    per_token += e * h * rep  # input of the first MLP linear (and of the router)
    if moe:
        per_token += _moe_stored(model, parallel, e)
    else:
        per_token += _mlp_stored(model.ffn_hidden / tp, model.gated_mlp, e)
    per_token += mask * h * rep  # dropout after the MLP
    total = per_token * tokens
    if recompute == Recompute.NONE and not flash_attention:
        # Unfused attention core per head and query-key pair: softmax output (e), its dropout
        # mask (1) and dropout output (e): 5 bytes in the paper; the scores span all s keys.
        pair_bytes = e + (mask + e if dropout else 0.0)
        total += pair_bytes * (model.heads / tp) * tokens * seq_len
    return total


def _routed_share(parallel: ParallelConfig) -> float:
    """Routed token copies a rank's experts hold, per token of the micro-batch and top-k slot:
    under SP the rank routes tokens/tp and its expert-TP all-gather collects etp such shares
    (Megatron-Core's dispatcher), so etp/tp; 1 with tokens replicated over TP."""
    return parallel.expert_tp / parallel.tp if parallel.sp else 1.0


def _moe_stored(model: ModelSpec, parallel: ParallelConfig, e: float) -> float:
    """Per-token bytes of a routed-expert MLP beyond the shared norm/router input.

    Router probabilities (fp32, experts per token); each token reaches top_k experts, whose
    inputs and outputs (kept for the weighted combine; `_routed_share` of them on this rank)
    and intermediate activations (the expert width split over etp, for etp/tp of the tokens:
    moe_ffn/tp either way) are stored once per copy; shared experts act like a dense MLP of
    width shared_ffn_hidden.
    """
    k, tp = model.top_k, parallel.tp
    rep = 1.0 / tp if parallel.sp else 1.0
    routed = k * e * model.hidden * _routed_share(parallel)
    stored = ROUTER_PROB_BYTES * model.num_experts * rep
    stored += routed  # dispatched expert inputs
    stored += k * _mlp_stored(model.moe_ffn_hidden / tp, model.gated_mlp, e)
    if model.glu_clamp:  # the clamped copy of the gate/up output the activation saves, besides
        # the unclamped one the clamps' backward needs (Megatron-Core
        # weighted_bias_quick_geglu_impl: clamp both halves, torch.cat, fused activation)
        stored += k * 2 * model.moe_ffn_hidden / tp * e
    stored += routed  # expert outputs for the combine backward
    if model.shared_ffn_hidden:
        stored += _mlp_stored(model.shared_ffn_hidden / tp, model.gated_mlp, e)
    return stored


def eager_llama_extra_bytes(model: ModelSpec, parallel: ParallelConfig, *, micro_batch: int,
                            seq_len: int, moe_layer: bool = False,
                            activation_dtype_bytes: float = 2.0) -> float:
    """Bytes torchtitan's eager Llama block stores beyond `activation_bytes_per_layer` (NONE).

    torchtitan at 9dec370 (torchtitan/models/norms.py, models/llama/model.py): ``RMSNorm``
    computes ``_norm(x.float()).type_as(x) * weight``, so each of the two norms saves its fp32
    upcast (for ``pow``) and the bf16 normalised tensor (for ``* weight``) instead of a bf16
    input; ``repeat_kv`` materialises K and V at the query heads' width before SDPA, which
    saves them; ``w2(F.silu(w1(x)) * w3(x))`` keeps the SiLU input besides its output, the up
    projection and the product (four widths, not three). Under torch.compile Inductor fuses
    the element-wise ops and recomputes them, so none of this applies.
    """
    e, h = float(activation_dtype_bytes), model.hidden
    tokens = micro_batch * seq_len / parallel.cp
    rep = 1.0 / parallel.tp if parallel.sp else 1.0
    per_token = 2 * (4.0 + e - e) * h * rep  # two norms: fp32 upcast + normalised - bf16 input
    if not model.is_mla:
        q, k, v, _ = _attention_widths(model, parallel.tp)
        per_token += e * (2 * q - k - v)  # K and V repeated to the query heads
    if model.gated_mlp and not moe_layer:
        per_token += e * model.ffn_hidden / parallel.tp  # the SiLU input
    return per_token * tokens


def op_sac_bytes_per_layer(model: ModelSpec, parallel: ParallelConfig, *, micro_batch: int, seq_len: int,
                           activation_dtype_bytes: float = 2.0) -> float:
    """Bytes one dense layer keeps under torchtitan's per-op selective activation checkpointing.

    torchtitan (torchtitan/distributed/activation_checkpoint.py, ``_save_list`` and
    ``_custom_policy``; parallelize_llama.py at 9dec370) saves the outputs of matmuls, SDPA and
    TP reduce-scatters but recomputes every other ``aten.mm`` and all element-wise ops (norms,
    RoPE, SiLU). Per layer the mm call order is wq, wk, wv, wo, w1, w3, w2, so the odd ones
    (wq, wv, w1, w2) are saved; plus the checkpointed layer input, the SDPA output and, under TP,
    the two reduce-scatter outputs (attention and MLP). Under TP a row-parallel mm output (w2)
    is the full hidden width before its reduce-scatter.
    """
    tp, cp = parallel.tp, parallel.cp
    check_tensor_parallel(model, tp)
    if seq_len % cp:
        raise SpecError("training.seq_len", f"seq_len={seq_len} is not divisible by cp={cp}")
    e, h = float(activation_dtype_bytes), model.hidden
    tokens = micro_batch * seq_len / cp
    rep = 1.0 / tp if parallel.sp else 1.0
    q, _k, v, out = _attention_widths(model, tp)
    per_token = e * h * rep  # checkpointed layer input
    per_token += e * (q + v)  # wq and wv outputs (mm #1 and #3)
    per_token += e * out  # SDPA output (log-sum-exp is heads-wide, negligible)
    per_token += e * model.ffn_hidden / tp  # w1 output (mm #5)
    per_token += e * h  # w2 output (mm #7), full width before the reduce-scatter
    if tp > 1:
        per_token += 2 * e * h / tp  # reduce-scatter outputs of attention and MLP
    return per_token * tokens


def fp8_saved_input_savings(model: ModelSpec, parallel: ParallelConfig, *, micro_batch: int, seq_len: int,
                            moe_layer: bool = False, activation_dtype_bytes: float = 2.0
                            ) -> float:
    """Bytes per layer that Transformer Engine's fp8 recipe saves against `activation_bytes_per_layer`.

    TE quantises a linear layer's input to fp8 for the forward GEMM and saves that fp8 copy for
    the weight-gradient GEMM (transformer_engine/pytorch/module/linear.py, layernorm_linear.py,
    layernorm_mlp.py: the saved ``inputmat``/``ln_out`` is the quantised tensor). So the inputs
    of QKV, the output projection, fc1 and fc2 take 1 byte instead of 2; norms' inputs and the
    attention tensors stay bf16. MoE layers: the grouped expert linears save their fp8 inputs
    too (Megatron-Core MoE README at d98e8a64, "FP8 Training": "Stores linear layer inputs in
    FP8 instead of BF16"): fc1's routed input and fc2's input, once per top-k copy.
    """
    tp = parallel.tp
    rep = 1.0 / tp if parallel.sp else 1.0
    _q, _k, _v, out = _attention_widths(model, tp)
    saved = model.hidden * rep + out  # QKV input, output-projection input
    if not moe_layer:
        saved += model.hidden * rep + model.ffn_hidden / tp  # fc1 input, fc2 input
    else:
        saved += model.top_k * (model.hidden * _routed_share(parallel)
                                + model.moe_ffn_hidden / tp)
    tokens = micro_batch * seq_len / parallel.cp
    return (activation_dtype_bytes - 1.0) * saved * tokens


def recompute_modules_freed(model: ModelSpec, parallel: ParallelConfig,
                            modules: Collection[RecomputeModule], *, micro_batch: int,
                            seq_len: int, moe_layer: bool, fp8: bool = False,
                            activation_dtype_bytes: float = 2.0) -> float:
    """Bytes per layer that Megatron-Core's selective recompute of ``modules`` frees against
    `activation_bytes_per_layer` (less `fp8_saved_input_savings` under ``fp8``).

    Megatron-Core (transformer_layer.py, moe/experts.py, multi_latent_attention.py;
    transformer_config.py ``recompute_modules``): ``layernorm`` discards the output of each norm
    that is its own module, the MLA input norm and an MoE layer's pre-MLP norm (the other norms
    are fused into TE's LayerNormLinear, ``IdentityOp`` in gpt_layer_specs.py, and are not
    recomputed); ``moe_act`` discards the expert activation's output and what the activation
    saves inside (the clamped copy); ``mla_up_proj`` the Q/K/V up-projections with RoPE;
    ``mlp`` / ``moe`` / ``shared_experts`` checkpoint the dense MLP / MoE layer / shared experts
    whole, keeping only their input. Under fp8 the layers save the original input of a
    discarded linear input (``set_save_original_input``), so the freed bytes are those stored.
    ``core_attn`` frees the unfused s x s core (`activation_bytes_per_layer` SELECTIVE), nothing
    more with fused attention.
    """
    e, h, tp = float(activation_dtype_bytes), model.hidden, parallel.tp
    lin = 1.0 if fp8 else e  # bytes per element of a saved linear input
    rep = 1.0 / tp if parallel.sp else 1.0
    mods = set(modules)
    freed = 0.0
    if RecomputeModule.LAYERNORM in mods:
        freed += lin * h * rep if model.is_mla else 0.0
        freed += e * h * rep if moe_layer else 0.0  # router / dispatcher input stays bf16
    if moe_layer:
        w, k = model.moe_ffn_hidden / tp, model.top_k
        if RecomputeModule.MOE in mods:
            freed += _moe_stored(model, parallel, e)
            freed -= (e - lin) * k * (h * _routed_share(parallel) + w)
        else:
            if RecomputeModule.MOE_ACT in mods:
                freed += k * w * lin + (k * 2 * w * e if model.glu_clamp else 0.0)
            if RecomputeModule.SHARED_EXPERTS in mods and model.shared_ffn_hidden:
                freed += _mlp_stored(model.shared_ffn_hidden / tp, model.gated_mlp, e)
    elif RecomputeModule.MLP in mods:
        w = model.ffn_hidden / tp
        freed += lin * h * rep + _mlp_stored(w, model.gated_mlp, e) - (e - lin) * w
    if RecomputeModule.MLA_UP_PROJ in mods and model.is_mla:
        q, k_, v, _out = _attention_widths(model, tp)
        freed += e * (q + k_ + v)
    return freed * micro_batch * seq_len / parallel.cp


def frozen_linear_input_bytes(model: ModelSpec, parallel: ParallelConfig, targets: Collection[str],
                              *, micro_batch: int, seq_len: int, fp8: bool = False,
                              activation_dtype_bytes: float = 2.0) -> float:
    """Bytes per dense layer not stored under LoRA: the inputs of frozen linears no adapter reads.

    A linear saves its input only for its weight gradient: Transformer Engine's ``Linear``
    keeps ``inputmat`` and ``LayerNormLinear`` ``ln_out`` only ``if weight.requires_grad``
    (transformer_engine/pytorch/module/linear.py, layernorm_linear.py at v1.8), and PyTorch's
    autograd saves ``mm``'s input only when the weight needs a gradient. So the QKV input
    goes unless q, k or v has an adapter (its A reads the same tensor), the fc1 input unless
    gate or up has one, the fc2 input (the SwiGLU product) unless down has one. The attention
    output stays: flash attention's backward needs it. Under fp8 the saved copy was 1 byte.
    """
    lin = 1.0 if fp8 else float(activation_dtype_bytes)
    rep = 1.0 / parallel.tp if parallel.sp else 1.0
    adapted = set(targets)
    freed = 0.0
    if not adapted & {"q", "k", "v"}:
        freed += model.hidden * rep
    if not adapted & {"gate", "up"}:
        freed += model.hidden * rep
    if "down" not in adapted:
        freed += model.ffn_hidden / parallel.tp
    return lin * freed * micro_batch * seq_len / parallel.cp
