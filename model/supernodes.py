"""Supernodes found automatically, and a graph's trust figures (issue #64).

An attribution graph of a 32-token prompt keeps a few hundred features, many of them doing one job at
several positions or blocks (a Roman-name feature on both mentions of Caesar, the same name in block
0 and block 2). Grouping them by hand is what circuit-tracer's users do today; here three signals each
propose groups among the graph's most influential features:

- decoder: the cosine between the features' decoder rows (they write the same direction);
- coactivation: the Jaccard overlap of the tokens they fire on in held-out text (they fire together);
- targets: the cosine between their rows of outgoing edge weights in the graph (they feed the same nodes).

Features whose similarity reaches `threshold` are linked and each connected set of two or more is a
group. Every group is then checked on the real model: each member taken out alone (its transcoder
output at its position zeroed, model/attribution.py's steered_logits) and the whole group at once, the
change in the target measured each time. A signal is scored by how much of the members' effect lies in
groups whose members agree in sign with their group's effect (its `score`: that |effect| over all the
candidates' |effect|); the best-scoring signal's groups are proposed.

Trust: the replacement model's fidelity on the prompt (every MLP replaced by its transcoder, attention
computed as usual: its next-token distribution against the real one); for the graph's most influential
features the real model's change in the target when each is taken out, beside the graph's direct edge
into the target; and the graph's top paths (feature -> feature -> target), each edge checked by taking its
source out of the real model and measuring its target node (a feature's pre-activation, or the target),
which the frozen model says moves by minus the edge's weight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F

from . import clt as clt_mod
from .attribution import Graph, Target, Trace, steered_logits
from .gpt import GPT, Block, hook_name
from .transcoders import Transcoder

SIGNALS = ("decoder", "coactivation", "targets")


def _target_value(logits: torch.Tensor, target: Target) -> float:
    return float(logits[target.up] - (logits[target.down] if target.down is not None else 0.0))


@torch.no_grad()
def ablation_effects(
    model: GPT, codes: Sequence[Transcoder], tr: Trace, target: Target, groups: Sequence[Sequence[int]]
) -> list[float]:
    """For each group of the trace's active features, the real model's target (a logit or logit difference at
    the last position) with the group taken out, minus the target as it is."""
    base = _target_value(tr.logits, target)
    out = []
    for g in groups:
        changes = [(int(tr.layer[i]), int(tr.position[i]), int(tr.feature[i]), 0.0) for i in g]
        out.append(_target_value(steered_logits(model, codes, tr.ids, changes), target) - base)
    return out


def decoder_similarity(tr: Trace, feats: torch.Tensor) -> torch.Tensor:
    d = F.normalize(tr.decoder[feats].double(), dim=-1)
    return d @ d.T


def target_similarity(rows: torch.Tensor) -> torch.Tensor:
    """rows (n, m): each feature's outgoing edge weights into the graph's nodes."""
    r = F.normalize(rows.double(), dim=-1)
    return r @ r.T


@torch.no_grad()
def coactivation_similarity(
    model: GPT, codes: Sequence[Transcoder], tr: Trace, feats: torch.Tensor, windows: torch.Tensor
) -> torch.Tensor:
    """Jaccard overlap of the held-out tokens (windows (S, T')) each feature (its block and index, any
    position) fires on."""
    seen: dict[int, torch.Tensor] = {}
    with ExitStack() as stack:
        for li, block in enumerate(model.blocks):
            h = cast(Block, block).ln2.register_forward_hook(lambda _m, _i, out, li=li: seen.__setitem__(li, out))
            stack.callback(h.remove)
        model(windows)
    fired = torch.zeros(len(feats), windows.numel(), dtype=torch.bool)
    for j, i in enumerate(feats.tolist()):
        li, f = int(tr.layer[i]), int(tr.feature[i])
        fired[j] = codes[li].encode(seen[li].reshape(-1, seen[li].shape[-1]))[:, f] > 0
    a = fired.double()
    both = a @ a.T
    either = a.sum(1)[:, None] + a.sum(1)[None, :] - both
    return torch.where(either > 0, both / either.clamp_min(1), torch.zeros_like(both))


def linked_groups(sim: torch.Tensor, threshold: float) -> list[list[int]]:
    """The connected sets (two or more members) of the graph linking i and j where sim[i, j] >= threshold,
    each sorted, largest first."""
    n = sim.shape[0]
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pairs = torch.nonzero(torch.triu(sim >= threshold, diagonal=1)).tolist()
    for i, j in pairs:
        parent[root(i)] = root(j)
    sets: dict[int, list[int]] = {}
    for i in range(n):
        sets.setdefault(root(i), []).append(i)
    return sorted((s for s in sets.values() if len(s) > 1), key=lambda s: (-len(s), s))


@dataclass
class Proposal:
    signal: str
    groups: list[list[int]]  # indices into the candidates
    effects: list[float]  # each group's ablation effect on the target
    score: float  # the share of the candidates' |effect| in groups whose members agree with the group's sign
    agreement: float  # of the grouped members' |effect|, the share that agrees in sign with its group's
    coverage: float  # the share of the candidates' |effect| that is in some group


def score(groups: list[list[int]], effects: list[float], single: torch.Tensor) -> tuple[float, float, float]:
    """(score, agreement, coverage) of groups with ablation `effects`, the candidates' own effects `single`."""
    total = float(single.abs().sum()) or 1.0
    grouped = agreeing = 0.0
    for g, e in zip(groups, effects):
        for i in g:
            grouped += abs(float(single[i]))
            if float(single[i]) * e > 0:
                agreeing += abs(float(single[i]))
    return agreeing / total, agreeing / grouped if grouped else 0.0, grouped / total


def propose(
    model: GPT,
    codes: Sequence[Transcoder],
    tr: Trace,
    target: Target,
    feats: torch.Tensor,
    similarities: dict[str, torch.Tensor],
    threshold: dict[str, float],
    single: torch.Tensor,
    cancel: Callable[[], bool] | None = None,
) -> list[Proposal]:
    """Each signal's groups of the candidate features `feats` (indices into the trace), checked on the real model."""
    out = []
    for signal, sim in similarities.items():
        if cancel is not None and cancel():
            break
        groups = linked_groups(sim, threshold[signal])
        effects = ablation_effects(model, codes, tr, target, [[int(feats[i]) for i in g] for g in groups])
        out.append(Proposal(signal, groups, effects, *score(groups, effects, single)))
    return out


@torch.no_grad()
def replaced_logits(model: GPT, codes: Sequence[Transcoder], ids: Sequence[int]) -> torch.Tensor:
    """The last position's logits with every MLP's output replaced by its transcoder's (reading that MLP's
    input in this very run; attention and norms computed as usual)."""
    seen: dict[int, torch.Tensor] = {}
    if clt_mod.is_clt(codes):  # block li's write sums the features of blocks 0..li, read in this run
        write = clt_mod.write_fn(cast(clt_mod.CLT, codes))
    else:
        write = lambda li, seen: codes[li](seen[li])[0]  # noqa: E731
    hooks: list[tuple[str, Callable[..., torch.Tensor | None]]] = []
    for li in range(model.cfg.n_layer):
        hooks.append((hook_name("ln2.hook_normalized", li), lambda t, _n, li=li: seen.__setitem__(li, t)))
        hooks.append((hook_name("hook_mlp_out", li), lambda out, _n, li=li: write(li, seen).to(out.dtype)))
    with model.hooks(hooks):
        logits, _ = model(torch.tensor([list(ids)], device=model.wte.weight.device), last_only=True)
    return logits[0, -1]


def fidelity(model: GPT, codes: Sequence[Transcoder], tr: Trace, target: Target) -> dict[str, float | int]:
    """The replacement model (no error nodes) against the real one on the prompt's next token."""
    real, rep = tr.logits.double(), replaced_logits(model, codes, tr.ids).double()
    p, logq = torch.softmax(real, -1), torch.log_softmax(rep, -1)
    kl = float((p * (torch.log_softmax(real, -1) - logq)).sum())
    return {
        "kl": max(0.0, kl),
        "top1_real": int(real.argmax()),
        "top1_replaced": int(rep.argmax()),
        "target_real": _target_value(real, target),
        "target_replaced": _target_value(rep, target),
    }


def rank_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Spearman's rank correlation (ties broken by order)."""
    if len(a) < 2:
        return 0.0
    ra = torch.argsort(torch.argsort(a)).double()
    rb = torch.argsort(torch.argsort(b)).double()
    ra, rb = ra - ra.mean(), rb - rb.mean()
    den = float(ra.norm() * rb.norm())
    return float(ra @ rb) / den if den else 0.0


# ---- the graph's top paths, checked on the real model ---------------------------------------------------


def top_paths(graph: Graph, tr: Trace, k: int) -> list[tuple[int, int, float]]:
    """The k two-edge paths feature f -> feature g -> target of largest influence, as (f, g, influence): the
    product of each edge's share of its target's inputs (|weight| over the target's |inputs| added up)."""
    m = graph.matrix(tr).abs()
    shares = m / m.sum(1, keepdim=True).clamp_min(1e-30)  # (R, T + N + L T)
    T, out = len(tr.ids), []
    for r, g in enumerate(graph.rows.tolist(), start=1):  # g's inputs were computed: row r
        into_target = float(shares[0, T + g])
        if into_target == 0.0:
            continue
        feats = shares[r, T : T + len(tr.act)]
        best = torch.argsort(-feats, stable=True)[:k]
        out += [(int(f), g, into_target * float(feats[f])) for f in best if float(feats[f]) > 0]
    return sorted(out, key=lambda p: -p[2])[:k]


@torch.no_grad()
def feature_value(
    model: GPT, codes: Sequence[Transcoder], tr: Trace, changes: Sequence[tuple[int, int, int, float]], i: int
) -> float:
    """The trace's active feature i's pre-activation (what a graph's row explains: its MLP input read by its
    encoder) in the real model with `changes` steered (model/attribution.py's steered_logits)."""
    layer, pos, feat = int(tr.layer[i]), int(tr.position[i]), int(tr.feature[i])
    name = hook_name("ln2.hook_normalized", layer)
    with model.capture([name]) as cache:
        steered_logits(model, codes, tr.ids, changes)
    c = codes[layer]
    return float(cache[name][0, pos] @ c.W_enc[:, feat] + c.b_enc[feat])


def check_path(
    model: GPT, codes: Sequence[Transcoder], tr: Trace, graph: Graph, target: Target, f: int, g: int
) -> list[tuple[float, float]]:
    """Each edge of the path f -> g -> target as (its weight, the real model's change in its target node when
    its source is taken out): taken out of the frozen model, the source would change it by -weight."""
    row = 1 + graph.rows.tolist().index(g)
    w_fg, w_gt = float(graph.edges.features[row, f]), float(graph.edges.features[0, g])
    take = [(int(tr.layer[f]), int(tr.position[f]), int(tr.feature[f]), 0.0)]
    base_g = feature_value(model, codes, tr, [], g)
    real_fg = feature_value(model, codes, tr, take, g) - base_g
    (real_gt,) = ablation_effects(model, codes, tr, target, [[g]])
    return [(w_fg, real_fg), (w_gt, real_gt)]
