"""Cross-layer transcoders (issue #64): a CLT's attribution graph is exact by construction, as a per-layer
set's is (every target's edges and constant add up to its value; an edge's weight is the change from
taking its source out of the frozen replacement model, a CLT feature's source being what it wrote at its
block and every later one; with the error nodes kept the replacement's logits are the real model's), in
float64 on tiny random models; steering a CLT feature changes every later MLP's output; a CLT trains and
round-trips through circuit-tracer's layout with its sha256s checked."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from test_attribution import BLOCKS, IDS, edges_are_removals

from gptscope.model import attribution as at
from gptscope.model import clt as cm
from gptscope.model import transcoders as tcm
from gptscope.model.gpt import GPT, GPTConfig, hook_name


def tiny(block: str) -> tuple[GPT, cm.CLT]:
    """A random 3-block model in float64 and a random CLT (16 features per block, TopK 4)."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=40, n_ctx=16, n_layer=3, n_head=4, d_model=32, **BLOCKS[block])
    model = GPT(cfg).double().eval().set_mode("explain")
    clt = cm.CLT(cm.CLTConfig(3, 32, 16, "topk", 4)).double()
    with torch.no_grad():
        clt.b_enc.normal_(0, 0.5)
        for w in clt.W_dec:
            w.mul_(0.3)
        clt.b_dec.normal_(0, 0.1)
    return model, clt.eval().requires_grad_(False)


@pytest.fixture(scope="module", params=["gpt2", "llama-gqa"])
def graph(request):
    model, clt = tiny(request.param)
    with torch.inference_mode():
        tr = at.trace(model, clt, IDS)
        g = at.build(model, clt, tr, at.Target(None, len(IDS) - 1, up=3, down=4), max_rows=1000)
    return model, clt, tr, g


def test_the_trace_reads_the_clts_writes(graph):
    """Each MLP's reconstruction is what every earlier block's active features wrote there plus its bias."""
    _, clt, tr, _ = graph
    assert tr.decoder.shape == (len(tr.act), 3, 32) and len(tr.act) > 20
    for lo in range(3):
        mine = tr.layer <= lo
        w = torch.zeros(len(IDS), 32, dtype=torch.float64).index_add_(
            0, tr.position[mine], tr.act[mine, None] * tr.decoder[mine, lo]
        )
        torch.testing.assert_close(w + clt.b_dec[lo], tr.recon[lo], atol=1e-12, rtol=0)
    assert float(tr.decoder[tr.layer == 2, :2].abs().max()) == 0  # nothing written before a feature's block


def test_with_the_errors_kept_the_frozen_replacement_is_the_real_model(graph):
    model, _, tr, g = graph
    with torch.no_grad():
        _, final = at.replacement(model, tr, tr.embed[None], tr.mlp_out[None])
        logits = final[0, -1] @ model.lm_head.weight.T
    torch.testing.assert_close(logits, tr.logits, atol=1e-9, rtol=0)
    assert math.isclose(float(g.edges.value[0]), float(tr.logits[3] - tr.logits[4]), abs_tol=1e-9)
    assert float(tr.error.abs().max()) > 0.01


def test_every_targets_edges_and_constant_add_up_to_its_value(graph):
    _, _, tr, g = graph
    e = g.edges
    torch.testing.assert_close(e.total(), e.value, atol=1e-9, rtol=0)
    torch.testing.assert_close(e.value[1:], tr.act[g.rows], atol=1e-9, rtol=0)
    assert len(g.rows) > 10 and float(e.features.abs().sum()) > 0 and float(e.errors.abs().sum()) > 0


@torch.no_grad()
def without(model, clt, tr: at.Trace, target: at.Target, kind: str, i: int) -> float:
    """The target in the frozen replacement with one source out: a token's row, a CLT feature's writes
    at its block and every later one, or an error node."""
    embed, writes = tr.embed.clone(), tr.mlp_out.clone()
    if kind == "token":
        embed[i] = 0
    elif kind == "feature":
        li, f = int(tr.layer[i]), int(tr.feature[i])
        for lo in range(li, 3):
            writes[lo, tr.position[i]] -= tr.act[i] * clt.W_dec[li][f, lo - li]
    else:
        li, p = divmod(i, len(tr.ids))
        writes[li, p] -= tr.error[li, p]
    reads, final = at.replacement(model, tr, embed[None], writes[None])
    return float(at.values(model, clt, [target], reads, final)[0])


def test_an_edges_weight_is_the_change_from_taking_its_source_out(graph):
    model, clt, tr, g = graph
    e = g.edges
    edges_are_removals(g, tr, lambda target, kind, i: without(model, clt, tr, target, kind, i))
    early = tr.layer == 0  # a block-0 feature's edge into the logit carries its writes at every block
    assert float(e.features[0, early].abs().sum()) > 0


def test_steering_a_clt_feature_changes_every_later_mlps_output(graph):
    model, clt, tr, _ = graph
    first = torch.nonzero(tr.layer == 0).flatten()
    i = int(first[torch.argmax(tr.act[first])])
    pos, f = int(tr.position[i]), int(tr.feature[i])
    with torch.inference_mode():
        torch.testing.assert_close(at.steered_logits(model, clt, IDS, [(0, pos, f, 1.0)]), tr.logits, atol=1e-9, rtol=0)
        cut = at.steered_logits(model, clt, IDS, [(0, pos, f, 0.0)])

        def take_out(lo):
            def fn(t, _n):
                t = t.clone()
                t[0, pos] -= tr.act[i] * clt.W_dec[0][f, lo]
                return t

            return fn

        with model.hooks([(hook_name("hook_mlp_out", lo), take_out(lo)) for lo in range(3)]):
            logits, _ = model(torch.tensor([IDS]))
    torch.testing.assert_close(cut, logits[0, -1], atol=1e-9, rtol=0)
    assert float((cut - tr.logits).abs().max()) > 1e-4


def test_a_clt_trains_and_round_trips_through_circuit_tracers_layout(tmp_path):
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=61, n_ctx=32, n_layer=2, n_head=4, d_model=32, **BLOCKS["llama-gqa"])
    model = GPT(cfg).eval()
    ids = torch.randint(0, 61, (4000,))
    tc = tcm.TranscoderTrainConfig(
        kind="clt", expansion=2, k=4, batch_tokens=256, max_tokens=30_000, eval_sequences=8, ce_sequences=4
    )
    clt, start, st = cm.train_clt(model, ids, tc)
    assert st.step > 50 and st.history[-1]["fvu"][1] < st.history[0]["fvu"][1]  # it learns
    figures, stats = cm.quality(model, clt, start, ids[:1000], tc)
    assert [x["layer"] for x in figures["layers"]] == [0, 1] and math.isfinite(figures["loss_replaced"])
    assert all(x["fve"] > x["fve_at_init"] and x["l0"] <= 4 for x in figures["layers"])
    folder = cm.save_clt(tmp_path / "clt", clt, stats, {"name": "clt", "quality": figures}, "tiny")
    names = {p.name for p in folder.iterdir()}
    assert {"W_enc_0.safetensors", "W_dec_1.safetensors", "config.json", "gptscope_transcoders.json"} <= names
    from safetensors.torch import load_file

    assert load_file(folder / "W_dec_0.safetensors")["W_dec_0"].shape == (64, 2, 32)  # (d_transcoder, L - l, d)
    assert load_file(folder / "W_enc_1.safetensors")["W_enc_1"].shape == (64, 32)
    loaded = tcm.read_meta(folder)["kind"] == "clt" and cm.load_any(folder)
    assert loaded and isinstance(loaded.codes, cm.CLT)
    x = torch.randn(5, 2, 32)
    torch.testing.assert_close(loaded.codes(x)[0], clt(x)[0])
    torch.testing.assert_close(loaded.codes[1].encode(x[:, 1]), clt.encode(x)[:, 1])
    (folder / "W_dec_1.safetensors").write_bytes(b"tampered")
    with pytest.raises(Exception, match=r"sha256|hash"):
        cm.load_any(folder)


# ---- the API: a CLT set beside the shipped per-layer one ----------------------------------------------


def test_the_api_lists_and_graphs_through_a_clt_set(client, service):
    """A (random, quickly measured) CLT saved where the built-in model's new sets go is listed with its kind,
    graphs through POST /api/v1/attribution (the replacement with its errors is the model: the target's value
    is the model's) and steers; a training request's kind is checked by name."""
    folder = Path(client.get("/api/v1/transcoders").json()["write_folder"]) / "zz-clt-test"
    torch.manual_seed(0)
    model, d = service.model, service.model.cfg.d_model
    clt = cm.CLT(cm.CLTConfig(model.cfg.n_layer, d, 64, "topk", 4)).requires_grad_(False)
    tc = tcm.TranscoderTrainConfig(kind="clt", expansion=2, k=4, eval_sequences=2, ce_sequences=1)
    val = torch.randint(0, model.cfg.vocab_size, (2 * model.cfg.n_ctx,))
    figures, stats = cm.quality(model, clt, clt, val, tc)
    meta = {"name": folder.name, "checkpoint": {"weights_sha256": service.meta.weights_sha256}, "quality": figures}
    cm.save_clt(folder, clt, stats, meta, "builtin")
    try:
        sets = {s["name"]: s for s in client.get("/api/v1/transcoders").json()["sets"]}
        assert sets[folder.name]["kind"] == "clt" and sets["x4-topk16-s0"]["kind"] == "per_layer"
        body = {"text": "To be, or not to be, that is", "transcoders": folder.name, "max_rows": 32}
        r = client.post("/api/v1/attribution", json=body)
        assert r.status_code == 200, r.text
        g = r.json()
        assert g["transcoders"] == folder.name and g["active_features"] > 0
        assert math.isclose(g["target_value"], g["model_value"], abs_tol=1e-3)
        f = next(n for n in g["nodes"] if n["kind"] == "feature")
        page = client.get(f"/api/v1/transcoders/{folder.name}/features/{f['layer']}/{f['feature']}")
        assert page.status_code == 200 and page.json()["layer"] == f["layer"], page.text
        iv = {"layer": f["layer"], "position": f["position"], "feature": f["feature"], "scale": 0.0}
        steer = {"text": body["text"], "transcoders": folder.name, "interventions": [iv]}
        r = client.post("/api/v1/attribution/intervene", json=steer)
        assert r.status_code == 200 and r.json()["kl_divergence"] >= 0, r.text
        # the two sets side by side on the same prompt: each row is its own graph's, the overlap a share
        r = client.post(
            "/api/v1/attribution/compare-sets", json={**body, "transcoders": "x4-topk16-s0", "other": folder.name}
        )
        assert r.status_code == 200, r.text
        c = r.json()
        per_layer = client.post("/api/v1/attribution", json={**body, "transcoders": "x4-topk16-s0"}).json()
        rows = {x["name"]: x for x in c["sets"]}
        assert rows[folder.name]["kind"] == "clt" and rows["x4-topk16-s0"]["kind"] == "per_layer"
        assert rows[folder.name]["kept_features"] == g["kept_features"]
        assert rows["x4-topk16-s0"]["kept_features"] == per_layer["kept_features"]
        assert rows["x4-topk16-s0"]["error_share"] == pytest.approx(per_layer["error_influence"], abs=1e-6)
        assert 0 <= c["jaccard"] <= 1 and all(0 <= o["share"] <= 1 for o in c["only"])
        assert all(x["kl"] >= 0 for x in c["sets"]) and c["target_real"] == pytest.approx(g["model_value"], abs=1e-4)
        same = client.post(
            "/api/v1/attribution/compare-sets", json={**body, "transcoders": folder.name, "other": folder.name}
        )
        assert same.status_code == 422 and same.json()["detail"][0]["loc"][-1] == "other"
    finally:
        shutil.rmtree(folder)
    r = client.post("/api/v1/transcoders", json={"kind": "cross"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "kind", r.text
