"""Sparse autoencoders (SAEs) on one layer's residual stream: train one, measure it, save it.

An SAE rewrites the residual stream x (d numbers at each position) as a sparse sum of many more
directions, the *features*, so that each position uses only a few of them:

    pre   = (x - b_dec) @ W_enc + b_enc          W_enc (d, F), b_enc (F,), b_dec (d,)
    f     = TopK(pre)  or  ReLU(pre)             (F,) feature activations, mostly 0
    x_hat = f @ W_dec + b_dec                    W_dec (F, d): one unit-norm row per feature

F is the width (8 to 32 times d). TopK keeps the k largest pre-activations (ReLU'd) and zeroes
the rest, so exactly at most k features fire per token (Gao et al. 2024); ReLU lets any number
fire and an L1 penalty on f keeps them few (Bricken et al. 2023). Training minimises
||x - x_hat||^2 on activations streamed from the training text, with the decoder rows
renormalised to unit length after every step (so a feature's activation is its size in the
stream, and L1 cannot be cheated by shrinking f and growing W_dec). Features that stop firing
("dead") are brought back: TopK by the AuxK loss (the top dead features are asked to reconstruct
what the live ones missed), ReLU by resampling (a dead feature's decoder row is set to the
direction of a badly reconstructed input).

On disk an SAE is a folder in SAELens's format (cfg.json + sae_weights.safetensors with W_enc,
b_enc, W_dec, b_dec, and sparsity.safetensors with log10 densities), so SAELens-style tools can
open it, plus gptscope's own two files: feature_stats.safetensors (the held-out tokens the
statistics were measured on, each feature's top activations and histogram) and gptscope_sae.json
(how it was trained, the quality figures, and the sha256 of every other file, checked on load).
Nothing is unpickled: tensors are safetensors, everything else is JSON.

Shapes: N tokens, d the stream's width (d_in), F features (d_sae), V vocabulary, T positions.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save as st_save

from . import artefact
from . import checkpoint as ckpt
from .errors import SettingError, stop_if
from .gpt import GPT, GPTConfig, LayerNorm, RMSNorm, hook_name
from .settings import check, setting
from .train import activation_bytes, artefact_memory, artefact_peak, largest_fitting

CFG_FILE = "cfg.json"  # SAELens's names
WEIGHTS_FILE = "sae_weights.safetensors"
SPARSITY_FILE = "sparsity.safetensors"
STATS_FILE = "feature_stats.safetensors"  # gptscope's
META_FILE = "gptscope_sae.json"
FORMAT = "gptscope-sae"
HOOK = "hook_resid_post"  # the stream leaving block `layer`
TOP_EXAMPLES = 8  # top activations kept per feature
HIST_BINS = 24  # bins of each feature's activation histogram
DENSE = 0.1  # a feature that fires on more than this share of tokens counts as dense
STREAM_FILL = 64  # sequences of n_ctx in one buffer of the training stream (ActivationStream)
# sparse_codes encodes CODES_CHUNK tokens at once, fewer for a wide SAE so that one (tokens, F) tensor
# stays within CODES_NUMBERS float32s (64 MiB; GPT-2 small x32, 24,576 features: 682 tokens)
CODES_CHUNK = 4096
CODES_NUMBERS = 2**24
Activation = Literal["topk", "relu"]

# Memory. An SAE run's own tensors must fit MEMORY_LIMIT, in training and in evaluation: validate(model)
# gives the largest batch_tokens and eval_sequences that do, from the estimates below (train_bytes,
# eval_bytes: float32, d the stream's width, F the features). Counted by reading the code; the
# per-step and per-chunk counts are upper bounds of what ru_maxrss measured on CPU. The model's own
# forward passes (the stream's 16-sequence chunks, lm_losses' 8-sequence logits) are not counted:
# they are the same for every SAE.
MEMORY_LIMIT = 2 * 2**30
PARAM_COPIES = 5  # of W_enc and W_dec (d x F each): the SAE, its gradients, Adam's two moments, the SAE at the start
BUFFER_COPIES = 4  # of the stream's buffer (STREAM_FILL x n_ctx x d): the one being served, its shuffled copy
# (held by the batch in hand), and the next one's chunks and their concatenation
STEP_COPIES = 6  # (batch_tokens, F) float32 tensors at a training step's peak: the pre-activations, AuxK's
# masked copy and its codes or ReLU's codes, their gradients (measured over a whole run, d 256, F 8,192,
# batch 4,096: 4.0 for TopK with AuxK on, 5.2 for ReLU)
CHUNK_COPIES = 5  # (codes_chunk, F) float32 tensors sparse_codes holds per chunk (measured: 3.3 TopK, 5 ReLU)
CODE_BYTES = 20  # one nonzero activation of sparse_codes: token (int64), feature (int64), value (float32)


class SAEError(SettingError):
    """An SAE folder (or a transcoder set's) that cannot be loaded, or a config that cannot be trained:
    SettingError(field, message), the field "sae" for a folder."""


# --------------------------------------------------------------------------------------------
# The autoencoder
# --------------------------------------------------------------------------------------------


@dataclass
class SAEConfig:
    d_in: int  # width of the stream it reads (the model's d_model)
    d_sae: int  # number of features
    layer: int  # it reads blocks.{layer}.hook_resid_post
    activation: Activation = "topk"
    k: int = 32  # TopK: features kept per token

    @property
    def hook_name(self) -> str:
        return hook_name(HOOK, self.layer)


class SAE(nn.Module):
    def __init__(self, cfg: SAEConfig) -> None:
        super().__init__()
        self.cfg = cfg
        w = torch.empty(cfg.d_sae, cfg.d_in)
        nn.init.kaiming_uniform_(w)
        w = w / w.norm(dim=1, keepdim=True)
        self.W_dec = nn.Parameter(w)  # (F, d) unit rows: each feature's direction in the stream
        self.W_enc = nn.Parameter(w.T.clone().contiguous())  # (d, F) starts as the decoder's transpose
        self.b_enc = nn.Parameter(torch.zeros(cfg.d_sae))  # (F,)
        self.b_dec = nn.Parameter(torch.zeros(cfg.d_in))  # (d,) subtracted on the way in, added on the way out

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., d) -> (..., F) before the activation."""
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        if self.cfg.activation == "relu":
            return torch.relu(pre)
        top = torch.topk(pre, self.cfg.k, dim=-1)  # the k largest, ReLU'd; every other feature 0
        return torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., d) -> feature activations f (..., F)."""
        return self.activate(self.pre_acts(x))

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """f (..., F) -> x_hat (..., d)."""
        return f @ self.W_dec + self.b_dec

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.encode(x)
        return self.decode(f), f

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-8))


# --------------------------------------------------------------------------------------------
# Reading the model's stream
# --------------------------------------------------------------------------------------------


class _Enough(Exception):
    def __init__(self, x: torch.Tensor) -> None:
        self.x = x


def residuals(model: GPT, idx: torch.Tensor, layer: int) -> torch.Tensor:
    """idx (B, T) -> blocks.{layer}.hook_resid_post (B, T, d), in the model's current mode.

    The forward pass stops as soon as that hook point fires (the later blocks and the unembedding,
    half of the work for a middle layer, are skipped): a forward hook on the HookPoint raises with
    the tensor. GPT.capture would run the whole model, in explain mode."""
    hp = model.hook_dict[hook_name(HOOK, layer)]

    def stop(_mod, _inp, out):
        raise _Enough(out)

    handle = hp.register_forward_hook(stop)
    try:
        model.hidden(idx)
    except _Enough as e:
        return e.x.detach()
    finally:
        handle.remove()
    raise RuntimeError(f"{hp.name} did not fire")


def unembed_directions(model: GPT, directions: torch.Tensor) -> torch.Tensor:
    """directions (F, d) in the stream -> (F, V): how each moves every logit when added to the final
    stream. The final norm is linearised: a LayerNorm removes a vector's mean and scales by its
    gain (the divisor depends on the whole stream, so it is left out: the numbers rank tokens, their
    scale is relative); an RMSNorm only scales."""
    norm = model.ln_final
    d = directions
    if isinstance(norm, LayerNorm):
        d = (d - d.mean(-1, keepdim=True)) * norm.weight
    elif isinstance(norm, RMSNorm) and norm.weight is not None:  # (nanochat's has no gain)
        d = d * norm.weight
    return d @ model.lm_head.weight.T


@contextmanager
def steering(model: GPT, sae: SAE, feature: int, scale: float) -> Iterator[GPT]:
    """Inside the block, every forward pass adds scale x feature's decoder row to the SAE's stream at
    every position (GPT.hooks: explain mode)."""
    direction = sae.W_dec[feature].detach()

    def add(x: torch.Tensor, _name: str) -> torch.Tensor:
        return x + scale * direction.to(x.dtype)

    with model.hooks([(sae.cfg.hook_name, add)]) as m:
        yield m


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@dataclass
class SAETrainConfig:
    """An SAE's training settings, each declared once (model/settings.py): the API's request and the
    command line's options are made from these fields."""

    layer: int = setting(ge=0, help="the block whose output stream (hook_resid_post) it reads; below n_layer")
    expansion: int = setting(8, ge=8, le=32, help="features per stream dimension")  # features = expansion x d
    activation: Activation = setting(  # noqa: RUF009 (a str: immutable)
        "topk", help="topk (k features per token) or relu (an L1 penalty)"
    )
    k: int = setting(32, ge=1, le=512, help="TopK: features kept per token (at most expansion x d_model)")
    l1_coefficient: float = setting(0.5, ge=0, le=100, help="ReLU: the L1 penalty's weight")  # on mean(sum f)
    lr: float = setting(3e-3, gt=0, le=0.1, help="Adam's learning rate")
    batch_tokens: int = setting(1024, ge=64, le=65536, help="activations per update")
    max_tokens: int = setting(2_000_000, ge=1024, le=1_000_000_000, help="activations to train on at most")
    time_budget: float = setting(
        180, ge=0, le=3600, unit="seconds", help="seconds of training at most (0: none; evaluation comes after)"
    )
    seed: int = setting(0, ge=0, le=2**31 - 1, help="the seed of the SAE's start and its batches")
    dead_after_tokens: int = setting(100_000, cli=False)  # a feature that has not fired for this many tokens is dead
    aux_coefficient: float = setting(1 / 32, cli=False)  # TopK: weight of the AuxK loss on dead features
    eval_sequences: int = setting(128, ge=1, le=1024, help="held-out sequences of n_ctx tokens to measure on")
    ce_sequences: int = setting(32, ge=1, le=1024, help="of those, for the language-model losses (<= eval_sequences)")

    def validate(self, model: GPT | None = None) -> None:
        check(self, SAEError)
        checks: list[tuple[str, bool, str]] = [
            ("ce_sequences", self.ce_sequences <= self.eval_sequences, "must be 1..eval_sequences"),
        ]
        if model is not None:
            L, d = model.cfg.n_layer, model.cfg.d_model
            checks += [
                ("layer", 0 <= self.layer < L, f"must be a layer of the model: 0..{L - 1}"),
                ("k", self.k <= self.expansion * d, f"must be at most the SAE's width {self.expansion * d}"),
            ]
        for name, ok, msg in checks:
            if not ok:
                raise SAEError(name, f"{name} {msg} (got {getattr(self, name)})")
        if model is not None:
            self._check_memory(model.cfg.d_model, model.cfg.n_ctx)

    def _check_memory(self, d: int, n_ctx: int) -> None:
        """Refuse an expansion, batch_tokens or eval_sequences whose run would not fit MEMORY_LIMIT on a
        model of this width and context, naming the largest value that would."""

        def trains(expansion: int, batch_tokens: int) -> bool:
            return train_bytes(d, n_ctx, expansion * d, batch_tokens) <= MEMORY_LIMIT

        def evaluates(expansion: int, sequences: int) -> bool:
            F = expansion * d
            return eval_bytes(d, n_ctx, F, sequences, codes_per_token(self.activation, self.k, F)) <= MEMORY_LIMIT

        limit = f"memory limit {MEMORY_LIMIT / 2**30:g} GiB"
        e, F = self.expansion, self.expansion * d
        if not (trains(e, 64) and evaluates(e, 1)):
            ok = [x for x in range(8, e) if trains(x, 64) and evaluates(x, 1)]
            msg = (
                f"must be at most {ok[-1]} on this model"
                if ok
                else "cannot be met: on this model no SAE fits, not even at expansion 8, batch_tokens 64 and eval_sequences 1"
            )
            raise SAEError("expansion", f"expansion {msg} ({limit}) (got {e})")
        for name, fits, lo, hi in (
            ("batch_tokens", lambda n: trains(e, n), 64, 65536),
            ("eval_sequences", lambda n: evaluates(e, n), 1, 1024),
        ):
            if not fits(getattr(self, name)):
                raise SAEError(
                    name,
                    f"{name} must be at most {_largest(fits, lo, hi):,} for an SAE of {F:,} features on this model "
                    f"({limit}) (got {getattr(self, name)})",
                )


def _largest(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest n in lo..hi with ok(n), given ok(lo) and ok falling from true to false once."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def codes_chunk(d_sae: int) -> int:
    """The tokens sparse_codes encodes at once for an SAE of d_sae features."""
    return max(1, min(CODES_CHUNK, CODES_NUMBERS // d_sae))


def codes_per_token(activation: Activation, k: int, d_sae: int) -> float:
    """Nonzero activations per token to plan for: TopK's k; ReLU's half of the features, as an SAE at
    its start fires (the trained one's codes are planned for at the same density)."""
    return k if activation == "topk" else d_sae / 2


def train_bytes(d: int, n_ctx: int, d_sae: int, batch_tokens: int) -> int:
    """The bytes train_sae's own tensors hold at most: the weights' copies, the stream's buffers and
    one step's (batch_tokens, F) tensors."""
    weights = PARAM_COPIES * 2 * d * d_sae * 4
    stream = BUFFER_COPIES * STREAM_FILL * n_ctx * d * 4
    return weights + stream + STEP_COPIES * batch_tokens * d_sae * 4


def eval_bytes(d: int, n_ctx: int, d_sae: int, sequences: int, per_token: float) -> int:
    """The bytes quality's own tensors hold at most, on `sequences` held-out sequences of n_ctx
    tokens with per_token nonzero activations each: the stream x (N, d) and then the largest of
    - its concatenation from chunks: x twice;
    - the codes: the trained SAE's (token, feature, value) triples kept, the starting SAE's being made
      (their chunks and their concatenation: twice; feature_stats sorting the first is no more), and
      one chunk's dense tensors;
    - pca_fve: x, x minus its mean and that in float64 (4 x in all), beside the triples still kept and
      the starting SAE's features (int64)."""
    n = sequences * n_ctx
    x = n * d * 4
    codes = n * per_token
    weights = 2 * 2 * d * d_sae * 4  # the trained SAE and the one at its start
    chunk = CHUNK_COPIES * min(n, codes_chunk(d_sae)) * d_sae * 4
    peak = max(2 * x, x + 3 * CODE_BYTES * codes + chunk, 4 * x + (CODE_BYTES + 8) * codes)
    return int(weights + peak)


LM_CHUNK = 8  # held-out sequences per forward pass of lm_losses
# eval_bytes counts quality's own tensors from the code; the peak resident memory (VmHWM) of whole
# evaluations on the built-in model measured up to 1.45x it (feature_stats' sorting of the codes,
# sparse_codes' chunks): a job's estimate takes this much of it
EVAL_MARGIN = 1.5
STREAM_CHUNK = 16  # sequences per forward pass of the stream (ActivationStream, stream_of)


def job_memory(tc: SAETrainConfig, cfg: GPTConfig, corpus_size: int) -> dict[str, int]:
    """The bytes of an SAE job on a model of cfg over a text of corpus_size bytes, in parts: "train"
    (train_bytes, beside the model's forward pass of a chunk of the stream), "evaluate" (eval_bytes with
    EVAL_MARGIN, beside lm_losses' forward passes with their logits) and what every artefact job holds
    (model/train.py's artefact_memory: the model's copy, the token ids, runtime). Training and
    evaluation come one after the other: peak_bytes counts the larger of the two."""
    d, T, F = cfg.d_model, cfg.n_ctx, tc.expansion * cfg.d_model
    train = train_bytes(d, T, F, tc.batch_tokens) + activation_bytes(cfg, STREAM_CHUNK, T, False, logits=False)
    per_token = codes_per_token(tc.activation, tc.k, F)
    lm = activation_bytes(cfg, min(LM_CHUNK, tc.ce_sequences), T, train=False)
    evaluate = int(EVAL_MARGIN * eval_bytes(d, T, F, tc.eval_sequences, per_token)) + lm
    return {"train": train, "evaluate": evaluate, "lm_losses": lm, **artefact_memory(cfg, corpus_size)}


def peak_bytes(tc: SAETrainConfig, cfg: GPTConfig, corpus_size: int) -> int:
    """The most memory an SAE job takes (job_memory's parts: the larger of training and evaluation)."""
    p = job_memory(tc, cfg, corpus_size)
    return artefact_peak(p, max(p["train"], p["evaluate"]))


def memory_need(tc: SAETrainConfig, cfg: GPTConfig, corpus_size: int, limit: int) -> tuple[int, str, str]:
    """(an SAE job's peak bytes, the setting whose smaller value needs the most less, what to ask for
    instead: the largest value of it that fits `limit`, as validate's messages name them)."""
    p = job_memory(tc, cfg, corpus_size)
    total = peak_bytes(tc, cfg, corpus_size)
    if p["corpus"] > max(p["train"], p["evaluate"], p["model"]):
        return total, "corpus", "a smaller corpus"
    if p["evaluate"] > p["train"]:
        name, lo = ("ce_sequences", 1) if 2 * p["lm_losses"] > p["evaluate"] else ("eval_sequences", 1)
    else:
        steps = STEP_COPIES * tc.batch_tokens * tc.expansion * cfg.d_model * 4
        name, lo = ("batch_tokens", 64) if steps > p["train"] / 2 else ("expansion", 8)
    best = largest_fitting(
        lambda n: peak_bytes(replace(tc, **cast(dict[str, Any], {name: n})), cfg, corpus_size) <= limit,
        lo,
        getattr(tc, name),
    )
    if best is None:
        return (
            total,
            name,
            "smaller settings (expansion, batch_tokens, eval_sequences, ce_sequences) or a smaller model",
        )
    F = (best if name == "expansion" else tc.expansion) * cfg.d_model
    return total, name, f"{name} at most {best:,} (an SAE of {F:,} features on this model)"


class ActivationStream:
    """Batches of activations (batch_tokens, d) from random windows of the training tokens: a buffer
    of `fill` sequences of n_ctx is run through the model, shuffled, and served twice over before the
    next is made (each activation is seen twice, in different batches)."""

    def __init__(self, model: GPT, ids: torch.Tensor, layer: int, seed: int, fill: int = STREAM_FILL) -> None:
        self.model, self.ids, self.layer = model, ids, layer
        self.T = min(model.cfg.n_ctx, len(ids) - 1)
        if self.T < 2:
            raise SAEError("corpus", "the training text is too short: it needs at least 3 tokens")
        self.fill = fill
        self.gen = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def buffer(self) -> torch.Tensor:
        starts = torch.randint(0, len(self.ids) - self.T + 1, (self.fill,), generator=self.gen)
        idx = torch.stack([self.ids[s : s + self.T] for s in starts.tolist()])  # (fill, T)
        acts = torch.cat([residuals(self.model, chunk, self.layer) for chunk in idx.split(16)])
        return acts.reshape(-1, acts.size(-1))  # (fill * T, d)

    def batches(self, batch_tokens: int) -> Iterator[torch.Tensor]:
        while True:
            buf = self.buffer()
            for _ in range(2):
                for b in buf[torch.randperm(len(buf), generator=self.gen)].split(batch_tokens):
                    if len(b) == batch_tokens:
                        yield b


def auxk_loss(sae: SAE, x: torch.Tensor, x_hat: torch.Tensor, pre: torch.Tensor, dead: torch.Tensor) -> torch.Tensor:
    """AuxK (Gao et al.): the k_aux = d/2 largest pre-activations among the dead features must
    reconstruct the error the live ones left, x - x_hat (x: what is reconstructed, the stream for an
    SAE, the MLP's output for a transcoder); scaled down while few features are dead."""
    n_dead = int(dead.sum())
    if not n_dead:
        return x.new_zeros(())
    k_aux = min(x.size(-1) // 2, n_dead)
    masked = torch.where(dead[None], pre, torch.full_like(pre, -math.inf))
    top = masked.topk(k_aux, dim=-1)
    f = torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))
    err = (x - x_hat).detach()
    return min(n_dead / k_aux, 1.0) * (f @ sae.W_dec - err).pow(2).sum(-1).mean()


@torch.no_grad()
def resample_dead(sae: SAE, opt: torch.optim.Adam, x: torch.Tensor, x_hat: torch.Tensor, dead: torch.Tensor) -> int:
    """ReLU: point each dead feature at one of the batch's worst-reconstructed inputs (its error's
    direction as decoder row; the encoder column the same, at a fifth of the live columns' mean
    norm; bias 0) and clear Adam's moments for them. Returns how many were resampled."""
    rows = dead.nonzero().flatten()
    if not len(rows):
        return 0
    err = x - x_hat  # (N, d)
    worst = err.pow(2).sum(-1).topk(min(len(rows), len(x))).indices
    rows = rows[: len(worst)]
    dirs = err[worst] / err[worst].norm(dim=-1, keepdim=True).clamp_min(1e-8)
    alive = ~dead
    scale = 0.2 * (sae.W_enc[:, alive].norm(dim=0).mean() if alive.any() else torch.tensor(1.0))
    sae.W_dec[rows] = dirs
    sae.W_enc[:, rows] = dirs.T * scale
    sae.b_enc[rows] = 0.0
    for p, index in ((sae.W_dec, (rows,)), (sae.W_enc, (slice(None), rows)), (sae.b_enc, (rows,))):
        state = opt.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq"):
            if key in state:
                state[key][index] = 0.0
    return len(rows)


@dataclass
class TrainState:
    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0
    history: list[dict] = field(default_factory=list)  # one record every `log_every` steps
    resampled: int = 0


def _progress(tc: SAETrainConfig, st: TrainState) -> float:
    """How far the run is, 0..1: by tokens, or by time when the budget ends it sooner."""
    by_tokens = st.tokens / tc.max_tokens
    return min(1.0, max(by_tokens, st.elapsed / tc.time_budget if tc.time_budget else 0.0))


def _step(
    sae: SAE,
    opt: torch.optim.Adam,
    x: torch.Tensor,
    tc: SAETrainConfig,
    since: torch.Tensor,
    y: torch.Tensor | None = None,
) -> dict:
    """One update on a batch x (N, d), reconstructing y (an SAE: x itself; a transcoder: the MLP's
    output); `since` (F,) counts tokens since each feature last fired. TopK decodes only the k chosen
    rows of W_dec (embedding_bag: N x k x d instead of N x F x d)."""
    y = x if y is None else y
    pre = sae.pre_acts(x)  # (N, F)
    dead = since >= tc.dead_after_tokens
    if tc.activation == "topk":
        top = pre.topk(tc.k, dim=-1)
        vals, idx = torch.relu(top.values), top.indices  # (N, k)
        x_hat = F.embedding_bag(idx, sae.W_dec, per_sample_weights=vals, mode="sum") + sae.b_dec
        mse = (x_hat - y).pow(2).sum(-1).mean()
        extra = tc.aux_coefficient * auxk_loss(sae, y, x_hat, pre, dead)
        fired, active = idx[vals > 0], (vals > 0).sum(-1)
    else:
        f = torch.relu(pre)
        x_hat = sae.decode(f)
        mse = (x_hat - y).pow(2).sum(-1).mean()
        extra = tc.l1_coefficient * f.sum(-1).mean()  # decoder rows are unit length: L1 of f is honest
        fired, active = (f > 0).any(0).nonzero().flatten(), (f > 0).sum(-1)
    opt.zero_grad(set_to_none=True)
    (mse + extra).backward()
    opt.step()
    sae.normalize_decoder()
    with torch.no_grad():
        since += len(x)
        since[fired] = 0
        return {
            "mse": float(mse),
            "fvu": float(mse / (y - y.mean(0)).pow(2).sum(-1).mean()),  # fraction of variance unexplained
            "l0": float(active.float().mean()),
            "extra": float(extra),
            "dead": int(dead.sum()),
            "x_hat": x_hat.detach(),
        }


def train_sae(
    model: GPT,
    train_ids: torch.Tensor,
    tc: SAETrainConfig,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    log_every: int = 20,
    batches: Iterator[torch.Tensor] | None = None,
) -> tuple[SAE, SAE, TrainState]:
    """Train an SAE on blocks.{layer}.hook_resid_post over train_ids (1-D token ids), or on `batches`
    of that stream made already (a run's timeline reads one stream for its SAE and its lens). Returns
    the trained SAE, the SAE as it started (the figures' baseline) and the run's record. The model is
    only read (eval mode, no gradients)."""
    tc.validate(model)
    torch.manual_seed(tc.seed)
    d = model.cfg.d_model
    sae = SAE(SAEConfig(d, tc.expansion * d, tc.layer, tc.activation, tc.k))
    if batches is None:
        batches = ActivationStream(model.eval(), train_ids.long(), tc.layer, tc.seed).batches(tc.batch_tokens)
    with torch.no_grad():
        first = next(batches)
        sae.b_dec.copy_(first.mean(0))  # start at the stream's mean: features then explain deviations
    start = copy.deepcopy(sae)
    opt = torch.optim.Adam(sae.parameters(), lr=tc.lr)
    since = torch.zeros(sae.cfg.d_sae, dtype=torch.long)
    st, t0 = TrainState(), time.perf_counter()
    x = first
    while True:
        frac = _progress(tc, st)
        if frac >= 1.0:
            break
        stop_if(should_stop, "training the SAE")
        lr = tc.lr * min(1.0, (1.0 - frac) / 0.2)
        for g in opt.param_groups:
            g["lr"] = lr
        rec = _step(sae, opt, x, tc, since)
        if tc.activation == "relu" and st.step % 250 == 249:
            st.resampled += resample_dead(sae, opt, x, rec["x_hat"], since >= tc.dead_after_tokens)
        st.step, st.tokens, st.elapsed = st.step + 1, st.tokens + len(x), time.perf_counter() - t0
        if st.step % log_every == 0 or st.step == 1:
            entry = {k: round(v, 5) if isinstance(v, float) else v for k, v in rec.items() if k != "x_hat"}
            entry.update(step=st.step, tokens=st.tokens, elapsed=round(st.elapsed, 2), lr=round(lr, 7))
            st.history.append(entry)
            if on_progress is not None:
                on_progress({**entry, "progress": round(_progress(tc, st), 4)})
        x = next(batches)
    return sae, start, st


# --------------------------------------------------------------------------------------------
# Evaluation: the quality figures and each feature's statistics, on held-out text
# --------------------------------------------------------------------------------------------


def held_out_windows(val_ids: torch.Tensor, n_ctx: int, n: int, error: type[SettingError] = SAEError) -> torch.Tensor:
    """The first n non-overlapping windows of n_ctx held-out tokens, (n', n_ctx) with n' <= n (an SAE's,
    a transcoder set's and a tuned lens's figures are measured on them)."""
    n = min(n, len(val_ids) // n_ctx)
    if n < 1:
        raise error("corpus", f"the held-out text has {len(val_ids)} tokens; it needs at least n_ctx={n_ctx}")
    return val_ids[: n * n_ctx].long().view(n, n_ctx)


@torch.no_grad()
def stream_of(model: GPT, seqs: torch.Tensor, layer: int) -> torch.Tensor:
    """(S, T) token ids -> the stream at the layer for every token, (S * T, d)."""
    return torch.cat([residuals(model, s, layer) for s in seqs.split(16)]).reshape(-1, model.cfg.d_model)


@torch.no_grad()
def sparse_codes(
    sae: SAE, x: torch.Tensor, y: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """x (N, d) -> the nonzero activations as (token, feature, value) triples, and the reconstruction
    figures on y (an SAE: x itself; a transcoder: the MLP's output): fraction of variance explained,
    L0, mean squared error."""
    y = x if y is None else y
    toks, feats, vals, sq = [], [], [], 0.0
    step = codes_chunk(sae.cfg.d_sae)
    for i in range(0, len(x), step):
        x_hat, f = sae(x[i : i + step])
        sq += float((x_hat - y[i : i + step]).pow(2).sum())
        t, j = f.nonzero(as_tuple=True)
        toks.append(t + i)
        feats.append(j)
        vals.append(f[t, j])
    total = float((y - y.mean(0)).pow(2).sum())
    tok, feat, val = torch.cat(toks), torch.cat(feats), torch.cat(vals)
    figures = {"fve": 1.0 - sq / total, "l0": len(val) / len(x), "mse": sq / len(x)}
    return tok, feat, val, figures


@torch.no_grad()
def feature_stats(tok: torch.Tensor, feat: torch.Tensor, val: torch.Tensor, n_tokens: int, n_features: int) -> dict:
    """Per feature, from its nonzero activations: density, mean and max activation, its TOP_EXAMPLES
    largest (token index and value, -1 / 0 where it fired less often) and a histogram of its
    activations over HIST_BINS equal bins from 0 to its max."""
    count = torch.bincount(feat, minlength=n_features)
    act_sum = torch.zeros(n_features, dtype=torch.float64).index_add_(0, feat, val.double())
    max_act = torch.zeros(n_features).scatter_reduce_(0, feat, val, reduce="amax", include_self=True)
    order = torch.argsort(val, descending=True, stable=True)
    order = order[torch.argsort(feat[order], stable=True)]  # by feature, largest first within each
    starts = torch.cumsum(count, 0) - count
    rank = torch.arange(len(order)) - starts[feat[order]]
    keep = order[rank < TOP_EXAMPLES]
    slot = (torch.arange(len(order)) - starts[feat[order]])[rank < TOP_EXAMPLES]
    top_index = torch.full((n_features, TOP_EXAMPLES), -1, dtype=torch.int32)
    top_value = torch.zeros(n_features, TOP_EXAMPLES)
    top_index[feat[keep], slot] = tok[keep].int()
    top_value[feat[keep], slot] = val[keep]
    bins = (val / max_act[feat].clamp_min(1e-12) * HIST_BINS).long().clamp(0, HIST_BINS - 1)
    hist = torch.zeros(n_features * HIST_BINS, dtype=torch.int32).index_add_(
        0, feat * HIST_BINS + bins, torch.ones_like(bins, dtype=torch.int32)
    )
    return {
        "density": count.float() / n_tokens,
        "mean_act": (act_sum / count.clamp_min(1)).float(),
        "max_act": max_act,
        "top_index": top_index,
        "top_value": top_value,
        "hist": hist.view(n_features, HIST_BINS),
    }


def pca_fve(x: torch.Tensor, k: int) -> float:
    """The variance the best rank-k linear reconstruction (the top k principal components of these
    very activations) explains: what k dense directions can do, against k sparse features."""
    xc = (x - x.mean(0)).double()
    eig = torch.linalg.eigvalsh(xc.T @ xc).flip(0)  # largest first
    return float(eig[: max(0, k)].sum() / eig.sum())


@contextmanager
def replacing(model: GPT, name: str, fn: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[GPT]:
    """Inside the block the hook point `name` passes fn(x) on instead of x, in the model's current
    mode (GPT.hooks would switch to explain mode: three times slower here, for the same losses)."""
    handle = model.hook_dict[name].register_forward_hook(lambda _mod, _inp, out: fn(out))
    try:
        yield model
    finally:
        handle.remove()


@torch.no_grad()
def lm_losses(model: GPT, sae: SAE, seqs: torch.Tensor) -> dict:
    """Mean next-token loss (nats) on held-out sequences: clean, with the SAE's reconstruction in place
    of the stream at its layer, and with that stream zeroed (the layer's whole state ablated)."""
    inputs, targets = seqs[:, :-1], seqs[:, 1:]

    def mean_loss() -> float:
        total = 0.0
        for i, t in zip(inputs.split(8), targets.split(8)):
            _, loss = model(i, t)
            assert loss is not None
            total += float(loss) * len(i)
        return total / len(inputs)

    clean = mean_loss()
    with replacing(model, sae.cfg.hook_name, lambda x: sae(x)[0]):
        spliced = mean_loss()
    with replacing(model, sae.cfg.hook_name, torch.zeros_like):
        zero = mean_loss()
    return {"clean": clean, "sae": spliced, "zero_ablation": zero}


def quality(model: GPT, sae: SAE, start: SAE, val_ids: torch.Tensor, tc: SAETrainConfig) -> tuple[dict, dict]:
    """The figures every SAE is shown with, each beside its baseline, and each feature's statistics
    (with the held-out token ids they were measured on)."""
    seqs = held_out_windows(val_ids, model.cfg.n_ctx, tc.eval_sequences)
    x = stream_of(model.eval(), seqs, tc.layer)
    tok, feat, val, fig = sparse_codes(sae, x)
    stats = feature_stats(tok, feat, val, len(x), sae.cfg.d_sae)
    _, s_feat, _, s_fig = sparse_codes(start, x)
    s_density = torch.bincount(s_feat, minlength=sae.cfg.d_sae).float() / len(x)
    ce = lm_losses(model, sae, seqs[: tc.ce_sequences])
    added, ablated = ce["sae"] - ce["clean"], ce["zero_ablation"] - ce["clean"]
    figures = {
        "tokens": len(x),
        "sequences": len(seqs),
        "ce_sequences": min(tc.ce_sequences, len(seqs)),
        "fve": fig["fve"],
        "fve_pca_same_l0": pca_fve(x, round(fig["l0"])),
        "fve_at_init": s_fig["fve"],
        "l0": fig["l0"],
        "l0_at_init": s_fig["l0"],
        "d_model": model.cfg.d_model,
        "loss_clean": ce["clean"],
        "loss_sae": ce["sae"],
        "loss_zero_ablation": ce["zero_ablation"],
        "loss_added": added,
        "loss_added_zero_ablation": ablated,
        "loss_recovered": 1.0 - added / ablated if ablated > 0 else None,  # SAELens's "CE loss score"
        "dead": int((stats["density"] == 0).sum()),
        "dead_at_init": int((s_density == 0).sum()),
        "dense": int((stats["density"] > DENSE).sum()),
        "dense_at_init": int((s_density > DENSE).sum()),
        "d_sae": sae.cfg.d_sae,
        "dense_threshold": DENSE,
    }
    return figures, {**stats, "eval_ids": seqs.int()}


# --------------------------------------------------------------------------------------------
# Files: SAELens's folder plus gptscope's two files
# --------------------------------------------------------------------------------------------


def saelens_config(sae: SAE, model_name: str, n_ctx: int) -> dict:
    """cfg.json as SAELens 6 writes it (architecture "topk" with k, or "standard" for ReLU), with the
    hook under our dotted name; the older top-level keys too, for pre-6 loaders."""
    c = sae.cfg
    meta = {
        "model_name": model_name,
        "hook_name": c.hook_name,
        "hook_layer": c.layer,
        "hook_head_index": None,
        "context_size": n_ctx,
        "prepend_bos": False,
        "dataset_path": None,
        "sae_lens_version": "6.0.0",
        "sae_lens_training_version": None,
    }
    cfg = {
        "architecture": "topk" if c.activation == "topk" else "standard",
        "d_in": c.d_in,
        "d_sae": c.d_sae,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": True,
        "normalize_activations": "none",
        "reshape_activations": "none",
        "metadata": meta,
        "model_name": model_name,
        "hook_name": c.hook_name,
        "hook_layer": c.layer,
        "activation_fn": c.activation,
        "context_size": n_ctx,
    }
    if c.activation == "topk":
        cfg["k"] = c.k
        cfg["activation_fn_kwargs"] = {"k": c.k}
    return cfg


def _fsync_write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save_folder(
    folder: str | Path, blobs: dict[str, bytes], meta_file: str, meta: dict, error: type[SettingError]
) -> Path:
    """Write an artefact's folder atomically (an SAE's, a transcoder set's, a tuned lens's): every file
    of `blobs` into a hidden sibling folder, then `meta` with the sha256 of each as its "files" in
    `meta_file`, then one rename. Refuses to replace an existing folder (error naming "name")."""
    final = Path(folder)
    if final.exists():
        raise error("name", f"{final} already exists; choose another name")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name, blob in blobs.items():
        _fsync_write(tmp / name, blob)
    files = {name: hashlib.sha256(blob).hexdigest() for name, blob in blobs.items()}
    _fsync_write(tmp / meta_file, json.dumps({**meta, "files": files}, indent=1).encode("utf-8"))
    try:
        os.replace(tmp, final)  # an empty `final` made meanwhile would be replaced; a full one refuses
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise error("name", f"could not write {final}: {e}") from None
    return final


def save_sae(
    folder: str | Path, sae: SAE, stats: dict[str, torch.Tensor], meta: dict, model_name: str, n_ctx: int
) -> Path:
    """Write the SAE folder atomically (save_folder); refuses to replace an existing folder."""
    blobs = {
        CFG_FILE: json.dumps(saelens_config(sae, model_name, n_ctx), indent=1).encode("utf-8"),
        WEIGHTS_FILE: st_save({k: v.detach().float().contiguous() for k, v in sae.state_dict().items()}),
        SPARSITY_FILE: st_save({"sparsity": stats["density"].clamp_min(1e-10).log10().contiguous()}),
        STATS_FILE: st_save({k: v.contiguous() for k, v in stats.items()}, metadata={"format": FORMAT}),
    }
    full = {**meta, "format": FORMAT, "version": 1, "config": asdict(sae.cfg)}
    return save_folder(folder, blobs, META_FILE, full, SAEError)


@dataclass
class LoadedSAE:
    sae: SAE
    meta: dict
    stats: dict[str, torch.Tensor]
    path: Path
    derived: dict = field(default_factory=dict)  # what a server computes from it once (labels, logit effects)

    @property
    def name(self) -> str:
        return self.path.name


def _read(folder: Path, name: str, sha: object) -> bytes:
    try:
        return ckpt.read_hashed(folder, name, sha, "SAE", META_FILE)
    except ckpt.CheckpointError as e:
        raise SAEError("sae", str(e)) from None


def _tensors(folder: Path, name: str, sha: object) -> dict[str, torch.Tensor]:
    try:
        return ckpt.read_tensors(folder, name, sha, "SAE", META_FILE)
    except ckpt.CheckpointError as e:
        raise SAEError("sae", str(e)) from None


def read_format_json(
    folder: str | Path, meta_file: str, fmt: str, noun: str, error: type[SettingError], field: str
) -> dict:
    """checkpoint.read_format_json for an artefact's folder (an SAE's, a transcoder set's, a tuned
    lens's), its refusal raised as error(field, why)."""
    try:
        return ckpt.read_format_json(folder, meta_file, fmt, noun, files=True)
    except ckpt.CheckpointError as e:
        raise error(field, str(e)) from None


def read_meta(folder: str | Path) -> dict:
    return read_format_json(folder, META_FILE, FORMAT, "SAE", SAEError, "sae")


def _config(cfg_json: dict) -> SAEConfig:
    try:
        topk = cfg_json["architecture"] == "topk"
        c = SAEConfig(
            int(cfg_json["d_in"]),
            int(cfg_json["d_sae"]),
            int(cfg_json["hook_layer"]),
            "topk" if topk else "relu",
            int(cfg_json["k"]) if topk else 0,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise SAEError("sae", f"{CFG_FILE} lacks or misstates a field: {e}") from None
    if cfg_json["architecture"] not in ("topk", "standard") or cfg_json.get("hook_name") != c.hook_name:
        raise SAEError("sae", f"{CFG_FILE}: only topk and standard SAEs on {HOOK} are read")
    if min(c.d_in, c.d_sae) < 1 or (topk and not 1 <= c.k <= c.d_sae):
        raise SAEError("sae", f"{CFG_FILE}: d_in, d_sae and k must be positive, k at most d_sae")
    return c


def load_sae(folder: str | Path) -> LoadedSAE:
    """Read an SAE folder: JSON and safetensors only, every file checked against its sha256."""
    folder = Path(folder)
    meta = read_meta(folder)
    files = meta["files"]
    try:
        cfg_json = json.loads(_read(folder, CFG_FILE, files.get(CFG_FILE)).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SAEError("sae", f"{CFG_FILE} is not valid JSON: {e}") from None
    cfg = _config(cfg_json)
    weights = _tensors(folder, WEIGHTS_FILE, files.get(WEIGHTS_FILE))
    sae = SAE(cfg)
    expected = {k: v.shape for k, v in sae.state_dict().items()}
    if {k: v.shape for k, v in weights.items()} != expected:
        raise SAEError("sae", f"{WEIGHTS_FILE} does not hold W_enc, b_enc, W_dec, b_dec of the shapes {CFG_FILE} gives")
    sae.load_state_dict({k: v.float() for k, v in weights.items()})
    stats = _tensors(folder, STATS_FILE, files.get(STATS_FILE))
    _check_stats(stats, cfg.d_sae)
    return LoadedSAE(sae.eval().requires_grad_(False), meta, stats, folder)


def _check_stats(stats: dict[str, torch.Tensor], d_sae: int) -> None:
    """feature_stats' tensors, one row per feature (top_index and top_value of one shape), and the
    held-out token ids (S, T) that top_index points into (-1: none)."""
    dims = {"density": 1, "mean_act": 1, "max_act": 1, "top_index": 2, "top_value": 2, "hist": 2, "eval_ids": 2}
    if set(stats) != set(dims) or any(
        stats[k].dim() != n or (k != "eval_ids" and len(stats[k]) != d_sae) for k, n in dims.items()
    ):
        raise SAEError("sae", f"{STATS_FILE} does not hold one row per feature of {sorted(dims)}")
    top, ids = stats["top_index"], stats["eval_ids"]
    if top.shape != stats["top_value"].shape or any(t.is_floating_point() or t.dtype == torch.bool for t in (top, ids)):
        raise SAEError("sae", f"{STATS_FILE}: top_index and eval_ids must be integers, top_value of top_index's shape")
    if top.numel() and not -1 <= int(top.min()) <= int(top.max()) < ids.numel():
        raise SAEError("sae", f"{STATS_FILE}: top_index must name held-out tokens, -1..{ids.numel() - 1}")


# --------------------------------------------------------------------------------------------
# One run, start to finish (the `gptscope sae` command and the API's jobs)
# --------------------------------------------------------------------------------------------


def default_name(tc: SAETrainConfig) -> str:
    act = f"topk{tc.k}" if tc.activation == "topk" else "relu"
    return f"L{tc.layer}-x{tc.expansion}-{act}-s{tc.seed}"


def train_and_save(
    ck: ckpt.Checkpoint,
    corpus_spec: str,
    tc: SAETrainConfig,
    folder: str | Path,
    command: str,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Train an SAE on checkpoint `ck` (loaded for this run: not a model the app serves)
    over the training split of `corpus_spec`, measure it on the held-out split, and save it in
    `folder`. Returns what gptscope_sae.json records."""
    folder = Path(folder)
    run = artefact.prepare(ck, corpus_spec, tc, folder, SAEError, should_stop)
    run.started()
    sae, start, st = train_sae(run.model, run.train_ids, tc, on_progress, should_stop)
    run.trained()
    if on_progress is not None:
        on_progress({"phase": "evaluating", "step": st.step, "tokens": st.tokens, "progress": 1.0})
    figures, stats = quality(run.model, sae, start, run.val_ids, tc)
    meta = artefact.record(
        folder, ck, run, tc, command, st, hook_name=sae.cfg.hook_name, resampled=st.resampled, quality=figures
    )
    save_sae(folder, sae, stats, meta, str(ck.meta.name or "model"), run.model.cfg.n_ctx)
    return meta
