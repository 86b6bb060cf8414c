"""Attribution graphs through transcoders (issue #43): exact by construction on three block types
(every target's edges and constant add up to its value; an edge's weight is the change from taking
its source out of the frozen replacement model; with the error nodes kept the replacement's logits
are the real model's), interventions against hand-made runs, transcoders trained and saved on a
Llama-shaped model, and the API."""

from __future__ import annotations

import math

import pytest
import torch

from gptscope.model import attribution as at
from gptscope.model import transcoders as tcm
from gptscope.model.gpt import GPT, GPTConfig, hook_name
from gptscope.model.sae import SAEConfig

BLOCKS = {
    "gpt2": {},
    "llama-gqa": dict(pos="rope", norm_type="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False, qk_norm=True),
    "moe": dict(n_expert=4, top_k_experts=2),
}
IDS = [1, 5, 7, 9, 3, 2, 8, 4, 11, 6]


def tiny(block: str) -> tuple[GPT, list[tcm.Transcoder]]:
    """A random 3-block model in float64 and a random transcoder per MLP (16 features, TopK 4)."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=40, n_ctx=16, n_layer=3, n_head=4, d_model=32, **BLOCKS[block])
    model = GPT(cfg).double().eval().set_mode("explain")
    codes = []
    for i in range(cfg.n_layer):
        t = tcm.Transcoder(SAEConfig(32, 16, i, "topk", 4)).double()
        with torch.no_grad():
            t.b_enc.normal_(0, 0.5)
            t.W_dec.mul_(0.3)
        codes.append(t.eval().requires_grad_(False))
    return model, codes


@pytest.fixture(scope="module", params=list(BLOCKS))
def graph(request):
    model, codes = tiny(request.param)
    with torch.inference_mode():
        tr = at.trace(model, codes, IDS)
        target = at.Target(None, len(IDS) - 1, up=3, down=4)
        g = at.build(model, codes, tr, target, max_rows=1000)
    return request.param, model, codes, tr, g


def test_with_the_errors_kept_the_frozen_replacement_is_the_real_model(graph):
    _, model, _, tr, g = graph
    with torch.no_grad():
        _, final = at.replacement(model, tr, tr.embed[None], tr.mlp_out[None])
        logits = final[0, -1] @ model.lm_head.weight.T
    torch.testing.assert_close(logits, tr.logits, atol=1e-9, rtol=0)
    assert math.isclose(float(g.edges.value[0]), float(tr.logits[3] - tr.logits[4]), abs_tol=1e-9)
    assert len(tr.act) > 20 and float(tr.error.abs().max()) > 0.01  # features fire, and the errors are not nothing


def test_every_targets_edges_and_constant_add_up_to_its_value(graph):
    """Into the target and into every feature whose inputs were computed, each edge (from every token,
    active feature and error node) plus the constant that the biases add is the node's value, and a
    feature's value is its activation (the transcoder's pre-activation, which TopK kept)."""
    _, _, _, tr, g = graph
    e = g.edges
    # every active feature that can reach the target has its inputs here (the others have no influence:
    # a last block's feature before the last position, say)
    reach = at.influence(g, tr)[0][len(tr.ids) : len(tr.ids) + len(tr.act)] > 0
    assert set(g.rows.tolist()) == set(torch.nonzero(reach).flatten().tolist()) and len(g.rows) > 20
    torch.testing.assert_close(e.total(), e.value, atol=1e-9, rtol=0)
    torch.testing.assert_close(e.value[1:], tr.act[g.rows], atol=1e-9, rtol=0)
    assert float(e.features.abs().sum()) > 0 and float(e.errors.abs().sum()) > 0 and float(e.tokens.abs().sum()) > 0


@torch.no_grad()
def without(model, codes, tr: at.Trace, target: at.Target, kind: str, i: int) -> float:
    """The target's value in the frozen replacement model with one source taken out: a token's row,
    a feature's act x decoder row, or an error node."""
    embed, writes = tr.embed.clone(), tr.mlp_out.clone()
    if kind == "token":
        embed[i] = 0
    elif kind == "feature":
        writes[tr.layer[i], tr.position[i]] -= tr.act[i] * codes[int(tr.layer[i])].W_dec[tr.feature[i]]
    else:
        li, p = divmod(i, len(tr.ids))
        writes[li, p] -= tr.error[li, p]
    with torch.no_grad():
        reads, final = at.replacement(model, tr, embed[None], writes[None])
        return float(at.values(model, codes, [target], reads, final)[0])


def test_an_edges_weight_is_the_change_from_taking_its_source_out(graph):
    _, model, codes, tr, g = graph
    e = g.edges
    rng = torch.Generator().manual_seed(2)
    T, N = len(tr.ids), len(tr.act)
    for row in [0, *torch.randint(1, len(g.rows) + 1, (3,), generator=rng).tolist()]:
        target = (
            g.target
            if row == 0
            else at.Target(
                int(tr.layer[g.rows[row - 1]]), int(tr.position[g.rows[row - 1]]), int(tr.feature[g.rows[row - 1]])
            )
        )
        base = float(e.value[row])
        for kind, weights in (
            ("token", e.tokens[row]),
            ("feature", e.features[row]),
            ("error", e.errors[row].flatten()),
        ):
            for i in torch.argsort(-weights.abs())[:3].tolist():
                assert math.isclose(
                    base - without(model, codes, tr, target, kind, i), float(weights[i]), abs_tol=1e-9
                ), (kind, i)
    assert T and N


def test_influence_is_a_share_and_the_pruned_graph_keeps_what_it_says(graph):
    _, _, _, tr, g = graph
    pr = at.prune(g, tr, node_threshold=0.8, edge_threshold=0.9)
    assert math.isclose(float(pr.influence.sum()), 1.0, abs_tol=1e-6) and float(pr.influence.min()) >= 0
    assert pr.kept_share >= 0.8 and pr.edge_share >= 0.9
    dropped = torch.ones(len(tr.act), dtype=torch.bool)
    dropped[pr.features] = False
    if dropped.any():  # the smallest set: every dropped feature has no more influence than the least kept
        assert float(pr.influence[dropped].max()) <= float(pr.influence[pr.features].min()) + 1e-12
    rows = {0, *(r + 1 for r, f in enumerate(g.rows.tolist()) if f in set(pr.features.tolist()))}
    assert all(r in rows for _, r, _ in pr.edges)
    everything = at.prune(g, tr, node_threshold=1.0, edge_threshold=1.0)
    assert len(everything.features) == int((everything.influence > 0).sum()) or everything.kept_share >= 1 - 1e-6


def test_steering_through_a_transcoder_is_the_hand_made_run(graph):
    """Scale 1 changes nothing; scale 0 at (layer, position) subtracts that feature's activation on
    this very run's MLP input times its decoder row from the MLP's output, there alone."""
    _, model, codes, tr, _ = graph
    last = torch.nonzero(tr.position == len(IDS) - 1).flatten()  # a feature where the answer is read
    i = int(last[torch.argmax(tr.act[last])])
    layer, pos, f = int(tr.layer[i]), int(tr.position[i]), int(tr.feature[i])
    with torch.inference_mode():
        same = at.steered_logits(model, codes, IDS, [(layer, pos, f, 1.0)])
        torch.testing.assert_close(same, tr.logits, atol=1e-9, rtol=0)
        cut = at.steered_logits(model, codes, IDS, [(layer, pos, f, 0.0)])

        def take_out(t, _n):
            t = t.clone()
            t[0, pos] -= tr.act[i] * codes[layer].W_dec[f]
            return t

        with model.hooks([(hook_name("hook_mlp_out", layer), take_out)]):
            logits, _ = model(torch.tensor([IDS]))
    torch.testing.assert_close(cut, logits[0, -1], atol=1e-9, rtol=0)
    assert float((cut - tr.logits).abs().max()) > 1e-4


def test_a_post_norm_model_has_no_graph():
    model = GPT(GPTConfig(vocab_size=40, n_ctx=16, n_layer=2, n_head=2, d_model=16, norm="post"))
    with pytest.raises(ValueError, match="norm='pre'"):
        at.trace(model, [], IDS)


def test_transcoders_train_on_a_llama_shaped_model_and_round_trip_through_their_files(tmp_path):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=61, n_ctx=32, n_layer=2, n_head=4, d_model=32, **BLOCKS["llama-gqa"])
    model = GPT(cfg).eval()
    ids = torch.randint(0, 61, (4000,))
    tc = tcm.TranscoderTrainConfig(
        expansion=2, k=4, batch_tokens=256, max_tokens=60_000, eval_sequences=8, ce_sequences=4
    )
    codes, start, st = tcm.train_transcoders(model, ids, tc)
    assert st.step > 50 and st.history[-1]["fvu"][0] < st.history[0]["fvu"][0]  # it learns
    figures, stats = tcm.quality(model, codes, start, ids[:1000], tc)
    assert [x["layer"] for x in figures["layers"]] == [0, 1] and math.isfinite(figures["loss_replaced"])
    assert all(x["fve"] > x["fve_at_init"] for x in figures["layers"])
    folder = tcm.save_set(tmp_path / "set", codes, stats, {"name": "set", "quality": figures}, "tiny")
    loaded = tcm.load_set(folder)
    x = torch.randn(5, 32)
    for a, b in zip(codes, loaded.codes):
        torch.testing.assert_close(a(x)[0], b(x)[0])
    (folder / "layer_1.safetensors").write_bytes(b"tampered")
    with pytest.raises(Exception, match=r"sha256|hash"):
        tcm.load_set(folder)
