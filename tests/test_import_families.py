"""The families issue #45 added: GPT-NeoX (Pythia), Gemma 2, Gemma 3 (text), Phi-3 and OLMo 2, imported
through `gptscope import`'s code path and run as their makers run them.

The references are `transformers`' own models (a test extra), built from their configs with random
weights (eager attention), and a byte-level tokenizer.json trained here: nothing is downloaded
(tests/hf_families.py builds them). Each family turns its options on in a tiny model (2-3 layers, width
64), so the logits agree with transformers' to 1e-4 only if every switch is computed, and switching
any one off breaks the agreement. Building transformers' model classes takes seconds (slow)."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from fastapi.testclient import TestClient
from hf_families import ARCHS, PROMPT, build, edit_json, ours, reference_logits
from safetensors.torch import load_file, save_file

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.model.gpt import KVCache, count_params
from gptscope.server.app import create_app
from gptscope.server.cli import main as cli_main
from gptscope.server.config import Settings

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # transformers' model classes take seconds to load


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every family built and imported once: name -> (transformers model, tokenizer, folder, checkpoint, summary)."""
    root = tmp_path_factory.mktemp("families")
    out = {}
    for arch in ARCHS:
        m, tok = build(arch, root / arch)
        dest, summary = importers.import_model(root / arch, arch, root / "data")
        out[arch] = (m, tok, root / arch, dest, summary)
    return out


def prompt_ids(tok) -> list[int]:
    ids = tok.encode(PROMPT, add_special_tokens=False).ids
    assert len(ids) > 10  # longer than every window, so the windows matter
    return ids


@pytest.mark.parametrize("arch", list(ARCHS))
def test_logits_match_transformers_in_both_modes(built, arch):
    m, tok, _folder, dest, summary = built[arch]
    kinds = {"pythia": "gpt-neox", "gemma2": "gemma", "gemma3": "gemma", "llama3": "llama"}
    assert summary["source"] == f"huggingface-{kinds.get(arch, arch)}"
    c = ckpt.load(dest)
    ids = prompt_ids(tok)
    ref = reference_logits(m, ids)
    for mode in ("explain", "fast"):
        c.model.set_mode(mode)
        assert (ours(c.model, ids) - ref).abs().max() < 1e-4, (arch, mode)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_the_kv_cached_step_matches_transformers(built, arch):
    """A prefill, then one token and then two at a time with the KV cache (as generation runs), against
    transformers' logits of the whole text and against transformers' own cached step."""
    m, tok, _f, dest, _s = built[arch]
    c = ckpt.load(dest)
    ids = prompt_ids(tok)
    ref = reference_logits(m, ids)
    T = len(ids)
    with torch.no_grad():
        out = m(torch.tensor([ids[:-1]]), use_cache=True)
        their_step = m(torch.tensor([ids[-1:]]), past_key_values=out.past_key_values, use_cache=True).logits[0, -1]
    assert (their_step - ref[-1]).abs().max() < 1e-4
    for mode in ("explain", "fast"):
        c.model.set_mode(mode)
        cache = KVCache(c.config, 1)
        with torch.no_grad():
            c.model(torch.tensor([ids[: T - 3]]), kv_cache=cache)
            one = c.model(torch.tensor([ids[T - 3 : T - 2]]), kv_cache=cache)[0][0, -1]
            two = c.model(torch.tensor([ids[T - 2 :]]), kv_cache=cache)[0][0]
        assert cache.length == T
        assert (one - ref[T - 3]).abs().max() < 1e-4, (arch, mode)
        assert (two - ref[T - 2 :]).abs().max() < 1e-4, (arch, mode)
        assert (two[-1] - their_step).abs().max() < 1e-4, (arch, mode)


def _blocks(model, **attrs):
    def fn():
        for b in model.blocks:
            for k, v in attrs.items():
                obj = b
                *path, last = k.split(".")
                for p in path:
                    obj = getattr(obj, p)
                setattr(obj, last, v)

    return fn


# (family, what is switched off, how): every switch each family imports
SWITCHES = [
    ("pythia", "parallel", lambda m: _blocks(m, parallel=False)),
    ("pythia", "rotary_dim", lambda m: lambda: setattr(m.cfg, "rotary_dim", 0)),
    ("gemma2", "embed_scale", lambda m: lambda: setattr(m.cfg, "embed_scale", 1.0)),
    ("gemma2", "geglu", lambda m: _blocks(m, **{"mlp.geglu": False})),
    ("gemma2", "sandwich", lambda m: _blocks(m, norm="pre")),
    ("gemma2", "attn_softcap", lambda m: lambda: setattr(m.cfg, "attn_softcap", 0.0)),
    ("gemma2", "attn_scale", lambda m: lambda: setattr(m.cfg, "attn_scale", 0.0)),
    ("gemma2", "softcap", lambda m: lambda: setattr(m.cfg, "softcap", 0.0)),
    ("gemma2", "window_pattern", lambda m: lambda: setattr(m.cfg, "window_pattern", "")),
    ("gemma3", "qk_norm", lambda m: lambda: setattr(m.cfg, "qk_norm", False)),
    ("gemma3", "rope_local_base", lambda m: lambda: setattr(m.cfg, "rope_local_base", 0.0)),
    ("gemma3", "window_last_full", lambda m: lambda: setattr(m.cfg, "window_last_full", True)),
    ("gemma3", "rope_scaling", lambda m: lambda: setattr(m.cfg, "rope_scaling", "none")),
    ("phi3", "rotary_dim", lambda m: lambda: setattr(m.cfg, "rotary_dim", 0)),
    ("phi3", "window", lambda m: lambda: setattr(m.cfg, "window", 0)),
    ("olmo2", "norm out", lambda m: _blocks(m, norm="pre")),
    ("olmo2", "qk_norm", lambda m: lambda: setattr(m.cfg, "qk_norm", False)),
]


@pytest.mark.parametrize("arch,switch,off", SWITCHES, ids=[f"{a}-{s}" for a, s, _ in SWITCHES])
def test_each_option_is_the_one_that_makes_them_agree(built, arch, switch, off):
    """Switching an imported option off breaks the agreement: each test model exercises it."""
    m, tok, _f, dest, _s = built[arch]
    c = ckpt.load(dest)
    c.model.set_mode("explain")
    ids = prompt_ids(tok)
    ref = reference_logits(m, ids)
    assert (ours(c.model, ids) - ref).abs().max() < 1e-4
    off(c.model)()  # one config object (and the blocks' own copies of theirs), shared by every block
    assert (ours(c.model, ids) - ref).abs().max() > 1e-2, (arch, switch)


def test_config_mapping(built):
    cfg = {a: ckpt.load(built[a][3]).config for a in ARCHS}
    p = cfg["pythia"]
    assert (p.parallel, p.rotary_dim, p.norm_type, p.bias, p.tie_weights, p.gelu) == (
        True,
        4,
        "layernorm",
        True,
        False,
        "exact",
    )
    g = cfg["gemma2"]
    assert (g.norm, g.mlp, g.gelu, g.embed_scale, g.attn_softcap, g.softcap) == ("both", "geglu", "tanh", 8.0, 2.0, 3.0)
    assert (g.window, g.window_pattern, g.window_last_full, g.attn_scale) == (5, "SL", False, 24**-0.5)
    g3 = cfg["gemma3"]
    assert (g3.qk_norm, g3.rope_base, g3.rope_local_base, g3.rope_scaling, g3.window_pattern) == (
        True,
        1e6,
        100.0,
        "linear",
        "SL",
    )
    assert g3.attn_scale == 0.0 and g3.softcap == 0.0 and g3.attn_softcap == 0.0  # 24 = head_dim: the usual scale
    ph = cfg["phi3"]
    assert (ph.rotary_dim, ph.window, ph.mlp, ph.norm, ph.parallel) == (8, 6, "swiglu", "pre", False)
    o = cfg["olmo2"]
    assert (o.norm, o.qk_norm, o.qk_norm_all, o.mlp) == ("out", True, True, "swiglu")


@pytest.mark.parametrize("arch", list(ARCHS))
def test_parameter_count_is_the_files_own(built, arch):
    m, _tok, folder, dest, summary = built[arch]
    in_file = sum(t.numel() for t in load_file(str(folder / "model.safetensors")).values())
    assert summary["params"] == in_file == count_params(ckpt.load(dest).config)["total"]
    assert in_file == sum(p.numel() for p in m.parameters())  # transformers' own count (a tied matrix once)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_forward_api_every_part_adds_up(built, arch):
    """Through the API: the next-token logits are transformers', every part is served, the decomposition
    adds up to the logit (the pre-cap logit where Gemma 2 caps it), and the logit lens ends on the
    model's own prediction."""
    m, tok, _folder, dest, _s = built[arch]
    app = create_app(Settings(checkpoint=dest, allow_hosts=["testserver"], data_dir=dest.parent.parent))
    with TestClient(app) as client:
        ids = prompt_ids(tok)
        ref = reference_logits(m, ids)[-1]
        every = client.get("/api/v1/forward/parts").json()
        names = [p["name"] for p in every["parts"] if p["applies"]]
        assert {"rope", "attention", "mlp", "decomposition"} <= set(names), arch
        assert ("block_switches" in names) == (arch != "llama3"), arch
        r = client.post(
            "/api/v1/forward", json={"text": PROMPT, "include": names, "top_k": 20, "layer": 1, "bos": False}
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert [t["id"] for t in body["tokens"]] == ids
        for cand in body["next_token"]:
            assert abs(cand["logit"] - float(ref[cand["id"]])) < 1e-4, (arch, cand)
        d = body["decomposition"]
        assert d["exact"] and abs(d["residual_error"]) < 1e-3, d
        if arch == "gemma2":
            assert d["softcap"] == 3.0 and abs(d["capped_logit"] - float(ref.max())) < 1e-3
        lens = body["logit_lens"]["top"][-1][-1][0]
        assert lens["id"] == int(ref.argmax())
        assert (body["block_switches"] is not None) == (arch != "llama3")
        ta = client.post("/api/v1/token-attribution", json={"ids": ids})
        assert ta.status_code == 200, ta.text  # integrated gradients through every family's block, its error said
        c = ta.json()["rows"][0]["completeness"]
        assert c["relative_error"] is not None and abs(c["attribution_sum"] - c["difference"] - c["error"]) < 1e-4, c
        p = client.get("/api/v1/params", params={"preset": "model"})
        assert p.status_code == 200 and p.json()["counts"]["total"] == sum(x.numel() for x in m.parameters())


# --- refusals ----------------------------------------------------------------------------------------


def _config(key, value):
    return lambda c: c.__setitem__(key, value)


REFUSALS = [
    ("neox-act", "pythia", _config("hidden_act", "relu"), None, "field hidden_act is 'relu'"),
    (
        "neox-unknown",
        "pythia",
        _config("quantization_config", {"bits": 4}),
        None,
        "field quantization_config is not one",
    ),
    (
        "neox-rope",
        "pythia",
        _config("rope_parameters", {"rope_type": "dynamic", "factor": 2.0}),
        None,
        "rope_type is 'dynamic'",
    ),
    (
        "gemma2-bidirectional",
        "gemma2",
        _config("use_bidirectional_attention", True),
        None,
        "use_bidirectional_attention is True",
    ),
    ("gemma2-act", "gemma2", _config("hidden_activation", "silu"), None, "field hidden_activation is 'silu'"),
    (
        "gemma2-layers",
        "gemma2",
        _config("layer_types", ["chunked_attention", "full_attention"]),
        None,
        "field layer_types",
    ),
    (
        "gemma3-attn-cap",
        "gemma3",
        _config("attn_logit_softcapping", 50.0),
        None,
        "field attn_logit_softcapping is 50.0",
    ),
    (
        "gemma3-local-scaled",
        "gemma3",
        _config(
            "rope_parameters",
            {
                "full_attention": {"rope_type": "default", "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "linear", "factor": 2.0},
            },
        ),
        None,
        "rope_parameters.sliding_attention stretches RoPE",
    ),
    ("gemma3-multimodal", "gemma3", _config("model_type", "gemma3"), None, "model_type is 'gemma3'; gptscope imports"),
    (
        "phi3-longrope-incomplete",  # LongRoPE imports (tests/test_import_longrope.py); its factors must be whole
        "phi3",
        _config("rope_parameters", {"rope_type": "longrope", "short_factor": [1.0] * 4}),
        None,
        r"rope_parameters\.short_factor",
    ),
    ("phi3-bias", "phi3", _config("attention_bias", True), None, "field attention_bias is True"),
    ("olmo2-partial", "olmo2", _config("partial_rotary_factor", 0.5), None, "field partial_rotary_factor is not one"),
    ("olmo2-arch", "olmo2", _config("architectures", ["Olmo2ForSequenceClassification"]), None, "field architectures"),
    (
        "neox-missing",
        "pythia",
        None,
        lambda t: t.pop("gpt_neox.layers.1.attention.query_key_value.bias"),
        "tensor gpt_neox.layers.1.attention.query_key_value.bias is missing",
    ),
    (
        "phi3-shape",
        "phi3",
        None,
        lambda t: t.__setitem__("model.layers.0.mlp.gate_up_proj.weight", torch.ones(96, 64)),
        r"gate_up_proj.weight .* has shape \(96, 64\); config.json needs \(192, 64\)",
    ),
    (
        "olmo2-qnorm",
        "olmo2",
        None,
        lambda t: t.__setitem__("model.layers.0.self_attn.q_norm.weight", torch.ones(16)),
        r"q_norm.weight .* has shape \(16,\); config.json needs \(64,\)",
    ),
    (
        "gemma2-extra",
        "gemma2",
        None,
        lambda t: t.__setitem__("model.layers.0.self_attn.q_norm.weight", torch.ones(16)),
        "tensors this config.json does not describe",
    ),
]


@pytest.mark.parametrize("case,arch,edit_cfg,edit_tensors,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_folders_are_refused_by_name_and_leave_nothing(
    built, tmp_path, capsys, case, arch, edit_cfg, edit_tensors, message
):
    bad = tmp_path / case
    shutil.copytree(built[arch][2], bad)
    if edit_cfg:
        edit_json(bad / "config.json", edit_cfg)
    if edit_tensors:
        t = load_file(str(bad / "model.safetensors"))
        edit_tensors(t)
        save_file(t, str(bad / "model.safetensors"))
    assert cli_main(["import", str(bad), "--name", "bad", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err
    models = tmp_path / "data" / "models"
    assert not models.exists() or not list(models.iterdir())


def test_pythias_own_spelling_of_rope_imports_the_same(built, tmp_path):
    """Pythia's files (written by transformers 4.24) name RoPE rotary_emb_base and rotary_pct."""
    m, tok, folder, _d, _s = built["pythia"]
    old = tmp_path / "pythia-4.24"
    shutil.copytree(folder, old)
    edit_json(
        old / "config.json", lambda c: (c.pop("rope_parameters"), c.update(rotary_emb_base=10000, rotary_pct=0.25))
    )
    dest, _ = importers.import_model(old, "old", tmp_path / "data")
    c = ckpt.load(dest)
    assert c.config.rotary_dim == 4
    c.model.set_mode("explain")
    ids = prompt_ids(tok)
    assert (ours(c.model, ids) - reference_logits(m, ids)).abs().max() < 1e-4


def test_gemma3s_older_spelling_of_rope_imports_the_same(built, tmp_path):
    """Gemma 3's files on the Hub (transformers 4.5x) write rope_theta, rope_scaling and rope_local_base_freq."""
    m, tok, folder, _d, _s = built["gemma3"]
    old = tmp_path / "gemma3-4.55"
    shutil.copytree(folder, old)

    def older(c):
        c.pop("rope_parameters")
        c.update(rope_theta=1e6, rope_scaling={"rope_type": "linear", "factor": 2.0}, rope_local_base_freq=100.0)

    edit_json(old / "config.json", older)
    dest, _ = importers.import_model(old, "old", tmp_path / "data")
    c = ckpt.load(dest)
    assert (c.config.rope_base, c.config.rope_local_base, c.config.rope_scaling) == (1e6, 100.0, "linear")
    c.model.set_mode("explain")
    ids = prompt_ids(tok)
    assert (ours(c.model, ids) - reference_logits(m, ids)).abs().max() < 1e-4


def test_a_llama3_folders_prompt_starts_with_its_bos_and_its_chat_renders(built):
    """tokenizer.json's post-processor and tokenizer_config.json, read by the import: the API's prompt is
    what transformers' tokenizer gives the model (BOS first), with its logits; a chat through the template."""
    from hf_families import BOS, LLAMA3_TEMPLATE

    m, tok, _folder, dest, _s = built["llama3"]
    spec = ckpt.load(dest).meta.tokenizer
    assert spec["config"] == {
        "bos_token": BOS,
        "eos_token": "<|eot_id|>",
        "chat_template": LLAMA3_TEMPLATE,
        "model_type": "llama",  # with tokenizer_class, what picks the class transformers 5 runs it as
    }
    app = create_app(Settings(checkpoint=dest, allow_hosts=["testserver"], data_dir=dest.parent.parent))
    with TestClient(app) as client:
        ids = tok.encode(PROMPT).ids  # as the Hugging Face tokenizer gives them to the model
        assert ids[0] == tok.token_to_id(BOS)
        body = client.post("/api/v1/forward", json={"text": PROMPT, "include": ["next_token"]}).json()
        assert [t["id"] for t in body["tokens"]] == ids
        ref = reference_logits(m, ids)[-1]
        assert all(abs(c["logit"] - float(ref[c["id"]])) < 1e-4 for c in body["next_token"])
        chat = [{"role": "user", "content": "To be?"}, {"role": "assistant", "content": "Or not to be."}]
        body = client.post("/api/v1/forward", json={"messages": chat, "include": []}).json()
        assert body["chat_text"].startswith(BOS + "<|start_header_id|>user")
        assert sum(t["special"] for t in body["tokens"]) == 9  # BOS, 2 x (header, header end, eot), assistant's header
