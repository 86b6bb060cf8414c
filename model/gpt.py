"""A small GPT, in one readable file.

A decoder-only Transformer. GPTConfig's defaults build GPT-2's block:

    tokens -> token embedding (W_E) + learned position embedding (W_P)
           -> n_layer x Block:  x = x + Attention(LayerNorm(x))   nh heads: softmax(q k^T / sqrt(hs)) v
                                x = x + MLP(LayerNorm(x))         W_down GELU(W_up x), 4d wide
           -> final LayerNorm -> logits = h @ W_E^T (weight tying)

and a switch in GPTConfig turns each piece into the modern block of the LLaMA family (the
"llama-style" preset turns them all on):

    tokens -> token embedding (W_E)                               pos="rope": no W_P; attention turns
           -> n_layer x Block:  x = x + Attention(RMSNorm(x))       q and k by their position (RoPE)
                                x = x + SwiGLU(RMSNorm(x))        norm_type="rmsnorm": no mean, no shift
           -> final RMSNorm -> logits = h @ W_E^T                 mlp="swiglu": W_down (silu(W_gate x) * W_up x),
                                                                    8d/3 wide (the parameters of 4d GELU)
                                                                  n_kv_head < n_head: grouped-query attention,
                                                                    nh / n_kv query heads share a key/value
                                                                    head (n_kv_head=1: multi-query)
                                                                  bias=False: no biases anywhere

More switches: window=w (sliding-window attention: each query sees its last w keys), n_expert
(mixture of experts: a router sends each token to top_k_experts of n_expert MLPs), norm="post"
(GPT-1: LN(x + f(x))), "both" (Gemma 2's sandwich: x + LN(f(LN(x)))) or "out" (OLMo 2: x + LN(f(x)),
no norm on the input), causal=False (no mask).

And what the other families gptscope imports build differently (model/importers/: Pythia's GPT-NeoX,
Gemma 2 and 3, Phi-3, OLMo 2), each a switch of its own:

    parallel=True        GPT-NeoX: x + Attention(LN1(x)) + MLP(LN2(x)), both read the block's input
    rotary_dim=r         GPT-NeoX, Phi-3: RoPE turns only each head's first r channels (Pythia: hs / 4)
    mlp="geglu"          Gemma: W_down (gelu(W_gate x) * W_up x), SwiGLU with GELU for the gate
    embed_scale=s        Gemma: the token's row of W_E times sqrt(d) as it enters the stream
    attn_scale, attn_softcap   Gemma: scores = q k^T / sqrt(query_pre_attn_scalar), then (Gemma 2)
                         50 tanh(scores / 50) before the mask; softcap (Gemma 2: 30) caps the logits
    window_pattern       Gemma: local and global layers ("SL": Gemma 2, "SSSSSL": Gemma 3), the last
                         layer as the pattern says (window_last_full=False); rope_local_base: Gemma 3's
                         local layers turn by base 10,000, its global ones by rope_base (1,000,000)
    qk_norm_all=True     OLMo 2: q's and k's RMSNorm over every head at once, not head by head

And the few details in which today's open models (Llama 3, SmolLM2, Qwen2.5, Qwen3, Mistral;
model/importers/llama.py reads their Hugging Face folders) differ from the llama-style block: a head size
of its own (head_dim: nh * hs need not be d), biases on W_Q, W_K, W_V only (qkv_bias, Qwen2) or on
W_O and the MLP (attn_out_bias, mlp_bias), an RMSNorm over each head's q and k before RoPE
(qk_norm, Qwen3), and RoPE's frequencies stretched for long contexts (rope_scaling "linear" or
"llama3").

And nanochat's block (Karpathy's successor to nanoGPT; model/importers/nanochat.py reads its
checkpoints, the "nanochat-tiny" preset trains one), each piece a switch of its own:

    tokens -> W_E -> RMSNorm (embed_norm) -> smear: x_t += lambda_s sigmoid(W_s x_t[:24]) x_{t-1}   = x0
           -> n_layer x:  x = lambda_r[i] x + lambda_0[i] x0                   (x0_mix)
                          Block: RoPE (base 100,000, turned by -angle: rope_sign=-1), QK-norm with a fixed
                          scale (qk_norm_scale), values + 3 sigmoid(W_g x[:12]) VE[token] on alternating
                          layers (value_embed), ReLU^2 MLP (mlp="relu2"), norms with no gain
                          (norm_gain=False), sliding windows by layer (window_pattern "SSSL")
           -> x - lambda_b (the stream after block n_layer // 2)               (backout)
           -> RMSNorm -> W_U (untied) -> 15 tanh(logits / 15)                  (softcap)

Every intermediate worth showing passes through a `HookPoint`, an identity module whose dotted
name is stable (for example ``blocks.0.attn.hook_pattern``).  Nothing is recorded unless someone
asks: `GPT.capture()` and `GPT.hooks()` are context managers that add forward hooks and always
remove them again.

Two modes decide which arithmetic runs, and `GPT.set_mode` is the only switch:

    "fast"     (training, the CLI)  fused kernels: PyTorch's scaled_dot_product_attention,
               F.layer_norm or F.rms_norm, one W_O matmul for all heads. The attention scores
               and pattern, each head's result and LayerNorm's or RMSNorm's scale and output
               never exist as tensors, so their hook points do not fire.
    "explain"  (serving)  the step-by-step path: softmax(QK^T / sqrt(d_head)) with the mask,
               the norms written out, each head's output formed separately. Every hook fires.

`hooks()` and `capture()` run their `with` block in explain mode and restore the mode after.
The two modes agree to float32 rounding (`tests/test_model.py` and `tests/test_modern.py` check
it), not bit for bit, so the server stays in explain mode: every panel then shows the same digits
for the same prompt.

Shape legend used in the comments: B batch, T query positions, Tk key positions (T plus the
KV cache), d d_model, nh heads, n_kv key/value heads, hs head size (d / nh, or head_dim), V vocabulary,
dm MLP width, E experts, k experts chosen per token.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Literal

import torch
import torch.nn as nn
import torch.nn.functional as F

from .sampling import sample_next

# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


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
    # and blends between the two
    rope_scaling: Literal["none", "linear", "llama3"] = "none"
    rope_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_ctx: int = 8192  # llama3: the context length the model was pre-trained with
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
            ("rope_scaling", ("none", "linear", "llama3")),
        ):
            if getattr(self, name) not in allowed:
                problems.append(f"{name} must be one of {', '.join(repr(a) for a in allowed)}")
        if problems:
            raise ValueError("; ".join(problems))

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


# --------------------------------------------------------------------------------------------
# Hooks
# --------------------------------------------------------------------------------------------


class HookPoint(nn.Module):
    """Identity module: a named place where a forward hook may read or replace a tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.name = ""  # filled in by GPT.__init__ with the dotted module path

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def hook_name(name: str, layer: int | None = None) -> str:
    """The one place a hook's dotted name is spelled: ``hook_name("attn.hook_pattern", 0)`` is
    ``"blocks.0.attn.hook_pattern"``; with no layer, a model-level hook such as ``"hook_embed"``."""
    return name if layer is None else f"blocks.{layer}.{name}"


# A hook function receives (tensor, hook_name) and returns None (look only) or a replacement.
HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]
# Which hook points a hook function is added to: one name, a predicate on the name, or None for all.
HookFilter = str | Callable[[str], bool] | None
Mode = Literal["fast", "explain"]


def _matches(name: str, flt: HookFilter) -> bool:
    if flt is None:
        return True
    if callable(flt):
        return bool(flt(name))
    return name == flt


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


# oneDNN's fp32 matmul: on a 2-core AVX2 EPYC, 110-125 GFLOP/s on GPT-2 small's matrices at 1-256
# rows, where the default BLAS gave 60-115 and varied more; under about half a million weights its
# fixed cost loses (benchmarks/linear_kernels.py prints both, per shape)
ONEDNN_MIN_WEIGHTS = 1 << 19
_onednn_linear = getattr(torch.ops.mkldnn, "_linear_pointwise", None) if torch.backends.mkldnn.is_available() else None


class Linear(nn.Linear):
    """nn.Linear, multiplied through oneDNN when nothing needs its gradient: inference on the CPU
    in float32, for a matrix of at least ONEDNN_MIN_WEIGHTS weights. The same y = x W^T + b, to
    float32 rounding; training and autocast keep PyTorch's own path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if (
            _onednn_linear is not None
            and w.numel() >= ONEDNN_MIN_WEIGHTS
            and not torch.is_grad_enabled()
            and x.is_cpu
            and x.dtype == w.dtype == torch.float32
            and not torch.is_autocast_enabled("cpu")
        ):
            return _onednn_linear(x, w, self.bias, "none", [], "")
        return super().forward(x)


class LayerNorm(nn.Module):
    """LayerNorm with an optional shift, exposing the per-position scale and the output."""

    def __init__(self, d: int, bias: bool, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))  # gain
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None  # shift
        self.eps = eps
        self.explain = False  # the step-by-step path (set by GPT.set_mode)
        self.hook_scale = HookPoint()  # (B, T, 1) sqrt(var + eps)
        self.hook_normalized = HookPoint()  # (B, T, d) after gain and shift

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.explain:
            return F.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.eps)
        x = x - x.mean(-1, keepdim=True)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        y = x / scale * self.weight
        if self.bias is not None:
            y = y + self.bias
        return self.hook_normalized(y)


class RMSNorm(nn.Module):
    """RMSNorm: x / sqrt(mean(x^2) + eps) * gain. No mean subtracted, no shift (LLaMA, Gemma); with
    gain=False no parameters at all (nanochat)."""

    def __init__(self, d: int, eps: float, gain: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d)) if gain else None  # gain
        self.bias = None
        self.eps = eps
        self.explain = False
        self.hook_scale = HookPoint()  # (B, T, 1) sqrt(mean(x^2) + eps): the root mean square
        self.hook_normalized = HookPoint()  # (B, T, d) after the gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.explain:
            return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)
        scale = self.hook_scale((x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt())
        return self.hook_normalized(x / scale if self.weight is None else x / scale * self.weight)


def make_norm(cfg: GPTConfig) -> LayerNorm | RMSNorm:
    if cfg.norm_type == "rmsnorm":
        return RMSNorm(cfg.d_model, cfg.ln_eps, cfg.norm_gain)
    return LayerNorm(cfg.d_model, cfg.bias, cfg.ln_eps)


class NoNorm(nn.Module):
    """Stands in for the final LayerNorm of a post-norm (GPT-1) model, which has none."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(x)


class LayerKV:
    """One layer's view of a KVCache: appends new keys/values and returns all of them."""

    def __init__(self, cache: KVCache, layer: int) -> None:
        self.cache, self.layer = cache, layer

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c, start, T = self.cache, self.cache.length, k.size(2)
        c.k[self.layer, :, :, start : start + T] = k
        c.v[self.layer, :, :, start : start + T] = v
        return c.k[self.layer, :, :, : start + T], c.v[self.layer, :, :, : start + T]


class KVCache:
    """Keys and values of every layer for the positions already processed.

    Holds n_layer x 2 x B x n_kv_head x n_ctx x hs numbers (grouped-query attention keeps fewer
    key/value heads than query heads); `length` says how many positions are filled.
    """

    def __init__(self, cfg: GPTConfig, batch_size: int = 1, device=None, dtype=torch.float32):
        shape = (cfg.n_layer, batch_size, cfg.n_kv_head, cfg.n_ctx, cfg.d_head)
        # uninitialised: only the filled positions [:length] are ever read (GPT-2's 1024 positions
        # would cost 75 MB of zeros per request)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0
        self.n_ctx = cfg.n_ctx
        # the smear reads the previous position's embedding (normalised, before its own smear): kept per position
        self.emb = torch.empty((batch_size, cfg.n_ctx, cfg.d_model), device=device, dtype=dtype) if cfg.smear else None

    def copy(self, length: int | None = None) -> KVCache:
        """A new cache holding this one's first `length` positions (all filled ones by default)."""
        n = self.length if length is None else min(length, self.length)
        new = object.__new__(KVCache)
        new.k, new.v = torch.empty_like(self.k), torch.empty_like(self.v)
        new.k[:, :, :, :n] = self.k[:, :, :, :n]
        new.v[:, :, :, :n] = self.v[:, :, :, :n]
        new.length, new.n_ctx = n, self.n_ctx
        new.emb = None
        if self.emb is not None:
            new.emb = torch.empty_like(self.emb)
            new.emb[:, :n] = self.emb[:, :n]
        return new

    def layer(self, i: int) -> LayerKV:
        return LayerKV(self, i)

    def numel_used(self) -> int:
        """Numbers held for the filled positions: layers x 2 (K and V) x B x T x n_kv x hs."""
        L, B, nh, _, hs = self.k.shape
        return L * 2 * B * self.length * nh * hs + (0 if self.emb is None else B * self.length * self.emb.size(-1))


def causal_allowed(T: int, Tk: int, device=None, window: int = 0) -> torch.Tensor:
    """(T, Tk) bool: query i (at absolute position Tk - T + i) may attend to key j <= its position
    (and, with a sliding window w, only to the w keys ending there: j > position - w)."""
    offset = Tk - T
    q = torch.arange(T, device=device)[:, None] + offset
    k = torch.arange(Tk, device=device)[None, :]
    allowed = k <= q
    if window:
        allowed = allowed & (k > q - window)
    return allowed


def layer_window(cfg: GPTConfig, layer: int) -> int:
    """The window of block `layer`: cfg.window, or per window_pattern ("L" layers: 0, all keys; the last
    one too unless window_last_full is off)."""
    pattern = cfg.window_pattern.upper()
    if not pattern:
        return cfg.window
    if (layer == cfg.n_layer - 1 and cfg.window_last_full) or pattern[layer % len(pattern)] == "L":
        return 0
    return cfg.window


def has_value_embed(cfg: GPTConfig, layer: int) -> bool:
    """Value embeddings sit on alternating layers, the last one included (nanochat's has_ve)."""
    return bool(cfg.value_embed) and layer % 2 == (cfg.n_layer - 1) % 2


VE_GATE_RANGE = 3.0  # the value embedding's gate is VE_GATE_RANGE * sigmoid(...): from 0 to 3, 1.5 at 0


def is_local_rope(cfg: GPTConfig, layer: int | None) -> bool:
    """Block `layer` turns by rope_local_base, unstretched (Gemma 3's windowed layers)."""
    return bool(cfg.rope_local_base) and layer is not None and bool(layer_window(cfg, layer))


def layer_rope_base(cfg: GPTConfig, layer: int | None = None) -> float:
    """The RoPE base of block `layer`: rope_local_base for a windowed layer where one is set (Gemma 3), else rope_base."""
    return cfg.rope_local_base if is_local_rope(cfg, layer) else cfg.rope_base


def rope_frequencies(cfg: GPTConfig, device=None, layer: int | None = None) -> torch.Tensor:
    """(r/2,) the angle pair i of a head turns by per position: base^(-2i / r) (r the channels turned:
    rotary_dim or the head size), stretched as cfg.rope_scaling says (written as transformers computes
    it, so imported models agree); block `layer`'s (Gemma 3: its local layers' base, never stretched)."""
    hs, base = cfg.rotary, layer_rope_base(cfg, layer)
    inv_freq = 1.0 / (base ** (torch.arange(0, hs, 2, device=device, dtype=torch.float32) / hs))
    if is_local_rope(cfg, layer):  # a local layer keeps its frequencies
        return inv_freq
    if cfg.rope_scaling == "linear":
        return inv_freq / cfg.rope_factor
    if cfg.rope_scaling == "llama3":
        f, ctx = cfg.rope_factor, cfg.rope_original_ctx
        lo, hi = cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        slow = torch.where(wavelen > ctx / lo, inv_freq / f, inv_freq)  # long wavelengths: divided by f
        smooth = (ctx / wavelen - lo) / (hi - lo)  # 0 at the slow end, 1 at the fast end
        blended = (1 - smooth) * slow / f + smooth * slow
        between = ~(wavelen < ctx / hi) & ~(wavelen > ctx / lo)
        return torch.where(between, blended, slow)
    return inv_freq


def rope_angles(
    hs: int, positions: torch.Tensor, base: float, inv_freq: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin (T, hs/2) of RoPE's angles: pair i of a head turns by position * base^(-2i / hs)
    (or by position * inv_freq[i], rope_frequencies' stretched frequencies)."""
    if inv_freq is None:
        inv_freq = base ** (-torch.arange(0, hs, 2, device=positions.device, dtype=torch.float32) / hs)
    ang = positions.float()[:, None] * inv_freq.to(positions.device)[None, :]
    return ang.cos(), ang.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (..., hs) pair by pair: (x_i, x_{i+r/2}) turns by angle i (cos and sin (..., r/2)
    broadcast over x's leading dimensions, with the position axis lined up). Two rotated vectors' dot
    product then depends only on how far apart their positions are. With fewer angles than hs/2
    (partial rotary, GPT-NeoX) only the first r channels turn; the others pass unchanged."""
    r = 2 * cos.size(-1)
    if r < x.size(-1):
        return torch.cat([apply_rope(x[..., :r], cos, sin), x[..., r:]], dim=-1)
    a, b = x[..., : x.size(-1) // 2], x[..., x.size(-1) // 2 :]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1).to(x.dtype)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention, in three pieces: `qkv` (the projections, RoPE, the KV cache,
    shared key/value heads), then `fused` (fast mode) or `explained` (explain mode, every hook)."""

    def __init__(self, cfg: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.layer = layer  # its window: layer_window(cfg, layer)
        d, q_d, kv_d = cfg.d_model, cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
        # W_Q, W_K, W_V side by side; with grouped-query attention K and V have n_kv_head heads
        self.c_attn = Linear(d, q_d + 2 * kv_d, bias=cfg.bias or cfg.qkv_bias)
        self.c_proj = Linear(q_d, d, bias=cfg.bias or cfg.attn_out_bias)  # W_O
        if cfg.qk_norm:  # Qwen3: each head's q and k normalised (RMSNorm over hs) before RoPE
            # (nanochat: no gain, times a fixed qk_norm_scale; it normalises after RoPE, the same numbers,
            # since a turn keeps a vector's length; OLMo 2, qk_norm_all: one RMSNorm over all heads' q, one over k)
            gain = not cfg.qk_norm_scale
            q_w, k_w = (q_d, kv_d) if cfg.qk_norm_all else (cfg.d_head, cfg.d_head)
            self.q_norm, self.k_norm = RMSNorm(q_w, cfg.ln_eps, gain), RMSNorm(k_w, cfg.ln_eps, gain)
        if has_value_embed(cfg, layer):  # nanochat: a second embedding of the token, mixed into the values
            self.value_embed = nn.Embedding(cfg.vocab_size, kv_d)  # VE (V, n_kv * hs)
            self.ve_gate = Linear(cfg.value_embed, cfg.n_kv_head, bias=False)  # reads x's first channels
            self.hook_ve = HookPoint()  # (B, T, n_kv, hs) the rows of VE for the tokens
            self.hook_ve_gate = HookPoint()  # (B, T, n_kv) 3 sigmoid(x[:c] W_g): how much of them each head takes
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.hook_q = HookPoint()  # (B, T, nh, hs) (qk_norm: after the per-head RMSNorm, as for k)
        self.hook_k = HookPoint()  # (B, T, n_kv, hs) new keys only (not the cache)
        self.hook_v = HookPoint()  # (B, T, n_kv, hs)
        if cfg.pos == "rope":
            self.hook_q_rot = HookPoint()  # (B, T, nh, hs) RoPE: q after its rotation by position
            self.hook_k_rot = HookPoint()  # (B, T, n_kv, hs) RoPE: k after its rotation
        # (B, nh, T, Tk) QK^T/sqrt(hs) (or * attn_scale), *before* the mask (TransformerLens's
        # hook_attn_scores is taken after it, with -inf in the masked cells); hook_pattern shows the
        # mask's effect. With attn_softcap, the scores after the cap (the ones the softmax reads).
        if cfg.attn_softcap:
            self.hook_attn_scores_uncapped = HookPoint()  # (B, nh, T, Tk) Gemma 2: q k^T * scale, before the cap
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()  # (B, nh, T, Tk) softmax of masked scores; rows sum to 1
        self.hook_z = HookPoint()  # (B, T, nh, hs) each head's weighted sum of values
        self.hook_result = HookPoint()  # (B, T, nh, d) each head's output in the residual space
        self.explain = False  # the step-by-step path (set by GPT.set_mode)

    @property
    def window(self) -> int:
        """The keys each query sees (0: every earlier one): cfg.window, or as window_pattern says for this layer."""
        return layer_window(self.cfg, self.layer)

    @property
    def scale(self) -> float:
        """What q k^T is multiplied by: attn_scale (Gemma), or 1 / sqrt(hs)."""
        return self.cfg.attn_scale or 1.0 / math.sqrt(self.cfg.d_head)

    def forward(self, x: torch.Tensor, kv: LayerKV | None = None, idx: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.qkv(x, kv, idx)  # (B, nh, T, hs), (B, nh, Tk, hs), (B, nh, Tk, hs)
        y = self.explained(q, k, v) if self.explain else self.fused(q, k, v)  # (B, T, d)
        return self.resid_dropout(y)

    def qkv(
        self, x: torch.Tensor, kv: LayerKV | None, idx: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (B, T, d) -> q (B, nh, T, hs) for the new positions; k, v (B, nh, Tk, hs) for all of
        them so far: the cached ones (Tk - T) and the new T. idx (B, T): the tokens, for value embeddings."""
        B, T, _d = x.shape
        nh, n_kv, hs = self.cfg.n_head, self.cfg.n_kv_head, self.cfg.d_head
        q, k, v = self.c_attn(x).split([nh * hs, n_kv * hs, n_kv * hs], dim=2)
        if self.cfg.qk_norm and self.cfg.qk_norm_all:  # OLMo 2: q and k normalised over every head at once
            q, k = self.q_norm(q), self.k_norm(k)
        q, k, v = q.view(B, T, nh, hs), k.view(B, T, n_kv, hs), v.view(B, T, n_kv, hs)
        if self.cfg.qk_norm and not self.cfg.qk_norm_all:
            q, k = self.q_norm(q), self.k_norm(k)
            if self.cfg.qk_norm_scale:  # nanochat: a fixed scale instead of learned gains
                q, k = q * self.cfg.qk_norm_scale, k * self.cfg.qk_norm_scale
        if hasattr(self, "value_embed"):  # nanochat: v + 3 sigmoid(x[:c] W_g) VE[token], per key/value head
            assert idx is not None, "a block with value embeddings reads the tokens too"
            ve = self.hook_ve(self.value_embed(idx).view(B, T, n_kv, hs))
            gate = self.hook_ve_gate(VE_GATE_RANGE * torch.sigmoid(self.ve_gate(x[..., : self.cfg.value_embed])))
            v = v + gate.unsqueeze(-1) * ve
        q = self.hook_q(q)
        k = self.hook_k(k)
        v = self.hook_v(v)
        if self.cfg.pos == "rope":  # positions continue after the cached ones
            q, k = self.rope(q, k, start=kv.cache.length if kv is not None else 0)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, nh, T, hs), (B, n_kv, T, hs)
        if kv is not None:
            k, v = kv.append(k, v)  # (B, n_kv, Tk, hs) including the cached positions
        if n_kv != nh:  # grouped-query attention: each key/value head serves nh / n_kv query heads
            k, v = k.repeat_interleave(nh // n_kv, dim=1), v.repeat_interleave(nh // n_kv, dim=1)
        return q, k, v

    def rope(self, q: torch.Tensor, k: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """RoPE: turn q (B, T, nh, hs) and k (B, T, n_kv, hs) by their positions start ... start + T - 1
        (rotary_dim: only their first r channels)."""
        T = q.size(1)
        positions = torch.arange(start, start + T, device=q.device)
        freq = rope_frequencies(self.cfg, q.device, self.layer)  # (r/2,) each pair's turn per position
        cos, sin = rope_angles(self.cfg.rotary, positions, self.cfg.rope_base, freq)
        cos, sin = cos[:, None, :], sin[:, None, :] * self.cfg.rope_sign  # (T, 1, r/2): the same turn for every head
        return self.hook_q_rot(apply_rope(q, cos, sin)), self.hook_k_rot(apply_rope(k, cos, sin))

    def fused(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Fast mode: PyTorch's fused scaled_dot_product_attention, then one W_O matmul for all heads
        (no fused kernel caps the scores: Gemma 2's softcapped attention is written out, `capped`)."""
        B, nh, T, hs = q.shape
        if self.cfg.attn_softcap:
            return self.capped(q, k, v)
        mask, is_causal = self.sdpa_mask(T, k.size(2), q.device)
        p_drop = self.cfg.dropout if self.training else 0.0
        # y (B, nh, T, hs): scores, mask, softmax and the weighted sum of values in one kernel
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=p_drop, is_causal=is_causal, scale=self.cfg.attn_scale or None
        )
        z = self.hook_z(y.transpose(1, 2))  # (B, T, nh, hs)
        return self.c_proj(z.reshape(B, T, nh * hs))

    def capped(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Fast mode with attn_softcap: softmax(mask(cap tanh(q k^T * scale / cap))) V, then W_O (hook_z
        fires, as in the fused path; the scores and pattern exist only here and fire nothing)."""
        B, nh, T, hs = q.shape
        cap = self.cfg.attn_softcap
        scores = cap * torch.tanh((q @ k.transpose(-2, -1)) * (self.scale / cap))  # (B, nh, T, Tk)
        if self.cfg.causal:
            scores = scores.masked_fill(~causal_allowed(T, k.size(2), q.device, self.window), float("-inf"))
        y = self.attn_dropout(F.softmax(scores, dim=-1)) @ v  # (B, nh, T, hs)
        z = self.hook_z(y.transpose(1, 2))  # (B, T, nh, hs), as the fused kernel's
        return self.c_proj(z.reshape(B, T, nh * hs))

    def sdpa_mask(self, T: int, Tk: int, device: torch.device) -> tuple[torch.Tensor | None, bool]:
        """The (attn_mask, is_causal) for T queries over Tk keys: none without a causal mask (BERT-
        style) or for a single newest query (it may see every cached key); SDPA's own causal mask
        for a square with no window; else the (T, Tk) allowed cells (a cache before T, a window)."""
        if not self.cfg.causal or (T == 1 and not self.window):
            return None, False
        if Tk == T and not self.window:
            return None, True
        return causal_allowed(T, Tk, device, self.window), False

    def explained(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Explain mode, step by step: softmax(QK^T / sqrt(hs)) with the mask (Gemma 2: the scores
        capped first), the pattern's weighted sum of values, W_O. Every hook point fires: each head's
        own output in the residual space (hook_result; summed, they are the output) is computed when a
        hook is on it, and a replacement there changes the output by the difference."""
        B, nh, T, hs = q.shape
        scores = (q @ k.transpose(-2, -1)) * self.scale  # (B, nh, T, Tk)
        if self.cfg.attn_softcap:  # Gemma 2: cap * tanh(scores / cap), every score within (-cap, cap)
            cap = self.cfg.attn_softcap
            scores = cap * torch.tanh(self.hook_attn_scores_uncapped(scores) / cap)
        scores = self.hook_attn_scores(scores)
        if self.cfg.causal:
            scores = scores.masked_fill(~causal_allowed(T, k.size(2), q.device, self.window), float("-inf"))
        pattern = self.hook_pattern(F.softmax(scores, dim=-1))  # (B, nh, T, Tk)
        z = self.hook_z((self.attn_dropout(pattern) @ v).transpose(1, 2))  # (B, T, nh, hs)
        out = self.c_proj(z.reshape(B, T, nh * hs))  # (B, T, d): the same digits whoever listens
        if self.hook_result._forward_hooks:  # per head: as many multiplies again as W_O, so only on demand
            w_o = self.c_proj.weight.view(-1, nh, hs)  # (d, nh, hs)
            result = torch.einsum("bths,dhs->bthd", z, w_o)  # (B, T, nh, d)
            edited = self.hook_result(result)  # a hook returns a replacement to edit heads
            if edited is not result:
                out = out + (edited - result).sum(2)
        return out


class MLP(nn.Module):
    """GPT-2's MLP: W_down GELU(W_up x); or SwiGLU (LLaMA): W_down (silu(W_gate x) * W_up x); or GeGLU
    (Gemma): the same with GELU for silu; or ReLU^2 (nanochat): W_down relu(W_up x)^2."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.swiglu, self.relu2 = cfg.gated, cfg.mlp == "relu2"  # (swiglu: any gated MLP, SwiGLU or GeGLU)
        self.geglu = cfg.mlp == "geglu"
        bias = cfg.bias or cfg.mlp_bias
        self.c_fc = Linear(cfg.d_model, cfg.d_mlp, bias=bias)  # up-projection (SwiGLU: the value)
        if self.swiglu:
            self.c_gate = Linear(cfg.d_model, cfg.d_mlp, bias=bias)  # SwiGLU, GeGLU: the gate
            self.hook_gate = HookPoint()  # (B, T, dm) silu(x W_gate) (GeGLU: gelu): how far each unit opens
            self.hook_value = HookPoint()  # (B, T, dm) x W_up: what passes through the gate
        self.c_proj = Linear(cfg.d_mlp, cfg.d_model, bias=bias)  # down-projection
        self.approximate = "tanh" if cfg.gelu == "tanh" else "none"
        self.dropout = nn.Dropout(cfg.dropout)
        self.hook_pre = HookPoint()  # (B, T, dm) before the activation (SwiGLU: the gate's input)
        self.hook_post = HookPoint()  # (B, T, dm) after it (SwiGLU: gate * value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            pre = self.hook_pre(self.c_gate(x))
            gate = self.hook_gate(F.gelu(pre, approximate=self.approximate) if self.geglu else F.silu(pre))
            h = self.hook_post(gate * self.hook_value(self.c_fc(x)))
        elif self.relu2:  # nanochat: relu(x W_up)^2
            h = self.hook_post(F.relu(self.hook_pre(self.c_fc(x))).square())
        else:
            h = self.hook_pre(self.c_fc(x))
            h = self.hook_post(F.gelu(h, approximate=self.approximate))
        return self.dropout(self.c_proj(h))


class MoE(nn.Module):
    """Mixture of experts: a router scores n_expert FFNs for each token, the token goes to its
    top_k_experts, and their outputs are mixed by the router's probabilities (renormalised over the
    chosen ones). A load-balancing loss (Switch Transformer's: n_expert * sum_e f_e * P_e, f_e the
    share of assignments to expert e, P_e its mean probability) keeps the router from sending
    everything to one expert."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.k = cfg.top_k_experts
        self.router = Linear(cfg.d_model, cfg.n_expert, bias=False)
        self.experts = nn.ModuleList([MLP(cfg) for _ in range(cfg.n_expert)])
        self.hook_router_probs = HookPoint()  # (B, T, E) softmax of the router's scores
        self.hook_router_choice = HookPoint()  # (B, T, k) the chosen experts' indices
        self.aux_loss: torch.Tensor | None = None  # the last forward's load-balancing loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        # the router in float32 at least (bf16 training), in float64 for a float64 model
        probs = self.hook_router_probs(
            F.softmax(self.router(x).to(torch.promote_types(x.dtype, torch.float32)), dim=-1)
        )
        top = torch.topk(probs, self.k, dim=-1)
        choice = self.hook_router_choice(top.indices)  # (B, T, k)
        weights = (top.values / top.values.sum(-1, keepdim=True)).to(x.dtype)
        flat, out = x.reshape(-1, d), torch.zeros_like(x).reshape(-1, d)
        flat_choice, flat_w = choice.reshape(-1, self.k), weights.reshape(-1, self.k)
        for e, expert in enumerate(self.experts):
            rows, slot = (flat_choice == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows][None])[0] * flat_w[rows, slot, None])
        E = len(self.experts)
        share = torch.bincount(flat_choice.reshape(-1), minlength=E).float() / flat_choice.numel()
        self.aux_loss = E * (share * probs.reshape(-1, E).mean(0)).sum()
        return out.view(B, T, d)


class Smear(nn.Module):
    """nanochat's smear: position t takes in lambda * sigmoid(x_t[:c] W) of position t-1's embedding
    (a cheap look at the previous token); the first position has none before it."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.channels = cfg.smear
        self.gate = Linear(cfg.smear, 1, bias=False)  # W (1, c): reads x_t's first c channels
        self.lam = nn.Parameter(torch.zeros(1))  # lambda: 0 at the start, the smear off
        self.hook_gate = HookPoint()  # (B, T, 1) lambda sigmoid(x_t[:c] W): the share of x_{t-1} added (0 at t=0)

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None = None) -> torch.Tensor:
        """x (B, T, d); prev (B, 1, d): the embedding before x's first position (a KV cache's), or None."""
        gate = self.lam * torch.sigmoid(self.gate(x[..., : self.channels]))  # (B, T, 1)
        before = x[:, :-1] if prev is None else torch.cat([prev, x[:, :-1]], dim=1)  # x_{t-1}
        if prev is None:  # the first position has nothing before it
            gate = torch.cat([torch.zeros_like(gate[:, :1]), gate[:, 1:]], dim=1)
            before = torch.cat([torch.zeros_like(x[:, :1]), before], dim=1)
        return x + self.hook_gate(gate) * before


class Block(nn.Module):
    resid_lambda: nn.Parameter  # x0_mix only
    x0_lambda: nn.Parameter

    def __init__(self, cfg: GPTConfig, layer: int = 0) -> None:
        super().__init__()
        self.norm, self.parallel = cfg.norm, cfg.parallel
        if cfg.x0_mix:  # nanochat: the block reads resid_lambda * x + x0_lambda * x0 (GPT.hidden mixes)
            self.resid_lambda = nn.Parameter(torch.ones(1))
            self.x0_lambda = nn.Parameter(torch.zeros(1))
        self.ln1 = make_norm(cfg)  # (norm="out": on attention's output; "post": on the stream after the add)
        self.attn = CausalSelfAttention(cfg, layer)
        self.ln2 = make_norm(cfg)
        if cfg.norm == "both":  # the sandwich: also normalise each sublayer's output before the add
            self.ln1_post, self.ln2_post = make_norm(cfg), make_norm(cfg)
        self.mlp = MoE(cfg) if cfg.n_expert else MLP(cfg)
        self.hook_resid_pre = HookPoint()  # (B, T, d) stream entering the block
        self.hook_attn_out = HookPoint()  # (B, T, d) what attention adds
        # (B, T, d) after the attention residual add (parallel: x + attention's output, which the MLP does not read)
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()  # (B, T, d) what the MLP adds
        self.hook_resid_post = HookPoint()  # (B, T, d) stream leaving the block

    def mix(self, x: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """nanochat (x0_mix): the stream this block reads, resid_lambda * x + x0_lambda * x0 (its hook_resid_pre)."""
        return self.resid_lambda * x + self.x0_lambda * x0

    def forward(self, x: torch.Tensor, kv: LayerKV | None = None, idx: torch.Tensor | None = None) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        if self.parallel:  # GPT-NeoX: x + f(LN1(x)) + g(LN2(x)), attention and the MLP side by side
            attn_out = self.hook_attn_out(self.attn(self.ln1(x), kv, idx))
            mlp_out = self.hook_mlp_out(self.mlp(self.ln2(x)))
            x = self.hook_resid_post(self.hook_resid_mid(x + attn_out) + mlp_out)
        elif self.norm == "pre":  # GPT-2: x + f(LN(x))
            x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.ln1(x), kv, idx)))
            x = self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))
        elif self.norm == "both":  # Gemma 2: x + LN(f(LN(x)))
            x = self.hook_resid_mid(x + self.hook_attn_out(self.ln1_post(self.attn(self.ln1(x), kv, idx))))
            x = self.hook_resid_post(x + self.hook_mlp_out(self.ln2_post(self.mlp(self.ln2(x)))))
        elif self.norm == "out":  # OLMo 2: x + LN(f(x))
            x = self.hook_resid_mid(x + self.hook_attn_out(self.ln1(self.attn(x, kv, idx))))
            x = self.hook_resid_post(x + self.hook_mlp_out(self.ln2(self.mlp(x))))
        else:  # GPT-1: LN(x + f(x))
            x = self.hook_resid_mid(self.ln1(x + self.hook_attn_out(self.attn(x, kv))))
            x = self.hook_resid_post(self.ln2(x + self.hook_mlp_out(self.mlp(x))))
        return x


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)  # W_E (V, d)
        # W_P (n_ctx, d): learned positions only; RoPE turns q and k inside attention instead
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model) if cfg.pos == "learned" else None
        self.hook_embed = HookPoint()  # (B, T, d) rows of W_E for the tokens
        if cfg.pos == "learned":
            self.hook_pos_embed = HookPoint()  # (1, T, d) rows of W_P for the positions
        if cfg.embed_norm:  # nanochat: the token's embedding normalised before anything reads it
            self.ln_embed = make_norm(cfg)
        if cfg.smear:  # nanochat: each position takes in a gated share of the previous one's embedding
            self.smear = Smear(cfg)
        if cfg.has_x0:
            # (B, T, d) the embedding stream: normalised, smeared (x0_mix reads it); Gemma: W_E's rows scaled
            self.hook_x0 = HookPoint()
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg, i) for i in range(cfg.n_layer)])
        if cfg.backout:  # nanochat: the final norm reads x - backout_lambda * (the stream after block n_layer // 2)
            self.backout_lambda = nn.Parameter(torch.full((1,), 0.2))
            self.hook_backout = HookPoint()  # (B, T, d) what is taken out: backout_lambda * that stream
            self.hook_resid_final = HookPoint()  # (B, T, d) the stream the final norm reads
        self.ln_final = make_norm(cfg) if cfg.norm != "post" else NoNorm()
        self.lm_head = Linear(cfg.d_model, cfg.vocab_size, bias=False)  # W_U (V, d)
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight  # logits = h @ W_E^T
        if cfg.softcap:
            self.hook_logits_uncapped = HookPoint()  # (B, T, V) z = h W_U^T, before softcap * tanh(z / softcap)
        self.hook_logits = HookPoint()  # (B, T, V)
        self.mode: Mode = "fast"  # see the module docstring and set_mode

        self.apply(self._init_weights)
        # GPT-2: residual projections start smaller, by 1/sqrt(2 * n_layer), so the stream's
        # variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))
        if cfg.x0_mix:  # nanochat's start: a stronger residual and more of x0 in the early blocks
            for i, b in enumerate(self.blocks):
                assert isinstance(b, Block)
                b.resid_lambda.data.fill_(1.15 - 0.10 * i / max(cfg.n_layer - 1, 1))
                b.x0_lambda.data.fill_(0.20 - 0.15 * i / max(cfg.n_layer - 1, 1))

        self.hook_dict: dict[str, HookPoint] = {}
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = name
                self.hook_dict[name] = module

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)  # N(0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    # ---- forward ---------------------------------------------------------------------------

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        kv_cache: KVCache | None = None,
        last_only: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) token ids -> (logits (B, T, V), mean cross-entropy or None).

        With a kv_cache, idx holds only the new tokens; their positions continue after the
        cached ones, and the cache grows by T. last_only: logits (B, 1, V) of the last position
        only (generation needs no more, and the unembedding is the widest matmul).
        """
        x = self.hidden(idx, kv_cache, last_only)  # (B, T, d)
        logits = self.hook_logits(self.unembed(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def hidden(self, idx: torch.Tensor, kv_cache: KVCache | None = None, last_only: bool = False) -> torch.Tensor:
        """idx (B, T) -> the final hidden states (B, T, d): the residual stream after the last block
        and the final norm, what the unembedding reads (and a fine-tuned classifier's W_y)."""
        _B, T = idx.shape
        start = kv_cache.length if kv_cache is not None else 0
        if start + T > self.cfg.n_ctx:
            raise ValueError(f"sequence of {start + T} tokens exceeds the context length n_ctx={self.cfg.n_ctx}")
        x = self.hook_embed(self.wte(idx))  # (B, T, d)
        if self.cfg.embed_scale != 1.0:  # Gemma: the rows times sqrt(d), of the size the norms' outputs have
            x = x * self.cfg.embed_scale
        if self.wpe is not None:
            pos = torch.arange(start, start + T, device=idx.device)
            x = x + self.hook_pos_embed(self.wpe(pos)[None])  # (1, T, d)
        x = x0 = self.embed_stream(x, kv_cache)  # (B, T, d) nanochat: normalised and smeared
        x = self.drop(x)
        backout_at, mid = self.cfg.n_layer // 2, None
        for i, block in enumerate(self.blocks):
            assert isinstance(block, Block)
            if self.cfg.x0_mix:
                x = block.mix(x, x0)
            x = block(x, kv_cache.layer(i) if kv_cache is not None else None, idx)
            if i == backout_at:
                mid = x
        if self.cfg.backout:  # nanochat: take out part of the middle block's stream, low-level features
            assert mid is not None
            x = self.hook_resid_final(x - self.hook_backout(self.backout_lambda * mid))
        x = self.ln_final(x[:, -1:] if last_only else x)
        if kv_cache is not None:
            kv_cache.length += T
        return x

    def embed_stream(self, x: torch.Tensor, kv_cache: KVCache | None = None) -> torch.Tensor:
        """nanochat's embedding stream x0 (B, T, d): the embedding normalised (embed_norm), then smeared
        with the previous position's (the cached one's for the first new position); Gemma's: the scaled
        embedding as it is; others: x itself."""
        if self.cfg.embed_norm:
            x = self.ln_embed(x)
        if self.cfg.smear:
            prev = None
            if kv_cache is not None:
                assert kv_cache.emb is not None
                n, T = kv_cache.length, x.size(1)
                prev = kv_cache.emb[:, n - 1 : n] if n else None
                kv_cache.emb[:, n : n + T] = x
            x = self.smear(x, prev)
        return self.hook_x0(x) if self.cfg.has_x0 else x

    def unembed(self, h: torch.Tensor) -> torch.Tensor:
        """The final hidden states (..., d) -> the logits (..., V): W_U, then the softcap if there is one."""
        z = self.lm_head(h)
        if not self.cfg.softcap:
            return z
        return self.cfg.softcap * torch.tanh(self.hook_logits_uncapped(z) / self.cfg.softcap)

    # ---- hooks -----------------------------------------------------------------------------

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[tuple[HookFilter, HookFn]]) -> Iterator[GPT]:
        """Add forward hooks for the duration of a `with` block; they are always removed.

        Each entry is (name or predicate or None for all, fn(tensor, name) -> tensor | None).
        The block runs in explain mode, where every hook point fires.
        """
        handles, mode = [], self.mode
        try:
            for flt, fn in fwd_hooks:
                matched = [hp for name, hp in self.hook_dict.items() if _matches(name, flt)]
                if isinstance(flt, str) and not matched:
                    raise KeyError(f"no hook point named {flt!r}")
                for hp in matched:
                    handles.append(hp.register_forward_hook(lambda mod, _inp, out, fn=fn: fn(out, mod.name)))
            self.set_mode("explain")
            yield self
        finally:
            for h in handles:
                h.remove()
            self.set_mode(mode)

    @contextmanager
    def capture(
        self, names: HookFilter | list[str] | tuple[str, ...] | set[str] | frozenset[str] = None
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Record the named intermediates of every forward pass inside the block.

        names: None for all hook points, a list of names, or a predicate on the name.
        """
        cache: dict[str, torch.Tensor] = {}
        flt = (lambda n: n in names) if isinstance(names, (list, tuple, set, frozenset)) else names

        def save(t: torch.Tensor, name: str) -> None:
            cache[name] = t.detach()

        with self.hooks([(flt, save)]):
            yield cache

    def set_mode(self, mode: Mode) -> GPT:
        """Choose the arithmetic: "fast" (fused kernels) or "explain" (step by step, every hook
        point fires). See the module docstring."""
        if mode not in ("fast", "explain"):
            raise ValueError(f"mode must be 'fast' or 'explain', not {mode!r}")
        if mode == self.mode:
            return self
        self.mode = mode
        for m in self.modules():
            if isinstance(m, (LayerNorm, RMSNorm, CausalSelfAttention)):
                m.explain = mode == "explain"
        return self

    # ---- generation ------------------------------------------------------------------------

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int = 0,
        use_cache: bool = True,
    ) -> torch.Tensor:
        """Sample max_new_tokens after idx (1, T). Prefill once, then one token per step with
        the KV cache. Step i draws with seed (seed, i), so `sample_next` reproduces any step."""
        assert idx.size(0) == 1, "generate takes one sequence"
        out = idx
        cache = None
        for step in range(max_new_tokens):
            if not use_cache:
                logits, _ = self(out[:, -self.cfg.n_ctx :], last_only=True)
            elif cache is None or cache.length >= self.cfg.n_ctx:
                # prefill (again, on the last n_ctx - 1 tokens, when the window is full)
                cache = KVCache(self.cfg, 1, idx.device, self.wte.weight.dtype)
                logits, _ = self(
                    out[:, -(self.cfg.n_ctx - 1) :] if step else out[:, -self.cfg.n_ctx :],
                    kv_cache=cache,
                    last_only=True,
                )
            else:
                logits, _ = self(out[:, -1:], kv_cache=cache)
            nxt = sample_next(logits[0, -1], temperature, top_k, top_p, seed, step).token
            out = torch.cat([out, torch.tensor([[nxt]], device=idx.device)], dim=1)
        return out

    def aux_loss(self) -> torch.Tensor | None:
        """The mixture-of-experts routers' load-balancing loss from the last forward pass, weighted
        (aux_loss_weight); None for a dense model. Training adds it to the cross-entropy."""
        parts = [b.mlp.aux_loss for b in self.blocks if isinstance(b.mlp, MoE) and b.mlp.aux_loss is not None]
        return self.cfg.aux_loss_weight * torch.stack(parts).sum() if parts else None

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() yields a tied matrix once
