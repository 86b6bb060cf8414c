"""The builders of the forward trace's stages: each reads one captured forward pass (a `Trace`) and
returns its block of the answer. Which hooks each needs, and when it applies, is in parts.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
import torch.nn.functional as F

from gptscope.model.gpt import (
    GPT,
    Block,
    GPTConfig,
    LayerNorm,
    RMSNorm,
    apply_rope,
    causal_allowed,
    hook_name,
    rope_angles,
)

from .. import saes
from ..schemas.arrays import Arr
from ..schemas.sae import SaeFeaturesBlock
from ..schemas.stages import (
    AttentionBlock,
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
    MLPBlock,
    MLPLayer,
    MoEBlock,
    Neuron,
    NextToken,
    PositionLoss,
    PromptLoss,
    ResidualBlock,
    RopeBlock,
    RopeDistanceCheck,
)
from ..service import ModelService
from .common import arr, attention_rows, next_tokens, rounded, token_text
from .digits import COARSE, FINE, VALUE
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
        """The residual stream after the embedding and after each block: n_layer + 1 of (T, d)."""
        return [self.act("hook_resid_pre", 0)] + [self.act("hook_resid_post", li) for li in range(self.cfg.n_layer)]

    @cached_property
    def at_position(self) -> torch.Tensor:
        """The selected position's logits (V,), computed the same way whatever else was asked for (a
        one-row matmul rounds differently from the full one: every panel must show the same digits)."""
        m, pos = self.model, self.sel.position
        final = self.act("hook_resid_post", self.cfg.n_layer - 1)[pos : pos + 1]
        return m.lm_head(m.ln_final(final[None]))[0, 0]


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
    return ["embed"] + [f"block {li}" for li in range(cfg.n_layer)]


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
    )


def layernorm(t: Trace) -> LayerNormDetail:
    layer, pos, cfg = t.sel.layer, t.sel.position, t.cfg
    ln = block(t.model, layer).ln1
    # pre-norm: ln1 reads the stream entering the block; post-norm: it reads stream + attention
    x = t.act("hook_resid_pre", layer)[pos]
    if cfg.norm not in ("pre", "both"):
        x = x + t.act("hook_attn_out", layer)[pos]
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
        gain=arr(ln.weight),
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
    allowed = causal_allowed(T, T, window=cfg.window) if cfg.causal else torch.ones(T, T, dtype=torch.bool)
    masked = [[round(float(scores[i, j]), VALUE) if allowed[i, j] else None for j in range(T)] for i in range(T)]
    return HeadDetail(
        layer=layer,
        head=head,
        d_head=cfg.d_head,
        scale=1 / math.sqrt(cfg.d_head),
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
    act = "silu" if cfg.mlp == "swiglu" else cfg.gelu
    cx, cy = gelu_curve(act)
    return MLPBlock(
        gelu=act,
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


def logit_lens(t: Trace) -> LogitLensBlock:
    """The final norm and the unembedding applied to the stream after every stage (a post-norm model's
    ln_final is an identity: its blocks' outputs are already normalised)."""
    m, ids, T = t.model, t.ids, len(t.ids)
    nxt = torch.tensor([*ids[1:], 0])
    top_all, actual = [], []
    for s in t.streams:
        probs = torch.softmax(m.lm_head(m.ln_final(s)).float(), -1)  # (T, V)
        top = torch.topk(probs, LENS_K, dim=-1)
        vals, idx = top.values.tolist(), top.indices.tolist()
        top_all.append(
            [
                [
                    LensCandidate(id=i, text=token_text(t.service, i), prob=round(p, VALUE))
                    for p, i in zip(vals[q], idx[q])
                ]
                for q in range(T)
            ]
        )
        pa = probs[torch.arange(T), nxt]
        actual.append([round(float(pa[q]), VALUE) if q < T - 1 else None for q in range(T)])
    return LogitLensBlock(stages=stage_names(t.cfg), positions=list(range(T)), top=top_all, actual_next_prob=actual)


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
    logit = float(t.logits[pos, tid])
    return decompose(m, t.cache, pos, m.lm_head.weight[tid], logit, tid, token_text(t.service, tid))


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
        "map from residual stream to logit linear, so the parts add up exactly",
    )


def split_logit(
    m: GPT, c: dict[str, torch.Tensor], pos: int, w_out: torch.Tensor, bias_out: float = 0.0
) -> list[Contribution]:
    """What each component wrote into the residual stream at `pos`, read through the final norm
    (its scale held at its real value) and the output row w_out: the rows sum to the logit w_out . h
    (+ bias_out, listed as "output bias" when non-zero). Pre-norm and sandwich models only."""
    cfg, ln = m.cfg, final_norm(m)
    direction = ln.weight * w_out / c["ln_final.hook_scale"][pos, 0]
    centre = cfg.norm_type == "layernorm"  # RMSNorm does not subtract the mean

    def part(name: str, kind: ContributionKind, vec: torch.Tensor, **where: int) -> Contribution:
        value = float(((vec - vec.mean() if centre else vec) * direction).sum())
        return Contribution(name=name, kind=kind, value=value, **where)

    embed = c["hook_embed"][pos] + (c["hook_pos_embed"][pos] if "hook_pos_embed" in c else 0.0)
    rows = [part("embed", "embed", embed)]
    for li in range(cfg.n_layer):
        if cfg.norm == "both":  # the sandwich normalises the summed heads: only the whole output adds up
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


def rope(t: Trace) -> RopeBlock:
    cfg, layer, head, pos = t.cfg, t.sel.layer, t.sel.head, t.sel.position
    hs, kvh = cfg.d_head, kv_head(cfg, head)
    q_all, k_all = t.act("attn.hook_q", layer), t.act("attn.hook_k", layer)  # (T, nh, hs), (T, n_kv, hs)
    T = q_all.size(0)
    cos, sin = rope_angles(hs, torch.arange(T), cfg.rope_base)
    q, k = q_all[pos, head], k_all[pos, kvh]  # the selected position's q and k, unrotated
    offset = max(T, 50)
    dist = list(range(T))

    def curve(start: int) -> list[float]:
        """q . k / sqrt(hs) with k rotated to `start` and q to start + distance."""
        cq, sq = rope_angles(hs, torch.arange(start, start + T), cfg.rope_base)
        kk = apply_rope(k, cq[0], sq[0])  # the key at `start`
        return [round(float(apply_rope(q, cq[d], sq[d]) @ kk) / math.sqrt(hs), VALUE) for d in dist]

    return RopeBlock(
        layer=layer,
        head=head,
        kv_head=kvh,
        base=cfg.rope_base,
        frequencies=rounded(cfg.rope_base ** (-torch.arange(0, hs, 2).float() / hs), FINE),
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
    h = m.ln_final(t.act("hook_resid_post", m.cfg.n_layer - 1)[pos : pos + 1][None])[0, 0]  # (d,)
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
    loaded = saes.get(t.service, t.sel.sae)
    x = t.act("hook_resid_post", loaded.sae.cfg.layer)  # (T, d)
    return active_features(t.service, loaded, x, t.ids, t.sel.position)
