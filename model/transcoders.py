"""Transcoders: a sparse, readable stand-in for every MLP of a model, trained on its own text.

A transcoder reads what an MLP reads (its normalised input, blocks.{l}.ln2's output) and writes what
it writes (blocks.{l}.hook_mlp_out), through many more units than the MLP has, few of them firing at
any token:

    pre  = x @ W_enc + b_enc        x (d,): the MLP's input;  W_enc (d, F), b_enc (F,)
    f    = TopK(pre)  or ReLU(pre)  (F,) feature activations, mostly 0
    y    = f @ W_dec + b_dec        the MLP's output, approximated;  W_dec (F, d) unit rows, b_dec (d,)

It is an SAE (model/sae.py) whose decoder writes another tensor than its encoder reads, so it is
trained by the same step (Adam, decoder rows renormalised, AuxK or resampling for dead features),
here one per block, all on the same batches: each batch of the model's own text is run once, and
every block's (input, output) pairs train that block's transcoder. Replacing every MLP by its
transcoder makes the model linear between sparse features once attention patterns and norms are
frozen, which is what an attribution graph needs (model/attribution.py).

The figures every transcoder set is shown with, on held-out text: per block, the share of the MLP
output's variance it explains, its L0 and its dead features; for the set, the next-token loss with
every MLP replaced at once, against the clean loss and against every MLP zeroed ("loss recovered":
1 - (replaced - clean) / (zeroed - clean)).

On disk a set is a folder, circuit-tracer's per-layer layout with JSON for its YAML: config.json
(the hooks each transcoder reads and writes, one weights file per layer), layer_{l}.safetensors
(W_enc, b_enc, W_dec, b_dec), stats_{l}.safetensors (each feature's held-out statistics, as an SAE's)
and gptscope_transcoders.json (how it was trained, the figures, every file's sha256). Nothing is
unpickled.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

import torch
from safetensors.torch import save as st_save

from . import artefact
from . import checkpoint as ckpt
from . import sae as sae_mod
from .errors import stop_if
from .gpt import GPT, Block, GPTConfig, hook_name
from .sae import SAE, SAEConfig, SAEError
from .settings import check, setting
from .train import F32, activation_bytes, artefact_memory, artefact_peak, largest_fitting

CONFIG_FILE = "config.json"
META_FILE = "gptscope_transcoders.json"
FORMAT = "gptscope-transcoders"
INPUT_HOOK = "blocks.{layer}.ln2.hook_normalized"  # what each reads (the MLP's input) ...
OUTPUT_HOOK = "blocks.{layer}.hook_mlp_out"  # ... and writes (the MLP's output)
MEMORY_LIMIT = 2 * 2**30
Kind = Literal["per_layer", "clt"]
# buffers of every block's (input, output) pairs PairStream holds at its peak: the one being served, and
# the next one's chunks and their concatenation (its batches index rows: no shuffled copy)
PAIR_BUFFERS = 3
# quality's held-out pairs of every block, made chunk by chunk, take about twice their bytes: the forward
# passes' freed temporaries stay between them (measured 589 MiB resident for 288 MiB of pairs)
HELD_PAIRS = 2
# and each sparse_codes call about twice its chunk's CHUNK_COPIES (TopK's sort, the allocator: measured 240
# MiB for 126)
HELD_CHUNKS = 2


class Transcoder(SAE):
    """An SAE whose decoder writes the MLP's output: b_dec is the output's offset, and the input is
    centred by its own, b_in (the inputs' mean, fixed while training: without it every input shares
    one large mean direction, a few features fire on every token and the rest never). Once trained
    b_in is folded into b_enc (`fold_input_offset`), so a saved transcoder is W_enc, b_enc, W_dec,
    b_dec alone, as circuit-tracer's are."""

    def __init__(self, cfg: SAEConfig) -> None:
        super().__init__(cfg)
        self.b_in = torch.zeros(cfg.d_in)  # not a parameter, not saved

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.b_in) @ self.W_enc + self.b_enc

    @torch.no_grad()
    def fold_input_offset(self) -> None:
        """(x - b_in) @ W_enc + b_enc == x @ W_enc + (b_enc - b_in @ W_enc)."""
        self.b_enc.sub_(self.b_in @ self.W_enc)
        self.b_in = torch.zeros_like(self.b_in)


# ---- the MLPs' inputs and outputs --------------------------------------------------------------


def check_model(model: GPT) -> None:
    """Raise SAEError unless every MLP reads a normalised stream and adds its output to it (norm='pre')."""
    if model.cfg.norm != "pre":
        raise SAEError(
            "checkpoint",
            "transcoders replace MLPs whose output is added to the stream as it is (norm='pre'); this model "
            f"normalises {'after each residual add' if model.cfg.norm == 'post' else 'each sublayer output'}",
        )


@torch.no_grad()
def mlp_pairs(model: GPT, idx: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """idx (B, T) -> per block, (the MLP's input, its output), each (B * T, d), in the model's mode
    (a forward hook on the norm module itself gives its output in fast mode too)."""
    got: dict[tuple[int, str], torch.Tensor] = {}
    with ExitStack() as stack:
        for i, block in enumerate(model.blocks):
            ln2 = cast(Block, block).ln2
            for key, module in (("in", ln2), ("out", model.hook_dict[hook_name("hook_mlp_out", i)])):
                h = module.register_forward_hook(lambda _m, _i, out, k=(i, key): got.__setitem__(k, out.detach()))
                stack.callback(h.remove)
        model.hidden(idx)
    d = model.cfg.d_model
    return [(got[(i, "in")].reshape(-1, d), got[(i, "out")].reshape(-1, d)) for i in range(model.cfg.n_layer)]


class PairStream:
    """Batches of every block's (input, output) pairs from random windows of the training tokens: a
    buffer of `fill` sequences is run through the model once, shuffled (the same order for every
    block) and served twice over, as model/sae.py's ActivationStream does for one stream."""

    def __init__(self, model: GPT, ids: torch.Tensor, seed: int, fill: int = sae_mod.STREAM_FILL) -> None:
        self.model, self.ids, self.fill = model, ids, fill
        self.T = min(model.cfg.n_ctx, len(ids) - 1)
        if self.T < 2:
            raise SAEError("corpus", "the training text is too short: it needs at least 3 tokens")
        self.gen = torch.Generator().manual_seed(seed)

    def buffer(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        starts = torch.randint(0, len(self.ids) - self.T + 1, (self.fill,), generator=self.gen)
        idx = torch.stack([self.ids[s : s + self.T] for s in starts.tolist()])
        parts = [mlp_pairs(self.model, chunk) for chunk in idx.split(16)]
        return [
            (torch.cat([p[i][0] for p in parts]), torch.cat([p[i][1] for p in parts])) for i in range(len(parts[0]))
        ]

    def batches(self, batch_tokens: int) -> Iterator[list[tuple[torch.Tensor, torch.Tensor]]]:
        while True:
            buf = self.buffer()
            n = len(buf[0][0])
            for _ in range(2):
                for rows in torch.randperm(n, generator=self.gen).split(batch_tokens):
                    if len(rows) == batch_tokens:
                        yield [(x[rows], y[rows]) for x, y in buf]


# ---- training --------------------------------------------------------------------------------


@dataclass
class TranscoderTrainConfig:
    """A transcoder set's training settings, each declared once (model/settings.py): the API's request
    and the command line's options are made from these fields."""

    expansion: int = setting(4, ge=2, le=32, help="features per stream dimension, per block")
    kind: Kind = setting(  # noqa: RUF009 (a str: immutable)
        "per_layer",
        help="per_layer (one transcoder per MLP) or clt (cross-layer: each block's features write to every later MLP)",
    )
    activation: sae_mod.Activation = setting(  # noqa: RUF009 (a str: immutable)
        "topk", help="topk (k features per token) or relu (an L1 penalty)"
    )
    k: int = setting(16, ge=1, le=512, help="TopK: features kept per token (at most expansion x d_model)")
    l1_coefficient: float = setting(0.5, ge=0, le=100, help="ReLU: the L1 penalty's weight", cli=False)
    lr: float = setting(2e-3, gt=0, le=0.1, help="Adam's learning rate")
    batch_tokens: int = setting(1024, ge=64, le=65536, help="MLP input/output pairs per update")
    max_tokens: int = setting(1_500_000, ge=1024, le=1_000_000_000, help="pairs to train on at most")
    time_budget: float = setting(
        600, ge=0, le=7200, unit="seconds", help="seconds of training at most (0: none; evaluation comes after)"
    )  # for the whole set
    seed: int = setting(0, ge=0, le=2**31 - 1, help="the seed of the set's start and its batches")
    dead_after_tokens: int = setting(100_000, cli=False)
    aux_coefficient: float = setting(1 / 32, cli=False)
    eval_sequences: int = setting(64, ge=1, le=1024, help="held-out sequences of n_ctx tokens to measure on")
    ce_sequences: int = setting(32, ge=1, le=1024, help="of those, for the losses (<= eval_sequences)")

    def sae_config(self) -> sae_mod.SAETrainConfig:
        """The same settings as one SAE's (what model/sae.py's training step reads)."""
        return sae_mod.SAETrainConfig(
            layer=0, expansion=self.expansion, activation=self.activation, k=self.k,
            l1_coefficient=self.l1_coefficient, lr=self.lr, batch_tokens=self.batch_tokens,
            max_tokens=self.max_tokens, time_budget=self.time_budget, seed=self.seed,
            dead_after_tokens=self.dead_after_tokens, aux_coefficient=self.aux_coefficient,
            eval_sequences=self.eval_sequences, ce_sequences=min(self.ce_sequences, self.eval_sequences),
        )  # fmt: skip

    def validate(self, model: GPT | None = None) -> None:
        check(self, SAEError)
        checks: list[tuple[str, bool, str]] = [
            ("ce_sequences", self.ce_sequences <= self.eval_sequences, "must be 1..eval_sequences"),
        ]
        if model is not None:
            d, L = model.cfg.d_model, model.cfg.n_layer
            checks.append(("k", self.k <= self.expansion * d, f"must be at most the width {self.expansion * d}"))
            F = self.expansion * d
            need = (
                sae_mod.PARAM_COPIES * matrices(self, L) * d * F * 4
                + L * sae_mod.STEP_COPIES * self.batch_tokens * F * 4
            )
            checks.append(
                (
                    "batch_tokens",
                    need <= MEMORY_LIMIT,
                    f"with {L} transcoders of {F:,} features must fit 2 GiB: smaller",
                )
            )
        for name, ok, msg in checks:
            if not ok:
                raise SAEError(name, f"{name} {msg} (got {getattr(self, name)})")
        if model is not None:
            check_model(model)


def matrices(tc: TranscoderTrainConfig, L: int) -> int:
    """The (d, F) matrices of a set on L blocks: an encoder and a decoder each; a CLT's block decodes to
    every later block too (L encoders, L (L + 1) / 2 decoders)."""
    return L + (L * (L + 1) // 2 if tc.kind == "clt" else L)


def job_memory(tc: TranscoderTrainConfig, cfg: GPTConfig, corpus_size: int) -> dict[str, int]:
    """The bytes of a transcoder-set job on a model of cfg over a text of corpus_size bytes, in parts:
    "train" (every block's transcoder with its gradients, Adam's moments and its start; the stream's
    buffers of every block's (input, output) pairs, STREAM_FILL sequences each, as model/sae.py counts an
    SAE's one stream; the batches cut from them; one step's (batch_tokens, F) tensors; the model's
    forward pass of a chunk), "evaluate" (the held-out pairs of every block, one block's codes and their
    statistics, all blocks' statistics kept, the replaced runs' forward passes) and what every artefact
    job holds (model/train.py's artefact_memory)."""
    d, T, L, F = cfg.d_model, cfg.n_ctx, cfg.n_layer, tc.expansion * cfg.d_model
    pair = 2 * L * d * F32  # bytes per token of every block's (input, output)
    weights = matrices(tc, L) * d * F * F32
    stream = PAIR_BUFFERS * sae_mod.STREAM_FILL * T * pair + 3 * tc.batch_tokens * pair
    step = sae_mod.STEP_COPIES * tc.batch_tokens * F * F32
    forward = activation_bytes(cfg, sae_mod.STREAM_CHUNK, T, False, logits=False)
    train = sae_mod.PARAM_COPIES * weights + stream + step + forward
    n = tc.eval_sequences * T
    per_token = sae_mod.codes_per_token(tc.activation, tc.k, F)
    chunk = sae_mod.CHUNK_COPIES * min(n, sae_mod.codes_chunk(F)) * F * F32
    # one block's codes, the trained set's and the starting one's (as an SAE's), each made in chunks
    codes = int(sae_mod.EVAL_MARGIN * 3 * sae_mod.CODE_BYTES * n * per_token) + 2 * HELD_CHUNKS * chunk
    stats = L * (F * (sae_mod.TOP_EXAMPLES * 8 + sae_mod.HIST_BINS * 4 + 16) + n * 4)
    lm = activation_bytes(cfg, min(sae_mod.LM_CHUNK, tc.ce_sequences), T, train=False)
    lm += L * sae_mod.LM_CHUNK * T * d * F32  # the MLP inputs the replaced run keeps for the transcoders
    evaluate = 2 * weights + HELD_PAIRS * n * pair + 4 * n * d * F32 + codes + stats + lm
    return {"train": train, "evaluate": evaluate, **artefact_memory(cfg, corpus_size)}


def peak_bytes(tc: TranscoderTrainConfig, cfg: GPTConfig, corpus_size: int) -> int:
    """The most memory a transcoder-set job takes (job_memory's parts: the larger of training and evaluation)."""
    p = job_memory(tc, cfg, corpus_size)
    return artefact_peak(p, max(p["train"], p["evaluate"]))


def memory_need(tc: TranscoderTrainConfig, cfg: GPTConfig, corpus_size: int, limit: int) -> tuple[int, str, str]:
    """(a transcoder-set job's peak bytes, the setting whose smaller value needs the most less, what to ask
    for instead: the largest value of it that fits `limit`)."""
    p = job_memory(tc, cfg, corpus_size)
    total = peak_bytes(tc, cfg, corpus_size)
    if p["corpus"] > max(p["train"], p["evaluate"], p["model"]):
        return total, "corpus", "a smaller corpus"
    step = sae_mod.STEP_COPIES * tc.batch_tokens * tc.expansion * cfg.d_model * F32
    weights = sae_mod.PARAM_COPIES * matrices(tc, cfg.n_layer) * cfg.d_model * tc.expansion * cfg.d_model * F32
    if p["evaluate"] > p["train"]:
        name, lo = "eval_sequences", 1
    else:
        name, lo = ("batch_tokens", 64) if step > weights else ("expansion", 2)
    best = largest_fitting(
        lambda n: peak_bytes(replace(tc, **cast(dict[str, Any], {name: n})), cfg, corpus_size) <= limit,
        lo,
        getattr(tc, name),
    )
    if best is None:
        return total, name, "smaller settings (expansion, batch_tokens, eval_sequences) or a smaller model"
    return total, name, f"{name} at most {best:,} ({cfg.n_layer} transcoders on this model)"


@dataclass
class SetState:
    step: int = 0
    tokens: int = 0
    elapsed: float = 0.0
    history: list[dict] = field(default_factory=list)


def run_steps(
    tc: TranscoderTrainConfig,
    opts: list[torch.optim.Adam],
    step: Callable[[list[tuple[torch.Tensor, torch.Tensor]]], list[dict]],
    first: list[tuple[torch.Tensor, torch.Tensor]],
    batches: Iterator[list[tuple[torch.Tensor, torch.Tensor]]],
    on_progress: Callable[[dict], None] | None,
    should_stop: Callable[[], bool] | None,
    log_every: int,
) -> SetState:
    """The training loop of a set (per-layer or cross-layer, model/clt.py): `step(pairs)` on every batch of
    every block's pairs until max_tokens or the time budget is spent, the learning rate decayed over the
    last fifth, a record (each block's FVU, L0 and dead, from step's per-block dicts) every log_every steps."""
    st, t0, pairs = SetState(), time.perf_counter(), first
    while True:
        frac = min(1.0, max(st.tokens / tc.max_tokens, st.elapsed / tc.time_budget if tc.time_budget else 0.0))
        if frac >= 1.0:
            return st
        stop_if(should_stop, "training the transcoders")
        for o in opts:
            for g in o.param_groups:
                g["lr"] = tc.lr * min(1.0, (1.0 - frac) / 0.2)
        recs = step(pairs)
        st.step, st.tokens, st.elapsed = st.step + 1, st.tokens + len(pairs[0][0]), time.perf_counter() - t0
        if st.step % log_every == 0 or st.step == 1:
            entry = {
                "step": st.step, "tokens": st.tokens, "elapsed": round(st.elapsed, 2),
                "fvu": [round(r["fvu"], 5) for r in recs], "l0": [round(r["l0"], 2) for r in recs],
                "dead": [r["dead"] for r in recs],
            }  # fmt: skip
            st.history.append(entry)
            if on_progress is not None:
                on_progress({**entry, "progress": round(frac, 4)})
        pairs = next(batches)


def train_transcoders(
    model: GPT,
    train_ids: torch.Tensor,
    tc: TranscoderTrainConfig,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    log_every: int = 20,
) -> tuple[list[Transcoder], list[Transcoder], SetState]:
    """One transcoder per block, trained together on the same batches. Returns the trained set, the
    set as it started (the figures' baseline) and the run's record. The model is only read."""
    tc.validate(model)
    torch.manual_seed(tc.seed)
    d, L = model.cfg.d_model, model.cfg.n_layer
    one = tc.sae_config()
    codes = [Transcoder(SAEConfig(d, tc.expansion * d, i, tc.activation, tc.k)) for i in range(L)]
    batches = PairStream(model.eval(), train_ids.long(), tc.seed).batches(tc.batch_tokens)
    first = next(batches)
    with torch.no_grad():
        for t, (x, y) in zip(codes, first):
            t.b_in, _ = x.mean(0), t.b_dec.copy_(y.mean(0))  # features explain how inputs and outputs move
            # activations start about the size of the output's deviations (unit decoder rows, k of them)
            scale = (y - y.mean(0)).norm(dim=-1).mean() / ((x - t.b_in).norm(dim=-1).mean() * tc.k**0.5)
            t.W_enc.mul_(scale * t.cfg.d_in**0.5)
    start = copy.deepcopy(codes)
    opts = [torch.optim.Adam(t.parameters(), lr=tc.lr) for t in codes]
    since = [torch.zeros(t.cfg.d_sae, dtype=torch.long) for t in codes]

    def step(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[dict]:
        return [sae_mod._step(t, o, x, one, s, y) for t, o, s, (x, y) in zip(codes, opts, since, pairs)]

    st = run_steps(tc, opts, step, first, batches, on_progress, should_stop, log_every)
    for t in [*codes, *start]:
        t.fold_input_offset()
    return codes, start, st


# ---- the figures, on held-out text -------------------------------------------------------------


@torch.no_grad()
def replaced_losses(
    model: GPT,
    codes: list[Transcoder],
    seqs: torch.Tensor,
    write: Callable[[int, dict[int, torch.Tensor]], torch.Tensor] | None = None,
) -> dict:
    """Mean next-token loss (nats) on held-out sequences: clean, with every MLP's output replaced by its
    transcoder's (reading that MLP's own input in the replaced run), and with every MLP's output zeroed.
    write(i, inputs): what replaces MLP i's output, given the MLP inputs of the replaced run so far (a
    cross-layer transcoder's, model/clt.py); default: transcoder i's reconstruction of its own input."""
    inputs, targets = seqs[:, :-1], seqs[:, 1:]

    def mean_loss() -> float:
        total = 0.0
        for i, t in zip(inputs.split(8), targets.split(8)):
            _, loss = model(i, t)
            assert loss is not None
            total += float(loss) * len(i)
        return total / len(inputs)

    def spliced(fn: Callable[[int], Callable[[torch.Tensor], torch.Tensor]]) -> float:
        with ExitStack() as stack:
            for i in range(model.cfg.n_layer):
                hp = model.hook_dict[hook_name("hook_mlp_out", i)]
                f = fn(i)
                h = hp.register_forward_hook(lambda _m, _i, out, f=f: f(out))
                stack.callback(h.remove)
            return mean_loss()

    seen: dict[int, torch.Tensor] = {}
    with ExitStack() as stack:  # the MLP's input of the replaced run, for its transcoder
        for i, block in enumerate(model.blocks):
            h = cast(Block, block).ln2.register_forward_hook(lambda _m, _i, out, i=i: seen.__setitem__(i, out))
            stack.callback(h.remove)
        if write is None:
            replaced = spliced(lambda i: lambda out: codes[i](seen[i])[0].to(out.dtype))
        else:
            replaced = spliced(lambda i: lambda out: write(i, seen).to(out.dtype))
    return {"clean": mean_loss(), "replaced": replaced, "zero_ablation": spliced(lambda i: torch.zeros_like)}


def quality(
    model: GPT, codes: list[Transcoder], start: list[Transcoder], val_ids: torch.Tensor, tc: TranscoderTrainConfig
) -> tuple[dict, list[dict]]:
    """The set's figures (each beside its baseline) and each block's features' statistics."""
    seqs = sae_mod.held_out_windows(val_ids, model.cfg.n_ctx, tc.eval_sequences)
    pairs = [mlp_pairs(model.eval(), s) for s in seqs.split(16)]
    layers, stats = [], []
    for i, (t, t0) in enumerate(zip(codes, start)):
        x = torch.cat([p[i][0] for p in pairs])
        y = torch.cat([p[i][1] for p in pairs])
        tok, feat, val, fig = sae_mod.sparse_codes(t, x, y)
        s = sae_mod.feature_stats(tok, feat, val, len(x), t.cfg.d_sae)
        _, s_feat, _, s_fig = sae_mod.sparse_codes(t0, x, y)
        layers.append(
            {
                "layer": i,
                "fve": fig["fve"],
                "fve_at_init": s_fig["fve"],
                "l0": fig["l0"],
                "dead": int((s["density"] == 0).sum()),
                "dead_at_init": int((torch.bincount(s_feat, minlength=t.cfg.d_sae) == 0).sum()),
                "d_sae": t.cfg.d_sae,
            }
        )
        stats.append({**s, "eval_ids": seqs.int()})
    ce = replaced_losses(model.eval(), codes, seqs[: tc.ce_sequences])
    added, zeroed = ce["replaced"] - ce["clean"], ce["zero_ablation"] - ce["clean"]
    figures = {
        "tokens": int(seqs.numel()),
        "sequences": len(seqs),
        "ce_sequences": min(tc.ce_sequences, len(seqs)),
        "layers": layers,
        "loss_clean": ce["clean"],
        "loss_replaced": ce["replaced"],
        "loss_zero_ablation": ce["zero_ablation"],
        "loss_recovered": 1.0 - added / zeroed if zeroed > 0 else None,
    }
    return figures, stats


# ---- files -----------------------------------------------------------------------------------


def _config_json(codes: list[Transcoder], model_name: str) -> dict:
    c = codes[0].cfg
    return {
        "model_name": model_name,
        "model_kind": "transcoder_set",
        "feature_input_hook": INPUT_HOOK,
        "feature_output_hook": OUTPUT_HOOK,
        "activation": c.activation,
        "k": c.k if c.activation == "topk" else None,
        "d_model": c.d_in,
        "d_transcoder": c.d_sae,
        "transcoders": [f"layer_{t.cfg.layer}.safetensors" for t in codes],
    }


def save_set(folder: str | Path, codes: list[Transcoder], stats: list[dict], meta: dict, model_name: str) -> Path:
    """Write the set's folder atomically (model/sae.py's save_folder); refuses an existing one."""
    blobs = {CONFIG_FILE: json.dumps(_config_json(codes, model_name), indent=1).encode("utf-8")}
    for t, s in zip(codes, stats):
        blobs[f"layer_{t.cfg.layer}.safetensors"] = st_save(
            {k: v.detach().float().contiguous() for k, v in t.state_dict().items()}
        )
        blobs[f"stats_{t.cfg.layer}.safetensors"] = st_save(
            {k: v.contiguous() for k, v in s.items()}, metadata={"format": FORMAT}
        )
    full = {**meta, "format": FORMAT, "version": 1, "config": asdict(codes[0].cfg)}
    return sae_mod.save_folder(folder, blobs, META_FILE, full, SAEError)


@dataclass
class LoadedSet:
    codes: list[Transcoder]
    stats: list[dict[str, torch.Tensor]]
    meta: dict
    path: Path
    views: dict = field(default_factory=dict)  # what a server keeps of it (each block's transcoder as an SAE's view)

    @property
    def name(self) -> str:
        return self.path.name


def read_meta(folder: str | Path) -> dict:
    return sae_mod.read_format_json(folder, META_FILE, FORMAT, "transcoder set", SAEError, "transcoders")


def _tensors(folder: Path, name: str, sha: object) -> dict[str, torch.Tensor]:
    try:
        return ckpt.read_tensors(folder, name, sha, "transcoder set", META_FILE)
    except ckpt.CheckpointError as e:
        raise SAEError("transcoders", str(e)) from None


def load_set(folder: str | Path) -> LoadedSet:
    """Read a set's folder: JSON and safetensors only, every file checked against its sha256."""
    folder = Path(folder)
    meta = read_meta(folder)
    files = meta["files"]
    try:
        c = SAEConfig(**{**meta["config"], "layer": 0})
        cfg = json.loads(ckpt.read_hashed(folder, CONFIG_FILE, files.get(CONFIG_FILE), "transcoder set", META_FILE))
        names = list(cfg["transcoders"])
    except (ckpt.CheckpointError, KeyError, TypeError, ValueError) as e:
        raise SAEError(
            "transcoders", f"{folder}: {CONFIG_FILE} or the config lacks or misstates a field: {e}"
        ) from None
    if cfg.get("feature_input_hook") != INPUT_HOOK or cfg.get("feature_output_hook") != OUTPUT_HOOK:
        raise SAEError("transcoders", f"{CONFIG_FILE}: only transcoders from {INPUT_HOOK} to {OUTPUT_HOOK} are read")
    codes, stats = [], []
    for i, name in enumerate(names):
        if name != f"layer_{i}.safetensors":
            raise SAEError("transcoders", f"{CONFIG_FILE}: transcoder {i} must be layer_{i}.safetensors (got {name!r})")
        t = Transcoder(SAEConfig(c.d_in, c.d_sae, i, c.activation, c.k))
        weights = _tensors(folder, name, files.get(name))
        if {k: v.shape for k, v in weights.items()} != {k: v.shape for k, v in t.state_dict().items()}:
            raise SAEError(
                "transcoders", f"{name} does not hold W_enc, b_enc, W_dec, b_dec of the shapes the config gives"
            )
        t.load_state_dict({k: v.float() for k, v in weights.items()})
        codes.append(t.eval().requires_grad_(False))
        s = _tensors(folder, f"stats_{i}.safetensors", files.get(f"stats_{i}.safetensors"))
        sae_mod._check_stats(s, c.d_sae)
        stats.append(s)
    if not codes:
        raise SAEError("transcoders", f"{CONFIG_FILE} lists no transcoders")
    return LoadedSet(codes, stats, meta, folder)


def default_name(tc: TranscoderTrainConfig) -> str:
    return f"{'clt-' if tc.kind == 'clt' else ''}x{tc.expansion}-{tc.activation}{tc.k if tc.activation == 'topk' else ''}-s{tc.seed}"


def train_and_save(
    ck: ckpt.Checkpoint,
    corpus_spec: str,
    tc: TranscoderTrainConfig,
    folder: str | Path,
    command: str,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Train a transcoder per block of checkpoint `ck` on the training split of `corpus_spec`, measure
    the set on the held-out split, save it in `folder`; returns what its JSON records."""
    return trained_and_saved(
        ck, corpus_spec, tc, folder, command, on_progress, should_stop, train_transcoders, quality, save_set
    )


def trained_and_saved(
    ck: ckpt.Checkpoint,
    corpus_spec: str,
    tc: TranscoderTrainConfig,
    folder: str | Path,
    command: str,
    on_progress: Callable[[dict], None] | None,
    should_stop: Callable[[], bool] | None,
    train: Callable[..., tuple[Any, Any, SetState]],
    measure: Callable[..., tuple[dict, list[dict]]],
    save: Callable[..., Path],
) -> dict:
    """train_and_save's work for either kind of set: train(model, ids, tc, on_progress, should_stop) ->
    (set, its start, record); measure(model, set, start, val_ids, tc) -> (figures, stats); save(folder,
    set, stats, meta, model_name)."""
    folder = Path(folder)
    run = artefact.prepare(ck, corpus_spec, tc, folder, SAEError, should_stop)
    run.started()
    codes, start, st = train(run.model, run.train_ids, tc, on_progress, should_stop)
    run.trained()
    if on_progress is not None:
        on_progress({"phase": "evaluating", "step": st.step, "tokens": st.tokens, "progress": 1.0})
    figures, stats = measure(run.model, codes, start, run.val_ids, tc)
    meta = artefact.record(folder, ck, run, tc, command, st, quality=figures)
    save(folder, codes, stats, meta, str(ck.meta.name or "model"))
    return meta
