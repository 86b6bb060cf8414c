"""A small GPT, in one readable file.

Decoder-only Transformer in the style of GPT-1/GPT-2:

    tokens -> token embedding (W_E) + learned position embedding (W_P)
           -> n_layer x Block(attention, MLP, residual adds, LayerNorm)
           -> final LayerNorm -> logits = h @ W_E^T (weight tying)

Every intermediate worth showing passes through a `HookPoint`, an identity module whose dotted
name is stable (for example ``blocks.0.attn.hook_pattern``).  Nothing is recorded unless someone
asks: `GPT.capture()` and `GPT.hooks()` are context managers that add forward hooks and always
remove them again.

Two modes decide which arithmetic runs, and `GPT.set_mode` is the only switch:

    "fast"     (training, the CLI)  fused kernels: PyTorch's scaled_dot_product_attention,
               F.layer_norm, one W_O matmul for all heads. The attention scores and pattern,
               each head's result and the LayerNorm scale never exist as tensors, so their
               hook points do not fire.
    "explain"  (serving)  the step-by-step path: softmax(QK^T / sqrt(d_head)) with the mask,
               LayerNorm written out, each head's output formed separately. Every hook fires.

`hooks()` and `capture()` run their `with` block in explain mode and restore the mode after.
The two modes agree to float32 rounding (`tests/test_model.py` checks it), not bit for bit, so
the server stays in explain mode: every panel then shows the same digits for the same prompt.

Shape legend used in the comments: B batch, T query positions, Tk key positions (T plus the
KV cache), d d_model, nh heads, hs head size (d / nh), V vocabulary, dm MLP width.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Callable, Iterator, Literal

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
    norm: Literal["pre", "post"] = "pre"  # GPT-2 normalises before each sublayer; GPT-1 after the add
    gelu: Literal["exact", "tanh"] = "tanh"  # exact x*Phi(x), or GPT-2's tanh approximation
    tie_weights: bool = True  # the unembedding reuses the token embedding matrix: logits = h @ W_E^T
    causal: bool = True  # mask future positions; False only for the "remove the mask" experiment
    ln_eps: float = 1e-5

    def __post_init__(self) -> None:
        if self.d_mlp == 0:
            self.d_mlp = 4 * self.d_model
        problems = []
        for name in ("vocab_size", "n_ctx", "n_layer", "n_head", "d_model", "d_mlp"):
            if int(getattr(self, name)) < 1:
                problems.append(f"{name} must be >= 1")
        if self.d_model % self.n_head:
            problems.append(f"d_model ({self.d_model}) must be divisible by n_head ({self.n_head})")
        if not 0.0 <= self.dropout < 1.0:
            problems.append("dropout must be in [0, 1)")
        if self.norm not in ("pre", "post"):
            problems.append("norm must be 'pre' or 'post'")
        if self.gelu not in ("exact", "tanh"):
            problems.append("gelu must be 'exact' or 'tanh'")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GPTConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown config fields: {sorted(unknown)}")
        return cls(**d)


# Architectures the app knows by name. `cpu` is what the built-in model is trained with (its
# vocabulary comes from the tokenizer trained on the corpus); `gpt1` and `gpt2` reproduce the
# published shapes so their sizes can be shown, and a GPU user can train them.
PRESETS: dict[str, dict] = {
    "tiny": dict(n_ctx=64, n_layer=2, n_head=4, d_model=64),
    "cpu": dict(n_ctx=128, n_layer=4, n_head=4, d_model=128, dropout=0.0),  # the built-in model (benchmarks/)
    "gpt1": dict(vocab_size=40478, n_ctx=512, n_layer=12, n_head=12, d_model=768, d_mlp=3072,
                 norm="post", gelu="exact", dropout=0.1),
    "gpt2": dict(vocab_size=50257, n_ctx=1024, n_layer=12, n_head=12, d_model=768, norm="pre",
                 gelu="tanh", dropout=0.1),
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
    ln = d * (1 + b)  # gain (+ shift)
    attn_w, mlp_w = 4 * d * d, 2 * d * dm
    attn_b, mlp_b = b * 4 * d, b * (dm + d)
    per_block = attn_w + mlp_w + attn_b + mlp_b + 2 * ln
    final_ln = ln if cfg.norm == "pre" else 0
    embed, pos = V * d, cfg.n_ctx * d
    unembed = 0 if cfg.tie_weights else V * d
    total = embed + pos + L * per_block + final_ln + unembed
    seed = embed + pos + L * (attn_w + mlp_w) + unembed
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


# A hook function receives (tensor, hook_name) and returns None (look only) or a replacement.
HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]
Mode = Literal["fast", "explain"]


def _matches(name: str, flt) -> bool:
    if flt is None:
        return True
    if callable(flt):
        return bool(flt(name))
    return name == flt


# --------------------------------------------------------------------------------------------
# Layers
# --------------------------------------------------------------------------------------------


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


class NoNorm(nn.Module):
    """Stands in for the final LayerNorm of a post-norm (GPT-1) model, which has none."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_normalized = HookPoint()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.hook_normalized(x)


class LayerKV:
    """One layer's view of a KVCache: appends new keys/values and returns all of them."""

    def __init__(self, cache: "KVCache", layer: int) -> None:
        self.cache, self.layer = cache, layer

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c, start, T = self.cache, self.cache.length, k.size(2)
        c.k[self.layer, :, :, start:start + T] = k
        c.v[self.layer, :, :, start:start + T] = v
        return c.k[self.layer, :, :, :start + T], c.v[self.layer, :, :, :start + T]


class KVCache:
    """Keys and values of every layer for the positions already processed.

    Holds n_layer x 2 x B x nh x n_ctx x hs numbers; `length` says how many positions are filled.
    """

    def __init__(self, cfg: GPTConfig, batch_size: int = 1, device=None, dtype=torch.float32):
        shape = (cfg.n_layer, batch_size, cfg.n_head, cfg.n_ctx, cfg.d_head)
        # uninitialised: only the filled positions [:length] are ever read (GPT-2's 1024 positions
        # would cost 75 MB of zeros per request)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0
        self.n_ctx = cfg.n_ctx

    def copy(self, length: int | None = None) -> "KVCache":
        """A new cache holding this one's first `length` positions (all filled ones by default)."""
        n = self.length if length is None else min(length, self.length)
        new = object.__new__(KVCache)
        new.k, new.v = torch.empty_like(self.k), torch.empty_like(self.v)
        new.k[:, :, :, :n] = self.k[:, :, :, :n]
        new.v[:, :, :, :n] = self.v[:, :, :, :n]
        new.length, new.n_ctx = n, self.n_ctx
        return new

    def layer(self, i: int) -> LayerKV:
        return LayerKV(self, i)

    def numel_used(self) -> int:
        """Numbers held for the filled positions: layers x 2 (K and V) x T x d."""
        L, B, nh, _, hs = self.k.shape
        return L * 2 * B * self.length * nh * hs


def causal_allowed(T: int, Tk: int, device=None) -> torch.Tensor:
    """(T, Tk) bool: query i (at absolute position Tk - T + i) may attend to key j <= its position."""
    offset = Tk - T
    q = torch.arange(T, device=device)[:, None] + offset
    k = torch.arange(Tk, device=device)[None, :]
    return k <= q


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.c_attn = nn.Linear(d, 3 * d, bias=cfg.bias)  # W_Q, W_K, W_V side by side
        self.c_proj = nn.Linear(d, d, bias=cfg.bias)  # W_O
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.hook_q = HookPoint()  # (B, T, nh, hs)
        self.hook_k = HookPoint()  # (B, T, nh, hs) new keys only (not the cache)
        self.hook_v = HookPoint()  # (B, T, nh, hs)
        # (B, nh, T, Tk) QK^T/sqrt(hs), *before* the mask (TransformerLens's hook_attn_scores is
        # taken after it, with -inf in the masked cells); hook_pattern shows the mask's effect.
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()  # (B, nh, T, Tk) softmax of masked scores; rows sum to 1
        self.hook_z = HookPoint()  # (B, T, nh, hs) each head's weighted sum of values
        self.hook_result = HookPoint()  # (B, T, nh, d) each head's output in the residual space
        self.explain = False  # the step-by-step path (set by GPT.set_mode)

    def forward(self, x: torch.Tensor, kv: LayerKV | None = None) -> torch.Tensor:
        B, T, d = x.shape
        nh, hs = self.cfg.n_head, self.cfg.d_head
        q, k, v = self.c_attn(x).split(d, dim=2)
        q = self.hook_q(q.view(B, T, nh, hs)).transpose(1, 2)  # (B, nh, T, hs)
        k = self.hook_k(k.view(B, T, nh, hs)).transpose(1, 2)
        v = self.hook_v(v.view(B, T, nh, hs)).transpose(1, 2)
        if kv is not None:
            k, v = kv.append(k, v)  # (B, nh, Tk, hs) including the cached positions
        Tk = k.size(2)
        causal = self.cfg.causal
        p_drop = self.cfg.dropout if self.training else 0.0

        if not self.explain:
            if not causal or T == 1:
                mask, is_causal = None, False  # a single newest query may see every cached key
            elif T == Tk:
                mask, is_causal = None, True
            else:
                mask, is_causal = causal_allowed(T, Tk, x.device), False
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p_drop,
                                               is_causal=is_causal)  # (B, nh, T, hs)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, nh, T, Tk)
            scores = self.hook_attn_scores(scores)
            if causal:
                scores = scores.masked_fill(~causal_allowed(T, Tk, x.device), float("-inf"))
            pattern = self.hook_pattern(F.softmax(scores, dim=-1))
            y = self.attn_dropout(pattern) @ v  # (B, nh, T, hs)

        z = self.hook_z(y.transpose(1, 2))  # (B, T, nh, hs)
        if self.explain:
            w_o = self.c_proj.weight.view(d, nh, hs)  # (d_out, nh, hs)
            result = self.hook_result(torch.einsum("bths,dhs->bthd", z, w_o))  # (B, T, nh, d)
            out = result.sum(2)
            if self.c_proj.bias is not None:
                out = out + self.c_proj.bias
        else:
            out = self.c_proj(z.reshape(B, T, d))
        return self.resid_dropout(out)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, cfg.d_mlp, bias=cfg.bias)  # up-projection
        self.c_proj = nn.Linear(cfg.d_mlp, cfg.d_model, bias=cfg.bias)  # down-projection
        self.approximate = "tanh" if cfg.gelu == "tanh" else "none"
        self.dropout = nn.Dropout(cfg.dropout)
        self.hook_pre = HookPoint()  # (B, T, dm) before GELU
        self.hook_post = HookPoint()  # (B, T, dm) after GELU

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hook_pre(self.c_fc(x))
        h = self.hook_post(F.gelu(h, approximate=self.approximate))
        return self.dropout(self.c_proj(h))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.pre_norm = cfg.norm == "pre"
        self.ln1 = LayerNorm(cfg.d_model, cfg.bias, cfg.ln_eps)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = LayerNorm(cfg.d_model, cfg.bias, cfg.ln_eps)
        self.mlp = MLP(cfg)
        self.hook_resid_pre = HookPoint()  # (B, T, d) stream entering the block
        self.hook_attn_out = HookPoint()  # (B, T, d) what attention adds
        self.hook_resid_mid = HookPoint()  # (B, T, d) after the attention residual add
        self.hook_mlp_out = HookPoint()  # (B, T, d) what the MLP adds
        self.hook_resid_post = HookPoint()  # (B, T, d) stream leaving the block

    def forward(self, x: torch.Tensor, kv: LayerKV | None = None) -> torch.Tensor:
        x = self.hook_resid_pre(x)
        if self.pre_norm:  # GPT-2: x + f(LN(x))
            x = self.hook_resid_mid(x + self.hook_attn_out(self.attn(self.ln1(x), kv)))
            x = self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))
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
        self.wpe = nn.Embedding(cfg.n_ctx, cfg.d_model)  # W_P (n_ctx, d)
        self.hook_embed = HookPoint()  # (B, T, d) rows of W_E for the tokens
        self.hook_pos_embed = HookPoint()  # (1, T, d) rows of W_P for the positions
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_final = LayerNorm(cfg.d_model, cfg.bias, cfg.ln_eps) if cfg.norm == "pre" else NoNorm()
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)  # W_U (V, d)
        if cfg.tie_weights:
            self.lm_head.weight = self.wte.weight  # logits = h @ W_E^T
        self.hook_logits = HookPoint()  # (B, T, V)
        self.mode: Mode = "fast"  # see the module docstring and set_mode

        self.apply(self._init_weights)
        # GPT-2: residual projections start smaller, by 1/sqrt(2 * n_layer), so the stream's
        # variance does not grow with depth.
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

        self.hook_dict: dict[str, HookPoint] = {}
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = name
                self.hook_dict[name] = module

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)  # N(0, 0.02)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)

    # ---- forward ---------------------------------------------------------------------------

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                kv_cache: KVCache | None = None, last_only: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) token ids -> (logits (B, T, V), mean cross-entropy or None).

        With a kv_cache, idx holds only the new tokens; their positions continue after the
        cached ones, and the cache grows by T. last_only: logits (B, 1, V) of the last position
        only (generation needs no more, and the unembedding is the widest matmul).
        """
        B, T = idx.shape
        start = kv_cache.length if kv_cache is not None else 0
        if start + T > self.cfg.n_ctx:
            raise ValueError(f"sequence of {start + T} tokens exceeds the context length n_ctx={self.cfg.n_ctx}")
        pos = torch.arange(start, start + T, device=idx.device)
        tok_emb = self.hook_embed(self.wte(idx))  # (B, T, d)
        pos_emb = self.hook_pos_embed(self.wpe(pos)[None])  # (1, T, d)
        x = self.drop(tok_emb + pos_emb)
        for i, block in enumerate(self.blocks):
            x = block(x, kv_cache.layer(i) if kv_cache is not None else None)
        x = self.ln_final(x[:, -1:] if last_only else x)
        logits = self.hook_logits(self.lm_head(x))  # (B, T, V)
        if kv_cache is not None:
            kv_cache.length += T
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                                   ignore_index=-1)
        return logits, loss

    # ---- hooks -----------------------------------------------------------------------------

    @contextmanager
    def hooks(self, fwd_hooks: list[tuple[object, HookFn]]) -> Iterator["GPT"]:
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
                    handles.append(hp.register_forward_hook(
                        lambda mod, _inp, out, fn=fn: fn(out, mod.name)))
            self.set_mode("explain")
            yield self
        finally:
            for h in handles:
                h.remove()
            self.set_mode(mode)

    @contextmanager
    def capture(self, names=None) -> Iterator[dict[str, torch.Tensor]]:
        """Record the named intermediates of every forward pass inside the block.

        names: None for all hook points, a list of names, or a predicate on the name.
        """
        cache: dict[str, torch.Tensor] = {}
        flt = (lambda n: n in names) if isinstance(names, (list, tuple, set, frozenset)) else names

        def save(t: torch.Tensor, name: str) -> None:
            cache[name] = t.detach()

        with self.hooks([(flt, save)]):
            yield cache

    def set_mode(self, mode: Mode) -> "GPT":
        """Choose the arithmetic: "fast" (fused kernels) or "explain" (step by step, every hook
        point fires). See the module docstring."""
        if mode not in ("fast", "explain"):
            raise ValueError(f"mode must be 'fast' or 'explain', not {mode!r}")
        if mode == self.mode:
            return self
        self.mode = mode
        for m in self.modules():
            if isinstance(m, (LayerNorm, CausalSelfAttention)):
                m.explain = mode == "explain"
        return self

    # ---- generation ------------------------------------------------------------------------

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int = 0,
                 use_cache: bool = True) -> torch.Tensor:
        """Sample max_new_tokens after idx (1, T). Prefill once, then one token per step with
        the KV cache. Step i draws with seed (seed, i), so `sample_next` reproduces any step."""
        assert idx.size(0) == 1, "generate takes one sequence"
        out = idx
        cache = None
        for step in range(max_new_tokens):
            if not use_cache:
                logits, _ = self(out[:, -self.cfg.n_ctx:], last_only=True)
            elif cache is None or cache.length >= self.cfg.n_ctx:
                # prefill (again, on the last n_ctx - 1 tokens, when the window is full)
                cache = KVCache(self.cfg, 1, idx.device, self.wte.weight.dtype)
                logits, _ = self(out[:, -(self.cfg.n_ctx - 1):] if step else out[:, -self.cfg.n_ctx:],
                                 kv_cache=cache, last_only=True)
            else:
                logits, _ = self(out[:, -1:], kv_cache=cache)
            nxt = sample_next(logits[0, -1], temperature, top_k, top_p, seed, step).token
            out = torch.cat([out, torch.tensor([[nxt]], device=idx.device)], dim=1)
        return out

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() yields a tied matrix once
