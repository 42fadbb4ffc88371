# SPDX-License-Identifier: Apache-2.0
"""`ModelSpec`: one decoder-only transformer's architecture, with exact parameter and FLOP counts.

Counts follow the Hugging Face implementations weight by weight (every matrix, bias and norm
vector); the formulas name their terms. Reading ``config.json`` lives in `analytical.model_hf`,
the named catalog in `analytical.model`; how operators are laid out over GPUs lives in simulate/.
Dimensions: h = hidden, L = layers, a = heads, g = kv heads, d = head dim, f = MLP width,
V = vocabulary, S = sequence length.
"""

from __future__ import annotations

from dataclasses import dataclass

from analytical.attention_span import AttentionKind, cached_tokens, mean_keys
from analytical.errors import SpecError

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gpt2", "gpt3", "mixtral", "qwen2_moe",
            "qwen3_moe", "deepseek_v2", "deepseek_v3", "gemma2", "gemma3", "phi3", "gpt_oss",
            "llama4", "nemotron")
# swiglu = silu(gate) * up, geglu = gelu(gate) * up (Gemma): gated, 3 matrices; gelu, relu2 =
# relu(x)^2 (Nemotron; So et al. 2021, Primer): 2 matrices. layernorm1p: weight + 1, and a bias.
ACTIVATIONS = ("swiglu", "geglu", "gelu", "relu2")
NORMS = ("rmsnorm", "layernorm", "layernorm1p")
POSITIONS = ("rope", "learned")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec:
    """A decoder-only LLM (dense, MoE, or MLA + MoE), as its ``config.json`` describes it."""

    name: str  # catalog key or file stem
    family: str  # one of FAMILIES
    hidden: int  # h: residual stream width
    layers: int  # L: decoder blocks
    heads: int  # a: query heads
    kv_heads: int  # g: key/value heads (GQA/MQA); MLA: = heads
    head_dim: int  # d: per-head width; MLA: qk_nope_head_dim + qk_rope_head_dim
    ffn_hidden: int  # f: dense MLP intermediate size
    vocab: int  # V
    max_seq_len: int  # max_position_embeddings / n_positions
    activation: str  # "swiglu" / "geglu" (gated, 3 matrices) | "gelu" / "relu2" (2 matrices)
    norm: str  # "rmsnorm" (weight) | "layernorm" / "layernorm1p" (weight + bias)
    position: str  # "rope" | "learned" (a max_seq_len x h table)
    tied_embeddings: bool  # LM head shares the input embedding matrix
    qkv_bias: bool = False  # biases on the q, k, v projections
    mlp_bias: bool = False  # biases on every MLP / expert projection
    num_experts: int = 0  # routed experts; 0 = dense
    top_k: int = 0  # routed experts per token
    moe_ffn_hidden: int = 0  # intermediate size of one routed expert
    shared_ffn_hidden: int = 0  # total intermediate width of shared expert(s), 0 if none
    first_dense_layers: int = 0  # DeepSeek first_k_dense_replace
    moe_layer_freq: int = 1  # layer i >= first_dense_layers is MoE when i % freq == 0
    q_lora_rank: int = 0  # MLA (DeepSeek); 0 = no q compression
    kv_lora_rank: int = 0  # 0 = not MLA
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    attn_out_bias: bool = False  # bias on the attention output projection (GPT-2, Llama opt.)
    qk_norm: bool = False  # per-head RMSNorm on q and k (Qwen3)
    shared_expert_gate: bool = False  # sigmoid gate h -> 1 on the shared expert (Qwen2-MoE)
    router_bias: bool = False  # per-expert routing bias (DeepSeek-V3 e_score_correction_bias)
    layer_attention: tuple[AttentionKind, ...] = ()
    """Attention kind of every layer, in order; empty = all full (see `layer_kinds`)."""
    sliding_window: int = 0
    """Keys a SLIDING layer sees, its own included (HF ``sliding_window``); 0 = no such layer."""
    attention_chunk: int = 0
    """Block size of CHUNKED layers (Llama 4 ``attention_chunk_size``); 0 = no such layer."""
    attention_sinks: bool = False
    """GPT-OSS: one learned sink logit per query head and layer, an extra softmax column."""
    rope_attention_factor: float = 1.0
    """YaRN's attention factor (HF ``rope_scaling`` of type yarn: ``attention_factor``, else
    0.1 ln(factor) + 1 or the DeepSeek mscale ratio): the rotary cos / sin are scaled by it
    (GPT-OSS: 1.347). 1 = plain RoPE, or a scaling whose tables carry no factor."""
    post_norms: bool = False
    """Gemma 2/3: RMSNorms on the attention and MLP outputs too (4 norms per layer, not 2)."""
    glu_clamp: float = 0.0
    """GPT-OSS ``swiglu_limit``: the gated MLP clamps its gate half from above and its linear
    half on both sides at this value before the activation; 0 = no clamp."""
    moe_layer_ids: tuple[int, ...] = ()
    """Indices of the MoE layers when they follow no DeepSeek rule (Qwen-MoE
    ``mlp_only_layers`` / ``decoder_sparse_step``, Llama 4 ``interleave_moe_layer_step``);
    empty = the ``first_dense_layers`` / ``moe_layer_freq`` rule. See `moe_layer_indices`."""

    def __post_init__(self) -> None:
        for key in ("hidden", "layers", "heads", "kv_heads", "head_dim", "vocab", "max_seq_len"):
            _check_int(self, key, minimum=1)
        for key in ("ffn_hidden", "num_experts", "top_k", "moe_ffn_hidden", "shared_ffn_hidden",
                    "first_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                    "qk_rope_head_dim", "v_head_dim"):
            _check_int(self, key, minimum=0)
        _check_int(self, "moe_layer_freq", minimum=1)
        if not self.glu_clamp >= 0.0:
            raise SpecError("glu_clamp", f"must be >= 0, got {self.glu_clamp}")
        if not self.rope_attention_factor > 0.0:
            raise SpecError("rope_attention_factor",
                            f"must be > 0, got {self.rope_attention_factor}")
        for key, allowed in (("family", FAMILIES), ("activation", ACTIVATIONS), ("norm", NORMS),
                             ("position", POSITIONS)):
            if getattr(self, key) not in allowed:
                raise SpecError(key, f"got {getattr(self, key)!r}; allowed: {', '.join(allowed)}")
        if self.heads % self.kv_heads:
            raise SpecError("kv_heads", f"{self.kv_heads} does not divide heads={self.heads}")
        if self.num_experts:
            if not 0 < self.top_k <= self.num_experts:
                raise SpecError("top_k", f"must be in 1..{self.num_experts}, got {self.top_k}")
            if self.moe_ffn_hidden <= 0:
                raise SpecError("moe_ffn_hidden", "must be > 0 for an MoE model")
        if self.first_dense_layers > self.layers:
            raise SpecError("first_dense_layers", f"{self.first_dense_layers} > layers")
        if self.dense_layers and self.ffn_hidden <= 0:
            raise SpecError("ffn_hidden", "must be > 0: the model has dense MLP layers")
        if self.kv_lora_rank:
            for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                _check_int(self, key, minimum=1)
            if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                raise SpecError("head_dim", "MLA head_dim must be qk_nope + qk_rope head dims")
        _check_layer_attention(self)
        _check_moe_layer_ids(self)

    # ---- structure ---------------------------------------------------------------------------

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def gated_mlp(self) -> bool:
        return self.activation in ("swiglu", "geglu")

    @property
    def moe_layer_indices(self) -> tuple[int, ...]:
        """Indices of the blocks whose MLP is routed experts: ``moe_layer_ids`` if given, else
        layers >= first_dense_layers with i % moe_layer_freq == 0 (DeepSeek; Mixtral: all)."""
        if not self.is_moe:
            return ()
        if self.moe_layer_ids:
            return self.moe_layer_ids
        return tuple(i for i in range(self.first_dense_layers, self.layers)
                     if i % self.moe_layer_freq == 0)

    @property
    def moe_layers(self) -> int:
        """Number of MoE blocks (see `moe_layer_indices`)."""
        return len(self.moe_layer_indices)

    @property
    def layer_kinds(self) -> tuple[AttentionKind, ...]:
        """Attention kind of each of the ``layers`` blocks (all FULL unless set)."""
        return self.layer_attention or (AttentionKind.FULL,) * self.layers

    def attention_span(self, kind: AttentionKind) -> int:
        """Window (SLIDING) or chunk (CHUNKED) size of a layer kind; 0 for FULL."""
        return {AttentionKind.SLIDING: self.sliding_window,
                AttentionKind.CHUNKED: self.attention_chunk}.get(kind, 0)

    @property
    def dense_layers(self) -> int:
        return self.layers - self.moe_layers

    @property
    def qk_head_dim(self) -> int:
        """Width of one query/key head in the score product (MLA: nope + rope)."""
        return self.head_dim

    @property
    def value_head_dim(self) -> int:
        """Width of one value head (MLA: v_head_dim)."""
        return self.v_head_dim if self.is_mla else self.head_dim

    # ---- parameters --------------------------------------------------------------------------

    @property
    def attention_params_per_layer(self) -> int:
        """Projection weights and biases of one attention block (norms are counted apart)."""
        h, a = self.hidden, self.heads
        if self.is_mla:
            # DeepSeek-V2 paper sec. 2.1 (arXiv:2405.04434): q = W_UQ(W_DQ x) or W_Q x,
            # [c_KV, k_rope] = W_DKV x, [k_nope, v] = W_UKV c_KV, out = W_O o.
            q_out = a * self.qk_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * q_out if self.q_lora_rank
                 else h * q_out)
            kv_down = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_up = self.kv_lora_rank * a * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv_down + kv_up + a * self.v_head_dim * h
        q_out, kv_out = a * self.head_dim, self.kv_heads * self.head_dim
        weights = h * (q_out + 2 * kv_out) + q_out * h  # W_q, W_k, W_v, W_o
        biases = (q_out + 2 * kv_out) * self.qkv_bias + h * self.attn_out_bias
        return weights + biases + a * self.attention_sinks

    def _mlp_params(self, width: int) -> int:
        """One MLP of intermediate ``width``: gated = up, gate, down; else up, down."""
        mats = 3 if self.gated_mlp else 2
        biases = ((mats - 1) * width + self.hidden) if self.mlp_bias else 0
        return mats * self.hidden * width + biases

    @property
    def dense_mlp_params(self) -> int:
        """One dense MLP (``ffn_hidden`` wide)."""
        return self._mlp_params(self.ffn_hidden)

    @property
    def expert_params(self) -> int:
        """One routed expert (``moe_ffn_hidden`` wide)."""
        return self._mlp_params(self.moe_ffn_hidden) if self.is_moe else 0

    @property
    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer together (``shared_ffn_hidden`` wide)."""
        return self._mlp_params(self.shared_ffn_hidden) if self.shared_ffn_hidden else 0

    @property
    def router_params_per_layer(self) -> int:
        """Router h x E, plus the shared-expert gate (h) and routing bias (E) where present."""
        if not self.is_moe:
            return 0
        e = self.num_experts
        return self.hidden * e + self.hidden * self.shared_expert_gate + e * self.router_bias

    @property
    def _norm_size(self) -> int:
        return 1 if self.norm == "rmsnorm" else 2  # weight (+ bias)

    @property
    def norm_params_per_layer(self) -> int:
        """Pre-attention and pre-MLP norms (Gemma: post-norms too), q/k norms (Qwen3, Gemma 3)
        and MLA latent norms."""
        total = (4 if self.post_norms else 2) * self.hidden * self._norm_size
        if self.qk_norm:
            total += 2 * self.head_dim
        if self.is_mla:
            total += self.kv_lora_rank + self.q_lora_rank
        return total

    @property
    def final_norm_params(self) -> int:
        return self.hidden * self._norm_size

    @property
    def embedding_params(self) -> int:
        """Token embedding V x h, plus the learned position table (S_max x h) where used."""
        positions = self.max_seq_len * self.hidden if self.position == "learned" else 0
        return self.vocab * self.hidden + positions

    @property
    def lm_head_params(self) -> int:
        """Output projection h x V; 0 when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab * self.hidden

    @property
    def moe_mlp_params(self) -> int:
        """One MoE layer's MLP: all routed experts, shared experts and router."""
        return (self.num_experts * self.expert_params + self.shared_expert_params
                + self.router_params_per_layer)

    @property
    def params_total(self) -> int:
        """Every stored parameter (tied matrices once). DeepSeek MTP modules are not counted."""
        blocks = self.layers * (self.attention_params_per_layer + self.norm_params_per_layer)
        mlps = self.dense_layers * self.dense_mlp_params + self.moe_layers * self.moe_mlp_params
        return (self.embedding_params + self.lm_head_params + self.final_norm_params + blocks
                + mlps)

    @property
    def params_active(self) -> int:
        """Parameters one token touches: all but the (E - top_k) unrouted experts per MoE layer."""
        idle = self.moe_layers * (self.num_experts - self.top_k) * self.expert_params
        return self.params_total - idle

    @property
    def params_non_embedding(self) -> int:
        """Kaplan et al. 2020's N: everything but the embedding tables and the LM head."""
        return self.params_total - self.embedding_params - self.lm_head_params

    @property
    def matmul_params_active(self) -> int:
        """Weight-matrix entries one token multiplies through, LM head included even if tied.

        Embedding lookups, norm vectors and biases are left out: they do no multiply-accumulate.
        """
        moe = (self.top_k * self._matmul_weights(self.moe_ffn_hidden)
               + self._matmul_weights(self.shared_ffn_hidden)
               + self.hidden * (self.num_experts + self.shared_expert_gate))
        return (self.layers * self._attention_weights()
                + self.dense_layers * self._matmul_weights(self.ffn_hidden)
                + self.moe_layers * moe + self.vocab * self.hidden)

    def _attention_weights(self) -> int:
        """Attention projection weights without biases (MLA has none)."""
        if self.is_mla:
            return self.attention_params_per_layer
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.hidden * (q_out + 2 * kv_out) + q_out * self.hidden

    def _matmul_weights(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden * width

    # ---- FLOPs and memory ----------------------------------------------------------------------

    def attention_flops_per_token(self, seq_len: int, *, training: bool = True,
                                  causal: bool = True) -> float:
        """Score (QK^T) and value (PV) FLOPs for the average token of a ``seq_len`` sequence.

        Forward = 2 * L * a * (d_qk + d_v) * S, i.e. 4 * L * a * d * S when d_qk = d_v
        (Kaplan et al. 2020 table 1, n_ctx term; PaLM appendix B's 6 * L * H * Q * T for
        training), halved when causal since a token attends to S/2 keys on average. Sliding and
        chunked layers see fewer keys (`analytical.attention_span.mean_keys`).
        """
        _check_seq_len(seq_len)
        per_key = 2.0 * self.heads * (self.qk_head_dim + self.value_head_dim)
        forward = per_key * sum(mean_keys(kind, seq_len, self.attention_span(kind), causal=causal)
                                for kind in self.layer_kinds)
        return 3.0 * forward if training else forward

    def flops_per_token(self, seq_len: int, *, training: bool = True,
                        causal: bool = True) -> float:
        """Model FLOPs per token: 2 * active matmul params + attention, x3 when training.

        Forward = 2N + attention (Kaplan et al. 2020, sec. 2.1); backward = 2 x forward
        (Narayanan et al. 2021, Megatron-LM, eq. 3), so training = 6N + 3 x attention.
        Recomputation is not included (these are model FLOPs, as MFU uses them).
        """
        forward_matmul = 2.0 * self.matmul_params_active
        matmul = 3.0 * forward_matmul if training else forward_matmul
        return matmul + self.attention_flops_per_token(seq_len, training=training, causal=causal)

    def kv_cache_bytes_per_token(self, dtype_bytes: float) -> float:
        """KV-cache bytes one token adds over all layers, sliding/chunked layers included.

        2 * g * d per layer (keys and values); MLA caches the compressed latent and the shared
        rope key instead: kv_lora_rank + qk_rope_head_dim (DeepSeek-V2 sec. 2.1.2). This is what
        a cache that keeps every token on every layer reserves; `kv_cache_bytes` caps windowed
        layers at their span.
        """
        return float(self.layers * self._kv_elements_per_layer(dtype_bytes) * dtype_bytes)

    def kv_cache_bytes(self, context_len: int, dtype_bytes: float) -> float:
        """KV-cache bytes of one sequence holding ``context_len`` tokens: full layers keep all,
        sliding and chunked layers at most their span (`attention_span.cached_tokens`)."""
        _check_seq_len(context_len)
        tokens = sum(cached_tokens(kind, context_len, self.attention_span(kind))
                     for kind in self.layer_kinds)
        return float(tokens * self._kv_elements_per_layer(dtype_bytes) * dtype_bytes)

    def _kv_elements_per_layer(self, dtype_bytes: float) -> int:
        if dtype_bytes <= 0:
            raise SpecError("dtype_bytes", f"must be > 0, got {dtype_bytes}")
        return (self.kv_lora_rank + self.qk_rope_head_dim if self.is_mla
                else 2 * self.kv_heads * self.head_dim)


def _check_int(spec: ModelSpec, key: str, *, minimum: int) -> None:
    value = getattr(spec, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(key, f"must be an int >= {minimum}, got {value!r}")


def _check_seq_len(seq_len: int) -> None:
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 0:
        raise SpecError("seq_len", f"must be an int >= 0, got {seq_len!r}")


def _check_layer_attention(spec: ModelSpec) -> None:
    """Per-layer kinds: one per layer, known kinds, and a span for each windowed kind used."""
    _check_int(spec, "sliding_window", minimum=0)
    _check_int(spec, "attention_chunk", minimum=0)
    kinds = spec.layer_attention
    if not kinds:
        return
    if len(kinds) != spec.layers:
        raise SpecError("layer_attention", f"{len(kinds)} entries for {spec.layers} layers")
    for kind in kinds:
        if not isinstance(kind, AttentionKind):
            allowed = ", ".join(AttentionKind)
            raise SpecError("layer_attention", f"got {kind!r}; allowed: {allowed}")
    if AttentionKind.SLIDING in kinds and spec.sliding_window < 1:
        raise SpecError("sliding_window", "must be >= 1: some layers use a sliding window")
    if AttentionKind.CHUNKED in kinds and spec.attention_chunk < 1:
        raise SpecError("attention_chunk", "must be >= 1: some layers use chunked attention")


def _check_moe_layer_ids(spec: ModelSpec) -> None:
    """Explicit MoE layers: sorted, unique, in range; only on an MoE model, not with the rule."""
    ids = spec.moe_layer_ids
    if not ids:
        return
    if not spec.num_experts:
        raise SpecError("moe_layer_ids", "given for a dense model (num_experts = 0)")
    if spec.first_dense_layers or spec.moe_layer_freq != 1:
        raise SpecError("moe_layer_ids", "give either the explicit list or "
                        "first_dense_layers / moe_layer_freq, not both")
    if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise SpecError("moe_layer_ids", f"must be integers, got {ids!r}")
    if list(ids) != sorted(set(ids)) or ids[0] < 0 or ids[-1] >= spec.layers:
        raise SpecError("moe_layer_ids", f"must be sorted, unique and in 0..{spec.layers - 1}")
