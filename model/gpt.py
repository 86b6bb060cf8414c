"""A small GPT: the block, the model and its forward pass, read top to bottom.

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
(qk_norm, Qwen3), and RoPE's frequencies stretched for long contexts (rope_scaling "linear",
"llama3", or Phi-3's "longrope": a factor per rotary pair, short or long by the pass's length).

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

The components have modules of their own, and this one re-exports their names: config.py (GPTConfig,
its presets, count_params), hooks.py (HookPoint, hook_name), layers.py (Linear, LayerNorm, RMSNorm),
positions.py (the causal mask, windows, RoPE), attention.py (CausalSelfAttention), mlp.py (MLP, MoE),
kv_cache.py (KVCache) and generate.py (sampling with the cache).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Literal, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import VE_GATE_RANGE, CausalSelfAttention
from .config import NANOCHAT_EPS, PRESETS, GPTConfig, count_params, has_value_embed, preset_config
from .generate import generate as generate_tokens
from .hooks import HookFilter, HookFn, HookPoint, _matches, hook_name
from .kv_cache import KVCache, LayerKV
from .layers import LayerNorm, Linear, NoNorm, RMSNorm, make_norm
from .mlp import MLP, MoE
from .positions import (
    apply_rope,
    causal_allowed,
    is_local_rope,
    layer_rope_base,
    layer_window,
    rope_angles,
    rope_frequencies,
)

# the names other modules import from here, wherever they are defined
__all__ = [
    "GPT",
    "MLP",
    "NANOCHAT_EPS",
    "PRESETS",
    "VE_GATE_RANGE",
    "Block",
    "CausalSelfAttention",
    "GPTConfig",
    "HookFilter",
    "HookFn",
    "HookPoint",
    "KVCache",
    "LayerKV",
    "LayerNorm",
    "Linear",
    "MoE",
    "Mode",
    "NoNorm",
    "RMSNorm",
    "Smear",
    "apply_rope",
    "causal_allowed",
    "count_params",
    "has_value_embed",
    "hook_name",
    "is_local_rope",
    "layer_rope_base",
    "layer_window",
    "make_norm",
    "preset_config",
    "rope_angles",
    "rope_frequencies",
]

Mode = Literal["fast", "explain"]


class Entering(NamedTuple):
    """The stream entering a block (B, T, d), with what later blocks read besides it: nanochat's
    embedding stream x0 (x0_mix) and the stream after the middle block once it is past (backout)."""

    x: torch.Tensor
    x0: torch.Tensor
    mid: torch.Tensor | None = None


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

    def hidden(
        self,
        idx: torch.Tensor,
        kv_cache: KVCache | None = None,
        last_only: bool = False,
        keep: list[Entering] | None = None,
    ) -> torch.Tensor:
        """idx (B, T) -> the final hidden states (B, T, d): the residual stream after the last block
        and the final norm, what the unembedding reads (and a fine-tuned classifier's W_y). keep: a list
        that gathers the stream entering each block (`tail` resumes a pass from one)."""
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
        x0 = self.embed_stream(x, kv_cache)  # (B, T, d) nanochat: normalised and smeared
        x = self.tail(Entering(self.drop(x0), x0), idx, 0, kv_cache, last_only, keep)
        if kv_cache is not None:
            kv_cache.length += T
        return x

    def tail(
        self,
        s: Entering,
        idx: torch.Tensor,
        start: int = 0,
        kv_cache: KVCache | None = None,
        last_only: bool = False,
        keep: list[Entering] | None = None,
    ) -> torch.Tensor:
        """The blocks from `start` on, then the backout and the final norm: the final hidden states (B, T, d)
        of a pass whose stream entered block `start` as `s` (what `keep` gathers, one per block, on the way).
        A pass resumed from a kept Entering repeats the same operations as the whole pass from there on."""
        x, x0, mid = s
        backout_at = self.cfg.n_layer // 2
        for i in range(start, self.cfg.n_layer):
            if keep is not None:
                keep.append(Entering(x, x0, mid))
            block = self.blocks[i]
            assert isinstance(block, Block)
            if self.cfg.x0_mix:
                x = block.mix(x, x0)
            x = block(x, kv_cache.layer(i) if kv_cache is not None else None, idx)
            if i == backout_at:
                mid = x
        if self.cfg.backout:  # nanochat: take out part of the middle block's stream, low-level features
            assert mid is not None
            x = self.hook_resid_final(x - self.hook_backout(self.backout_lambda * mid))
        return self.ln_final(x[:, -1:] if last_only else x)

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
        """Sample max_new_tokens after idx (1, T) (model/generate.py). Prefill once, then one token per
        step with the KV cache. Step i draws with seed (seed, i), so `sample_next` reproduces any step."""
        return generate_tokens(self, idx, max_new_tokens, temperature, top_k, top_p, seed, use_cache)

    def aux_loss(self) -> torch.Tensor | None:
        """The mixture-of-experts routers' load-balancing loss from the last forward pass, weighted
        (aux_loss_weight); None for a dense model. Training adds it to the cross-entropy."""
        parts = [b.mlp.aux_loss for b in self.blocks if isinstance(b.mlp, MoE) and b.mlp.aux_loss is not None]
        return self.cfg.aux_loss_weight * torch.stack(parts).sum() if parts else None

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())  # parameters() yields a tied matrix once
