"""Cross-layer transcoders (CLTs): one encoder per block, each writing to its own MLP's output and to every
later one's, trained on the model's own text.

A per-layer transcoder (model/transcoders.py) stands in for one MLP. A CLT's features of block l read what
MLP l reads, as a per-layer transcoder's do, but write to the output of every MLP l' >= l:

    pre_l = x_l @ W_enc[l] + b_enc[l]             x_l (d,): MLP l's input;  W_enc[l] (d, F)
    f_l   = TopK(pre_l)  or ReLU(pre_l)           (F,) block l's feature activations
    y_l'  = sum over l <= l' of f_l @ W_dec_l[:, l' - l] + b_dec[l']   MLP l''s output, approximated

W_dec_l is (F, L - l, d): a feature's rows, one per MLP it writes to, are unit length together (the
concatenation is normalised, as a per-layer transcoder's single row is). A feature computed once can so
stand for what several MLPs compute in turn, which per-layer transcoders must each rebuild: the standard
replacement model of circuit-tracer, Gemma Scope 2 and CLT-Forge. Trained jointly, every block's pairs on
the same batches (transcoders.PairStream), the squared error summed over the output blocks, AuxK for dead
features (their error: every MLP they write to), under the same budget (transcoders.run_steps).

The figures are a per-layer set's: per block the share of MLP l's output variance the CLT explains there,
the L0 and dead features of block l's encoder, and the loss with every MLP replaced at once.

On disk, circuit-tracer's CLT layout: W_enc_{l}.safetensors (W_enc_{l} (F, d), b_enc_{l} (F,),
b_dec_{l} (d,)), W_dec_{l}.safetensors (W_dec_{l} (F, L - l, d)), with config.json (model_kind
"cross_layer_transcoder", the hooks), stats_{l}.safetensors (block l's features' held-out statistics)
and gptscope_transcoders.json (kind "clt", how it was trained, the figures, every file's sha256), so a
CLT set is a transcoder set's folder: the same store lists both (`load_any`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from safetensors.torch import save as st_save
from torch import nn

from . import checkpoint as ckpt
from . import sae as sae_mod
from . import transcoders as tc_mod
from .gpt import GPT
from .sae import SAEConfig, SAEError
from .transcoders import CONFIG_FILE, FORMAT, INPUT_HOOK, META_FILE, OUTPUT_HOOK, LoadedSet, Transcoder

MODEL_KIND = "cross_layer_transcoder"  # config.json's, as circuit-tracer names the class
KIND = "clt"  # gptscope_transcoders.json's "kind" (a per-layer set's: none or "per_layer")
OWN_SHARE = 0.9  # of a feature's decoder norm that starts on its own block (the rest on the later ones)


@dataclass(frozen=True)
class CLTConfig:
    n_layer: int
    d_in: int
    d_sae: int  # features per block
    activation: sae_mod.Activation = "topk"
    k: int = 16  # TopK: features kept per token and block

    def layer(self, i: int) -> SAEConfig:
        return SAEConfig(self.d_in, self.d_sae, i, self.activation, self.k)


class CLT(nn.Module):
    """L encoders and their decoders to every later MLP. As a sequence it is its blocks' encoders, each
    a Transcoder view (`views`: block l's W_enc, b_enc, its own-block decoder rows and b_dec[l], sharing
    the CLT's memory), so what reads a set's transcoder l (its features, a graph's targets) reads it the
    same; what writes (a reconstruction, a graph's edges, steering) must use the CLT's decoders."""

    def __init__(self, cfg: CLTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        L, d, Fn = cfg.n_layer, cfg.d_in, cfg.d_sae
        w = torch.empty(L, Fn, d)
        for i in range(L):
            nn.init.kaiming_uniform_(w[i])
        w = w / w.norm(dim=-1, keepdim=True)
        self.W_enc = nn.Parameter(w.transpose(1, 2).contiguous())  # (L, d, F)
        self.b_enc = nn.Parameter(torch.zeros(L, Fn))
        dec = []
        for i in range(L):
            later = torch.randn(Fn, L - i - 1, d) * ((1 - OWN_SHARE**2) / max(1, L - i - 1) / d) ** 0.5
            dec.append(nn.Parameter(torch.cat([w[i][:, None] * OWN_SHARE, later], 1)))
        self.W_dec = nn.ParameterList(dec)  # W_dec[l] (F, L - l, d)
        self.b_dec = nn.Parameter(torch.zeros(L, d))
        self.b_in = torch.zeros(L, d)  # the inputs' means while training (not saved: folded into b_enc)
        self._views: list[Transcoder] | None = None
        self.normalize_decoder()

    # ---- as a sequence of encoders -------------------------------------------------------------

    def __len__(self) -> int:
        return self.cfg.n_layer

    def __getitem__(self, i: int) -> Transcoder:
        return self.views()[i]

    def __iter__(self) -> Iterator[Transcoder]:  # type: ignore[override]
        return iter(self.views())

    def views(self) -> list[Transcoder]:
        if self._views is None:
            views = []
            for i in range(self.cfg.n_layer):
                t = Transcoder(self.cfg.layer(i))
                t.W_enc = nn.Parameter(self.W_enc[i].detach(), requires_grad=False)
                t.b_enc = nn.Parameter(self.b_enc[i].detach(), requires_grad=False)
                t.W_dec = nn.Parameter(self.W_dec[i][:, 0].detach(), requires_grad=False)
                t.b_dec = nn.Parameter(self.b_dec[i].detach(), requires_grad=False)
                t.b_in = self.b_in[i]
                views.append(t.eval())
            self._views = views
        return self._views

    def _apply(self, fn, recurse=True):  # .double(), .to(): the views are made again on the new tensors
        self._views = None
        out = super()._apply(fn, recurse)
        self.b_in = fn(self.b_in)
        return out

    # ---- the maps ------------------------------------------------------------------------------

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., L, d) every MLP's input -> (..., L, F)."""
        return torch.einsum("...ld,ldf->...lf", x - self.b_in, self.W_enc) + self.b_enc

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        if self.cfg.activation == "relu":
            return torch.relu(pre)
        top = torch.topk(pre, self.cfg.k, dim=-1)
        return torch.zeros_like(pre).scatter_(-1, top.indices, torch.relu(top.values))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.pre_acts(x))

    def decode_to(self, fs: list[torch.Tensor], out: int) -> torch.Tensor:
        """MLP `out`'s output from blocks 0..out's activations fs[l] (..., F)."""
        y = self.b_dec[out]
        for i in range(out + 1):
            y = y + fs[i] @ self.W_dec[i][:, out - i]
        return y

    def decode(self, f: torch.Tensor) -> torch.Tensor:
        """f (..., L, F) -> every MLP's output (..., L, d)."""
        fs = f.unbind(-2)
        return torch.stack([self.decode_to(list(fs), o) for o in range(self.cfg.n_layer)], -2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.encode(x)
        return self.decode(f), f

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        for w in self.W_dec:
            w.div_(w.flatten(1).norm(dim=1).clamp_min(1e-8)[:, None, None])

    @torch.no_grad()
    def fold_input_offset(self) -> None:
        self.b_enc.sub_(torch.einsum("ld,ldf->lf", self.b_in, self.W_enc))
        self.b_in = torch.zeros_like(self.b_in)
        self._views = None


# ---- training ---------------------------------------------------------------------------------


def _sparse_decode(clt: CLT, idx: torch.Tensor, vals: torch.Tensor, i: int) -> torch.Tensor:
    """Block i's chosen features (B, k) written to MLPs i.. (B, L - i, d) (embedding_bag: no (B, F) product)."""
    w = clt.W_dec[i]
    return F.embedding_bag(idx, w.flatten(1), per_sample_weights=vals, mode="sum").view(len(idx), *w.shape[1:])


def _auxk(clt: CLT, pre: torch.Tensor, err: torch.Tensor, dead: torch.Tensor) -> torch.Tensor:
    """AuxK per block (model/sae.py's auxk_loss): its dead features' k_aux largest pre-activations must
    write the error the live ones left at every MLP they write to."""
    loss = pre.new_zeros(())
    for i in range(clt.cfg.n_layer):
        n_dead = int(dead[i].sum())
        if not n_dead:
            continue
        k_aux = min(clt.cfg.d_in // 2, n_dead)
        masked = torch.where(dead[i][None], pre[:, i], torch.full_like(pre[:, i], -torch.inf))
        top = masked.topk(k_aux, dim=-1)
        out = _sparse_decode(clt, top.indices, torch.relu(top.values), i)
        loss = loss + min(n_dead / k_aux, 1.0) * (out - err[:, i:]).pow(2).sum(-1).mean(0).sum()
    return loss


def _step(clt: CLT, opt: torch.optim.Adam, x: torch.Tensor, y: torch.Tensor, tc, since: torch.Tensor) -> list[dict]:
    """One update on every block's pairs x, y (B, L, d); since (L, F) tokens since each feature fired.
    Returns a record per block (its output's FVU, its encoder's L0 and dead features)."""
    L = clt.cfg.n_layer
    pre = clt.pre_acts(x)  # (B, L, F)
    dead = since >= tc.dead_after_tokens
    if clt.cfg.activation == "topk":
        top = pre.topk(clt.cfg.k, dim=-1)
        vals, idx = torch.relu(top.values), top.indices  # (B, L, k)
        y_hat = clt.b_dec.expand_as(y)
        for i in range(L):
            y_hat = y_hat + F.pad(_sparse_decode(clt, idx[:, i], vals[:, i], i), (0, 0, i, 0))
        extra = tc.aux_coefficient * _auxk(clt, pre, (y - y_hat).detach(), dead)
        active = (vals > 0).sum(-1)  # (B, L)
        fired = [idx[:, i][vals[:, i] > 0] for i in range(L)]
    else:
        f = torch.relu(pre)
        y_hat = clt.decode(f)
        extra = tc.l1_coefficient * f.sum(-1).mean(0).sum()
        active = (f > 0).sum(-1)
        fired = [(f[:, i] > 0).any(0).nonzero().flatten() for i in range(L)]
    mse = (y_hat - y).pow(2).sum(-1).mean(0)  # (L,)
    opt.zero_grad(set_to_none=True)
    (mse.sum() + extra).backward()
    opt.step()
    clt.normalize_decoder()
    with torch.no_grad():
        since += len(x)
        var = (y - y.mean(0)).pow(2).sum(-1).mean(0)
        recs = []
        for i in range(L):
            since[i, fired[i]] = 0
            recs.append(
                {"fvu": float(mse[i] / var[i]), "l0": float(active[:, i].float().mean()), "dead": int(dead[i].sum())}
            )
        return recs


def train_clt(
    model: GPT,
    train_ids: torch.Tensor,
    tc: tc_mod.TranscoderTrainConfig,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    log_every: int = 20,
) -> tuple[CLT, CLT, tc_mod.SetState]:
    """A CLT on every block of the model, trained on its own text (expansion x d features per block).
    Returns the trained CLT, the CLT as it started and the run's record. The model is only read."""
    tc.validate(model)
    torch.manual_seed(tc.seed)
    d, L = model.cfg.d_model, model.cfg.n_layer
    clt = CLT(CLTConfig(L, d, tc.expansion * d, tc.activation, tc.k))
    batches = tc_mod.PairStream(model.eval(), train_ids.long(), tc.seed).batches(tc.batch_tokens)
    first = next(batches)
    with torch.no_grad():
        for i, (x, y) in enumerate(first):
            clt.b_in[i], _ = x.mean(0), clt.b_dec[i].copy_(y.mean(0))
            scale = (y - y.mean(0)).norm(dim=-1).mean() / ((x - x.mean(0)).norm(dim=-1).mean() * tc.k**0.5)
            clt.W_enc[i].mul_(scale * d**0.5)
    start = copy.deepcopy(clt)
    opt = torch.optim.Adam(clt.parameters(), lr=tc.lr)
    since = torch.zeros(L, clt.cfg.d_sae, dtype=torch.long)

    def step(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[dict]:
        x = torch.stack([p[0] for p in pairs], 1)
        y = torch.stack([p[1] for p in pairs], 1)
        return _step(clt, opt, x, y, tc, since)

    st = tc_mod.run_steps(tc, [opt], step, first, batches, on_progress, should_stop, log_every)
    for c in (clt, start):
        c.fold_input_offset()
    return clt.requires_grad_(False), start.requires_grad_(False), st


# ---- the figures ------------------------------------------------------------------------------


def write_fn(clt: CLT) -> Callable[[int, dict[int, torch.Tensor]], torch.Tensor]:
    """What replaces MLP i's output in a run with every MLP replaced (transcoders.replaced_losses): block
    i's features on this run's MLP input i, then the CLT's write there from blocks 0..i."""
    fs: dict[int, torch.Tensor] = {}

    def write(i: int, seen: dict[int, torch.Tensor]) -> torch.Tensor:
        fs[i] = clt[i].encode(seen[i])
        return clt.decode_to([fs[j] for j in range(i + 1)], i)

    return write


@torch.no_grad()
def _layer_figures(clt: CLT, x: torch.Tensor, y: torch.Tensor) -> tuple[list[float], list[tuple]]:
    """Every block's FVE of the CLT's write on held-out pairs x, y (n, L, d), and each block's nonzero
    activations as (token, feature, value)."""
    sq, found = torch.zeros(clt.cfg.n_layer, dtype=torch.float64), []
    for start, (a, b) in enumerate(zip(x.split(2048), y.split(2048))):
        y_hat, f = clt(a)
        sq += (y_hat - b).pow(2).sum((0, 2)).double()
        t, li, j = f.nonzero(as_tuple=True)
        found.append((t + start * 2048, li, j, f[t, li, j]))
    total = (y - y.mean(0)).pow(2).sum((0, 2)).double()
    t, li, j, v = (torch.cat(p) for p in zip(*found))
    return (1.0 - sq / total).tolist(), [(t[li == i], j[li == i], v[li == i]) for i in range(clt.cfg.n_layer)]


def quality(
    model: GPT, clt: CLT, start: CLT, val_ids: torch.Tensor, tc: tc_mod.TranscoderTrainConfig
) -> tuple[dict, list[dict]]:
    """The CLT's figures beside its start's, as a per-layer set's (transcoders.quality), and each
    block's features' statistics."""
    seqs = sae_mod.held_out_windows(val_ids, model.cfg.n_ctx, tc.eval_sequences)
    pairs = [tc_mod.mlp_pairs(model.eval(), s) for s in seqs.split(16)]
    L = model.cfg.n_layer
    x = torch.stack([torch.cat([p[i][0] for p in pairs]) for i in range(L)], 1)
    y = torch.stack([torch.cat([p[i][1] for p in pairs]) for i in range(L)], 1)
    fve, acts = _layer_figures(clt, x, y)
    fve0, acts0 = _layer_figures(start, x, y)
    layers, stats = [], []
    for i in range(L):
        tok, feat, val = acts[i]
        s = sae_mod.feature_stats(tok, feat, val, len(x), clt.cfg.d_sae)
        layers.append(
            {
                "layer": i, "fve": fve[i], "fve_at_init": fve0[i], "l0": len(tok) / len(x),
                "dead": int((s["density"] == 0).sum()), "dead_at_init": int((torch.bincount(acts0[i][1], minlength=clt.cfg.d_sae) == 0).sum()),
                "d_sae": clt.cfg.d_sae,
            }
        )  # fmt: skip
        stats.append({**s, "eval_ids": seqs.int()})
    ce = tc_mod.replaced_losses(model.eval(), list(clt), seqs[: tc.ce_sequences], write_fn(clt))
    added, zeroed = ce["replaced"] - ce["clean"], ce["zero_ablation"] - ce["clean"]
    figures = {
        "tokens": int(seqs.numel()), "sequences": len(seqs), "ce_sequences": min(tc.ce_sequences, len(seqs)),
        "layers": layers, "loss_clean": ce["clean"], "loss_replaced": ce["replaced"],
        "loss_zero_ablation": ce["zero_ablation"], "loss_recovered": 1.0 - added / zeroed if zeroed > 0 else None,
    }  # fmt: skip
    return figures, stats


# ---- files ------------------------------------------------------------------------------------


def _config_json(clt: CLT, model_name: str) -> dict:
    c = clt.cfg
    return {
        "model_name": model_name, "model_kind": MODEL_KIND, "feature_input_hook": INPUT_HOOK,
        "feature_output_hook": OUTPUT_HOOK, "activation": c.activation, "k": c.k if c.activation == "topk" else None,
        "d_model": c.d_in, "d_transcoder": c.d_sae, "n_layers": c.n_layer,
        "encoders": [f"W_enc_{i}.safetensors" for i in range(c.n_layer)],
        "decoders": [f"W_dec_{i}.safetensors" for i in range(c.n_layer)],
    }  # fmt: skip


def save_clt(folder: str | Path, clt: CLT, stats: list[dict], meta: dict, model_name: str) -> Path:
    """Write the CLT's folder atomically in circuit-tracer's layout (and gptscope's JSON); refuses an existing one."""
    blobs = {CONFIG_FILE: json.dumps(_config_json(clt, model_name), indent=1).encode("utf-8")}
    for i in range(clt.cfg.n_layer):
        enc = {f"W_enc_{i}": clt.W_enc[i].T, f"b_enc_{i}": clt.b_enc[i], f"b_dec_{i}": clt.b_dec[i]}
        blobs[f"W_enc_{i}.safetensors"] = st_save({k: v.detach().float().contiguous() for k, v in enc.items()})
        blobs[f"W_dec_{i}.safetensors"] = st_save({f"W_dec_{i}": clt.W_dec[i].detach().float().contiguous()})
        blobs[f"stats_{i}.safetensors"] = st_save(
            {k: v.contiguous() for k, v in stats[i].items()}, metadata={"format": FORMAT}
        )
    full = {**meta, "format": FORMAT, "version": 1, "kind": KIND, "config": asdict(clt.cfg)}
    return sae_mod.save_folder(folder, blobs, META_FILE, full, SAEError)


def _tensors(folder: Path, name: str, files: dict, want: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    t = tc_mod._tensors(folder, name, files.get(name))
    if {k: tuple(v.shape) for k, v in t.items()} != want:
        raise SAEError("transcoders", f"{name} does not hold {', '.join(want)} of the shapes the config gives")
    return t


def load_clt(folder: str | Path) -> LoadedSet:
    """Read a CLT's folder: JSON and safetensors only, every file checked against its sha256. The set's
    `codes` is the CLT (a sequence of its blocks' encoders)."""
    folder = Path(folder)
    meta = tc_mod.read_meta(folder)
    files = meta["files"]
    try:
        c = CLTConfig(**meta["config"])
        cfg = json.loads(ckpt.read_hashed(folder, CONFIG_FILE, files.get(CONFIG_FILE), "transcoder set", META_FILE))
        kind, hooks = cfg["model_kind"], (cfg["feature_input_hook"], cfg["feature_output_hook"])
    except (ckpt.CheckpointError, KeyError, TypeError, ValueError) as e:
        raise SAEError(
            "transcoders", f"{folder}: {CONFIG_FILE} or the config lacks or misstates a field: {e}"
        ) from None
    if kind != MODEL_KIND or hooks != (INPUT_HOOK, OUTPUT_HOOK):
        raise SAEError("transcoders", f"{CONFIG_FILE}: only {MODEL_KIND}s from {INPUT_HOOK} to {OUTPUT_HOOK} are read")
    clt, stats = CLT(c), []
    L, d, Fn = c.n_layer, c.d_in, c.d_sae
    with torch.no_grad():
        for i in range(L):
            enc = _tensors(
                folder,
                f"W_enc_{i}.safetensors",
                files,
                {f"W_enc_{i}": (Fn, d), f"b_enc_{i}": (Fn,), f"b_dec_{i}": (d,)},
            )
            w = _tensors(folder, f"W_dec_{i}.safetensors", files, {f"W_dec_{i}": (Fn, L - i, d)})
            clt.W_enc[i].copy_(enc[f"W_enc_{i}"].T)
            clt.b_enc[i].copy_(enc[f"b_enc_{i}"])
            clt.b_dec[i].copy_(enc[f"b_dec_{i}"])
            clt.W_dec[i].copy_(w[f"W_dec_{i}"])
            s = tc_mod._tensors(folder, f"stats_{i}.safetensors", files.get(f"stats_{i}.safetensors"))
            sae_mod._check_stats(s, Fn)
            stats.append(s)
    return LoadedSet(cast(list[Transcoder], clt.eval().requires_grad_(False)), stats, meta, folder)


def is_clt(codes: object) -> bool:
    return isinstance(codes, CLT)


def load_any(folder: str | Path) -> LoadedSet:
    """A transcoder set's folder, per-layer or cross-layer (its JSON's kind)."""
    return load_clt(folder) if tc_mod.read_meta(folder).get("kind") == KIND else tc_mod.load_set(folder)


def train_and_save(
    ck: ckpt.Checkpoint,
    corpus_spec: str,
    tc: tc_mod.TranscoderTrainConfig,
    folder: str | Path,
    command: str,
    on_progress: Callable[[dict], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """transcoders.train_and_save for either kind (tc.kind): a CLT is trained, measured and saved the same way."""
    if tc.kind != KIND:
        return tc_mod.train_and_save(ck, corpus_spec, tc, folder, command, on_progress, should_stop)
    return tc_mod.trained_and_saved(
        ck, corpus_spec, tc, folder, command, on_progress, should_stop, train_clt, quality, save_clt
    )
