"""A run's timeline: where its snapshots fall, how much it learns from context at each (the
in-context-learning score of Olsson et al. 2022, "In-context Learning and Induction Heads"), and the
step where a score jumps (a phase change)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# The app's default snapshot schedule, as fractions of the run: the untrained model, then log-spaced
# early (each about twice the one before, where the loss and the heads change fastest), then wider
# apart to the end. The steps are round(fraction x steps), so a short run may merge the first few.
TIMELINE_SNAPSHOTS: tuple[float, ...] = (0.0, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15, 0.3, 0.5, 0.75, 1.0)

ICL_BAND_TOKENS = 256  # tokens each band of the score averages over, about (so a short context takes more windows)
ICL_MAX_WINDOWS = 32


def snapshot_steps(fractions: Sequence[float], total: int) -> list[int]:
    """The distinct steps a run of `total` updates snapshots at (the trainer's rounding)."""
    return sorted({min(total, round(f * total)) for f in fractions})


@dataclass
class IclScore:
    early_loss: float  # mean loss at the second tenth of the positions
    late_loss: float  # mean loss at the last tenth
    score: float  # late minus early: negative when the model uses what came before
    loss: float  # mean loss over every position of the windows
    windows: int
    early: tuple[int, int]  # positions [start, stop) of the early band
    late: tuple[int, int]


def icl_bands(n: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(early, late) position bands of an n-token window: the second tenth and the last tenth (the
    paper's token 50 and token 500 of 512, scaled). The first tenth is left out: with almost nothing
    before it, a position there is hard for any model."""
    tenth = max(1, n // 10)
    return (tenth, 2 * tenth), (n - tenth, n)


def icl_score(model: torch.nn.Module, windows: torch.Tensor) -> IclScore:
    """The in-context-learning score of `model` on windows (B, T + 1) of token ids: the mean per-token
    loss of predicting the tokens at the last tenth of the T positions minus at the second tenth.
    Natural text gets easier to predict the more of it a model has read, if it reads it: a model that
    ignores its context scores about 0, one that uses it below 0."""
    if windows.dim() != 2 or windows.shape[1] < 3:
        raise ValueError("windows must be (B, T + 1) token ids with T >= 2")
    return icl_from_losses(position_losses(model, windows))


def icl_from_losses(losses: torch.Tensor) -> IclScore:
    """The score from position_losses' (B, T) losses."""
    per_pos = losses.mean(0)  # (T,): the mean loss at each position
    (e0, e1), (l0, l1) = icl_bands(len(per_pos))
    early, late = float(per_pos[e0:e1].mean()), float(per_pos[l0:l1].mean())
    return IclScore(
        early_loss=round(early, 4),
        late_loss=round(late, 4),
        score=round(late - early, 4),
        loss=round(float(per_pos.mean()), 4),
        windows=int(losses.shape[0]),
        early=(e0, e1),
        late=(l0, l1),
    )


def icl_window_count(n_ctx: int) -> int:
    """Windows enough for each band (a tenth of n_ctx positions) to average about ICL_BAND_TOKENS
    tokens, 4 to ICL_MAX_WINDOWS: the cost stays about ICL_BAND_TOKENS x 10 tokens of forward passes."""
    return max(4, min(ICL_MAX_WINDOWS, math.ceil(ICL_BAND_TOKENS / max(1, n_ctx // 10))))


def held_out_windows(ids: Sequence[int] | torch.Tensor, n_ctx: int, count: int | None = None) -> torch.Tensor:
    """Up to `count` windows (default icl_window_count) of n_ctx + 1 tokens spread evenly over `ids`
    (apart when there is room), as a (B, n_ctx + 1) tensor; (0, n_ctx + 1) when ids are too short for one."""
    count = icl_window_count(n_ctx) if count is None else count
    ids = torch.as_tensor(ids, dtype=torch.long).flatten()
    w = n_ctx + 1
    room = len(ids) - w
    if room < 0 or count < 1:
        return torch.zeros((0, w), dtype=torch.long)
    starts = sorted({round(i * room / max(1, count - 1)) for i in range(count)}) if count > 1 else [0]
    return torch.stack([ids[s : s + w] for s in starts])


@dataclass
class PhaseChange:
    step: int  # the snapshot the value has jumped by
    from_step: int  # the snapshot before it
    before: float  # the value at from_step
    after: float  # the value at step
    rise: float  # after - before
    share: float  # rise / the series' range (max - min): 1 when the whole change happens in one jump
    clear: bool  # rise >= the min_rise asked for: a jump, not a wobble


def phase_change(series: Sequence[tuple[int, float]], min_rise: float = 0.0) -> PhaseChange | None:
    """The largest rise between consecutive points of a series of (step, value), sorted by step: where
    the value jumps most; `clear` when it rises by min_rise at least. None when fewer than two points
    or no point rises (a flat or falling series)."""
    pts = sorted((int(s), float(v)) for s, v in series if math.isfinite(v))
    if len(pts) < 2:
        return None
    values = [v for _, v in pts]
    span = max(values) - min(values)
    best = max(range(1, len(pts)), key=lambda i: pts[i][1] - pts[i - 1][1])
    rise = pts[best][1] - pts[best - 1][1]
    if rise <= 0 or span <= 0:
        return None
    return PhaseChange(
        step=pts[best][0],
        from_step=pts[best - 1][0],
        before=pts[best - 1][1],
        after=pts[best][1],
        rise=rise,
        share=rise / span,
        clear=rise >= min_rise,
    )


# --- what else a snapshot is read for -----------------------------------------------------------------

# The kinds of token the loss is split by, told from each token's text: where the model's skill grows
# first (a word's continuation is easy once its start is known; a word's start needs the sense).
TOKEN_KINDS = ("word start", "word piece", "punctuation", "space or newline")


def token_kinds(texts: Sequence[str]) -> torch.Tensor:
    """Each token's kind (an index into TOKEN_KINDS) from its text: a word start begins a word (a space,
    then a letter or digit, or a capital), a word piece continues one (a letter or digit first),
    whitespace is only spaces and newlines, and the rest (punctuation, symbols) is punctuation."""
    out = []
    for t in texts:
        if not t.strip():
            k = 3
        elif (t[0] == " " and t[1:2].isalnum()) or t[0].isupper():
            k = 0
        elif t[0].isalnum():
            k = 1
        else:
            k = 2
        out.append(k)
    return torch.tensor(out, dtype=torch.long)


@torch.no_grad()
def position_losses(model: torch.nn.Module, windows: torch.Tensor) -> torch.Tensor:
    """windows (B, T + 1) of token ids -> (B, T): the loss (nats) of predicting each window's token at
    every position from the ones before it, one window at a time (a (T, vocab) of log-probabilities at most)."""
    rows = []
    for w in windows:
        out = model(w[None, :-1])
        logits = out[0] if isinstance(out, tuple) else out
        rows.append(-F.log_softmax(logits[0].float(), -1).gather(-1, w[1:, None]).squeeze(-1))
    return torch.stack(rows)


def loss_by_kind(losses: torch.Tensor, windows: torch.Tensor, kinds: torch.Tensor) -> list[dict]:
    """The mean loss over the predicted tokens of each kind: [{kind, loss (None with no token), share}]."""
    k = kinds[windows[:, 1:]]
    out = []
    for i, name in enumerate(TOKEN_KINDS):
        sel = k == i
        n = int(sel.sum())
        out.append(
            {
                "kind": name,
                "loss": round(float(losses[sel].mean()), 4) if n else None,
                "share": round(n / max(1, k.numel()), 4),
            }
        )
    return out


@dataclass
class FeatureMatch:
    """SAE features of two snapshots matched one to one by the cosine of their decoder rows."""

    pairs: list[tuple[int, int, float]]  # (feature before, feature after, cosine), each feature at most once
    born: list[int]  # features after with no match before
    died: list[int]  # features before with no match after


def match_features(before: torch.Tensor, after: torch.Tensor, min_cosine: float) -> FeatureMatch:
    """Greedy one-to-one matching of decoder rows before (F1, d) and after (F2, d) by cosine, the most
    alike pair first, keeping pairs at min_cosine or above (the matching Bricken et al. 2023 and
    sae-lens's feature-universality checks use: decoder directions, not activations)."""
    a = F.normalize(before.float(), dim=-1)
    b = F.normalize(after.float(), dim=-1)
    cos = a @ b.T  # (F1, F2)
    flat = cos.flatten()
    keep = (flat >= min_cosine).nonzero().flatten()
    order = keep[flat[keep].argsort(descending=True)]
    used_a, used_b, pairs = set(), set(), []
    n2 = cos.shape[1]
    for idx in order.tolist():
        i, j = divmod(idx, n2)
        if i in used_a or j in used_b:
            continue
        used_a.add(i)
        used_b.add(j)
        pairs.append((i, j, round(float(flat[idx]), 4)))
    return FeatureMatch(
        pairs=pairs,
        born=[j for j in range(cos.shape[1]) if j not in used_b],
        died=[i for i in range(cos.shape[0]) if i not in used_a],
    )


def lineages(matches: Sequence[FeatureMatch], first: int) -> list[list[int | None]]:
    """Features followed across snapshots: one row per lineage, its feature at each snapshot (None
    before its birth and after its death). `first` features exist at snapshot 0; matches[i] links
    snapshot i to i + 1. A feature born later starts a new lineage."""
    rows: list[list[int | None]] = [[f] for f in range(first)]
    live = {f: r for r, f in enumerate(range(first))}  # feature at the current snapshot -> its row
    for i, m in enumerate(matches):
        nxt: dict[int, int] = {}
        for a, b, _ in m.pairs:
            if a in live:
                nxt[b] = live[a]
        for b in m.born:
            rows.append([None] * (i + 1))
            nxt[b] = len(rows) - 1
        for row in rows:
            row.append(None)
        for b, at in nxt.items():
            rows[at][i + 1] = b
        live = nxt
    return rows


# --- one read of a snapshot's streams, for its SAE and its tuned lens ------------------------------------


@torch.no_grad()
def read_streams(model: torch.nn.Module, windows: torch.Tensor, hooks: Sequence[str]) -> list[torch.Tensor]:
    """windows (S, T) of token ids -> the stream at each hook point for every position, (S * T, d) each,
    16 windows at a time (one forward pass over them for every use the timeline makes of them)."""
    got: dict[str, list[torch.Tensor]] = {h: [] for h in hooks}
    handles = [
        model.hook_dict[h].register_forward_hook(lambda _m, _i, out, h=h: got[h].append(out.detach()))  # type: ignore[union-attr,index,operator]
        for h in hooks
    ]
    try:
        for chunk in windows.split(16):
            model(chunk)
    finally:
        for handle in handles:
            handle.remove()
    return [torch.cat(got[h]).reshape(-1, got[h][0].shape[-1]) for h in hooks]


def shuffled_batches(n: int, batch: int, seed: int):
    """Index batches of `batch` rows of n, each pass over them in a new random order, for ever."""
    g = torch.Generator().manual_seed(seed)
    batch = min(batch, n)
    while True:
        for b in torch.randperm(n, generator=g).split(batch):
            if len(b) == batch:
                yield b
