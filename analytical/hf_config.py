# SPDX-License-Identifier: Apache-2.0
"""Typed access to one Hugging Face ``config.json`` mapping, shared by the `model_hf` readers.

Every error names the source file and the key. Besides scalar getters it turns the attention
layout keys (``layer_types``, ``sliding_window``, ``attention_chunk_size``) and the MoE layout
keys into the `ModelSpec` fields that carry them.
"""

from __future__ import annotations

import builtins
import enum
import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from analytical.attention_span import HF_LAYER_TYPES, AttentionKind
from analytical.errors import SpecError


class _Missing(enum.Enum):
    """Sentinel type for "no default: the key is required" (an enum so the checker narrows it)."""

    MISSING = enum.auto()


MISSING: Final = _Missing.MISSING


def every_nth_full(n: int) -> Callable[[int], AttentionKind]:
    """Layer rule: global (full) attention on every n-th layer, sliding on the others
    (Gemma 2 and GPT-OSS: n = 2; Gemma 3: n = ``sliding_window_pattern`` = 6)."""
    def kind(i: int) -> AttentionKind:
        return AttentionKind.FULL if (i + 1) % n == 0 else AttentionKind.SLIDING
    return kind


class HfConfig:
    """One config mapping and the file it came from."""

    def __init__(self, data: Mapping[str, Any], source: str | None, prefix: str = "") -> None:
        self.data = data
        self.source = source
        self.prefix = prefix  # "text_config." inside a multimodal wrapper

    def error(self, key: str, reason: str) -> SpecError:
        return SpecError(self.prefix + key, reason, source=self.source)

    def int(self, key: str, default: int | _Missing = MISSING, *, minimum: int = 1) -> int:
        """An integer key; JSON null counts as absent (HF writes ``"n_inner": null``)."""
        value = self.data.get(key)
        if value is None:
            if isinstance(default, _Missing):
                raise self.error(key, "missing required key")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"expected an integer, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def number(self, key: str, default: float) -> float:
        """A real-valued key (an int is accepted); JSON null counts as absent."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"expected a number, got {value!r}")
        return float(value)

    def text(self, key: str, default: str | _Missing = MISSING) -> str:
        value = self.data.get(key)
        if value is None:
            if isinstance(default, _Missing):
                raise self.error(key, "missing required key")
            return default
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {value!r}")
        return value

    def int_list(self, key: str) -> list[builtins.int]:
        """A list of integers; absent or null = []."""
        value = self.data.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int)
                                              for v in value):
            raise self.error(key, f"expected a list of integers, got {value!r}")
        return value

    def sub(self, key: str) -> HfConfig:
        """A nested config object (``text_config`` of a multimodal wrapper)."""
        value = self.data.get(key)
        if not isinstance(value, Mapping):
            raise self.error(key, "missing or not a JSON object")
        return HfConfig(value, self.source, prefix=f"{self.prefix}{key}.")

    def head_dim(self, hidden: builtins.int, heads: builtins.int) -> builtins.int:
        """``head_dim`` if given (Qwen3, Mistral), else hidden / heads as transformers does."""
        if self.data.get("head_dim") is not None:
            return self.int("head_dim")
        if hidden % heads:
            raise self.error("num_attention_heads",
                             f"{heads} does not divide hidden size {hidden}; give head_dim")
        return hidden // heads

    def yarn_attention_factor(self) -> float:
        """The factor a YaRN ``rope_scaling`` multiplies the rotary cos / sin by, as transformers
        computes it (``_compute_yarn_parameters``, modeling_rope_utils.py): ``attention_factor``
        if given, else get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both
        are set, else get_mscale(factor), with get_mscale(s, m) = 0.1 m ln(s) + 1 (1 for s <= 1).
        1.0 for no scaling or another type."""
        raw = self.data.get("rope_scaling")
        if not isinstance(raw, Mapping):
            return 1.0
        scaling = HfConfig(raw, self.source, prefix=f"{self.prefix}rope_scaling.")
        if scaling.text("rope_type", scaling.text("type", "default")) != "yarn":
            return 1.0
        if raw.get("attention_factor") is not None:
            return scaling.number("attention_factor", 1.0)
        factor = scaling.number("factor", 1.0)

        def mscale(m: float) -> float:
            return 1.0 if factor <= 1.0 else 0.1 * m * math.log(factor) + 1.0

        m, m_all = scaling.number("mscale", 0.0), scaling.number("mscale_all_dim", 0.0)
        return mscale(m) / mscale(m_all) if m and m_all else mscale(1.0)

    def refuse_true(self, key: str, reason: str) -> None:
        """A boolean switch whose effect on cost is not modelled: refuse it when on."""
        if self.bool(key, False):
            raise self.error(key, f"true is not supported: {reason}")

    # ---- layouts --------------------------------------------------------------------------

    def attention_layout(self, default: Callable[[builtins.int], AttentionKind], *,
                         window_default: builtins.int | None = None) -> dict[str, Any]:
        """``layer_attention`` / ``sliding_window`` / ``attention_chunk`` spec fields.

        An explicit ``layer_types`` list wins (transformers >= 4.53 writes it); otherwise
        ``default(i)`` gives layer i's kind, the family's rule in its transformers config class.
        ``window_default`` is that class's ``sliding_window`` default when the key is absent.
        """
        layers = self.int("num_hidden_layers")
        raw = self.data.get("layer_types")
        if raw is not None:
            if not isinstance(raw, list) or len(raw) != layers:
                raise self.error("layer_types", f"expected a list of {layers} layer types")
            unknown = sorted({t for t in raw if t not in HF_LAYER_TYPES}, key=str)
            if unknown:
                raise self.error("layer_types", f"unsupported {unknown}; supported: "
                                 f"{', '.join(HF_LAYER_TYPES)}")
            kinds = tuple(HF_LAYER_TYPES[t] for t in raw)
        else:
            kinds = tuple(default(i) for i in range(layers))
        fields: dict[str, Any] = {}
        if AttentionKind.SLIDING in kinds:
            fields["sliding_window"] = self.int("sliding_window", window_default or MISSING)
        if AttentionKind.CHUNKED in kinds:
            fields["attention_chunk"] = self.int("attention_chunk_size")
        if any(kind is not AttentionKind.FULL for kind in kinds):
            fields["layer_attention"] = kinds
        return fields

    def uniform_window(self, *, enabled: builtins.bool = True,
                       window_default: builtins.int | None = None) -> dict[str, Any]:
        """Every layer slides over ``sliding_window`` keys when set and ``enabled`` (Mistral,
        Mixtral, Phi-3 and Qwen3-MoE attention pass the one config value to every layer)."""
        present = "sliding_window" in self.data
        window = self.data.get("sliding_window") if present else window_default
        if not enabled or window is None:
            return self.attention_layout(lambda i: AttentionKind.FULL)
        return self.attention_layout(lambda i: AttentionKind.SLIDING,
                                     window_default=window_default)

    def qwen_moe_layers(self, layers: builtins.int) -> tuple[builtins.int, ...]:
        """Qwen2/3-MoE: layer i is MoE unless in ``mlp_only_layers``, when (i + 1) is a multiple
        of ``decoder_sparse_step`` (transformers ``Qwen2MoeDecoderLayer.__init__``)."""
        step = self.int("decoder_sparse_step", 1)
        dense = set(self.int_list("mlp_only_layers"))
        return tuple(i for i in range(layers) if i not in dense and (i + 1) % step == 0)
