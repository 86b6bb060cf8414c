"""Every checkpoint the import docs name (issue #61), as its makers publish and run it: a tiny random
model of transformers' own config class at the checkpoint's structural settings and published dtype
(tests/checkpoints.py), imported from the config.json save_pretrained writes and from the spelling
the checkpoint is published in. Each matches transformers' float32 forward of the same file to 1e-4
in the logits (both forward modes, a prompt on each side of LongRoPE's original context) and in the
KV-cached steps, and reads the very ids transformers 5's AutoTokenizer gives: `tokenizer(text)`
(with its beginning-of-text token) and `apply_chat_template(..., add_generation_prompt=True)`.
Building transformers' model classes takes seconds (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from checkpoints import CHECKPOINTS, TEXT, build, published, reference
from hf_families import ours, reference_logits
from safetensors.torch import load_file

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.model.gpt import KVCache

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # transformers' model classes take seconds to load


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("checkpoints")


def check_kv_steps(model, ids: list[int], ref: torch.Tensor, cfg) -> None:
    """A prefill, then one token and then two with the KV cache, against transformers' whole text."""
    T = len(ids)
    cache = KVCache(cfg, 1)
    with torch.no_grad():
        model(torch.tensor([ids[: T - 3]]), kv_cache=cache)
        one = model(torch.tensor([ids[T - 3 : T - 2]]), kv_cache=cache)[0][0, -1]
        two = model(torch.tensor([ids[T - 2 :]]), kv_cache=cache)[0][0]
    assert (one - ref[T - 3]).abs().max() < 1e-4
    assert (two - ref[T - 2 :]).abs().max() < 1e-4


def prompts(name: str, ids: list[int]) -> list[list[int]]:
    """The text's ids, and for LongRoPE a prefix within the original context too (both sides of it)."""
    c = CHECKPOINTS[name]
    rope = c.fields.get("rope_parameters") or {}
    if rope.get("rope_type") != "longrope":
        return [ids]
    ctx = c.fields["original_max_position_embeddings"]
    assert len(ids) > ctx + 4
    return [ids[: ctx - 2], ids]


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_a_checkpoint_imports_from_both_spellings_and_runs_as_transformers(root, name):
    c = CHECKPOINTS[name]
    saved, pub = root / name, root / f"{name}-published"
    m = build(name, saved)
    published(name, saved, pub)
    tok = transformers.AutoTokenizer.from_pretrained(saved)
    ids = tok(TEXT).input_ids
    their_pub = reference(pub, type(m).__name__)  # transformers reads the published spelling the same
    for p in prompts(name, ids):
        assert (reference_logits(their_pub, p) - reference_logits(m, p)).abs().max() < 1e-5
    for folder in (saved, pub):
        dest, _ = importers.import_model(folder, folder.name, root / "data")
        model = ckpt.load(dest)
        for p in prompts(name, ids):
            ref = reference_logits(m, p)
            for mode in ("explain", "fast"):
                model.model.set_mode(mode)
                assert (ours(model.model, p) - ref).abs().max() < 1e-4, (folder.name, mode, len(p))
                check_kv_steps(model.model, p, ref, model.config)
    assert {t.dtype for t in load_file(str(saved / "model.safetensors")).values()} == {c.dtype}


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_a_checkpoint_reads_transformers_5s_ids_and_chat_ids(root, name):
    """The prompt's ids (the BOS as the post-processor adds it) and the chat's, exactly as AutoTokenizer."""
    c = CHECKPOINTS[name]
    folder = root / f"{name}-tok"
    if not folder.exists():
        build(name, folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    dest, _ = importers.import_model(folder, folder.name, root / "data")
    enc = ckpt.load(dest).encoding()
    for text in (TEXT, " " + TEXT, "12345\n\n  x"):
        assert enc.bos_ids + enc.encode_ordinary(text) == tok(text).input_ids, (name, text)
    if c.tok.bos:
        assert enc.bos_ids == [tok.convert_tokens_to_ids(c.tok.bos)]
    if c.tok.config.get("chat_template"):
        want = tok.apply_chat_template(c.tok.chat, add_generation_prompt=True, tokenize=True)
        want = want if isinstance(want, list) else want["input_ids"]
        assert enc.encode(enc.render_chat(c.tok.chat), allowed_special="all") == want, name


def test_the_docs_table_names_exactly_the_checkpoints_tested():
    """docs/manual.md's table of checkpoints: its "tested as" column is this module's list."""
    text = (Path(__file__).parent.parent / "docs" / "manual.md").read_text(encoding="utf-8")
    table = text[text.index("**Which checkpoints import.**") : text.index("Fields transformers reads as aliases")]
    rows = [r.split("|") for r in table.splitlines() if r.startswith("| ") and r.count("|") == 6]
    tested = [r[4].strip().strip("`") for r in rows if r[3].strip() == "yes"]
    assert tested == list(CHECKPOINTS)
    assert {r[3].strip() for r in rows} == {"yes", "refused", "Imports?"}


REFUSED = [  # (checkpoint of the table, what its config.json says, what the refusal names)
    ("gemma-3-1b", {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"]}, "gemma3"),
    ("phi-3-mini-4k", {"model_type": "phi3small"}, "phi3small"),
    ("phi-3-mini-4k", {"model_type": "phimoe"}, "phimoe"),
    ("qwen3", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}}, "YaRN"),
]


@pytest.mark.parametrize("name,edit,named", REFUSED, ids=[r[2] for r in REFUSED])
def test_the_refused_rows_are_refused_by_name(root, tmp_path, name, edit, named):
    import json
    import shutil

    src = root / f"{name}-refused-src"
    if not src.exists():
        build(name, src)
    folder = tmp_path / name
    shutil.copytree(src, folder)
    raw = json.loads((folder / "config.json").read_text())
    if "rope_scaling" in edit:
        raw.pop("rope_parameters", None)
    (folder / "config.json").write_text(json.dumps({**raw, **edit}))
    with pytest.raises(importers.ImportFailed, match=named):
        importers.import_model(folder, "x", tmp_path / "data")
    assert not (tmp_path / "data" / "models" / "x").exists()


@pytest.mark.parametrize("name", list(CHECKPOINTS))
def test_a_checkpoint_exports_back_to_its_own_class(root, name):
    """Imported, then exported (model/export_hf.py, its family tried first): the folder is the checkpoint's
    own class, transformers computes it as gptscope does (1e-4), its tokenizer gives the same ids, and
    importing it again gives the very weights."""
    from gptscope.model.export_hf import export_hf

    folder = root / f"{name}-export-src"
    if not folder.exists():
        build(name, folder)
    c = ckpt.load(importers.import_model(folder, folder.name, root / "data")[0])
    out = root / f"{name}-exported"
    info = export_hf(c.model, c.encoding(), out, name, prefer=c.meta.source["model_type"])
    assert info["architecture"] == json.loads((folder / "config.json").read_text())["architectures"][0]
    m = transformers.AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager", dtype=torch.float32).eval()
    ids = transformers.AutoTokenizer.from_pretrained(out)(TEXT).input_ids
    enc = c.encoding()
    assert ids == enc.bos_ids + enc.encode_ordinary(TEXT)
    assert (reference_logits(m, ids) - ours(c.model, ids)).abs().max() < 1e-4
    back = ckpt.load(importers.import_model(out, f"{name}-back", root / "data")[0])
    before, again = c.model.state_dict(), back.model.state_dict()
    assert before.keys() == again.keys() and all(torch.equal(before[k], again[k]) for k in before)
