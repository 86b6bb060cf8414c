"""What each attention head does: role scores, honest baselines, and a causal check by ablation.

A role is a simple, well-defined attention habit, scored in [0, 1] from a head's attention pattern
(query i's weights over keys j <= i):

    previous-token   weight on j = i - 1, averaged over i >= 1                       (on a prompt)
    first-token      weight on j = 0 (an "attention sink"), averaged over i >= 1      (on a prompt)
    current-token    weight on j = i, averaged over i >= 1                            (on a prompt)
    local            weight on the LOCAL_WINDOW keys i-2..i, averaged over i >= 2     (on a prompt)
    duplicate-token  on random tokens repeated twice, weight from each token of the second copy on
                     its own earlier copy (j = i - n)                                 (test input)
    induction        on the same input, weight from each token of the second copy on the token
                     right after its earlier copy (j = i - n + 1): the head that lets a model
                     continue a pattern it saw earlier (TransformerLens's induction score)

A score means little alone: a model with random weights spreads attention almost evenly, so on a
ten-token prompt it already puts about 0.3 on position 0. Every score is therefore compared with the
same architecture's heads at random (untrained) weights on the same inputs, and a head gets a role
only if it beats the highest random head by ROLE_MARGIN and reaches ROLE_MIN.

The causal check switches a role head off (its output z set to zero, or to its mean over the
input's positions) and measures what that costs on the task that defines the role: the loss on the
second copy of the repeated tokens for induction and duplicate-token heads, the loss on the prompt
for the others. A role whose removal costs no more than removing heads without a role is "not
confirmed".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .gpt import GPT, Entering, HookFn, hook_name

ROLES = ("previous-token", "first-token", "current-token", "local", "duplicate-token", "induction")
PROMPT_ROLES = ("previous-token", "first-token", "current-token", "local")
REPEAT_ROLES = ("duplicate-token", "induction")
DEFINITIONS = {
    "previous-token": "share of attention on the position just before (i-1), averaged over positions i >= 1 of the prompt",
    "first-token": "share of attention on position 0 (an attention sink), averaged over positions i >= 1 of the prompt",
    "current-token": "share of attention on the position itself (i), averaged over positions i >= 1 of the prompt",
    "local": "share of attention on the 3 most recent positions (i-2..i), averaged over positions i >= 2 of the prompt",
    "duplicate-token": "on random tokens repeated twice, share of attention from each token of the second copy on its "
    "earlier copy (position i-n)",
    "induction": "on random tokens repeated twice, share of attention from each token of the second copy on the token "
    "right after its earlier copy (position i-n+1), as TransformerLens defines it",
}
LOCAL_WINDOW = 3
ROLE_MARGIN = 0.15  # a role's score must beat the best random head by this much ...
ROLE_MIN = 0.3  # ... and reach this
CONFIRM_MIN_COST = 0.01  # nats: an ablation that costs less confirms nothing
BASELINE_SEEDS = (1, 2)
REPEAT_SEED = 0
REPEAT_BATCH = 4


@dataclass
class RepeatedTokens:
    """The standard test input: `batch` rows of n random token ids, each row repeated twice."""

    ids: torch.Tensor  # (batch, 2n)
    n: int
    seed: int


def repeated_tokens(
    vocab_size: int,
    n_ctx: int,
    n: int = 40,
    batch: int = REPEAT_BATCH,
    seed: int = REPEAT_SEED,
    exclude: tuple[int, ...] = (),
) -> RepeatedTokens:
    n = max(2, min(n, n_ctx // 2))
    g = torch.Generator().manual_seed(seed)
    allowed = torch.tensor([i for i in range(vocab_size) if i not in set(exclude)])
    half = allowed[torch.randint(len(allowed), (batch, n), generator=g)]
    return RepeatedTokens(torch.cat([half, half], dim=1), n, seed)


# --- scores from attention patterns (pure functions) ----------------------------------------------


def prompt_scores(pattern: torch.Tensor) -> dict[str, torch.Tensor]:
    """pattern (..., T, T) -> {role: (...) score} for the roles scored on a prompt (T >= 2)."""
    T = pattern.size(-1)
    i = torch.arange(1, T)
    out = {
        "previous-token": pattern[..., i, i - 1].mean(-1),
        "first-token": pattern[..., 1:, 0].mean(-1),
        "current-token": pattern[..., i, i].mean(-1),
    }
    if T > LOCAL_WINDOW - 1:
        q = torch.arange(LOCAL_WINDOW - 1, T)
        window = pattern[..., q, q]  # each query's last LOCAL_WINDOW keys, its own included
        for k in range(1, LOCAL_WINDOW):
            window = window + pattern[..., q, q - k]
        out["local"] = window.mean(-1)
    else:
        out["local"] = pattern[..., 1:, :].sum(-1).mean(-1)
    return out


def repeat_scores(pattern: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """pattern (B, ..., 2n, 2n) on a repeated sequence -> {role: (...) score}, averaged over the batch."""
    i = torch.arange(n, 2 * n)
    dup = pattern[..., i, i - n].mean(-1)
    ind = pattern[..., i, i - n + 1].mean(-1)
    return {"duplicate-token": dup.mean(0), "induction": ind.mean(0)}


def patterns(model: GPT, ids: torch.Tensor) -> torch.Tensor:
    """Every head's attention pattern: ids (B, T) -> (B, n_layer, n_head, T, T)."""
    names = [hook_name("attn.hook_pattern", li) for li in range(model.cfg.n_layer)]
    with torch.inference_mode(), model.capture(names) as cache:
        model.hidden(ids)  # the patterns, not the logits
    return torch.stack([cache[n] for n in names], dim=1)


def all_scores(
    model: GPT, prompt: torch.Tensor, rep: RepeatedTokens, repeated: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """{role: (n_layer, n_head) scores}: prompt roles on `prompt` (1, T), the others on `rep` (or
    `repeated`, those scores when known already)."""
    out = {k: v[0] for k, v in prompt_scores(patterns(model, prompt)).items()}
    out.update(repeated if repeated is not None else repeat_scores(patterns(model, rep.ids), rep.n))
    return out


@dataclass
class RepeatMemo:
    """What the repeated random tokens give one model, whatever the prompt: its scores and its random
    twins' on them, the in-context score's losses and the ablation costs on the second copy. The same
    model and tokens give the same numbers, so a memo kept between analyses of one model (the server
    keeps one per model) spares a new prompt that work and changes no number. For one `rep` only: a
    memo asked for another starts again (`matching`)."""

    rep: tuple[int, int, tuple[int, ...]] | None = None  # (seed, n, every id) of the tokens it holds
    scores: dict[str, torch.Tensor] | None = None  # the model's duplicate-token and induction scores
    twins: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # seed -> a twin's
    first_copy: float | None = None  # the loss on the first copy (tokens 2..n)
    second_copy: float | None = None  # the loss on the second copy: the task's clean loss
    costs: dict[tuple[int, int, str], float] = field(default_factory=dict)  # (layer, head, how) -> its cost

    def matching(self, rep: RepeatedTokens) -> RepeatMemo:
        key = (rep.seed, rep.n, tuple(rep.ids.flatten().tolist()))
        if self.rep != key:  # other tokens: nothing kept holds for them
            self.rep, self.scores, self.first_copy, self.second_copy = key, None, None, None
            self.twins.clear()
            self.costs.clear()
        return self


def random_twin(model: GPT, seed: int) -> GPT:
    """The same architecture with freshly initialised (untrained) weights."""
    torch.manual_seed(seed)
    twin = GPT(model.cfg).to(model.wte.weight.device).eval()
    return twin


def baseline(
    model: GPT, prompt: torch.Tensor, rep: RepeatedTokens, seeds=BASELINE_SEEDS, memo: RepeatMemo | None = None
) -> dict[str, dict]:
    """{role: {"max": best random head, "mean": mean random head}} over random twins (each twin's
    scores on the repeated tokens from `memo` where it has them)."""
    per_seed = []
    state = torch.random.get_rng_state()
    try:
        for s in seeds:
            twin = random_twin(model, s)
            known = memo.twins.get(s) if memo is not None else None
            per_seed.append(all_scores(twin, prompt, rep, known))
            if memo is not None and known is None:
                memo.twins[s] = {r: per_seed[-1][r] for r in REPEAT_ROLES}
    finally:
        torch.random.set_rng_state(state)
    return {
        r: {
            "max": float(max(d[r].max() for d in per_seed)),
            "mean": float(sum(d[r].mean() for d in per_seed) / len(per_seed)),
        }
        for r in ROLES
    }


# when a head passes several roles, the most specific names it: a previous-token head is local too
SPECIFICITY = ("induction", "duplicate-token", "previous-token", "current-token", "first-token", "local")


def threshold(base: dict[str, dict], role: str) -> float:
    return max(ROLE_MIN, base[role]["max"] + ROLE_MARGIN)


def assign_roles(scores: dict[str, torch.Tensor], base: dict[str, dict]) -> list[list[list[str]]]:
    """[layer][head] -> roles that head passes, the most specific first."""
    L, H = scores[ROLES[0]].shape
    return [
        [[r for r in SPECIFICITY if float(scores[r][li, h]) >= threshold(base, r)] for h in range(H)] for li in range(L)
    ]


# --- ablation ------------------------------------------------------------------------------------


def _ablate_hook(head: int, how: str) -> HookFn:
    def fn(z: torch.Tensor, _name: str) -> torch.Tensor:
        z = z.clone()  # (B, T, nh, hs)
        if how == "zero":
            z[:, :, head] = 0.0
        else:  # its mean over the batch and positions of this input
            z[:, :, head] = z[:, :, head].mean(dim=(0, 1))
        return z

    return fn


def task_loss(
    model: GPT,
    ids: torch.Tensor,
    start: int = 0,
    ablate: tuple[int, int, str] | None = None,
    entering: list[Entering] | None = None,
) -> float:
    """Mean next-token loss of ids (B, T) over the targets at positions >= start + 1 (predicted from
    position >= start), optionally with one head (layer, head, 'zero' | 'mean') switched off.
    entering: the clean pass's stream entering each block (`clean_pass`): an ablated pass then starts
    at its head's block, the blocks before it being the clean pass's (the same numbers, fewer blocks)."""
    hooks = [] if ablate is None else [(hook_name("attn.hook_z", ablate[0]), _ablate_hook(ablate[1], ablate[2]))]
    with torch.inference_mode(), model.hooks(hooks):
        if ablate is not None and entering is not None:
            h = model.tail(entering[ablate[0]], ids, ablate[0])
        else:
            h = model.hidden(ids)
        return _loss(model, h, ids, start)


def clean_pass(model: GPT, ids: torch.Tensor, start: int = 0) -> tuple[float, list[Entering]]:
    """task_loss with no head switched off, and the stream entering each block on the way (n_layer x
    (B, T, d)), from which task_loss resumes an ablated pass."""
    keep: list[Entering] = []
    with torch.inference_mode(), model.hooks([]):  # as task_loss runs: every hook point firing
        return _loss(model, model.hidden(ids, keep=keep), ids, start), keep


def _loss(model: GPT, h: torch.Tensor, ids: torch.Tensor, start: int) -> float:
    """The mean loss of the targets after `start` from the final hidden states h (B, T, d): only the
    positions that predict them are unembedded (half the repeated tokens' 2n)."""
    lp = F.log_softmax(model.unembed(h[:, start:-1]).float(), -1)
    tgt = ids[:, start + 1 :]
    return float(-lp.gather(-1, tgt.unsqueeze(-1)).mean())


@dataclass
class Task:
    name: str
    ids: torch.Tensor
    start: int
    description: str


def tasks(prompt: torch.Tensor, rep: RepeatedTokens) -> dict[str, Task]:
    second = Task(
        "repeated-second-copy",
        rep.ids,
        rep.n,
        "loss on the second copy of the repeated random tokens (its tokens 2..n, each predicted from the one before)",
    )
    text = Task("prompt", prompt, 0, "loss on the prompt's tokens")
    return {r: (second if r in REPEAT_ROLES else text) for r in ROLES}


def in_context_score(
    model: GPT, rep: RepeatedTokens, second: float | None = None, first: float | None = None
) -> dict[str, float]:
    """Loss on the second copy minus loss on the first: negative when the model reuses what it saw
    (random tokens cannot be predicted the first time). second, first: those losses where they are
    known already (the repeated-tokens task's clean pass is the second's pass)."""
    if first is None:
        first = task_loss_range(model, rep.ids, 0, rep.n - 1)  # tokens 2..n of the first copy
    if second is None:
        second = task_loss(model, rep.ids, rep.n)  # the same tokens, seen once already
    return {
        "first_copy_loss": round(first, 4),
        "second_copy_loss": round(second, 4),
        "in_context_score": round(second - first, 4),
    }


def task_loss_range(model: GPT, ids: torch.Tensor, start: int, stop: int) -> float:
    with torch.inference_mode():
        lp = F.log_softmax(model.unembed(model.hidden(ids)[:, start:stop]).float(), -1)
    return float(-lp.gather(-1, ids[:, start + 1 : stop + 1].unsqueeze(-1)).mean())


@dataclass
class HeadReport:
    layer: int
    head: int
    scores: dict[str, float]
    roles: list[str]
    ablation: dict | None = None  # task, zero_cost, mean_cost, confirmed


@dataclass
class HeadsReport:
    heads: list[HeadReport]
    baseline: dict[str, dict]
    in_context: dict[str, float]
    reference_cost: dict[str, float] = field(default_factory=dict)  # task -> mean cost of role-less heads


def _reference_heads(roles: list[list[list[str]]], limit: int = 12) -> list[tuple[int, int]]:
    """Up to `limit` role-less heads, evenly spread over the model (the yardstick for the costs)."""
    plain = [(li, h) for li, row in enumerate(roles) for h, r in enumerate(row) if not r]
    if len(plain) <= limit:
        return plain
    step = len(plain) / limit
    return [plain[int(k * step)] for k in range(limit)]


class _Passes:
    """analyse's passes of its two tasks: each task's clean pass, made when first needed, and the cost of
    switching a head off; on the repeated tokens (task `repeated`) those numbers go to and come from
    the memo, where a clean pass is made only for a cost the memo does not have."""

    def __init__(self, model: GPT, repeated: str, memo: RepeatMemo) -> None:
        self.model, self.repeated, self.memo = model, repeated, memo
        self.clean: dict[str, tuple[float, list[Entering]]] = {}

    def _pass(self, t: Task) -> tuple[float, list[Entering]]:
        if t.name not in self.clean:
            self.clean[t.name] = clean_pass(self.model, t.ids, t.start)
            if t.name == self.repeated:
                self.memo.second_copy = self.clean[t.name][0]
        return self.clean[t.name]

    def clean_loss(self, t: Task) -> float:
        if t.name == self.repeated and self.memo.second_copy is not None:
            return self.memo.second_copy
        return self._pass(t)[0]

    def cost(self, li: int, h: int, t: Task, how: str) -> float:
        kept = self.memo.costs.get((li, h, how)) if t.name == self.repeated else None
        if kept is not None:
            return kept
        loss, entering = self._pass(t)
        out = task_loss(self.model, t.ids, t.start, (li, h, how), entering) - loss
        if t.name == self.repeated:
            self.memo.costs[(li, h, how)] = out
        return out


def analyse(
    model: GPT,
    prompt: torch.Tensor,
    rep: RepeatedTokens,
    ablate: bool = True,
    max_ablated: int | None = None,
    memo: RepeatMemo | None = None,
) -> HeadsReport:
    """Scores, baselines, roles and (for role heads and a sample of role-less ones) ablation costs.
    max_ablated: ablate at most this many role heads (those that beat their threshold by the most);
    the rest keep ablation None (each ablation is a pass from its head's block on, at a large model's width).
    memo: what earlier analyses of this model found on `rep` (RepeatMemo), read and added to; the report
    is the same with it or without."""
    memo = memo.matching(rep) if memo is not None else RepeatMemo().matching(rep)
    if memo.scores is None:
        memo.scores = repeat_scores(patterns(model, rep.ids), rep.n)
    scores = all_scores(model, prompt, rep, memo.scores)
    base = baseline(model, prompt, rep, memo=memo)
    roles = assign_roles(scores, base)
    L, H = model.cfg.n_layer, model.cfg.n_head
    heads = [
        HeadReport(li, h, {r: round(float(scores[r][li, h]), 4) for r in ROLES}, roles[li][h])
        for li in range(L)
        for h in range(H)
    ]
    rounded = {r: {k: round(v, 4) for k, v in b.items()} for r, b in base.items()}
    if memo.first_copy is None:
        memo.first_copy = task_loss_range(model, rep.ids, 0, rep.n - 1)
    if not ablate:
        if memo.second_copy is None:  # the repeated task's clean loss (the same pass as clean_pass's)
            memo.second_copy = task_loss(model, rep.ids, rep.n)
        return HeadsReport(heads, rounded, in_context_score(model, rep, memo.second_copy, memo.first_copy))
    tk = tasks(prompt, rep)
    distinct = {t.name: t for t in tk.values()}  # the roles share two tasks
    repeated = tk[REPEAT_ROLES[0]].name
    passes = _Passes(model, repeated, memo)
    clean_loss, cost = passes.clean_loss, passes.cost
    second = clean_loss(distinct[repeated])  # the loss on the repeated tokens' second copy
    report = HeadsReport(heads, rounded, in_context_score(model, rep, second, memo.first_copy))

    refs = _reference_heads(roles, limit=12 if max_ablated is None else max(4, max_ablated // 2))
    for t in distinct.values():
        costs = [cost(li, h, t, "zero") for li, h in refs]
        report.reference_cost[t.name] = round(sum(costs) / len(costs), 4) if costs else 0.0
    ranked = sorted(
        (hr for hr in heads if hr.roles),
        reverse=True,
        key=lambda hr: hr.scores[hr.roles[0]] - threshold(base, hr.roles[0]),
    )
    for hr in ranked[:max_ablated]:
        t = tk[hr.roles[0]]
        zero, mean = cost(hr.layer, hr.head, t, "zero"), cost(hr.layer, hr.head, t, "mean")
        yard = max(CONFIRM_MIN_COST, 2 * abs(report.reference_cost.get(t.name, 0.0)))
        hr.ablation = {
            "task": t.name,
            "task_description": t.description,
            "clean_loss": round(clean_loss(t), 4),
            "zero_cost": round(zero, 4),
            "mean_cost": round(mean, 4),
            "confirmed": max(zero, mean) >= yard,
            "needed": round(yard, 4),
        }
    return report
