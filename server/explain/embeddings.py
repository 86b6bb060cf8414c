"""The geometry of the embedding tables: PCA of W_E, nearest neighbours, position similarity."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..digits import COARSE, SIMILARITY, VALUE
from ..errors import InputError
from ..schemas.embeddings import Neighbour, NeighboursResponse, PositionsResponse, ProjectedToken, ProjectionResponse
from ..service import ModelService, per_model
from . import tokens as tok
from .common import rounded, token_text


@per_model(maxsize=1)
def _pca(service: ModelService) -> tuple[torch.Tensor, list[float]]:
    """The token table's rows on its first two principal axes, and the share of variance on each: the top
    eigenvectors of the centred table's d x d Gram matrix W^T W (the same axes as an SVD of the V x d table,
    without its V x d factor: GPT-2's table projects in a fifth of the time), each signed so that its
    largest weight is positive (a sign an SVD leaves to chance)."""
    w = service.model.wte.weight.detach().float()
    w = w - w.mean(0, keepdim=True)  # (V, d)
    ev, vec = torch.linalg.eigh((w.T @ w).double())  # eigenvalues ascending, in float64 for the small solve
    ev = ev.flip(0).clamp_min(0.0)
    axes = vec[:, -2:].flip(-1)  # (d, 2): the two largest
    axes = (axes * torch.sign(axes.gather(0, axes.abs().argmax(0, keepdim=True)))).float()
    coords = w @ axes  # (V, 2)
    var = ev / ev.sum().clamp_min(1e-300)  # (a table of one row has no variance)
    return coords, [round(float(x), VALUE) for x in var[:2]]


def projection(service: ModelService, limit: int) -> ProjectionResponse:
    coords, var = _pca(service)
    n = min(limit, coords.size(0))
    return ProjectionResponse(
        explained_variance_ratio=var,
        tokens=[
            ProjectedToken(
                id=i,
                text=token_text(service, i),
                x=round(float(coords[i, 0]), COARSE),
                y=round(float(coords[i, 1]), COARSE),
            )
            for i in range(n)
        ],
    )


def resolve_token(service: ModelService, token: str | None, token_id: int | None) -> int:
    V = service.model.cfg.vocab_size
    if token_id is not None:
        if not 0 <= token_id < V:
            raise InputError("id", f"{token_id} is outside the vocabulary 0..{V - 1}", where="query")
        return token_id
    if not token:
        raise InputError("token", "give a token's text (token=...) or its id (id=...)", where="query")
    ids = tok.encode(service.encoding, token, field="token", where="query")
    if len(ids) != 1:
        raise InputError(
            "token",
            f"{token!r} is {len(ids)} tokens in this vocabulary, not one; try a shorter piece "
            f"(pieces: {[token_text(service, i) for i in ids][:8]})",
            where="query",
        )
    return ids[0]


def neighbours(service: ModelService, token: str | None, token_id: int | None, k: int) -> NeighboursResponse:
    tid = resolve_token(service, token, token_id)
    w = F.normalize(service.model.wte.weight.detach().float(), dim=-1)
    sims = w @ w[tid]
    sims[tid] = -2.0  # not its own neighbour
    top = torch.topk(sims, min(k, sims.numel() - 1))
    coords, _ = _pca(service)
    return NeighboursResponse(
        id=tid,
        text=token_text(service, tid),
        token=ProjectedToken(
            id=tid,
            text=token_text(service, tid),
            x=round(float(coords[tid, 0]), COARSE),
            y=round(float(coords[tid, 1]), COARSE),
        ),
        neighbours=[
            Neighbour(id=int(i), text=token_text(service, int(i)), cosine=round(float(s), VALUE))
            for s, i in zip(top.values, top.indices)
        ],
    )


def sinusoidal(n_pos: int, d: int) -> torch.Tensor:
    """The original Transformer's encoding: sin on even, cos on odd features, wavelengths 2pi..10000*2pi."""
    pos = torch.arange(n_pos, dtype=torch.float32)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float32)
    angle = pos / torch.pow(10000.0, i / d)
    pe = torch.zeros(n_pos, d)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe


def positions(service: ModelService, limit: int) -> PositionsResponse:
    if service.model.wpe is None:
        kind = (
            "rotates queries and keys by position (RoPE)"
            if service.model.cfg.pos == "rope"
            else "has no position signal"
        )
        raise InputError("model", f"this model has no learned position table: it {kind}", status=409, where="model")
    wp = service.model.wpe.weight.detach().float()
    n = min(limit, wp.size(0))
    step = max(1, math.ceil(wp.size(0) / n))
    idx = list(range(0, wp.size(0), step))
    learned = F.normalize(wp[idx], dim=-1)
    sin = F.normalize(sinusoidal(wp.size(0), wp.size(1))[idx], dim=-1)
    return PositionsResponse(
        positions=idx,
        learned_similarity=rounded(learned @ learned.T, SIMILARITY),
        sinusoidal_similarity=rounded(sin @ sin.T, SIMILARITY),
    )
