# SPDX-License-Identifier: Apache-2.0
"""Hugging Face models from a config, never from a hub: build, make inputs, trace.

`transformers` is an optional extra (``llmsim[hf]``); it is imported when a function here is
called. Weights are random (``device="cpu"``) or absent (``device="meta"``, or any build inside
`trace_module`'s fake mode); nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import torch

from analytical.dtypes import DType, parse_dtype
from analytical.errors import LlmsimError, SpecError, UnknownNameError
from analytical.inputs import check_path, load_json
from analytical.model import MODELS_DIR
from simulate.frontend.graph import TracedGraph
from simulate.frontend.trace import trace_module

Mode = Literal["forward", "train_step", "generate"]
MODES: tuple[str, ...] = ("forward", "train_step", "generate")

_TORCH_DTYPE: dict[DType, torch.dtype] = {
    DType.FP32: torch.float32, DType.TF32: torch.float32,
    DType.BF16: torch.bfloat16, DType.FP16: torch.float16,
}


def torch_dtype(dtype: DType | str | torch.dtype) -> torch.dtype:
    """The torch dtype for fp32/tf32/bf16/fp16 (spelled any way `parse_dtype` accepts)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    parsed = parse_dtype(dtype, field="dtype")
    if parsed not in _TORCH_DTYPE:
        raise SpecError("dtype", f"{parsed} models cannot be built here; use fp32, bf16 or fp16")
    return _TORCH_DTYPE[parsed]


def load_hf_config_dict(source: Mapping[str, Any] | str | Path) -> dict[str, Any]:
    """A Hugging Face ``config.json`` as a dict: given, a path, or a name in datasets/models/."""
    if isinstance(source, Mapping):
        values, where = dict(source), None
    else:
        path = check_path(source, "--hf-config")
        if not path.is_file():
            path = MODELS_DIR / f"{source}.json"
        if not path.is_file():
            known = sorted(p.stem for p in MODELS_DIR.glob("*.json"))
            raise UnknownNameError("model config", str(source), known)
        where = str(path)
        values = load_json(path, "config.json")
    if not isinstance(values, dict) or not isinstance(values.get("model_type"), str):
        raise SpecError("model_type", "a Hugging Face config needs a model_type string",
                        source=where)
    return values


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise LlmsimError("Hugging Face models need transformers: pip install 'llmsim[hf]'") \
            from None
    return transformers


def _as_config(config: Mapping[str, Any] | str | Path | Any) -> Any:
    if isinstance(config, _transformers().PretrainedConfig):
        return config
    return hf_config(config)


def hf_config(source: Mapping[str, Any] | str | Path) -> Any:
    """A `transformers.PretrainedConfig` from `load_hf_config_dict`'s sources."""
    auto_config = _transformers().AutoConfig
    values = load_hf_config_dict(source)
    model_type = values.pop("model_type")
    for key in ("architectures", "transformers_version", "_name_or_path", "torch_dtype",
                "dtype"):
        values.pop(key, None)
    try:
        return auto_config.for_model(model_type, **values)
    except ValueError as exc:
        raise SpecError("model_type", str(exc).splitlines()[0]) from None


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def build_hf_model(config: Mapping[str, Any] | str | Path | Any, *,
                   device: Literal["meta", "cpu"] | str = "meta",
                   dtype: DType | str | torch.dtype = DType.FP32, seed: int = 0) -> torch.nn.Module:
    """A causal-LM built from its config with ``from_config`` (never ``from_pretrained``).

    Args:
        config: a config dict, a path to a config.json, a name in datasets/models/, or a
            `PretrainedConfig`.
        device: ``meta`` (shapes only, no memory) or ``cpu`` (random weights, seeded).
        dtype: parameter dtype.
        seed: torch seed for the random initialisation.
    """
    cfg = _as_config(config)
    tdtype = torch_dtype(dtype)
    torch.manual_seed(seed)
    with _default_dtype(tdtype), torch.device(device):
        model = _transformers().AutoModelForCausalLM.from_config(
            cfg, dtype=tdtype, attn_implementation="sdpa")
    return model


def hf_inputs(config: Any, *, batch: int, seq_len: int, labels: bool,
              seed: int = 0) -> dict[str, torch.Tensor]:
    """Random token ids [batch, seq_len] (and the same as labels) within the vocabulary."""
    generator = torch.Generator().manual_seed(seed)
    vocab = int(config.vocab_size)
    ids = torch.randint(0, vocab, (batch, seq_len), generator=generator)
    out = {"input_ids": ids}
    if labels:
        out["labels"] = ids.clone()
    return out


def generate_steps(model: torch.nn.Module, input_ids: torch.Tensor, new_tokens: int) -> None:
    """Greedy decoding with a KV cache: one prefill, then ``new_tokens - 1`` one-token steps.

    Traceable (no data-dependent stopping), and the same calls `model.generate` issues for the
    network itself (prefill logits for the last position only).
    """
    with torch.no_grad():
        out = model(input_ids=input_ids, use_cache=True, logits_to_keep=1)
        for _ in range(new_tokens - 1):
            next_ids = out.logits[:, -1:].argmax(dim=-1)
            out = model(input_ids=next_ids, past_key_values=out.past_key_values,
                        use_cache=True, logits_to_keep=1)


def trace_hf(config: Mapping[str, Any] | str | Path | Any, *, mode: Mode, batch: int,
             seq_len: int, new_tokens: int = 8,
             dtype: DType | str | torch.dtype = DType.FP32) -> TracedGraph:
    """Trace a Hugging Face causal LM built from ``config`` without weights.

    ``forward``: one forward of [batch, seq_len]; ``train_step``: forward with labels and
    ``loss.backward()``; ``generate``: `generate_steps` with a ``seq_len`` prompt.
    """
    if mode not in MODES:
        raise SpecError("mode", f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    cfg = copy.deepcopy(_as_config(config))
    # NOTE: some models look for padding in the ids (`pad_token_id in input_ids`), which needs
    # data; without a pad id they skip it. Only the embedding's padding row changes: no cost.
    cfg.pad_token_id = None

    def factory() -> torch.nn.Module:
        return build_hf_model(cfg, device="cpu", dtype=dtype)

    if mode == "generate":
        ids = hf_inputs(cfg, batch=batch, seq_len=seq_len, labels=False)["input_ids"]

        class _Generate(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = factory()

            def forward(self, input_ids: torch.Tensor) -> None:
                generate_steps(self.model, input_ids, new_tokens)

        return trace_module(_Generate, lambda: (ids,), backward=False)
    inputs = hf_inputs(cfg, batch=batch, seq_len=seq_len, labels=mode == "train_step")
    return trace_module(factory, lambda: dict(inputs), backward=mode == "train_step")
