# SPDX-License-Identifier: Apache-2.0
"""``config.json`` readers for Gemma 2/3, Phi-3/4, Nemotron, GPT-OSS and Llama 4 (see `model_hf`).

Each reader follows its transformers config and modeling classes (transformers 5.x,
``models/<family>/configuration_*.py`` and ``modeling_*.py``): the class defaults where a key is
absent, every weight the modeling class creates. Keys that change no parameter and only
element-wise work are named in the reader with the reason they are not modelled; switches whose
cost is not modelled are refused.
"""

from __future__ import annotations

from typing import Any

from analytical.attention_span import AttentionKind
from analytical.hf_config import HfConfig, every_nth_full

_FULL, _CHUNKED = AttentionKind.FULL, AttentionKind.CHUNKED


def _gated_activation(c: HfConfig, key: str, default: str) -> str:
    """Gemma's ``hidden_activation`` (gelu_pytorch_tanh) -> geglu; silu -> swiglu."""
    act = c.text(key, default)
    if act.startswith("gelu"):
        return "geglu"
    if act == "silu":
        return "swiglu"
    raise c.error(key, f"unsupported {act!r}; supported: gelu*, silu")


def _gemma(c: HfConfig, *, vocab: int, max_seq: int, rule: Any) -> dict[str, Any]:
    """Gemma2Config / Gemma3TextConfig (same defaults but vocab and context length).

    Gemma2DecoderLayer: input, post-attention, pre- and post-feed-forward RMSNorms; attention
    q/k/v/o biased iff ``attention_bias``; GeGLU MLP without biases; head_dim decoupled from
    hidden / heads; tied embeddings. The attention and final-logit soft-caps (tanh on scores and
    logits) and ``query_pre_attn_scalar`` are element-wise and not modelled.
    """
    c.refuse_true("use_bidirectional_attention", "bidirectional (encoder) Gemma is not a decoder")
    heads = c.int("num_attention_heads")
    bias = c.bool("attention_bias", False)
    return {
        "hidden": c.int("hidden_size"),
        "layers": c.int("num_hidden_layers"),
        "heads": heads,
        "kv_heads": c.int("num_key_value_heads", heads),
        "head_dim": c.int("head_dim", 256),
        "ffn_hidden": c.int("intermediate_size"),
        "vocab": c.int("vocab_size", vocab),
        "max_seq_len": c.int("max_position_embeddings", max_seq),
        "activation": _gated_activation(c, "hidden_activation", "gelu_pytorch_tanh"),
        "norm": "rmsnorm",
        "position": "rope",
        "tied_embeddings": c.bool("tie_word_embeddings", True),
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "post_norms": True,
        **c.attention_layout(rule, window_default=4096),
    }


def gemma2(c: HfConfig) -> dict[str, Any]:
    # Gemma2Config.layer_types: even layers (i + 1 odd) slide, odd layers are global.
    return _gemma(c, vocab=256000, max_seq=8192, rule=every_nth_full(2))


def gemma3_text(c: HfConfig) -> dict[str, Any]:
    """Gemma 3 language model: Gemma 2's layer plus q/k RMSNorms; 5 local : 1 global layers
    (``sliding_window_pattern``, default 6, Gemma 3 report sec. 2)."""
    rule = every_nth_full(c.int("sliding_window_pattern", 6))
    return {**_gemma(c, vocab=262208, max_seq=131072, rule=rule), "qk_norm": True}


def gemma3(c: HfConfig) -> dict[str, Any]:
    """Gemma3ForConditionalGeneration: the language model in ``text_config``."""
    _refuse_vision(c)
    return gemma3_text(c.sub("text_config"))


def phi3(c: HfConfig) -> dict[str, Any]:
    """Phi3Config (Phi-3 mini/medium, Phi-3.5-mini, Phi-4, Phi-4-mini).

    Phi3Attention fuses q/k/v into one ``qkv_proj`` and Phi3MLP gate and up into
    ``gate_up_proj``: the same weights and FLOPs as separate matrices, no biases. Every layer
    slides over ``sliding_window`` keys when it is set (Phi-3-mini-4k: 2047). RoPE on a fraction
    of each head (``partial_rotary_factor``, Phi-4-mini 0.75) is element-wise, not modelled.
    """
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    return {
        "hidden": hidden,
        "layers": c.int("num_hidden_layers"),
        "heads": heads,
        "kv_heads": c.int("num_key_value_heads", heads),
        "head_dim": c.head_dim(hidden, heads),
        "ffn_hidden": c.int("intermediate_size"),
        "vocab": c.int("vocab_size", 32064),
        "max_seq_len": c.int("max_position_embeddings", 4096),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "tied_embeddings": c.bool("tie_word_embeddings", False),
        **c.uniform_window(),
    }


def nemotron(c: HfConfig) -> dict[str, Any]:
    """NemotronConfig (Nemotron-3 8B/22B, Nemotron-4 15B/340B, Minitron).

    NemotronMLP: ``up_proj`` -> squared ReLU (``hidden_act`` relu2) -> ``down_proj``, two
    matrices, biased iff ``mlp_bias``; NemotronAttention: q/k/v/o biased iff ``attention_bias``;
    NemotronLayerNorm1P (weight + 1, and a bias) before attention, MLP and the head; untied
    embeddings by default. RoPE on a fraction of each head (``partial_rotary_factor``, 0.5) is
    element-wise, not modelled (the rotary op is priced over whole heads).
    """
    act = c.text("hidden_act", "relu2")
    if act != "relu2":
        raise c.error("hidden_act", f"unsupported {act!r}; supported: relu2")
    hidden, heads = c.int("hidden_size", 6144), c.int("num_attention_heads", 48)
    bias = c.bool("attention_bias", False)
    return {
        "hidden": hidden,
        "layers": c.int("num_hidden_layers", 32),
        "heads": heads,
        "kv_heads": c.int("num_key_value_heads", heads),
        "head_dim": c.head_dim(hidden, heads),
        "ffn_hidden": c.int("intermediate_size", 24576),
        "vocab": c.int("vocab_size", 256000),
        "max_seq_len": c.int("max_position_embeddings", 4096),
        "activation": "relu2",
        "norm": "layernorm1p",
        "position": "rope",
        "tied_embeddings": c.bool("tie_word_embeddings", False),
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "mlp_bias": c.bool("mlp_bias", False),
    }


def gpt_oss(c: HfConfig) -> dict[str, Any]:
    """GptOssConfig: every layer MoE, alternating sliding-window (128) and full attention.

    GptOssAttention: q/k/v/o biased (``attention_bias``, default true) and one learned sink
    logit per head; GptOssExperts: gate_up and down biased; GptOssTopKRouter: weight and bias.
    The clamped SwiGLU (``swiglu_limit``) is element-wise: ``glu_clamp``.
    """
    heads = c.int("num_attention_heads")
    bias = c.bool("attention_bias", True)
    width = c.int("intermediate_size")
    return {
        "hidden": c.int("hidden_size"),
        "layers": c.int("num_hidden_layers"),
        "heads": heads,
        "kv_heads": c.int("num_key_value_heads", heads),
        "head_dim": c.int("head_dim", 64),
        "ffn_hidden": width,
        "vocab": c.int("vocab_size"),
        "max_seq_len": c.int("max_position_embeddings", 131072),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "tied_embeddings": c.bool("tie_word_embeddings", False),
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "attention_sinks": True,
        "num_experts": c.int("num_local_experts"),
        "top_k": c.int("num_experts_per_tok"),
        "moe_ffn_hidden": width,
        "mlp_bias": True,
        "router_bias": True,
        "glu_clamp": c.number("swiglu_limit", 0.0),
        **c.attention_layout(every_nth_full(2), window_default=128),
    }


def llama4_text(c: HfConfig) -> dict[str, Any]:
    """Llama4TextConfig: routed experts plus one shared expert on ``moe_layers`` (default every
    ``interleave_moe_layer_step``-th layer), dense MLPs ``intermediate_size_mlp`` wide elsewhere;
    chunked attention on RoPE layers, full attention on the NoPE layers (every
    ``no_rope_layer_interval``-th). Skipping RoPE on NoPE layers, the parameter-free L2 q/k norm
    (``use_qk_norm``) and attention temperature tuning are element-wise, not modelled.
    """
    layers = c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    bias = c.bool("attention_bias", False)
    experts = c.int("num_local_experts", 16)
    width = c.int("intermediate_size", 8192)
    step = c.int("interleave_moe_layer_step", 1)
    moe_ids = tuple(c.int_list("moe_layers")) or tuple(range(step - 1, layers, step))
    if not moe_ids:
        raise c.error("interleave_moe_layer_step", f"{step} leaves no MoE layer in {layers}")
    interval = c.int("no_rope_layer_interval", 4)
    rope_layers = c.int_list("no_rope_layers") or [int((i + 1) % interval != 0)
                                                   for i in range(layers)]
    if len(rope_layers) != layers:
        raise c.error("no_rope_layers", f"expected {layers} entries, got {len(rope_layers)}")
    chunked = c.data.get("attention_chunk_size", 8192) is not None
    return {
        "hidden": c.int("hidden_size", 5120),
        "layers": layers,
        "heads": heads,
        "kv_heads": c.int("num_key_value_heads", 8),
        "head_dim": c.int("head_dim", 128),
        "ffn_hidden": c.int("intermediate_size_mlp", 16384),
        "vocab": c.int("vocab_size", 202048),
        "max_seq_len": c.int("max_position_embeddings", 131072),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "tied_embeddings": c.bool("tie_word_embeddings", False),
        "qkv_bias": bias,
        "attn_out_bias": bias,
        "num_experts": experts,
        "top_k": c.int("num_experts_per_tok", 1),
        "moe_ffn_hidden": width,
        "shared_ffn_hidden": width,  # Llama4TextMoe.shared_expert = Llama4TextMLP(config)
        **({"moe_layer_ids": moe_ids} if len(moe_ids) < layers else {}),
        **_llama4_attention(c, rope_layers, chunked),
    }


def _llama4_attention(c: HfConfig, rope_layers: list[int], chunked: bool) -> dict[str, Any]:
    if chunked and "attention_chunk_size" not in c.data:
        c = HfConfig({**c.data, "attention_chunk_size": 8192}, c.source, c.prefix)
    return c.attention_layout(lambda i: _CHUNKED if chunked and rope_layers[i] else _FULL)


def llama4(c: HfConfig) -> dict[str, Any]:
    """Llama4ForConditionalGeneration: the language model in ``text_config``."""
    _refuse_vision(c)
    return llama4_text(c.sub("text_config"))


def _refuse_vision(c: HfConfig) -> None:
    """The vision tower's weights and image-token work are not modelled: say so, by key."""
    if c.data.get("vision_config") is not None:
        raise c.error("vision_config", "the vision encoder is not modelled; give the "
                      "language model alone (its text_config object, as a config.json)")
