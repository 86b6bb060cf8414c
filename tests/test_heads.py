"""Head roles: scores, baselines, ablation, entropies, and the API that serves them."""

from __future__ import annotations

import math

import pytest
import torch

from gptscope.model import corpus as corpus_mod
from gptscope.model import heads as hd
from gptscope.model.gpt import GPT, GPTConfig

N_CTX, V = 16, 16
PASSAGE_A = "ROMEO:\nBut soft, what light through yonder window breaks? It is the east, and Juliet is the sun."
PASSAGE_B = "KING HENRY V:\nOnce more unto the breach, dear friends, once more; or close the wall up with our dead."
POS, TOK = slice(0, 16), slice(16, 32)  # residual dimensions holding a one-hot position / token


def hand_built() -> GPT:
    """One layer, four heads of 16, weights set by hand:
    head 0 attends from i to i-1 and copies that token into the stream (previous-token);
    head 1 attends to position 0 and writes nothing (first-token);
    heads 2 and 3 have tiny random weights (no role). The MLP is off; the embeddings are one-hot."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=V, n_ctx=N_CTX, n_layer=1, n_head=4, d_model=64, dropout=0.0)
    m = GPT(cfg).eval()
    d, hs = 64, 16
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.01)
        m.wte.weight.zero_()
        m.wte.weight[:, TOK] = torch.eye(V)
        m.wpe.weight.zero_()
        m.wpe.weight[:, POS] = torch.eye(N_CTX)
        for ln in (m.blocks[0].ln1, m.blocks[0].ln2, m.ln_final):
            ln.weight.fill_(1.0)
            ln.bias.zero_()
        m.blocks[0].mlp.c_fc.weight.zero_()
        m.blocks[0].mlp.c_proj.weight.zero_()
        m.blocks[0].mlp.c_fc.bias.zero_()
        m.blocks[0].mlp.c_proj.bias.zero_()
        W = m.blocks[0].attn.c_attn.weight  # rows: q (d), k (d), v (d); head h uses rows h*hs:(h+1)*hs of each
        b = m.blocks[0].attn.c_attn.bias
        W[:, :] = 0.0
        b.zero_()
        shift = torch.zeros(hs, N_CTX)  # q_i = e_(i-1): matches k_j = e_j at j = i - 1
        for i in range(1, N_CTX):
            shift[i - 1, i] = 1.0
        W[0:hs, POS] = 20.0 * shift  # head 0 query
        W[d : d + hs, POS] = torch.eye(N_CTX)  # head 0 key
        W[2 * d : 2 * d + hs, TOK] = torch.eye(V)  # head 0 value: the token
        W[hs, POS] = 20.0  # head 1 query: the same for every position
        W[d + hs, 0] = 1.0  # head 1 key: only position 0 answers
        W[2 * d + 2 * hs :, :] = torch.randn(2 * hs, d) * 0.01  # heads 2, 3: values, tiny
        W_O = m.blocks[0].attn.c_proj.weight  # (d, d): head h's z dims h*hs:(h+1)*hs
        W_O.zero_()
        m.blocks[0].attn.c_proj.bias.zero_()
        W_O[TOK, 0:hs] = 10.0 * torch.eye(V)  # head 0 writes the previous token, strongly
        W_O[:, 2 * hs :] = torch.randn(d, 2 * hs) * 0.01
    return m.set_mode("explain")


def alternating(n: int = N_CTX) -> torch.Tensor:
    """a b a b ...: each next token equals the one before the current one."""
    return torch.tensor([[3 if i % 2 == 0 else 7 for i in range(n)]])


def small_rep(vocab: int = V, n_ctx: int = N_CTX) -> hd.RepeatedTokens:
    return hd.repeated_tokens(vocab, n_ctx, n=n_ctx // 2)


def test_hand_built_heads_get_their_roles():
    m = hand_built()
    report = hd.analyse(m, alternating(), small_rep())
    by = {(h.layer, h.head): h for h in report.heads}
    assert by[(0, 0)].scores["previous-token"] == pytest.approx(1.0, abs=1e-3)
    assert by[(0, 0)].roles[0] == "previous-token"
    assert by[(0, 1)].scores["first-token"] == pytest.approx(1.0, abs=1e-3)
    assert by[(0, 1)].roles[0] == "first-token"
    assert by[(0, 2)].roles == [] and by[(0, 3)].roles == []


def test_ablating_the_role_head_costs_more_than_a_role_less_one():
    m = hand_built()
    report = hd.analyse(m, alternating(), small_rep())
    assert report.in_context == hd.in_context_score(m, small_rep())  # its second copy's loss from the clean pass
    prev = next(h for h in report.heads if h.head == 0)
    assert prev.ablation["task"] == "prompt" and prev.ablation["confirmed"]
    assert prev.ablation["zero_cost"] > 1.0  # without it, the a-b-a-b text cannot be predicted
    plain = hd.task_loss(m, alternating(), 0, (0, 2, "zero")) - hd.task_loss(m, alternating(), 0)
    assert prev.ablation["zero_cost"] > 100 * abs(plain)
    first = next(h for h in report.heads if h.head == 1)  # attends to position 0 but writes nothing
    assert first.ablation["zero_cost"] == pytest.approx(0.0, abs=1e-3) and not first.ablation["confirmed"]


def test_a_random_model_gets_no_roles():
    torch.manual_seed(5)
    cfg = GPTConfig(vocab_size=97, n_ctx=32, n_layer=2, n_head=4, d_model=32)
    m = GPT(cfg).eval()
    prompt = torch.randint(97, (1, 32), generator=torch.Generator().manual_seed(3))
    report = hd.analyse(m, prompt, hd.repeated_tokens(97, 32), ablate=False)
    assert all(not h.roles for h in report.heads), [
        (h.layer, h.head, h.roles, h.scores) for h in report.heads if h.roles
    ]


def one_hot_pattern(n: int, offset: int) -> torch.Tensor:
    """(1, 1, 2n, 2n): every query of the second copy puts all its weight on i - offset; the first
    copy attends to itself."""
    T = 2 * n
    p = torch.zeros(1, 1, T, T)
    for i in range(T):
        p[0, 0, i, i - offset if i >= n else i] = 1.0
    return p


def test_induction_and_duplicate_scores_follow_their_definitions():
    n = 6
    ind = hd.repeat_scores(one_hot_pattern(n, n - 1), n)
    assert float(ind["induction"]) == 1.0 and float(ind["duplicate-token"]) == 0.0
    dup = hd.repeat_scores(one_hot_pattern(n, n), n)
    assert float(dup["duplicate-token"]) == 1.0 and float(dup["induction"]) == 0.0
    mixed = 0.7 * one_hot_pattern(n, n - 1) + 0.3 * one_hot_pattern(n, n)
    s = hd.repeat_scores(mixed, n)
    # the definition: mean over i in [n, 2n) of pattern[i, i-n+1]
    manual = sum(float(mixed[0, 0, i, i - n + 1]) for i in range(n, 2 * n)) / n
    assert float(s["induction"]) == pytest.approx(manual) == pytest.approx(0.7)
    assert float(s["duplicate-token"]) == pytest.approx(0.3)


def test_prompt_scores_follow_their_definitions():
    T = 5
    p = torch.zeros(T, T)
    p[0, 0] = 1.0
    p[1, 0], p[1, 1] = 0.5, 0.5  # at i = 1, position 0 is also i - 1
    for i in range(2, T):
        p[i, 0], p[i, i - 1], p[i, i] = 0.5, 0.25, 0.25
    s = hd.prompt_scores(p)
    assert float(s["first-token"]) == pytest.approx(0.5)
    assert float(s["previous-token"]) == pytest.approx((0.5 + 0.25 * 3) / 4)  # at i = 1, i-1 is position 0
    assert float(s["current-token"]) == pytest.approx((0.5 + 0.25 * 3) / 4)


def test_unigram_and_bigram_entropies_of_a_tiny_text():
    e = corpus_mod.ngram_entropies([0, 1, 0, 1, 0, 0], 2)
    h1 = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3))
    # pairs: (0,1) x2, (1,0) x2, (0,0) x1; after 0: 1 twice, 0 once; after 1: always 0
    h2 = -(2 * math.log(2 / 3) + 1 * math.log(1 / 3) + 2 * math.log(1.0)) / 5
    assert e["unigram_entropy"] == pytest.approx(h1) and e["bigram_entropy"] == pytest.approx(h2)
    assert corpus_mod.ngram_entropies([5, 5, 5, 5], 8)["unigram_entropy"] == 0.0


# --- the API --------------------------------------------------------------------------------------


@pytest.mark.slow  # scores random twins and ablates every role head of the built-in model
def test_heads_api_on_the_built_in_model(client, service):
    r = client.get("/api/v1/heads")
    assert r.status_code == 200, r.text
    body = r.json()
    cfg = service.model.cfg
    assert len(body["heads"]) == cfg.n_layer * cfg.n_head
    assert {d["name"] for d in body["roles"]} == set(hd.ROLES)
    for d in body["roles"]:
        assert d["threshold"] == pytest.approx(max(body["min_score"], d["baseline_max"] + body["margin"]), abs=1e-4)
    t = body["test_input"]
    assert len(t["ids"][0]) == 2 * t["n"] and t["ids"][0][: t["n"]] == t["ids"][0][t["n"] :]
    for h in body["heads"]:
        assert all(0.0 <= v <= 1.0 + 1e-6 for v in h["scores"].values())
        thr = {d["name"]: d["threshold"] for d in body["roles"]}
        assert set(h["roles"]) == {r for r, v in h["scores"].items() if v >= thr[r] - 1e-4}
        assert (h["ablation"] is None) == (not h["roles"])
        assert h["status"] == (
            "no clear role" if not h["roles"] else "confirmed" if h["ablation"]["confirmed"] else "not confirmed"
        )
    assert body["summary"]
    short = client.get(
        "/api/v1/heads", params={"text": "KING HENRY V:\nOnce more unto the breach", "ablate": "false"}
    ).json()
    assert len(short["prompt"]) < len(body["prompt"]) and all(h["ablation"] is None for h in short["heads"])


def test_heads_api_bad_input(client):
    r = client.get("/api/v1/heads", params={"text": "a"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "text"]
    assert client.get("/api/v1/training/0123456789ab/heads").status_code == 404
    assert client.get("/api/v1/training/..%2F..%2Fetc/heads").status_code in (404, 422)


def test_a_large_models_ablations_stop_at_the_limit():
    m = hand_built()
    report = hd.analyse(m, alternating(), small_rep(), max_ablated=1)
    tested = [h for h in report.heads if h.ablation is not None]
    assert len(tested) == 1 and len([h for h in report.heads if h.roles]) == 2


@pytest.mark.parametrize(
    "extra",
    [
        {},  # GPT-2's block
        {"parallel": True},  # GPT-NeoX's
        {"embed_norm": True, "x0_mix": True, "backout": True, "tie_weights": False},  # nanochat's stream
        {"norm": "post"},  # GPT-1's
    ],
    ids=["gpt2", "parallel", "nanochat-stream", "post-norm"],
)
def test_an_ablated_pass_resumed_at_its_block_is_the_whole_pass(extra):
    """analyse's ablations start at the ablated head's block from the clean pass's streams (clean_pass):
    the same losses as the whole pass, to the bit, on every kind of stream a block reads."""
    torch.manual_seed(2)
    cfg = GPTConfig(vocab_size=50, n_ctx=24, n_layer=4, n_head=2, d_model=16, dropout=0.0, **extra)
    m = GPT(cfg).eval()
    ids = torch.randint(50, (2, 24), generator=torch.Generator().manual_seed(1))
    loss, entering = hd.clean_pass(m, ids, 3)
    assert len(entering) == cfg.n_layer and loss == hd.task_loss(m, ids, 3)
    changed = 0
    for li in range(cfg.n_layer):
        for how in ("zero", "mean"):
            whole = hd.task_loss(m, ids, 3, (li, 1, how))
            assert hd.task_loss(m, ids, 3, (li, 1, how), entering) == whole, (li, how)
            changed += whole != loss
    assert changed >= cfg.n_layer  # the ablations do change the loss


def test_what_the_repeated_tokens_gave_is_kept_per_model_and_changes_no_number(service, monkeypatch):
    """A RepeatMemo (the server keeps one per model) holds the work on the repeated random tokens, which
    does not depend on the prompt: a second prompt's report is the one a fresh analysis makes, and the
    same prompt again runs no pass of the model over the repeated tokens."""
    from gptscope.server.explain.heads import repeated

    m, rep = service.model, repeated(service)
    prompts = [torch.tensor([service.encoding.encode_ordinary(t)]) for t in (PASSAGE_A, PASSAGE_B)]
    memo = hd.RepeatMemo()
    with torch.inference_mode():
        hd.analyse(m, prompts[0], rep, memo=memo)
        kept = hd.analyse(m, prompts[1], rep, memo=memo)
        assert kept == hd.analyse(m, prompts[1], rep)  # every score, baseline, cost and in-context number
        assert memo.scores is not None and set(memo.twins) == set(hd.BASELINE_SEEDS) and memo.costs
        assert "repeated-second-copy" in kept.reference_cost  # role-less heads ablated on the repeated tokens

        rows = []  # the batch of every pass the loaded model makes (the repeated tokens: REPEAT_BATCH rows)
        real_hidden, real_tail = GPT.hidden, GPT.tail
        monkeypatch.setattr(
            GPT, "hidden", lambda s, idx, *a, **k: (s is m and rows.append(len(idx)), real_hidden(s, idx, *a, **k))[1]
        )
        monkeypatch.setattr(
            GPT, "tail", lambda s, e, idx, *a, **k: (s is m and rows.append(len(idx)), real_tail(s, e, idx, *a, **k))[1]
        )
        assert hd.analyse(m, prompts[1], rep, memo=memo) == kept
        assert rows and set(rows) == {1}, rows  # the prompt's passes only
        other = hd.repeated_tokens(m.cfg.vocab_size, m.cfg.n_ctx, seed=5)
        assert hd.analyse(m, prompts[0], other, memo=memo, ablate=False) == hd.analyse(
            m, prompts[0], other, ablate=False
        )
        assert hd.REPEAT_BATCH in rows  # other tokens: the memo started again
