"""The /learn page's training lessons: every number the texts state, checked through /api/v1, and the
pure functions in model/lessons.py against PyTorch's own (init, dropout, Adam, autograd)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gptscope.model import lessons as L
from gptscope.model.gpt import GPT, GPTConfig


def get(client, path: str, **params) -> dict:
    r = client.get(f"/api/v1{path}", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def bad(client, path: str, field: str, **params) -> str:
    r = client.get(f"/api/v1{path}", params=params)
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert any(field in d["loc"] for d in detail), detail
    return " ".join(d["msg"] for d in detail)


# --- 1. initialisation ------------------------------------------------------------------------


def test_gpt1_init_against_xavier_and_he_at_768(client):
    b = get(client, "/curves/initialisation")
    s = {x["name"]: x for x in b["schemes"]}
    assert b["width"] == 768 and s["gpt1"]["std"] == 0.02
    assert s["xavier"]["std"] == pytest.approx(0.036, abs=5e-4) and s["he"]["std"] == pytest.approx(0.051, abs=5e-4)
    g = s["gpt1"]
    assert g["variance_formula"] == pytest.approx(0.307, abs=5e-4) and g["std_formula"] == pytest.approx(
        0.554, abs=5e-4
    )
    assert g["band_sigmas"] == pytest.approx(3.6, abs=0.01)
    # the simulation on real matrices agrees with the formula, and keeps almost everything in [-2, 2]
    for x in s.values():
        assert x["variance_simulated"] == pytest.approx(x["variance_formula"], rel=0.05)
    assert g["share_in_band_simulated"] > 0.999 > s["he"]["share_in_band_simulated"]
    assert sum(g["histogram"]["counts"]) == 768 * b["rows"]


def test_init_matrices_are_torch_nn_init_draws():
    g = torch.Generator().manual_seed(0)
    w = L.init_matrix("he", 512, g)
    assert float(w.std()) == pytest.approx(math.sqrt(2 / 512), rel=0.02)
    assert float(L.init_matrix("xavier", 512, g).std()) == pytest.approx(1 / math.sqrt(512), rel=0.02)


# --- 2. dropout -------------------------------------------------------------------------------


def test_dropout_rescales_by_1_25_at_p_0_2_and_keeps_the_expectation(client):
    b = get(client, "/curves/dropout", p=0.2, size=16, seed=3)
    assert b["scale"] == 1.25 and b["token"] == " the"
    for h, m, o in zip(b["h"], b["mask"], b["out"]):
        assert o == pytest.approx(h * m * 1.25)
    assert b["kept"] == sum(b["mask"]) and 0 < b["kept"] < 16
    assert b["torch_max_abs_diff"] < 1e-12
    for h, a, plain in zip(b["h"], b["average_rescaled"], b["average_plain"]):
        assert a == pytest.approx(h, abs=0.05 * max(abs(v) for v in b["h"]))
        assert plain == pytest.approx(a * 0.8)
    assert "vocabulary" in bad(client, "/curves/dropout", "token_id", token_id=10**6)


# --- 3. Adam ----------------------------------------------------------------------------------


def test_adam_memory_bias_correction_and_defaults(client):
    b = get(client, "/curves/adam")
    assert b["memory_beta2"] == pytest.approx(1000) and b["memory_beta1"] == pytest.approx(10)
    assert get(client, "/curves/adam", beta2=0.98)["memory_beta2"] == pytest.approx(50)
    presets = {p["label"]: p for p in b["presets"]}
    kb = presets["Kingma and Ba's defaults"]
    assert (kb["lr"], kb["beta1"], kb["beta2"], kb["eps"]) == (1e-3, 0.9, 0.999, 1e-8)
    assert {k: v for k, v in presets["torch.optim.Adam's defaults"].items() if k != "label"} == {
        k: v for k, v in kb.items() if k != "label"
    }
    assert presets["the Transformer (Vaswani et al.)"]["memory_beta2"] == pytest.approx(50)
    # a constant gradient: the raw moments start near zero, the corrected ones are exactly g
    assert b["m"][0] == pytest.approx(0.1) and b["m_hat"][0] == pytest.approx(1.0)
    assert all(v == pytest.approx(1.0) for v in b["m_hat"] + b["v_hat"])
    assert b["step"][0] == pytest.approx(1.0, rel=1e-6)
    assert b["step_uncorrected"][0] == pytest.approx(0.1 / math.sqrt(0.001), rel=1e-6)
    assert b["weight_within_memory_beta2"] == pytest.approx(1 - 1 / math.e, abs=0.01)
    ratio = dict(zip(b["eps_gradients"], b["eps_ratio"]))
    assert ratio[1.0] == pytest.approx(1.0) and min(ratio.values()) < 0.01


def test_adam_moments_follow_torch_optim_adam():
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([p], lr=0.1)
    mo = L.adam_moments_constant(0.5, 3, 0.9, 0.999, 1e-8, lr=0.1)
    for t in range(3):
        p.grad = torch.tensor([0.5])
        before = float(p.detach())
        opt.step()
        assert before - float(p.detach()) == pytest.approx(mo["step"][t], rel=1e-5)
        assert float(opt.state[p]["exp_avg"]) == pytest.approx(mo["m"][t], rel=1e-5)


# --- 4. the encoder-decoder Transformer -------------------------------------------------------


def test_transformer_base_is_about_65m_tied_and_84m_untied(client):
    b = get(client, "/params", preset="transformer-base")
    e = b["encoder_decoder"]
    assert b["config"]["vocab_size"] == 37_000 and b["config"]["d_model"] == 512 and b["config"]["norm"] == "post"
    assert e["tied_total"] == pytest.approx(65e6, rel=0.05) and e["untied_total"] == pytest.approx(84e6, rel=0.05)
    assert e["difference"] == 37_000 * 512 == e["embedding"]  # about 19M: one more V x d matrix
    assert b["counts"]["total"] == e["tied_total"] == sum(p["count"] for p in b["parts"])
    untied = get(client, "/params", preset="transformer-base", tie_weights=False)
    assert untied["counts"]["total"] == e["untied_total"] == sum(p["count"] for p in untied["parts"])
    assert "transformer-base" in bad(client, "/params", "pos", preset="transformer-base", pos="rope")


# --- 5. embedding scale -----------------------------------------------------------------------


def test_sqrt_d_model_against_the_sinusoidal_norm(client):
    b = get(client, "/curves/embedding-scale", d_model=512)
    assert b["sqrt_d_model"] == pytest.approx(22.6, abs=0.05) and b["position_norm_formula"] == 16.0
    assert all(n == pytest.approx(16.0) for n in b["position_norms"])
    assert b["embedding_norm_mean"] == pytest.approx(1.0, abs=0.05)
    assert b["embedding_norm_scaled_mean"] == pytest.approx(22.6, rel=0.05)


# --- 6. characters against sub-words ----------------------------------------------------------


def test_a_character_level_model_computes_about_30_times_the_attention_scores(client):
    text = "The transformer unpacks unhelpful words into smaller pieces before processing them."
    b = client.post("/api/v1/tokenize/compare", json={"text": text, "include_tokens": False}).json()
    assert b["character_level"] == {"positions": 83, "attention_scores": 83**2}
    o200k = next(e for e in b["encodings"] if e["encoding"] == "o200k_base")
    assert o200k["counts"]["tokens"] == 15 and o200k["character_attention_ratio"] == pytest.approx(30.6, abs=0.05)


# --- 7. BERT against GPT ----------------------------------------------------------------------


def test_masked_lm_corruption_and_the_two_masks(client):
    b = get(client, "/curves/masked-lm", text="Once more unto the breach, dear friends, once more", seed=1)
    n = len(b["tokens"])
    assert b["causal"] == [[j <= i for j in range(n)] for i in range(n)]
    assert b["bidirectional"] == [[True] * n for _ in range(n)]
    assert b["visible_next_causal"] == 0 and b["visible_next_bidirectional"] == n - 1
    assert b["picked"] == max(1, round(0.15 * n)) == sum(p["action"] is not None for p in b["positions"])
    for p in b["positions"]:
        if p["action"] == "mask":
            assert p["shown"] == "[MASK]"
        elif p["action"] in (None, "keep"):
            assert p["shown"] == p["original"]["text"]
    s = b["shares"]
    assert s["picked"] == pytest.approx(0.15, abs=0.001)
    assert (s["mask"], s["random"], s["keep"]) == pytest.approx((0.8, 0.1, 0.1), abs=0.01)
    assert "causal" in b["cannot_generate"]


# --- 8. teacher forcing -----------------------------------------------------------------------


def test_one_forward_pass_scores_every_position(client):
    b = get(client, "/curves/teacher-forcing", text="Once more unto the breach, dear friends")
    assert [t["id"] for t in b["inputs"]] == [t["id"] for t in b["tokens"][:-1]]
    assert [t["id"] for t in b["targets"]] == [t["id"] for t in b["tokens"][1:]]
    assert b["predictions"] == len(b["tokens"]) - 1 == len(b["loss"])
    assert b["max_abs_diff"] < 1e-4
    assert b["mean_loss"] == pytest.approx(sum(b["loss"]) / len(b["loss"]))
    assert all(p == pytest.approx(math.exp(-v)) for p, v in zip(b["prob"], b["loss"]))
    assert "tokens" in bad(client, "/curves/teacher-forcing", "text", text="a")


# --- 9. how the loss reaches a head -----------------------------------------------------------


def test_head_gradients_are_autograds_and_match_the_formula(client, service):
    L, H = service.model.cfg.n_layer, service.model.cfg.n_head
    b = get(client, "/curves/head-gradients", text="Once more unto the breach, dear friends", layer=2, head=3)
    T = len(b["inputs"])
    assert len(b["A"]) == T and len(b["dA"][0]) == T and len(b["norms"]) == L and all(len(r) == H for r in b["norms"])
    assert b["dA_formula_max_abs_diff"] < 1e-6 and b["dV_formula_max_abs_diff"] < 1e-6
    assert all(n["total"] > 0 for row in b["norms"] for n in row)
    assert f"layers 0..{L - 1}" in bad(client, "/curves/head-gradients", "layer", layer=L)


def test_head_gradients_equal_backward_on_a_small_model():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, n_ctx=16, n_layer=2, n_head=2, d_model=16)).eval()
    ids = list(range(3, 13))
    g = L.head_gradients(model, ids, 1, 1)
    logits, _ = model(torch.tensor([ids[:-1]]))
    F.cross_entropy(logits[0], torch.tensor(ids[1:])).backward()
    w = model.blocks[1].attn.c_attn.weight.grad
    assert g["norms"][1][1]["q"] == pytest.approx(float(w[8:16].norm()), rel=1e-5)
    assert g["norms"][0][0]["o"] == pytest.approx(
        float(model.blocks[0].attn.c_proj.weight.grad[:, :8].norm()), rel=1e-5
    )
    assert g["dA_formula_max_abs_diff"] < 1e-6


# --- 10. tokens per update --------------------------------------------------------------------


def test_gpt1_sees_32768_predictions_per_update_and_1e11_in_all(client, service):
    b = get(client, "/curves/tokens-per-update")
    assert b["per_update"] == 64 * 512 == 32_768
    assert b["total_predictions"] == pytest.approx(1e11) and b["labelled_examples"] == 550_000
    assert b["predictions_per_labelled_example"] == pytest.approx(1e11 / 550_000)
    rows = {r["label"]: r for r in b["models"]}
    assert (rows["GPT-1"]["batch"], rows["GPT-1"]["context"]) == (64, 512)
    assert (rows["GPT-2"]["batch"], rows["GPT-2"]["context"], rows["GPT-2"]["per_update"]) == (512, 1024, 524_288)
    presets = {p["name"]: p for p in get(client, "/params/presets")["presets"]}
    assert presets["gpt1"]["tokens_per_update"] == 32_768 and presets["gpt2"]["batch_size"] == 512
    # the loaded model's row: the batch and context its checkpoint.json says it was trained with
    tc = service.meta.train_config
    assert presets["model"]["batch_size"] == tc["batch_size"]
    assert presets["model"]["context"] == (tc["seq_len"] or service.model.cfg.n_ctx)
    assert presets["model"]["tokens_per_update"] == tc["batch_size"] * presets["model"]["context"]
