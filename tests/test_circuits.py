"""Circuits from edges (issue #42): the graph, exact edge patching against hand-made patched forward
passes on three block types, the gradient estimates against finite differences, and POST
/api/v1/circuits on the built-in model's shipped pair."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from gptscope.model import circuits as cc
from gptscope.model.gpt import GPT, GPTConfig, hook_name

BLOCKS = {
    "gpt2": {},
    "llama-gqa": dict(pos="rope", norm_type="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False, qk_norm=True),
    "moe": dict(n_expert=4, top_k_experts=2),
    # the imported families' switches that keep the stream a plain sum each reader reads (issue #45):
    # partial rotary, GeGLU, a scaled embedding, Gemma's score scale and both softcaps, local/global layers
    "families": dict(
        pos="rope",
        rotary_dim=4,
        norm_type="rmsnorm",
        mlp="geglu",
        bias=False,
        embed_scale=3.0,
        attn_scale=0.3,
        attn_softcap=4.0,
        softcap=6.0,
        window=4,
        window_pattern="SL",
        window_last_full=False,
        rope_local_base=100.0,
    ),
}
CLEAN, CORRUPT = [1, 5, 7, 9, 3, 2, 8, 4], [1, 5, 6, 9, 3, 11, 8, 4]

ROUNDING = 2e-5  # float32 rounding of logits near 2 through a few blocks (1.1e-5 seen on an AVX2-only EPYC)


def diff_of(answer: int, wrong: int):
    return lambda logits: logits[:, answer] - logits[:, wrong]  # in the logits' own dtype


def tiny(block: str, dtype=torch.float32, scale: float = 4.0) -> GPT:
    """A random 3-block model; scale 4: weights 4 times GPT-2's init, so that edges matter and differ
    (and the model is far from linear); scale 1: as initialised, a smooth model."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=40, n_ctx=16, n_layer=3, n_head=4, d_model=32, **BLOCKS[block])
    model = GPT(cfg).to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model.set_mode("explain")


@pytest.fixture(scope="module", params=list(BLOCKS))
def setup(request):
    model = tiny(request.param)
    with torch.inference_mode():
        graph = cc.graph_of(model.cfg)
        clean, corrupt = cc.record(model, CLEAN), cc.record(model, CORRUPT)
    return request.param, model, graph, clean, corrupt


def test_the_graph_counts_every_writer_before_every_reader():
    cfg = GPTConfig(n_layer=6, n_head=4, d_model=192)  # the built-in model's shape
    g = cc.graph_of(cfg)
    assert len(g.upstream) == 1 + 6 * 5 and len(g.downstream) == 6 * (3 * 4 + 1) + 1
    # into block l's attention: the input and 5 writers per earlier block; its MLP: + its 4 heads
    assert g.n_edges == sum(12 * (1 + 5 * li) + (1 + 5 * li + 4) for li in range(6)) + 31 == 1108
    names = g.names()
    assert names[0] == "input->a0.h0<q>" and names[-1] == "m5->logits" and len(set(names)) == g.n_edges
    assert "a2.h3->m2" in names and "a2.h3->a2.h0<q>" not in names and "m2->a2.h1<k>" not in names
    up, down = g.ends()
    for e in (0, 17, 555, 1107):
        assert g.edge(e) == (int(up[e]), int(down[e]))
    gqa = cc.graph_of(GPTConfig(n_layer=2, n_head=4, n_kv_head=2, d_model=32))
    assert [n.name for n in gqa.downstream[:8]] == [
        *(f"a0.h{h}<q>" for h in range(4)), "a0.h0<k>", "a0.h1<k>", "a0.h0<v>", "a0.h1<v>",
    ]  # fmt: skip


@pytest.mark.parametrize("norm", ["post", "both", "out"])
def test_a_stream_that_is_normalised_between_writers_has_no_edges(norm):
    with pytest.raises(ValueError, match="norm='pre'"):
        cc.graph_of(GPTConfig(n_layer=2, n_head=2, d_model=16, norm=norm))


@pytest.mark.parametrize(
    "switch,words",
    [
        (dict(parallel=True), "parallel block .*GPT-NeoX"),
        (dict(qk_norm=True, qk_norm_all=True, norm_type="rmsnorm"), "every head at once .*qk_norm_all"),
    ],
)
def test_a_block_whose_readers_are_not_their_own_has_no_edges(switch, words):
    with pytest.raises(ValueError, match=words):
        cc.graph_of(GPTConfig(n_layer=2, n_head=2, d_model=16, **switch))


def test_every_edge_kept_is_the_clean_run_and_none_the_corrupted_run(setup):
    _, model, graph, clean, corrupt = setup
    with torch.inference_mode():
        logits = cc.run_graph(
            model, graph, clean, corrupt, torch.stack([torch.ones(graph.n_edges), torch.zeros(graph.n_edges)])
        )
    torch.testing.assert_close(logits[0], clean.logits, atol=ROUNDING, rtol=0)
    torch.testing.assert_close(logits[1], corrupt.logits, atol=ROUNDING, rtol=0)
    assert (clean.logits - corrupt.logits).abs().max() > 0.1  # the two runs differ, so the test can fail


def hand_patched(model: GPT, clean_ids, corrupt_ids, writer: cc.Node, reader: cc.Node, reduce) -> float:
    """The metric of the clean run with one edge patched, made with the model's own modules and hook
    points: the reader's input is computed by a second run in which the stream where it reads gets
    (the writer's corrupted output - its clean output) added, and put into a third run in place of
    the reader's own, for that reader alone."""
    L = model.cfg.n_layer

    def out_of(ids) -> torch.Tensor:
        if writer.kind == "input":
            name, pick = hook_name("hook_resid_pre", 0), lambda t: t
        elif writer.kind == "head":
            name, pick = hook_name("attn.hook_result", writer.layer), lambda t: t[:, :, writer.head]
        else:
            name, pick = hook_name("hook_mlp_out", writer.layer), lambda t: t
        with model.capture([name]) as c:
            model(torch.tensor([ids]))
        return pick(c[name])

    delta = out_of(corrupt_ids) - out_of(clean_ids)
    idx = torch.tensor([clean_ids])
    where = {  # the stream the reader reads, and the hook point that holds what it reads
        "q": ("hook_resid_pre", "attn.hook_q"), "k": ("hook_resid_pre", "attn.hook_k"),
        "v": ("hook_resid_pre", "attn.hook_v"), "mlp": ("hook_resid_mid", "ln2.hook_normalized"),
    }  # fmt: skip
    if reader.kind == "logits":
        with model.hooks([(hook_name("hook_resid_post", L - 1), lambda t, _n: t + delta)]):
            logits, _ = model(idx)
        return float(reduce(logits[:, -1])[0])
    stream, read = (hook_name(n, reader.layer) for n in where[reader.kind])
    with model.hooks([(stream, lambda t, _n: t + delta)]), model.capture([read]) as c:
        model(idx)
    moved = c[read]

    def put(t: torch.Tensor, _n: str) -> torch.Tensor:
        t = t.clone()
        if reader.kind == "mlp":
            return moved
        t[:, :, reader.head] = moved[:, :, reader.head]  # (B, T, heads, hs): this reader's head only
        return t

    with model.hooks([(read, put)]):
        logits, _ = model(idx)
    return float(reduce(logits[:, -1])[0])


def test_an_edges_exact_score_is_a_hand_made_patched_forward_pass(setup):
    block, model, graph, clean, corrupt = setup
    reduce = diff_of(3, 4)
    rng = torch.Generator().manual_seed(1)
    picked = []
    for kind in ("q", "k", "v", "mlp", "logits"):  # two edges into each kind of reader
        edges = [e for e in range(graph.n_edges) if graph.downstream[graph.edge(e)[1]].kind == kind]
        picked += [edges[int(i)] for i in torch.randint(len(edges), (2,), generator=rng)]
    with torch.inference_mode():
        scores = cc.exact(model, graph, clean, corrupt, picked, reduce)
        base = float(reduce(clean.logits[None])[0])
        by_hand = [
            hand_patched(model, CLEAN, CORRUPT, graph.upstream[u], graph.downstream[v], reduce) - base
            for u, v in map(graph.edge, picked)
        ]
    assert max(abs(s) for s in by_hand) > 1e-3, block  # the picked edges matter
    torch.testing.assert_close(scores, torch.tensor(by_hand, dtype=scores.dtype), atol=1e-4, rtol=1e-4)


def test_the_estimates_are_the_metrics_slope_along_each_edge(setup):
    """AtP's score of an edge is the derivative of the metric as that edge moves from its clean value
    towards its corrupted one: a central finite difference of the graph run with the edge's weight
    at 1 -+ eps, in float64 (the router of a mixture of experts computes in float32, hence eps 1e-3).
    EAP-IG's steps converge, and on these smooth models its scores follow the exact ones more
    closely than AtP's."""
    block, _, _, _, _ = setup
    model = tiny(block, torch.float64, scale=1.0)
    reduce = diff_of(3, 4)
    with torch.inference_mode():
        graph = cc.graph_of(model.cfg)
        clean, corrupt = cc.record(model, CLEAN), cc.record(model, CORRUPT)
        atp = cc.attribution(model, graph, clean, corrupt, reduce, steps=0)
        edges = [*torch.argsort(-atp.abs())[:6].tolist(), graph.n_edges - 1, 0]
        eps = 1e-3
        w = torch.ones(2 * len(edges), graph.n_edges, dtype=torch.float64)
        for i, e in enumerate(edges):
            w[2 * i, e], w[2 * i + 1, e] = 1 - eps, 1 + eps
        m = reduce(cc.run_graph(model, graph, clean, corrupt, w))
        slope = (m[0::2] - m[1::2]) / (2 * eps)
        torch.testing.assert_close(atp[edges], slope, atol=1e-8, rtol=1e-4)
        # EAP-IG averages the slope over the path from the corrupted prompt's embeddings to the clean
        # one's (the midpoint rule): as its steps grow it settles on the integral
        ig = {n: cc.attribution(model, graph, clean, corrupt, reduce, steps=n) for n in (1, 32, 64)}
        exact = cc.exact(model, graph, clean, corrupt, range(graph.n_edges), reduce)
    far, near = (ig[1] - ig[64]).abs().max(), (ig[32] - ig[64]).abs().max()
    assert near < far / 100, (block, float(far), float(near))
    assert cc.pearson(ig[64], exact) > cc.pearson(atp, exact) > 0.8


def test_the_curve_runs_from_the_corrupted_run_to_the_clean_one(setup):
    _, model, graph, clean, corrupt = setup
    reduce = diff_of(3, 4)
    m_clean, m_corr = (float(reduce(r.logits[None])[0]) for r in (clean, corrupt))
    with torch.inference_mode():
        exact = cc.exact(model, graph, clean, corrupt, range(graph.n_edges), reduce)
        order = torch.argsort(-exact.abs())
        sizes = cc.curve_sizes(graph.n_edges)
        values = cc.faithfulness(model, graph, clean, corrupt, order, reduce, sizes)
        size, metric = cc.smallest_circuit(model, graph, clean, corrupt, order, reduce, sizes, values, 0.8)
        one_less = cc.faithfulness(model, graph, clean, corrupt, order, reduce, [size - 1])
    assert sizes[0] == 0 and sizes[-1] == graph.n_edges and sizes == sorted(set(sizes))
    assert math.isclose(values[0], m_corr, abs_tol=1e-4) and math.isclose(values[-1], m_clean, abs_tol=1e-4)
    share = (metric - m_corr) / (m_clean - m_corr)
    assert share >= 0.8
    assert size == sizes[0] or (float(one_less[0]) - m_corr) / (m_clean - m_corr) < 0.8  # the smallest that does


def test_batched_rows_that_join_late_equal_rows_run_alone(setup):
    """exact() batches its rows and starts each at its reader's block; one row at a time from block 0
    gives the same numbers."""
    _, model, graph, clean, corrupt = setup
    reduce = diff_of(3, 4)
    edges = list(range(0, graph.n_edges, max(1, graph.n_edges // 40)))
    with torch.inference_mode():
        batched = cc.exact(model, graph, clean, corrupt, edges, reduce)
        base = float(reduce(clean.logits[None])[0])
        alone = []
        for e in edges:
            w = torch.ones(1, graph.n_edges)
            w[0, e] = 0
            alone.append(float(reduce(cc.run_graph(model, graph, clean, corrupt, w))[0]) - base)
    torch.testing.assert_close(batched, torch.tensor(alone, dtype=batched.dtype), atol=ROUNDING, rtol=0)


# ---- the API on the built-in model -----------------------------------------------------------


@pytest.fixture(scope="module")
def caesar(client):
    return {p["name"]: p for p in client.get("/api/v1/patch/pairs").json()}["dead-caesar"]


def body(p, **extra):
    return {"clean": p["clean"], "corrupted": p["corrupted"], "answer": p["answer"], "wrong": p["wrong"], **extra}


def field_of(r):
    assert r.status_code == 422, r.text
    return ".".join(str(x) for x in r.json()["detail"][0]["loc"][1:]), r.json()["detail"][0]["msg"]


@pytest.fixture(scope="module")
def answer(client, caesar):
    r = client.post("/api/v1/circuits", json=body(caesar))
    assert r.status_code == 200, r.text
    return r.json()


def by_method(d) -> dict:
    return {s["method"]: s for s in d["scores"]}


def test_the_shipped_pair_has_every_edge_scored_by_each_method(answer, service):
    d = answer
    assert d["clean_metric"] > 5 and d["corrupted_metric"] < -5  # " Caesar" over " Edward", and back
    assert len(d["edges"]) == len(d["edge_writer"]) == len(d["edge_reader"]) == 1108
    assert (
        d["edges"][17] == f"{d['writers'][d['edge_writer'][17]]['name']}->{d['readers'][d['edge_reader'][17]]['name']}"
    )
    s = by_method(d)
    assert list(s) == ["atp", "eap_ig", "exact"] and s["eap_ig"]["steps"] == 10 and s["atp"]["steps"] is None
    assert s["atp"]["edges"] is None and len(s["atp"]["values"]) == len(s["eap_ig"]["values"]) == 1108
    # exact=top: the 64 edges of largest |EAP-IG|, each measured, and said to be
    ig = torch.tensor(s["eap_ig"]["values"])
    assert s["exact"]["edges"] == torch.argsort(-ig.abs(), stable=True)[:64].tolist()
    assert "one forward pass per edge" in s["exact"]["description"]
    # an exact score is what the model does: patch the edge by hand (the edge into the logits from
    # head 5.2, which writes the name: the final stream minus its clean output plus its corrupted one)
    e = d["edges"].index("a5.h2->logits")
    i = s["exact"]["edges"].index(e)
    clean_ids = [t["id"] for t in d["clean_tokens"]]
    corrupt_ids = [t["id"] for t in d["corrupted_tokens"]]
    with service.run() as m:
        names = [hook_name("attn.hook_result", 5)]
        outs = []
        for ids in (clean_ids, corrupt_ids):
            with m.capture(names) as c:
                m(torch.tensor([ids]))
            outs.append(c[names[0]][0, :, 2])
        with m.hooks([(hook_name("hook_resid_post", 5), lambda t, _n: t - outs[0] + outs[1])]):
            logits, _ = m(torch.tensor([clean_ids]))
    a, w = d["metric"]["answer"]["id"], d["metric"]["wrong"]["id"]
    by_hand = float(logits[0, -1, a] - logits[0, -1, w]) - d["clean_metric"]
    assert math.isclose(s["exact"]["values"][i], by_hand, abs_tol=2e-4)


def test_the_circuit_recovers_its_target_along_a_curve_from_corrupted_to_clean(answer):
    c = answer["circuit"]
    assert c["ranked_by"] == "eap_ig" and c["target"] == 0.8 and c["reached"] and c["recovered"] >= 0.8
    curve = c["curve"]
    assert curve[0]["edges"] == 0 and abs(curve[0]["recovered"]) < 1e-3
    assert curve[-1]["edges"] == 1108 and abs(curve[-1]["recovered"] - 1) < 1e-3
    ig = torch.tensor(by_method(answer)["eap_ig"]["values"])
    k = len(c["edges"])
    assert 5 < k < 200 and c["edges"] == torch.argsort(-ig.abs(), stable=True)[:k].tolist()
    before = [p for p in curve if p["edges"] < k]
    assert all(p["recovered"] < 0.8 for p in before)  # no smaller point of the curve reached it


def test_the_estimates_against_the_exact_scores(answer):
    comp = {c["method"]: c for c in answer["comparisons"]}
    assert set(comp) == {"atp", "eap_ig"} and comp["eap_ig"]["edges"] == 64
    assert comp["eap_ig"]["pearson"] > 0.95 and comp["atp"]["pearson"] > 0.5
    worst = comp["atp"]["largest_errors"][0]
    assert math.isclose(worst["error"], worst["estimate"] - worst["exact"], abs_tol=2e-5)
    errs = [abs(e["error"]) for e in comp["atp"]["largest_errors"]]
    assert errs == sorted(errs, reverse=True)


def test_the_second_request_comes_from_the_cache(client, caesar, answer):
    again = client.post("/api/v1/circuits", json=body(caesar, target=0.5)).json()
    assert all(s["seconds"] == 0 for s in again["scores"])
    assert by_method(again)["exact"]["values"] == by_method(answer)["exact"]["values"]
    assert again["runs"] < 60 and again["circuit"]["target"] == 0.5  # only the circuit's search ran
    assert len(again["circuit"]["edges"]) <= len(answer["circuit"]["edges"])


def test_the_binary_answer_has_the_same_numbers(client, caesar, answer):
    import numpy as np

    from gptscope.server import wire

    r = client.post("/api/v1/circuits", json=body(caesar), headers={"Accept": wire.MSGPACK})
    assert r.status_code == 200 and r.headers["content-type"] == wire.MSGPACK
    b = wire.decode(r.content)
    for got, want in zip(b["scores"], answer["scores"]):
        assert got["method"] == want["method"] and np.allclose(got["values"], want["values"], atol=1e-5)
    assert b["edges"] == answer["edges"] and b["circuit"]["edges"] == answer["circuit"]["edges"]


@pytest.mark.parametrize(
    "change, field, words",
    [
        (dict(exact_edges=["a0.h0->a0.h1<q>"]), "exact_edges.0", "no edge 'a0.h0->a0.h1<q>'"),
        (dict(rank_by="exact"), "rank_by", "exact to all"),
        (dict(methods=["eap_ig"], rank_by="atp"), "rank_by", "needs it in methods"),
        (dict(methods=["atp", "atp"], rank_by="atp"), "methods", "must not repeat"),
        (dict(answer=5000), "answer", "outside the vocabulary 0..2047"),
        (dict(corrupted="First Lord:\nWhat news?"), "corrupted", "clean has 32 tokens and corrupted"),
        (dict(steps=0), "steps", "greater than or equal to 1"),
        (dict(target=0), "target", "greater than 0"),
        (dict(methods=["ig"]), "methods.0", "'atp' or 'eap_ig'"),
    ],
)
def test_bad_input_is_a_422_naming_the_field(client, caesar, change, field, words):
    got, msg = field_of(client.post("/api/v1/circuits", json=body(caesar, **change)))
    assert got == field and words in msg, msg


def test_too_much_work_to_answer_at_once_points_to_the_job_form(client):
    text = "ROMEO:\n" + "But soft, what light through yonder window breaks? " * 16
    b = {"clean": text + "Caesar", "corrupted": text + "Edward", "exact": "all"}
    got, msg = field_of(client.post("/api/v1/circuits", json=b))
    assert got == "exact" and "/api/v1/circuits/jobs" in msg and "graph runs" in msg


def test_too_many_steps_for_the_memory_of_the_backward_pass_is_refused_before_it_runs(client):
    text = "ROMEO:\n" + "But soft, what light through yonder window breaks? " * 16
    b = {"clean": text + "Caesar", "corrupted": text + "Edward", "steps": 64, "exact": "none"}
    got, msg = field_of(client.post("/api/v1/circuits", json=b))
    assert got == "steps" and "at most" in msg and "MiB" in msg


def test_a_model_whose_stream_is_normalised_between_writers_is_refused(tmp_path):
    from fastapi.testclient import TestClient

    from gptscope.model import checkpoint as ckpt
    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    chars = [chr(32 + i) for i in range(61)]
    meta = {"name": "post", "tokenizer": {"kind": "chars", "chars": chars}, "step": 0, "final": True}
    ckpt.save(
        tmp_path / "post", GPT(GPTConfig(vocab_size=61, n_ctx=24, n_layer=2, n_head=2, d_model=16, norm="post")), meta
    )
    app = create_app(Settings(checkpoint=tmp_path / "post", allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    with TestClient(app) as c:
        got, msg = field_of(c.post("/api/v1/circuits", json={"clean": "Long live Ed", "corrupted": "Long live Hal"}))
    assert got == "clean" and "norm='pre'" in msg and "post-norm" in msg


def test_a_model_loaded_inside_inference_mode_can_still_be_differentiated(tmp_path):
    """The gradient pass needs weights that are not inference tensors, wherever the model was loaded."""
    from gptscope.model import checkpoint as ckpt

    ckpt.save(tmp_path, tiny("gpt2"), {"name": "t", "tokenizer": {"kind": "chars", "chars": list("abc")}, "step": 0})
    with torch.inference_mode():
        model = ckpt.load(tmp_path).model.set_mode("explain")
        assert not any(p.is_inference() for p in model.parameters())
        graph = cc.graph_of(model.cfg)
        clean, corrupt = cc.record(model, CLEAN), cc.record(model, CORRUPT)
        assert cc.attribution(model, graph, clean, corrupt, diff_of(3, 4), steps=2).abs().sum() > 0


@pytest.mark.slow  # exact scores of all 1,108 edges: a job of a few seconds
def test_every_edge_exactly_through_the_job_form_and_the_readme_finding(client, caesar):
    r = client.post("/api/v1/circuits/jobs", json=body(caesar, exact="all"))
    assert r.status_code == 202, r.text
    job, seen = r.json(), set()
    while job["status"] == "running":
        seen.add(job["done"])
        job = client.get(f"/api/v1/circuits/jobs/{job['id']}").json()
    assert job["status"] == "done" and job["done"] == job["total"] > 1108, job["error"]
    assert len(seen) > 2  # the progress moved while it ran
    d = job["result"]
    s = by_method(d)
    assert s["exact"]["edges"] is None and len(s["exact"]["values"]) == 1108
    exact = dict(zip(d["edges"], s["exact"]["values"]))
    comp = {c["method"]: c for c in d["comparisons"]}
    assert comp["eap_ig"]["edges"] == comp["atp"]["edges"] == 1108
    assert comp["eap_ig"]["pearson"] > comp["atp"]["pearson"] > 0.85  # integrated gradients fix AtP's misses
    # README: the path, the estimates' agreement and misses, the circuit's size and share
    top = sorted(exact, key=lambda e: -abs(exact[e]))[:4]
    assert top == ["input->m0", "a5.h2->logits", "m0->a5.h2<v>", "a5.h3->logits"]
    atp_miss, ig_miss = comp["atp"]["largest_errors"][0], comp["eap_ig"]["largest_errors"][0]
    assert atp_miss["name"] == ig_miss["name"] == "input->m0"
    c = d["circuit"]
    text = " ".join((Path(__file__).parents[1] / "README.md").read_text("utf-8").replace("**", "").split())
    shown = [
        "1,108 edges",
        *(f"{-exact[e]:.2f}" for e in top),
        f"r = {comp['eap_ig']['pearson']:.3f}",
        f"{comp['atp']['pearson']:.3f}",
        f"{atp_miss['estimate']:.2f}".replace("-", "−"),
        f"{ig_miss['estimate']:.2f}".replace("-", "−"),
        f"{len(c['edges'])} edges recover {round(100 * c['recovered'])}%",
    ]
    for words in shown:
        assert words in text, words
    assert c["curve"][2]["edges"] == 2 and c["curve"][2]["recovered"] == 0  # the first two alone: none


@pytest.mark.parametrize(
    "block, changed, extra",
    [("gpt2", 0, {}), ("llama-gqa", 7, {}), ("families", 0, {}), ("moe", 4, {}), ("gpt2", 4, {"causal": False})],
)
def test_exact_scores_from_the_first_changed_position_equal_the_graph_runs(block, changed, extra):
    """exact() computes only the positions from the first one the prompts differ at (every position
    without a causal mask), of its reader's block only what the edge changes, of the last block only
    the last position's query, and (columns given) only the logits the metric reads: every edge's score
    is still the graph run with that one edge patched, wherever the prompts first differ."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=40, n_ctx=16, n_layer=3, n_head=4, d_model=32, **{**BLOCKS[block], **extra})
    model = GPT(cfg).eval().set_mode("explain")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    corrupted = list(CLEAN)
    corrupted[changed] = 11
    reduce = diff_of(3, 4)
    with torch.inference_mode():
        graph = cc.graph_of(cfg)
        clean, corrupt = cc.record(model, CLEAN), cc.record(model, corrupted)
        n = graph.n_edges
        scores = cc.exact(model, graph, clean, corrupt, range(n), reduce)
        two = cc.exact(model, graph, clean, corrupt, range(n), reduce, columns=[3, 4])
        w = torch.ones(n, n) - torch.eye(n)  # row e: every edge kept but e
        runs = reduce(cc.run_graph(model, graph, clean, corrupt, w)) - reduce(clean.logits[None])
    assert runs.abs().max() > 0.1  # the edges matter
    torch.testing.assert_close(scores, runs.double(), atol=ROUNDING, rtol=0)
    torch.testing.assert_close(two, scores, atol=ROUNDING, rtol=0)
