"""Attribution graphs of many rows (issue #67): the build writes each batch's edges once and ranks the
next round's features by one sweep over the rows known so far, instead of copying the graph and
running influence's power iteration over all of it every round. The graph it makes is the one the
old build made (`reference_build` below, the old code kept as it was) from the same edges: the same
rows in the same order and the same edges, bit for bit, at several row counts, on random models of
three block types (in float64, many small rounds) and on the built-in model with its shipped
transcoders (float32). And `edges_into` (one run of the prompt, the targets' backward passes batched,
each feature's term read at its own position, each block's values through its attention norm folded into
W_V) gives the old `edges_into`'s edges to float rounding, so the old build on the old edges makes the same
graph."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from test_attribution import tiny as attribution_tiny

from gptscope.model import attribution as at

SET = "x4-topk16-s0"  # the built-in model's shipped transcoder set
PASSAGE = (  # benchmarks/attribution.py's passage: 63 tokens
    "ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun. "
    "Arise, fair sun, and kill the envious moon, who is already sick and pale with grief"
)
CAESAR = "First Lord:\nWhat news of Caesar?\n\nSecond Lord:\nMy lord, Caesar is dead.\n\nFirst Lord:\nAlas, poor"


def reference_edges_into(model, codes, tr: at.Trace, targets) -> at.Edges:
    """`edges_into` before issue #67: every block's feature edges, and the constants run once per row."""
    R = len(targets)
    with torch.inference_mode(False), torch.enable_grad():
        frozen = replace(
            tr,
            scale1=tr.scale1.clone(),
            scale2=tr.scale2.clone(),
            scale_f=tr.scale_f.clone(),
            pattern=tr.pattern.clone(),
        )
        embed = tr.embed.expand(R, *tr.embed.shape).clone().requires_grad_(True)
        written = tr.mlp_out.expand(R, *tr.mlp_out.shape).clone().requires_grad_(True)
        reads, final = at.replacement(model, frozen, embed, written, at.reach(targets))
        value = at.values(model, codes, targets, reads, final)
        g_embed, g_write = torch.autograd.grad(value.sum(), [embed, written], allow_unused=True)
    g_write = torch.zeros_like(tr.mlp_out).expand_as(written) if g_write is None else g_write
    with torch.no_grad():
        tokens = (g_embed * tr.embed).sum(-1)
        errors = (g_write * tr.error).sum(-1)
        features = torch.zeros(R, len(tr.act), dtype=g_write.dtype)
        for li in range(g_write.size(1)):
            where = torch.nonzero(tr.layer == li).flatten()
            if len(where):
                dot = g_write[:, li] @ tr.decoder[where].T
                features[:, where] = dot[:, tr.position[where], torch.arange(len(where))] * tr.act[where]
        embed = torch.zeros(R, *tr.embed.shape)
        bias = torch.stack([c.b_dec for c in codes])[:, None, :].expand_as(tr.mlp_out)
        reads, final = at.replacement(model, tr, embed, bias.expand(R, *bias.shape), at.reach(targets))
        constant = at.values(model, codes, targets, reads, final)
    return at.Edges(tokens, features, errors, constant, value.detach())


def reference_build(model, codes, tr: at.Trace, target: at.Target, max_rows: int, edges_into=None) -> at.Graph:
    """The build before issue #67, as it was: every round copies the graph and runs `influence` over all
    of it; every batch's edges are `edges_into`'s (None: the old one's)."""
    edges_into = edges_into or reference_edges_into
    T, N = len(tr.ids), len(tr.act)
    g = at.Graph(target, torch.zeros(0, dtype=torch.long), edges_into(model, codes, tr, [target]))
    budget = min(max_rows, N)
    done = torch.zeros(N, dtype=torch.bool)
    while int(done.sum()) < budget:
        infl = at.influence(g, tr)[0][T : T + N].masked_fill(done, -1.0)
        best = torch.argsort(-infl, stable=True)[: min(at.rows_per_batch(model.cfg, T), budget - int(done.sum()))]
        best = best[infl[best] > 0]
        if not len(best):
            break
        done[best] = True
        for li in tr.layer[best].unique().tolist():
            picked = best[tr.layer[best] == li]
            tgts = [at.Target(li, int(tr.position[i]), int(tr.feature[i])) for i in picked]
            new = edges_into(model, codes, tr, tgts)
            parts = [g.edges, new]
            fields = ("tokens", "features", "errors", "constant", "value")
            g = at.Graph(
                target,
                torch.cat([g.rows, picked]),
                at.Edges(*(torch.cat([getattr(p, f) for p in parts]) for f in fields)),
            )
    return g


def assert_same(g: at.Graph, ref: at.Graph, rounding: float = 0.0) -> None:
    """The same rows in the same order, and the same edges: bit for bit, or within `rounding` of the
    largest weight of their row (the constants always bit for bit: the same run makes them)."""
    assert g.target == ref.target
    assert torch.equal(g.rows, ref.rows), "the rows (the features computed, in order) differ"
    for f in ("tokens", "features", "errors", "constant", "value"):
        a, b = getattr(g.edges, f), getattr(ref.edges, f)
        assert a.shape == b.shape and a.dtype == b.dtype, f
        if rounding and f != "constant":
            size = b.abs().flatten(1).amax(1).clamp_min(1.0) if b.dim() > 1 else b.abs().clamp_min(1.0)
            err = (a - b).abs().flatten(1).amax(1) if b.dim() > 1 else (a - b).abs()
            assert bool((err <= rounding * size).all()), f"the edges' {f} differ by {float((err / size).max()):.2e}"
        else:
            assert torch.equal(a, b), f"the edges' {f} differ"


BLOCKS = {
    "gpt2": {},
    "llama-gqa": dict(pos="rope", norm_type="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False),
    "parallel": dict(parallel=True, pos="rope", rotary_dim=4, norm_type="rmsnorm", mlp="geglu", bias=False),
}


def tiny(block: str):
    """test_attribution's random 3-block model and transcoders, on this file's block types."""
    return attribution_tiny(block, BLOCKS)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_the_graph_is_the_old_builds_at_equal_rows_on_small_models(block, monkeypatch):
    monkeypatch.setattr(at, "ROWS", 5)  # many rounds of a few rows each
    model, codes = tiny(block)
    ids = [1, 5, 7, 9, 3, 2, 8, 4, 11, 6, 13, 2]
    with torch.inference_mode():
        tr = at.trace(model, codes, ids)
        target = at.Target(None, len(ids) - 1, up=3, down=4)
        for rows in (1, 7, 23, 1000):
            g = at.build(model, codes, tr, target, max_rows=rows)
            assert_same(g, reference_build(model, codes, tr, target, rows, at.edges_into))
            assert_same(g, reference_build(model, codes, tr, target, rows), rounding=1e-12)  # float64
    assert len(g.rows) > 30  # the last: every feature with influence


def test_the_graph_is_the_old_builds_at_equal_rows_on_the_builtin_model(service):
    from gptscope.server.transcoders import TRANSCODERS

    codes = TRANSCODERS.get(service, SET).codes
    ids = service.encoding.encode_ordinary(CAESAR)
    with service.run() as m:
        tr = at.trace(m, codes, ids)
    rounds = at.rows_per_batch(service.model.cfg, len(ids))
    with torch.inference_mode():
        for token in (int(tr.logits.argmax()), 7):
            target = at.Target(None, len(ids) - 1, up=token)
            for rows in (rounds + 3, 4 * rounds):
                g = at.build(service.model, codes, tr, target, max_rows=rows)
                assert_same(g, reference_build(service.model, codes, tr, target, rows, at.edges_into))
                assert_same(g, reference_build(service.model, codes, tr, target, rows), rounding=1e-5)
                assert len(g.rows) == rows
                # a round's batches on two threads side by side: the same graph, bit for bit
                assert_same(at.build(service.model, codes, tr, target, max_rows=rows, workers=2), g)


@pytest.mark.slow
def test_the_graph_is_the_old_builds_at_1024_rows_on_the_63_token_passage(service):
    from gptscope.server.transcoders import TRANSCODERS

    codes = TRANSCODERS.get(service, SET).codes
    ids = service.encoding.encode_ordinary(PASSAGE)
    assert len(ids) == 63
    with service.run() as m:
        tr = at.trace(m, codes, ids)
    target = at.Target(None, len(ids) - 1, up=int(tr.logits.argmax()))
    with torch.inference_mode():
        for rows in (300, 1024):
            g = at.build(service.model, codes, tr, target, max_rows=rows)
            assert_same(g, reference_build(service.model, codes, tr, target, rows, at.edges_into))
        assert_same(g, reference_build(service.model, codes, tr, target, 1024), rounding=1e-5)


@pytest.mark.parametrize("block", list(BLOCKS))
def test_a_blocks_features_laid_out_by_position_give_each_ones_own_product(block):
    """feature_terms' batched product over positions (position_slots) is the (R, n, d) products' sum, and a
    block whose features crowd a few positions (its slots more than SLOTS_WASTE times its features) takes
    the (R, n, d) products."""
    model, codes = tiny(block)
    ids = [1, 5, 7, 9, 3, 2, 8, 4, 11, 6, 13, 2]
    with torch.inference_mode():
        tr = at.trace(model, codes, ids)
    g = torch.randn(3, *tr.mlp_out.shape, dtype=tr.mlp_out.dtype)  # (R, L, T, d) a gradient of 3 rows
    ends = at.block_ends(tr)
    laid_out = 0
    for li in range(at.model_depth(tr)):
        at_ = slice(ends[li], ends[li + 1])
        slots = at.position_slots(tr, li)
        own = at._own(g[:, li], tr.position[at_], tr.decoder[at_])
        if slots is not None:
            laid_out += 1
            assert torch.allclose(slots.dot(g[:, li]), own, rtol=0, atol=1e-12)
    assert laid_out, "no block of the tiny models' traces was laid out by position"
    # every feature of block 0 at position 0 but one: T slots of K = n - 1 each
    n0 = ends[1]
    crowded = replace(tr, position=torch.cat([torch.zeros(n0 - 1, dtype=torch.long), tr.position[n0 - 1 :]]))
    crowded.position[n0 - 1] = len(ids) - 1
    assert n0 > 2 * at.SLOTS_WASTE and at.position_slots(crowded, 0) is None
    assert torch.allclose(
        at.feature_terms(crowded, g, 1)[:, :n0],
        at._own(g[:, 0], crowded.position[:n0], crowded.decoder[:n0]) * crowded.act[:n0],
        rtol=0,
        atol=1e-12,
    )
    laid = at.feature_terms(tr, g, at.model_depth(tr))
    by_products = at.feature_terms(tr, g, at.model_depth(tr), [None] * at.model_depth(tr))
    assert torch.allclose(laid, by_products, rtol=0, atol=1e-12)


def test_prunes_cut_over_the_nonzero_cells_is_the_cut_over_every_cell(monkeypatch):
    """_select counts its digits over the nonzero cells alone where they are few (a graph's scores: about
    2%): the same cut as the passes over every cell and as a sort, by sum and by count, with ties; a cut
    that must reach into the zeros, or too many nonzero cells, goes through every cell."""
    gen = torch.Generator().manual_seed(0)
    S = torch.rand(300, 700, generator=gen).pow(4)  # (float32, as a graph's scores)
    S[torch.rand(300, 700, generator=gen) > 0.03] = 0.0  # 3% nonzero
    S[5, :40] = S[5, 0]  # ties
    every = lambda: ((at._keys(a).flatten(), a.flatten()) for _, a in at._row_chunks(S))  # noqa: E731
    ordered = torch.sort(S.flatten(), descending=True, stable=True).values.double()
    nnz, mass = int((S != 0).sum()), float(S.double().sum())
    for want, by_sum in [(0.98 * mass, True), (0.5 * mass, True), (mass * 1.01, True), (100, False), (nnz, False)]:
        cut = at._select(S, want, by_sum, None)
        assert cut == at._select_in(every, S.dtype, want, by_sum, None)
        if cut is None:
            assert by_sum and want > mass
            continue
        n = int((torch.cumsum(ordered, 0) < want).sum()) + 1 if by_sum else int(want)
        assert cut.count == n and float(torch.tensor([cut.key], dtype=torch.int32).view(torch.float32)) == float(
            ordered[n - 1]
        )
    beyond = at._select(S, nnz + 10, False, None)  # 10 zeros in the cut: through every cell
    assert beyond == at._select_in(every, S.dtype, nnz + 10, False, None) and beyond.key == 0 and beyond.ties == 10
    monkeypatch.setattr(at, "COMPACT_CELLS", nnz - 1)
    assert at._nonzero_cells(S, None) is None
    assert at._select(S, 0.9 * mass, True, None) == at._select_in(every, S.dtype, 0.9 * mass, True, None)
