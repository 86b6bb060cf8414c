"""The modern block: RoPE, RMSNorm, norm placement, SwiGLU, grouped-query and sliding-window
attention, mixture of experts. Each option against its formula or the GPT-2 block it generalises."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from fastapi.testclient import TestClient

from gptscope.model import checkpoint as ckpt
from gptscope.model.formulas import kv_cache_bytes
from gptscope.model.gpt import (
    GPT,
    MLP,
    GPTConfig,
    KVCache,
    RMSNorm,
    apply_rope,
    count_params,
    preset_config,
    rope_angles,
)
from gptscope.server.app import create_app
from gptscope.server.config import Settings
from gptscope.server.schemas.forward import ALL_PARTS

BASE = dict(vocab_size=61, n_ctx=24, n_layer=2, n_head=4, d_model=32)
COMBOS = {
    "rope": dict(pos="rope"),
    "no-positions": dict(pos="none"),
    "rmsnorm": dict(norm_type="rmsnorm"),
    "sandwich": dict(norm="both"),
    "post": dict(norm="post"),
    "swiglu": dict(mlp="swiglu"),
    "gqa": dict(n_kv_head=2),
    "mqa": dict(n_kv_head=1),
    "window": dict(window=5),
    "moe": dict(n_expert=4, top_k_experts=2),
    "llama-like": dict(pos="rope", norm_type="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False),
    "everything": dict(
        pos="rope", norm_type="rmsnorm", norm="both", mlp="swiglu", n_kv_head=1, window=6, n_expert=3, bias=False
    ),
    # the imported families' switches (issue #45): GPT-NeoX's, Gemma 2's, Gemma 3's and OLMo 2's blocks
    "neox": dict(pos="rope", rotary_dim=4, parallel=True),
    "gemma2": dict(
        pos="rope",
        norm_type="rmsnorm",
        norm="both",
        mlp="geglu",
        n_kv_head=2,
        bias=False,
        embed_scale=5.6,
        attn_scale=0.3,
        attn_softcap=2.0,
        softcap=3.0,
        window=5,
        window_pattern="SL",
        window_last_full=False,
    ),
    "gemma3": dict(
        pos="rope",
        norm_type="rmsnorm",
        norm="both",
        mlp="geglu",
        n_kv_head=1,
        bias=False,
        qk_norm=True,
        embed_scale=5.6,
        window=4,
        window_pattern="SSL",
        window_last_full=False,
        rope_base=1e6,
        rope_local_base=1e4,
        rope_scaling="linear",
        rope_factor=2.0,
    ),
    "olmo2": dict(
        pos="rope", norm_type="rmsnorm", norm="out", mlp="swiglu", qk_norm=True, qk_norm_all=True, bias=False
    ),
    # nanochat's block: every one of its switches (preset nanochat-tiny at this size)
    "nanochat": {**preset_config("nanochat-tiny").to_dict(), **BASE, "d_mlp": 128, "window": 6, "window_pattern": "SL"},
}


def model(seed: int = 0, **kw) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**BASE, **kw})).eval()


def test_rope_scores_depend_only_on_the_distance():
    torch.manual_seed(0)
    hs = 16
    q, k = torch.randn(hs), torch.randn(hs)

    def score(pq: int, pk: int) -> float:
        cos, sin = rope_angles(hs, torch.tensor([pq, pk]), 10000.0)
        return float(apply_rope(q, cos[0], sin[0]) @ apply_rope(k, cos[1], sin[1]))

    for shift in (1, 7, 100):
        assert score(9 + shift, 4 + shift) == pytest.approx(score(9, 4), abs=1e-4)
    assert abs(score(9, 4) - score(9, 5)) > 1e-3  # ... and does depend on the distance
    # in the model: with every query and key the same vector, a row's scores are a function of i - j
    m = model(pos="rope", n_layer=1).set_mode("explain")
    with m.capture(["blocks.0.attn.hook_attn_scores"]) as c:
        m(torch.full((1, 12), 5))
    s = c["blocks.0.attn.hook_attn_scores"][0, 0]
    for i, j in ((8, 3), (11, 6)):
        assert float(s[i, j]) == pytest.approx(float(s[5, 0]), abs=1e-4)


def test_rmsnorm_equals_its_formula():
    torch.manual_seed(1)
    n = RMSNorm(8, 1e-5)
    with torch.no_grad():
        n.weight.copy_(torch.randn(8))
    x = torch.randn(3, 5, 8)
    want = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-5) * n.weight
    for explain in (False, True):
        n.explain = explain
        assert torch.allclose(n(x), want, atol=1e-6)


def test_swiglu_equals_its_formula():
    torch.manual_seed(2)
    mlp = MLP(GPTConfig(**BASE, mlp="swiglu")).eval()
    assert mlp.c_fc.out_features == round(8 * 32 / 3)  # 8d/3 wide: the parameter count of a 4d GELU MLP
    x = torch.randn(2, 6, 32)
    want = mlp.c_proj(F.silu(mlp.c_gate(x)) * mlp.c_fc(x))
    assert torch.allclose(mlp(x), want, atol=1e-6)


def test_gqa_equals_mha_with_each_kv_head_repeated():
    gqa = model(n_kv_head=2)
    mha = model()
    d, hs, nh, nkv = 32, 8, 4, 2
    with torch.no_grad():
        for bg, bm in zip(gqa.blocks, mha.blocks):
            for name, p in bg.named_parameters():
                if "c_attn" not in name:
                    dict(bm.named_parameters())[name].copy_(p)
            Wq, Wk, Wv = bg.attn.c_attn.weight.split([d, nkv * hs, nkv * hs])
            bq, bk, bv = bg.attn.c_attn.bias.split([d, nkv * hs, nkv * hs])
            rep = lambda t: t.view(nkv, hs, *t.shape[1:]).repeat_interleave(nh // nkv, 0).reshape(nh * hs, *t.shape[1:])  # noqa: E731
            bm.attn.c_attn.weight.copy_(torch.cat([Wq, rep(Wk), rep(Wv)]))
            bm.attn.c_attn.bias.copy_(torch.cat([bq, rep(bk), rep(bv)]))
        for name in ("wte.weight", "wpe.weight", "ln_final.weight", "ln_final.bias"):
            dict(mha.named_parameters())[name].copy_(dict(gqa.named_parameters())[name])
    x = torch.randint(61, (2, 10))
    assert torch.allclose(gqa(x)[0], mha(x)[0], atol=1e-5)
    same = model(n_kv_head=4)  # n_kv_head = n_head is plain multi-head attention
    assert torch.equal(same(x)[0], model()(x)[0])


def test_a_window_as_long_as_the_text_is_full_causal_attention():
    x = torch.randint(61, (2, 12))
    for mode in ("fast", "explain"):
        assert torch.allclose(model(window=12).set_mode(mode)(x)[0], model().set_mode(mode)(x)[0], atol=1e-6)
    short = model(window=3).set_mode("explain")
    with short.capture(["blocks.0.attn.hook_pattern"]) as c:
        short(x)
    p = c["blocks.0.attn.hook_pattern"][0, 0]
    assert float(p[9, :7].sum()) == 0.0 and float(p[9, 7:10].sum()) == pytest.approx(1.0)


def test_one_expert_is_the_dense_ffn():
    moe, dense = model(n_expert=1), model()
    with torch.no_grad():
        for bm, bd in zip(moe.blocks, dense.blocks):
            bm.mlp.experts[0].load_state_dict(bd.mlp.state_dict())
        for name, p in dense.named_parameters():
            if ".mlp." not in name:
                dict(moe.named_parameters())[name].copy_(p)
    x = torch.randint(61, (2, 10))
    assert torch.allclose(moe(x)[0], dense(x)[0], atol=1e-6)
    moe4 = model(n_expert=4, top_k_experts=2).set_mode("explain")
    with moe4.capture(lambda n: "router" in n) as c:
        moe4(x)
    assert c["blocks.0.mlp.hook_router_probs"].shape == (2, 10, 4)
    assert c["blocks.0.mlp.hook_router_choice"].shape == (2, 10, 2)
    assert moe4.aux_loss() is not None and float(moe4.aux_loss().detach()) > 0


def test_gqa_kv_cache_holds_n_kv_heads_and_matches_the_learn_formula():
    m = model(n_kv_head=1)
    cache = KVCache(m.cfg)
    m(torch.randint(61, (1, 9)), kv_cache=cache)
    assert cache.k.shape[2] == 1 and cache.length == 9
    assert cache.numel_used() * 4 == kv_cache_bytes(2, 1, 8, 9, bytes_per_value=4)


@pytest.mark.parametrize("name", list(COMBOS))
def test_fast_and_explain_paths_agree_and_the_cache_changes_nothing(name):
    m = model(**COMBOS[name])
    assert m.num_params() == count_params(m.cfg)["total"]
    x = torch.randint(61, (2, 14))
    fast = m.set_mode("fast")(x)[0]
    explain = m.set_mode("explain")(x)[0]
    assert torch.allclose(fast, explain, atol=1e-5)
    m.set_mode("fast")
    with_cache = m.generate(x[:1, :5], 8, temperature=0.7, seed=3)
    without = m.generate(x[:1, :5], 8, temperature=0.7, seed=3, use_cache=False)
    assert torch.equal(with_cache, without)


# (config, queries T, cached keys before them): one case for each mask the fast path hands SDPA
MASK_CASES = {
    "bert-style": (dict(causal=False, n_kv_head=2), 6, 4, (False, False)),
    "one-new-query": (dict(pos="rope"), 1, 9, (False, False)),
    "square": (dict(n_kv_head=1), 8, 0, (False, True)),
    "chunk-after-a-cache": (dict(pos="rope", n_kv_head=2), 5, 7, (True, False)),
    "window": (dict(window=3), 1, 9, (True, False)),
    "window-square": (dict(window=3, pos="rope"), 8, 0, (True, False)),
}


@pytest.mark.parametrize("name", list(MASK_CASES))
def test_fused_and_explained_attention_agree_for_every_mask(name):
    kw, T, cached, want_mask = MASK_CASES[name]
    attn = model(**kw).blocks[0].attn
    torch.manual_seed(4)
    x = torch.randn(2, T, 32)
    cache = KVCache(attn.cfg, 2)
    cache.k[0].normal_(), cache.v[0].normal_()  # keys and values of `cached` earlier positions
    cache.length = cached
    with torch.no_grad():
        q, k, v = attn.qkv(x, cache.layer(0))
        assert q.shape == (2, 4, T, 8) and k.shape == v.shape == (2, 4, cached + T, 8)  # (B, nh, Tk, hs)
        mask, is_causal = attn.sdpa_mask(T, cached + T, x.device)
        assert (mask is not None, is_causal) == want_mask
        fused, explained = attn.fused(q, k, v), attn.explained(q, k, v)
    assert fused.shape == explained.shape == (2, T, 32)
    torch.testing.assert_close(fused, explained, atol=1e-5, rtol=0)
    if kw.get("causal", True) and (T > 1 or kw.get("window")):  # a mask that hides something ...
        with torch.no_grad():
            unmasked = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(2, T, 32)
        assert (attn.c_proj(unmasked) - fused).abs().max() > 1e-4  # ... changes the output


def test_llama_style_has_gpt2_styles_parameter_count():
    g, li = (count_params(preset_config(n, vocab_size=2048))["total"] for n in ("gpt2-style", "llama-style"))
    assert abs(g - li) / g < 0.002
    cfg = preset_config("llama-style", vocab_size=2048)
    assert (cfg.pos, cfg.norm_type, cfg.mlp, cfg.n_kv_head, cfg.bias) == ("rope", "rmsnorm", "swiglu", 2, False)


@pytest.mark.parametrize(  # "everything" (every new part at once) stays in the fast subset
    "name",
    [
        n if n in ("everything", "nanochat", "gemma2") else pytest.param(n, marks=pytest.mark.slow)
        for n in (
            "llama-like",
            "everything",
            "moe",
            "sandwich",
            "window",
            "nanochat",
            "neox",
            "gemma2",
            "gemma3",
            "olmo2",
        )
    ],
)
def test_checkpoints_of_each_load_and_serve_every_part(name, tmp_path):
    m = model(**COMBOS[name])
    chars = [chr(32 + i) for i in range(61)]  # space to backslash: capitals, digits, punctuation
    ckpt.save(
        tmp_path / name, m, {"name": name, "tokenizer": {"kind": "chars", "chars": chars}, "step": 0, "final": True}
    )
    app = create_app(Settings(checkpoint=tmp_path / name, allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    with TestClient(app) as client:
        text = "HELLO: THE NEW BLOCK!"
        for layer in range(2):
            r = client.post(
                "/api/v1/forward", json={"text": text, "include": list(ALL_PARTS), "layer": layer, "head": 3}
            )
            assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["attention"]["pattern"][0]) == 4
        for path, payload in (
            ("/api/v1/generate/step", {"ids": [5, 6, 7], "step": 0, "seed": 1}),
            ("/api/v1/next-token", {"text": text}),
            ("/api/v1/intervene", {"text": text, "ablate_heads": [{"layer": 1, "head": 2}]}),
        ):
            r = client.post(path, json=payload)
            assert r.status_code == 200, (path, r.text)
        for path in (
            "/api/v1/embeddings/projection",
            "/api/v1/embeddings/positions",
            "/api/v1/heads?ablate=false",
            "/api/v1/health",
        ):
            r = client.get(path)
            assert r.status_code in (200, 409), (path, r.text)
            if r.status_code == 409:  # a model without learned positions has no position table
                assert path.endswith("positions") and "no learned position table" in r.text


@pytest.mark.parametrize(
    "query,want",
    [
        ({"preset": "cpu", "mlp": "swiglu"}, dict(mlp="swiglu")),
        (
            {"preset": "cpu", "n_kv_head": 2, "pos": "rope", "norm_type": "rmsnorm"},
            dict(n_kv_head=2, pos="rope", norm_type="rmsnorm"),
        ),
        (
            {"preset": "cpu", "n_expert": 4, "top_k_experts": 2, "d_mlp": 128},
            dict(n_expert=4, top_k_experts=2, d_mlp=128),
        ),
        ({"preset": "llama-style"}, {}),
    ],
)
def test_the_parameter_counter_takes_the_modern_options(client, query, want):
    body = client.get("/api/v1/params", params=query).json()
    cfg = preset_config(query["preset"], vocab_size=preset_config(query["preset"]).vocab_size, **want)
    assert body["counts"]["total"] == count_params(cfg)["total"]
    assert sum(p["count"] for p in body["parts"]) == body["counts"]["total"]
    assert {k: body["config"][k] for k in want} == want
    r = client.get("/api/v1/params", params={"preset": "cpu", "n_kv_head": 3})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "n_kv_head"]


def test_forward_explains_rope_and_the_experts(tmp_path):
    m = model(pos="rope", n_expert=4, top_k_experts=2, n_kv_head=2)
    chars = [chr(32 + i) for i in range(61)]
    ckpt.save(
        tmp_path / "m", m, {"name": "m", "tokenizer": {"kind": "chars", "chars": chars}, "step": 0, "final": True}
    )
    app = create_app(Settings(checkpoint=tmp_path / "m", allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    with TestClient(app) as client:
        body = client.post(
            "/api/v1/forward",
            json={"text": "TO BE, OR NOT TO BE", "include": ["rope", "moe", "head_detail"], "layer": 1, "head": 3},
        ).json()
    rope, moe = body["rope"], body["moe"]
    assert rope["kv_head"] == 1 and body["head_detail"]["kv_head"] == 1 and body["head_detail"]["rotated"]
    assert rope["distance_check"]["scores_at_start"] == pytest.approx(
        rope["distance_check"]["scores_at_offset"], abs=1e-3
    )
    assert len(rope["angles"]) == 19 and len(rope["angles"][0]) == 4 and rope["angles"][0] == [0.0] * 4
    assert rope["q_rotated"][0] == rope["q"][0]  # position 0 turns by nothing
    for layer in moe["layers"]:
        assert len(layer["probs"]) == 19 and all(abs(sum(row) - 1) < 1e-3 for row in layer["probs"])
        assert all(len(c) == 2 for c in layer["choice"]) and sum(layer["load"]) == pytest.approx(1.0, abs=1e-3)
        top = [sorted(range(4), key=lambda e: -row[e])[:2] for row in layer["probs"]]
        assert [sorted(c) for c in layer["choice"]] == [sorted(t) for t in top]


def test_the_head_detail_masks_the_window(tmp_path):
    m = model(window=3)
    chars = [chr(32 + i) for i in range(61)]
    ckpt.save(
        tmp_path / "w", m, {"name": "w", "tokenizer": {"kind": "chars", "chars": chars}, "step": 0, "final": True}
    )
    app = create_app(Settings(checkpoint=tmp_path / "w", allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    with TestClient(app) as client:
        hd = client.post("/api/v1/forward", json={"text": "ABCDEFGH", "include": ["head_detail"]}).json()["head_detail"]
    assert hd["masked_scores"][6][:4] == [None] * 4 and None not in hd["masked_scores"][6][4:7]


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    p = tmp_path_factory.mktemp("modern") / "story.txt"
    lines = [
        f"The {a} {v} the {b}."
        for a in ("cat", "dog", "king", "fox")
        for v in ("saw", "met", "found")
        for b in ("mat", "river", "crown", "garden")
    ]
    p.write_text("\n".join(lines * 6) + "\n", encoding="utf-8")
    return p


@pytest.mark.parametrize(  # each trains a model: llama-like (most parts at once) stays in the fast subset
    "name", [n if n == "llama-like" else pytest.param(n, marks=pytest.mark.slow) for n in COMBOS]
)
def test_every_combination_trains_and_its_loss_falls(name, story, tmp_path):
    from gptscope.model.train import TrainConfig, train

    over = {k: v for k, v in {**BASE, **COMBOS[name]}.items() if k != "vocab_size"}
    tc = TrainConfig(
        corpus=str(story),
        preset="tiny",
        tokenizer="bpe",
        vocab_size=300,
        batch_size=8,
        seq_len=16,
        warmup_steps=3,
        max_lr=1e-2,
        eval_batches=1,
        device="cpu",
        precision="fp32",
        seed=3,
        optimizer="muon" if name == "everything" else "adamw",
        max_steps=30,
        overrides=over,
    )
    res = train(tc, out=tmp_path / name, progress=False, command="pytest")
    losses = [h["loss"] for h in res.read_history()]
    assert len(losses) == 30 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5, (name, losses[:5], losses[-5:])
    again = ckpt.load(tmp_path / name)  # and the checkpoint loads as the same architecture
    assert again.config.to_dict() == res.model.cfg.to_dict()


# the same attention, fast and explained, with each switch of the families' attention on (issue #45)
SWITCH_CASES = {
    "partial-rotary": dict(pos="rope", rotary_dim=2),
    "score-scale": dict(attn_scale=0.05),
    "softcap-window": dict(attn_softcap=1.5, window=3),
    "qk-norm-all": dict(pos="rope", norm_type="rmsnorm", qk_norm=True, qk_norm_all=True, n_kv_head=2),
}


@pytest.mark.parametrize("name", list(SWITCH_CASES))
def test_the_families_attention_switches_agree_in_both_paths_after_a_cache(name):
    attn = model(**SWITCH_CASES[name]).blocks[0].attn
    torch.manual_seed(4)
    x = torch.randn(2, 5, 32)
    cache = KVCache(attn.cfg, 2)
    cache.k[0].normal_(), cache.v[0].normal_()
    cache.length = 6
    with torch.no_grad():
        q, k, v = attn.qkv(x, cache.layer(0))
        fused, explained = attn.fused(q, k, v), attn.explained(q, k, v)
    torch.testing.assert_close(fused, explained, atol=1e-5, rtol=0)


def test_partial_rotary_turns_only_the_first_channels_and_the_softcap_bounds_the_scores():
    m = model(pos="rope", rotary_dim=4, attn_softcap=1.5, n_layer=1).set_mode("explain")
    with m.capture() as c:
        m(torch.randint(61, (1, 12)))
    q, q_rot = c["blocks.0.attn.hook_q"][0], c["blocks.0.attn.hook_q_rot"][0]  # (T, nh, hs = 8)
    assert torch.equal(q[..., 4:], q_rot[..., 4:]) and not torch.allclose(q[1:, :, :4], q_rot[1:, :, :4])
    assert torch.equal(q[0], q_rot[0])  # position 0 turns by no angle
    capped, raw = c["blocks.0.attn.hook_attn_scores"], c["blocks.0.attn.hook_attn_scores_uncapped"]
    assert capped.abs().max() < 1.5 and torch.allclose(capped, 1.5 * torch.tanh(raw / 1.5))


def test_a_parallel_block_feeds_its_mlp_the_blocks_input():
    m = model(parallel=True, n_layer=1).set_mode("explain")
    with m.capture() as c:
        m(torch.randint(61, (1, 9)))
    b = m.blocks[0]
    x = c["blocks.0.hook_resid_pre"]
    with torch.no_grad():
        torch.testing.assert_close(c["blocks.0.hook_mlp_out"], b.mlp(b.ln2(x)))
    torch.testing.assert_close(
        c["blocks.0.hook_resid_post"], x + c["blocks.0.hook_attn_out"] + c["blocks.0.hook_mlp_out"]
    )
