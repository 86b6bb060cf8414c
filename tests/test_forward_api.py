"""The forward-pass explainer's numbers, checked through the API against the model itself."""

from __future__ import annotations

import math

import pytest
import torch

from gptscope.server.schemas.forward import ALL_PARTS

PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"


def model_logits(service, text):
    ids = service.encoding.encode_ordinary(text)
    with torch.no_grad():
        logits, _ = service.model(torch.tensor([ids]))
    return ids, logits[0]


def test_every_stage_in_one_trace(client, service):
    r = client.post(
        "/api/v1/forward", json={"text": PROMPT, "include": list(ALL_PARTS), "layer": 1, "head": 2, "position": 3}
    )
    assert r.status_code == 200
    body = r.json()
    cfg = service.model.cfg
    T = len(body["tokens"])
    assert body["position"] == 3
    emb = body["embeddings"]
    assert len(emb["token"]) == T and len(emb["token"][0]) == cfg.d_model
    for t in range(T):  # the sum is token + position
        assert emb["sum"][t][5] == pytest.approx(emb["token"][t][5] + emb["position"][t][5], abs=2e-4)
    ln = body["layernorm"]
    assert ln["std"] == pytest.approx(math.sqrt(ln["variance"] + ln["eps"]), rel=1e-4)
    for i in (0, 7):
        expect = ln["normalized"][i] * ln["gain"][i] + ln["shift"][i]
        assert ln["output"][i] == pytest.approx(expect, abs=1e-3)
    hd = body["head_detail"]
    assert hd["layer"] == 1 and hd["head"] == 2 and len(hd["q"]) == T and len(hd["q"][0]) == cfg.d_head
    for i in range(T):
        assert all(hd["masked_scores"][i][j] is None for j in range(i + 1, T))  # -inf above the diagonal
        assert sum(hd["pattern"][i]) == pytest.approx(1.0, abs=1e-3)
    # scores are q.k / sqrt(d_head)
    q, k = hd["q"][3], hd["k"][1]
    assert hd["scores"][3][1] == pytest.approx(sum(a * b for a, b in zip(q, k)) * hd["scale"], abs=1e-3)
    # the residual add
    assert hd["resid_mid"][0] == pytest.approx(hd["resid_pre"][0] + hd["attn_out"][0], abs=1e-3)
    mlp = body["mlp"]
    assert len(mlp["layers"]) == cfg.n_layer
    assert sum(mlp["layers"][0]["histogram"]["counts"]) == T * cfg.d_mlp
    assert len(body["residual"]["norms"]) == cfg.n_layer + 1


def test_logit_lens_at_the_last_block_equals_the_models_prediction(client, service):
    r = client.post("/api/v1/logit-lens", json={"text": PROMPT})
    assert r.status_code == 200
    lens = r.json()
    ids, logits = model_logits(service, PROMPT)
    probs = torch.softmax(logits, -1)
    last = lens["top"][-1]
    for t in range(len(ids)):
        top = torch.topk(probs[t], 3)
        assert [c["id"] for c in last[t]] == top.indices.tolist()
        assert [c["prob"] for c in last[t]] == pytest.approx(top.values.tolist(), abs=1e-5)


def test_prompt_loss_equals_the_models_cross_entropy(client, service):
    r = client.post("/api/v1/forward", json={"text": PROMPT, "include": ["prompt_loss"]})
    pl = r.json()["prompt_loss"]
    ids, logits = model_logits(service, PROMPT)
    ce = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none")
    assert [p["loss"] for p in pl["positions"]] == pytest.approx(ce.tolist(), abs=1e-4)
    assert pl["mean_loss"] == pytest.approx(float(ce.mean()), abs=1e-4)
    assert pl["perplexity"] == pytest.approx(math.exp(float(ce.mean())), rel=1e-3)
    assert pl["uniform_loss"] == pytest.approx(math.log(service.model.cfg.vocab_size), abs=1e-4)


def test_decomposition_adds_up_to_the_logit(client, service):
    r = client.post("/api/v1/forward", json={"text": PROMPT, "include": ["decomposition", "next_token"]})
    d = r.json()["decomposition"]
    assert d["exact"] is True
    _ids, logits = model_logits(service, PROMPT)
    assert d["target_id"] == int(torch.argmax(logits[-1]))
    assert d["logit"] == pytest.approx(float(logits[-1].max()), abs=1e-4)
    assert abs(d["residual_error"]) < 1e-3
    cfg = service.model.cfg
    assert sum(c["kind"] == "head" for c in d["contributions"]) == cfg.n_layer * cfg.n_head
    assert sum(c["kind"] == "mlp" for c in d["contributions"]) == cfg.n_layer


def test_top_p_keeps_the_smallest_set_reaching_p(client):
    r = client.post("/api/v1/next-token", json={"text": PROMPT, "top_p": 0.5, "show": 200})
    body = r.json()
    kept = [c for c in body["candidates"] if c["kept"]]
    mass = [c["p_temperature"] for c in kept]
    assert sum(mass) >= 0.5 - 1e-4  # reaches p
    assert sum(mass[:-1]) < 0.5  # and not one token more than needed
    assert body["n_kept"] == len(kept)
    assert sum(c["p_final"] for c in kept) == pytest.approx(1.0, abs=1e-3)
    assert all(c["p_final"] == 0 for c in body["candidates"] if not c["kept"])


def test_top_k_and_small_temperature_is_greedy(client, service):
    r = client.post("/api/v1/next-token", json={"text": PROMPT, "top_k": 5})
    assert r.json()["n_kept"] == 5
    r = client.post("/api/v1/next-token", json={"text": PROMPT, "temperature": 1e-4})
    cands = r.json()["candidates"]
    assert cands[0]["p_final"] == pytest.approx(1.0, abs=1e-6)
    _, logits = model_logits(service, PROMPT)
    assert cands[0]["id"] == int(torch.argmax(logits[-1]))


def test_generation_stepper_equals_generate_with_the_same_seed(client, service):
    ids = service.encoding.encode_ordinary("JULIET:\n")
    expect = service.model.generate(torch.tensor([ids]), 6, temperature=0.9, top_k=50, seed=42)[0].tolist()
    seq = list(ids)
    for step in range(6):
        r = client.post(
            "/api/v1/generate/step", json={"ids": seq, "step": step, "seed": 42, "temperature": 0.9, "top_k": 50}
        )
        assert r.status_code == 200
        body = r.json()
        seq = body["ids"]
        cfg = service.model.cfg
        assert body["cache"]["positions"] == len(seq) - 1
        if step:  # the previous step's cache held every id but the one it drew
            assert body["reused_tokens"] == body["prefill_tokens"] == len(seq) - 2
        assert body["cache"]["numbers"] == cfg.n_layer * 2 * (len(seq) - 1) * cfg.d_model
        assert len(body["attention"]) == cfg.n_layer and len(body["attention"][0][0]) == len(seq) - 1
        assert sum(body["attention"][0][0]) == pytest.approx(1.0, abs=1e-3)
    assert seq == expect


def test_interventions_change_the_distribution(client):
    clean = client.post("/api/v1/intervene", json={"text": PROMPT})
    assert clean.status_code == 200 and clean.json()["kl_divergence"] == pytest.approx(0.0, abs=1e-6)
    r = client.post(
        "/api/v1/intervene", json={"text": PROMPT, "ablate_mlps": [0], "ablate_heads": [{"layer": 0, "head": 0}]}
    )
    body = r.json()
    assert body["kl_divergence"] > 1e-3
    assert body["clean"]["loss"] != body["altered"]["loss"]
    r = client.post("/api/v1/intervene", json={"text": PROMPT, "edits": [{"position": 0, "id": 42}]})
    assert r.json()["altered"]["tokens"][0]["id"] == 42


def test_embedding_geometry(client, service):
    r = client.get("/api/v1/embeddings/projection")
    assert r.status_code == 200 and len(r.json()["tokens"]) == service.model.cfg.vocab_size
    r = client.get("/api/v1/embeddings/neighbours", params={"token": " king", "k": 5})
    body = r.json()
    assert r.status_code == 200 and len(body["neighbours"]) == 5 and body["text"] == " king"
    cos = [n["cosine"] for n in body["neighbours"]]
    assert cos == sorted(cos, reverse=True) and all(-1 <= c <= 1 for c in cos)
    pos = client.get("/api/v1/embeddings/positions", params={"limit": 16}).json()
    assert pos["learned_similarity"][3][3] == pytest.approx(1.0, abs=1e-3)
    assert pos["sinusoidal_similarity"][0][0] == pytest.approx(1.0, abs=1e-3)


def test_embedding_projection_is_the_svds_principal_axes(client, service):
    """The projection's axes come from the Gram matrix's eigenvectors: the same as an SVD of the centred
    table's up to each axis's sign, which is fixed (its largest weight positive), and the same shares."""
    body = client.get("/api/v1/embeddings/projection", params={"limit": 500}).json()
    w = service.model.wte.weight.detach().double()
    w = w - w.mean(0, keepdim=True)
    _, s, v = torch.linalg.svd(w, full_matrices=False)
    axes = v[:2].T * torch.sign(v[:2].T.gather(0, v[:2].T.abs().argmax(0, keepdim=True)))
    ref = (w @ axes)[:500]
    got = torch.tensor([[t["x"], t["y"]] for t in body["tokens"]], dtype=torch.float64)
    assert (got - ref).abs().max() < 1e-4  # the answer's 4 decimals
    share = (s**2 / (s**2).sum())[:2].tolist()
    assert body["explained_variance_ratio"] == pytest.approx(share, abs=2e-5)


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"text": PROMPT, "layer": 99}, "layer"),
        ({"text": PROMPT, "head": 99}, "head"),
        ({"text": PROMPT, "position": 999}, "position"),
        ({"text": PROMPT, "layers": [-1]}, "layers"),
        ({"text": PROMPT, "top_k": 0}, "top_k"),
        ({"text": PROMPT, "target": 10**7}, "target"),
        ({"text": PROMPT, "include": ["nonsense"]}, "include"),
    ],
)
def test_forward_bad_input_names_the_field(client, payload, field):
    r = client.post("/api/v1/forward", json=payload)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][1] == field


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"temperature": 0}, "temperature"),
        ({"temperature": -0.5}, "temperature"),
        ({"temperature": 1e9}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 10**6}, "top_k"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
    ],
)
def test_sampling_bad_input_names_the_field(client, payload, field):
    r = client.post("/api/v1/next-token", json={"text": PROMPT, **payload})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == field
    r = client.post("/api/v1/generate/step", json={"ids": [1, 2, 3], **payload})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][1] == field


def test_nan_and_inf_are_refused(client):
    for raw in (b'{"text": "hi", "temperature": NaN}', b'{"text": "hi", "top_p": Infinity}'):
        r = client.post("/api/v1/next-token", content=raw, headers={"Content-Type": "application/json"})
        assert r.status_code == 422


def test_generate_step_bad_ids(client, service):
    V, n_ctx = service.model.cfg.vocab_size, service.model.cfg.n_ctx
    r = client.post("/api/v1/generate/step", json={"ids": [1, V]})
    assert r.status_code == 422 and "vocabulary" in r.json()["detail"][0]["msg"]
    r = client.post("/api/v1/generate/step", json={"ids": [1] * (n_ctx + 1)})
    assert r.status_code == 422 and f"n_ctx={n_ctx}" in r.json()["detail"][0]["msg"]
    r = client.post("/api/v1/generate/step", json={"ids": []})
    assert r.status_code == 422


def test_a_128_token_trace_is_compact_json_and_gzipped(client, service):
    """128 tokens (the whole context of the cpu preset) with the default include (attention of every head + next token): weights are
    rounded in float64 (0.6031, not 0.6031000018119812) and a causal model's rows stop at the
    diagonal, so each weight costs under 7 bytes of JSON (it cost 19) and a model of 16 heads in
    all (the cpu preset) answers in under 1 MB; large answers are gzipped for a client that
    accepts it."""
    cfg = service.model.cfg
    n = min(cfg.n_ctx, 128)
    ids = service.encoding.encode_ordinary(PROMPT * 30)[:n]
    text = service.encoding.decode(ids)
    T = len(service.encoding.encode_ordinary(text))
    assert n == T
    r = client.post("/api/v1/forward", json={"text": text}, headers={"Accept-Encoding": "identity"})
    assert r.status_code == 200 and "content-encoding" not in r.headers
    assert b"000000" not in r.content  # no float32 noise widened to double
    heads = cfg.n_layer * cfg.n_head
    weights = heads * T * (T + 1) // 2  # rows 0..q of every head
    assert len(r.content) / weights < 7, len(r.content) / weights
    assert len(r.content) * 16 / heads <= 1_000_000, len(r.content)
    zipped = client.post("/api/v1/forward", json={"text": text}, headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip" and zipped.json() == r.json()
    assert int(zipped.headers["content-length"]) < len(r.content) / 3


def test_a_model_trained_without_the_mask_returns_full_attention_rows(service, tmp_path):
    """A non-causal checkpoint: health says so, and every row has all T keys with real weight above
    the diagonal (what the model really did)."""
    from fastapi.testclient import TestClient

    from gptscope.model import checkpoint as ckpt
    from gptscope.model.gpt import GPT, GPTConfig
    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    torch.manual_seed(0)
    cfg = GPTConfig(**{**service.model.cfg.to_dict(), "n_layer": 1, "causal": False})
    ckpt.save(tmp_path / "nc", GPT(cfg), {"name": "no-mask", "tokenizer": service.meta.tokenizer})
    app = create_app(Settings(checkpoint=tmp_path / "nc", data_dir=tmp_path / "data", allow_hosts=["testserver"]))
    with TestClient(app) as c:
        assert c.get("/api/v1/health").json()["info"]["causal"] is False
        body = c.post("/api/v1/forward", json={"text": PROMPT}).json()
    T = len(body["tokens"])
    assert body["causal"] is False
    for head in body["attention"]["pattern"][0]:
        assert all(len(row) == T for row in head)
        assert any(w > 0 for q, row in enumerate(head) for w in row[q + 1 :])


def test_a_trace_of_token_ids(client, service):
    ids = service.encoding.encode_ordinary("KING HENRY V:\nOnce more")
    by_text = client.post("/api/v1/forward", json={"text": "KING HENRY V:\nOnce more"}).json()
    by_ids = client.post("/api/v1/forward", json={"ids": ids}).json()
    assert by_ids["tokens"] == by_text["tokens"] and by_ids["attention"] == by_text["attention"]
    assert by_ids["next_token"] == by_text["next_token"] and by_ids["window"] == 0
    for payload, field in (
        ({"ids": [-1]}, "ids"),
        ({"ids": [service.model.cfg.vocab_size]}, "ids"),
        ({"ids": [1] * (service.model.cfg.n_ctx + 1)}, "ids"),
        ({}, "text"),
    ):
        r = client.post("/api/v1/forward", json=payload)
        assert r.status_code == 422 and field in r.json()["detail"][0]["loc"], (
            payload,
            r.text,
        )  # ["body", "ids", 0] for an item
