"""Head roles for the loaded model and over a run's snapshots (model.heads does the arithmetic)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import torch

from gptscope.model import corpus as corpus_mod
from gptscope.model import heads as model_heads
from gptscope.model import timeline
from gptscope.model.tokenizers import CharEncoding

from .. import memory
from ..config import LARGE_MODEL_PARAMS
from ..digits import COARSE
from ..errors import InputError, NotFound
from ..models import ModelRegistry
from ..runs import RUN_ID, RunManager
from ..schemas.heads import (
    Ablation,
    HeadRole,
    HeadsResponse,
    IclScore,
    InContext,
    PhaseChange,
    RepeatedTokensInput,
    RoleDefinition,
    RoleName,
    SnapshotHeads,
    TrainingHeads,
)
from ..service import LRU, ModelService, per_model
from .common import prompt_ids, token_text
from .forward import FLOAT, pass_bytes
from .tokens import token_pieces
from .training import snapshot_path

DEFAULT_TEXT_CHARS = 1200


@lru_cache(maxsize=1)
def default_text() -> str:
    """The start of the built-in corpus's held-out part: natural text no built-in model trained on."""
    _, held_out = corpus_mod.load("shakespeare").split(corpus_mod.VAL_FRACTION)
    return held_out[:DEFAULT_TEXT_CHARS]


def text_for(service: ModelService, text: str | None) -> str:
    if text is not None:
        return text
    t = default_text()
    if isinstance(service.encoding, CharEncoding):  # keep only the characters the vocabulary has
        t = "".join(c for c in t if c in service.encoding._charset)
    return t


def repeated(service: ModelService) -> model_heads.RepeatedTokens:
    cfg = service.model.cfg
    return model_heads.repeated_tokens(
        cfg.vocab_size, cfg.n_ctx, exclude=tuple(service.encoding._special_tokens.values())
    )


def definitions(base: dict[str, dict]) -> list[RoleDefinition]:
    return [
        RoleDefinition(
            name=r,
            definition=model_heads.DEFINITIONS[r],
            input="prompt" if r in model_heads.PROMPT_ROLES else "repeated random tokens",
            baseline_max=base[r]["max"],
            baseline_mean=base[r]["mean"],
            threshold=round(model_heads.threshold(base, r), COARSE),
        )
        for r in model_heads.ROLES
    ]


MAX_ABLATED_LARGE = 12  # role heads ablated in a large model (each ablation a pass from its block on)


def _status(h: model_heads.HeadReport) -> str:
    if not h.roles:
        return "no clear role"
    if h.ablation is None:
        return "untested"
    return "confirmed" if h.ablation["confirmed"] else "not confirmed"


def _summary(rep: model_heads.HeadsReport, n_heads: int) -> str:
    with_role = [h for h in rep.heads if h.roles]
    confirmed = [h for h in with_role if _status(h) == "confirmed"]
    tested = [h for h in with_role if h.ablation is not None]
    how = f" ({len(confirmed)} of the {len(tested)} tested confirmed by ablation)" if tested else " (ablation not run)"
    parts = [
        f"{len(with_role)} of {n_heads} heads have a role that beats random weights{how}"
        if with_role
        else f"none of the {n_heads} heads has a role that clearly beats random weights"
    ]
    best_ind = max(rep.heads, key=lambda h: h.scores["induction"])
    if "induction" not in {r for h in with_role for r in h.roles}:
        parts.append(
            f"no induction head: the best induction score is {best_ind.scores['induction']:.3f} "
            f"(L{best_ind.layer}H{best_ind.head}) against {rep.baseline['induction']['max']:.3f} for random weights"
        )
    ic = rep.in_context
    parts.append(
        f"in-context score {ic['in_context_score']:+.3f} nats (loss on the second copy of random tokens "
        f"{ic['second_copy_loss']:.3f} vs {ic['first_copy_loss']:.3f} on the first)"
    )
    return "; ".join(parts) + "."


@per_model(maxsize=1)
def _repeat_memo(service: ModelService) -> model_heads.RepeatMemo:
    """The model's work on the repeated random tokens, kept for every prompt (a few floats a head)."""
    return model_heads.RepeatMemo()


@per_model(maxsize=8)
def _analyse(service: ModelService, ids: tuple[int, ...], ablate: bool) -> model_heads.HeadsReport:
    large = service.model.num_params() >= LARGE_MODEL_PARAMS
    with service.run() as m:
        return model_heads.analyse(
            m,
            torch.tensor([ids], device=service.device),
            repeated(service),
            ablate=ablate,
            max_ablated=MAX_ABLATED_LARGE if large else None,
            memo=_repeat_memo(service),
        )


def need(service: ModelService, T: int) -> memory.Need:
    """The peak bytes of scoring a T-token prompt's heads: every head's pattern of every layer
    captured and stacked (2 x n_layer x n_head x T x T float32), the pass that makes them (every
    position's logits), a task loss's log-probabilities (T x V) and the clean pass's stream entering each
    block, where the ablated passes start (n_layer x T x d). The repeated random tokens and the
    random-weight twins are the model's own sizes, whatever the request."""
    cfg = service.model.cfg
    maps = 3 * cfg.n_layer * cfg.n_head * T * T * FLOAT  # (and half again: the twins' passes reuse the heap)
    loss = 2 * T * cfg.vocab_size * FLOAT
    entering = (cfg.n_layer + 1) * T * cfg.d_model * FLOAT
    return memory.Need(
        maps + pass_bytes(cfg, T, every=True) + loss + entering,
        "text",
        f"scoring every head on {T:,} tokens",
        "a shorter text",
        where="query",
    )


def heads(service: ModelService, text: str | None, ablate: bool = True) -> HeadsResponse:
    ids, _ = prompt_ids(service, text_for(service, text), truncate=True)
    if len(ids) < 2:
        raise InputError(
            "text", "the prompt needs at least 2 tokens to score attention between positions", where="query"
        )
    with memory.hold(need(service, len(ids))):
        rep_ = _analyse(service, tuple(ids), ablate)
    rep = repeated(service)
    cfg = service.model.cfg
    return HeadsResponse(
        model=service.name,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        margin=model_heads.ROLE_MARGIN,
        min_score=model_heads.ROLE_MIN,
        roles=definitions(rep_.baseline),
        prompt=token_pieces(service.encoding, ids),
        test_input=RepeatedTokensInput(
            seed=rep.seed, n=rep.n, ids=rep.ids.tolist(), tokens=[token_text(service, int(i)) for i in rep.ids[0]]
        ),
        heads=[
            HeadRole(
                layer=h.layer,
                head=h.head,
                scores=h.scores,
                roles=h.roles,
                status=_status(h),
                ablation=Ablation(**h.ablation) if h.ablation else None,
            )
            for h in rep_.heads
        ],
        in_context=InContext(**rep_.in_context),
        reference_cost=rep_.reference_cost,
        summary=_summary(rep_, cfg.n_layer * cfg.n_head),
    )


# --- over training ---------------------------------------------------------------------------------


_SNAPSHOT_SCORES: LRU[str, tuple[dict, dict, float | None, int]] = LRU(64)  # by snapshot folder


def snapshot_scores(models: ModelRegistry, path: Path) -> tuple[dict, dict, float | None, int]:
    """A snapshot's head scores, baseline, validation loss and step (kept: a run's snapshots are
    asked for again at each poll of its page)."""
    kept = _SNAPSHOT_SCORES.get(str(path))
    if kept is None:
        kept = _score_snapshot(models.get(path))  # the replay's loaded snapshot, not a second copy
        _SNAPSHOT_SCORES.put(str(path), kept)
    return kept


HELD_OUT_CHARS = 40_000  # of the held-out text the timeline's windows are spread over


@lru_cache(maxsize=4)
def _held_out(spec: str, mtime: float, val_fraction: float) -> tuple[str, str]:
    """(the corpus's sha256, the start of its held-out part); mtime: a replaced file is read again."""
    c = corpus_mod.load(spec)
    return c.sha256, c.split(val_fraction)[1][:HELD_OUT_CHARS]


def icl_windows(svc: ModelService) -> tuple[torch.Tensor, str]:
    """Windows of the held-out part of the corpus the snapshot trained on (its checkpoint names the
    file and its digest), or of the built-in corpus's when that text is no longer there as it was."""
    corpus, spec = svc.meta.corpus or {}, (svc.meta.train_config or {}).get("corpus")
    try:
        mtime = 0.0 if spec in corpus_mod.BUILTIN else Path(str(spec)).stat().st_mtime
        sha, text = _held_out(str(spec), mtime, float(corpus.get("val_fraction", corpus_mod.VAL_FRACTION)))
        source = "run" if sha == corpus.get("sha256") else ""
    except (OSError, ValueError, TypeError):
        source = ""
    if not source:
        text, source = text_for(svc, None), "builtin"
    ids = corpus_mod.encode(svc.encoding, text).astype("int64")
    return timeline.held_out_windows(torch.from_numpy(ids), svc.model.cfg.n_ctx), source


def _icl(m, svc: ModelService) -> dict | None:
    windows, source = icl_windows(svc)
    if len(windows) == 0:
        return None
    s = timeline.icl_score(m, windows)
    return {**vars(s), "early": list(s.early), "late": list(s.late), "text": source}


def _score_snapshot(svc: ModelService) -> tuple[dict, dict, float | None, int]:
    ids, _ = prompt_ids(svc, text_for(svc, None), truncate=True)
    with svc.run() as m:
        prompt = torch.tensor([ids])
        rep = repeated(svc)
        scores = model_heads.all_scores(m, prompt, rep)
        ic = model_heads.in_context_score(m, rep)
        icl = _icl(m, svc)
        base = _baseline_for(svc.model.cfg, tuple(ids), svc)
    evals = svc.meta.evals or []
    return (
        {r: v.tolist() for r, v in scores.items()},
        {"in_context": ic, "baseline": base, "icl": icl},
        evals[-1]["val_loss"] if evals else None,
        int(svc.meta.step or 0),
    )


# the random twins' baseline by configuration and prompt (a run's snapshots share one): a few floats a role,
# the latest 64 kept (the keys come from what runs and imports there are, so they are bounded too)
_BASELINES: LRU[tuple, dict] = LRU(64)


def _baseline_for(cfg, ids: tuple[int, ...], svc: ModelService) -> dict:
    key = (tuple(sorted(cfg.to_dict().items())), ids)
    base = _BASELINES.get(key)
    if base is None:
        base = model_heads.baseline(svc.model, torch.tensor([ids]), repeated(svc))
        _BASELINES.put(key, base)
    return base


def training_heads(runs: RunManager, models: ModelRegistry, run_id: str) -> TrainingHeads:
    if not RUN_ID.fullmatch(run_id) or not (run_id in runs.jobs or (runs.runs_dir / run_id).is_dir()):
        raise NotFound(f"no training run {run_id!r}")
    steps = runs.snapshot_steps(run_id)
    snaps, base = [], None
    for step in steps:
        scores, extra, val_loss, _ = snapshot_scores(models, snapshot_path(runs, run_id, step))
        base = extra["baseline"]
        t = {r: torch.tensor(v) for r, v in scores.items()}
        roles = model_heads.assign_roles(t, base)
        snaps.append(
            SnapshotHeads(
                step=step,
                val_loss=val_loss,
                scores={r: [[round(x, COARSE) for x in row] for row in v] for r, v in scores.items()},
                best={r: round(float(t[r].max()), COARSE) for r in model_heads.ROLES},
                role_counts={r: sum(r in hr for row in roles for hr in row) for r in model_heads.ROLES},
                in_context=InContext(**extra["in_context"]),
                icl=IclScore(**extra["icl"]) if extra.get("icl") else None,
            )
        )
    return TrainingHeads(
        run=run_id,
        roles=definitions(base) if base else [],
        margin=model_heads.ROLE_MARGIN,
        min_score=model_heads.ROLE_MIN,
        snapshots=snaps,
        phase_change=phase_change_of(snaps, model_heads.threshold(base, "induction")) if base else None,
    )


MIN_JUMP = 0.05  # the rise of the best induction score (0..1) between two snapshots that counts as a jump


class HasRoles(Protocol):
    """A snapshot's role scores as both the heads' timeline and the run's timeline (explain/timeline.py) keep them."""

    @property
    def step(self) -> int: ...
    @property
    def best(self) -> Mapping[RoleName, float]: ...
    @property
    def icl(self) -> IclScore | None: ...


def phase_change_of(snaps: Sequence[HasRoles], threshold: float) -> PhaseChange | None:
    """The step where the best induction score jumps most, what the in-context-learning score did
    over the same two snapshots, and the finding in words."""
    pc = timeline.phase_change([(s.step, s.best["induction"]) for s in snaps], MIN_JUMP)
    if pc is None:
        return None
    icl = {s.step: s.icl.score for s in snaps if s.icl is not None}
    drop = timeline.phase_change([(step, -v) for step, v in icl.items()])
    out = PhaseChange(
        step=pc.step,
        from_step=pc.from_step,
        induction_before=round(pc.before, COARSE),
        induction_after=round(pc.after, COARSE),
        share=round(pc.share, COARSE),
        clear=pc.clear,
        threshold=round(threshold, COARSE),
        icl_before=icl.get(pc.from_step),
        icl_after=icl.get(pc.step),
        icl_drop_step=drop.step if drop else None,
        summary="",
    )
    passed = next((s.step for s in snaps if s.best["induction"] >= threshold), None)
    out.summary = _phase_words(out, passed)
    return out


def _phase_words(pc: PhaseChange, passed: int | None) -> str:
    rise = f"from {pc.induction_before:.3f} to {pc.induction_after:.3f} between steps {pc.from_step:,} and {pc.step:,}"
    words = [
        f"The best induction score jumped most {rise} ({pc.share:.0%} of its range over the run)."
        if pc.clear
        else f"The best induction score never jumped: its largest rise between two snapshots was {rise}, "
        f"under the {MIN_JUMP} that counts as a jump."
    ]
    if pc.icl_before is not None and pc.icl_after is not None:
        fell = pc.icl_after < pc.icl_before
        words.append(
            f"Over the same steps the in-context-learning score went from {pc.icl_before:+.3f} to "
            f"{pc.icl_after:+.3f} nats: "
            + (
                "late tokens gained on early ones"
                + (", and are now the easier ones: the model uses its context." if pc.icl_after < 0 else ".")
                if fell
                else "it did not fall, so late tokens gained nothing on early ones there."
            )
        )
    if pc.icl_drop_step is not None and pc.icl_drop_step != pc.step:
        words.append(f"The in-context-learning score fell most at step {pc.icl_drop_step:,} instead.")
    if passed is None:
        words.append(
            f"No head reaches the induction threshold ({pc.threshold:.3f}) at any snapshot: no induction head "
            "has formed."
        )
    else:
        words.append(f"A head first passes the induction threshold ({pc.threshold:.3f}) at step {passed:,}.")
    return " ".join(words)
