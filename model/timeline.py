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
    rows = []
    for w in windows:  # one window at a time: a (T, vocab) of log-probabilities at most
        with torch.inference_mode():
            out = model(w[None, :-1])
        logits = out[0] if isinstance(out, tuple) else out
        rows.append(-F.log_softmax(logits[0].float(), -1).gather(-1, w[1:, None]).squeeze(-1))
    per_pos = torch.stack(rows).mean(0)  # (T,): the mean loss at each position
    (e0, e1), (l0, l1) = icl_bands(len(per_pos))
    early, late = float(per_pos[e0:e1].mean()), float(per_pos[l0:l1].mean())
    return IclScore(
        early_loss=round(early, 4),
        late_loss=round(late, 4),
        score=round(late - early, 4),
        loss=round(float(per_pos.mean()), 4),
        windows=int(windows.shape[0]),
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
