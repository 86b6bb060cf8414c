"""A run's timeline (POST /api/v1/timeline/jobs): each snapshot read once, the same way, and kept; then
the snapshots followed in step order.

`plan` checks the request against the run (its snapshots, the pair, the SAEs' layer, the memory)
before any work; `read_snapshot` reads one snapshot: its loss on the run's own held-out windows (and
per kind of token), the in-context-learning score, every head's role scores (shared with
GET /training/{id}/heads), the logit lens's KL per stage and a tuned lens's trained for it, an SAE
trained on it, and the pair's edge circuit (EAP-IG, through /circuits' own code); `assemble` follows
them: the induction score's phase change, each series' largest jump, the circuit's edges as they
appear, the SAE features matched by decoder cosine with their births and deaths, and the findings
in words.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import get_args

import torch

from gptscope.model import checkpoint as ckpt
from gptscope.model import corpus as corpus_mod
from gptscope.model import heads as model_heads
from gptscope.model import sae as sae_mod
from gptscope.model import timeline
from gptscope.model import tuned_lens as tl
from gptscope.model.errors import Cancelled

from .. import jobs, memory
from ..digits import COARSE, SECONDS, VALUE
from ..errors import InputError, NotFound
from ..models import ModelRegistry
from ..runs import RUN_ID, RunManager
from ..schemas.circuits import CircuitRequest
from ..schemas.heads import IclScore, InContext, RoleName
from ..schemas.timeline import (
    EdgeSeries,
    FeatureTimeline,
    Jump,
    KindLoss,
    LensStage,
    Lineage,
    SnapshotCircuit,
    SnapshotSAE,
    TimelineRequest,
    TimelineResponse,
    TimelineSnapshot,
)
from ..service import LRU, ModelService
from . import circuits as explain_circuits
from . import heads as explain_heads
from .common import token_text
from .patch_pairs import pairs

MAX_SNAPSHOTS = 64  # a run's timeline reads at most this many snapshots (evenly chosen beyond)
SAE_EXPANSION, SAE_K = 8, 16  # each snapshot's SAE: 8 features per stream dimension, 16 kept per token
SAE_BATCH, SAE_LR, LENS_BATCH = 256, 1e-2, 1024
TRAIN_CHARS = 400_000  # of the run's training text the SAEs and lenses read windows from
READ_TOKENS, READ_BYTES = 8192, 128 * 2**20  # positions of it read once per snapshot, and their streams' bytes at most
TOP_EDGES = 24
MIN_EFFECT = 0.1  # nats of the pair's metric, clean against corrupted, below which a snapshot has no circuit
MAX_EDGE_SERIES = 48
MAX_LINEAGES = 64
CACHE_BYTES = 64 * 2**20  # the snapshots read, kept by bytes (an SAE's alive decoder rows are most of it)


@dataclass
class Plan:
    req: TimelineRequest
    run: str
    snapshots: list[tuple[int, Path]]
    pair: dict | None  # the shipped pair's clean, corrupted, answer and wrong token ids
    pair_name: str | None
    pairs: list[str]  # the shipped pairs that fit the run
    sae_layer: int
    n_layer: int
    n_head: int
    need: memory.Need
    total: int = 0


@dataclass
class Read:
    """One snapshot read: its answer, its full EAP-IG vector and its SAE's alive decoder rows."""

    snap: TimelineSnapshot
    baseline: dict
    edge_scores: torch.Tensor | None = None
    edge_names: list[str] = field(default_factory=list)
    circuit_edges: list[int] = field(default_factory=list)
    decoder: torch.Tensor | None = None  # (alive, d)
    alive_ids: list[int] = field(default_factory=list)
    twin_share: float | None = None  # the last snapshot's: alive features its SAE's twin also learned

    def nbytes(self) -> int:
        d = 0 if self.decoder is None else self.decoder.numel() * 4
        e = 0 if self.edge_scores is None else self.edge_scores.numel() * 40
        return d + e + 64_000


_READS: LRU[tuple, Read] = LRU(CACHE_BYTES, size=Read.nbytes)


# --- where a run's snapshots are ---------------------------------------------------------------------


def series_folder(runs: RunManager, run: str) -> Path:
    """The folder whose snapshots/step-NNNNNN folders are the run: an app run's, or models/NAME's
    (a series imported with `gptscope import --series`)."""
    if run.startswith("models/"):
        name = run.removeprefix("models/")
        base, folder = runs.models_dir, runs.models_dir / name
    else:
        if not RUN_ID.fullmatch(run):
            raise NotFound(f"no run with snapshots named {run!r}")
        base, folder = runs.runs_dir, runs.runs_dir / run
    folder = folder.resolve()
    if base.resolve() not in folder.parents or not (folder / "snapshots").is_dir():
        raise NotFound(f"no run with snapshots named {run!r}")
    return folder


def snapshot_dirs(folder: Path) -> list[tuple[int, Path]]:
    """(step, folder) of a run's complete snapshots, in step order."""
    out = []
    for p in (folder / "snapshots").glob("step-*"):
        step = p.name.removeprefix("step-")
        if step.isdigit() and (p / ckpt.META_NAME).is_file():
            out.append((int(step), p))
    return sorted(out)


def sources(runs: RunManager) -> list[dict]:
    """Every run the timeline can read: the app's runs and the imported series, with their snapshots' steps."""
    found = []
    for base, prefix in ((runs.runs_dir, ""), (runs.models_dir, "models/")):
        if not base.is_dir():
            continue
        for d in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith(".")):
            steps = [s for s, _ in snapshot_dirs(d)]
            if len(steps) >= 2:
                found.append({"run": prefix + d.name, "steps": steps})
    return found


def _thin(snaps: list[tuple[int, Path]], n: int) -> list[tuple[int, Path]]:
    """At most n snapshots, the first and last always, the rest evenly by index."""
    if len(snaps) <= n:
        return snaps
    idx = sorted({round(i * (len(snaps) - 1) / (n - 1)) for i in range(n)})
    return [snaps[i] for i in idx]


# --- the plan: every check before any work -----------------------------------------------------------


def plan(runs: RunManager, models: ModelRegistry, req: TimelineRequest) -> Plan:
    folder = series_folder(runs, req.run)
    snaps = _thin(snapshot_dirs(folder), MAX_SNAPSHOTS)
    if len(snaps) < 2:
        raise InputError("run", f"run {req.run} has {len(snaps)} snapshot(s); a timeline needs at least 2")
    last = models.get(snaps[-1][1])
    cfg = last.model.cfg
    layer = cfg.n_layer // 2 if req.sae_layer is None else req.sae_layer
    if not 0 <= layer < cfg.n_layer:
        raise InputError("sae_layer", f"sae_layer must be a block of the model: 0..{cfg.n_layer - 1} (got {layer})")
    pair, name = _pair(last, req.pair)
    need = _need(last, req, pair)
    fits = [p.name for p in pairs(last)]
    return Plan(req, req.run, snaps, pair, name, fits, layer, cfg.n_layer, cfg.n_head, need, total=len(snaps))


def _pair(svc: ModelService, asked: str | None) -> tuple[dict | None, str | None]:
    if asked is None:
        return None, None
    fits = pairs(svc)
    chosen = next((p for p in fits if p.name == asked), None) if asked else (fits[0] if fits else None)
    if chosen is None:
        if asked:
            names = [p.name for p in fits]
            raise InputError("pair", f"pair {asked!r} does not fit this run's tokenizer; pairs that fit: {names}")
        return None, None
    return {
        "clean": chosen.clean,
        "corrupted": chosen.corrupted,
        "answer": chosen.answer,
        "wrong": chosen.wrong,
    }, chosen.name


def _circuit_request(p: dict, target: float) -> CircuitRequest:
    return CircuitRequest(
        clean=p["clean"],
        corrupted=p["corrupted"],
        answer=p["answer"],
        wrong=p["wrong"],
        methods=["eap_ig"],
        exact="none",
        rank_by="eap_ig",
        target=target,
    )


def _read_windows(cfg, stages: int) -> int:
    """How many windows of n_ctx the snapshot's one read of its streams covers."""
    return max(1, min(READ_TOKENS, READ_BYTES // (stages * cfg.d_model * 4)) // cfg.n_ctx)


def _need(svc: ModelService, req: TimelineRequest, pair: dict | None) -> memory.Need:
    """The peak of one snapshot's reading: two models (the one read and the registry's next), the
    streams its SAE and lens train on, and the largest of what works on them one after another (a
    window's log-probabilities, a lens batch's, the SAE's training, the circuit's runs)."""
    cfg = svc.model.cfg
    params = sum(p.numel() for p in svc.model.parameters()) * 4
    stages = len(tl.stream_hooks(cfg))
    streams = (
        _read_windows(cfg, stages) * cfg.n_ctx * stages * cfg.d_model * 4 if req.sae_tokens or req.lens_tokens else 0
    )
    parts = [cfg.n_ctx * cfg.vocab_size * 4 * 6]  # a window's logits, log-probabilities and their kin
    if req.sae_tokens:
        parts.append(sae_mod.train_bytes(cfg.d_model, cfg.n_ctx, SAE_EXPANSION * cfg.d_model, SAE_BATCH))
    if req.lens_tokens:
        parts.append(LENS_BATCH * cfg.vocab_size * 4 * 6 + stages * LENS_BATCH * cfg.d_model * 4)
    if pair is not None:
        c = explain_circuits.check(svc, _circuit_request(pair, req.circuit_target), explain_circuits.MAX_JOB_MACS)
        parts.append(c.need.bytes)
    return memory.Need(
        2 * params + streams + max(parts), "run", f"the timeline of run {req.run}", "a run of a smaller model"
    )


def _lens_config(req: TimelineRequest) -> tl.LensTrainConfig:
    return tl.LensTrainConfig(
        max_tokens=max(req.lens_tokens, LENS_BATCH),
        batch_tokens=LENS_BATCH,
        time_budget=0,
        eval_sequences=8,
    )


def _sae_config(req: TimelineRequest, layer: int, seed: int) -> sae_mod.SAETrainConfig:
    """Each snapshot's SAE starts from its own seed (its step): a feature matched across snapshots is one
    both SAEs learned, never one they shared from the start. SAE_LR moves the decoder rows far from where
    they started within the few tokens a snapshot gets (at the trainer's 3e-3 they stay at cosine 0.8)."""
    return sae_mod.SAETrainConfig(
        layer=layer,
        expansion=SAE_EXPANSION,
        k=SAE_K,
        lr=SAE_LR,
        batch_tokens=SAE_BATCH,
        max_tokens=max(req.sae_tokens, SAE_BATCH),
        time_budget=0,
        seed=seed % 2**31,
        eval_sequences=8,
        ce_sequences=1,
    )


# --- one snapshot ------------------------------------------------------------------------------------


@lru_cache(maxsize=4)
def _train_text(spec: str, mtime: float, val_fraction: float) -> str:
    return corpus_mod.load(spec).split(val_fraction)[0][:TRAIN_CHARS]


def _train_ids(svc: ModelService) -> torch.Tensor:
    """Token ids of the start of the run's own training text (the built-in corpus's when it is gone)."""
    spec = str((svc.meta.train_config or {}).get("corpus") or "shakespeare")
    val = float((svc.meta.corpus or {}).get("val_fraction", corpus_mod.VAL_FRACTION))
    try:
        mtime = 0.0 if spec in corpus_mod.BUILTIN else Path(spec).stat().st_mtime
        text = _train_text(spec, mtime, val)
    except (OSError, ValueError):
        text = _train_text("shakespeare", 0.0, corpus_mod.VAL_FRACTION)
    return torch.from_numpy(corpus_mod.encode(svc.encoding, text).astype("int64"))


_KINDS: LRU[tuple, torch.Tensor] = LRU(8)


def _kinds(svc: ModelService) -> torch.Tensor:
    key = (id(svc.encoding), svc.model.cfg.vocab_size)
    kinds = _KINDS.get(key)
    if kinds is None:
        kinds = timeline.token_kinds([token_text(svc, i) for i in range(svc.model.cfg.vocab_size)])
        _KINDS.put(key, kinds)
    return kinds


def read_snapshot(
    models: ModelRegistry, p: Plan, step: int, path: Path, cancel: Callable[[], bool], last: bool = False
) -> Read:
    """One snapshot's reading, or the one kept from before for the same request; the last snapshot's
    also trains its SAE's twin from another seed (the yardstick for matched features)."""
    r = p.req
    key = (str(path), (path / ckpt.META_NAME).stat().st_mtime, p.pair_name, p.sae_layer, r.sae_tokens,
           r.lens_tokens, r.circuit_target, last)  # fmt: skip
    kept = _READS.get(key)
    if kept is not None:
        kept.snap = kept.snap.model_copy(update={"seconds": 0.0})
        return kept
    t0 = time.perf_counter()
    svc = models.get(path)
    scores, extra, val_loss, _ = explain_heads.snapshot_scores(models, path)
    windows, _source = explain_heads.icl_windows(svc)
    with svc.run() as m:
        torch.set_num_threads(max(svc.threads, jobs.JOB_THREADS))  # a job's own threads, not a request's
        losses = timeline.position_losses(m, windows)
        streams = _streams(m, svc) if r.lens_tokens or r.sae_tokens else []
        lens = _lens(m, streams, windows, r, cancel)
        sae_part = _sae(m, streams, windows, r, p.sae_layer, step, cancel)
        # the yardstick for the matches: a second SAE of the last snapshot, from another seed
        twin = _sae(m, streams, windows, r, p.sae_layer, step + 1, cancel) if sae_part and last else None
        del streams
    _stop(cancel)
    circuit, effect = _circuit(svc, p, cancel) if p.pair is not None else (None, None)
    icl = timeline.icl_from_losses(losses)
    t = {k: torch.tensor(v) for k, v in scores.items()}
    roles = model_heads.assign_roles(t, extra["baseline"])
    snap = TimelineSnapshot(
        step=step,
        val_loss=val_loss,
        loss=icl.loss,
        loss_by_kind=[KindLoss(**k) for k in timeline.loss_by_kind(losses, windows, _kinds(svc))],
        icl=IclScore(**{**vars(icl), "early": list(icl.early), "late": list(icl.late), "text": _source}),
        in_context=InContext(**extra["in_context"]),
        scores={k: [[round(x, COARSE) for x in row] for row in v] for k, v in scores.items()},
        best={k: round(float(v.max()), COARSE) for k, v in t.items()},
        role_counts={r: sum(r in hr for row in roles for hr in row) for r in model_heads.ROLES},
        lens=lens,
        sae=sae_part[0] if sae_part else None,
        circuit=circuit[0] if circuit else None,
        pair_effect=effect,
        seconds=0.0,
    )
    read = Read(snap, extra["baseline"])
    if sae_part:
        read.decoder, read.alive_ids = sae_part[1], sae_part[2]
    if sae_part and twin:
        same = timeline.match_features(sae_part[1], twin[1], r.min_cosine)
        read.twin_share = round(len(same.pairs) / max(1, len(sae_part[2])), COARSE)
    if circuit:
        read.edge_scores, read.edge_names, read.circuit_edges = circuit[1], circuit[2], circuit[3]
    read.snap.seconds = round(time.perf_counter() - t0, SECONDS)
    _READS.put(key, read)
    return read


def _stop(cancel: Callable[[], bool]) -> None:
    if cancel():
        raise Cancelled()


def _streams(m, svc: ModelService) -> list[torch.Tensor]:
    """The stream after every stage on READ windows of the run's training text: the one forward pass
    the snapshot's SAE and tuned lens both train on (READ_BYTES of it at most)."""
    hooks = tl.stream_hooks(m.cfg)
    T, n = m.cfg.n_ctx, _read_windows(m.cfg, len(hooks))
    ids = _train_ids(svc)
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, max(1, len(ids) - T), (n,), generator=g).tolist()
    return timeline.read_streams(m, torch.stack([ids[s : s + T] for s in starts]), hooks)


def _lens(
    m, streams: list[torch.Tensor], windows: torch.Tensor, r: TimelineRequest, cancel: Callable[[], bool]
) -> list[LensStage]:
    """The logit lens's KL per stage, and a tuned lens's trained for this snapshot on its streams (lens_tokens)."""
    lens = tl.TunedLens(m.cfg.d_model, len(streams) - 1)
    if r.lens_tokens:

        def batches():
            for rows in timeline.shuffled_batches(len(streams[0]), LENS_BATCH, 0):
                with torch.no_grad():  # the target: the model's own final distribution
                    logp = torch.log_softmax(tl.read_out(m, streams[-1][rows]).float(), -1)
                yield [s[rows] for s in streams], logp

        with torch.inference_mode(False), torch.enable_grad():  # the lock's inference mode, lifted to train
            lens, _ = tl.train_lens(m, torch.zeros(0), _lens_config(r), should_stop=cancel, batches=batches())
    per = [tl.quality(m, lens, w[None, :-1])["stages"] for w in windows]  # a window at a time: (T, V) at most
    return [
        LensStage(
            stage=stages[0]["stage"],
            logit_kl=round(sum(s["logit_kl"] for s in stages) / len(stages), VALUE),
            tuned_kl=round(sum(s["tuned_kl"] for s in stages) / len(stages), VALUE) if r.lens_tokens else None,
        )
        for stages in zip(*per)
    ]


def _sae(
    m,
    streams: list[torch.Tensor],
    windows: torch.Tensor,
    r: TimelineRequest,
    layer: int,
    seed: int,
    cancel: Callable[[], bool],
):
    """An SAE trained on this snapshot's stream after block `layer`: its figures on the held-out
    windows, its alive features' decoder rows and their numbers."""
    if not r.sae_tokens:
        return None
    acts = streams[layer + 1]  # stage 0 is the embeddings
    batches = (acts[rows] for rows in timeline.shuffled_batches(len(acts), SAE_BATCH, seed))
    with torch.inference_mode(False), torch.enable_grad():
        sae, _, _ = sae_mod.train_sae(
            m, torch.zeros(0), _sae_config(r, layer, seed), should_stop=cancel, batches=batches
        )
    with torch.no_grad():
        x = sae_mod.residuals(m, windows[:, :-1], layer).reshape(-1, m.cfg.d_model)
        x_hat, f = sae(x)
        fvu = float(((x - x_hat) ** 2).sum() / ((x - x.mean(0)) ** 2).sum().clamp_min(1e-12))
        alive = (f > 0).any(0).nonzero().flatten()
    part = SnapshotSAE(alive=len(alive), features=sae.cfg.d_sae, fvu=round(fvu, VALUE), born=0, died=0, kept=0)
    return part, sae.W_dec.detach()[alive].clone(), alive.tolist()


def _circuit(svc: ModelService, p: Plan, cancel: Callable[[], bool]):
    """The pair's edge circuit at this snapshot, by /circuits' own code; None when the snapshot's clean and
    corrupted metrics are too close for a share of their difference to mean anything."""
    assert p.pair is not None
    req = _circuit_request(p.pair, p.req.circuit_target)
    try:
        c = explain_circuits.check(svc, req, explain_circuits.MAX_JOB_MACS)
        plan = explain_circuits.planned(svc, req, c)
    except InputError as e:
        if e.field == "answer":
            return None, None  # the metric is the same on both prompts: nothing to explain yet
        raise
    clean, corrupted = plan.metrics()
    if abs(clean - corrupted) < MIN_EFFECT:  # no circuit to look for: the two prompts' runs say so at once
        return None, round(clean - corrupted, VALUE)
    res = explain_circuits.compute(svc, plan, cancel=cancel)
    scores = res.scores[0].values.tensor.float()
    order = res.circuit.edges
    top = sorted(order, key=lambda i: -abs(float(scores[i])))[:TOP_EDGES]
    part = SnapshotCircuit(
        metric=round(res.clean_metric, VALUE),
        effect=round(res.clean_metric - res.corrupted_metric, VALUE),
        edges=len(order),
        total_edges=len(res.edges),
        recovered=round(res.circuit.recovered, COARSE),
        top=[res.edges[i] for i in top],
    )
    return (part, scores, list(res.edges), list(order)), part.effect


# --- the snapshots followed ----------------------------------------------------------------------------


def compute(
    models: ModelRegistry,
    p: Plan,
    on_snapshot: Callable[[int, int | None, TimelineResponse | None], None] | None = None,
    cancel: Callable[[], bool] = lambda: False,
) -> TimelineResponse:
    """Read every snapshot in step order (on_snapshot(done, next step, the timeline so far) after each),
    then follow them."""
    reads: list[Read] = []
    for i, (step, path) in enumerate(p.snapshots):
        _stop(cancel)
        if on_snapshot is not None:
            on_snapshot(i, step, assemble(p, reads) if len(reads) >= 1 else None)
        reads.append(read_snapshot(models, p, step, path, cancel, last=i == len(p.snapshots) - 1))
    return assemble(p, reads)


def assemble(p: Plan, reads: list[Read]) -> TimelineResponse:
    snaps = [r.snap.model_copy(deep=True) for r in reads]
    base = reads[-1].baseline
    features = _features(p, reads, snaps)
    edges = _edges(reads)
    phase = explain_heads.phase_change_of(snaps, model_heads.threshold(base, "induction")) if len(snaps) > 1 else None
    jumps = _jumps(snaps)
    out = TimelineResponse(
        run=p.run,
        steps=[s.step for s in snaps],
        n_layer=p.n_layer,
        n_head=p.n_head,
        roles=explain_heads.definitions(base),
        pair=p.pair_name,
        pairs=p.pairs,
        min_effect=MIN_EFFECT,
        snapshots=snaps,
        phase_change=phase,
        jumps=jumps,
        edges=edges,
        features=features,
        summary="",
    )
    out.summary = _summary(out)
    return out


def _jumps(snaps: list[TimelineSnapshot]) -> list[Jump]:
    """Each series' largest jump between two snapshots: a rise of a role's best score, a fall of the
    ICL score or of the loss (said as the value, not its negative)."""
    series: list[tuple[str, list[tuple[int, float]], float]] = [
        (f"best {role} score", [(s.step, s.best[role]) for s in snaps], 1.0) for role in get_args(RoleName)
    ]
    series.append(("in-context-learning score", [(s.step, s.icl.score) for s in snaps], -1.0))
    series.append(("held-out loss", [(s.step, s.loss) for s in snaps], -1.0))
    out = []
    for name, pts, sign in series:
        pc = timeline.phase_change([(st, sign * v) for st, v in pts])
        if pc is None:
            continue
        out.append(
            Jump(
                series=name,
                step=pc.step,
                from_step=pc.from_step,
                before=round(sign * pc.before, VALUE),
                after=round(sign * pc.after, VALUE),
                share=round(pc.share, COARSE),
            )
        )
    return sorted(out, key=lambda j: -j.share)


def _edges(reads: list[Read]) -> list[EdgeSeries]:
    """The edges of the last circuit (largest score first), then those of earlier circuits, each
    scored at every snapshot."""
    with_circuit = [r for r in reads if r.edge_scores is not None]
    if not with_circuit:
        return []
    names = with_circuit[-1].edge_names
    order: list[int] = []
    for r in reversed(with_circuit):
        assert r.edge_scores is not None
        size = r.edge_scores.abs()
        ranked = sorted(r.circuit_edges, key=lambda i: -float(size[i]))
        order += [i for i in ranked if i not in order]
    out = []
    for i in order[:MAX_EDGE_SERIES]:
        scores = [None if r.edge_scores is None else round(float(r.edge_scores[i]), VALUE) for r in reads]
        inside = [i in r.circuit_edges for r in reads]
        appears = None
        for k in range(len(reads) - 1, -1, -1):
            if not inside[k]:
                break
            appears = reads[k].snap.step
        out.append(EdgeSeries(name=names[i], scores=scores, in_circuit=inside, appears=appears))
    return out


def _features(p: Plan, reads: list[Read], snaps: list[TimelineSnapshot]) -> FeatureTimeline | None:
    """SAE features matched from each snapshot to the next by decoder cosine: births, deaths, lineages."""
    if any(r.decoder is None for r in reads):
        return None
    matches = []
    for i in range(1, len(reads)):
        a, b = reads[i - 1].decoder, reads[i].decoder
        assert a is not None and b is not None
        m = timeline.match_features(a, b, p.req.min_cosine)
        matches.append(m)
        sae = snaps[i].sae
        assert sae is not None
        sae.born, sae.died, sae.kept = len(m.born), len(m.died), len(m.pairs)
    rows = timeline.lineages(matches, len(reads[0].alive_ids))
    steps = [s.step for s in snaps]
    found = []
    for row in rows:
        alive = [k for k, f in enumerate(row) if f is not None]
        if not alive:
            continue
        born, last = alive[0], alive[-1]
        feats = [None if f is None else reads[k].alive_ids[f] for k, f in enumerate(row)]
        died = steps[last + 1] if last + 1 < len(steps) else None
        found.append(Lineage(features=feats, born=steps[born], died=died))
    found.sort(key=lambda lin: (-sum(f is not None for f in lin.features), lin.born))
    return FeatureTimeline(
        layer=p.sae_layer,
        min_cosine=p.req.min_cosine,
        lineages=found[:MAX_LINEAGES],
        count=len(found),
        same_snapshot_share=reads[-1].twin_share,
    )


def _summary(t: TimelineResponse) -> str:
    words = []
    if t.phase_change is not None:
        words.append(t.phase_change.summary)
    with_c = [(s.step, s.circuit) for s in t.snapshots if s.circuit is not None]
    if with_c:
        step, c = with_c[-1]
        words.append(
            f"The {t.pair} circuit at step {step:,} keeps {c.recovered:.0%} of the pair's {c.effect:.2f}-nat effect "
            f"with {c.edges:,} of {c.total_edges:,} edges; the pair has an effect to explain from step "
            f"{with_c[0][0]:,}."
        )
        grown = [e for e in t.edges if e.appears is not None][:3]
        if grown:
            words.append(
                "Its largest edges joined it at steps " + ", ".join(f"{e.appears:,} ({e.name})" for e in grown) + "."
            )
    last_sae = t.snapshots[-1].sae
    if t.features is not None and last_sae is not None:
        sae = [s.sae for s in t.snapshots[1:] if s.sae is not None]
        born, died = sum(x.born for x in sae), sum(x.died for x in sae)
        words.append(
            f"The SAEs after block {t.features.layer} have {last_sae.alive:,} alive features at the end; "
            f"{born:,} were born and {died:,} died between snapshots (matched at decoder cosine "
            f"{t.features.min_cosine:g} or above)."
        )
        if t.features.same_snapshot_share is not None:
            words.append(
                f"Two SAEs trained on the last snapshot from different seeds share {t.features.same_snapshot_share:.0%} "
                "of their features: a feature unmatched between snapshots is a death only where that share is high."
            )
    return " ".join(words)
