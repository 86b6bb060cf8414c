"""The tuned lens: one learned affine map per stage of the residual stream, trained so that reading
the stream early gives the model's own final distribution (Belrose et al. 2023, "Eliciting Latent
Predictions from Transformers with the Tuned Lens").

The logit lens reads the stream h_s after stage s (the embeddings, then each block) the way the model
reads its last one: logits = unembed(final_norm(h_s)). Early streams are not written in the last
one's basis, so what it reads there is often far from what the model goes on to predict. The tuned
lens puts a translator in front, one per stage but the last:

    logits_s = unembed(final_norm(h_s + h_s @ W_s^T + b_s))        W_s (d, d), b_s (d,)

W_s and b_s start at zero, where the tuned lens *is* the logit lens (h + 0 is h, exactly), and are
trained by Adam to minimise KL(p_final || p_s) summed over the stages, on the stream of the model's
own training text; the model is only read. The last stage's stream is what the model reads itself,
so it gets no translator (both lenses are exact there). The readout is the model's own, whatever it
is: a post-norm model's final norm is an identity, nanochat's stream ends after its backout and its
logits are softcapped; the lens reads the same streams the logit lens reads (`stream_hooks`).

The figures, on held-out text: per stage, the mean KL(p_final || p_lens) in nats and the top-1
agreement (the share of positions where the lens's top token is the model's), for the logit lens and
for the tuned lens on the same tokens.

On disk a tuned lens is a folder the tuned-lens library opens as it is
(`tuned_lens.TunedLens.from_model_and_pretrained(model, folder)`, or `from_unembed_and_pretrained`), the
way an SAE's folder opens in SAELens: config.json (the library's TunedLensConfig: d_model,
num_hidden_layers = the translators, bias, lens_type "linear_tuned_lens", the unembedding's hash as the
library computes it) and params.pt (the library's `layer_translators` state dict, torch.save:
`{s}.weight` (d, d) and `{s}.bias` (d,), a translator applied as h + Linear(h) there too); beside them
gptscope_lens.json (how it was trained, the figures, the sha256 of both files, checked on load). gptscope
reads params.pt with torch.load(weights_only=True) once its sha256 matches: tensors only, nothing of it
run. An older folder (version 1: lens.safetensors with `layer_translators.{s}.*`) is still read.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import artefact
from . import checkpoint as ckpt
from .errors import SettingError, stop_if
from .gpt import GPT, GPTConfig, hook_name
from .sae import held_out_windows, read_format_json, save_folder
from .settings import check, setting
from .train import F32, activation_bytes, artefact_memory, artefact_peak, largest_fitting

META_FILE = "gptscope_lens.json"
CONFIG_FILE = "config.json"  # the tuned-lens library's names (its load_lens_artifacts' defaults)
WEIGHTS_FILE = "params.pt"
LEGACY_WEIGHTS_FILE = "lens.safetensors"  # version 1 folders: the weights alone, safetensors
FORMAT = "gptscope-tuned-lens"
VERSION = 2
LENS_TYPE = "linear_tuned_lens"
MEMORY_LIMIT = 2 * 2**30
LOGIT_COPIES = 5  # (batch_tokens, V) float32 tensors one stage's update holds at its peak (measured: 4)


class LensError(SettingError):
    """A lens folder that cannot be read or a config that cannot be trained: SettingError(field,
    message), the field "lens" for a folder."""


# ---- the streams and the readout -----------------------------------------------------------------


def stream_hooks(cfg: GPTConfig) -> list[str]:
    """The hook of the stream after each stage: the embeddings (nanochat: the stream x0), each block,
    and (nanochat's backout) the stream the final norm reads; the last is the model's own."""
    first = "hook_x0" if cfg.has_x0 else hook_name("hook_resid_pre", 0)
    after = [hook_name("hook_resid_post", i) for i in range(cfg.n_layer)]
    return [first, *after, *(["hook_resid_final"] if cfg.backout else [])]


def stage_names(cfg: GPTConfig) -> list[str]:
    """The stages' names, in stream_hooks' order."""
    return ["embed"] + [f"block {i}" for i in range(cfg.n_layer)] + (["backout"] if cfg.backout else [])


def read_out(model: GPT, h: torch.Tensor) -> torch.Tensor:
    """The logit lens: a stream (..., d) read as the model reads its last one (final norm, unembedding)."""
    return model.unembed(model.ln_final(h))


class TunedLens(nn.Module):
    """One translator per stage but the last, each h -> h + h @ W^T + b, all starting at zero."""

    def __init__(self, d_model: int, n_translators: int) -> None:
        super().__init__()
        self.layer_translators = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(n_translators))
        for t in self.layer_translators:
            assert isinstance(t, nn.Linear)
            nn.init.zeros_(t.weight)
            nn.init.zeros_(t.bias)

    @property
    def n_translators(self) -> int:
        return len(self.layer_translators)

    def translate(self, h: torch.Tensor, stage: int) -> torch.Tensor:
        """The stream after `stage`, translated (the last stage's as it is)."""
        if stage >= self.n_translators:
            return h
        return h + self.layer_translators[stage](h)

    def logits(self, model: GPT, h: torch.Tensor, stage: int) -> torch.Tensor:
        return read_out(model, self.translate(h, stage))


@torch.no_grad()
def streams_and_final(model: GPT, idx: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """idx (B, T) -> each stage's stream (B * T, d), in stream_hooks' order, and the model's final
    log-probabilities (B * T, V), in the model's mode (forward hooks on the hook points themselves
    fire in fast mode too)."""
    names = stream_hooks(model.cfg)
    got: dict[str, torch.Tensor] = {}
    with ExitStack() as stack:
        for n in names:
            h = model.hook_dict[n].register_forward_hook(lambda _m, _i, out, n=n: got.__setitem__(n, out.detach()))
            stack.callback(h.remove)
        logits, _ = model(idx)
    d, V = model.cfg.d_model, logits.size(-1)
    return [got[n].reshape(-1, d) for n in names], torch.log_softmax(logits.float(), -1).reshape(-1, V)


def kl_per_token(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """KL(p || q) in nats for each row of log-probabilities (N, V) -> (N,)."""
    return (logp.exp() * (logp - logq)).sum(-1)


# ---- training --------------------------------------------------------------------------------------


@dataclass
class LensTrainConfig:
    """A tuned lens's training settings, each declared once (model/settings.py): the API's request and
    the command line's options are made from these fields."""

    lr: float = setting(1e-2, gt=0, le=0.1, help="Adam's learning rate")
    batch_tokens: int = setting(4096, ge=64, le=65536, help="positions per update")
    max_tokens: int = setting(20_000_000, ge=0, le=1_000_000_000, help="positions to train on at most")
    time_budget: float = setting(
        120, ge=0, le=3600, unit="seconds", help="seconds of training at most (0: none; evaluation comes after)"
    )
    seed: int = setting(0, ge=0, le=2**31 - 1, help="the seed of the training windows")
    eval_sequences: int = setting(32, ge=1, le=1024, help="held-out sequences of n_ctx tokens to measure on")

    def validate(self, model: GPT | None = None) -> None:
        check(self, LensError)
        checks: list[tuple[str, bool, str]] = []
        if model is not None:
            V = model.cfg.vocab_size
            need = LOGIT_COPIES * self.batch_tokens * V * 4
            checks.append(("batch_tokens", need <= MEMORY_LIMIT, f"times the vocabulary ({V:,}) must fit 2 GiB"))
        for name, ok, msg in checks:
            if not ok:
                raise LensError(name, f"{name} {msg} (got {getattr(self, name)})")


EVAL_CHUNK = 8  # held-out windows per forward pass of quality
EVAL_LOGITS = 8  # (tokens, V) float32 tensors quality holds per chunk: the final log-probabilities, both
# lenses' logits and log-probabilities, KL's exp, difference and product


def job_memory(tc: LensTrainConfig, cfg: GPTConfig, corpus_size: int) -> dict[str, int]:
    """The bytes of a tuned-lens job on a model of cfg over a text of corpus_size bytes, in parts:
    "train" (the translators with their gradients and Adam's moments; one batch's streams of every stage,
    the final log-probabilities and their exp; the larger of the model's forward pass and one stage's
    update, LOGIT_COPIES (tokens, V) tensors), "evaluate" (a chunk's streams and EVAL_LOGITS (tokens, V)
    tensors beside its forward pass) and what every artefact job holds (model/train.py's artefact_memory)."""
    d, T, V = cfg.d_model, cfg.n_ctx, cfg.vocab_size
    stages = len(stream_hooks(cfg))
    rows = max(1, tc.batch_tokens // T)
    N = rows * T
    lens = (stages - 1) * (d * d + d) * F32
    forward = activation_bytes(cfg, rows, T, train=False)
    train = 4 * lens + N * stages * d * F32 + 2 * N * V * F32 + max(forward, LOGIT_COPIES * N * V * F32)
    chunk = min(EVAL_CHUNK, tc.eval_sequences)
    evaluate = lens + activation_bytes(cfg, chunk, T, train=False) + chunk * T * (stages * d + EVAL_LOGITS * V) * F32
    return {"train": train, "evaluate": evaluate, **artefact_memory(cfg, corpus_size)}


def peak_bytes(tc: LensTrainConfig, cfg: GPTConfig, corpus_size: int) -> int:
    """The most memory a tuned-lens job takes (job_memory's parts: the larger of training and evaluation)."""
    p = job_memory(tc, cfg, corpus_size)
    return artefact_peak(p, max(p["train"], p["evaluate"]))


def memory_need(tc: LensTrainConfig, cfg: GPTConfig, corpus_size: int, limit: int) -> tuple[int, str, str]:
    """(a tuned-lens job's peak bytes, the setting whose smaller value needs the most less, what to ask for
    instead: the largest value of it that fits `limit`)."""
    p = job_memory(tc, cfg, corpus_size)
    total = peak_bytes(tc, cfg, corpus_size)
    if p["corpus"] > max(p["train"], p["evaluate"], p["model"]):
        return total, "corpus", "a smaller corpus"
    name, lo = ("eval_sequences", 1) if p["evaluate"] > p["train"] else ("batch_tokens", 64)
    best = largest_fitting(
        lambda n: peak_bytes(replace(tc, **{name: n}), cfg, corpus_size) <= limit, lo, getattr(tc, name)
    )
    if best is None:
        return total, name, "a smaller batch_tokens and eval_sequences, or a smaller model"
    return total, name, f"{name} at most {best:,} on this model"


@dataclass
class LensState:
    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0
    history: list[dict] = field(default_factory=list)


def windows(ids: torch.Tensor, T: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """n random windows of T tokens (n, T)."""
    starts = torch.randint(0, len(ids) - T + 1, (n,), generator=gen)
    return torch.stack([ids[s : s + T] for s in starts.tolist()])


def _batches(model: GPT, ids: torch.Tensor, tc: LensTrainConfig) -> Iterator[tuple[list[torch.Tensor], torch.Tensor]]:
    T = min(model.cfg.n_ctx, len(ids))
    if T < 2:
        raise LensError("corpus", "the training text is too short: it needs at least 2 tokens")
    gen = torch.Generator().manual_seed(tc.seed)
    n = max(1, tc.batch_tokens // T)
    while True:
        yield streams_and_final(model, windows(ids, T, n, gen))


def _update(model: GPT, lens: TunedLens, opt: torch.optim.Adam, streams: list[torch.Tensor], logp: torch.Tensor):
    """One Adam step on every translator; each stage's KL is backpropagated on its own (one stage's
    logits at a time in memory). KL(p || q) = sum p log p - sum p log q: the first term is fixed, the
    second is the cross-entropy against p, which torch computes fused. Returns the stages' mean KLs."""
    opt.zero_grad(set_to_none=True)
    p = logp.exp()
    entropy = float((p * logp).sum(-1).mean())  # sum p log p, averaged (minus the entropy)
    kls = []
    for s in range(lens.n_translators):
        ce = F.cross_entropy(lens.logits(model, streams[s], s).float(), p)
        ce.backward(inputs=list(lens.layer_translators[s].parameters()))  # the model is only read
        kls.append(float(ce.detach()) + entropy)
    opt.step()
    return kls


def train_lens(
    model: GPT,
    train_ids: torch.Tensor,
    tc: LensTrainConfig,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    log_every: int = 10,
    batches: Iterator[tuple[list[torch.Tensor], torch.Tensor]] | None = None,
) -> tuple[TunedLens, LensState]:
    """A tuned lens for `model`, trained on windows of `train_ids` (or on `batches` of streams and final
    log-probabilities made already) until max_tokens or the time budget."""
    tc.validate(model)
    torch.manual_seed(tc.seed)
    lens = TunedLens(model.cfg.d_model, len(stream_hooks(model.cfg)) - 1).to(model.wte.weight.device)
    opt = torch.optim.Adam(lens.parameters(), lr=tc.lr)
    if batches is None:
        batches = _batches(model.eval(), train_ids.long().to(model.wte.weight.device), tc)
    st, t0 = LensState(), time.perf_counter()
    while True:
        frac = min(1.0, max(st.tokens / max(tc.max_tokens, 1), st.elapsed / tc.time_budget if tc.time_budget else 0.0))
        if frac >= 1.0 or tc.max_tokens == 0:
            break
        stop_if(should_stop, "training the lens")
        for g in opt.param_groups:
            g["lr"] = tc.lr * min(1.0, (1.0 - frac) / 0.2)
        streams, logp = next(batches)
        kls = _update(model, lens, opt, streams, logp)
        st.step, st.tokens, st.elapsed = st.step + 1, st.tokens + len(logp), time.perf_counter() - t0
        if st.step % log_every == 0 or st.step == 1:
            entry = {
                "step": st.step,
                "tokens": st.tokens,
                "elapsed": round(st.elapsed, 2),
                "kl": [round(k, 4) for k in kls],
            }
            st.history.append(entry)
            if on_progress is not None:
                on_progress({**entry, "progress": round(frac, 4)})
    return lens.eval().requires_grad_(False), st


# ---- the figures, on held-out text -------------------------------------------------------------------


@torch.no_grad()
def quality(model: GPT, lens: TunedLens, seqs: torch.Tensor) -> dict:
    """Per stage, on every position of the held-out windows `seqs` (S, T): the mean KL from the
    model's final distribution to each lens's (nats) and each lens's top-1 agreement with it."""
    n_stages = len(stream_hooks(model.cfg))
    sums = torch.zeros(n_stages, 4, dtype=torch.float64)  # logit KL, tuned KL, logit top-1, tuned top-1
    n = 0
    for chunk in seqs.split(8):
        streams, logp = streams_and_final(model.eval(), chunk.to(model.wte.weight.device))
        top = logp.argmax(-1)
        for s, h in enumerate(streams):
            plain = torch.log_softmax(read_out(model, h).float(), -1)
            tuned = plain if s >= lens.n_translators else torch.log_softmax(lens.logits(model, h, s).float(), -1)
            sums[s, 0] += kl_per_token(logp, plain).double().sum()
            sums[s, 1] += kl_per_token(logp, tuned).double().sum()
            sums[s, 2] += (plain.argmax(-1) == top).sum()
            sums[s, 3] += (tuned.argmax(-1) == top).sum()
        n += len(logp)
    means = (sums / n).tolist()
    return {
        "tokens": n,
        "sequences": len(seqs),
        "stages": [
            {"stage": name, "logit_kl": m[0], "tuned_kl": m[1], "logit_top1": m[2], "tuned_top1": m[3]}
            for name, m in zip(stage_names(model.cfg), means)
        ],
    }


# ---- files -----------------------------------------------------------------------------------------


def unembed_hash(weight: torch.Tensor) -> str:
    """The tuned-lens library's hash of an unembedding matrix W_U (V, d) (its utils.tensor_hash of
    Unembed.unembedding.weight: the sha256 of numpy's summary of the matrix to one decimal), kept in
    config.json so that the library warns when the lens is opened on another model's unembedding."""
    text = np.array_str(weight.detach().cpu().float().numpy(), precision=1)
    return hashlib.sha256(text.encode()).hexdigest()


def library_config(lens: TunedLens, base_model: str, unembed: torch.Tensor | None = None) -> dict:
    """config.json: the tuned-lens library's TunedLensConfig, its fields and nothing else (it warns on
    any other key); num_hidden_layers is the number of translators (the library's lens has one per
    layer but the last, as gptscope's has one per stage but the last)."""
    return {
        "base_model_name_or_path": base_model,
        "d_model": lens.layer_translators[0].in_features if lens.n_translators else 0,
        "num_hidden_layers": lens.n_translators,
        "bias": True,
        "base_model_revision": None,
        "unembed_hash": None if unembed is None else unembed_hash(unembed),
        "lens_type": LENS_TYPE,
    }


def library_params(lens: TunedLens) -> bytes:
    """params.pt: torch.save of the library's `layer_translators` state dict ({s}.weight, {s}.bias), float32."""
    state = {k: v.detach().float().cpu().contiguous().clone() for k, v in lens.layer_translators.state_dict().items()}
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def save_lens(folder: str | Path, lens: TunedLens, meta: dict, unembed: torch.Tensor | None = None) -> Path:
    """Write the lens's folder atomically (model/sae.py's save_folder): the tuned-lens library's
    config.json and params.pt, then gptscope_lens.json; refuses an existing one. `unembed`: the
    model's W_U (V, d), hashed into config.json as the library does."""
    base = meta.get("checkpoint", {}).get("name") if isinstance(meta.get("checkpoint"), dict) else None
    config = library_config(lens, str(base or meta.get("name") or ""), unembed)
    blobs = {CONFIG_FILE: json.dumps(config, indent=1).encode("utf-8"), WEIGHTS_FILE: library_params(lens)}
    full = {
        **meta,
        "format": FORMAT,
        "version": VERSION,
        "d_model": config["d_model"] or None,
        "translators": lens.n_translators,
    }
    return save_folder(folder, blobs, META_FILE, full, LensError)


@dataclass
class LoadedLens:
    lens: TunedLens
    meta: dict
    path: Path

    @property
    def name(self) -> str:
        return self.path.name


def read_meta(folder: str | Path) -> dict:
    return read_format_json(folder, META_FILE, FORMAT, "tuned lens", LensError, "lens")


def _hashed(folder: Path, meta: dict, name: str) -> bytes:
    try:
        return ckpt.read_hashed(folder, name, meta["files"].get(name), "tuned lens", META_FILE)
    except ckpt.CheckpointError as e:
        raise LensError("lens", str(e)) from None


def _library_weights(folder: Path, meta: dict, d: int, n: int) -> dict[str, torch.Tensor]:
    """A version 2 folder's weights: config.json checked against gptscope_lens.json, params.pt read with
    torch.load(weights_only=True) (tensors and plain values only; nothing in it is run), keys as
    TunedLens's state dict has them."""
    try:
        config = json.loads(_hashed(folder, meta, CONFIG_FILE).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LensError("lens", f"{CONFIG_FILE} is not valid JSON: {e}") from None
    want = {"d_model": d, "num_hidden_layers": n, "bias": True, "lens_type": LENS_TYPE}
    if not isinstance(config, dict) or any(config.get(k) != v for k, v in want.items()):
        raise LensError("lens", f"{CONFIG_FILE} must be the tuned-lens library's config with {want} ({META_FILE})")
    blob = _hashed(folder, meta, WEIGHTS_FILE)
    try:
        state = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    except Exception as e:  # an unpickler refusal, a damaged zip: refused either way
        raise LensError(
            "lens", f"{WEIGHTS_FILE} was refused (torch.load weights_only=True, nothing run): {e}"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise LensError("lens", f"{WEIGHTS_FILE} must hold a state dict of tensors (the library's layer_translators)")
    return {f"layer_translators.{k}": v for k, v in state.items()}


def load_lens(folder: str | Path) -> LoadedLens:
    """Read a lens's folder, each file checked against its sha256: version 2 (the tuned-lens library's
    config.json and params.pt) or version 1 (lens.safetensors)."""
    folder = Path(folder)
    meta = read_meta(folder)
    d, n = meta.get("d_model"), meta.get("translators")
    if not isinstance(d, int) or not isinstance(n, int) or d < 1 or n < 1:
        raise LensError("lens", f"{META_FILE} must give d_model and translators as positive whole numbers")
    if meta.get("version") == 1:
        try:
            weights = ckpt.read_tensors(
                folder, LEGACY_WEIGHTS_FILE, meta["files"].get(LEGACY_WEIGHTS_FILE), "tuned lens", META_FILE
            )
        except ckpt.CheckpointError as e:
            raise LensError("lens", str(e)) from None
    elif meta.get("version") == VERSION:
        weights = _library_weights(folder, meta, d, n)
    else:
        raise LensError("lens", f"{META_FILE} has version {meta.get('version')!r}; this gptscope reads 1 and {VERSION}")
    lens = TunedLens(d, n)
    want = {k: v.shape for k, v in lens.state_dict().items()}
    if {k: v.shape for k, v in weights.items()} != want:
        raise LensError("lens", f"the weights do not hold {n} translators of width {d} (layer_translators.*)")
    lens.load_state_dict({k: v.float() for k, v in weights.items()})
    return LoadedLens(lens.eval().requires_grad_(False), meta, folder)


def default_name(tc: LensTrainConfig) -> str:
    return f"tuned-s{tc.seed}"


def train_and_save(
    ck: ckpt.Checkpoint,
    corpus_spec: str,
    tc: LensTrainConfig,
    folder: str | Path,
    command: str,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Train a tuned lens for checkpoint `ck` (loaded for this run) on the training split of
    `corpus_spec`, measure it beside the logit lens on the held-out split, save it in `folder`;
    returns what its JSON records."""
    folder = Path(folder)
    run = artefact.prepare(ck, corpus_spec, tc, folder, LensError, should_stop)
    seqs = held_out_windows(run.val_ids, run.model.cfg.n_ctx, tc.eval_sequences, LensError)
    run.started()
    lens, st = train_lens(run.model, run.train_ids, tc, on_progress, should_stop)
    run.trained()
    if on_progress is not None:
        on_progress({"phase": "evaluating", "step": st.step, "tokens": st.tokens, "progress": 1.0})
    figures = quality(run.model, lens, seqs)
    meta = artefact.record(folder, ck, run, tc, command, st, stages=stage_names(run.model.cfg), quality=figures)
    save_lens(folder, lens, meta, run.model.lm_head.weight)
    return meta
