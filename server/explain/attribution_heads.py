"""Attention inside attribution graphs (issue #64) as the API shows it: which heads carried each edge into a
node of the graph (POST /api/v1/attribution/heads), and why a head attended from one position to another
(POST /api/v1/attribution/qk). model/attribution_heads.py does the arithmetic, exactly, in the same frozen
replacement model as the graph."""

from __future__ import annotations

import time

import torch

from gptscope.model import attribution as at
from gptscope.model import attribution_heads as ah
from gptscope.model import transcoders as tc_mod

from .. import memory
from ..digits import FINE, SECONDS, VALUE
from ..errors import InputError
from ..schemas.attribution import (
    HeadPart,
    HeadsRequest,
    HeadsResponse,
    LoadedEdge,
    PromptOnSet,
    QKKinds,
    QKPair,
    QKRequest,
    QKResponse,
    QKSource,
    SourceRef,
)
from ..service import ModelService
from ..transcoders import TRANSCODERS as store
from .attribution import check_tokens, feature_label, request_ids, target_words
from .common import token_text

MAX_ROW_TOKENS = 40_000  # rows of the frozen model's backward pass x the prompt's tokens, per request
LOADINGS = (
    "For each block on an edge's path, the edge's weight is its bypass (the frozen replacement model with every "
    "head of that block taken out) plus one part per head (only that head kept, minus the bypass), exactly: the "
    "frozen map is linear, and a block's heads add up to its attention."
)
QK = (
    "With the norms' divisors frozen at the prompt's, the head's query and key vectors are sums of what each source "
    "(token, active feature, error node, and the biases: the constant) wrote before the block, carried by the "
    "frozen attention below; the score, scale x q . k, is the sum of one term per (query source, key source)."
)


class Names:
    """What a graph's sources are called: tokens, active features (with their top tokens), errors, the biases."""

    def __init__(self, service: ModelService, loaded: tc_mod.LoadedSet, tr: at.Trace) -> None:
        self.service, self.loaded, self.tr = service, loaded, tr
        self.T = len(tr.ids)

    def token(self, p: int) -> SourceRef:
        text = token_text(self.service, self.tr.ids[p])
        return SourceRef(kind="token", layer=None, position=p, feature=None, label=text)

    def feature(self, i: int) -> SourceRef:
        layer, pos, f = int(self.tr.layer[i]), int(self.tr.position[i]), int(self.tr.feature[i])
        label = feature_label(self.service, self.loaded, layer, f)
        return SourceRef(kind="feature", layer=layer, position=pos, feature=f, label=label)

    def error(self, layer: int, p: int) -> SourceRef:
        return SourceRef(kind="error", layer=layer, position=p, feature=None, label=f"error L{layer}")

    def constant(self) -> SourceRef:
        return SourceRef(kind="constant", layer=None, position=None, feature=None, label="biases (the constant)")

    def column(self, c: int, n_features: int) -> SourceRef:
        """Column c of [tokens (T), features (the first n_features of the trace's), errors (block-major)]."""
        if c < self.T:
            return self.token(c)
        if c < self.T + n_features:
            return self.feature(c - self.T)
        layer, p = divmod(c - self.T - n_features, self.T)
        return self.error(layer, p)


def _prompt(service: ModelService, req: PromptOnSet) -> tuple[tc_mod.LoadedSet, list[int]]:
    try:
        at.check_model(service.model)
    except ValueError as e:
        raise InputError("text" if req.text is not None else "ids", f"the served model: {e}") from None
    return store.get(service, req.transcoders), request_ids(service, req.text, req.ids, req.bos)


def _need(service: ModelService, loaded: tc_mod.LoadedSet, req: PromptOnSet, T: int, rows: int) -> memory.Need:
    """One batched pass's bytes (a graph of one batch of rows), checked against the rows' cost first."""
    cfg = service.model.cfg
    field = "text" if req.text is not None else "ids"
    if rows * T > MAX_ROW_TOKENS:
        raise InputError(
            field,
            f"{rows} rows of the frozen model x {T} tokens is more than this request's {MAX_ROW_TOKENS:,}: a shorter prompt",
        )
    batch = min(rows, at.rows_per_batch(cfg, T))
    item = service.model.lm_head.weight.element_size()
    return memory.Need(
        at.peak_bytes(cfg, loaded.codes[0].cfg, T, batch, 0, item),
        field,
        f"this head split ({T:,} tokens)",
        "a shorter prompt",
    )


def _target(service: ModelService, req: HeadsRequest, tr: at.Trace, T: int) -> tuple[at.Target, str]:
    cfg = service.model.cfg
    if req.layer is None:
        check_tokens(service, req.token, req.wrong)
        token = int(tr.logits.argmax()) if req.token is None else req.token
        return at.Target(None, T - 1, up=token, down=req.wrong), target_words(service, token, req.wrong)
    if req.layer >= cfg.n_layer:
        raise InputError("layer", f"{req.layer} is out of range; valid values are 0..{cfg.n_layer - 1}")
    if req.position is None or req.feature is None:
        raise InputError("position", "a feature target needs layer, position and feature")
    if req.position >= T:
        raise InputError("position", f"{req.position} is out of range; valid values are 0..{T - 1}")
    active = (tr.layer == req.layer) & (tr.position == req.position) & (tr.feature == req.feature)
    if not bool(active.any()):
        raise InputError(
            "feature", f"L{req.layer} #{req.feature} is not active at position {req.position} on this prompt"
        )
    return at.Target(req.layer, req.position, req.feature), f"L{req.layer} #{req.feature} at position {req.position}"


def head_loadings(service: ModelService, req: HeadsRequest) -> HeadsResponse:
    t0 = time.perf_counter()
    loaded, ids = _prompt(service, req)
    T, cfg = len(ids), service.model.cfg
    with service.run() as m:
        tr = at.trace(m, loaded.codes, ids)
    target, words = _target(service, req, tr, T)
    layers = ah.path_layers(target, cfg.n_layer)
    need = _need(service, loaded, req, T, len(layers) * (1 + cfg.n_head))
    with memory.hold(need), torch.inference_mode():
        hl = ah.head_loadings(service.model, loaded.codes, tr, target)
    names, N = Names(service, loaded, tr), len(tr.act)
    weights = torch.cat([hl.whole.tokens[0], hl.whole.features[0], hl.whole.errors[0].flatten()])
    # flat[i][j]: block layers[i]'s bypass (j = 0) or head j - 1's part of every edge, columns as `weights`
    flat = [
        [
            torch.cat([hl.part(k, i, h).flatten() for k in ("tokens", "features", "errors")])
            for h in [None, *range(cfg.n_head)]
        ]
        for i in range(len(layers))
    ]
    edges, worst = [], 0.0
    for c in torch.argsort(-weights.abs(), stable=True)[: req.top].tolist():
        w = float(weights[c])
        if w == 0.0:
            break
        blocks = []
        for i, li in enumerate(layers):
            parts = [float(flat[i][j][c]) for j in range(1 + cfg.n_head)]
            worst = max(worst, abs(sum(parts) - w))
            blocks.append(HeadPart(layer=li, bypass=round(parts[0], VALUE), heads=[round(x, VALUE) for x in parts[1:]]))
        edges.append(LoadedEdge(source=names.column(c, N), weight=round(w, VALUE), blocks=blocks))
    return HeadsResponse(
        target=words,
        value=round(float(hl.whole.value[0]), VALUE),
        layers=layers,
        n_head=cfg.n_head,
        edges=edges,
        carried=[
            [round(float(flat[i][j].abs().sum()), VALUE) for j in range(1, 1 + cfg.n_head)] for i in range(len(layers))
        ],
        bypass_carried=[round(float(flat[i][0].abs().sum()), VALUE) for i in range(len(layers))],
        max_error=float(f"{worst:.3g}"),
        method=LOADINGS,
        seconds=round(time.perf_counter() - t0, SECONDS),
    )


def qk(service: ModelService, req: QKRequest) -> QKResponse:
    t0 = time.perf_counter()
    loaded, ids = _prompt(service, req)
    T, cfg = len(ids), service.model.cfg
    try:
        ah.check_scores(service.model)
    except ValueError as e:
        raise InputError("layer", f"the served model: {e}") from None
    if req.layer >= cfg.n_layer:
        raise InputError("layer", f"{req.layer} is out of range; valid values are 0..{cfg.n_layer - 1}")
    if req.head >= cfg.n_head:
        raise InputError("head", f"{req.head} is out of range; valid values are 0..{cfg.n_head - 1}")
    query = T - 1 if req.query is None else req.query
    if query >= T:
        raise InputError("query", f"{query} is out of range; valid values are 0..{T - 1}")
    if req.key > query:
        raise InputError("key", f"{req.key} is after the query {query}: a causal head reads positions up to its own")
    need = _need(service, loaded, req, T, 2 * cfg.d_head)
    with service.run() as m:
        tr = at.trace(m, loaded.codes, ids)
    with memory.hold(need), torch.inference_mode():
        t = ah.qk_terms(service.model, tr, req.layer, req.head, query, req.key)
    return _qk_answer(service, loaded, tr, t, req.top, time.perf_counter() - t0)


def _kind_of(tr: at.Trace, c: int, n_features: int, n_columns: int) -> str:
    T = len(tr.ids)
    if c == n_columns - 1:
        return "constant"
    return "token" if c < T else "feature" if c < T + n_features else "error"


def _qk_answer(
    service: ModelService, loaded: tc_mod.LoadedSet, tr: at.Trace, t: ah.QKTerms, top: int, seconds: float
) -> QKResponse:
    M = t.terms()  # (S + 1, S + 1)
    S1 = M.shape[0]
    n_features = at.block_ends(tr)[t.layer]
    names = Names(service, loaded, tr)

    def ref(c: int) -> SourceRef:
        return names.constant() if c == S1 - 1 else names.column(c, n_features)

    q_side, k_side = M.sum(1), M.sum(0)

    def listed(v: torch.Tensor) -> list[QKSource]:
        order = torch.argsort(-v.abs(), stable=True)[:top].tolist()
        return [QKSource(source=ref(c), value=round(float(v[c]), VALUE)) for c in order]

    flat = torch.argsort(-M.flatten().abs(), stable=True)[:top].tolist()
    pairs = [QKPair(query=ref(i // S1), key=ref(i % S1), value=round(float(M.flatten()[i]), VALUE)) for i in flat]
    kinds_of = [_kind_of(tr, c, n_features, S1) for c in range(S1)]
    order = ["token", "feature", "error", "constant"]
    idx = {k: torch.tensor([c for c in range(S1) if kinds_of[c] == k], dtype=torch.long) for k in order}
    kinds = [
        QKKinds(query_kind=a, key_kind=b, value=round(float(M[idx[a]][:, idx[b]].sum()), VALUE))
        for a in order
        for b in order
        if len(idx[a]) and len(idx[b])
    ]
    return QKResponse(
        layer=t.layer,
        head=t.head,
        query=t.query,
        key=t.key,
        score=round(t.score, VALUE),
        terms_sum=round(float(M.sum()), VALUE),
        attention=round(float(tr.pattern[t.layer, t.head, t.query, t.key]), FINE),
        scale=round(t.scale, FINE),
        n_sources=S1,
        query_sources=listed(q_side),
        key_sources=listed(k_side),
        pairs=pairs,
        kinds=kinds,
        method=QK,
        seconds=round(seconds, SECONDS),
    )
