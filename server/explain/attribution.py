"""Attribution graphs as the API shows them (POST /api/v1/attribution, its job form, the interventions,
the transcoder sets and their features). Every number comes from model/attribution.py and
model/transcoders.py, or from the statistics saved with the set.

`plan` checks a request against the served model and its transcoder set (the architecture, the
prompt, the target tokens) before anything runs, and estimates the memory its graph and answer take at
their peak (`need`, server/memory.py: more than the budget is a 422 naming `max_rows`, or the prompt
when even one row would not fit); `compute` traces the prompt, computes the incoming edges of the
target and of the features that matter most (the units its progress counts), prunes the graph by
influence and builds the answer, asking `cancel` all along. The plain endpoint holds the need around
its work (`attribution`), a job's runner around the job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gptscope.model import attribution as at
from gptscope.model import clt as clt_mod
from gptscope.model import sae as sae_mod
from gptscope.model import transcoders as tc_mod
from gptscope.model.patching import Cancelled

from .. import jobs, memory
from ..artefacts import Training
from ..digits import FINE, SECONDS, VALUE
from ..errors import InputError
from ..jobs import Job, answer_fields
from ..schemas.attribution import (
    AttributionRequest,
    AttributionResponse,
    Compared,
    GraphEdge,
    GraphNode,
    SteerRequest,
    SteerResponse,
    TranscoderFeature,
    TranscoderJob,
    TranscoderLayer,
    TranscoderList,
    TranscoderQuality,
    TranscoderSet,
)
from ..schemas.patch import TokenRef
from ..service import ModelService
from ..transcoders import TRANSCODERS as store
from . import sae as explain_sae
from .common import given_ids, next_tokens, prompt_ids, token_text
from .tokens import token_pieces

# The answer's own memory beside the graph's (model/attribution.py's peak_bytes), per node and per edge:
# its object, its label, and its JSON on the way out (measured: ~1,700 and ~1,000 bytes).
ANSWER_NODE_BYTES = 3_000
ANSWER_EDGE_BYTES = 1_500
MAX_SYNC_ROWS = 1024  # the plain POST computes up to this many features' inputs (a few seconds)
MAX_JOB_ROWS = 8192


def set_info(loaded: tc_mod.LoadedSet) -> TranscoderSet:
    m, c = loaded.meta, loaded.codes[0].cfg
    q = m["quality"]
    return TranscoderSet(
        name=loaded.name,
        kind="clt" if clt_mod.is_clt(loaded.codes) else "per_layer",
        d_model=c.d_in,
        d_transcoder=c.d_sae,
        activation=c.activation,
        k=c.k if c.activation == "topk" else 0,
        input_hook=tc_mod.INPUT_HOOK,
        output_hook=tc_mod.OUTPUT_HOOK,
        corpus=str((m.get("corpus") or {}).get("name", "?")),
        steps=int(m.get("steps", 0)),
        tokens=int(m.get("tokens", 0)),
        train_seconds=float(m.get("train_seconds", 0)),
        command=str(m.get("command", "")),
        created=str(m.get("created", "")),
        quality=TranscoderQuality(**{**q, "layers": [TranscoderLayer(**x) for x in q["layers"]]}),
    )


def listing(service: ModelService) -> TranscoderList:
    return TranscoderList(sets=store.views(service, set_info), write_folder=str(store.folders(service)[0]))


def job_status(job: Job[Training]) -> TranscoderJob:
    state, last = job.state, job.state.last
    q = (state.meta or {}).get("quality")
    return TranscoderJob(
        **answer_fields(job),
        phase="evaluating" if state.phase == "evaluating" else "training",
        transcoders=state.name,
        progress=float(last.get("progress", 0.0)),
        step=job.progress.done,
        tokens=int(last.get("tokens", 0)),
        fvu=last.get("fvu"),
        history=state.history,
        quality=None
        if q is None
        else TranscoderQuality(**{**q, "layers": [TranscoderLayer(**x) for x in q["layers"]]}),
    )


def view(loaded: tc_mod.LoadedSet, layer: int) -> sae_mod.LoadedSAE:
    """Block `layer`'s transcoder as an SAE's view (its summaries, passages and logit effects are read
    the same way), kept with the set. A CLT's block: its encoder, and its decoder rows into its own MLP."""
    if layer not in loaded.views:
        loaded.views[layer] = sae_mod.LoadedSAE(
            loaded.codes[layer], loaded.meta, loaded.stats[layer], Path(loaded.path) / f"layer_{layer}"
        )
    return loaded.views[layer]


def mlp_inputs(model, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """(S, T) ids -> what block `layer`'s MLP reads, (S, T, d)."""
    S, T = ids.shape
    return tc_mod.mlp_pairs(model, ids)[layer][0].view(S, T, -1)


def feature(service: ModelService, name: str, layer: int, index: int) -> TranscoderFeature:
    loaded = store.get_by_path(service, name)
    if not 0 <= layer < len(loaded.codes):
        raise InputError("layer", f"{layer} is out of range; valid values are 0..{len(loaded.codes) - 1}", where="path")
    d = explain_sae.detail(service, view(loaded, layer), index, name, mlp_inputs)
    return TranscoderFeature(**{**d.model_dump(), "hook_name": tc_mod.INPUT_HOOK.format(layer=layer)}, layer=layer)


# ---- the graph ---------------------------------------------------------------------------------------


@dataclass
class Plan:
    req: AttributionRequest
    ids: list[int]
    loaded: tc_mod.LoadedSet
    total: int  # features whose inputs may be computed (the progress' units)
    need: memory.Need  # the peak bytes of the graph and its answer


def request_ids(service: ModelService, text: str | None, ids: list[int] | None, bos: bool | None = None) -> list[int]:
    if (text is None) == (ids is None):
        raise InputError("text", "give either text or ids, not both or neither")
    if text is not None:
        return prompt_ids(service, text, truncate=False, field="text", bos=bos)[0]
    assert ids is not None
    return given_ids(service, ids, "ids")


def check_tokens(service: ModelService, token: int | None, wrong: int | None) -> None:
    V = service.model.cfg.vocab_size
    for name, tid in (("token", token), ("wrong", wrong)):
        if tid is not None and tid >= V:
            raise InputError(name, f"token id {tid} is outside the vocabulary 0..{V - 1}")
    if wrong is not None and wrong == token:
        raise InputError("wrong", "wrong must differ from token: their logit difference would be 0")


def plan(service: ModelService, req: AttributionRequest, limit: float | None = None) -> Plan:
    """Check the request; `limit`: the most features whose inputs it may compute (MAX_SYNC_ROWS unless given)."""
    limit = MAX_SYNC_ROWS if limit is None else limit
    try:
        at.check_model(service.model)
    except ValueError as e:
        raise InputError("text" if req.text is not None else "ids", f"the served model: {e}") from None
    loaded = store.get(service, req.transcoders)
    ids = request_ids(service, req.text, req.ids, req.bos)
    check_tokens(service, req.token, req.wrong)
    if req.max_rows > limit:
        raise InputError(
            "max_rows",
            f"this endpoint computes the inputs of up to {int(limit):,} features; for more start it as a job, "
            f"POST /api/v1/attribution/jobs (up to {MAX_JOB_ROWS:,})",
        )
    most_active = at.most_active(service.model.cfg, loaded.codes[0].cfg, len(ids))
    need = graph_need(service, loaded, req, len(ids), job=limit > MAX_SYNC_ROWS)
    return Plan(req, ids, loaded, min(req.max_rows, most_active), need)


def peak_bytes(service: ModelService, loaded: tc_mod.LoadedSet, T: int, max_rows: int, max_edges: int) -> int:
    """The graph's peak (model/attribution.py's peak_bytes) and its answer's: every node it may list (the
    logit, every active feature, the tokens and the error nodes) and max_edges edges."""
    cfg, c = service.model.cfg, loaded.codes[0].cfg
    item = service.model.lm_head.weight.element_size()
    nodes = 1 + at.most_active(cfg, c, T) + T + cfg.n_layer * T
    answer = nodes * ANSWER_NODE_BYTES + max_edges * ANSWER_EDGE_BYTES
    return at.peak_bytes(cfg, c, T, max_rows, max_edges, item, cross=clt_mod.is_clt(loaded.codes)) + answer


def graph_need(
    service: ModelService, loaded: tc_mod.LoadedSet, req: AttributionRequest, T: int, job: bool
) -> memory.Need:
    """The request's peak bytes, named by the field to make smaller: max_rows while one row would fit the
    budget (with the most that fit), else the prompt."""
    what = f"this attribution graph ({T:,} tokens, up to {req.max_rows:,} rows)"
    prompt = "text" if req.text is not None else "ids"
    need = peak_bytes(service, loaded, T, req.max_rows, req.max_edges)
    room = memory.BUDGET.limit(job)
    if peak_bytes(service, loaded, T, 1, req.max_edges) > room:
        return memory.Need(need, prompt, what, "a shorter prompt")
    lo, hi = 1, req.max_rows  # the most rows that fit: peak_bytes grows with them
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if peak_bytes(service, loaded, T, mid, req.max_edges) <= room else (lo, mid - 1)
    return memory.Need(
        need, "max_rows", what, f"a smaller max_rows (up to about {lo:,} fit this prompt) or a shorter prompt"
    )


@dataclass
class Traced:
    """A request's graph before its answer is built: the trace, the target and its token, the graph, pruned."""

    tr: at.Trace
    token: int
    target: at.Target
    graph: at.Graph
    pruned: at.Pruned


def graph_of(
    service: ModelService,
    p: Plan,
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    workers: int | None = None,
) -> Traced:
    """Trace the plan's prompt, build the target's graph (the units on_chunk counts) and prune it. workers:
    the build's threads (None: the served model's torch threads, a request's)."""
    req, codes = p.req, p.loaded.codes
    with service.run() as m:
        tr = at.trace(m, codes, p.ids)
    token = int(tr.logits.argmax()) if req.token is None else req.token
    target = at.Target(None, len(p.ids) - 1, up=token, down=req.wrong)
    # the build reads the weights and the trace (no module is called, no hook fires), so it runs outside
    # the model's lock: other requests answer meanwhile, however long a graph of 8,192 rows takes
    with torch.inference_mode():
        graph = at.build(service.model, codes, tr, target, req.max_rows, on_chunk, cancel, workers or service.threads)
    if graph.edges.features.numel() * graph.edges.features.element_size() >= memory.GIVE_BACK_BYTES:
        memory.give_back()  # the batches' freed activations back to the system before prune copies a big graph
    pruned = at.prune(graph, tr, req.node_threshold, req.edge_threshold, req.max_edges, cancel)
    return Traced(tr, token, target, graph, pruned)


def target_words(service: ModelService, token: int, wrong: int | None) -> str:
    """The target in words: logit(' Caesar'), or a logit difference."""
    words = f"logit({token_text(service, token)!r})"
    return words + (f" - logit({token_text(service, wrong)!r})" if wrong is not None else "")


def compute(
    service: ModelService,
    p: Plan,
    on_chunk: Callable[[int, int], None] | None = None,
    cancel: Callable[[], bool] | None = None,
    workers: int | None = None,
) -> AttributionResponse:
    t0 = time.perf_counter()
    g = graph_of(service, p, on_chunk, cancel, workers)
    return _answer(service, p, g.tr, g.graph, g.pruned, g.token, time.perf_counter() - t0, cancel)


def compute_job(
    service: ModelService, p: Plan, on_chunk: Callable[[int, int], None], cancel: Callable[[], bool]
) -> AttributionResponse:
    """compute as a job: the build on a job's threads (every core), not a request's."""
    return compute(service, p, on_chunk, cancel, max(service.threads, jobs.JOB_THREADS))


def attribution(service: ModelService, req: AttributionRequest) -> AttributionResponse:
    """The plain endpoint: the plan, then its work once the memory budget holds its need (before the
    model's lock is asked for)."""
    p = plan(service, req)
    with memory.hold(p.need):
        return compute(service, p)


def feature_label(service: ModelService, loaded: tc_mod.LoadedSet, layer: int, f: int) -> str:
    """ "L3 #740" and the feature's top held-out tokens."""
    labels = explain_sae.derived(service, view(loaded, layer))["labels"][f]
    return f"L{layer} #{f}" + (f" {' · '.join(repr(t) for t in labels[:3])}" if labels else "")


def _nodes(service: ModelService, p: Plan, tr: at.Trace, graph: at.Graph, pr: at.Pruned, token: int, cancel=None):
    """The answer's nodes (logit, kept features, then the errors and tokens that keep an edge) and a map
    from the graph's columns (tokens, features, errors) and rows to their index; cancel() is asked before
    each feature's (its label is the slow part)."""
    T, N, L = len(tr.ids), len(tr.act), tr.scale1.size(0)
    row_of = {int(f): r + 1 for r, f in enumerate(graph.rows)}
    e = graph.edges
    label = target_words(service, token, p.req.wrong)
    nodes = [
        GraphNode(
            kind="logit", layer=None, position=T - 1, feature=None, label=label, activation=None, influence=1.0,
            value=round(float(e.value[0]), VALUE), constant=round(float(e.constant[0]), VALUE),
        )
    ]  # fmt: skip
    col: dict[int, int] = {}
    for f in pr.features.tolist():
        _check(cancel)
        r = row_of.get(f)
        col[T + f] = len(nodes)
        layer, pos, idx = int(tr.layer[f]), int(tr.position[f]), int(tr.feature[f])
        nodes.append(
            GraphNode(
                kind="feature", layer=layer, position=pos, feature=idx, label=feature_label(service, p.loaded, layer, idx),
                activation=round(float(tr.act[f]), VALUE), influence=round(float(pr.influence[f]), FINE),
                value=None if r is None else round(float(e.value[r]), VALUE),
                constant=None if r is None else round(float(e.constant[r]), VALUE),
            )
        )  # fmt: skip
    for c in pr.columns.tolist():  # ascending
        if c < T or c >= T + N:
            col[c] = len(nodes)
            if c < T:
                nodes.append(
                    GraphNode(
                        kind="token", layer=None, position=c, feature=None, label=token_text(service, tr.ids[c]),
                        activation=None, influence=round(float(pr.token_influence[c]), FINE), value=None, constant=None,
                    )
                )  # fmt: skip
            else:
                li, pos = divmod(c - T - N, T)
                nodes.append(
                    GraphNode(
                        kind="error", layer=li, position=pos, feature=None, label=f"error L{li}", activation=None,
                        influence=round(float(pr.error_influence[c - T - N]), FINE), value=None, constant=None,
                    )
                )  # fmt: skip
    rows = {0: 0, **{r: col[T + int(f)] for f, r in row_of.items() if T + int(f) in col}}
    assert L >= 1
    return nodes, col, rows


def _check(cancel: Callable[[], bool] | None) -> None:
    if cancel is not None and cancel():
        raise Cancelled()


def _answer(
    service, p: Plan, tr: at.Trace, graph: at.Graph, pr: at.Pruned, token: int, seconds: float, cancel=None
) -> AttributionResponse:
    nodes, col, rows = _nodes(service, p, tr, graph, pr, token, cancel)
    _check(cancel)
    kept = [
        GraphEdge(source=col[c], target=rows[r], weight=round(w, VALUE))
        for c, r, w in pr.edges[: p.req.max_edges]  # (prune lists max_edges at most, largest first)
        if c in col and r in rows
    ]
    value = float(graph.edges.value[0])
    real = float(tr.logits[token] - (tr.logits[p.req.wrong] if p.req.wrong is not None else 0.0))
    T = len(tr.ids)
    return AttributionResponse(
        tokens=token_pieces(service.encoding, p.ids),
        transcoders=p.loaded.name,
        target=TokenRef(id=token, text=token_text(service, token)),
        wrong=None if p.req.wrong is None else TokenRef(id=p.req.wrong, text=token_text(service, p.req.wrong)),
        target_value=round(value, VALUE),
        model_value=round(real, VALUE),
        nodes=nodes,
        edges=kept,
        active_features=len(tr.act),
        rows=len(graph.rows),
        kept_features=len(pr.features),
        kept_share=round(pr.kept_share, FINE),
        edge_share=round(pr.edge_share, FINE),
        edges_cut=pr.kept_edges - len(kept),
        error_influence=round(float(pr.error_influence.sum()), FINE),
        token_influence=round(float(pr.token_influence[:T].sum()), FINE),
        seconds=round(seconds, SECONDS),
    )


# ---- interventions ---------------------------------------------------------------------------------


def steer(service: ModelService, req: SteerRequest) -> SteerResponse:
    loaded = store.get(service, req.transcoders)
    ids = request_ids(service, req.text, req.ids, req.bos)
    check_tokens(service, req.token, None)
    L, F, T = len(loaded.codes), loaded.codes[0].cfg.d_sae, len(ids)
    for n, iv in enumerate(req.interventions):
        for name, value, top in (("layer", iv.layer, L), ("position", iv.position, T), ("feature", iv.feature, F)):
            if value >= top:
                raise InputError(f"interventions.{n}.{name}", f"{value} is out of range; valid values are 0..{top - 1}")
    changes = [(iv.layer, iv.position, iv.feature, iv.scale) for iv in req.interventions]
    with service.run() as m:
        before, _ = m(torch.tensor([ids]), last_only=True)
        after = at.steered_logits(m, loaded.codes, ids, changes)
    b, a = before[0, -1], after
    pb, pa = torch.softmax(b.float(), -1), torch.softmax(a.float(), -1)
    union = list(
        dict.fromkeys([*torch.topk(pb, req.top_k).indices.tolist(), *torch.topk(pa, req.top_k).indices.tolist()])
    )
    union.sort(key=lambda i: -float(pb[i]))
    kl = float((pb * (pb.clamp_min(1e-30).log() - pa.clamp_min(1e-30).log())).sum())
    tok = req.token
    return SteerResponse(
        before=next_tokens(service, b, req.top_k),
        after=next_tokens(service, a, req.top_k),
        compared=[
            Compared(
                id=i, text=token_text(service, i), before=round(float(pb[i]), FINE), after=round(float(pa[i]), FINE)
            )
            for i in union
        ],
        token=None if tok is None else TokenRef(id=tok, text=token_text(service, tok)),
        logit_before=None if tok is None else round(float(b[tok]), VALUE),
        logit_after=None if tok is None else round(float(a[tok]), VALUE),
        kl_divergence=round(max(0.0, kl), FINE) if math.isfinite(kl) else 0.0,
    )
