# SPDX-License-Identifier: Apache-2.0
"""Build a `ModelSpec` from a Hugging Face ``config.json`` mapping.

``model_type`` picks the reader; each reader takes the keys its transformers config class uses,
with that class's defaults where the class has one (e.g. ``num_key_value_heads`` defaults to
``num_attention_heads``) and a `SpecError` naming the file and key where it has none. Keys a
reader does not need are ignored (HF configs carry many); keys that change cost are modelled or
refused by name, and element-wise-only keys are named in the reader. Gemma, Phi-3, Nemotron,
GPT-OSS and Llama 4 live in `analytical.model_hf_extra`. The named catalog is `analytical.model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from analytical.attention_span import AttentionKind
from analytical.errors import SpecError
from analytical.hf_config import HfConfig as _Config
from analytical.model_hf_extra import (
    gemma2,
    gemma3,
    gemma3_text,
    gpt_oss,
    llama4,
    llama4_text,
    nemotron,
    phi3,
)
from analytical.model_spec import ModelSpec


def _rope_decoder(c: _Config, *, tied_default: bool = False) -> dict[str, Any]:
    """Keys shared by the Llama-style families (LlamaConfig and its descendants)."""
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    return {
        "hidden": hidden,
        "layers": c.int("num_hidden_layers"),
        "heads": heads,
        "kv_heads": c.int("num_key_value_heads", heads),
        "head_dim": c.head_dim(hidden, heads),
        "ffn_hidden": c.int("intermediate_size"),
        "vocab": c.int("vocab_size"),
        "max_seq_len": c.int("max_position_embeddings"),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "tied_embeddings": c.bool("tie_word_embeddings", tied_default),
    }


def _llama(c: _Config) -> dict[str, Any]:
    # LlamaAttention: attention_bias applies to q, k, v and o; LlamaMLP: mlp_bias to all three.
    bias = c.bool("attention_bias", False)
    return {**_rope_decoder(c), "qkv_bias": bias, "attn_out_bias": bias,
            "mlp_bias": c.bool("mlp_bias", False)}


def _mistral(c: _Config) -> dict[str, Any]:
    # MistralAttention/MLP: no biases. MistralConfig.sliding_window defaults to 4096 and every
    # layer uses it (Mistral 7B v0.1: 4096; later releases write null = full attention).
    return {**_rope_decoder(c), **c.uniform_window(window_default=4096)}


def _qwen_window(c: _Config, rule: Any) -> dict[str, Any]:
    """Qwen2/3: ``use_sliding_window`` gates ``sliding_window`` onto the layers ``rule`` picks
    (transformers Qwen2Config / Qwen2MoeConfig ``layer_types`` defaults)."""
    if not c.bool("use_sliding_window", False):
        return c.attention_layout(lambda i: AttentionKind.FULL)
    return c.attention_layout(rule, window_default=4096)


def _qwen_dense_rule(c: _Config) -> Any:
    first = c.int("max_window_layers", 28, minimum=0)  # Qwen2Config: layers >= it slide
    return lambda i: AttentionKind.SLIDING if i >= first else AttentionKind.FULL


def _qwen2(c: _Config) -> dict[str, Any]:
    # Qwen2Attention: q/k/v biased, o not
    return {**_rope_decoder(c), "qkv_bias": True, **_qwen_window(c, _qwen_dense_rule(c))}


def _qwen3(c: _Config) -> dict[str, Any]:
    bias = c.bool("attention_bias", False)
    return {**_rope_decoder(c), "qkv_bias": bias, "attn_out_bias": bias, "qk_norm": True,
            **_qwen_window(c, _qwen_dense_rule(c))}


def _mixtral(c: _Config) -> dict[str, Any]:
    fields = _rope_decoder(c)
    return {**fields, "num_experts": c.int("num_local_experts"),
            "top_k": c.int("num_experts_per_tok"), "moe_ffn_hidden": fields["ffn_hidden"],
            **c.uniform_window()}  # MixtralConfig.sliding_window defaults to None


def _qwen_moe_layout(c: _Config) -> dict[str, Any]:
    """Routed experts, with dense MLP layers where ``mlp_only_layers``/``decoder_sparse_step``
    put them (then ``intermediate_size`` is their width)."""
    layers = c.int("num_hidden_layers")
    ids = c.qwen_moe_layers(layers)
    if not ids:
        raise c.error("decoder_sparse_step", "leaves no MoE layer; use the dense model type")
    fields: dict[str, Any] = {"num_experts": c.int("num_experts"),
                              "top_k": c.int("num_experts_per_tok"),
                              "moe_ffn_hidden": c.int("moe_intermediate_size")}
    if len(ids) < layers:
        fields["moe_layer_ids"] = ids
    return fields


def _qwen2_moe(c: _Config) -> dict[str, Any]:
    shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
    max_window = c.int("max_window_layers", 28, minimum=0)
    # Qwen2MoeConfig: odd-numbered (i + 1) layers below max_window_layers slide.
    window = _qwen_window(c, lambda i: AttentionKind.SLIDING if (i + 1) % 2 and i < max_window
                          else AttentionKind.FULL)
    return {**_rope_decoder(c), "qkv_bias": True, **_qwen_moe_layout(c),
            "shared_ffn_hidden": shared, "shared_expert_gate": shared > 0, **window}


def _qwen3_moe(c: _Config) -> dict[str, Any]:
    bias = c.bool("attention_bias", False)
    # Qwen3MoeAttention hands config.sliding_window to every layer when use_sliding_window.
    return {**_rope_decoder(c), "qkv_bias": bias, "attn_out_bias": bias, "qk_norm": True,
            **_qwen_moe_layout(c),
            **c.uniform_window(enabled=c.bool("use_sliding_window", False))}


def _deepseek(c: _Config, *, v3: bool) -> dict[str, Any]:
    """DeepSeek-V2/V3: MLA attention, fine-grained MoE after ``first_k_dense_replace`` layers."""
    if c.bool("attention_bias", False):
        raise c.error("attention_bias", "biased MLA projections are not modelled")
    heads = c.int("num_attention_heads")
    nope, rope = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim")
    experts = c.int("n_routed_experts", 0, minimum=0)
    moe_width = c.int("moe_intermediate_size") if experts else 0
    # V3's noaux_tc routing stores a per-expert correction bias in the checkpoint.
    router_bias = v3 and c.text("topk_method", "noaux_tc") == "noaux_tc"
    return {
        "hidden": c.int("hidden_size"),
        "layers": c.int("num_hidden_layers"),
        "heads": heads,
        "kv_heads": c.int("num_key_value_heads", heads),
        "head_dim": nope + rope,
        "ffn_hidden": c.int("intermediate_size"),
        "vocab": c.int("vocab_size"),
        "max_seq_len": c.int("max_position_embeddings"),
        "activation": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "tied_embeddings": c.bool("tie_word_embeddings", False),
        "num_experts": experts,
        "top_k": c.int("num_experts_per_tok") if experts else 0,
        "moe_ffn_hidden": moe_width,
        "shared_ffn_hidden": c.int("n_shared_experts", 0, minimum=0) * moe_width,
        "first_dense_layers": c.int("first_k_dense_replace", 0, minimum=0),
        "moe_layer_freq": c.int("moe_layer_freq", 1),
        "q_lora_rank": c.int("q_lora_rank", 0, minimum=0),
        "kv_lora_rank": c.int("kv_lora_rank"),
        "qk_nope_head_dim": nope,
        "qk_rope_head_dim": rope,
        "v_head_dim": c.int("v_head_dim"),
        "router_bias": router_bias,
    }


def _gpt2(c: _Config) -> dict[str, Any]:
    """GPT2Config: Conv1D layers with biases everywhere, LayerNorm, learned positions."""
    hidden, heads = c.int("n_embd"), c.int("n_head")
    return {
        "hidden": hidden,
        "layers": c.int("n_layer"),
        "heads": heads,
        "kv_heads": heads,
        "head_dim": c.head_dim(hidden, heads),
        "ffn_hidden": c.int("n_inner", 4 * hidden),
        "vocab": c.int("vocab_size"),
        "max_seq_len": c.int("n_positions"),
        "activation": "gelu",
        "norm": "layernorm",
        "position": "learned",
        "tied_embeddings": c.bool("tie_word_embeddings", True),
        "qkv_bias": True,
        "attn_out_bias": True,
        "mlp_bias": True,
    }


# model_type -> (family, reader)
HF_READERS: dict[str, tuple[str, Callable[[_Config], dict[str, Any]]]] = {
    "llama": ("llama", _llama),
    "mistral": ("mistral", _mistral),
    "qwen2": ("qwen2", _qwen2),
    "qwen3": ("qwen3", _qwen3),
    "gpt2": ("gpt2", _gpt2),
    "mixtral": ("mixtral", _mixtral),
    "qwen2_moe": ("qwen2_moe", _qwen2_moe),
    "qwen3_moe": ("qwen3_moe", _qwen3_moe),
    "deepseek_v2": ("deepseek_v2", lambda c: _deepseek(c, v3=False)),
    "deepseek_v3": ("deepseek_v3", lambda c: _deepseek(c, v3=True)),
    # Kimi K2 (moonshotai/Kimi-K2-*) names its own model_type but ships DeepseekV3ForCausalLM
    # (its config.json `architectures`); Megatron-Bridge's KimiK2Provider (v0.3.1
    # src/megatron/bridge/models/kimi/kimi_provider.py) is the same MLA + MoE block.
    "kimi_k2": ("deepseek_v3", lambda c: _deepseek(c, v3=True)),
    "gemma2": ("gemma2", gemma2),
    "gemma3_text": ("gemma3", gemma3_text),
    "gemma3": ("gemma3", gemma3),
    "phi3": ("phi3", phi3),
    "nemotron": ("nemotron", nemotron),
    "gpt_oss": ("gpt_oss", gpt_oss),
    "llama4_text": ("llama4", llama4_text),
    "llama4": ("llama4", llama4),
}

# A config may name a family that shares a model_type's architecture (GPT-3 is GPT-2 shaped).
FAMILY_OVERRIDE_KEY = "llmsim_family"
_OVERRIDES = {"gpt2": ("gpt3",)}


def model_from_hf_config(config: Mapping[str, Any], *, name: str,
                         source: str | None = None) -> ModelSpec:
    """A ModelSpec from a parsed ``config.json``; ``source`` (the file) appears in errors."""
    if not isinstance(config, Mapping):
        raise SpecError("(top)", f"expected a JSON object, got {type(config).__name__}",
                        source=source)
    c = _Config(config, source)
    model_type = c.text("model_type")
    if model_type not in HF_READERS:
        raise c.error("model_type",
                      f"unsupported {model_type!r}; supported: {', '.join(sorted(HF_READERS))}")
    family, reader = HF_READERS[model_type]
    fields = reader(c)
    if fields.get("position") == "rope":
        fields.setdefault("rope_attention_factor", c.yarn_attention_factor())
    override = c.text(FAMILY_OVERRIDE_KEY, family)
    if override != family and override not in _OVERRIDES.get(model_type, ()):
        allowed = ", ".join((family, *_OVERRIDES.get(model_type, ())))
        raise c.error(FAMILY_OVERRIDE_KEY, f"{override!r} for model_type {model_type!r}; "
                      f"allowed: {allowed}")
    try:
        return ModelSpec(name=name, family=override, **fields)
    except SpecError as exc:  # re-raise with the file named
        raise SpecError(exc.field, exc.reason, source=source) from None
