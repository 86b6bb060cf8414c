"""Today's open models: Hugging Face folders of the LLaMA family (Llama, Qwen2, Qwen3, Mistral),
imported and explained.

The references are `transformers`' own models (a test extra, never a run-time dependency), built from
their configs with random weights (eager attention), and tokenizer.json files built here with the
`tokenizers` library: nothing is downloaded. The models are tiny (2 layers, width 64), so each test
takes a second or two; building transformers' model classes the first time takes seconds (slow)."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file, save_file

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.model.gpt import count_params
from gptscope.server.app import create_app
from gptscope.server.cli import main as cli_main
from gptscope.server.config import Settings

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

pytestmark = pytest.mark.slow  # transformers' model classes take seconds to load

CORPUS = (
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings "
    "and arrows of outrageous fortune, or to take arms against a sea of troubles. 1 2 3 4 5 6 7 8 9 10. "
) * 8
TEXTS = [
    "To be, or not to be, that is the question:",
    "Hello world!\n\n  indented\ttab 12345 héllo wörld 😀 日本",
    "a<|endoftext|>b <|im_start|>user <tool>x</tool>",
    "",
    " leading space and trailing  ",
]
PROMPT = "To be, or not to be, that is the question: whether 'tis nobler in the mind"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_level_tokenizer(vocab_size: int = 300):
    """A byte-level BPE as Llama 3, SmolLM2 and Qwen ship it: a Split regex, then ByteLevel; special
    tokens and one added token that is not special (as Qwen's <tool_call>)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(ignore_merges=True))
    pattern = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIALS) - 2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer)
    tok.add_tokens(["<tool>", "</tool>"])
    return tok


def sentencepiece_tokenizer(vocab_size: int = 420):
    """SentencePiece-style BPE as Llama 2, TinyLlama and Mistral ship it: "▁" for a space (prepended),
    no pre-tokenizer, byte fallback (<0x00> ... <0xFF>) for characters it lacks."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    specials = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False)
    tok.train_from_iterator([CORPUS], trainer)
    spec = json.loads(tok.to_str())
    spec["model"]["byte_fallback"] = True
    # the byte tokens are vocabulary entries (as in Llama 2's file), not added special tokens
    spec["added_tokens"] = [a for a in spec["added_tokens"] if not a["content"].startswith("<0x")]
    for a in spec["added_tokens"]:
        a["special"] = True
    out = Tokenizer.from_str(json.dumps(spec))
    out.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    return out


# initializer_range 0.1 (not 0.02): logits of order 1, so a 1e-4 agreement says something
SMALL = dict(
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=64,
    initializer_range=0.1,
)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,  # short, so the scaling changes RoPE within a 20-token prompt
    "rope_theta": 500000.0,
}
# name -> (transformers' config and model class names, config fields, the tokenizer)
ARCHS = {
    # Llama 3: GQA, untied, llama3 RoPE scaling, and biases on attention and the MLP
    "llama": (
        "Llama",
        dict(num_key_value_heads=2, rope_parameters=LLAMA3_ROPE, attention_bias=True, mlp_bias=True),
        "byte",
    ),
    # SmolLM2's kind: tied, multi-query here, RoPE written the transformers 4.x way (rope_theta, rope_scaling)
    "smollm": (
        "Llama",
        dict(
            num_key_value_heads=1, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e5}
        ),
        "byte",
    ),
    # Qwen2.5: biases on W_Q, W_K, W_V only; tied; a vocabulary padded beyond its tokenizer's
    "qwen2": ("Qwen2", dict(num_key_value_heads=2, tie_word_embeddings=True, vocab_size=320), "byte"),
    # Qwen3: per-head q/k RMSNorm and a head_dim that is not hidden_size / num_attention_heads
    "qwen3": ("Qwen3", dict(num_key_value_heads=2, head_dim=24), "byte"),
    # Mistral: a sliding window shorter than the prompt, linear RoPE scaling, SentencePiece-style tokens
    "mistral": (
        "Mistral",
        dict(
            num_key_value_heads=2,
            sliding_window=5,
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
            vocab_size=420,
        ),
        "sp",
    ),
}


def build(arch: str, folder: Path, seed: int = 0, dtype=torch.float32):
    """A random transformers model of `arch` saved as the Hub publishes it (config.json,
    model.safetensors, tokenizer.json); returns the model (eager attention, float32)."""
    family, fields, tok_kind = ARCHS[arch]
    tok = byte_level_tokenizer() if tok_kind == "byte" else sentencepiece_tokenizer()
    torch.manual_seed(seed)
    cfg = getattr(transformers, f"{family}Config")(**{"vocab_size": 300, **SMALL, **fields})
    cfg._attn_implementation = "eager"
    m = getattr(transformers, f"{family}ForCausalLM")(cfg).eval()
    with torch.no_grad():  # random norm gains and biases, so a wrong mapping cannot hide
        for name, p in m.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    if dtype != torch.float32:  # the file holds half precision: the reference computes those numbers in float32
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(p.to(dtype).float())
        copy.deepcopy(m).to(dtype).save_pretrained(folder)
    else:
        m.save_pretrained(folder)
    tok.save(str(folder / "tokenizer.json"))
    if arch == "smollm":  # as SmolLM2's own config.json writes RoPE (the transformers 4.x spelling)
        edit_config(folder, lambda c: (c.pop("rope_parameters"), c.update(rope_theta=100000.0, rope_scaling=None)))
    return m, tok


def edit_config(folder: Path, fn) -> None:
    p = folder / "config.json"
    c = json.loads(p.read_text())
    fn(c)
    p.write_text(json.dumps(c))


def reference_logits(m, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return m(torch.tensor([ids])).logits[0]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every architecture built and imported once: name -> (transformers model, tokenizer, folder, checkpoint)."""
    root = tmp_path_factory.mktemp("llama-family")
    out = {}
    for arch in ARCHS:
        folder = root / arch
        m, tok = build(arch, folder)
        dest, summary = importers.import_model(folder, arch, root / "data")
        out[arch] = (m, tok, folder, dest, summary)
    return out


def data_models(data_dir: Path) -> list[str]:
    d = data_dir / "models"
    return sorted(p.name for p in d.iterdir()) if d.is_dir() else []


@pytest.mark.parametrize("arch", list(ARCHS))
def test_logits_match_transformers_in_both_modes(built, arch):
    m, tok, _folder, dest, summary = built[arch]
    assert summary["source"] == "huggingface-llama"
    c = ckpt.load(dest)
    ids = tok.encode(PROMPT, add_special_tokens=False).ids
    assert len(ids) > 10
    ref = reference_logits(m, ids)
    for mode in ("explain", "fast"):
        c.model.set_mode(mode)
        with torch.no_grad():
            ours = c.model(torch.tensor([ids]))[0][0]
        assert (ours - ref).abs().max() < 1e-4, (arch, mode)


def test_each_option_is_the_one_that_makes_them_agree(built):
    """Switching an imported option off breaks the agreement: each test model exercises it."""
    for arch, field, off in (
        ("llama", "rope_scaling", "none"),
        ("mistral", "window", 0),
        ("mistral", "rope_scaling", "none"),
        ("qwen3", "qk_norm", False),
    ):
        m, tok, _f, dest, _s = built[arch]
        c = ckpt.load(dest)
        c.model.set_mode("explain")
        ids = tok.encode(PROMPT, add_special_tokens=False).ids
        setattr(c.model.cfg, field, off)  # one config object, shared by every block
        with torch.no_grad():
            ours = c.model(torch.tensor([ids]))[0][0]
        assert (ours - reference_logits(m, ids)).abs().max() > 1e-2, (arch, field)


def test_config_mapping(built):
    cfg = {a: ckpt.load(built[a][3]).config for a in ARCHS}
    assert (cfg["llama"].rope_scaling, cfg["llama"].rope_factor, cfg["llama"].rope_original_ctx) == ("llama3", 8.0, 16)
    assert cfg["llama"].qkv_bias and cfg["llama"].attn_out_bias and cfg["llama"].mlp_bias
    assert not cfg["llama"].tie_weights and cfg["smollm"].tie_weights and cfg["smollm"].n_kv_head == 1
    assert cfg["smollm"].rope_base == 100000.0 and cfg["smollm"].rope_scaling == "none"
    assert cfg["qwen2"].qkv_bias and not cfg["qwen2"].attn_out_bias and cfg["qwen2"].vocab_size == 320
    assert cfg["qwen3"].qk_norm and cfg["qwen3"].d_head == 24 and cfg["qwen3"].n_head * 24 != cfg["qwen3"].d_model
    assert cfg["mistral"].window == 5 and cfg["mistral"].rope_scaling == "linear"
    for c in cfg.values():
        assert (c.pos, c.norm_type, c.mlp, c.bias, c.n_ctx) == ("rope", "rmsnorm", "swiglu", False, 64)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_parameter_count_is_the_files_own(built, arch):
    m, _tok, folder, dest, summary = built[arch]
    in_file = sum(t.numel() for t in load_file(str(folder / "model.safetensors")).values())
    assert summary["params"] == in_file == count_params(ckpt.load(dest).config)["total"]
    assert in_file == sum(p.numel() for p in m.parameters())  # transformers' own count (a tied matrix once)


def test_forward_api_logits_pages_and_params(built):
    """Through the API: the next-token logits equal transformers' (rounded to 4 decimals), the
    trace's parts and /params for the imported config work, on every architecture."""
    for arch in ARCHS:
        m, tok, _folder, dest, _s = built[arch]
        app = create_app(Settings(checkpoint=dest, allow_hosts=["testserver"], data_dir=dest.parent.parent))
        with TestClient(app) as client:
            ids = tok.encode(PROMPT, add_special_tokens=False).ids
            ref = reference_logits(m, ids)[-1]
            r = client.post("/api/v1/forward", json={"text": PROMPT, "include": ["next_token"], "top_k": 20})
            assert r.status_code == 200, r.text
            body = r.json()
            assert [t["id"] for t in body["tokens"]] == ids
            for cand in body["next_token"]:
                assert abs(cand["logit"] - float(ref[cand["id"]])) < 1e-4, (arch, cand)
            assert [c["id"] for c in body["next_token"]] == torch.topk(ref, 20).indices.tolist()
            every = client.get("/api/v1/forward/parts").json()
            names = [p["name"] for p in every["parts"] if p["applies"]]
            assert {"rope", "attention", "mlp", "decomposition"} <= set(names), arch
            r = client.post("/api/v1/forward", json={"text": PROMPT, "include": names})
            assert r.status_code == 200, (arch, r.text)
            p = client.get("/api/v1/params", params={"preset": "model"})
            assert p.status_code == 200 and p.json()["counts"]["total"] == sum(x.numel() for x in m.parameters())


# --- the tokenizer ------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["smollm", "mistral"])  # byte-level BPE; SentencePiece-style with byte fallback
def test_tokenize_gives_tokenizers_own_ids(built, arch):
    _m, tok, _folder, dest, _s = built[arch]
    plain = tokenizers.Tokenizer.from_str(tok.to_str())
    plain.encode_special_tokens = True  # special tokens written in the text stay text
    app = create_app(Settings(checkpoint=dest, allow_hosts=["testserver"], data_dir=dest.parent.parent))
    with TestClient(app) as client:
        for text in TEXTS:
            for allow, ref in ((False, plain), (True, tok)):
                r = client.post("/api/v1/tokenize", json={"text": text, "encoding": "model", "allow_special": allow})
                assert r.status_code == 200, r.text
                got = r.json()["tokens"]
                want = ref.encode(text, add_special_tokens=False)
                assert [t["id"] for t in got] == want.ids, (text, allow)
                assert [(t["start"], t["end"]) for t in got] == [tuple(o) for o in want.offsets]
                specials = [t["text"] for t in got if t["special"]]
                assert specials == ([s for s in SPECIALS if s in text and arch == "smollm"] if allow else []), text
                if not text:
                    continue  # the merge walk needs a text
                # the merge walk ends in the same ids
                w = client.post(
                    "/api/v1/tokenize/merges", json={"text": text, "encoding": "model", "allow_special": allow}
                )
                assert w.status_code == 200, w.text
                walked = [t["id"] for p in w.json()["pretokens"] for t in p["tokens"]]
                assert walked == want.ids, (text, allow)
        enc = next(e for e in client.get("/api/v1/encodings").json()["encodings"] if e["name"] == "model")
        vocab = tok.get_vocab(with_added_tokens=True)
        assert enc["vocab_size"] == max(vocab.values()) + 1
        assert enc["vocab_size"] == enc["mergeable_tokens"] + len(enc["special_tokens"]) + enc["unassigned_ids"]
        merged = next(i for t, i in sorted(vocab.items(), key=lambda x: -x[1]) if len(t) > 2 and not t.startswith("<"))
        info = client.get(f"/api/v1/tokens/model/{merged}").json()
        assert info["merged_from"] and len(info["merged_from"]) == 2
        cmp = client.post("/api/v1/tokenize/compare", json={"text": TEXTS[1]})
        assert cmp.status_code == 200
        row = next(e for e in cmp.json()["encodings"] if e["encoding"] == "model")
        assert row["counts"]["tokens"] == len(plain.encode(TEXTS[1], add_special_tokens=False).ids)


def test_a_longer_walk_matches_tokenizers(built):
    """The merge walk's final ids equal tokenizers' own, piece by piece, over a whole text."""
    from gptscope.model.tokenizers import HFEncoding

    for arch in ("smollm", "mistral"):
        tok = built[arch][1]
        enc = HFEncoding(tok.to_str())
        for line in CORPUS.split(". ")[:6] + TEXTS:
            ids = []
            for a, b, piece in enc.pretokenize(line, allow_special=False):
                if piece is None:  # an added token that is not special (<tool>), matched whole
                    ids.append(enc.added[line[a:b]])
                else:
                    ids += [enc.vocab[s] for s in enc.merge_walk(piece)[2]]
            plain = tokenizers.Tokenizer.from_str(tok.to_str())
            plain.encode_special_tokens = True
            assert ids == plain.encode(line, add_special_tokens=False).ids, (arch, line)


# --- storage -------------------------------------------------------------------------------------


def test_sharded_folder_and_bf16_weights(tmp_path):
    """model.safetensors.index.json's shards import like one file; bfloat16 weights stay bfloat16 on
    disk and are computed in float32 (the same logits as transformers' model in float32)."""
    m, tok = build("qwen2", tmp_path / "src", dtype=torch.bfloat16)
    tensors = load_file(str(tmp_path / "src" / "model.safetensors"))
    shard = tmp_path / "sharded"
    shard.mkdir()
    names = sorted(tensors)
    half = len(names) // 2
    wmap = {}
    for i, part in enumerate((names[:half], names[half:])):
        fname = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({k: tensors[k] for k in part}, str(shard / fname))
        wmap.update(dict.fromkeys(part, fname))
    (shard / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wmap}))
    for f in ("config.json", "tokenizer.json"):
        shutil.copy(tmp_path / "src" / f, shard / f)
    dest, summary = importers.import_model(shard, "sharded", tmp_path / "data")
    c = ckpt.load(dest)
    stored = load_file(str(dest / c.meta.weights))
    assert {t.dtype for t in stored.values()} == {torch.bfloat16}
    assert all(p.dtype == torch.float32 for p in c.model.parameters())
    c.model.set_mode("explain")
    ids = tok.encode(PROMPT, add_special_tokens=False).ids
    assert (c.model(torch.tensor([ids]))[0][0] - reference_logits(m, ids)).abs().max() < 1e-4
    assert summary["params"] == sum(t.numel() for t in tensors.values())


# --- refusals ----------------------------------------------------------------------------------------


def _config(key, value):
    return lambda c: c.__setitem__(key, value)


REFUSALS = [
    ("unknown", "llama", _config("quantization_config", {"bits": 4}), None, "field quantization_config is not one"),
    ("act", "llama", _config("hidden_act", "gelu"), None, "field hidden_act is 'gelu'"),
    (
        "yarn",
        "llama",
        _config("rope_parameters", {"rope_type": "yarn", "factor": 4.0}),
        None,
        r"rope_parameters\.rope_type is 'yarn'",
    ),
    (
        "rope-key",
        "llama",
        _config("rope_parameters", {"rope_type": "default", "beta_fast": 32}),
        None,
        r"rope_parameters\.beta_fast",
    ),
    ("partial", "llama", _config("partial_rotary_factor", 0.5), None, "partial_rotary_factor is 0.5"),
    ("interleaved", "smollm", _config("rope_interleaved", True), None, "field rope_interleaved is True"),
    ("qwen-window", "qwen2", _config("use_sliding_window", True), None, "field use_sliding_window is true"),
    (
        "layer-types",
        "qwen3",
        _config("layer_types", ["full_attention", "sliding_attention"]),
        None,
        "field layer_types",
    ),
    ("mlp-bias-qwen", "qwen2", _config("mlp_bias", True), None, "field mlp_bias is not one gptscope reads for a qwen2"),
    (
        "architecture",
        "llama",
        _config("architectures", ["LlamaForSequenceClassification"]),
        None,
        "field architectures",
    ),
    ("eps", "llama", _config("rms_norm_eps", -1), None, "field rms_norm_eps is -1"),
    ("window", "mistral", _config("sliding_window", 0), None, "field sliding_window is 0"),
    (
        "missing",
        "llama",
        None,
        lambda t: t.pop("model.layers.1.mlp.up_proj.weight"),
        "tensor model.layers.1.mlp.up_proj.weight is missing",
    ),
    (
        "shape",
        "qwen3",
        None,
        lambda t: t.__setitem__("model.layers.0.self_attn.q_norm.weight", torch.ones(16)),
        r"q_norm.weight .* has shape \(16,\); config.json needs \(24,\)",
    ),
    (
        "extra",
        "llama",
        None,
        lambda t: t.__setitem__("model.layers.2.mlp.up_proj.weight", torch.ones(2, 2)),
        "tensors this config.json does not describe",
    ),
    (
        "untied",
        "smollm",
        None,
        lambda t: t.__setitem__("lm_head.weight", torch.zeros(300, 64)),
        "lm_head.weight differs",
    ),
    ("vocab", "llama", _config("vocab_size", 100), None, "tokenizer.json has token ids up to"),
]


@pytest.mark.parametrize("case,arch,edit_cfg,edit_tensors,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_bad_folders_are_refused_by_name_and_leave_nothing(
    built, tmp_path, capsys, case, arch, edit_cfg, edit_tensors, message
):
    src = built[arch][2]
    bad = tmp_path / case
    shutil.copytree(src, bad)
    if edit_cfg:
        edit_config(bad, edit_cfg)
    if edit_tensors:
        t = load_file(str(bad / "model.safetensors"))
        edit_tensors(t)
        save_file(t, str(bad / "model.safetensors"))
    assert cli_main(["import", str(bad), "--name", "bad", "--data-dir", str(tmp_path / "data")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err
    assert data_models(tmp_path / "data") == []
    assert not list((tmp_path / "data").glob("models/.*")) if (tmp_path / "data").exists() else True


@pytest.mark.parametrize("name", ["chat_template.jinja", "tokenizer.json", "config.json", "model.safetensors"])
def test_a_file_linked_to_outside_the_folder_is_refused_and_never_read(built, tmp_path, name):
    """A hostile folder's files may be links: chat_template.jinja linked to a secret elsewhere was read at
    import and its text shown in every chat's chat_text. A link out of the folder is refused by name;
    the file it points to is never read."""
    bad = tmp_path / "linked"
    shutil.copytree(built["llama"][2], bad)
    secret = tmp_path / "elsewhere" / name
    secret.parent.mkdir()
    if name == "chat_template.jinja":
        secret.write_text("SECRET {{ messages }}", encoding="utf-8")
    else:
        shutil.copy(bad / name, secret)
        (bad / name).unlink()
    (bad / name).unlink(missing_ok=True)
    (bad / name).symlink_to(secret)
    with pytest.raises(
        importers.ImportFailed, match=rf"{re.escape(name)} in .* is a link to .*outside the model folder"
    ):
        importers.import_model(bad, "linked", tmp_path / "data")
    assert data_models(tmp_path / "data") == []


def test_a_hugging_face_cache_snapshot_imports_through_its_links(built, tmp_path):
    """The Hugging Face cache keeps a snapshot's files as links into the repository's blobs
    (snapshots/<rev>/<file> -> ../../blobs/<hash>): those links are followed, and a loop of links is
    refused by name."""
    repo = tmp_path / "models--org--tiny"
    snap, blobs = repo / "snapshots" / "0123abc", repo / "blobs"
    snap.mkdir(parents=True)
    blobs.mkdir()
    for i, f in enumerate(sorted(p for p in built["llama"][2].iterdir() if p.is_file())):
        shutil.copy(f, blobs / f"blob{i}")
        (snap / f.name).symlink_to(Path("..") / ".." / "blobs" / f"blob{i}")
    dest, _ = importers.import_model(snap, "cached", tmp_path / "data")
    assert data_models(tmp_path / "data") == ["cached"]
    weights = lambda folder: sorted(p.name for p in folder.glob("weights-*.safetensors"))  # noqa: E731 (named by their hash)
    assert weights(dest) == weights(built["llama"][3])  # the same tensors as the plain folder's import
    (snap / "config.json").unlink()
    (snap / "config.json").symlink_to(snap / "config.json")  # a link to itself
    with pytest.raises(importers.ImportFailed, match=r"config\.json"):
        importers.import_model(snap, "loop", tmp_path / "data")


def test_a_tokenizer_that_panics_on_a_text_is_a_422_naming_it(built, tmp_path):
    """A tokenizer.json Split regex that backtracks ((a|aa)+$) makes the Rust tokenizer panic on a long
    run of a's: pyo3's PanicException is no Exception, and the answer was a text/plain 500. Now every
    endpoint that reads the text answers a JSON 422 naming the tokenizer, and the server goes on."""
    folder = tmp_path / "panics"
    shutil.copytree(built["smollm"][2], folder)
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    split = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": False}
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, spec["pre_tokenizer"]]}
    (folder / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    dest, _ = importers.import_model(folder, "panics", tmp_path / "data")  # its sample text is harmless
    app = create_app(Settings(checkpoint=dest, allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    hostile = "a" * 60 + "b"
    with TestClient(app, raise_server_exceptions=False) as client:
        for path, body in (
            ("/api/v1/forward", {"text": hostile}),
            ("/api/v1/tokenize", {"text": hostile, "encoding": "model"}),
            ("/api/v1/next-token", {"text": hostile}),
        ):
            r = client.post(path, json=body)
            assert r.status_code == 422 and r.headers["content-type"].startswith("application/json"), (path, r.text)
            assert "tokenizer.json" in r.json()["detail"][0]["msg"], (path, r.json())
        assert client.post("/api/v1/forward", json={"text": "ROMEO: But soft"}).status_code == 200


def test_a_folder_without_tokenizer_json_is_refused(built, tmp_path):
    bad = tmp_path / "notok"
    shutil.copytree(built["llama"][2], bad)
    (bad / "tokenizer.json").unlink()
    with pytest.raises(importers.ImportFailed, match=r"has no tokenizer\.json"):
        importers.import_model(bad, "notok", tmp_path / "data")
    assert data_models(tmp_path / "data") == []
