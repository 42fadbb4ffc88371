# SPDX-License-Identifier: Apache-2.0
"""Small real architectures for the CPU validation loop (``llmsim validate cpu``).

Each entry is a real `transformers` model class built from a small config with random weights:
the same kernels, layouts and Python overheads as the full-size model, at a size where a
forward + backward takes tens of milliseconds on a 2-core CPU in fp32. Dropout is off so that
measured and traced calls agree; token ids 0-2 are pad/bos/eos so no id leaves the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from analytical.dtypes import DType
from analytical.errors import UnknownNameError
from simulate.frontend.graph import TracedGraph
from simulate.frontend.hf import Mode, build_hf_model, hf_config, hf_inputs, trace_hf

_TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidationModel:
    """A small config of one architecture and the workload it is validated on."""

    name: str
    config: dict[str, Any] = field(hash=False)  # a Hugging Face config.json, as a dict
    batch: int  # sequences per step
    seq_len: int  # tokens per sequence (the prompt length for generate)
    new_tokens: int = 8  # tokens generated in the "generate" mode


VALIDATION_MODELS: dict[str, ValidationModel] = {
    "gpt2-small-test": ValidationModel(
        name="gpt2-small-test",
        config={"model_type": "gpt2", "n_embd": 384, "n_layer": 4, "n_head": 6,
                "vocab_size": 16384, "n_positions": 512, "resid_pdrop": 0.0,
                "embd_pdrop": 0.0, "attn_pdrop": 0.0, **_TOKENS},
        batch=2, seq_len=128),
    "llama-small-test": ValidationModel(
        name="llama-small-test",
        config={"model_type": "llama", "hidden_size": 384, "num_hidden_layers": 4,
                "num_attention_heads": 6, "num_key_value_heads": 2, "intermediate_size": 1024,
                "vocab_size": 16000, "max_position_embeddings": 1024, **_TOKENS},
        batch=2, seq_len=128),
    "qwen2-small-test": ValidationModel(
        name="qwen2-small-test",
        config={"model_type": "qwen2", "hidden_size": 256, "num_hidden_layers": 4,
                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 768,
                "vocab_size": 24000, "max_position_embeddings": 1024, "use_sliding_window":
                False, "tie_word_embeddings": True, **_TOKENS},
        batch=2, seq_len=192),
    "mistral-small-test": ValidationModel(
        name="mistral-small-test",
        config={"model_type": "mistral", "hidden_size": 512, "num_hidden_layers": 2,
                "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 1536,
                "vocab_size": 8192, "max_position_embeddings": 1024, "sliding_window": None,
                **_TOKENS},
        batch=1, seq_len=256),
    "mixtral-small-test": ValidationModel(
        name="mixtral-small-test",
        config={"model_type": "mixtral", "hidden_size": 256, "num_hidden_layers": 2,
                "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 512,
                "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 8192,
                "max_position_embeddings": 1024, "sliding_window": None,
                "router_aux_loss_coef": 0.0, **_TOKENS},
        batch=2, seq_len=128),
}


def validation_model(name: str) -> ValidationModel:
    try:
        return VALIDATION_MODELS[name]
    except KeyError:
        raise UnknownNameError("validation model", name, list(VALIDATION_MODELS)) from None


def build_validation_model(spec: ValidationModel, *, dtype: DType | str = DType.FP32,
                           seed: int = 0) -> torch.nn.Module:
    """The real model on CPU with seeded random weights."""
    return build_hf_model(spec.config, device="cpu", dtype=dtype, seed=seed)


def validation_inputs(spec: ValidationModel, mode: Mode, *, seed: int = 0
                      ) -> dict[str, torch.Tensor]:
    """Token ids for ``mode`` (with labels for ``train_step``)."""
    return hf_inputs(hf_config(spec.config), batch=spec.batch, seq_len=spec.seq_len,
                     labels=mode == "train_step", seed=seed)


def trace_validation_model(spec: ValidationModel, mode: Mode, *,
                           dtype: DType | str = DType.FP32) -> TracedGraph:
    """The weights-free trace of exactly the workload `measure_model` times."""
    return trace_hf(spec.config, mode=mode, batch=spec.batch, seq_len=spec.seq_len,
                    new_tokens=spec.new_tokens, dtype=dtype)
