"""Supernodes found automatically, and one trust panel per graph (issue #64), as the API shows them:
POST /api/v1/attribution/supernodes and POST /api/v1/attribution/trust take the graph's own request, build
the same graph, and check it on the real model (model/supernodes.py does the arithmetic)."""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass

import torch

from gptscope.model import attribution as at
from gptscope.model import clt as clt_mod
from gptscope.model import corpus as corpus_mod
from gptscope.model import supernodes as sn

from .. import memory
from ..digits import FINE, SECONDS, VALUE
from ..errors import InputError
from ..schemas.attribution import (
    AttributionRequest,
    CheckedEdge,
    CheckedFeature,
    CheckedPath,
    CompareSetsRequest,
    CompareSetsResponse,
    GraphCell,
    OnlyIn,
    SetOnPrompt,
    SignalScore,
    Supernode,
    SupernodeMember,
    SupernodesRequest,
    SupernodesResponse,
    TrustResponse,
)
from ..service import ModelService
from ..transcoders import TRANSCODERS as store
from . import attribution as explain_attribution
from .attribution_heads import Names
from .common import token_text

WINDOWS, WINDOW_TOKENS = 16, 64  # held-out text the coactivation signal reads
PATHS = 5  # the top paths whose edges the trust figures check
SUPERNODES = (
    "The graph's most influential features are linked where a signal's similarity reaches its threshold, and "
    "each connected set is a group; every group is checked on the real model, its members taken out one at a "
    "time and all at once. A signal's score is the share of the candidates' effect (|change in the target|) "
    "that lies in groups whose members agree in sign with their group's; auto proposes the best signal's groups."
)
TRUST = (
    "Fidelity: the model with every MLP replaced by its transcoder and no error nodes, against the real model, "
    "on the prompt's next token. Checked features: each of the graph's most influential features taken out of "
    "the real model (its transcoder output at its position zeroed), against its direct edge into the target. "
    "Paths: the graph's strongest feature -> feature -> target paths, each edge's source taken out of the real model "
    "and its target node measured (the frozen model says it moves by minus the edge's weight)."
)


def _agreement(edges: list[tuple[float, float]]) -> float:
    """The share of (weight, real change) pairs where the real change has the sign of -weight."""
    return sum(1 for w, r in edges if -w * r > 0) / len(edges) if edges else 0.0


@dataclass
class Built:
    tr: at.Trace
    target: at.Target
    graph: at.Graph
    pruned: at.Pruned
    words: str
    names: Names


def _build(service: ModelService, req: AttributionRequest) -> tuple[explain_attribution.Plan, Built]:
    """The graph of POST /attribution for the same request (its checks, its memory held while it is built)."""
    p = explain_attribution.plan(service, req)
    with memory.hold(p.need):
        g = explain_attribution.graph_of(service, p)
    words = explain_attribution.target_words(service, g.token, req.wrong)
    return p, Built(g.tr, g.target, g.graph, g.pruned, words, Names(service, p.loaded, g.tr))


def _top_features(b: Built, n: int) -> torch.Tensor:
    kept = b.pruned.features
    order = torch.argsort(-b.pruned.influence[kept], stable=True)
    return kept[order[:n]]


def _windows(service: ModelService) -> torch.Tensor | None:
    """The first held-out windows of the served model's own built-in corpus, if it has one."""
    name = (service.meta.corpus or {}).get("name")
    if name not in corpus_mod.BUILTIN:
        return None
    text = corpus_mod.load(name).split()[1]
    ids = service.encoding.encode_ordinary(text[: WINDOWS * WINDOW_TOKENS * 8])
    if len(ids) < WINDOWS * WINDOW_TOKENS:
        return None
    return torch.tensor(ids[: WINDOWS * WINDOW_TOKENS]).view(WINDOWS, WINDOW_TOKENS)


def _name(labels: list[str]) -> str:
    """The first top token most members' labels share ("L0 #638 ' Caesar' · ..." -> ' Caesar')."""
    firsts = [m.group(1) for lab in labels if (m := re.search(r"('(?:[^'\\]|\\.)*'|\"[^\"]*\")", lab))]
    return Counter(firsts).most_common(1)[0][0] if firsts else "features"


def supernodes(service: ModelService, req: SupernodesRequest) -> SupernodesResponse:
    t0 = time.perf_counter()
    p, b = _build(service, req)
    feats = _top_features(b, req.candidates)
    T = len(b.tr.ids)
    thresholds = {
        "decoder": req.decoder_threshold,
        "coactivation": req.coactivation_threshold,
        "targets": req.targets_threshold,
    }
    wanted = sn.SIGNALS if req.signal == "auto" else (req.signal,)
    windows = _windows(service) if "coactivation" in wanted else None
    sims: dict[str, torch.Tensor] = {}
    scores: list[SignalScore] = []
    for signal in wanted:
        if signal == "decoder":
            sims[signal] = sn.decoder_similarity(b.tr, feats)
        elif signal == "targets":
            sims[signal] = sn.target_similarity(b.graph.matrix(b.tr)[:, T + feats].T)
        elif windows is not None:
            with service.run() as m:
                sims[signal] = sn.coactivation_similarity(m, p.loaded.codes, b.tr, feats, windows)
        else:
            scores.append(
                SignalScore(
                    signal=signal,
                    available=False,
                    reason="the served model has no built-in corpus to read held-out text from",
                    threshold=thresholds[signal],
                    groups=0,
                    score=0.0,
                    agreement=0.0,
                    coverage=0.0,
                )
            )
    with service.run() as m:
        single = torch.tensor(sn.ablation_effects(m, p.loaded.codes, b.tr, b.target, [[int(f)] for f in feats]))
        proposals = sn.propose(m, p.loaded.codes, b.tr, b.target, feats, sims, thresholds, single)
    for pr in proposals:
        scores.append(
            SignalScore(
                signal=pr.signal,
                available=True,
                threshold=thresholds[pr.signal],
                groups=len(pr.groups),
                score=round(pr.score, FINE),
                agreement=round(pr.agreement, FINE),
                coverage=round(pr.coverage, FINE),
            )
        )
    best = max(proposals, key=lambda pr: pr.score) if proposals else None
    groups = [] if best is None else [_supernode(b, feats, g, e, single) for g, e in zip(best.groups, best.effects)]
    return SupernodesResponse(
        target=b.words,
        target_value=round(
            float(b.tr.logits[b.target.up] - (b.tr.logits[b.target.down] if b.target.down is not None else 0.0)), VALUE
        ),
        signal=best.signal if best else req.signal,
        signals=scores,
        groups=groups,
        candidates=len(feats),
        method=SUPERNODES,
        seconds=round(time.perf_counter() - t0, SECONDS),
    )


def _supernode(b: Built, feats: torch.Tensor, group: list[int], effect: float, single: torch.Tensor) -> Supernode:
    members = [
        SupernodeMember(
            source=b.names.feature(int(feats[i])),
            influence=round(float(b.pruned.influence[int(feats[i])]), FINE),
            effect=round(float(single[i]), VALUE),
        )
        for i in group
    ]
    return Supernode(
        name=_name([m.source.label for m in members]),
        members=members,
        effect=round(effect, VALUE),
        members_effect=round(float(single[group].sum()), VALUE),
    )


def trust(service: ModelService, req: AttributionRequest, checked: int = 20) -> TrustResponse:
    t0 = time.perf_counter()
    p, b = _build(service, req)
    feats = _top_features(b, checked)
    T = len(b.tr.ids)
    with service.run() as m:
        fid = sn.fidelity(m, p.loaded.codes, b.tr, b.target)
        effects = torch.tensor(sn.ablation_effects(m, p.loaded.codes, b.tr, b.target, [[int(f)] for f in feats]))
        paths = [
            (f, g, infl, sn.check_path(m, p.loaded.codes, b.tr, b.graph, b.target, f, g))
            for f, g, infl in sn.top_paths(b.graph, b.tr, PATHS)
        ]
    edges = b.graph.edges.features[0, feats]  # row 0: the target's incoming edges
    rows = [
        CheckedFeature(
            source=b.names.feature(int(f)),
            influence=round(float(b.pruned.influence[int(f)]), FINE),
            edge=round(float(edges[j]), VALUE),
            effect=round(float(effects[j]), VALUE),
        )
        for j, f in enumerate(feats.tolist())
    ]
    # taking a feature out removes its edge: a positive edge predicts a negative effect
    agree = float(((-edges * effects) > 0).double().mean()) if len(feats) else 0.0
    return TrustResponse(
        target=b.words,
        kl=round(float(fid["kl"]), FINE),
        top1_real=token_text(service, int(fid["top1_real"])),
        top1_replaced=token_text(service, int(fid["top1_replaced"])),
        target_real=round(float(fid["target_real"]), VALUE),
        target_replaced=round(float(fid["target_replaced"]), VALUE),
        error_share=round(float(b.pruned.error_influence.sum()), FINE),
        token_share=round(float(b.pruned.token_influence[:T].sum()), FINE),
        checked=rows,
        rank_correlation=round(sn.rank_correlation(-edges, effects), FINE),
        sign_agreement=round(agree, FINE),
        paths=[
            CheckedPath(
                source=b.names.feature(f),
                via=b.names.feature(g),
                influence=round(infl, FINE),
                edges=[CheckedEdge(weight=round(w, VALUE), real=round(r, VALUE)) for w, r in checks],
            )
            for f, g, infl, checks in paths
        ],
        path_agreement=round(_agreement([e for *_, checks in paths for e in checks]), FINE),
        method=TRUST,
        seconds=round(time.perf_counter() - t0, SECONDS),
    )


# ---- two transcoder sets on one prompt ------------------------------------------------------------------

COMPARE = (
    "Each set's graph of the same prompt and target, built as POST /attribution builds it; its replacement model "
    "(no error nodes) against the real one on the next token; and where the graphs disagree: the (block, position) "
    "cells of each graph's kept features, their overlap, and the influence each graph puts on cells the other lacks."
)


def _cells(b: Built) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for f in b.pruned.features.tolist():
        key = (int(b.tr.layer[f]), int(b.tr.position[f]))
        out[key] = out.get(key, 0.0) + float(b.pruned.influence[f])
    return out


def compare_sets(service: ModelService, req: CompareSetsRequest) -> CompareSetsResponse:
    t0 = time.perf_counter()
    first = req.transcoders or next(iter(name for name, _ in store.listing(service)), None)
    if first is None:
        raise InputError("transcoders", "the served model has no transcoder set; train one (gptscope transcoders)")
    if req.other == first:
        raise InputError("other", f"{first!r} is the first set too: name another set to compare with")
    store.get(service, req.other, field="other")  # its 422 names `other`
    built, rows = [], []
    for name in (first, req.other):
        t = time.perf_counter()
        p, b = _build(service, req.model_copy(update={"transcoders": name}))
        with service.run() as m:
            fid = sn.fidelity(m, p.loaded.codes, b.tr, b.target)
        built.append(b)
        q = p.loaded.meta.get("quality") or {}
        rows.append(
            SetOnPrompt(
                name=name,
                kind="clt" if clt_mod.is_clt(p.loaded.codes) else "per_layer",
                features_per_block=p.loaded.codes[0].cfg.d_sae,
                loss_recovered=None if q.get("loss_recovered") is None else round(float(q["loss_recovered"]), FINE),
                active_features=len(b.tr.act),
                kept_features=len(b.pruned.features),
                error_share=round(float(b.pruned.error_influence.sum()), FINE),
                kl=round(float(fid["kl"]), FINE),
                top1_replaced=token_text(service, int(fid["top1_replaced"])),
                target_replaced=round(float(fid["target_replaced"]), VALUE),
                seconds=round(time.perf_counter() - t, SECONDS),
            )
        )
    cells = [_cells(b) for b in built]
    both, either = set(cells[0]) & set(cells[1]), set(cells[0]) | set(cells[1])
    only = []
    for i, (row, mine) in enumerate(zip(rows, cells)):
        theirs = cells[1 - i]
        missing = sorted(((c, v) for c, v in mine.items() if c not in theirs), key=lambda cv: -cv[1])
        total = sum(mine.values()) or 1.0
        only.append(
            OnlyIn(
                name=row.name,
                share=round(sum(v for _, v in missing) / total, FINE),
                cells=[
                    GraphCell(
                        layer=li,
                        position=pos,
                        token=token_text(service, built[i].tr.ids[pos]),
                        influence=round(v, FINE),
                    )
                    for (li, pos), v in missing[:10]
                ],
            )
        )
    b = built[0]
    real = b.tr.logits
    return CompareSetsResponse(
        target=b.words,
        target_real=round(
            float(real[b.target.up] - (real[b.target.down] if b.target.down is not None else 0.0)), VALUE
        ),
        top1_real=token_text(service, int(real.argmax())),
        sets=rows,
        jaccard=round(len(both) / max(1, len(either)), FINE),
        only=only,
        method=COMPARE,
        seconds=round(time.perf_counter() - t0, SECONDS),
    )
