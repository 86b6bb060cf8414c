"""The builders of the forward trace's stages: each reads one captured forward pass (a `Trace`) and
returns its block of the answer. Which hooks each needs, and when it applies, is in parts.py."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
import torch.nn.functional as F

from gptscope.model import tuned_lens as tl
from gptscope.model.genealogy import PERMUTATION
from gptscope.model.gpt import (
    GPT,
    Block,
    GPTConfig,
    LayerNorm,
    RMSNorm,
    apply_rope,
    causal_allowed,
    has_value_embed,
    hook_name,
    is_local_rope,
    layer_rope_base,
    layer_window,
    rope_angles,
    rope_frequencies,
)
from gptscope.model.positions import rope_attention_factor

from ..digits import COARSE, FINE, VALUE
from ..lenses import LENSES
from ..saes import SAES
from ..schemas.arrays import Arr
from ..schemas.lens import TunedLensBlock
from ..schemas.sae import SaeFeaturesBlock
from ..schemas.stages import (
    AttentionBlock,
    BackoutDetail,
    CappedLogit,
    ClassifierBlock,
    Contribution,
    ContributionKind,
    Decomposition,
    EmbeddingsBlock,
    ExpertLayer,
    HeadDetail,
    Histogram,
    LayerNormDetail,
    LensCandidate,
    LogitLensBlock,
    MixLayer,
    MLPBlock,
    MLPLayer,
    MoEBlock,
    Neuron,
    NextToken,
    PermutationCheck,
    PositionLoss,
    PromptLoss,
    ResidualBlock,
    RopeBlock,
    RopeDistanceCheck,
    SmearDetail,
    SoftcapDetail,
    StreamExtrasBlock,
    ValueEmbedLayer,
)
from ..service import ModelService
from .common import arr, attention_rows, next_tokens, rounded, token_text
from .genealogy import fact_entry
from .lens import lens_figures
from .sae import active_features

LENS_K = 3  # logit lens: candidates kept per stage and position
HIST_BINS = 40  # MLP: bins of each layer's pre-activation histogram
TOP_NEURONS = 10  # MLP: the most active neurons listed at the selected position


@dataclass(frozen=True)
class Selection:
    """What a request narrows the detailed parts to (checked against the model already)."""

    layers: list[int]  # attention: the layers returned
    heads: list[int]  # attention: the heads returned
    layer: int  # the layer shown in detail
    head: int  # the head shown in detail
    position: int  # the selected token position
    target: int | None = None  # decomposition: the token whose logit is split (None: the top one)
    top_k: int = 10  # next_token: how many candidates
    sae: str | None = None  # sae_features: the SAE's name (None: the served model's first)
    lens: str | None = None  # tuned_lens: the lens's name (None: the served model's first)


@dataclass
class Trace:
    """One captured forward pass, as every builder reads it."""

    service: ModelService
    model: GPT  # the model in the mode it ran in
    ids: list[int]
    cache: dict[str, torch.Tensor]  # hook name -> activation, the batch dimension dropped
    logits: torch.Tensor  # (T, V), or (1, V) when only the last position's were computed
    sel: Selection

    @property
    def cfg(self) -> GPTConfig:
        return self.model.cfg

    def act(self, name: str, layer: int | None = None) -> torch.Tensor:
        """The captured activation of hook `name` (of block `layer`), e.g. act("attn.hook_pattern", 0)."""
        return self.cache[hook_name(name, layer)]

    def has(self, name: str, layer: int | None = None) -> bool:
        return hook_name(name, layer) in self.cache

    @cached_property
    def streams(self) -> list[torch.Tensor]:
        """The residual stream after the embedding and after each block: n_layer + 1 of (T, d) (nanochat:
        the embedding stream x0 first, and the stream after the backout last, n_layer + 2)."""
        first = self.act("hook_x0") if self.cfg.has_x0 else self.act("hook_resid_pre", 0)
        after = [self.act("hook_resid_post", li) for li in range(self.cfg.n_layer)]
        return [first, *after, *([self.act("hook_resid_final")] if self.cfg.backout else [])]

    @cached_property
    def at_position(self) -> torch.Tensor:
        """The selected position's logits (V,), computed the same way whatever else was asked for (a
        one-row matmul rounds differently from the full one: every panel must show the same digits)."""
        return logits_at(self.model, self.act(final_stream(self.cfg))[None], self.sel.position)


def logits_at(m: GPT, final: torch.Tensor, pos: int) -> torch.Tensor:
    """The logits (V,) of position `pos` from the final stream (1, T, d): its one row through the final
    norm and the unembedding, the one way every answer computes a position's logits."""
    return m.unembed(m.ln_final(final[:, pos : pos + 1]))[0, 0]


def final_stream(cfg: GPTConfig) -> str:
    """The hook of the stream the final norm reads: the last block's, or (backout) the one after the backout."""
    return "hook_resid_final" if cfg.backout else hook_name("hook_resid_post", cfg.n_layer - 1)


def block(m: GPT, layer: int) -> Block:
    """Block `layer` of the model, as its type (nn.ModuleList forgets it)."""
    b = m.blocks[layer]
    assert isinstance(b, Block)
    return b


def final_norm(m: GPT) -> LayerNorm | RMSNorm:
    """The final norm of a pre-norm or sandwich model (a post-norm model has none)."""
    assert isinstance(m.ln_final, (LayerNorm, RMSNorm)), "a post-norm model has no final norm"
    return m.ln_final


def stage_names(cfg: GPTConfig) -> list[str]:
    return tl.stage_names(cfg)


def attention(t: Trace) -> AttentionBlock:
    sel = t.sel
    T = len(t.ids)
    maps = [t.act("attn.hook_pattern", li) for li in sel.layers]  # (nh, T, T) each
    if sel.heads != list(range(t.cfg.n_head)):  # (every head: no gather, one copy of the maps fewer)
        maps = [m[sel.heads] for m in maps]
    stack = torch.stack(maps) if maps else torch.zeros(0, len(sel.heads), T, T)  # (L, H, T, T)
    return AttentionBlock(layers=sel.layers, heads=sel.heads, pattern=attention_rows(stack, t.cfg.causal))


def embeddings(t: Trace) -> EmbeddingsBlock:
    tok = t.act("hook_embed")
    p = t.act("hook_pos_embed") if t.has("hook_pos_embed") else None  # learned positions only
    return EmbeddingsBlock(
        pos=t.cfg.pos,
        token=arr(tok, COARSE),
        position=None if p is None else arr(p, COARSE),
        sum=arr(tok if p is None else tok + p, COARSE),
        token_norms=arr(tok.norm(dim=-1), COARSE),
        position_norms=None if p is None else arr(p.norm(dim=-1), COARSE),
        permutation=permutation_check(t.model, t.ids) if len(t.ids) > 1 else None,
    )


def _qkv(m: GPT, idx: torch.Tensor, h: torch.Tensor, rotate: bool) -> tuple[torch.Tensor, ...]:
    """Block 0's q, k, v (1, nh, T, hs) of the normalised stream h, RoPE's turn left out unless `rotate`
    (the turned q and k are swapped back for the unturned ones the same pass computed)."""
    attn = block(m, 0).attn
    if rotate or m.cfg.pos != "rope":
        return attn.qkv(h, None, idx)
    plain: dict[str, torch.Tensor] = {}

    def keep(x: torch.Tensor, name: str) -> None:
        plain[name + "_rot"] = x

    def unturn(x: torch.Tensor, name: str) -> torch.Tensor:
        return plain[name]

    at = "blocks.0.attn."
    hooks = [(at + "hook_q", keep), (at + "hook_k", keep), (at + "hook_q_rot", unturn), (at + "hook_k_rot", unturn)]
    with m.hooks(hooks):
        return attn.qkv(h, None, idx)


def first_attention(m: GPT, idx: torch.Tensor, positions: bool, causal: bool) -> list[torch.Tensor]:
    """What block 0's attention writes (T, d) for the tokens idx (1, T) placed at positions 0..T-1: read
    from their W_E rows (with the W_P rows added, or q and k turned by RoPE, only if `positions`), through
    the block's first norm, softmax(q k^T * scale) (capped) times v, W_O. Without the mask, and (if
    `causal`) with the causal mask too, from the same q, k and v."""
    cfg, b = m.cfg, block(m, 0)
    attn, T = b.attn, idx.size(1)
    x = m.wte(idx) * cfg.embed_scale
    if positions and m.wpe is not None:
        x = x + m.wpe(torch.arange(T, device=idx.device))[None]
    if cfg.embed_norm:
        x = m.ln_embed(x)
    if cfg.x0_mix:
        x = b.mix(x, x)
    h = x if cfg.norm in ("post", "out") and not cfg.parallel else b.ln1(x)
    q, k, v = _qkv(m, idx, h, positions)
    scores = (q @ k.transpose(-2, -1)) * attn.scale  # (1, nh, T, T)
    if cfg.attn_softcap:
        scores = cfg.attn_softcap * torch.tanh(scores / cfg.attn_softcap)
    masks = [scores]
    if causal:
        masks.append(scores.masked_fill(~causal_allowed(T, T, idx.device, attn.window), float("-inf")))
    outs = []
    for sc in masks:
        z = (F.softmax(sc.float(), dim=-1).to(v.dtype) @ v).transpose(1, 2)  # (1, T, nh, hs)
        outs.append(attn.c_proj(z.reshape(1, T, -1))[0].float())
    return outs


@torch.no_grad()
def permutation_check(m: GPT, ids: list[int]) -> PermutationCheck:
    """Attention without positions ignores word order, on this prompt: block 0's attention run on the
    tokens in the prompt's order and with the first and last exchanged, each token's output compared
    with its own from the other run, without the causal mask (an order of its own: the same q, k, v
    with it kept are compared too). Four passes of one block's attention."""
    cfg, T = m.cfg, len(ids)
    order = [T - 1, *range(1, T - 1), 0]
    dev = m.wte.weight.device
    idx, moved = torch.tensor([ids], device=dev), torch.tensor([[ids[i] for i in order]], device=dev)
    back = torch.argsort(torch.tensor(order, device=dev))  # row i of the reordered run is token order[i]

    def gaps(positions: bool) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Each token's largest change (T,), unmasked (and masked); the prompt order's unmasked output."""
        a, b = first_attention(m, idx, positions, cfg.causal), first_attention(m, moved, positions, cfg.causal)
        return [(x - y[back]).abs().amax(dim=-1) for x, y in zip(a, b, strict=True)], a[0]

    free, out = gaps(False)
    placed, out = gaps(True) if cfg.pos != "none" else (free, out)

    def sig(x: torch.Tensor) -> float:
        return float(f"{float(x):.3g}")

    return PermutationCheck(
        order=order,
        swapped=[0, T - 1],
        pos=cfg.pos,
        without_positions=sig(free[0].max()),
        with_positions=sig(placed[0].max()),
        causal_without_positions=sig(free[1].max()) if cfg.causal else None,
        output_scale=sig(out.abs().max()),
        per_token_without=[sig(x) for x in free[0]],
        per_token_with=[sig(x) for x in placed[0]],
        fact=fact_entry(PERMUTATION),
    )


def layernorm(t: Trace) -> LayerNormDetail:
    layer, pos, cfg = t.sel.layer, t.sel.position, t.cfg
    b = block(t.model, layer)
    ln = b.ln1
    # pre-norm: ln1 reads the stream entering the block; post-norm: it reads stream + attention;
    # OLMo 2's (norm="out"): it reads attention's output (its heads' z through W_O)
    x = t.act("hook_resid_pre", layer)[pos]
    if cfg.norm == "post":
        x = x + t.act("hook_attn_out", layer)[pos]
    elif cfg.norm == "out":
        x = b.attn.c_proj(t.act("attn.hook_z", layer)[pos].reshape(1, -1))[0]
    rms = cfg.norm_type == "rmsnorm"
    mean = torch.zeros(()) if rms else x.mean()
    var = x.pow(2).mean() if rms else x.var(unbiased=False)
    std = torch.sqrt(var + ln.eps)
    return LayerNormDetail(
        layer=layer,
        which="ln1",
        position=pos,
        kind=cfg.norm_type,
        input=arr(x),
        mean=None if rms else round(float(mean), FINE),
        variance=round(float(var), FINE),
        eps=ln.eps,
        std=round(float(std), FINE),
        normalized=arr((x - mean) / std),
        gain=arr(ln.weight if ln.weight is not None else torch.ones_like(x)),  # no gain (nanochat): 1
        shift=arr(ln.bias) if ln.bias is not None else None,
        output=arr(t.act("ln1.hook_normalized", layer)[pos]),
    )


def kv_head(cfg: GPTConfig, head: int) -> int:
    """The key/value head a query head reads (grouped-query attention shares one among a group)."""
    return head // (cfg.n_head // cfg.n_kv_head)


def head_detail(t: Trace) -> HeadDetail:
    cfg, layer, head, pos = t.cfg, t.sel.layer, t.sel.head, t.sel.position
    rope, kvh = cfg.pos == "rope", kv_head(cfg, head)
    scores = t.act("attn.hook_attn_scores", layer)[head]  # (T, T)
    T = scores.size(0)
    window = layer_window(cfg, layer)
    allowed = causal_allowed(T, T, window=window) if cfg.causal else torch.ones(T, T, dtype=torch.bool)
    masked = [[round(float(scores[i, j]), VALUE) if allowed[i, j] else None for j in range(T)] for i in range(T)]
    uncapped = arr(t.act("attn.hook_attn_scores_uncapped", layer)[head]) if cfg.attn_softcap else None
    return HeadDetail(
        layer=layer,
        head=head,
        d_head=cfg.d_head,
        scale=cfg.attn_scale or 1 / math.sqrt(cfg.d_head),
        softcap=cfg.attn_softcap,
        scores_uncapped=uncapped,
        # RoPE: the rotated q and k (their dot product is the score); grouped-query attention: the
        # key/value head this query head shares
        q=arr(t.act("attn.hook_q_rot" if rope else "attn.hook_q", layer)[:, head]),
        k=arr(t.act("attn.hook_k_rot" if rope else "attn.hook_k", layer)[:, kvh]),
        v=arr(t.act("attn.hook_v", layer)[:, kvh]),
        kv_head=kvh,
        rotated=rope,
        scores=arr(scores),
        masked_scores=masked,
        pattern=arr(t.act("attn.hook_pattern", layer)[head]),
        z=arr(t.act("attn.hook_z", layer)[:, head]),
        result=arr(t.act("attn.hook_result", layer)[:, head], COARSE),
        position=pos,
        resid_pre=arr(t.act("hook_resid_pre", layer)[pos]),
        attn_out=arr(t.act("hook_attn_out", layer)[pos]),
        resid_mid=arr(t.act("hook_resid_mid", layer)[pos]),
    )


def gelu_curve(kind: str, lo: float = -4.0, hi: float = 4.0, n: int = 161) -> tuple[Arr, Arr]:
    x = torch.linspace(lo, hi, n)
    y = F.silu(x) if kind == "silu" else F.gelu(x, approximate="tanh" if kind == "tanh" else "none")
    return arr(x, COARSE), arr(y, VALUE)


def _histogram_layer(li: int, p: torch.Tensor, edges: torch.Tensor) -> MLPLayer:
    counts = torch.histc(p.flatten(), bins=HIST_BINS, min=float(edges[0]), max=float(edges[-1]))
    return MLPLayer(
        layer=li,
        histogram=Histogram(edges=arr(edges, COARSE), counts=[int(x) for x in counts]),
        fraction_negative=round(float((p < 0).float().mean()), VALUE),
        mean=round(float(p.mean()), VALUE),
        std=round(float(p.std()), VALUE),
    )


def mlp(t: Trace) -> MLPBlock:
    cfg, layer, pos = t.cfg, t.sel.layer, t.sel.position
    pres = [t.act("mlp.hook_pre", li) for li in range(cfg.n_layer)]
    lo = min(float(p.min()) for p in pres)
    hi = max(float(p.max()) for p in pres)
    edges = torch.linspace(min(lo, -4.0), max(hi, 4.0), HIST_BINS + 1)
    post, pre = t.act("mlp.hook_post", layer)[pos], pres[layer][pos]
    top = torch.topk(post, min(TOP_NEURONS, post.numel()))
    act = "silu" if cfg.mlp == "swiglu" else cfg.gelu  # (GeGLU: the gate's GELU)
    cx, cy = gelu_curve(act)
    return MLPBlock(
        gelu=act,
        gated=cfg.gated,
        curve_x=cx,
        curve_y=cy,
        layers=[_histogram_layer(li, p, edges) for li, p in enumerate(pres)],
        layer=layer,
        position=pos,
        top_neurons=[
            Neuron(index=int(i), pre=round(float(pre[i]), VALUE), post=round(float(v), VALUE))
            for v, i in zip(top.values, top.indices)
        ],
        d_mlp=cfg.d_mlp,
    )


def residual(t: Trace) -> ResidualBlock:
    norms = torch.stack([s.norm(dim=-1) for s in t.streams])
    return ResidualBlock(stages=stage_names(t.cfg), norms=arr(norms, COARSE))


def _lens(t: Trace, read: Callable[[torch.Tensor, int], torch.Tensor]) -> dict[str, Any]:
    """A lens's fields: read(stream, stage) -> logits (T, V) for the stream after every stage; each
    stage's top guesses, the probability of the token that really follows, and how far the stage's
    distribution is from the final one on this prompt (KL(p_final || p_lens), top-1 agreement)."""
    ids, T = t.ids, len(t.ids)
    nxt = torch.tensor([*ids[1:], 0])
    logps = [torch.log_softmax(read(s, i).float(), -1) for i, s in enumerate(t.streams)]  # (T, V) each
    final = logps[-1]
    # what every stage compares with, once: the final distribution and its top guess (a (T, V) pass each)
    p_final, final_top = final.exp(), final.argmax(-1)
    top_all, actual, kl, agree = [], [], [], []
    for logp in logps:
        # the top guesses ranked by log-probability (exp keeps the order), only their K probabilities exponentiated
        top = torch.topk(logp, LENS_K, dim=-1)
        vals, idx = top.values.exp().tolist(), top.indices.tolist()
        top_all.append(
            [
                [
                    LensCandidate(id=i, text=token_text(t.service, i), prob=round(p, VALUE))
                    for p, i in zip(vals[q], idx[q])
                ]
                for q in range(T)
            ]
        )
        pa = logp[torch.arange(T), nxt].exp().tolist()
        actual.append([round(pa[q], VALUE) if q < T - 1 else None for q in range(T)])
        kl.append(round(float(torch.linalg.vecdot(p_final, final - logp).mean()), VALUE))  # KL(p_final || p_lens)
        agree.append(round(float((logp.argmax(-1) == final_top).float().mean()), VALUE))
    return dict(
        stages=stage_names(t.cfg), positions=list(range(T)), top=top_all, actual_next_prob=actual,
        kl_to_final=kl, top1_agreement=agree,
    )  # fmt: skip


def logit_lens(t: Trace) -> LogitLensBlock:
    """The final norm and the unembedding applied to the stream after every stage (a post-norm model's
    ln_final is an identity: its blocks' outputs are already normalised)."""
    return LogitLensBlock(**_lens(t, lambda s, _i: tl.read_out(t.model, s)))


def tuned_lens(t: Trace) -> TunedLensBlock:
    """The same through a tuned lens's translators (model/tuned_lens.py): at its start, exactly the logit lens."""
    loaded = LENSES.get(t.service, t.sel.lens)
    q = loaded.meta["quality"]
    return TunedLensBlock(
        **_lens(t, lambda s, i: loaded.lens.logits(t.model, s, i)),
        lens=loaded.name,
        held_out=lens_figures(q),
    )


def next_token(t: Trace) -> list[NextToken]:
    return next_tokens(t.service, t.at_position, t.sel.top_k)


def prompt_loss(t: Trace) -> PromptLoss:
    ids, V = t.ids, t.logits.size(-1)
    uniform = round(math.log(V), VALUE)
    if len(ids) < 2:
        return PromptLoss(positions=[], mean_loss=None, perplexity=None, uniform_loss=uniform)
    logp = torch.log_softmax(t.logits[:-1].float(), -1)
    nxt = torch.tensor(ids[1:])
    lp = logp[torch.arange(len(ids) - 1), nxt]
    rows = [
        PositionLoss(
            position=q,
            next_id=int(nxt[q]),
            next_text=token_text(t.service, int(nxt[q])),
            prob=round(float(lp[q].exp()), FINE),
            loss=round(float(-lp[q]), VALUE),
        )
        for q in range(len(lp))
    ]
    mean = float(-lp.mean())
    return PromptLoss(
        positions=rows, mean_loss=round(mean, VALUE), perplexity=round(math.exp(mean), COARSE), uniform_loss=uniform
    )


def decomposition(t: Trace) -> Decomposition:
    """Split the logit of the target (default: the top prediction) at the selected position."""
    pos, m = t.sel.position, t.model
    tid = int(torch.argmax(t.logits[pos])) if t.sel.target is None else t.sel.target
    if not m.cfg.softcap:
        logit = float(t.logits[pos, tid])
        return decompose(m, t.cache, pos, m.lm_head.weight[tid], logit, tid, token_text(t.service, tid))
    # softcap: the parts add up to the logit before the cap, z; the model's own logit is cap * tanh(z / cap)
    z = float(t.act("hook_logits_uncapped")[pos, tid])
    d = decompose(m, t.cache, pos, m.lm_head.weight[tid], z, tid, token_text(t.service, tid))
    d.softcap, d.capped_logit = m.cfg.softcap, round(float(t.logits[pos, tid]), VALUE)
    d.note += (
        f"; the parts add up to the logit before the softcap, z, and the model's own logit is "
        f"{m.cfg.softcap:g} tanh(z / {m.cfg.softcap:g}) = {d.capped_logit}, which no sum of parts gives"
    )
    return d


def decompose(
    m: GPT,
    c: dict[str, torch.Tensor],
    pos: int,
    w_out: torch.Tensor,
    logit: float,
    target_id: int,
    target_text: str,
    bias_out: float = 0.0,
) -> Decomposition:
    """Split one logit (w_out . h + bias_out) into what each component wrote into the residual stream.

    For a pre-norm model the final residual is embed + sum over layers of (heads + attention bias
    + MLP). Holding the final LayerNorm's scale at its real value makes the map from stream to
    logit linear: logit = sum_c ((c - mean c) / scale) . (g * w_out) + b . w_out + bias_out.
    """
    about: dict[str, Any] = dict(position=pos, target_id=target_id, target_text=target_text, logit=round(logit, VALUE))
    if m.cfg.norm == "post":
        return Decomposition(
            **about,
            contributions=[],
            total=0.0,
            residual_error=round(logit, VALUE),
            exact=False,
            note="post-norm (GPT-1 style) models normalise inside every block, so the stream "
            "does not split into independent parts; no decomposition is given",
        )
    rows = split_logit(m, c, pos, w_out, bias_out)
    total = sum(r.value for r in rows)
    for r in rows:
        r.value = round(r.value, VALUE)
    return Decomposition(
        **about,
        contributions=rows,
        total=round(total, VALUE),
        residual_error=round(logit - total, FINE),
        exact=True,
        note="the final LayerNorm's scale is held at its value for this prompt, which makes the "
        "map from residual stream to logit linear, so the parts add up exactly" + _block_note(m.cfg),
    )


def _block_note(cfg: GPTConfig) -> str:
    """What the decomposition's note adds for the imported families' blocks."""
    note = ""
    if cfg.parallel:
        note += "; in a parallel block attention and the MLP both read the block's input, and both writes are parts"
    if cfg.norm in ("both", "out"):
        note += (
            "; each block's attention is one part: the norm on its output divides the summed heads by their "
            "joint size, so single heads are not parts of the stream"
        )
    if cfg.embed_scale != 1.0:
        note += f"; the embedding part is the token's row of W_E times {cfg.embed_scale:.4g}, as it enters the stream"
    return note


def split_logit(
    m: GPT, c: dict[str, torch.Tensor], pos: int, w_out: torch.Tensor, bias_out: float = 0.0
) -> list[Contribution]:
    """What each component wrote into the residual stream at `pos`, read through the final norm
    (its scale held at its real value) and the output row w_out: the rows sum to the logit w_out . h
    (+ bias_out, listed as "output bias" when non-zero). Pre-norm and sandwich models only."""
    cfg, ln = m.cfg, final_norm(m)
    direction = w_out / c["ln_final.hook_scale"][pos, 0]
    if ln.weight is not None:
        direction = direction * ln.weight
    centre = cfg.norm_type == "layernorm"  # RMSNorm does not subtract the mean
    x0_weight, weights = stream_weights(m)  # nanochat: how much of each writer reaches the final norm

    def part(name: str, kind: ContributionKind, vec: torch.Tensor, **where: int) -> Contribution:
        w = x0_weight if kind in ("embed", "smear") else weights[where["layer"]] if "layer" in where else 1.0
        value = float(((vec - vec.mean() if centre else vec) * direction).sum()) * w
        return Contribution(name=name, kind=kind, value=value, **where)

    rows = embed_parts(m, c, pos, part)
    for li in range(cfg.n_layer):
        if cfg.norm in ("both", "out"):  # a norm on the summed heads' output: only the whole output adds up
            rows.append(part(f"L{li} attention", "attn", c[hook_name("hook_attn_out", li)][pos], layer=li))
        else:
            res = c[hook_name("attn.hook_result", li)][pos]  # (nh, d)
            rows += [part(f"L{li}H{h}", "head", res[h], layer=li, head=h) for h in range(cfg.n_head)]
            if (bias := block(m, li).attn.c_proj.bias) is not None:
                rows.append(part(f"L{li} attn bias", "attn_bias", bias, layer=li))
        rows.append(part(f"MLP{li}", "mlp", c[hook_name("hook_mlp_out", li)][pos], layer=li))
    if ln.bias is not None:
        rows.append(Contribution(name="final LayerNorm shift", kind="bias", value=float((ln.bias * w_out).sum())))
    if bias_out:
        rows.append(Contribution(name="output bias", kind="bias", value=float(bias_out)))
    return rows


def embed_parts(m: GPT, c: dict[str, torch.Tensor], pos: int, part: Callable[..., Contribution]) -> list[Contribution]:
    """The embedding's rows of a decomposition: W_E (+ W_P); nanochat: the normalised embedding and,
    apart, what the smear took in from the previous position (their sum is x0)."""
    if not m.cfg.has_x0:
        return [
            part("embed", "embed", c["hook_embed"][pos] + (c["hook_pos_embed"][pos] if "hook_pos_embed" in c else 0.0))
        ]
    x0 = c["hook_x0"][pos]
    if not m.cfg.smear:
        return [part("embed", "embed", x0)]
    own = c["ln_embed.hook_normalized"][pos] if m.cfg.embed_norm else c["hook_embed"][pos]
    return [part("embed", "embed", own), part("smear", "smear", x0 - own)]


def stream_weights(m: GPT) -> tuple[float, list[float]]:
    """nanochat (x0_mix, backout): the factor by which x0 and what each block wrote reach the final
    norm. Block i reads r_i x + a_i x0, so a write of block j is scaled by every later r, x0 gathers
    r_i c + a_i block by block, and the backout takes lambda_b times the stream after block n_layer // 2
    away: final = w_x0 x0 + sum_j w_j (attention_j + MLP_j). Plain models: all 1."""
    cfg = m.cfg
    L, mid = cfg.n_layer, cfg.n_layer // 2
    r = [float(block(m, i).resid_lambda) if cfg.x0_mix else 1.0 for i in range(L)]
    a = [float(block(m, i).x0_lambda) if cfg.x0_mix else 0.0 for i in range(L)]
    lam = float(m.backout_lambda) if cfg.backout else 0.0
    x0_at = []  # x0's factor in the stream after block i
    c = 1.0
    for i in range(L):
        c = r[i] * c + a[i]
        x0_at.append(c)
    weights = []
    for j in range(L):  # block j's write, scaled by r_{j+1} ... r_i up to block i
        after = math.prod(r[j + 1 :])
        weights.append(after - (lam * math.prod(r[j + 1 : mid + 1]) if j <= mid else 0.0))
    return x0_at[-1] - lam * x0_at[mid], weights


def rope(t: Trace) -> RopeBlock:
    cfg, layer, head, pos = t.cfg, t.sel.layer, t.sel.head, t.sel.position
    hs, r, kvh = cfg.d_head, cfg.rotary, kv_head(cfg, head)
    q_all, k_all = t.act("attn.hook_q", layer), t.act("attn.hook_k", layer)  # (T, nh, hs), (T, n_kv, hs)
    T = q_all.size(0)
    # (r/2,) this layer's turns, as this prompt's forward pass took them (LongRoPE: the short factors for a
    # prompt within the original context, the long ones past it); cos and sin times LongRoPE's attention factor
    base, freq = layer_rope_base(cfg, layer), rope_frequencies(cfg, layer=layer, seq_len=T)
    gain = rope_attention_factor(cfg, layer)
    cos, sin = rope_angles(r, torch.arange(T), base, freq)  # (T, r/2): partial rotary turns r of hs channels
    sin = sin * cfg.rope_sign  # nanochat turns by -angle
    q, k = q_all[pos, head], k_all[pos, kvh]  # the selected position's q and k, unrotated
    offset = max(T, 50)
    dist = list(range(T))
    scale = cfg.attn_scale or 1 / math.sqrt(hs)

    def curve(start: int) -> list[float]:
        """q . k * scale with k rotated to `start` and q to start + distance (the prompt's frequencies)."""
        cq, sq = rope_angles(r, torch.arange(start, start + T), base, freq)
        cq, sq = cq * gain, sq * cfg.rope_sign * gain
        kk = apply_rope(k, cq[0], sq[0])  # the key at `start`
        return [round(float(apply_rope(q, cq[d], sq[d]) @ kk) * scale, VALUE) for d in dist]

    return RopeBlock(
        layer=layer,
        head=head,
        kv_head=kvh,
        base=base,
        rotary_dim=r,
        scaled="none" if is_local_rope(cfg, layer) else cfg.rope_scaling,
        attention_factor=gain,
        frequencies=rounded(freq, FINE),
        angles=arr(torch.atan2(sin, cos), COARSE),
        q=arr(q_all[:, head]),
        q_rotated=arr(t.act("attn.hook_q_rot", layer)[:, head]),
        k=arr(k_all[:, kvh]),
        k_rotated=arr(t.act("attn.hook_k_rot", layer)[:, kvh]),
        distance_check=RopeDistanceCheck(
            offset=offset, distances=dist, scores_at_start=curve(0), scores_at_offset=curve(offset)
        ),
    )


def moe(t: Trace) -> MoEBlock:
    cfg, layers = t.cfg, []
    for li in range(cfg.n_layer):
        probs, choice = t.act("mlp.hook_router_probs", li), t.act("mlp.hook_router_choice", li)
        load = torch.bincount(choice.flatten(), minlength=cfg.n_expert).float() / choice.numel()
        layers.append(
            ExpertLayer(layer=li, probs=arr(probs, COARSE), choice=choice.tolist(), load=rounded(load, COARSE))
        )
    return MoEBlock(n_expert=cfg.n_expert, top_k=cfg.top_k_experts, layers=layers)


def classifier(t: Trace) -> ClassifierBlock:
    """W_y on the final hidden state of the last position, the attention that fed that position,
    and the winning label's logit split into its parts."""
    m, ids = t.model, t.ids
    clf, info = t.service.classifier, t.service.meta.classifier or {}
    assert clf is not None  # parts.py: the part applies to classifiers only
    pos = len(ids) - 1
    h = m.ln_final(t.act(final_stream(m.cfg))[pos : pos + 1][None])[0, 0]  # (d,)
    logits = clf.head(h)  # (labels,)
    win = int(torch.argmax(logits))
    fed = [t.act("attn.hook_pattern", li)[:, pos, : pos + 1] for li in range(m.cfg.n_layer)]  # (nh, pos + 1)
    return ClassifierBlock(
        task=info["task"],
        labels=info["labels"],
        position=pos,
        at_extract=ids[-1] == clf.specials["extract"],
        logits=rounded(logits),
        probs=rounded(torch.softmax(logits, -1)),
        predicted=win,
        attention=[rounded(a, COARSE) for a in fed],
        attention_mean=[rounded(a.mean(0), COARSE) for a in fed],
        decomposition=decompose(
            m,
            t.cache,
            pos,
            clf.head.weight[win],
            float(logits[win]),
            win,
            info["labels"][win],
            bias_out=float(clf.head.bias[win]),
        ),
    )


def sae_features(t: Trace) -> SaeFeaturesBlock:
    """The SAE's features active at the selected position (the stream at its layer, encoded)."""
    loaded = SAES.get(t.service, t.sel.sae)
    x = t.act("hook_resid_post", loaded.sae.cfg.layer)  # (T, d)
    return active_features(t.service, loaded, x, t.ids, t.sel.position)


def stream_extras(t: Trace) -> StreamExtrasBlock:
    """nanochat's pieces of the stream, each with its numbers (the parts applies when any is on)."""
    cfg, pos = t.cfg, t.sel.position
    out = StreamExtrasBlock(position=pos)
    if cfg.smear:
        out.smear = _smear(t)
    if cfg.x0_mix:
        x0_weight, weights = stream_weights(t.model)
        out.mixing, out.x0_reaches_final = _mixing(t, weights), round(x0_weight, VALUE)
    if cfg.value_embed:
        out.value_embeds = [_value_embed(t, li) for li in range(cfg.n_layer) if has_value_embed(cfg, li)]
    if cfg.backout:
        mid, lam = cfg.n_layer // 2, float(t.model.backout_lambda)
        before = t.act("hook_resid_post", cfg.n_layer - 1)
        out.backout = BackoutDetail(
            layer=mid,
            lam=round(lam, FINE),
            before=arr(before.norm(dim=-1), COARSE),
            taken=arr(t.act("hook_backout").norm(dim=-1), COARSE),
            after=arr(t.act("hook_resid_final").norm(dim=-1), COARSE),
        )
    if cfg.softcap:
        out.softcap = softcap_detail(t)
    return out


def _smear(t: Trace) -> SmearDetail:
    sm = t.model.smear
    own = t.act("ln_embed.hook_normalized") if t.cfg.embed_norm else t.act("hook_embed")
    return SmearDetail(
        channels=t.cfg.smear,
        lam=round(float(sm.lam), FINE),
        gate=arr(t.act("smear.hook_gate")[:, 0], VALUE),
        own_norm=arr(own.norm(dim=-1), COARSE),
        added_norm=arr((t.act("hook_x0") - own).norm(dim=-1), COARSE),
    )


def _mixing(t: Trace, weights: list[float]) -> list[MixLayer]:
    pos, rows = t.sel.position, []
    x0 = t.act("hook_x0")[pos]
    for li in range(t.cfg.n_layer):
        b = block(t.model, li)
        x = x0 if li == 0 else t.act("hook_resid_post", li - 1)[pos]
        rows.append(
            MixLayer(
                layer=li,
                resid_lambda=round(float(b.resid_lambda), FINE),
                x0_lambda=round(float(b.x0_lambda), FINE),
                stream_norm=round(float(x.norm()), COARSE),
                x0_norm=round(float(x0.norm()), COARSE),
                mixed_norm=round(float(t.act("hook_resid_pre", li)[pos].norm()), COARSE),
                reaches_final=round(weights[li], VALUE),
            )
        )
    return rows


def _value_embed(t: Trace, li: int) -> ValueEmbedLayer:
    return ValueEmbedLayer(
        layer=li,
        gate=arr(t.act("attn.hook_ve_gate", li), VALUE),
        ve_norm=arr(t.act("attn.hook_ve", li).norm(dim=-1), COARSE),
        v_norm=arr(t.act("attn.hook_v", li).norm(dim=-1), COARSE),
    )


def softcap_detail(t: Trace) -> SoftcapDetail:
    cap, pos = t.cfg.softcap, t.sel.position
    z_all = t.act("hook_logits_uncapped")  # (T, V)
    z = z_all[pos]
    top = torch.topk(z, min(10, z.numel()))
    x = torch.linspace(-3 * cap, 3 * cap, 121)
    return SoftcapDetail(
        cap=cap,
        top=[
            CappedLogit(
                id=int(i),
                text=token_text(t.service, int(i)),
                uncapped=round(float(v), VALUE),
                capped=round(float(cap * torch.tanh(v / cap)), VALUE),
            )
            for v, i in zip(top.values, top.indices)
        ],
        largest_uncapped=round(float(z_all.abs().max()), VALUE),
        curve_x=arr(x, COARSE),
        curve_y=arr(cap * torch.tanh(x / cap), VALUE),
    )
