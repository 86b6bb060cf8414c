"""Training: corpus -> tokenizer -> GPT, with AdamW, warmup + cosine, clipping, eval, checkpoints.

One process:      python -m model.train --corpus shakespeare --max-steps 200 --out runs/a
Several (DDP):    torchrun --nproc_per_node=2 -m model.train --corpus shakespeare --out runs/a

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
import hashlib
import json
import math
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
from tqdm import tqdm

from . import checkpoint as ckpt
from . import corpus as corpus_mod
from .bpe import train_bpe
from .gpt import GPT, PRESETS, GPTConfig, preset_config
from .schedules import warmup_cosine
from .tokenizers import PUBLIC_ENCODINGS, encoding_from_spec


@dataclass
class TrainConfig:
    corpus: str = "shakespeare"  # 'shakespeare' or a path to a UTF-8 text file
    preset: str = "cpu"  # architecture preset from model.gpt.PRESETS
    tokenizer: str = "bpe"  # 'bpe' trains a byte-level BPE on the corpus; or gpt2 / cl100k_base / o200k_base
    vocab_size: int = 2048  # size of the trained BPE vocabulary (bpe only)
    max_steps: int | None = None  # stop after this many updates ...
    time_budget: float | None = None  # ... or after this many seconds of training (one of the two)
    batch_size: int = 32  # sequences per update (per process)
    seq_len: int = 0  # tokens per sequence; 0 means the model's context length
    max_lr: float = 2e-3
    min_lr_ratio: float = 0.1  # cosine ends at max_lr * min_lr_ratio
    warmup_steps: int = 30
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # clip the global gradient norm to this (0 = off)
    eval_interval: int = 0  # updates between validation evaluations; 0 = about 10 per run
    eval_batches: int = 2
    seed: int = 1337
    device: str = "auto"  # auto = cuda when present, else cpu
    precision: str = "auto"  # auto = bf16 autocast on cuda, float32 on cpu; or "bf16" / "fp32" anywhere
    val_fraction: float = corpus_mod.VAL_FRACTION
    snapshot_fractions: tuple[float, ...] = ()  # also save snapshots at these fractions of the run
    overrides: dict = field(default_factory=dict)  # model config fields that replace the preset's
    name: str = ""  # checkpoint name shown in the app

    def validate(self) -> None:
        if (self.max_steps is None) == (self.time_budget is None):
            raise ValueError("give exactly one of max_steps or time_budget")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        if self.time_budget is not None and not 0 < self.time_budget < 7 * 24 * 3600:
            raise ValueError("time_budget must be a positive number of seconds")
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; choose one of {sorted(PRESETS)}")
        if self.tokenizer != "bpe" and self.tokenizer not in PUBLIC_ENCODINGS:
            raise ValueError(f"tokenizer must be 'bpe' or one of {list(PUBLIC_ENCODINGS)}")
        if self.batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if self.precision not in ("auto", "bf16", "fp32"):
            raise ValueError("precision must be auto, bf16 or fp32")


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


def get_batch(data: torch.Tensor, batch_size: int, seq_len: int, seed: int, step: int, rank: int = 0):
    """(x, y) of shape (B, seq_len): random windows of data and the same windows shifted by one."""
    g = torch.Generator().manual_seed(hash((seed, step, rank)) % (2**62))
    starts = torch.randint(0, len(data) - seq_len - 1 + 1, (batch_size,), generator=g)
    offs = torch.arange(seq_len + 1)
    chunk = data[starts[:, None] + offs]  # (B, seq_len + 1)
    return chunk[:, :-1], chunk[:, 1:]


def param_groups(model: GPT, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        is_matrix = p.dim() == 2 and name.startswith("blocks.")
        (decay if is_matrix else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def optimizer_state_tensors(opt: torch.optim.Optimizer, model: GPT) -> dict[str, torch.Tensor]:
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for p, st in opt.state.items():
        for k, v in st.items():
            out[f"{names[id(p)]}::{k}"] = v if torch.is_tensor(v) else torch.tensor(v)
    return out


def load_optimizer_state(opt: torch.optim.Optimizer, model: GPT, tensors: dict[str, torch.Tensor]) -> None:
    params = dict(model.named_parameters())
    for key, v in tensors.items():
        name, k = key.split("::")
        p = params[name]
        opt.state[p][k] = v.to(p.device) if k != "step" else v.float()


@torch.no_grad()
def evaluate_ids(model: GPT, ids: torch.Tensor, seq_len: int, batch_size: int = 16,
                 max_windows: int | None = None) -> tuple[float, int]:
    """Sum of next-token losses (nats) over consecutive windows of ids, and how many tokens were
    predicted. Each window of seq_len + 1 tokens predicts its last seq_len tokens."""
    model.eval()
    device = next(model.parameters()).device
    n_windows = (len(ids) - 1) // seq_len
    if max_windows is not None:
        n_windows = min(n_windows, max_windows)
    total, count = 0.0, 0
    for i in range(0, n_windows, batch_size):
        rows = [ids[(w * seq_len):(w * seq_len) + seq_len + 1] for w in range(i, min(n_windows, i + batch_size))]
        chunk = torch.stack(rows).to(device)
        logits, _ = model(chunk[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)),
                                                 chunk[:, 1:].reshape(-1), reduction="sum")
        total += float(loss)
        count += chunk[:, 1:].numel()
    rest = len(ids) - 1 - n_windows * seq_len
    if rest > 0 and max_windows is None:  # the tail that does not fill a whole window
        chunk = ids[n_windows * seq_len:].to(device)[None]
        logits, _ = model(chunk[:, :-1])
        total += float(torch.nn.functional.cross_entropy(logits.float()[0], chunk[0, 1:], reduction="sum"))
        count += rest
    return total, count


def evaluate_text(model: GPT, enc, text: str, batch_size: int = 16) -> dict:
    """Loss of the model on a whole text: nats per token and bits per character.

    Bits per character divide the total loss by the number of characters the predicted tokens
    cover (every token but the first), so models with different tokenizers compare fairly.
    """
    ids = torch.tensor(enc.encode_ordinary(text), dtype=torch.long)
    if len(ids) < 2:
        raise ValueError("text is too short to evaluate (needs at least two tokens)")
    nats, n = evaluate_ids(model, ids, model.cfg.n_ctx, batch_size)
    chars = len(text) - len(enc.decode([int(ids[0])]))
    return {"tokens": int(n), "chars": int(chars), "nats_per_token": nats / n,
            "bits_per_char": nats / math.log(2) / max(1, chars),
            "perplexity": math.exp(nats / n)}


class Cancelled(Exception):
    pass


def build_tokenizer(tc: TrainConfig, train_text: str) -> dict:
    if tc.tokenizer == "bpe":
        merges = train_bpe(train_text, tc.vocab_size)
        return {**merges.to_dict(), "trained_on": "train split of the corpus", "vocab_size": merges.n_vocab}
    return {"kind": "tiktoken", "name": tc.tokenizer}


def train(tc: TrainConfig, out: str | Path | None = None, resume: str | Path | None = None,
          progress: bool = True, on_event: Callable[[dict], None] | None = None,
          should_stop: Callable[[], bool] | None = None, command: str | None = None,
          weights_dtype: torch.dtype | None = None, save_optimizer: bool = True) -> ckpt.Checkpoint:
    """Train a model; returns the final checkpoint (also written to `out` by rank 0)."""
    tc.validate()
    dd = setup_distributed()
    device = pick_device(tc.device, dd)
    emit = on_event if (on_event and dd.main) else (lambda e: None)
    t_setup = time.time()

    # ---- data and tokenizer -----------------------------------------------------------------
    corpus = corpus_mod.load(tc.corpus)
    train_text, val_text = corpus.split(tc.val_fraction)
    prev = ckpt.load(resume, device, with_optimizer=True) if resume else None
    tok_spec = prev.meta["tokenizer"] if prev else build_tokenizer(tc, train_text)
    enc = encoding_from_spec(tok_spec)
    train_ids = torch.from_numpy(corpus_mod.encode(enc, train_text).astype(np.int64))
    val_ids = torch.from_numpy(corpus_mod.encode(enc, val_text).astype(np.int64))

    # ---- model ------------------------------------------------------------------------------
    if prev:
        cfg = prev.config
    else:
        cfg = preset_config(tc.preset, **{"vocab_size": enc.n_vocab, **tc.overrides})
    if cfg.vocab_size < enc.n_vocab:
        raise ValueError(f"model vocabulary {cfg.vocab_size} is smaller than the tokenizer's {enc.n_vocab}")
    seq_len = tc.seq_len or cfg.n_ctx
    if seq_len > cfg.n_ctx:
        raise ValueError(f"seq_len {seq_len} exceeds the context length {cfg.n_ctx}")
    for label, ids in (("training", train_ids), ("validation", val_ids)):
        if len(ids) < seq_len + 2:
            raise corpus_mod.CorpusError(
                f"the {label} split has {len(ids)} tokens, too few for one sequence of {seq_len} + 1; "
                f"give a longer text or a shorter --seq-len")

    torch.manual_seed(tc.seed)
    model = prev.model if prev else GPT(cfg)
    model.to(device).train()
    ddp_model = model
    if dd.world > 1:
        ddp_model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[dd.local_rank] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(param_groups(model, tc.weight_decay), lr=tc.max_lr, betas=(tc.beta1, tc.beta2),
                            eps=1e-8, fused=device.type == "cuda")
    start_step, history, evals = 0, [], []
    total_steps = tc.max_steps
    if prev:
        load_optimizer_state(opt, model, prev.optimizer_state)
        start_step = int(prev.meta["step"])
        history = prev.meta.get("history", [])
        evals = prev.meta.get("evals", [])
    use_bf16 = tc.precision == "bf16" or (tc.precision == "auto" and device.type == "cuda")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16)
    min_lr = tc.max_lr * tc.min_lr_ratio
    ln_v = math.log(cfg.vocab_size)

    def schedule_meta(total: int) -> dict:
        return {"kind": "warmup_cosine", "max_lr": tc.max_lr, "min_lr": min_lr, "warmup": tc.warmup_steps,
                "total_steps": total}

    def val_loss() -> float:
        nats, n = evaluate_ids(model, val_ids, seq_len, batch_size=tc.batch_size,
                               max_windows=tc.eval_batches * tc.batch_size)
        model.train()
        return nats / n

    def meta(step: int, final: bool) -> dict:
        return {
            "name": tc.name or f"{corpus.name}-{tc.preset}",
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tokenizer": tok_spec, "corpus": {**corpus.describe(), "train_tokens": len(train_ids),
                                              "val_tokens": len(val_ids), "val_fraction": tc.val_fraction},
            "train_config": {**asdict(tc), "snapshot_fractions": list(tc.snapshot_fractions)},
            "step": step, "final": final, "schedule": schedule_meta(total_steps or step),
            "history": history, "evals": evals, "uniform_loss": ln_v,
            "device": device.type, "world_size": dd.world, "torch": torch.__version__,
            "command": command or "python -m model.train " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        }

    # fraction 0 (the untrained model) is known before the length of a time-budget run is
    snapshots_planned = False
    snapshots_at: set[int] = {start_step} if 0.0 in tc.snapshot_fractions and start_step == 0 else set()
    snap_dir = Path(out) / "snapshots" if out else None
    probe_steps = 0 if total_steps else max(5, min(tc.warmup_steps, 20))
    replan_step: int | None = None
    plan_origin = (start_step, 0.0)
    deadline = t_setup + tc.time_budget if tc.time_budget is not None else None
    eval_every = tc.eval_interval
    t0 = time.time()
    tokens_per_step = tc.batch_size * seq_len * dd.world
    bar = tqdm(total=total_steps, initial=start_step, disable=not (progress and dd.main), unit="step",
               dynamic_ncols=True, desc="train")
    emit({"type": "start", "total_steps": total_steps, "setup_s": time.time() - t_setup,
          "uniform_loss": ln_v, "config": cfg.to_dict()})

    step = start_step
    last_log = time.time()
    tokens_since = 0
    while True:
        if tc.time_budget is not None and (step - start_step == probe_steps or step == replan_step):
            # time budget: from the speed so far, fix the number of updates (all ranks agree). Planned
            # once after a few steps, and once more a third of the way in, when the speed is known
            # better; the schedule's total_steps is the last plan.
            since, t_since = (start_step, t0) if replan_step is None else plan_origin
            per_step = (time.time() - t_since) / max(1, step - since)
            # the budget counts from the call, so tokenizer training and encoding are included
            est = torch.tensor([step + int(max(0.0, tc.time_budget - (time.time() - t_setup)) / per_step)])
            if dd.world > 1:
                dist.broadcast(est, 0)
            total_steps = max(step + 1, int(est))
            if replan_step is None:
                replan_step = step + max(1, (total_steps - step) // 3)
                plan_origin = (step, time.time())
            else:
                replan_step = -1
                if snapshots_planned:  # move the snapshots not yet taken to the new plan
                    snapshots_at = {x for x in snapshots_at if x <= step} | {
                        x for x in (min(total_steps, round(f * total_steps)) for f in tc.snapshot_fractions) if x > step}
            bar.reset(total=total_steps)
            bar.update(step)
            emit({"type": "schedule", "total_steps": total_steps})
        if deadline is not None and dd.world == 1 and total_steps is not None and time.time() >= deadline:
            break  # out of time before the plan's last step (the speed dropped): stop here
        if total_steps is not None:
            if not eval_every:
                eval_every = max(1, total_steps // 10)
            if tc.snapshot_fractions and not snapshots_planned:
                snapshots_at |= {min(total_steps, round(f * total_steps)) for f in tc.snapshot_fractions}
                snapshots_planned = True
            if step >= total_steps:
                break
        if should_stop and should_stop():
            raise Cancelled(f"cancelled at step {step}")
        if snap_dir and dd.main and step in snapshots_at:
            ckpt.save(snap_dir / f"step-{step:06d}", model, meta(step, final=False),
                      optimizer_state=optimizer_state_tensors(opt, model) if save_optimizer else None)
            emit({"type": "snapshot", "step": step})

        lr = warmup_cosine(step, tc.max_lr, tc.warmup_steps, total_steps or 10**9, min_lr)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch(train_ids, tc.batch_size, seq_len, tc.seed, step, dd.rank)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with autocast:
            _, loss = ddp_model(x, y)
        loss.backward()
        # gradient norm of each block before clipping (pre- vs post-norm show different profiles)
        layer_gnorms = [float(torch.linalg.vector_norm(torch.stack(
            [p.grad.detach().norm() for p in b.parameters() if p.grad is not None]))) for b in model.blocks]
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip if tc.grad_clip > 0 else float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens_since += tokens_per_step

        loss_v = float(loss.detach())
        if dd.world > 1:
            t = torch.tensor([loss_v], device=device)
            dist.all_reduce(t)
            loss_v = float(t) / dd.world
        now = time.time()
        tok_s = tokens_since / max(1e-9, now - last_log)
        rec = {"step": step, "loss": round(loss_v, 5), "lr": lr, "grad_norm": round(float(gnorm), 5),
               "layer_grad_norms": [round(g, 5) for g in layer_gnorms],
               "tokens_per_s": round(tok_s, 1), "elapsed_s": round(now - t0, 3)}
        history.append(rec)
        last_log, tokens_since = now, 0
        if eval_every and (step % eval_every == 0 or step == total_steps):
            v = val_loss()
            evals.append({"step": step, "val_loss": round(v, 5), "train_loss": round(loss_v, 5)})
            rec["val_loss"] = round(v, 5)
        if not math.isfinite(loss_v):
            raise FloatingPointError(f"loss became {loss_v} at step {step}; lower --max-lr")
        bar.update(1)
        bar.set_postfix(loss=f"{loss_v:.3f}", val=f"{evals[-1]['val_loss']:.3f}" if evals else "-",
                        lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}")
        emit({"type": "step", **rec, "total_steps": total_steps})
    bar.close()
    if step > start_step and (not evals or evals[-1]["step"] != step):
        v = val_loss()
        evals.append({"step": step, "val_loss": round(v, 5), "train_loss": history[-1]["loss"]})
        history[-1]["val_loss"] = round(v, 5)

    if dd.world > 1:
        dist.barrier()
    model.eval()
    result = ckpt.Checkpoint(model, meta(step, final=True), Path(out) if out else None,
                             optimizer_state_tensors(opt, model))
    result.meta["train_seconds"] = round(time.time() - t0, 2)
    if out and os.environ.get("GPTSCOPE_RANK_DIGESTS"):
        from safetensors.torch import save as st_save

        blob = st_save(ckpt.weights_dict(model, weights_dtype), metadata={"format": ckpt.FORMAT})
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"rank-{dd.rank}.weights.sha256").write_text(hashlib.sha256(blob).hexdigest() + "\n")
    if out and dd.main:
        ckpt.save(out, model, result.meta, optimizer_state=result.optimizer_state if save_optimizer else None,
                  dtype=weights_dtype)
        if snap_dir and (step in snapshots_at or 1.0 in tc.snapshot_fractions):
            ckpt.save(snap_dir / f"step-{step:06d}", model, meta(step, final=True))
    emit({"type": "done", "step": step, "out": str(out) if out else None})
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    p.add_argument("--corpus", default="shakespeare", help="'shakespeare' (built in) or a path to a UTF-8 text file")
    p.add_argument("--preset", default=d.preset, choices=sorted(PRESETS))
    p.add_argument("--tokenizer", default=d.tokenizer, choices=["bpe", *PUBLIC_ENCODINGS])
    p.add_argument("--vocab-size", type=int, default=d.vocab_size, help="size of the BPE trained on the corpus")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--time-budget", type=float, help="seconds of training")
    g.add_argument("--max-steps", type=int, help="number of updates")
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--seq-len", type=int, default=d.seq_len, help="0 = the model's context length")
    p.add_argument("--max-lr", type=float, default=d.max_lr)
    p.add_argument("--min-lr-ratio", type=float, default=d.min_lr_ratio)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    p.add_argument("--weight-decay", type=float, default=d.weight_decay)
    p.add_argument("--grad-clip", type=float, default=d.grad_clip)
    p.add_argument("--eval-interval", type=int, default=d.eval_interval)
    p.add_argument("--eval-batches", type=int, default=d.eval_batches, help="validation batches per evaluation")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", default=d.device, choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default=d.precision, choices=["auto", "bf16", "fp32"],
                   help="auto: bf16 autocast on cuda, float32 on cpu")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a model config field, e.g. --set n_layer=6 --set norm=post")
    p.add_argument("--snapshots", default="", help="comma-separated fractions of the run to snapshot, e.g. 0,0.1,0.5")
    p.add_argument("--name", default="")
    p.add_argument("--out", required=True, help="checkpoint folder to write")
    p.add_argument("--resume", default=None, help="checkpoint folder to continue from")
    p.add_argument("--weights-dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="dtype of the saved weights (float16 halves the file; the app computes in float32)")
    p.add_argument("--no-optimizer", action="store_true", help="do not save AdamW state (the checkpoint cannot be resumed)")
    p.add_argument("--no-progress", action="store_true")


def _parse_override(s: str) -> tuple[str, object]:
    k, _, v = s.partition("=")
    field_types = {f: type(getattr(GPTConfig(), f)) for f in GPTConfig().to_dict()}
    if k not in field_types:
        raise SystemExit(f"--set: unknown model field {k!r}; fields: {sorted(field_types)}")
    t = field_types[k]
    if t is bool:
        return k, v.lower() in ("1", "true", "yes")
    return k, t(v)


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    return TrainConfig(
        corpus=a.corpus, preset=a.preset, tokenizer=a.tokenizer, vocab_size=a.vocab_size,
        max_steps=a.max_steps, time_budget=a.time_budget, batch_size=a.batch_size, seq_len=a.seq_len,
        max_lr=a.max_lr, min_lr_ratio=a.min_lr_ratio, warmup_steps=a.warmup_steps,
        weight_decay=a.weight_decay, grad_clip=a.grad_clip, eval_interval=a.eval_interval, eval_batches=a.eval_batches, seed=a.seed,
        device=a.device, precision=a.precision, overrides=dict(_parse_override(s) for s in a.set),
        snapshot_fractions=tuple(float(x) for x in a.snapshots.split(",") if x.strip()), name=a.name)


def main(argv: list[str] | None = None, prog: str = "python -m model.train") -> int:
    p = argparse.ArgumentParser(prog=prog, description="Train a gptscope GPT.")
    add_arguments(p)
    a = p.parse_args(argv)
    tc = config_from_args(a)
    cmd = prog + " " + " ".join(shlex.quote(x) for x in (argv if argv is not None else sys.argv[1:]))
    try:
        res = train(tc, out=a.out, resume=a.resume, progress=not a.no_progress, command=cmd,
                    weights_dtype=getattr(torch, a.weights_dtype), save_optimizer=not a.no_optimizer)
    except (ValueError, corpus_mod.CorpusError, ckpt.CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if int(os.environ.get("RANK", "0")) == 0:
        ev = res.meta["evals"][-1] if res.meta["evals"] else {}
        print(json.dumps({"out": a.out, "step": res.meta["step"], "val_loss": ev.get("val_loss"),
                          "train_seconds": res.meta["train_seconds"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
