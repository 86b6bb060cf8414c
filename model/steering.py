"""Steering, four ways on one concept, with honest measures (issue #66).

A concept is one label of a labelled task (model/probes.py reads its examples). Three of the ways
add a vector to the residual stream after one block (`blocks.{L}.hook_resid_post`), at every
position of every forward pass while the model generates:

- DiffMean: the mean stream of the concept's training examples minus the mean of the others';
- the probe's direction: the logistic probe's w_concept - w_other (model/probes.py);
- an SAE feature's decoder row: the SAE's feature whose mean activation differs most between the
  concept's examples and the others' (a difference of means in the SAE's basis).

Each is made a unit vector and scaled by `strength` times the stream's typical size at that layer
(the mean norm of its tokens' streams over the examples), so one strength means the same push for
all three and only the direction differs. The fourth way touches no weight or activation: the
prompt is preceded by `k` of the concept's training examples (in-context prompting; its strength
is k).

What a steered continuation is worth is measured by the unsteered model alone:

- the concept score: the probe's probability of the concept for the continuation, read alone as
  the probe's training texts were (its stream at the probe's layer, pooled as it was trained);
- fluency: the continuation's mean loss per token (nats) under the unsteered model, given the
  prompt alone (without a prefix): the text a steered model writes, judged by the model it was.

Every prompt draws its tokens from its own seeded stream (model/sampling.py's step_generator, the
seed `seed + i` for prompt i), the same for every method and strength, so differences between
two rows come from the steering, not from the dice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .config import GPTConfig
from .errors import Cancelled  # raised when a caller's cancel() is true between generation steps
from .gpt import GPT
from .hooks import hook_name
from .kv_cache import KVCache
from .probes import BATCH_TOKENS, LayerProbe, stream_features
from .probes import peak_bytes as probe_bytes
from .sae import SAE
from .sampling import sample_next

METHODS = ("diffmean", "probe", "sae", "prompt")
VECTOR_METHODS = ("diffmean", "probe", "sae")


@dataclass(frozen=True)
class Sampling:
    new_tokens: int = 32
    temperature: float = 1.0
    top_k: int | None = None
    seed: int = 0


def steer_hook(layer: int) -> str:
    return hook_name("hook_resid_post", layer)


def unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm().clamp_min(1e-12)


@dataclass
class ExampleReading:
    """What one pass over the labelled examples gives steering."""

    features: torch.Tensor  # (n_layer, N, d): model/probes.py's pooled streams, for the probes
    scale: float  # the mean norm of the stream after the steered block over the first n_scale rows' tokens
    sae_means: torch.Tensor | None  # (n_scale, F): each of those rows' SAE activations averaged over its tokens


@torch.no_grad()
def read_examples(
    model: GPT,
    rows: list[list[int]],
    n_scale: int,
    layer: int,
    sae: SAE | None,
    stage: str = "resid_post",
    pool: str = "mean",
) -> ExampleReading:
    """One pass over the rows: the probes' pooled streams (at `stage`), and over the first n_scale rows (the
    training half) the steered stream's mean norm (each row weighing the same; the unit of a strength) and
    the SAE's activations averaged over each row's tokens."""
    name = steer_hook(layer)
    norms = torch.zeros(len(rows))
    sae_means = torch.zeros(len(rows), sae.cfg.d_sae) if sae is not None else None
    if stage != "resid_post" or (sae is not None and sae.cfg.hook_name != name):
        raise ValueError("steering reads the stream after each block (resid_post), where the SAE reads it")

    def more(batch: list[int], cache: dict[str, torch.Tensor], mask: torch.Tensor) -> None:
        h = cache[name].float()  # (B, T, d)
        m = mask.to(h.device)[..., None]
        at = torch.tensor(batch)
        norms[at] = ((h.norm(dim=-1, keepdim=True) * m).sum(1) / m.sum(1))[:, 0].cpu()
        if sae is not None and sae_means is not None:
            f = sae.encode(h.to(sae.W_dec.device))
            sae_means[at] = ((f * m.to(f.device)).sum(1) / m.to(f.device).sum(1)).cpu()

    features = stream_features(model, rows, stage, pool, more)
    scale = float(norms[:n_scale].mean())
    return ExampleReading(features, scale, sae_means[:n_scale] if sae_means is not None else None)


def sae_concept_feature(sae_means: torch.Tensor, labels: torch.Tensor, concept: int) -> tuple[int, float]:
    """(feature, difference): the SAE feature whose activation, averaged over each example's tokens,
    differs most between the concept's examples and the others' (mean over examples), and that difference."""
    diff = sae_means[labels == concept].mean(0) - sae_means[labels != concept].mean(0)
    feature = int(diff.argmax())
    return feature, float(diff[feature])


def concept_direction(probe: LayerProbe, concept: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(the probe's direction, DiffMean's) towards `concept`, in the stream's units: for two labels
    w_concept - w_other and mean(concept) - mean(other); for more, w_concept minus the mean of the
    other rows, and the concept's mean minus the other examples' mean."""
    W, n = probe.weight, probe.weight.shape[0]
    others = [i for i in range(n) if i != concept]
    direction = W[concept] - W[others].mean(0)
    if n == 2:
        return direction, probe.diffmean if concept == 1 else -probe.diffmean
    return direction, probe.diffmean[concept]


@torch.no_grad()
def generate(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    sampling: Sampling,
    add: tuple[str, torch.Tensor] | None = None,
    cancel: Callable[[], bool] | None = None,
    on_step: Callable[[], None] | None = None,
) -> list[list[int]]:
    """Each prompt's continuation of sampling.new_tokens tokens, the vector `add` = (hook name, (d,))
    added at that hook point in every forward pass. Prompts of one length run as one batch with a KV
    cache; prompt i draws step j from step_generator(seed + i, j). Every prompt plus its continuation
    must fit n_ctx. on_step() is called after each step of each batch, cancel() before."""
    device = next(model.parameters()).device
    out: list[list[int]] = [[] for _ in prompts]
    by_length: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        by_length.setdefault(len(p), []).append(i)
    hooks: list = []
    if add is not None:
        name, vector = add

        def push(x: torch.Tensor, _name: str) -> torch.Tensor:
            return x + vector.to(x.device, x.dtype)

        hooks = [(name, push)]
    # with nothing added the model runs as it is (in fast mode, if it is in it): hooks need explain mode
    with model.hooks(hooks) if hooks else contextlib.nullcontext(model) as m:
        for length, group in sorted(by_length.items()):
            if length + sampling.new_tokens > model.cfg.n_ctx:
                raise ValueError(f"a prompt of {length} tokens and {sampling.new_tokens} new ones exceed n_ctx")
            cache = KVCache(model.cfg, len(group), device, model.wte.weight.dtype)
            idx = torch.tensor([list(prompts[i]) for i in group], device=device)
            for step in range(sampling.new_tokens):
                if cancel is not None and cancel():
                    raise Cancelled
                logits, _ = m(idx, kv_cache=cache, last_only=True)  # (B, 1, V)
                nxt = [
                    sample_next(
                        logits[j, -1], sampling.temperature, sampling.top_k, None, sampling.seed + i, step
                    ).token
                    for j, i in enumerate(group)
                ]
                for j, i in enumerate(group):
                    out[i].append(nxt[j])
                idx = torch.tensor(nxt, device=device)[:, None]
                if on_step is not None:
                    on_step()
    return out


@torch.no_grad()
def continuation_loss(
    model: GPT, prompts: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]
) -> list[float]:
    """Each continuation's mean loss per token (nats) under model, given its prompt (rows of one
    length in one batch)."""
    device = next(model.parameters()).device
    out = [0.0] * len(prompts)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (p, c) in enumerate(zip(prompts, continuations)):
        groups.setdefault((len(p), len(c)), []).append(i)
    for (n_prompt, _), group in groups.items():
        ids = torch.tensor([list(prompts[i]) + list(continuations[i]) for i in group], device=device)
        logits, _ = model(ids[:, :-1])
        tail = logits[:, n_prompt - 1 :].float()  # (B, n_new, V): the positions that predict the continuation
        losses = F.cross_entropy(tail.transpose(1, 2), ids[:, n_prompt:], reduction="none").mean(1)
        for j, i in enumerate(group):
            out[i] = float(losses[j])
    return out


def likelihood_shares(
    model: GPT, lead: list[int], prefixes: Sequence[Sequence[int]], continuations: Sequence[Sequence[int]]
) -> torch.Tensor:
    """The model's own judge, (N, n_labels): for each label's prefix (a few of its examples), each
    continuation's total log-likelihood after it, as a softmax over the labels (Bayes with equal priors)."""
    totals = []
    for prefix in prefixes:
        prompt = list(lead) + list(prefix)
        losses = continuation_loss(model, [prompt] * len(continuations), continuations)
        totals.append(torch.tensor([-loss * len(c) for loss, c in zip(losses, continuations)], dtype=torch.float64))
    return torch.softmax(torch.stack(totals, 1), 1)


@torch.no_grad()
def concept_probability(
    model: GPT,
    rows: Sequence[Sequence[int]],
    weight: torch.Tensor,
    bias: torch.Tensor,
    layer: int,
    stage: str,
    pool: str,
    concept: int,
) -> list[float]:
    """The probe's probability of the concept for each row (its stream at `layer`, pooled as the probe was
    trained; weight (n_labels, d) and bias (n_labels,) in the stream's units)."""
    features = stream_features(model, [list(r) for r in rows], stage, pool)[layer]  # (N, d)
    probs = torch.softmax(features.double() @ weight.double().T + bias.double(), -1)
    return probs[:, concept].tolist()


def peak_bytes(cfg: GPTConfig, n_examples: int, longest: int, n_prompts: int, d_sae: int) -> int:
    """An upper bound on a steering comparison's transient memory: the probes' reading of the examples
    (model/probes.py's bound, which counts a random model that steering does not build), one batch's
    SAE activations and their per-example means, and generation's KV cache and logits."""
    sae = 3 * BATCH_TOKENS * d_sae * 4 + n_examples * d_sae * 4
    kv = 2 * cfg.n_layer * n_prompts * cfg.n_kv_head * cfg.n_ctx * cfg.d_head * 4
    logits = 4 * n_prompts * cfg.n_ctx * cfg.vocab_size * 4  # the loss's forward pass: logits, softmax, grads
    return probe_bytes(cfg, n_examples, longest) + sae + kv + logits
