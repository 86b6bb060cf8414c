"""Turning next-token logits into a choice: temperature, top-k, top-p, seeded draws.

Pure functions on one position's logits (V,). The explainer shows each stage, so `filter_logits`
returns the distribution before and after every filter, not only the final one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Filtered:
    probs_raw: torch.Tensor  # (V,) softmax(logits), temperature 1
    probs_temperature: torch.Tensor  # (V,) softmax(logits / T)
    kept: torch.Tensor  # (V,) bool: survives top-k and top-p
    probs_final: torch.Tensor  # (V,) renormalised over the kept tokens
    kept_top_k: torch.Tensor  # (V,) bool: survives top-k alone


@dataclass
class Sampled:
    token: int
    prob: float  # probability of the chosen token under the final distribution
    filtered: Filtered


def filter_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Filtered:
    """Apply temperature, then top-k, then top-p (nucleus) to logits (V,).

    temperature 0 means greedy: all mass on the arg-max. top-p keeps the smallest set of the
    most likely tokens whose total probability reaches p (always at least one token).
    """
    logits = logits.detach().float()
    V = logits.numel()
    probs_raw = torch.softmax(logits, -1)
    if temperature < 0 or temperature != temperature:
        raise ValueError("temperature must be a finite number >= 0")
    if temperature == 0:
        probs_t = torch.zeros_like(probs_raw)
        probs_t[int(torch.argmax(logits))] = 1.0
    else:
        # shift first, in float64, so a tiny temperature sends the others to -inf instead of NaN
        shifted = logits.double() - logits.double().max()
        probs_t = torch.softmax(shifted / temperature, -1).float()

    kept_k = torch.ones(V, dtype=torch.bool, device=logits.device)
    if top_k is not None:
        if not 1 <= top_k <= V:
            raise ValueError(f"top_k must be between 1 and the vocabulary size {V}")
        # rank by probability; ties broken by token id so the set has exactly k members
        order = torch.argsort(probs_t, descending=True, stable=True)
        kept_k = torch.zeros_like(kept_k)
        kept_k[order[:top_k]] = True

    kept = kept_k.clone()
    if top_p is not None:
        if not 0 < top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        p = torch.where(kept_k, probs_t, torch.zeros_like(probs_t))
        p = p / p.sum()
        order = torch.argsort(p, descending=True, stable=True)
        mass_before = torch.cumsum(p[order], 0) - p[order]  # mass of strictly more likely tokens
        keep_sorted = mass_before < top_p  # keep until the running total reaches p
        keep_sorted[0] = True
        kept = torch.zeros_like(kept)
        kept[order[keep_sorted]] = True
        kept &= kept_k

    final = torch.where(kept, probs_t, torch.zeros_like(probs_t))
    final = final / final.sum()
    return Filtered(probs_raw, probs_t, kept, final, kept_k)


def step_generator(seed: int, step: int) -> torch.Generator:
    """The random stream for decode step `step` of a run seeded with `seed`.

    Each step gets its own stream so any single step can be drawn again without the ones before it
    (the API's generation stepper relies on this to match `GPT.generate`).
    """
    g = torch.Generator()
    g.manual_seed((int(seed) * 1_000_003 + int(step)) % (2**63 - 1))
    return g


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    step: int = 0,
) -> Sampled:
    f = filter_logits(logits, temperature, top_k, top_p)
    if temperature == 0:
        token = int(torch.argmax(f.probs_final))
    else:
        token = int(torch.multinomial(f.probs_final.cpu(), 1, generator=step_generator(seed, step)))
    return Sampled(token, float(f.probs_final[token]), f)
