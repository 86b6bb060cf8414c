"""GPT-1's second stage: fine-tune a pretrained GPT on a labelled task (model/tasks.py).

As in Radford et al. (2018): a task input becomes one token sequence,

    <|start|> text [<|delim|> text_b] <|extract|>

the three special tokens are new rows of the embedding matrix (learned), the sequence runs through
the pretrained stack, and the final hidden state at the last position (the extract token) feeds
one new linear layer W_y (d -> number of labels). The loss is the label's cross-entropy plus
lm_weight (lambda, 0.5 in the paper) times the language-modelling loss on the same sequences.

Four ways to train, compared on the same split (`METHODS`):
  finetune        pretrained weights, all trained, lambda = lm_weight
  finetune_no_lm  the same with lambda = 0
  scratch         the same architecture from random weights, labels only
  probe           pretrained and frozen; only W_y is trained (a linear probe)

Every run is seeded; `run_cell` results are cached as JSON keyed by everything that decides them.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import checkpoint as ckpt
from .errors import Cancelled
from .gpt import GPT, GPTConfig, count_params
from .schedules import warmup_cosine
from .tasks import Example, Task
from .tokenizers import with_special_tokens
from .train import F32, RUNTIME_BYTES, activation_bytes

SPECIAL_TOKENS = {"start": "<|start|>", "delimiter": "<|delim|>", "extract": "<|extract|>"}
METHODS = ("finetune", "finetune_no_lm", "scratch", "probe")
MAX_TEXT_TOKENS = 48  # tokens kept of each text (its start): passages are short, and runs stay fast on a CPU
RECIPE_VERSION = 1


@dataclass(frozen=True)
class Recipe:
    """How each run trains (AdamW, linear warmup over 10% of the updates, cosine decay to 0)."""

    batch_size: int = 16
    epochs: float = 3.0  # the default number of updates: this many passes over the examples ...
    min_steps: int = 60  # ... but at least this many (16 examples would otherwise get 3 updates)
    max_steps: int = 400
    lr: tuple[tuple[str, float], ...] = (
        ("finetune", 3e-4),
        ("finetune_no_lm", 3e-4),
        ("scratch", 1e-3),
        ("probe", 1e-2),
    )
    weight_decay: float = 0.01
    warmup_frac: float = 0.1

    def steps_for(self, n: int) -> int:
        return int(min(self.max_steps, max(self.min_steps, math.ceil(self.epochs * n / self.batch_size))))

    def lr_for(self, method: str) -> float:
        return dict(self.lr)[method]


RECIPE = Recipe()


def lm_weight_for(method: str, lm_weight: float) -> float:
    """Lambda as each method uses it: only `finetune` keeps the auxiliary LM loss."""
    return lm_weight if method == "finetune" else 0.0


# --- the model ------------------------------------------------------------------------------


class Classifier(nn.Module):
    """A GPT whose vocabulary has the special tokens, and W_y reading the last position."""

    def __init__(self, gpt: GPT, n_labels: int, specials: dict[str, int]) -> None:
        super().__init__()
        self.gpt = gpt
        self.head = nn.Linear(gpt.cfg.d_model, n_labels)  # W_y (n_labels, d) and its bias
        nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)
        self.specials = dict(specials)

    def forward(self, idx: torch.Tensor, last: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """idx (B, T), last (B,) index of each row's extract token -> (label logits (B, L), hidden (B, T, d))."""
        h = self.gpt.hidden(idx)  # (B, T, d)
        h_last = h[torch.arange(idx.size(0), device=idx.device), last]  # (B, d): h_l^m
        return self.head(h_last), h

    def losses(
        self, idx: torch.Tensor, last: torch.Tensor, labels: torch.Tensor, lm_targets: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(label cross-entropy, LM cross-entropy on the text tokens or None)."""
        logits, h = self(idx, last)
        l_cls = F.cross_entropy(logits.float(), labels)
        if lm_targets is None:
            return l_cls, None
        lm_logits = self.gpt.lm_head(h)  # (B, T, V)
        return l_cls, F.cross_entropy(
            lm_logits.reshape(-1, lm_logits.size(-1)).float(), lm_targets.reshape(-1), ignore_index=-1
        )


def special_ids(vocab_size: int) -> dict[str, int]:
    return {k: vocab_size + i for i, k in enumerate(SPECIAL_TOKENS)}


def grow_vocab(gpt: GPT, n_new: int, pretrained: bool) -> GPT:
    """A GPT with n_new more token rows: a copy of gpt's weights with new rows drawn N(0, 0.02)
    (pretrained), or the same architecture from random weights."""
    cfg = replace(gpt.cfg, vocab_size=gpt.cfg.vocab_size + n_new)
    new = GPT(cfg)
    if pretrained:
        src = gpt.state_dict()
        V = gpt.cfg.vocab_size
        with torch.no_grad():
            for k, v in new.state_dict().items():
                if k in ("wte.weight", "lm_head.weight"):
                    v[:V].copy_(src[k])
                else:
                    v.copy_(src[k])
    return new


def build(base: GPT, method: str, n_labels: int, seed: int) -> Classifier:
    """The model a method starts from (see the module docstring), seeded."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}")
    torch.manual_seed(seed)
    # a new GPT (fast mode), its weights copied from base's: base itself, served or not, is only read
    gpt = grow_vocab(base, len(SPECIAL_TOKENS), pretrained=method != "scratch")
    clf = Classifier(gpt, n_labels, special_ids(base.cfg.vocab_size))
    if method == "probe":
        for p in gpt.parameters():
            p.requires_grad_(False)
    return clf


def classifier_encoding(enc, vocab_size: int):
    """The base model's tokenizer with the special tokens added at ids vocab_size, +1, +2."""
    return with_special_tokens(enc, {SPECIAL_TOKENS[k]: i for k, i in special_ids(vocab_size).items()})


def format_text(text: str, text_b: str | None = None) -> str:
    """An input written out with the special tokens' strings (what format_ids encodes, uncut)."""
    t = SPECIAL_TOKENS
    return t["start"] + text + (t["delimiter"] + text_b if text_b is not None else "") + t["extract"]


def format_ids(
    enc, specials: dict[str, int], text: str, text_b: str | None, n_ctx: int, max_text: int | None = MAX_TEXT_TOKENS
) -> list[int]:
    """<|start|> text [<|delim|> text_b] <|extract|>, each text cut to its first max_text tokens
    (and to what fits n_ctx)."""
    return frame(enc, specials, text, text_b, n_ctx, max_text)[0]


def frame(
    enc, specials: dict[str, int], text: str, text_b: str | None, n_ctx: int, max_text: int | None = MAX_TEXT_TOKENS
) -> tuple[list[int], int]:
    """format_ids's ids, and how many of the texts' tokens were cut to make them fit."""
    a = enc.encode_ordinary(text)
    b = enc.encode_ordinary(text_b) if text_b is not None else None
    total = len(a) + (len(b) if b is not None else 0)
    a, b = a[:max_text], (b[:max_text] if b is not None else None)
    room = n_ctx - 2 - (1 if b is not None else 0)
    if b is None:
        a = a[:room]
    else:  # share the room: each text keeps at least half of it
        la = min(len(a), max(room // 2, room - len(b)))
        a, b = a[:la], b[: room - la]
    ids = [specials["start"], *a]
    if b is not None:
        ids += [specials["delimiter"], *b]
    return [*ids, specials["extract"]], total - len(a) - (len(b) if b is not None else 0)


# --- batches ---------------------------------------------------------------------------------


@dataclass
class Encoded:
    ids: list[list[int]]
    labels: list[int]


def encode_examples(enc, specials: dict[str, int], examples: list[Example], n_ctx: int) -> Encoded:
    return Encoded([format_ids(enc, specials, e.text, e.text_b, n_ctx) for e in examples], [e.label for e in examples])


def collate(rows: list[list[int]], labels: list[int], specials: dict[str, int] | None, device=None):
    """Right-padded (idx, last, labels, lm_targets). lm_targets[t] = idx[t + 1] where that is a
    text token, -1 elsewhere (special tokens and padding are never LM targets); None without specials."""
    T = max(len(r) for r in rows)
    idx = torch.zeros(len(rows), T, dtype=torch.long)
    for i, r in enumerate(rows):
        idx[i, : len(r)] = torch.tensor(r)
    last = torch.tensor([len(r) - 1 for r in rows])
    lm = None
    if specials is not None:
        lm = torch.full((len(rows), T), -1, dtype=torch.long)
        special = set(specials.values())
        for i, r in enumerate(rows):
            for t in range(len(r) - 1):
                if r[t + 1] not in special:
                    lm[i, t] = r[t + 1]
        lm = lm.to(device)
    return idx.to(device), last.to(device), torch.tensor(labels, device=device), lm


def n_used(n_train: int, size: int) -> int:
    """How many examples a run asked for `size` trains on (0, or more than there are: all)."""
    return n_train if size <= 0 or size >= n_train else size


def subset(encoded: Encoded, n_labels: int, size: int, seed: int) -> Encoded:
    """`size` training examples (0 or more than there are: all), drawn label by label in turn so
    that even 16 examples cover every label; seeded."""
    n = len(encoded.labels)
    if n_used(n, size) == n:
        return encoded
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(n, generator=g).tolist()
    by = [[i for i in order if encoded.labels[i] == lab] for lab in range(n_labels)]
    picked: list[int] = []
    while len(picked) < size:
        for group in by:
            if group and len(picked) < size:
                picked.append(group.pop(0))
    return Encoded([encoded.ids[i] for i in picked], [encoded.labels[i] for i in picked])


# --- training and evaluation ----------------------------------------------------------------


def length_batches(data: Encoded, batch_size: int) -> list[list[int]]:
    """The examples' indices in batches of similar length (shortest first): a right-padded batch
    costs its longest row, and in a causal model a row's padding never reaches its extract token,
    so each example's result is the same in any batch (passages of 1-4 lines: padding to each
    batch's longest took about half of a test half's forward passes)."""
    order = sorted(range(len(data.labels)), key=lambda i: len(data.ids[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


@torch.no_grad()
def last_hidden(clf: Classifier, data: Encoded, batch_size: int = 64) -> torch.Tensor:
    """(N, d): each example's final hidden state at its extract token, in data's order."""
    device = next(clf.parameters()).device
    out = torch.empty(len(data.labels), clf.gpt.cfg.d_model, device=device)
    for batch in length_batches(data, batch_size):
        idx, last, _, _ = collate([data.ids[i] for i in batch], [data.labels[i] for i in batch], None, device)
        h = clf.gpt.hidden(idx)  # (B, T, d)
        out[torch.tensor(batch, device=device)] = h[torch.arange(idx.size(0), device=device), last].float()
    return out


@torch.no_grad()
def evaluate(
    clf: Classifier, data: Encoded, batch_size: int = 64, features: torch.Tensor | None = None
) -> tuple[float, float]:
    """(accuracy, mean label cross-entropy) over every example; `features`, each example's h_l^m
    when it is known already (a probe's: its GPT is frozen), spares the forward passes."""
    if features is not None:
        logits = clf.head(features).float()  # (N, L)
        y = torch.tensor(data.labels, device=logits.device)
        return int((logits.argmax(-1) == y).sum()) / len(y), float(F.cross_entropy(logits, y))
    was = clf.training
    clf.eval()
    correct, loss = 0, 0.0
    device = next(clf.parameters()).device
    for batch in length_batches(data, batch_size):
        idx, last, y, _ = collate([data.ids[i] for i in batch], [data.labels[i] for i in batch], None, device)
        logits, _ = clf(idx, last)
        correct += int((logits.argmax(-1) == y).sum())
        loss += float(F.cross_entropy(logits.float(), y, reduction="sum"))
    clf.train(was)
    return correct / len(data.labels), loss / len(data.labels)


def train_classifier(
    clf: Classifier,
    data: Encoded,
    method: str,
    lm_weight: float,
    steps: int,
    seed: int,
    recipe: Recipe = RECIPE,
    on_step: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> list[float]:
    """`steps` AdamW updates on batches drawn (seeded) from data; returns the label losses."""
    params = [p for p in clf.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr_for(method), weight_decay=recipe.weight_decay)
    clf.train()
    features = None
    if method == "probe":  # frozen, and no dropout: each example's h_l^m is fixed, so compute it once
        clf.gpt.eval()
        features = last_hidden(clf, data)
    g = torch.Generator().manual_seed(seed + 1)
    lam = lm_weight_for(method, lm_weight)
    device = next(clf.parameters()).device
    warmup, peak = max(1, int(recipe.warmup_frac * steps)), recipe.lr_for(method)
    losses = []
    for step in range(steps):
        if cancel is not None and cancel():
            raise Cancelled()
        pick = torch.randint(len(data.labels), (min(recipe.batch_size, len(data.labels)),), generator=g).tolist()
        for group in opt.param_groups:
            group["lr"] = warmup_cosine(step, peak, warmup, steps)
        if features is not None:
            l_cls, l_lm = (
                F.cross_entropy(clf.head(features[pick]), torch.tensor([data.labels[i] for i in pick], device=device)),
                None,
            )
        else:
            idx, last, y, lm = collate(
                [data.ids[i] for i in pick], [data.labels[i] for i in pick], clf.specials if lam else None, device
            )
            l_cls, l_lm = clf.losses(idx, last, y, lm)
        loss = l_cls + lam * l_lm if l_lm is not None else l_cls
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        losses.append(l_cls.item())
        if on_step is not None:
            on_step(step + 1, steps)
    clf.eval()
    return losses


# --- a cell of the comparison, cached --------------------------------------------------------


@dataclass
class Prepared:
    """A task tokenized for one base model (shared by every cell of a job)."""

    base: GPT
    base_id: str  # what identifies the base weights in cache keys
    task: Task
    enc: object
    specials: dict[str, int]
    train: Encoded
    test: Encoded
    # seed -> (N_test, d): a probe's h_l^m of every test example. The GPT is frozen and only its new
    # special-token rows depend on the seed, so every probe cell of a job with that seed shares them.
    probe_test: dict[int, torch.Tensor] = field(default_factory=dict)


def probe_test_features(p: Prepared, clf: Classifier, seed: int) -> torch.Tensor:
    """(N_test, d) for a probe cell built with `seed`, computed by its first probe cell."""
    if seed not in p.probe_test:
        p.probe_test[seed] = last_hidden(clf, p.test)
    return p.probe_test[seed]


def prepare(base: GPT, base_id: str, enc, task: Task) -> Prepared:
    if enc.n_vocab > base.cfg.vocab_size:
        raise ValueError(f"the tokenizer has {enc.n_vocab} tokens but the model only {base.cfg.vocab_size}")
    specials = special_ids(base.cfg.vocab_size)
    enc2 = classifier_encoding(enc, base.cfg.vocab_size)
    n_ctx = base.cfg.n_ctx
    return Prepared(
        base,
        base_id,
        task,
        enc2,
        specials,
        encode_examples(enc2, specials, task.train, n_ctx),
        encode_examples(enc2, specials, task.test, n_ctx),
    )


def cell_key(p: Prepared, method: str, size: int, lm_weight: float, seed: int, steps: int) -> str:
    spec = {
        "base": p.base_id,
        "task": p.task.sha256,
        "method": method,
        "size": size,
        "seed": seed,
        "steps": steps,
        "lm_weight": lm_weight_for(method, lm_weight),
        "recipe": repr(RECIPE),
        "version": RECIPE_VERSION,
        "max_text": MAX_TEXT_TOKENS,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:24]


def run_cell(
    p: Prepared,
    method: str,
    size: int,
    lm_weight: float = 0.5,
    seed: int = 0,
    steps: int | None = None,
    cache_dir: Path | None = None,
    keep_model: bool = False,
    on_step: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
) -> tuple[dict, Classifier | None]:
    """Train one method on `size` examples and score it on the whole test half. Returns the result
    (as CellResult's fields) and, with keep_model, the classifier (never from the cache)."""
    data = subset(p.train, len(p.task.labels), size, seed)
    n_steps = steps or RECIPE.steps_for(len(data.labels))
    key = cell_key(p, method, size, lm_weight, seed, n_steps)
    path = cache_dir / f"{key}.json" if cache_dir is not None else None
    if path is not None and path.is_file() and not keep_model:
        return {**json.loads(path.read_text()), "cached": True}, None
    t0 = time.time()
    clf = build(p.base, method, len(p.task.labels), seed)
    losses = train_classifier(clf, data, method, lm_weight, n_steps, seed, on_step=on_step, cancel=cancel)
    features = probe_test_features(p, clf, seed) if method == "probe" else None
    acc, test_loss = evaluate(clf, p.test, features=features)
    result = {
        "method": method,
        "lm_weight": lm_weight_for(method, lm_weight),
        "size": size,
        "n_train": len(data.labels),
        "steps": n_steps,
        "accuracy": round(acc, 4),
        "test_loss": round(test_loss, 4),
        "train_loss": round(sum(losses[-10:]) / len(losses[-10:]), 4),
        "seconds": round(time.time() - t0, 2),
    }
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result))
        tmp.replace(path)
    return {**result, "cached": False}, (clf if keep_model else None)


# --- memory: a job's peak bytes, estimated before it starts ------------------------------------

EVAL_BATCH = 64  # examples per forward pass of evaluate and last_hidden
# One encoded example: at most 2 x MAX_TEXT_TOKENS + 3 token ids as a list of Python ints (36 bytes
# each), the list, its label and its row of a batch
EXAMPLE_BYTES = (2 * MAX_TEXT_TOKENS + 3) * 36 + 256


def job_memory(cfg: GPTConfig, methods: list[str], n_examples: int, keep: bool, loaded: bool) -> dict[str, int]:
    """The peak bytes of a fine-tuning job on a base GPT of cfg, in parts (their sum is the peak): "model"
    (the base when it was loaded for the job, `loaded`; the largest cell's classifier with its gradients
    and AdamW's two moments, or a probe's frozen one and its features, beside the biggest batch's
    activations; with `keep`, the classifier kept for saving, which lives on through the later cells and
    its save: the file's bytes and the copy loaded back), "task" (n_examples encoded) and "runtime"."""
    grown = replace(cfg, vocab_size=cfg.vocab_size + len(SPECIAL_TOKENS))
    weights = count_params(grown)["total"] * F32
    T = min(cfg.n_ctx, 2 * MAX_TEXT_TOKENS + 3)
    evaluate = activation_bytes(grown, EVAL_BATCH, T, train=False)
    cells = [
        weights + max(evaluate, 2 * n_examples * cfg.d_model * F32)
        if method == "probe"
        else 4 * weights + max(activation_bytes(grown, RECIPE.batch_size, T), evaluate)
        for method in methods
    ]
    base = count_params(cfg)["total"] * F32 if loaded else 0
    model = base + max(cells) + (weights if keep else 0)
    return {"model": model, "task": n_examples * EXAMPLE_BYTES, "runtime": RUNTIME_BYTES}


def memory_need(
    cfg: GPTConfig, methods: list[str], n_examples: int, keep: bool, loaded: bool, limit: int
) -> tuple[int, str, str]:
    """(a job's peak bytes, the request field whose change needs less, what to ask for instead) for a
    job that may hold `limit` bytes."""
    parts = job_memory(cfg, methods, n_examples, keep, loaded)
    total = sum(parts.values())
    if parts["task"] > parts["model"]:
        return total, "task", "a task with fewer examples"
    probe = sum(job_memory(cfg, ["probe"], n_examples, False, loaded).values())
    alone = (
        f", or methods ['probe'] alone (it trains W_y only: about {probe / 2**20:,.0f} MiB)" if probe <= limit else ""
    )
    return total, "checkpoint", f"a smaller checkpoint{alone}"


# --- a classifier as a checkpoint ----------------------------------------------------------------


def save_classifier(
    path: Path,
    clf: Classifier,
    base_meta: ckpt.CheckpointMeta,
    task: Task,
    result: dict,
    command: str,
    name: str | None = None,
) -> Path:
    """A checkpoint the app can serve: the grown GPT, its tokenizer with the special tokens, and
    W_y in the head file; meta.classifier says what the labels are."""
    tokenizer = {
        **(base_meta.tokenizer or {}),
        "added_special_tokens": {SPECIAL_TOKENS[k]: i for k, i in clf.specials.items()},
    }
    meta = {
        k: v
        for k, v in base_meta.to_dict().items()
        if k in ("corpus", "train_config", "step", "evals", "device", "torch", "train_seconds", "source")
    }
    meta.update(
        name=name or path.name,
        tokenizer=tokenizer,
        command=command,
        final=True,
        uniform_loss=math.log(clf.gpt.cfg.vocab_size),
        classifier={
            "task": task.name,
            "labels": list(task.labels),
            "special_tokens": dict(SPECIAL_TOKENS),
            "special_ids": dict(clf.specials),
            "base": base_meta.name,
            "method": result["method"],
            "lm_weight": result["lm_weight"],
            "n_train": result["n_train"],
            "accuracy": result["accuracy"],
            # a test-half input, framed as the classifier reads it (the forward page's default prompt)
            "example": format_text(task.test[0].text, task.test[0].text_b) if task.test else None,
        },
    )
    return ckpt.save(path, clf.gpt, meta, head={"weight": clf.head.weight, "bias": clf.head.bias})


def load_classifier(c: ckpt.Checkpoint) -> Classifier | None:
    """The classifier of a checkpoint saved by save_classifier (None for a plain language model)."""
    info = c.meta.classifier
    if not info:
        return None
    labels, head = info.get("labels") or [], c.head
    w, b = head.get("weight"), head.get("bias")
    if (
        w is None
        or b is None
        or tuple(w.shape) != (len(labels), c.model.cfg.d_model)
        or tuple(b.shape) != (len(labels),)
    ):
        raise ckpt.CheckpointError(
            f"the classifier head does not fit {len(labels)} labels and d_model={c.model.cfg.d_model}"
        )
    clf = Classifier(c.model, len(labels), {k: int(v) for k, v in info["special_ids"].items()})
    with torch.no_grad():
        clf.head.weight.copy_(w.float())
        clf.head.bias.copy_(b.float())
    return clf.to(next(c.model.parameters()).device).eval()
