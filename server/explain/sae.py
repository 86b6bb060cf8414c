"""Sparse autoencoders as the API shows them: each SAE's figures, its feature list, one feature's
top passages, histogram and logit effects, the forward stage's active features, and job status.
Every number comes from model/sae.py's functions or from the statistics saved with the SAE."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gptscope.model import sae as sae_mod
from gptscope.model.gpt import GPT
from gptscope.model.sae import LoadedSAE

from ..artefacts import Training
from ..digits import COARSE, FINE, VALUE
from ..errors import InputError
from ..jobs import Job, answer_fields
from ..saes import SAES as store
from ..schemas.sae import (
    ActiveFeature,
    FeatureDetail,
    FeatureList,
    FeatureSummary,
    LogitEffect,
    Passage,
    PassageToken,
    Quality,
    SaeFeaturesBlock,
    SaeInfo,
    SaeJob,
    SaeList,
    SortKey,
)
from ..service import ModelService
from .common import token_text
from .tokens import token_pieces

LABEL_TOKENS = 3  # tokens named in a feature's summary
EFFECTS = 10  # promoted / suppressed tokens in a feature's detail
BEFORE, AFTER = 16, 4  # a passage's tokens before and after its peak
MAX_ACTIVE = 20  # features listed at one position


def info(loaded: LoadedSAE) -> SaeInfo:
    m, c = loaded.meta, loaded.sae.cfg
    return SaeInfo(
        name=loaded.name,
        hook_name=c.hook_name,
        layer=c.layer,
        d_in=c.d_in,
        d_sae=c.d_sae,
        activation=c.activation,
        k=c.k if c.activation == "topk" else 0,
        corpus=str((m.get("corpus") or {}).get("name", "?")),
        steps=int(m.get("steps", 0)),
        tokens=int(m.get("tokens", 0)),
        train_seconds=float(m.get("train_seconds", 0)),
        eval_seconds=float(m.get("eval_seconds", 0)),
        command=str(m.get("command", "")),
        created=str(m.get("created", "")),
        quality=Quality(**m["quality"]),
        history=list(m.get("history", [])),
    )


def listing(service: ModelService) -> SaeList:
    return SaeList(saes=store.views(service, info), write_folder=str(store.folders(service)[0]))


def job_status(job: Job[Training]) -> SaeJob:
    state, last = job.state, job.state.last
    return SaeJob(
        **answer_fields(job),
        phase="evaluating" if state.phase == "evaluating" else "training",
        sae=state.name,
        layer=state.config.layer,
        progress=float(last.get("progress", 0.0)),
        step=job.progress.done,
        tokens=int(last.get("tokens", 0)),
        fvu=last.get("fvu"),
        l0=last.get("l0"),
        dead=last.get("dead"),
        history=state.history,
        quality=Quality(**state.meta["quality"]) if state.meta else None,
    )


# ---- what each feature is called: its top tokens and the tokens it promotes ----------------------


def derived(service: ModelService, loaded: LoadedSAE) -> dict:
    """Per feature, computed once per SAE: the distinct tokens at its top activations, and its decoder
    direction's logit effects (top and bottom EFFECTS token ids and values)."""
    if "labels" not in loaded.derived:
        flat = loaded.stats["eval_ids"].reshape(-1).long()
        top = loaded.stats["top_index"].long()
        labels = []
        for row in top.tolist():
            seen: list[str] = []
            for i in row:
                if i >= 0 and (t := token_text(service, int(flat[i]))) not in seen:
                    seen.append(t)
            labels.append(seen)
        # only weights are read (no forward pass, no hooks), so not under service.run()'s lock: the
        # forward trace's sae_features part gets here while holding it
        with torch.inference_mode():
            effects = sae_mod.unembed_directions(service.model, loaded.sae.W_dec)  # (F, V)
        up, down = effects.topk(EFFECTS, dim=-1), (-effects).topk(EFFECTS, dim=-1)
        loaded.derived.update(labels=labels, up=up, down=down)
    return loaded.derived


def summary(service: ModelService, loaded: LoadedSAE, f: int) -> FeatureSummary:
    d, s = derived(service, loaded), loaded.stats
    return FeatureSummary(
        index=f,
        density=round(float(s["density"][f]), FINE),
        mean_act=round(float(s["mean_act"][f]), VALUE),
        max_act=round(float(s["max_act"][f]), VALUE),
        top_tokens=d["labels"][f][:LABEL_TOKENS],
        promotes=[token_text(service, int(i)) for i in d["up"].indices[f, :LABEL_TOKENS]],
    )


def _matches(service: ModelService, loaded: LoadedSAE, q: str) -> list[int]:
    """Features whose number is q, or whose top tokens or promoted tokens contain q (any case)."""
    d = derived(service, loaded)
    n = loaded.sae.cfg.d_sae
    if not q:
        return list(range(n))
    ql = q.lower()
    promoted = d["up"].indices.tolist()
    hits = []
    for f in range(n):
        texts = [*d["labels"][f], *(token_text(service, i) for i in promoted[f][:5])]
        if q.strip() == str(f) or any(ql in t.lower() for t in texts):
            hits.append(f)
    return hits


def feature_list(
    service: ModelService, name: str, q: str, sort: SortKey, descending: bool, offset: int, limit: int
) -> FeatureList:
    loaded = store.get_by_path(service, name)
    hits = _matches(service, loaded, q)
    if sort != "index":
        key = loaded.stats[sort]
        hits.sort(key=lambda f: float(key[f]), reverse=descending)
    elif descending:
        hits.reverse()
    page = hits[offset : offset + limit]
    return FeatureList(
        sae=name,
        d_sae=loaded.sae.cfg.d_sae,
        total=len(hits),
        offset=offset,
        features=[summary(service, loaded, f) for f in page],
    )


# ---- one feature -------------------------------------------------------------------------------


Inputs = Callable[[GPT, torch.Tensor, int], torch.Tensor]  # (model, ids (S, T), layer) -> what it reads (S, T, d)


def _passages(service: ModelService, loaded: LoadedSAE, f: int, inputs: Inputs = sae_mod.residuals) -> list[Passage]:
    """The feature's top held-out activations, each with its window's tokens and the feature's
    activation on every one of them (recomputed: the whole sequence runs through the model and
    `inputs` gives what the SAE, or transcoder, reads)."""
    ids = loaded.stats["eval_ids"].long()  # (S, T)
    T = ids.size(1)
    spots = [(int(i) // T, int(i) % T) for i in loaded.stats["top_index"][f].tolist() if i >= 0]
    if not spots:
        return []
    seqs = sorted({s for s, _ in spots})
    with service.run() as m:
        x = inputs(m, ids[seqs], loaded.sae.cfg.layer)  # (S', T, d)
        acts = loaded.sae.encode(x)[..., f]  # (S', T)
    row = {s: i for i, s in enumerate(seqs)}
    out = []
    for s, pos in spots:
        lo, hi = max(0, pos - BEFORE), min(T, pos + AFTER + 1)
        a = acts[row[s]]
        out.append(
            Passage(
                sequence=s,
                position=pos,
                activation=round(float(a[pos]), VALUE),
                tokens=[
                    PassageToken(
                        text=token_text(service, int(ids[s, t])),
                        id=int(ids[s, t]),
                        activation=round(float(a[t]), VALUE),
                    )
                    for t in range(lo, hi)
                ],
                peak=pos - lo,
            )
        )
    return out


def _effects(service: ModelService, top: torch.return_types.topk, f: int, sign: float) -> list[LogitEffect]:
    return [
        LogitEffect(id=int(i), text=token_text(service, int(i)), effect=round(sign * float(v), COARSE))
        for v, i in zip(top.values[f], top.indices[f])
    ]


def feature_detail(service: ModelService, name: str, feature: int) -> FeatureDetail:
    return detail(service, store.get_by_path(service, name), feature, name)


def detail(
    service: ModelService, loaded: LoadedSAE, feature: int, name: str, inputs: Inputs = sae_mod.residuals
) -> FeatureDetail:
    """One feature's page: its summary, top held-out passages, histogram and logit effects."""
    n = loaded.sae.cfg.d_sae
    if not 0 <= feature < n:
        raise InputError("feature", f"{feature} is out of range; valid values are 0..{n - 1}", where="path")
    f = feature
    s, d = loaded.stats, derived(service, loaded)
    counts = [int(c) for c in s["hist"][f].tolist()]
    measured = int(s["eval_ids"].numel())
    edges = torch.linspace(0, float(s["max_act"][f]), sae_mod.HIST_BINS + 1)
    return FeatureDetail(
        **summary(service, loaded, f).model_dump(),
        sae=name,
        hook_name=loaded.sae.cfg.hook_name,
        tokens_measured=measured,
        passages=_passages(service, loaded, f, inputs),
        histogram_edges=[round(float(e), VALUE) for e in edges],
        histogram_counts=counts,
        zeros=measured - sum(counts),
        promoted=_effects(service, d["up"], f, 1.0),
        suppressed=_effects(service, d["down"], f, -1.0),
    )


# ---- the forward stage and steering --------------------------------------------------------------


def active_features(
    service: ModelService, loaded: LoadedSAE, x: torch.Tensor, ids: list[int], position: int
) -> SaeFeaturesBlock:
    """x (T, d): the stream at the SAE's layer for the prompt; what fires at `position`."""
    with torch.no_grad():
        x_hat, f = loaded.sae(x)  # (T, d), (T, F)
    row = f[position]
    on = row.nonzero().flatten()
    order = on[torch.argsort(row[on], descending=True)][:MAX_ACTIVE]
    d, s = derived(service, loaded), loaded.stats
    piece = token_pieces(service.encoding, ids)[position]
    return SaeFeaturesBlock(
        sae=loaded.name,
        hook_name=loaded.sae.cfg.hook_name,
        layer=loaded.sae.cfg.layer,
        position=position,
        token=piece,
        l0=len(on),
        stream_norm=round(float(x[position].norm()), VALUE),
        error_norm=round(float((x[position] - x_hat[position]).norm()), VALUE),
        features=[
            ActiveFeature(
                index=int(j),
                activation=round(float(row[j]), VALUE),
                density=round(float(s["density"][j]), FINE),
                max_act=round(float(s["max_act"][j]), VALUE),
                top_tokens=d["labels"][int(j)][:LABEL_TOKENS],
                promotes=[token_text(service, int(i)) for i in d["up"].indices[int(j), :LABEL_TOKENS]],
            )
            for j in order
        ],
        per_position_l0=[int(n) for n in (f > 0).sum(-1).tolist()],
    )


def steering_sae(service: ModelService, name: str | None, feature: int) -> LoadedSAE:
    """The SAE and feature a generation step steers with, checked (422s name steer.sae / steer.feature)."""
    loaded = store.get(service, name, field="steer.sae")
    if not 0 <= feature < loaded.sae.cfg.d_sae:
        raise InputError("steer.feature", f"{feature} is out of range; valid values are 0..{loaded.sae.cfg.d_sae - 1}")
    return loaded
