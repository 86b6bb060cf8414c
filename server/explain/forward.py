"""The forward trace of a prompt: one captured forward pass, turned into the requested stages."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gptscope.model.gpt import apply_rope, causal_allowed, rope_angles

from ..errors import InputError
from ..schemas.forward import (
    AttentionBlock,
    ClassifierBlock,
    Contribution,
    Decomposition,
    EmbeddingsBlock,
    ExpertLayer,
    ForwardRequest,
    ForwardResponse,
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
from .tokens import check_text, encode, token_pieces

LENS_K = 3
HIST_BINS = 40


def rounded(t: torch.Tensor, digits: int = 5) -> list:
    """A tensor as (nested) lists of floats rounded for compact JSON (NaN/inf never appear).

    Rounded in float64: a float32 0.6031 widens to 0.6031000018119812 in JSON, while the float64
    nearest to 0.6031 prints as 0.6031 (the same digits in a third of the bytes)."""
    t = torch.nan_to_num(t.detach().double(), nan=0.0, posinf=0.0, neginf=0.0)
    return torch.round(t, decimals=digits).tolist()


def attention_rows(pattern: torch.Tensor, causal: bool) -> list:
    """(heads, T, T) weights -> [head][query][key] to 4 decimals; a causal model's row q stops at
    key q (the masked keys' weights are exactly 0 and are left out)."""
    rows = rounded(pattern, 4)
    return [[r[: q + 1] for q, r in enumerate(h)] for h in rows] if causal else rows


def token_text(service: ModelService, tid: int) -> str:
    return service.encoding.decode_single_token_bytes(int(tid)).decode("utf-8", errors="replace")


def prompt_ids(service: ModelService, text: str, truncate: bool, field: str = "text") -> tuple[list[int], int]:
    """Token ids of a prompt for the loaded model; refuses (or, if asked, truncates) a prompt that
    does not fit the context window."""
    check_text(text, field)
    # a classifier's prompt is written with its special tokens (<|start|> ... <|extract|>)
    ids = encode(service.encoding, text, allow_special=service.classifier is not None, field=field)
    n_ctx = service.model.cfg.n_ctx
    if not ids:
        raise InputError(field, "the prompt has no tokens")
    if len(ids) > n_ctx:
        if not truncate:
            raise InputError(
                field,
                f"the prompt is {len(ids)} tokens; the model's context window is n_ctx={n_ctx} tokens "
                f"(send truncate=true to keep the last {n_ctx})",
            )
        return ids[-n_ctx:], len(ids) - n_ctx
    return ids, 0


def given_ids(service: ModelService, ids: list[int]) -> list[int]:
    V, n_ctx = service.model.cfg.vocab_size, service.model.cfg.n_ctx
    bad = next((i for i in ids if not 0 <= i < V), None)
    if bad is not None:
        raise InputError("ids", f"token id {bad} is outside the vocabulary 0..{V - 1}")
    if len(ids) > n_ctx:
        raise InputError("ids", f"{len(ids)} ids exceed the model's context window n_ctx={n_ctx}")
    return list(ids)


def check_index(value: int, n: int, field: str) -> int:
    if not 0 <= value < n:
        raise InputError(field, f"{value} is out of range; valid values are 0..{n - 1}")
    return value


def _indices(requested: list[int] | None, n: int, field: str) -> list[int]:
    if requested is None:
        return list(range(n))
    for i in requested:
        check_index(i, n, field)
    return sorted(set(requested))


def next_tokens(service: ModelService, logits: torch.Tensor, k: int) -> list[NextToken]:
    """Top-k candidates from one position's logits (V,)."""
    probs = torch.softmax(logits.float(), -1)
    top = torch.topk(probs, min(k, probs.numel()))
    return [
        NextToken(
            id=int(i), text=token_text(service, int(i)), prob=round(float(p), 6), logit=round(float(logits[int(i)]), 4)
        )
        for p, i in zip(top.values, top.indices)
    ]


def _needed_hooks(parts: set[str], cfg, layers: list[int], layer: int) -> set[str]:
    names: set[str] = {f"blocks.{cfg.n_layer - 1}.hook_resid_post"}  # the selected position's logits
    L = range(cfg.n_layer)
    if "attention" in parts:
        names |= {f"blocks.{li}.attn.hook_pattern" for li in layers}
    if "embeddings" in parts:
        names |= {"hook_embed", "hook_pos_embed"}
    if "layernorm" in parts:
        names |= {
            f"blocks.{layer}.hook_resid_pre",
            f"blocks.{layer}.hook_resid_mid",
            f"blocks.{layer}.hook_attn_out",
            f"blocks.{layer}.ln1.hook_normalized",
        }
    if "head_detail" in parts:
        names |= {
            f"blocks.{layer}.attn.{h}"
            for h in (
                "hook_q",
                "hook_k",
                "hook_v",
                "hook_q_rot",
                "hook_k_rot",
                "hook_attn_scores",
                "hook_pattern",
                "hook_z",
                "hook_result",
            )
        }
        names |= {f"blocks.{layer}.hook_resid_pre", f"blocks.{layer}.hook_attn_out", f"blocks.{layer}.hook_resid_mid"}
    if "mlp" in parts and not cfg.n_expert:
        names |= {f"blocks.{li}.mlp.hook_pre" for li in L} | {f"blocks.{layer}.mlp.hook_post"}
    if parts & {"residual", "logit_lens"}:
        names |= {"blocks.0.hook_resid_pre"} | {f"blocks.{li}.hook_resid_post" for li in L}
    if "rope" in parts and cfg.pos == "rope":
        names |= {f"blocks.{layer}.attn.{h}" for h in ("hook_q", "hook_k", "hook_q_rot", "hook_k_rot")}
    if "moe" in parts and cfg.n_expert:
        names |= {f"blocks.{li}.mlp.{h}" for li in L for h in ("hook_router_probs", "hook_router_choice")}
    if "classifier" in parts:
        names |= {f"blocks.{li}.attn.hook_pattern" for li in L}
    if parts & {"decomposition", "classifier"}:
        names |= {"hook_embed", "hook_pos_embed", "ln_final.hook_scale"}
        names |= {f"blocks.{li}.attn.hook_result" for li in L} | {f"blocks.{li}.hook_mlp_out" for li in L}
        names |= {f"blocks.{li}.hook_attn_out" for li in L}
        names |= {f"blocks.{cfg.n_layer - 1}.hook_resid_post"}
    return names


def forward(service: ModelService, req: ForwardRequest) -> ForwardResponse:
    model = service.model
    cfg = model.cfg
    parts = set(req.include)
    layers = _indices(req.layers, cfg.n_layer, "layers")
    heads = _indices(req.heads, cfg.n_head, "heads")
    layer = check_index(req.layer, cfg.n_layer, "layer")
    head = check_index(req.head, cfg.n_head, "head")
    if req.target is not None:
        check_index(req.target, cfg.vocab_size, "target")
    if req.ids is not None:
        ids, dropped = given_ids(service, req.ids), 0
    else:
        if not req.text:
            raise InputError("text", "give a prompt (text) or token ids (ids)")
        ids, dropped = prompt_ids(service, req.text, req.truncate)
    T = len(ids)
    pos = T - 1 if req.position is None else check_index(req.position, T, "position")

    with service.run() as m, m.capture(_needed_hooks(parts, cfg, layers, layer)) as cache:
        # every position's logits only when a part reads them; else the selected (last) one: the
        # unembedding is the widest matmul (GPT-2: 50,257 x 768 per position)
        every = bool(parts & {"prompt_loss", "decomposition", "classifier"}) or pos != T - 1
        logits, _ = m(torch.tensor([ids], device=service.device), last_only=not every)
        logits = logits[0]  # (T, V), or (1, V) for the last position only
        out = ForwardResponse(
            model=service.name,
            tokens=token_pieces(service.encoding, ids),
            truncated=dropped,
            n_layer=cfg.n_layer,
            n_head=cfg.n_head,
            d_model=cfg.d_model,
            causal=cfg.causal,
            window=cfg.window,
            position=pos,
        )
        c = {k: v[0] for k, v in cache.items()}  # drop the batch dimension
        # the selected position's logits, computed the same way whatever else was asked for (a
        # one-row matmul rounds differently from the full one: every panel must show the same digits)
        final = c[f"blocks.{cfg.n_layer - 1}.hook_resid_post"][pos : pos + 1]
        at_pos = m.lm_head(m.ln_final(final[None]))[0, 0]
        if "attention" in parts:
            out.attention = AttentionBlock(
                layers=layers,
                heads=heads,
                pattern=[attention_rows(c[f"blocks.{li}.attn.hook_pattern"][heads], cfg.causal) for li in layers],
            )
        if "embeddings" in parts:
            tok = c["hook_embed"]
            p = cache["hook_pos_embed"][0] if "hook_pos_embed" in cache else None  # learned positions only
            out.embeddings = EmbeddingsBlock(
                pos=cfg.pos,
                token=rounded(tok, 4),
                position=None if p is None else rounded(p, 4),
                sum=rounded(tok if p is None else tok + p, 4),
                token_norms=rounded(tok.norm(dim=-1), 4),
                position_norms=None if p is None else rounded(p.norm(dim=-1), 4),
            )
        if "layernorm" in parts:
            out.layernorm = _layernorm(m, c, layer, pos)
        if "head_detail" in parts:
            out.head_detail = _head_detail(m, c, layer, head, pos)
        if "mlp" in parts and not cfg.n_expert:  # a mixture of experts has no one MLP per layer
            out.mlp = _mlp(m, c, layer, pos)
        if "residual" in parts or "logit_lens" in parts:
            streams = [c["blocks.0.hook_resid_pre"]] + [c[f"blocks.{li}.hook_resid_post"] for li in range(cfg.n_layer)]
            stages = ["embed"] + [f"block {li}" for li in range(cfg.n_layer)]
            if "residual" in parts:
                out.residual = ResidualBlock(
                    stages=stages, norms=rounded(torch.stack([s.norm(dim=-1) for s in streams]), 4)
                )
            if "logit_lens" in parts:
                out.logit_lens = _logit_lens(service, m, streams, stages, ids)
        if "next_token" in parts:
            out.next_token = next_tokens(service, at_pos, req.top_k)
        if "prompt_loss" in parts:
            out.prompt_loss = _prompt_loss(service, logits, ids)
        if "decomposition" in parts:
            out.decomposition = _decompose(service, m, c, logits, pos, req.target)
        if "rope" in parts and cfg.pos == "rope":
            out.rope = _rope(m, c, layer, head, pos)
        if "moe" in parts and cfg.n_expert:
            out.moe = _moe(m, c)
        if "classifier" in parts and service.classifier is not None:  # as rope and moe: null where it does not apply
            out.classifier = _classifier(service, m, c, ids)
    return out


def _classifier(service: ModelService, m, c, ids: list[int]) -> ClassifierBlock:
    """W_y on the final hidden state of the last position, the attention that fed that position,
    and the winning label's logit split into its parts."""
    clf, info = service.classifier, service.meta["classifier"]
    pos = len(ids) - 1
    h = m.ln_final(c[f"blocks.{m.cfg.n_layer - 1}.hook_resid_post"][pos : pos + 1][None])[0, 0]  # (d,)
    logits = clf.head(h)  # (L,)
    win = int(torch.argmax(logits))
    return ClassifierBlock(
        task=info["task"],
        labels=info["labels"],
        position=pos,
        at_extract=ids[-1] == clf.specials["extract"],
        logits=rounded(logits),
        probs=rounded(torch.softmax(logits, -1)),
        predicted=win,
        attention=[rounded(c[f"blocks.{li}.attn.hook_pattern"][:, pos, : pos + 1], 4) for li in range(m.cfg.n_layer)],
        attention_mean=[
            rounded(c[f"blocks.{li}.attn.hook_pattern"][:, pos, : pos + 1].mean(0), 4) for li in range(m.cfg.n_layer)
        ],
        decomposition=decomposition(
            m,
            c,
            pos,
            clf.head.weight[win],
            float(logits[win]),
            win,
            info["labels"][win],
            bias_out=float(clf.head.bias[win]),
        ),
    )


def _rope(m, c, layer: int, head: int, pos: int) -> RopeBlock:
    cfg = m.cfg
    a, hs = f"blocks.{layer}.attn.", cfg.d_head
    kvh = head // (cfg.n_head // cfg.n_kv_head)
    T = c[a + "hook_q"].size(0)
    cos, sin = rope_angles(hs, torch.arange(T), cfg.rope_base)
    q, k = c[a + "hook_q"][pos, head], c[a + "hook_k"][pos, kvh]  # the selected position's q and k, unrotated
    offset = max(T, 50)
    dist = list(range(T))

    def curve(start: int) -> list[float]:
        cq, sq = rope_angles(hs, torch.arange(start, start + T), cfg.rope_base)
        kk = apply_rope(k, cq[0], sq[0])  # the key at `start`
        return [float(apply_rope(q, cq[d], sq[d]) @ kk) / math.sqrt(hs) for d in dist]

    return RopeBlock(
        layer=layer,
        head=head,
        kv_head=kvh,
        base=cfg.rope_base,
        frequencies=rounded(cfg.rope_base ** (-torch.arange(0, hs, 2).float() / hs), 6),
        angles=rounded(torch.atan2(sin, cos), 4),
        q=rounded(c[a + "hook_q"][:, head]),
        q_rotated=rounded(c[a + "hook_q_rot"][:, head]),
        k=rounded(c[a + "hook_k"][:, kvh]),
        k_rotated=rounded(c[a + "hook_k_rot"][:, kvh]),
        distance_check=RopeDistanceCheck(
            offset=offset,
            distances=dist,
            scores_at_start=[round(x, 5) for x in curve(0)],
            scores_at_offset=[round(x, 5) for x in curve(offset)],
        ),
    )


def _moe(m, c) -> MoEBlock:
    cfg, layers = m.cfg, []
    for li in range(cfg.n_layer):
        probs, choice = c[f"blocks.{li}.mlp.hook_router_probs"], c[f"blocks.{li}.mlp.hook_router_choice"]
        load = torch.bincount(choice.flatten(), minlength=cfg.n_expert).float() / choice.numel()
        layers.append(ExpertLayer(layer=li, probs=rounded(probs, 4), choice=choice.tolist(), load=rounded(load, 4)))
    return MoEBlock(n_expert=cfg.n_expert, top_k=cfg.top_k_experts, layers=layers)


def _layernorm(m, c, layer: int, pos: int) -> LayerNormDetail:
    block = m.blocks[layer]
    pre_norm = m.cfg.norm in ("pre", "both")
    # pre-norm: ln1 reads the stream entering the block; post-norm: it reads stream + attention
    x = (
        c[f"blocks.{layer}.hook_resid_pre"][pos]
        if pre_norm
        else (c[f"blocks.{layer}.hook_resid_pre"] + c[f"blocks.{layer}.hook_attn_out"])[pos]
    )
    ln = block.ln1
    rms = m.cfg.norm_type == "rmsnorm"
    mean = torch.zeros(()) if rms else x.mean()
    var = x.pow(2).mean() if rms else x.var(unbiased=False)
    std = torch.sqrt(var + ln.eps)
    normed = (x - mean) / std
    return LayerNormDetail(
        layer=layer,
        which="ln1",
        position=pos,
        kind=m.cfg.norm_type,
        input=rounded(x),
        mean=None if rms else round(float(mean), 6),
        variance=round(float(var), 6),
        eps=ln.eps,
        std=round(float(std), 6),
        normalized=rounded(normed),
        gain=rounded(ln.weight),
        shift=rounded(ln.bias) if ln.bias is not None else None,
        output=rounded(c[f"blocks.{layer}.ln1.hook_normalized"][pos]),
    )


def _head_detail(m, c, layer: int, head: int, pos: int) -> HeadDetail:
    a = f"blocks.{layer}.attn."
    rope, kvh = m.cfg.pos == "rope", head // (m.cfg.n_head // m.cfg.n_kv_head)
    scores = c[a + "hook_attn_scores"][head]  # (T, T)
    T = scores.size(0)
    allowed = causal_allowed(T, T, window=m.cfg.window) if m.cfg.causal else torch.ones(T, T, dtype=torch.bool)
    masked = [[round(float(scores[i, j]), 5) if allowed[i, j] else None for j in range(T)] for i in range(T)]
    return HeadDetail(
        layer=layer,
        head=head,
        d_head=m.cfg.d_head,
        scale=1 / math.sqrt(m.cfg.d_head),
        # RoPE: the rotated q and k (their dot product is the score); grouped-query attention: the
        # key/value head this query head shares
        q=rounded(c[a + ("hook_q_rot" if rope else "hook_q")][:, head]),
        k=rounded(c[a + ("hook_k_rot" if rope else "hook_k")][:, kvh]),
        v=rounded(c[a + "hook_v"][:, kvh]),
        kv_head=kvh,
        rotated=rope,
        scores=rounded(scores),
        masked_scores=masked,
        pattern=rounded(c[a + "hook_pattern"][head]),
        z=rounded(c[a + "hook_z"][:, head]),
        result=rounded(c[a + "hook_result"][:, head], 4),
        position=pos,
        resid_pre=rounded(c[f"blocks.{layer}.hook_resid_pre"][pos]),
        attn_out=rounded(c[f"blocks.{layer}.hook_attn_out"][pos]),
        resid_mid=rounded(c[f"blocks.{layer}.hook_resid_mid"][pos]),
    )


def gelu_curve(kind: str, lo: float = -4.0, hi: float = 4.0, n: int = 161) -> tuple[list[float], list[float]]:
    x = torch.linspace(lo, hi, n)
    y = F.silu(x) if kind == "silu" else F.gelu(x, approximate="tanh" if kind == "tanh" else "none")
    return rounded(x, 4), rounded(y, 5)


def _mlp(m, c, layer: int, pos: int) -> MLPBlock:
    pres = [c[f"blocks.{li}.mlp.hook_pre"] for li in range(m.cfg.n_layer)]
    lo = min(float(p.min()) for p in pres)
    hi = max(float(p.max()) for p in pres)
    edges = torch.linspace(min(lo, -4.0), max(hi, 4.0), HIST_BINS + 1)
    layers = []
    for li, p in enumerate(pres):
        counts = torch.histc(p.flatten(), bins=HIST_BINS, min=float(edges[0]), max=float(edges[-1]))
        layers.append(
            MLPLayer(
                layer=li,
                histogram=Histogram(edges=rounded(edges, 4), counts=[int(x) for x in counts]),
                fraction_negative=round(float((p < 0).float().mean()), 5),
                mean=round(float(p.mean()), 5),
                std=round(float(p.std()), 5),
            )
        )
    post = c[f"blocks.{layer}.mlp.hook_post"][pos]
    pre = pres[layer][pos]
    top = torch.topk(post, min(10, post.numel()))
    act = "silu" if m.cfg.mlp == "swiglu" else m.cfg.gelu
    cx, cy = gelu_curve(act)
    return MLPBlock(
        gelu=act,
        curve_x=cx,
        curve_y=cy,
        layers=layers,
        layer=layer,
        position=pos,
        top_neurons=[
            Neuron(index=int(i), pre=round(float(pre[i]), 5), post=round(float(v), 5))
            for v, i in zip(top.values, top.indices)
        ],
        d_mlp=m.cfg.d_mlp,
    )


def _logit_lens(service, m, streams, stages, ids) -> LogitLensBlock:
    T = len(ids)
    top_all, actual = [], []
    for s in streams:
        probs = torch.softmax(m.lm_head(m.ln_final(s)).float(), -1)  # (T, V)
        top = torch.topk(probs, LENS_K, dim=-1)
        vals, idx = top.values.tolist(), top.indices.tolist()
        top_all.append(
            [
                [LensCandidate(id=i, text=token_text(service, i), prob=round(p, 5)) for p, i in zip(vals[t], idx[t])]
                for t in range(T)
            ]
        )
        nxt = torch.tensor([*ids[1:], 0])
        pa = probs[torch.arange(T), nxt]
        actual.append([round(float(pa[t]), 5) if t < T - 1 else None for t in range(T)])
    return LogitLensBlock(stages=stages, positions=list(range(T)), top=top_all, actual_next_prob=actual)


def _prompt_loss(service, logits: torch.Tensor, ids: list[int]) -> PromptLoss:
    V = logits.size(-1)
    if len(ids) < 2:
        return PromptLoss(positions=[], mean_loss=None, perplexity=None, uniform_loss=round(math.log(V), 5))
    logp = torch.log_softmax(logits[:-1].float(), -1)
    nxt = torch.tensor(ids[1:])
    lp = logp[torch.arange(len(ids) - 1), nxt]
    rows = [
        PositionLoss(
            position=t,
            next_id=int(nxt[t]),
            next_text=token_text(service, int(nxt[t])),
            prob=round(float(lp[t].exp()), 6),
            loss=round(float(-lp[t]), 5),
        )
        for t in range(len(lp))
    ]
    mean = float(-lp.mean())
    return PromptLoss(
        positions=rows,
        mean_loss=round(mean, 5),
        perplexity=round(math.exp(mean), 4),
        uniform_loss=round(math.log(V), 5),
    )


def _decompose(service, m, c, logits, pos: int, target: int | None) -> Decomposition:
    """Split the logit of `target` (default: the top prediction) at `pos` into its parts."""
    tid = int(torch.argmax(logits[pos])) if target is None else target
    return decomposition(m, c, pos, m.lm_head.weight[tid], float(logits[pos, tid]), tid, token_text(service, tid))


def decomposition(
    m, c, pos: int, w_out: torch.Tensor, logit: float, target_id: int, target_text: str, bias_out: float = 0.0
) -> Decomposition:
    """Split one logit (w_out . h + bias_out) into what each component wrote into the residual stream.

    For a pre-norm model the final residual is embed + sum over layers of (heads + attention bias
    + MLP). Holding the final LayerNorm's scale at its real value makes the map from stream to
    logit linear: logit = sum_c ((c - mean c) / scale) . (g * w_out) + b . w_out + bias_out.
    """
    if m.cfg.norm == "post":
        return Decomposition(
            position=pos,
            target_id=target_id,
            target_text=target_text,
            logit=round(logit, 5),
            contributions=[],
            total=0.0,
            residual_error=round(logit, 5),
            exact=False,
            note="post-norm (GPT-1 style) models normalise inside every block, so the stream "
            "does not split into independent parts; no decomposition is given",
        )
    rows = split_logit(m, c, pos, w_out, bias_out)
    total = sum(r.value for r in rows)
    for r in rows:
        r.value = round(r.value, 5)
    return Decomposition(
        position=pos,
        target_id=target_id,
        target_text=target_text,
        logit=round(logit, 5),
        contributions=rows,
        total=round(total, 5),
        residual_error=round(logit - total, 6),
        exact=True,
        note="the final LayerNorm's scale is held at its value for this prompt, which makes the "
        "map from residual stream to logit linear, so the parts add up exactly",
    )


def split_logit(m, c, pos: int, w_out: torch.Tensor, bias_out: float = 0.0) -> list[Contribution]:
    """What each component wrote into the residual stream at `pos`, read through the final norm
    (its scale held at its real value) and the output row w_out: the rows sum to the logit w_out . h
    (+ bias_out, listed as "output bias" when non-zero). Pre-norm and sandwich models only."""
    cfg = m.cfg
    ln = m.ln_final
    w_u = w_out  # (d,)
    scale = c["ln_final.hook_scale"][pos, 0]
    direction = ln.weight * w_u / scale

    centre = cfg.norm_type == "layernorm"  # RMSNorm does not subtract the mean

    def contrib(vec: torch.Tensor) -> float:
        return float(((vec - vec.mean() if centre else vec) * direction).sum())

    embed = c["hook_embed"][pos] + (c["hook_pos_embed"][pos] if "hook_pos_embed" in c else 0.0)
    rows = [Contribution(name="embed", kind="embed", value=contrib(embed))]
    for li in range(cfg.n_layer):
        if cfg.norm == "both":  # the sandwich normalises the summed heads: only the whole output adds up
            rows.append(
                Contribution(
                    name=f"L{li} attention", kind="attn", layer=li, value=contrib(c[f"blocks.{li}.hook_attn_out"][pos])
                )
            )
            rows.append(
                Contribution(name=f"MLP{li}", kind="mlp", layer=li, value=contrib(c[f"blocks.{li}.hook_mlp_out"][pos]))
            )
            continue
        res = c[f"blocks.{li}.attn.hook_result"][pos]  # (nh, d)
        for h in range(cfg.n_head):
            rows.append(Contribution(name=f"L{li}H{h}", kind="head", layer=li, head=h, value=contrib(res[h])))
        if m.blocks[li].attn.c_proj.bias is not None:
            rows.append(
                Contribution(
                    name=f"L{li} attn bias", kind="attn_bias", layer=li, value=contrib(m.blocks[li].attn.c_proj.bias)
                )
            )
        rows.append(
            Contribution(name=f"MLP{li}", kind="mlp", layer=li, value=contrib(c[f"blocks.{li}.hook_mlp_out"][pos]))
        )
    if ln.bias is not None:
        rows.append(Contribution(name="final LayerNorm shift", kind="bias", value=float((ln.bias * w_u).sum())))
    if bias_out:
        rows.append(Contribution(name="output bias", kind="bias", value=float(bias_out)))
    return rows
