"""Learning-rate schedules as pure functions of the step.

The trainer calls `warmup_cosine` (or, with --schedule wsd, `warmup_stable_decay`) for every
update, and the API plots the very same function, so the curve a person sees is the one the model
was trained with.
"""

from __future__ import annotations

import math

SCHEDULES = ("cosine", "wsd")  # the trainer's names (--schedule)
SCHEDULE_KINDS = ("warmup_cosine", "warmup_stable_decay")  # their functions' names, as checkpoint.json records them
DEFAULT_COOLDOWN = 0.4  # wsd's share of the run spent decaying, where neither the config nor the recipe says


def warmup_cosine(step: int, max_lr: float, warmup: int, total_steps: int, min_lr: float = 0.0) -> float:
    """Linear warmup from 0 to max_lr over `warmup` updates, then cosine annealing to min_lr at
    total_steps (GPT-1: max_lr 2.5e-4, warmup 2,000, min_lr 0). Step counts from 0; the first
    update uses step 0 and gets max_lr / warmup rather than zero."""
    if warmup > 0 and step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= total_steps:
        return min_lr
    span = max(1, total_steps - warmup)
    progress = (step - warmup) / span
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def warmup_stable_decay(
    step: int, max_lr: float, warmup: int, total_steps: int, cooldown: float, min_lr: float = 0.0
) -> float:
    """Linear warmup to max_lr as in warmup_cosine, then max_lr held constant, then a straight line
    down to min_lr over the last `cooldown` share of total_steps (the "warmup-stable-decay" or
    trapezoidal schedule). The decay starts at round(total_steps * (1 - cooldown)), never before the
    end of warmup."""
    if warmup > 0 and step < warmup:
        return max_lr * (step + 1) / warmup
    if step >= total_steps:
        return min_lr
    start = max(warmup, round(total_steps * (1.0 - cooldown)))
    if step < start:
        return max_lr
    return max_lr + (min_lr - max_lr) * (step - start) / max(1, total_steps - start)


def transformer(step: int, d_model: int = 512, warmup: int = 4000) -> float:
    """The original Transformer's schedule: d_model^-0.5 * min(t^-0.5, t * warmup^-1.5), t >= 1.
    With d_model 512 and warmup 4,000 it peaks near 7.0e-4 at step 4,000."""
    t = max(1, step)
    return d_model**-0.5 * min(t**-0.5, t * warmup**-1.5)


def sample_steps(total: int, points: int = 400) -> list[int]:
    """Up to `points` evenly spread steps from 0 to total (inclusive) for plotting."""
    if total <= 0:
        return [0]
    n = min(points, total + 1)
    return sorted({round(i * total / (n - 1)) for i in range(n)}) if n > 1 else [0]
