"""GPTConfig: every switch of gptscope's GPT in one dataclass (GPT-2's block by default; model/gpt.py's
docstring draws the blocks they build), the presets the app knows by name, and `count_params`, the exact
parameter count of a config without building the model."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Literal

import torch


@dataclass
class GPTConfig:
    vocab_size: int = 2048  # number of token ids the model can read and predict
    n_ctx: int = 256  # context length: the most positions one forward pass sees
    n_layer: int = 4  # number of Transformer blocks
    n_head: int = 4  # attention heads per block; d_model must divide evenly among them
    d_model: int = 128  # width of the residual stream
    d_mlp: int = 0  # MLP hidden width; 0 means the usual 4 * d_model
    dropout: float = 0.0  # on embeddings, attention pattern, and sublayer outputs (training only)
    bias: bool = True  # biases in Linear layers and LayerNorm (GPT-1/2 have them)
    # where each sublayer's norm sits: GPT-2 normalises before it ("pre"), GPT-1 after the residual
    # add ("post"), Gemma 2 both before and on its output before the add ("both", the sandwich),
    # OLMo 2 only on its output before the add ("out": x + LN(f(x)))
    norm: Literal["pre", "post", "both", "out"] = "pre"
    gelu: Literal["exact", "tanh"] = "tanh"  # exact x*Phi(x), or GPT-2's tanh approximation
    tie_weights: bool = True  # the unembedding reuses the token embedding matrix: logits = h @ W_E^T
    causal: bool = True  # mask future positions; False only for the "remove the mask" experiment
    ln_eps: float = 1e-5
    # --- the modern block (all off by default: GPT-2's block) ---------------------------------
    pos: Literal["learned", "rope", "none"] = "learned"  # learned position rows, rotary (RoPE), or none
    rope_base: float = 10000.0  # RoPE: pair i turns by position * base^(-2i / d_head)
    norm_type: Literal["layernorm", "rmsnorm"] = "layernorm"  # RMSNorm: no mean, no shift
    # SwiGLU: silu(x W_gate) * (x W_up), then W_down; GeGLU (Gemma): the same with GELU (gelu's form) for silu
    mlp: Literal["gelu", "swiglu", "geglu"] = "gelu"
    n_kv_head: int = 0  # key/value heads (grouped-query attention); 0 = n_head, 1 = multi-query
    window: int = 0  # sliding-window attention: each query sees its last `window` keys; 0 = all
    n_expert: int = 0  # mixture of experts: this many FFNs and a router; 0 = one dense FFN
    top_k_experts: int = 1  # experts each token is sent to
    aux_loss_weight: float = 0.01  # weight of the router's load-balancing loss in training
    # --- what imported models of the LLaMA family add (all off by default) ---------------------
    head_dim: int = 0  # size of each head; 0 = d_model / n_head (Qwen3 sets its own: nh * hs != d)
    qkv_bias: bool = False  # biases on W_Q, W_K, W_V even when bias=False (Qwen2)
    attn_out_bias: bool = False  # a bias on W_O even when bias=False (Llama's attention_bias, with qkv_bias)
    mlp_bias: bool = False  # biases on the MLP's matrices even when bias=False (Llama's mlp_bias)
    qk_norm: bool = False  # an RMSNorm (gain of hs) over each head's q and k, before RoPE (Qwen3)
    # RoPE's frequencies stretched for long contexts: "linear" divides them all by rope_factor;
    # "llama3" (Llama 3.1) divides only the slow ones (wavelength above rope_original_ctx /
    # rope_low_freq_factor), keeps the fast ones (below rope_original_ctx / rope_high_freq_factor)
    # and blends between the two; "longrope" (LongRoPE: Phi-3-mini-128k, Phi-3.5-mini, Phi-4-mini) divides
    # pair i's frequency by its own factor: rope_short_factor[i] while a forward call reaches no position
    # past rope_original_ctx, rope_long_factor[i] once it does, and multiplies cos and sin by
    # rope_attention_factor
    rope_scaling: Literal["none", "linear", "llama3", "longrope"] = "none"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_ctx: int = 8192  # llama3, longrope: the context length the model was pre-trained with
    rope_short_factor: tuple[float, ...] = ()  # longrope: one factor per rotary pair (rotary / 2 of them)
    rope_long_factor: tuple[float, ...] = ()  # longrope: the same, for calls past rope_original_ctx
    # longrope: cos and sin times this; 0 = the paper's sqrt(1 + ln(rope_factor) / ln(rope_original_ctx))
    rope_attention_factor: float = 0.0
    # --- nanochat's block (all off by default; the module docstring draws it) -------------------
    norm_gain: bool = True  # False: the norms have no gain at all (nanochat's RMSNorm has no parameters)
    qk_norm_scale: float = 0.0  # qk_norm with no gain, times this fixed number (nanochat: 1.2); 0 = learned gains
    rope_sign: int = 1  # -1: q and k turn by -angle (nanochat: the transpose of the textbook rotation)
    embed_norm: bool = False  # a norm right after the token embedding
    smear: int = 0  # x_t += lambda_s sigmoid(W_s x_t[:smear]) x_{t-1}, on the embedding; 0 = off (nanochat: 24)
    x0_mix: bool = False  # block i reads resid_lambda_i * x + x0_lambda_i * x0 (x0: the embedding after the smear)
    backout: bool = False  # the final norm reads x - backout_lambda * (the stream after block n_layer // 2)
    # value embeddings on alternating layers, the last one included: v += 3 sigmoid(W_g x[:value_embed]) VE[token]
    # per key/value head; 0 = off (nanochat: 12 channels feed the gate)
    value_embed: int = 0
    # per-layer windows, the pattern tiled over the layers: "S" layers see their last `window` keys, "L"
    # layers every key; the last layer is "L" whatever the pattern unless window_last_full is off
    # (nanochat: "SSSL"; Gemma 2: "SL", Gemma 3: "SSSSSL"); "" = `window` for every layer
    window_pattern: str = ""
    softcap: float = 0.0  # logits = softcap * tanh(z / softcap); 0 = none (nanochat: 15, Gemma 2: 30)
    # the last layer sees every key whatever window_pattern says (nanochat); False: the pattern decides (Gemma)
    window_last_full: bool = True
    # --- what GPT-NeoX (Pythia), Gemma 2 and 3, Phi-3 and OLMo 2 add (all off by default) ----------
    parallel: bool = False  # attention and the MLP both read the block's input: x + attn(LN1 x) + mlp(LN2 x) (GPT-NeoX)
    rotary_dim: int = 0  # RoPE turns only each head's first rotary_dim channels (GPT-NeoX: hs / 4); 0 = all of them
    attn_scale: float = 0.0  # scores = q k^T * attn_scale; 0 = 1 / sqrt(hs) (Gemma: query_pre_attn_scalar^-1/2)
    # scores = attn_softcap * tanh(scores / attn_softcap), before the mask (Gemma 2: 50); 0 = none
    attn_softcap: float = 0.0
    embed_scale: float = 1.0  # the token's row of W_E times this as it enters the stream (Gemma: sqrt(d_model))
    rope_local_base: float = 0.0  # RoPE base of the windowed layers, unscaled (Gemma 3: 10,000); 0 = rope_base for all
    qk_norm_all: bool = False  # qk_norm over all heads at once (nh * hs channels for q, n_kv * hs for k) (OLMo 2)

    def __post_init__(self) -> None:
        if self.d_mlp == 0:
            # SwiGLU has three matrices instead of two: 8d/3 wide keeps the parameter count of 4d
            self.d_mlp = 4 * self.d_model if not self.gated else max(1, round(8 * self.d_model / 3))
        if self.n_kv_head == 0:
            self.n_kv_head = self.n_head
        problems = []
        for name in ("vocab_size", "n_ctx", "n_layer", "n_head", "d_model", "d_mlp", "n_kv_head", "top_k_experts"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1")
        if self.head_dim < 0:
            problems.append("head_dim must be >= 0 (0: d_model / n_head)")
        elif not self.head_dim and self.d_model % self.n_head:
            problems.append(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if self.n_kv_head >= 1 and self.n_head % self.n_kv_head:
            problems.append(f"n_head ({self.n_head}) must be divisible by n_kv_head ({self.n_kv_head})")
        if self.pos == "rope" and (self.head_dim or self.d_model // max(1, self.n_head)) % 2:
            problems.append("rope needs an even head size (head_dim, or d_model / n_head)")
        if self.rope_scaling != "none" and not (self.rope_factor >= 1.0 and math.isfinite(self.rope_factor)):
            problems.append(f"rope_factor ({self.rope_factor}) must be a finite number >= 1")
        if self.rope_scaling == "llama3" and not (
            0 < self.rope_low_freq_factor < self.rope_high_freq_factor and self.rope_original_ctx >= 1
        ):
            problems.append("llama3 rope scaling needs 0 < rope_low_freq_factor < rope_high_freq_factor")
        problems += self._longrope_problems()
        if self.window < 0 or self.n_expert < 0:
            problems.append("window and n_expert must be >= 0")
        if self.n_expert and self.top_k_experts > self.n_expert:
            problems.append(f"top_k_experts ({self.top_k_experts}) must be <= n_expert ({self.n_expert})")
        if not self.n_expert and self.top_k_experts != 1:
            problems.append(f"top_k_experts ({self.top_k_experts}) needs experts: set n_expert too")
        if not 0.0 <= self.dropout < 1.0:
            problems.append("dropout must be in [0, 1)")
        problems += self._nanochat_problems() + self._family_problems()
        for name, allowed in (
            ("norm", ("pre", "post", "both", "out")),
            ("gelu", ("exact", "tanh")),
            ("pos", ("learned", "rope", "none")),
            ("norm_type", ("layernorm", "rmsnorm")),
            ("mlp", ("gelu", "swiglu", "geglu", "relu2")),
            ("rope_scaling", ("none", "linear", "llama3", "longrope")),
        ):
            if getattr(self, name) not in allowed:
                problems.append(f"{name} must be one of {', '.join(repr(a) for a in allowed)}")
        if problems:
            raise ValueError("; ".join(problems))

    def _longrope_problems(self) -> list[str]:
        """LongRoPE's factors: rotary / 2 positive numbers each (stored as tuples of floats, so a
        checkpoint's JSON lists load back equal), set only with rope_scaling "longrope"."""
        problems, longrope = [], self.rope_scaling == "longrope"
        for name in ("rope_short_factor", "rope_long_factor"):
            v = getattr(self, name)
            ok = isinstance(v, (list, tuple)) and all(
                not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in v
            )
            if not ok:
                problems.append(f"{name} must be a list of finite numbers > 0")
                continue
            setattr(self, name, tuple(float(x) for x in v))
            pairs = self.rotary // 2 if self.n_head >= 1 and self.pos == "rope" else len(v)
            if longrope and len(v) != pairs:
                problems.append(f"{name} has {len(v)} factors; longrope needs one per rotary pair ({pairs})")
            if not longrope and v:
                problems.append(f"{name} is set: it needs rope_scaling='longrope'")
        a = self.rope_attention_factor
        if not (a >= 0 and math.isfinite(a)) or (a and not longrope):
            problems.append("rope_attention_factor must be a finite number >= 0, and needs rope_scaling='longrope'")
        if longrope and (self.pos != "rope" or self.rope_original_ctx < 2):
            problems.append("longrope rope scaling needs pos='rope' and rope_original_ctx >= 2")
        return problems

    def _nanochat_problems(self) -> list[str]:
        problems = []
        if self.rope_sign not in (1, -1):
            problems.append("rope_sign must be 1 or -1")
        if not (self.qk_norm_scale >= 0 and math.isfinite(self.qk_norm_scale)) or (
            self.qk_norm_scale and not self.qk_norm
        ):
            problems.append("qk_norm_scale must be a finite number >= 0, and needs qk_norm")
        if not (self.softcap >= 0 and math.isfinite(self.softcap)):
            problems.append("softcap must be a finite number >= 0")
        for name in ("smear", "value_embed"):
            if not 0 <= getattr(self, name) <= self.d_model:
                problems.append(f"{name} (the channels its gate reads) must be in [0, d_model]")
        if set(self.window_pattern.upper()) - set("SL"):
            problems.append("window_pattern may hold only 'S' and 'L'")
        elif "S" in self.window_pattern.upper() and not self.window:
            problems.append("window_pattern has 'S' layers: set window (their window) too")
        if (self.embed_norm or self.smear or self.x0_mix or self.backout) and self.norm != "pre":
            problems.append("embed_norm, smear, x0_mix and backout need a pre-norm block (norm='pre')")
        return problems

    def _family_problems(self) -> list[str]:
        problems = []
        for name in ("attn_scale", "attn_softcap", "rope_local_base"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                problems.append(f"{name} must be a finite number >= 0")
        if not (self.embed_scale > 0 and math.isfinite(self.embed_scale)):
            problems.append("embed_scale must be a finite number > 0")
        if self.rotary_dim and (
            self.pos != "rope"
            or self.rotary_dim % 2
            or not 0 < self.rotary_dim <= (self.head_dim or self.d_model // max(1, self.n_head))
        ):
            problems.append("rotary_dim needs pos='rope' and must be even and at most the head size")
        if self.parallel and self.norm != "pre":
            problems.append("parallel needs a pre-norm block (norm='pre')")
        if self.qk_norm_all and (not self.qk_norm or self.qk_norm_scale):
            problems.append("qk_norm_all needs qk_norm with learned gains (no qk_norm_scale)")
        if self.rope_local_base and (self.pos != "rope" or not self.window):
            problems.append("rope_local_base needs pos='rope' and windowed layers (window)")
        return problems

    @property
    def gated(self) -> bool:
        """The MLP has a gate (SwiGLU, GeGLU): three matrices, not two."""
        return self.mlp in ("swiglu", "geglu")

    @property
    def rotary(self) -> int:
        """The channels of each head RoPE turns: rotary_dim, or the whole head."""
        return self.rotary_dim or self.d_head

    @property
    def d_head(self) -> int:
        return self.head_dim or self.d_model // self.n_head

    @property
    def has_x0(self) -> bool:
        """The embedding stream is more than W_E's rows (a norm, a smear, a scale) or is mixed back in: hook_x0."""
        return self.embed_norm or bool(self.smear) or self.x0_mix or self.embed_scale != 1.0

    @property
    def extras(self) -> list[str]:
        """nanochat's stream pieces this config turns on, by name (the forward page's extras stage)."""
        on = dict(smear=bool(self.smear), x0_mix=self.x0_mix, value_embed=bool(self.value_embed))
        on.update(backout=self.backout, softcap=bool(self.softcap))
        return [k for k, v in on.items() if v]

    @property
    def nanochat_stream(self) -> bool:
        """nanochat's stream pieces besides the logits' softcap (a softcap alone is Gemma 2's too)."""
        return any(e != "softcap" for e in self.extras)

    @property
    def switches(self) -> list[str]:
        """The differences from GPT-2's and LLaMA's blocks that the imported families turn on, by name
        (the forward page's switches stage); the final softcap here only without nanochat's stream pieces
        (nanochat's own stage shows it then)."""
        pattern = (
            {self.window_pattern.upper()[i % len(self.window_pattern)] for i in range(self.n_layer)}
            if self.window_pattern
            else set()
        )
        on = dict(
            parallel=self.parallel,
            rotary_dim=bool(self.rotary_dim),
            geglu=self.mlp == "geglu",
            sandwich=self.norm == "both",
            norm_out=self.norm == "out",
            qk_norm_all=self.qk_norm_all,
            embed_scale=self.embed_scale != 1.0,
            attn_scale=bool(self.attn_scale),
            attn_softcap=bool(self.attn_softcap),
            local_global=bool(self.window) and pattern == {"S", "L"},
            rope_local_base=bool(self.rope_local_base),
            longrope=self.rope_scaling == "longrope",
            softcap=bool(self.softcap) and self.extras == ["softcap"],
        )
        return [k for k, v in on.items() if v]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown config fields: {sorted(unknown)}")
        return cls(**d)


def has_value_embed(cfg: GPTConfig, layer: int) -> bool:
    """Value embeddings sit on alternating layers, the last one included (nanochat's has_ve)."""
    return bool(cfg.value_embed) and layer % 2 == (cfg.n_layer - 1) % 2


NANOCHAT_EPS = float(torch.finfo(torch.float32).eps)  # F.rms_norm's eps when none is given, in float32

# Architectures the app knows by name. `cpu` is the shape both training recipes start from
# (model/train.py's RECIPES) and the one benchmarks/ times. The built-in model
# (model/builtin/checkpoint.json) was trained from it with overrides, 6 blocks of width 192 over
# 256 positions with dropout 0.1, and its 2048-token vocabulary comes from the BPE tokenizer
# trained on the corpus. `gpt1` and `gpt2` reproduce the published shapes so their sizes can be
# shown, and a GPU user can train them.
PRESETS: dict[str, dict] = {
    "tiny": dict(n_ctx=64, n_layer=2, n_head=4, d_model=64),
    "cpu": dict(n_ctx=128, n_layer=4, n_head=4, d_model=128, dropout=0.0),  # the recipes' default shape
    # the cpu shape as GPT-2 built it, and as LLaMA-family models build it today: rotary positions,
    # RMSNorm, SwiGLU, grouped-query attention (2 key/value heads for 4 query heads), no biases.
    # SwiGLU is 398 wide here (about 3.1d) so the two have the same parameter count (within 0.1%).
    "gpt2-style": dict(n_ctx=128, n_layer=4, n_head=4, d_model=128, dropout=0.0),
    "llama-style": dict(
        n_ctx=128,
        n_layer=4,
        n_head=4,
        d_model=128,
        dropout=0.0,
        pos="rope",
        norm_type="rmsnorm",
        mlp="swiglu",
        d_mlp=398,
        n_kv_head=2,
        bias=False,
    ),
    # the cpu shape as nanochat builds its block (model/importers/nanochat.py reads nanochat's own checkpoints):
    # every switch of nanochat's, with its constants; the short windows cover half the context here
    "nanochat-tiny": dict(
        n_ctx=128,
        n_layer=4,
        n_head=4,
        d_model=128,
        dropout=0.0,
        bias=False,
        tie_weights=False,
        ln_eps=NANOCHAT_EPS,
        pos="rope",
        rope_base=100000.0,
        rope_sign=-1,
        norm_type="rmsnorm",
        norm_gain=False,
        mlp="relu2",
        n_kv_head=2,
        qk_norm=True,
        qk_norm_scale=1.2,
        embed_norm=True,
        smear=24,
        x0_mix=True,
        backout=True,
        value_embed=12,
        window=64,
        window_pattern="SSSL",
        softcap=15.0,
    ),
    "gpt1": dict(
        vocab_size=40478,
        n_ctx=512,
        n_layer=12,
        n_head=12,
        d_model=768,
        d_mlp=3072,
        norm="post",
        gelu="tanh",  # the released GPT-1 code's tanh form (gpt1-genealogy.txt), as model/genealogy.py says
        dropout=0.1,
    ),
    "gpt2": dict(
        vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, d_model=768, norm="pre", gelu="tanh", dropout=0.1
    ),
    "gpt2-medium": dict(vocab_size=50257, n_ctx=1024, n_layer=24, n_head=16, d_model=1024),
    "gpt2-large": dict(vocab_size=50257, n_ctx=1024, n_layer=36, n_head=20, d_model=1280),
    "gpt2-xl": dict(vocab_size=50257, n_ctx=1024, n_layer=48, n_head=25, d_model=1600),
}


def preset_config(name: str, **overrides) -> GPTConfig:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return GPTConfig(**{**PRESETS[name], **overrides})


def count_params(cfg: GPTConfig) -> dict[str, int]:
    """Exact parameter counts for a config, without building the model.

    ``total`` counts every trainable number (a tied matrix once). ``seed_convention`` follows
    the GPT-1 write-up: weight matrices and embedding tables only, ignoring biases and the
    LayerNorm gains and shifts (for GPT-1 that is 116,414,976).
    """
    d, dm, V, L = cfg.d_model, cfg.d_mlp, cfg.vocab_size, cfg.n_layer
    b = 1 if cfg.bias else 0
    b_qkv, b_o, b_mlp = max(b, cfg.qkv_bias), max(b, cfg.attn_out_bias), max(b, cfg.mlp_bias)
    ln = d * (1 + b) if cfg.norm_type == "layernorm" else d  # gain (+ shift); RMSNorm has no shift
    ln = ln if cfg.norm_gain else 0  # nanochat's norms have no parameters
    q = cfg.n_head * cfg.d_head  # width of Q (d, unless head_dim sets the head size apart)
    kv = cfg.n_kv_head * cfg.d_head  # width of K and of V (smaller with grouped-query attention)
    attn_w, attn_b = 2 * d * q + 2 * d * kv, b_qkv * (q + 2 * kv) + b_o * d  # W_Q, W_K, W_V, W_O
    # the gains of q's and k's RMSNorm: one head's width each, or (qk_norm_all) every head's
    qk_norm = (q + kv if cfg.qk_norm_all else 2 * cfg.d_head) if cfg.qk_norm and not cfg.qk_norm_scale else 0
    n_mat = 3 if cfg.gated else 2  # SwiGLU and GeGLU add the gate
    experts = max(1, cfg.n_expert)
    mlp_w = experts * n_mat * d * dm + (d * cfg.n_expert if cfg.n_expert else 0)  # (+ the router)
    mlp_b = experts * b_mlp * ((n_mat - 1) * dm + d)
    per_block = attn_w + mlp_w + attn_b + mlp_b + qk_norm + (4 if cfg.norm == "both" else 2) * ln
    final_ln = ln if cfg.norm != "post" else 0
    embed, pos = V * d, cfg.n_ctx * d if cfg.pos == "learned" else 0
    unembed = 0 if cfg.tie_weights else V * d
    # nanochat's pieces: each value embedding's table and gate, the lambdas, the smear's gate and lambda
    n_ve = sum(has_value_embed(cfg, i) for i in range(L))
    ve_tables = n_ve * V * kv
    extras = ve_tables + n_ve * cfg.value_embed * cfg.n_kv_head + 2 * L * cfg.x0_mix
    extras += (cfg.smear + 1 if cfg.smear else 0) + cfg.backout + (ln if cfg.embed_norm else 0)
    total = embed + pos + L * per_block + final_ln + unembed + extras
    seed = embed + pos + L * (attn_w + mlp_w) + unembed + ve_tables
    return {
        "total": total,
        "seed_convention": seed,
        "token_embedding": embed,
        "position_embedding": pos,
        "per_block": per_block,
        "per_block_seed_convention": attn_w + mlp_w,
        "attention_weights_per_block": attn_w,
        "mlp_weights_per_block": mlp_w,
        "unembedding": unembed,
        "value_embeddings": ve_tables,
        "nanochat_extras": extras,
        "biases_and_norms": total - seed,
    }
