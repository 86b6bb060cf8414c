"""Two checkpoints on one text (POST /api/v1/compare): the same data functions as the forward page,
run on each, then lined up on the text's characters."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from gptscope.model.gpt import count_params

from .. import memory
from ..config import BUILTIN_CHECKPOINT
from ..digits import FINE, VALUE
from ..errors import InputError
from ..models import ModelRegistry
from ..runs import RunManager
from ..schemas.compare import CompareRequest, CompareResponse, CompareSide, ParamChange, ParamComparison
from ..service import ModelService
from . import parts as forward_parts
from . import stages
from .common import attention_rows, check_index, next_tokens, prompt_ids
from .forward import ARRAY_BINARY, ARRAY_JSON, Plan, run_trace
from .forward import need as trace_need
from .model_info import model_info
from .tokens import token_pieces

LN2 = math.log(2)


def _token_at_char(pieces, char: int) -> int:
    for p in pieces:
        if p.special and p.end == p.start:  # a beginning-of-text token covers no character
            continue
        if p.start <= char < max(p.end, p.start + 1):
            return p.index
    return pieces[-1].index


def _char_bits(pieces, token_loss: list[float | None], n_chars: int) -> list[float | None]:
    """Each token's loss (bits) spread evenly over its characters; a token that covers no whole
    character (part of a multi-byte one) adds to the character it starts in."""
    out: list[float | None] = [None] * n_chars
    for p, loss in zip(pieces, token_loss):
        if loss is None:
            continue
        bits = loss / LN2
        span = (
            range(p.start, p.end)
            if p.end > p.start
            else range(min(p.start, n_chars - 1), min(p.start, n_chars - 1) + 1)
        )
        for c in span:
            out[c] = (out[c] or 0.0) + bits / len(span)
    return out


PARTS = ("attention", "logit_lens")  # the forward page's own parts each side runs


def _side_plan(svc: ModelService, req: CompareRequest, char: int) -> tuple[Plan, list]:
    """A side's checked trace (the selected head's pattern and the logit lens, every position's
    logits) and its token pieces."""
    cfg = svc.model.cfg
    ids, _ = prompt_ids(svc, req.text, truncate=False, bos=req.bos)
    layer = check_index(req.layer, cfg.n_layer, "layer")
    head = check_index(req.head, cfg.n_head, "head")
    pieces = token_pieces(svc.encoding, ids, req.text)
    pos = _token_at_char(pieces, char)
    sel = stages.Selection(layers=[layer], heads=[head], layer=layer, head=head, position=pos)
    parts = [forward_parts.BY_NAME[p] for p in PARTS]
    return Plan(ids, 0, None, sel, parts, every_position=True), pieces


def services(runs: RunManager, models: ModelRegistry, req: CompareRequest) -> list[ModelService]:
    """The two checkpoints, loaded (the model cache's memory, not the request's)."""
    return [models.get(runs.checkpoint_path(name, BUILTIN_CHECKPOINT)) for name in (req.a, req.b)]


def need(svcs: list[ModelService], req: CompareRequest, binary: bool = False, where: str = "body") -> memory.Need:
    """Both sides' traces (forward.py's need: the first side's answer is kept while the second runs)
    and the two patterns' difference, named by `text`."""
    n = len(req.text)
    char = n - 1 if req.char is None else req.char
    total, T = 0, 0
    for svc in svcs:
        plan, _ = _side_plan(svc, req, min(char, n - 1))
        total += trace_need(svc, plan, binary).bytes
        T = max(T, len(plan.ids))
    total += T * T * (ARRAY_BINARY if binary else ARRAY_JSON)
    return memory.Need(total, "text", f"comparing two models on {T:,} tokens", "a shorter text", where=where)


def _side(name: str, svc: ModelService, req: CompareRequest, char: int) -> tuple[CompareSide, dict]:
    cfg = svc.model.cfg
    plan, pieces = _side_plan(svc, req, char)
    ids, sel, parts, pos = plan.ids, plan.sel, plan.parts, plan.sel.position
    layer, head = sel.layer, sel.head
    with svc.run() as m:
        trace = run_trace(svc, ids, parts, sel, m, every=True)  # every position's loss is drawn
        lens = stages.logit_lens(trace)
    logits = trace.logits.float()  # (T, V)
    lp = (
        torch.log_softmax(logits[:-1], -1).gather(-1, torch.tensor(ids[1:]).unsqueeze(-1))[:, 0]
        if len(ids) > 1
        else torch.zeros(0)
    )
    token_loss = [None] + [float(-x) for x in lp]
    total = float(-lp.sum()) / LN2
    covered = sum(max(p.end - p.start, 0) for p in pieces[1:])
    info = model_info(svc)
    side = CompareSide(
        checkpoint=name,
        model=svc.name,
        params=info.params,
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        d_model=cfg.d_model,
        vocab_size=cfg.vocab_size,
        tokenizer=info.tokenizer,
        tokens=pieces,
        token_loss=[None if x is None else round(x, VALUE) for x in token_loss],
        total_bits=round(total, VALUE),
        scored_chars=covered,
        bits_per_char=round(total / covered, VALUE) if covered else None,
        position=pos,
        next_token=next_tokens(svc, logits[pos], req.top_k),
        attention=attention_rows(trace.act("attn.hook_pattern", layer)[head], cfg.causal),
        logit_lens=lens,
    )
    return side, {
        "ids": ids,
        "logp": torch.log_softmax(logits[pos], -1),
        "pattern": trace.act("attn.hook_pattern", layer)[head],
        "token_loss": token_loss,
        "pieces": pieces,
    }


def _params(a: ModelService, b: ModelService) -> ParamComparison:
    sa, sb = a.model.state_dict(), b.model.state_dict()
    same = a.model.cfg.to_dict() | {"dropout": 0} == b.model.cfg.to_dict() | {"dropout": 0} and all(
        sa[k].shape == sb[k].shape for k in sa
    )
    changes = []
    if same:
        for k, va in sa.items():
            if a.model.cfg.tie_weights and k == "lm_head.weight":
                continue
            va, vb = va.float(), sb[k].float()
            na, nb = float(va.norm()), float(vb.norm())
            changes.append(
                ParamChange(
                    name=k,
                    shape=list(va.shape),
                    a_norm=round(na, VALUE),
                    b_norm=round(nb, VALUE),
                    relative_change=round(float((vb - va).norm()) / na, FINE) if na else None,
                )
            )
    return ParamComparison(
        same_architecture=same,
        a_params=count_params(a.model.cfg)["total"],
        b_params=count_params(b.model.cfg)["total"],
        changes=changes,
    )


def compare(
    runs: RunManager, models: ModelRegistry, req: CompareRequest, svcs: list[ModelService] | None = None
) -> CompareResponse:
    """The comparison (`svcs`: the two checkpoints when the caller loaded them already, to hold `need`)."""
    svcs = svcs or services(runs, models, req)
    n = len(req.text)
    char = n - 1 if req.char is None else req.char
    if char >= n:
        raise InputError("char", f"{char} is past the text's last character ({n - 1})")
    (sa, ia), (sb, ib) = (_side(name, svc, req, char) for name, svc in zip((req.a, req.b), svcs))
    same_tok = svcs[0].meta.tokenizer == svcs[1].meta.tokenizer and ia["ids"] == ib["ids"]
    bits_a = _char_bits(ia["pieces"], ia["token_loss"], n)
    bits_b = _char_bits(ib["pieces"], ib["token_loss"], n)
    # the characters both models scored: index -> (bits of a, bits of b)
    both = {i: (a, b) for i, (a, b) in enumerate(zip(bits_a, bits_b)) if a is not None and b is not None}
    kl_ab = kl_ba = diff = None
    if same_tok:
        pa, pb = ia["logp"], ib["logp"]
        kl_ab = round(float(F.kl_div(pb, pa, log_target=True, reduction="sum")), FINE)  # sum p_a (log p_a - log p_b)
        kl_ba = round(float(F.kl_div(pa, pb, log_target=True, reduction="sum")), FINE)
        if svcs[0].model.cfg.causal == svcs[1].model.cfg.causal:
            diff = attention_rows(ib["pattern"] - ia["pattern"], svcs[0].model.cfg.causal)
    r5 = lambda x: None if x is None else round(x, VALUE)  # noqa: E731
    return CompareResponse(
        text=req.text,
        char=char,
        layer=req.layer,
        head=req.head,
        a=sa,
        b=sb,
        same_tokenizer=same_tok,
        char_bits_a=[r5(x) for x in bits_a],
        char_bits_b=[r5(x) for x in bits_b],
        char_bits_diff=[r5(both[i][1] - both[i][0]) if i in both else None for i in range(n)],
        common_chars=len(both),
        common_bits_a=round(sum(a for a, _ in both.values()), VALUE),
        common_bits_b=round(sum(b for _, b in both.values()), VALUE),
        kl_ab=kl_ab,
        kl_ba=kl_ba,
        attention_diff=diff,
        params=_params(*svcs),
    )
