"""The model at a glance (issue #58): GET /api/v1/architecture from the config, the forward trace's
`overview` part against the model's own activations, its walk's nodes, stages and numbers, and
/next-token's `position`."""

from __future__ import annotations

import pytest
import torch

from gptscope.model import checkpoint as ckpt
from gptscope.model.gpt import GPT, GPTConfig, hook_name, preset_config
from gptscope.server.explain import forward as fwd
from gptscope.server.explain import overview as ov
from gptscope.server.pages import STAGES
from gptscope.server.saes import SAES
from gptscope.server.schemas.forward import ForwardRequest
from gptscope.server.service import ModelService

PROMPT = "ROMEO:\nBut soft, what light through yonder window breaks?"
STAGE_NAMES = {s.name for s in STAGES}
SMALL = dict(vocab_size=61, n_ctx=24, n_layer=2, n_head=4, d_model=32)
TEXT = "HELLO: THE NEW BLOCK!"
KINDS = {  # one tiny model of each switch the diagram draws differently
    "llama": dict(pos="rope", norm_type="rmsnorm", mlp="swiglu", n_kv_head=2, bias=False),
    "neox": dict(pos="rope", rotary_dim=4, parallel=True),
    "sandwich": dict(norm="both"),
    "olmo2": dict(pos="rope", norm_type="rmsnorm", norm="out", mlp="swiglu", bias=False),
    "post": dict(norm="post", pos="none"),
    "moe": dict(n_expert=4, top_k_experts=2),
    "nanochat": {**preset_config("nanochat-tiny").to_dict(), **SMALL, "d_mlp": 128, "window": 6},
    "gemma2": dict(
        pos="rope",
        norm_type="rmsnorm",
        norm="both",
        mlp="geglu",
        n_kv_head=2,
        bias=False,
        embed_scale=32**0.5,
        attn_softcap=2.0,
        softcap=3.0,
        window=5,
        window_pattern="SL",
        window_last_full=False,
    ),
}


def config(kind: str) -> GPTConfig:
    return GPTConfig(**{**SMALL, **KINDS[kind]})


def all_nodes(arch) -> list[dict]:
    """Every node of an /architecture answer (blocks' mixes, norms and sublayers included)."""
    nodes = [*arch["head"], *arch["tail"], *arch["tools"]]
    for b in arch["blocks"]:
        nodes += [b["mix"]] if b["mix"] else []
        for br in (b["attention"], b["mlp"]):
            nodes += [br[f] for f in ("norm_in", "op", "norm_out", "norm_after") if br[f]]
    return nodes


# ---- the architecture -----------------------------------------------------------------------------


def test_the_builtin_models_architecture(client, service):
    arch = client.get("/api/v1/architecture").json()
    cfg, info = service.model.cfg, client.get("/api/v1/health").json()["info"]
    assert arch["family"] == "GPT-2" and arch["params"] == info["params"]
    assert (arch["n_layer"], arch["n_head"], arch["d_model"], arch["d_mlp"]) == (6, 4, 192, 768)
    assert [n["id"] for n in arch["head"]] == ["tokens", "embed", "pos"]
    assert [n["shape"] for n in arch["head"][1:]] == [f"{cfg.vocab_size} × 192", f"{cfg.n_ctx} × 192"]
    assert [n["id"] for n in arch["tail"]] == ["final_norm", "unembed", "probs", "sample"]
    assert "tied" in arch["tail"][1]["note"] and arch["tail"][1]["shape"] == f"192 × {cfg.vocab_size}"
    tools = [n["id"] for n in arch["tools"]]
    assert tools[:4] == ["tool.embedding-space", "tool.intervene", "tool.decomposition", "tool.inputs"]
    assert ("tool.sae-features" in tools) == bool(SAES.listing(service))
    for i, b in enumerate(arch["blocks"]):
        att, mlp = b["attention"], b["mlp"]
        assert b["id"] == f"block.{i}" and not b["parallel"] and b["window"] == 0 and b["rope_base"] is None
        assert att["norm_in"]["id"] == f"block.{i}.ln1" and att["norm_in"]["label"] == "LayerNorm"
        assert mlp["norm_in"]["id"] == f"block.{i}.ln2" and att["norm_out"] is att["norm_after"] is None
        assert att["op"]["shape"] == "4 heads × 48" and "every earlier key" in att["op"]["note"]
        assert (mlp["op"]["label"], mlp["op"]["shape"]) == ("MLP (GELU)", "192 → 768 → 192")
    nodes = all_nodes(arch)
    assert len({n["id"] for n in nodes}) == len(nodes)
    assert {n["stage"] for n in nodes} <= STAGE_NAMES


def norms(branch) -> tuple:
    return tuple(branch[f]["id"] if branch[f] else None for f in ("norm_in", "norm_out", "norm_after"))


def test_the_architecture_follows_the_norms_placement():
    both, out, post = (ov.architecture_of(config(k)).model_dump() for k in ("sandwich", "olmo2", "post"))
    assert norms(both["blocks"][1]["attention"]) == ("block.1.ln1", "block.1.ln1_post", None)
    assert norms(both["blocks"][1]["mlp"]) == ("block.1.ln2", "block.1.ln2_post", None)
    assert norms(out["blocks"][0]["attention"]) == (None, "block.0.ln1", None)
    assert norms(out["blocks"][0]["mlp"]) == (None, "block.0.ln2", None)
    assert norms(post["blocks"][0]["attention"]) == (None, None, "block.0.ln1")
    assert norms(post["blocks"][0]["mlp"]) == (None, None, "block.0.ln2")
    assert [n["id"] for n in post["head"]] == ["tokens", "embed"]  # pos "none": no node
    assert "final_norm" not in [n["id"] for n in post["tail"]] and "final_norm" in [n["id"] for n in out["tail"]]
    assert (both["family"], out["family"], post["family"]) == (
        "GPT-2 with a sandwich norm",
        "OLMo 2",
        "GPT-1 (post-norm)",
    )


def test_the_architecture_of_llama_neox_and_experts():
    llama = ov.architecture_of(config("llama"))
    assert llama.family == "Llama" and llama.n_kv_head == 2
    pos = llama.head[2]
    assert (pos.id, pos.label, pos.stage) == ("pos", "RoPE", "block") and "10,000" in pos.note
    b = llama.blocks[0]
    assert b.attention.op.shape == "4 heads × 8, 2 key/value heads" and "2 query heads share" in b.attention.op.note
    assert b.rope_base == 10000.0 and b.mlp.op.label == "MLP (SwiGLU)" and b.attention.norm_in is not None
    assert b.attention.norm_in.label == "RMSNorm" and b.mlp.op.shape == f"32 → {b.d_mlp} → 32"
    neox = ov.architecture_of(config("neox"))
    assert neox.family == "GPT-NeoX" and all(b.parallel for b in neox.blocks)
    assert "first 4 of each head's 8 channels" in neox.head[2].note
    moe = ov.architecture_of(config("moe"))
    op = moe.blocks[1].mlp.op
    assert (op.kind, op.label, op.stage) == ("experts", "4 experts, top 2", "mlp")
    assert moe.family == "GPT-2 with a mixture of experts" and moe.blocks[0].n_expert == 4
    qwen = ov.architecture_of(config("llama"), {"kind": "huggingface-llama", "model_type": "qwen2"})
    assert qwen.family == "Qwen2"  # the importer's record comes first


def test_the_architecture_of_nanochat_and_gemma2():
    nano = ov.architecture_of(config("nanochat"))
    assert nano.family == "nanochat"
    assert [n.id for n in nano.head] == ["tokens", "embed", "pos", "embed_norm", "smear"]
    assert [n.id for n in nano.tail] == ["backout", "final_norm", "unembed", "softcap", "probs", "sample"]
    assert {n.stage for n in (*nano.head[3:], nano.tail[0])} == {"stream-extras"}
    assert "own matrix" in nano.tail[2].note and "no gain" in nano.head[3].note
    assert [b.window for b in nano.blocks] == [6, 0] and [b.value_embed for b in nano.blocks] == [False, True]
    assert all(b.mix is not None and b.mix.id == f"block.{b.layer}.mix" for b in nano.blocks)
    assert "its last 6 keys" in nano.blocks[0].attention.op.note and nano.blocks[0].mlp.op.label == "MLP (ReLU²)"
    gemma = ov.architecture_of(config("gemma2"))
    assert gemma.family == "Gemma 2" and [b.window for b in gemma.blocks] == [5, 0]
    assert "capped at ±2" in gemma.blocks[0].attention.op.note and gemma.blocks[0].mlp.op.label == "MLP (GeGLU)"
    assert "softcap" in [n.id for n in gemma.tail] and "the square root of 32" in gemma.head[1].note
    assert norms(gemma.blocks[0].attention.model_dump()) == ("block.0.ln1", "block.0.ln1_post", None)


# ---- the overview part ----------------------------------------------------------------------------


def direct(model: GPT, ids: list[int], names: list[str]) -> dict[str, torch.Tensor]:
    with torch.no_grad(), model.capture(names) as c:
        model(torch.tensor([ids]))
    return {k: v[0] for k, v in c.items()}


def head_writes(model: GPT, c: dict[str, torch.Tensor], layer: int, p: int) -> torch.Tensor:
    """(nh, d): each head's z at p times its columns of W_O."""
    cfg = model.cfg
    w_o = model.blocks[layer].attn.c_proj.weight.detach().view(cfg.d_model, cfg.n_head, cfg.d_head)
    return torch.einsum("hs,dhs->hd", c[hook_name("attn.hook_z", layer)][p], w_o)


def check_live(model: GPT, ids: list[int], live: dict, p: int) -> None:
    """The part's numbers against the model's own activations at position p."""
    cfg = model.cfg
    per = ("hook_attn_out", "hook_mlp_out", "hook_resid_post", "attn.hook_z", "attn.hook_pattern")
    c = direct(model, ids, [hook_name(n, li) for li in range(cfg.n_layer) for n in per])
    for li, layer in enumerate(live["layers"]):
        out = c[hook_name("hook_attn_out", li)][p]
        assert layer["attn_write"] == pytest.approx(float(out.norm()), abs=2e-4)
        assert layer["mlp_write"] == pytest.approx(float(c[hook_name("hook_mlp_out", li)][p].norm()), abs=2e-4)
        assert layer["stream"] == pytest.approx(float(c[hook_name("hook_resid_post", li)][p].norm()), abs=2e-4)
        writes = head_writes(model, c, li, p)
        if cfg.norm not in ("both", "out"):  # the heads' writes and W_O's bias add up to attention's output
            bias = model.blocks[li].attn.c_proj.bias
            assert torch.allclose(writes.sum(0) + (0 if bias is None else bias), out, atol=1e-5)
        pattern = c[hook_name("attn.hook_pattern", li)][:, p]
        for h, head in enumerate(layer["heads"]):
            assert head["head"] == h and head["write"] == pytest.approx(float(writes[h].norm()), abs=2e-4)
            assert head["key"] == int(pattern[h].argmax()) and head["weight"] == pytest.approx(
                float(pattern[h].max()), abs=1e-4
            )
        strongest, size = layer["strongest"], writes.norm(dim=-1)
        assert len(strongest) == min(3, cfg.n_head) == len(set(strongest))
        ranked = [float(size[h]) for h in strongest]
        assert ranked == sorted(ranked, reverse=True)
        assert min(ranked) >= max((float(size[h]) for h in range(cfg.n_head) if h not in strongest), default=0.0)


def check_walk(walk: list[dict], arch: dict) -> None:
    ids = {n["id"] for n in all_nodes(arch)} | {b["id"] for b in arch["blocks"]}
    assert 10 <= len(walk) <= 14, [s["node"] for s in walk]
    for step in walk:
        assert step["node"] in ids and step["stage"] in STAGE_NAMES, step
        assert step["title"] and step["caption"].endswith("."), step


def test_the_overview_part_is_the_models_own_numbers(client, service):
    body = client.post(
        "/api/v1/forward", json={"text": PROMPT, "include": ["overview", "next_token"], "position": 5}
    ).json()
    live, T = body["overview"], len(body["tokens"])
    ids = [t["id"] for t in body["tokens"]]
    assert live["position"] == 5 and live["token"] == body["tokens"][5]
    check_live(service.model, ids, live, 5)
    c = direct(service.model, ids, ["blocks.0.hook_resid_pre", "blocks.5.hook_resid_post"])
    assert live["embed"] == pytest.approx(float(c["blocks.0.hook_resid_pre"][5].norm()), abs=2e-4)
    assert live["final"] == pytest.approx(float(c["blocks.5.hook_resid_post"][5].norm()), abs=2e-4)
    assert live["layers"][0]["experts"] is None
    walk = live["walk"]
    check_walk(walk, client.get("/api/v1/architecture").json())
    assert [s["node"] for s in walk[:4]] == ["tokens", "embed", "pos", "block.0"]
    assert f"into {T} tokens" in walk[0]["caption"] and ov.shown(body["tokens"][5]["text"]) in walk[0]["caption"]
    top = body["next_token"][0]
    probs = next(s for s in walk if s["node"] == "probs")["caption"]
    assert ov.shown(top["text"]) in probs and f"{top['prob']:.1%}" in probs
    assert f"length {live['layers'][0]['attn_write']:.2f}" in walk[6]["caption"]
    other = client.post("/api/v1/forward", json={"text": PROMPT, "include": ["overview"], "position": 2}).json()
    assert other["overview"]["position"] == 2 and other["overview"]["layers"] != live["layers"]
    assert other["overview"]["walk"][0]["caption"] != walk[0]["caption"]


@pytest.fixture(scope="module")
def services(tmp_path_factory) -> dict[str, ModelService]:
    """A served tiny model of each kind (no app: the explain functions take the service)."""
    out, chars = {}, [chr(32 + i) for i in range(61)]
    for kind in KINDS:
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(kind)
        model = GPT(config(kind)).eval()
        ckpt.save(folder, model, {"name": kind, "tokenizer": {"kind": "chars", "chars": chars}, "step": 0})
        out[kind] = ModelService(folder)
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_overview_part_of_each_kind(services, kind):
    service = services[kind]
    p = 7
    trace = fwd.forward(service, ForwardRequest(text=TEXT, include=["overview"], position=p))
    live = trace.overview.model_dump()
    ids = [t.id for t in trace.tokens]
    check_live(service.model, ids, live, p)
    last = fwd.forward(service, ForwardRequest(text=TEXT, include=["overview"])).overview  # only the last logits made
    assert last is not None and last.position == len(ids) - 1
    check_live(service.model, ids, last.model_dump(), len(ids) - 1)
    if kind != "post":  # the final norm's divisor, as its hook holds it
        scale = float(direct(service.model, ids, ["ln_final.hook_scale"])["ln_final.hook_scale"][-1, 0])
        assert f"divides it by {scale:.3f}." in next(s.caption for s in last.walk if s.node == "final_norm")
    arch = ov.architecture(service).model_dump()
    check_walk(live["walk"], arch)
    nodes = [s["node"] for s in live["walk"]]
    assert ("final_norm" in nodes) == (kind != "post") and ("pos" in nodes) == (kind != "post")
    assert ("smear" in nodes) == (kind == "nanochat")
    if kind == "moe":
        c = direct(service.model, ids, ["blocks.1.mlp.hook_router_choice"])
        assert live["layers"][1]["experts"] == c["blocks.1.mlp.hook_router_choice"][p].tolist()
        assert "A router chose experts" in live["walk"][7]["caption"]
    if kind in ("gemma2", "nanochat"):
        assert "before the cap" in next(s for s in live["walk"] if s["node"] == "unembed")["caption"]


# ---- /next-token's position -----------------------------------------------------------------------


def test_next_token_at_a_position_is_the_traces_next_token(client, service):
    tokens = client.post("/api/v1/forward", json={"text": PROMPT, "include": []}).json()["tokens"]
    T = len(tokens)
    for p in (0, 4, T - 1):
        trace = client.post(
            "/api/v1/forward", json={"text": PROMPT, "include": ["next_token"], "position": p, "top_k": 5}
        ).json()["next_token"]
        r = client.post("/api/v1/next-token", json={"text": PROMPT, "position": p, "show": 5}).json()
        assert [(c["id"], c["p_raw"]) for c in r["candidates"]] == [(n["id"], n["prob"]) for n in trace], p
    default = client.post("/api/v1/next-token", json={"text": PROMPT, "show": 5, "temperature": 0.7}).json()
    last = client.post("/api/v1/next-token", json={"text": PROMPT, "show": 5, "temperature": 0.7, "position": T - 1})
    assert last.json() == default
    with service.run() as m:  # the last position's numbers as they always were
        logits = m(torch.tensor([[t["id"] for t in tokens]]), last_only=True)[0][0, -1]
    probs = torch.softmax(logits.float(), -1)
    assert [c["p_raw"] for c in default["candidates"]] == [
        round(float(probs[c["id"]]), 6) for c in default["candidates"]
    ]
    r = client.post("/api/v1/next-token", json={"text": PROMPT, "position": T})
    assert r.status_code == 422
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", "position"] and f"0..{T - 1}" in err["msg"]
