"""nanochat checkpoints, imported and checked against nanochat's own GPT.

nanochat's code is on no package registry (PyPI's `nanochat` holds only its rustbpe tokenizer
trainer), so CI cannot run it. The references are instead files that nanochat's own code wrote, one
folder per supported commit in tests/data/nanochat/<commit>/ (tests/nanochat_reference.py made them,
from a checkout of karpathy/nanochat at that commit): a tiny checkpoint of random weights written by its
save_checkpoint and RustBPETokenizer.save, and the logits its GPT (loaded by its build_model) computed
for a 200-token prompt and at each step of its KV-cached decoding. With GPTSCOPE_NANOCHAT=PATH (a
checkout; several as COMMIT=PATH,COMMIT=PATH) the same check runs live on nanochat's code as well;
without it that one test is skipped and says why."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.model.gpt import KVCache
from gptscope.model.importers import nanochat
from gptscope.model.tokenizers import encoding_from_spec
from gptscope.server.cli import main as cli_main

DATA = Path(__file__).parent / "data" / "nanochat"
TOL = 1e-4


def imported(folder: Path, tmp_path: Path, name: str = "nc", **kw) -> ckpt.Checkpoint:
    """`gptscope import FOLDER`, then the stored checkpoint as the app loads it."""
    args = ["import", str(folder), "--name", name, "--data-dir", str(tmp_path / "data")]
    for k, v in kw.items():
        args += [f"--{k}", str(v)]
    assert cli_main(args) == 0
    return ckpt.load(tmp_path / "data" / "models" / name)


def check_parity(model: torch.nn.Module, ref: dict[str, torch.Tensor]) -> dict[str, float]:
    """The largest differences from nanochat's logits: the prompt's (fast and explain mode) and
    KV-cached decoding's (a prefill, then one token at a time)."""
    ids = ref["ids"][None]
    model.eval()
    out = {}
    with torch.no_grad():
        for mode in ("fast", "explain"):
            model.set_mode(mode)
            logits = model(ids)[0][0, ref["positions"]]
            out[mode] = float((logits - ref["logits"]).abs().max())
        model.set_mode("fast")
        prefix = ids.size(1) - (ref["kv_logits"].size(0) - 1)
        cache = KVCache(model.cfg, 1)
        steps = [model(ids[:, :prefix], kv_cache=cache, last_only=True)[0][0, -1]]
        steps += [model(ids[:, t : t + 1], kv_cache=cache)[0][0, -1] for t in range(prefix, ids.size(1))]
        out["kv"] = float((torch.stack(steps) - ref["kv_logits"]).abs().max())
    return out


@pytest.mark.parametrize("commit", nanochat.SUPPORTED)
def test_nanochats_own_checkpoint_imports_and_matches_its_logits(commit, tmp_path):
    folder = DATA / commit
    ck = imported(folder, tmp_path)
    ref = load_file(str(folder / "reference.safetensors"))
    diffs = check_parity(ck.model, ref)
    assert max(diffs.values()) < TOL, diffs
    assert float(ref["logits"].abs().max()) > 10  # the softcap's tanh is well past linear here
    cfg = ck.model.cfg
    assert (cfg.smear, cfg.x0_mix, cfg.backout, cfg.value_embed, cfg.softcap) == (24, True, True, 12, 15.0)
    assert (cfg.window, cfg.window_pattern, cfg.rope_sign, cfg.tie_weights) == (129, "SSSL", -1, False)
    src = ck.meta.source or {}
    assert src["kind"] == "nanochat" and "bfloat16" in src["dtypes"]  # wte and the value embeddings
    # the tokenizer nanochat saved, rebuilt from its data: the same ids as nanochat's tiktoken Encoding
    enc = encoding_from_spec(ck.meta.tokenizer or {})
    text = "To be, or not to be, that is the question:"
    assert enc.encode_ordinary(text) == ref["ids"][1:].tolist()[: len(enc.encode_ordinary(text))]
    assert enc.encode("<|bos|>", allowed_special="all") == [int(ref["ids"][0])]


def test_a_compiled_models_prefix_is_dropped(tmp_path):
    folder = shutil.copytree(DATA / "92d63d4", tmp_path / "run")
    sd = torch.load(folder / "model_000000.pt", weights_only=True)
    torch.save({f"_orig_mod.{k}": v for k, v in sd.items()}, folder / "model_000000.pt")
    ck = imported(folder, tmp_path)
    assert max(check_parity(ck.model, load_file(str(folder / "reference.safetensors"))).values()) < TOL


def test_the_tokenizer_is_found_where_nanochat_keeps_it(tmp_path):
    """<base dir>/base_checkpoints/<tag>/model_*.pt with <base dir>/tokenizer/tokenizer.pkl, or --tokenizer."""
    base = tmp_path / "base"
    run = base / "base_checkpoints" / "d4"
    run.mkdir(parents=True)
    for f in ("model_000000.pt", "meta_000000.json"):
        shutil.copy(DATA / "92d63d4" / f, run / f)
    shutil.copytree(DATA / "92d63d4" / "tokenizer", base / "tokenizer")
    imported(run / "model_000000.pt", tmp_path, "by-file")
    moved = shutil.move(base / "tokenizer", tmp_path / "elsewhere")
    with pytest.raises(importers.ImportFailed, match="pass --tokenizer"):
        importers.convert(run)
    imported(run, tmp_path, "given", tokenizer=Path(moved) / "tokenizer.pkl")


def _copy(tmp_path: Path) -> Path:
    return shutil.copytree(DATA / "92d63d4", tmp_path / "run")


def _edit_meta(folder: Path, **changes) -> None:
    import json

    meta = json.loads((folder / "meta_000000.json").read_text())
    for k, v in changes.items():
        if v is None:
            meta["model_config"].pop(k)
        else:
            meta["model_config"][k] = v
    (folder / "meta_000000.json").write_text(json.dumps(meta))


def _edit_tensors(folder: Path, fn) -> None:
    sd = torch.load(folder / "model_000000.pt", weights_only=True)
    fn(sd)
    torch.save(sd, folder / "model_000000.pt")


@pytest.mark.parametrize(
    ("meta", "tensors", "message"),
    [
        ({"use_engram": True}, None, "field model_config.use_engram is not one gptscope knows"),
        ({"window_pattern": None}, None, "lacks model_config.window_pattern"),
        ({"window_pattern": "SXL"}, None, "model_config.window_pattern is 'SXL'"),
        ({"n_embd": 26}, None, "model_config.n_embd is 26"),
        (
            {},
            lambda sd: sd.update({"engram.weight": torch.zeros(3)}),
            "tensor engram.weight in model_000000.pt is not one",
        ),
        ({}, lambda sd: sd.pop("smear_lambda"), "tensor smear_lambda is missing from model_000000.pt"),
        (
            {},
            lambda sd: sd.update({"x0_lambdas": torch.zeros(5)}),
            r"tensor x0_lambdas in model_000000.pt has shape \(5,\)",
        ),
        ({}, lambda sd: sd["lm_head.weight"].fill_(float("nan")), "tensor lm_head.weight in model_000000.pt holds NaN"),
        ({"vocab_size": 300}, None, "has 289 tokens but meta's model_config vocab_size is 300"),
    ],
)
def test_an_unknown_or_broken_checkpoint_is_refused_by_name(tmp_path, capsys, meta, tensors, message):
    folder = _copy(tmp_path)
    _edit_meta(folder, **meta)
    if tensors:
        _edit_tensors(folder, tensors)
    with pytest.raises(importers.ImportFailed, match=message):
        importers.convert(folder)
    assert cli_main(["import", str(folder), "--name", "x", "--data-dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "gptscope import:" in err or "error" in err.lower()
    assert not (tmp_path / "d" / "models" / "x").exists()


class _Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/gptscope-nanochat-pwned",))


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (_Boom(), "refused to load posix.system"),
        ({"name": "x"}, "does not hold a tiktoken Encoding"),
    ],
)
def test_a_tokenizer_pickle_that_runs_code_is_refused(tmp_path, payload, message):
    folder = _copy(tmp_path)
    (folder / "tokenizer" / "tokenizer.pkl").write_bytes(pickle.dumps(payload))
    with pytest.raises(importers.ImportFailed, match=message):
        importers.convert(folder)
    assert not Path("/tmp/gptscope-nanochat-pwned").exists()


def test_a_tokenizer_state_that_is_not_bpe_is_refused(tmp_path):
    """Only the data that rebuilds an Encoding is read, and checked: ranks that are not merges are refused."""
    import tiktoken

    folder = _copy(tmp_path)
    ranks = {bytes([i]): i for i in range(256)} | {b"xyz": 256}  # "xyz" is no merge of two earlier tokens
    enc = tiktoken.Encoding(name="odd", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={})
    (folder / "tokenizer" / "tokenizer.pkl").write_bytes(pickle.dumps(enc))
    with pytest.raises(importers.ImportFailed, match=r"token b'xyz' \(rank 256\) is not the merge"):
        importers.convert(folder)


def test_a_checkpoint_that_is_not_a_state_dict_is_refused_without_running(tmp_path):
    folder = _copy(tmp_path)
    (folder / "model_000000.pt").write_bytes(pickle.dumps(_Boom()))
    with pytest.raises(importers.ImportFailed, match="refused without running"):
        importers.convert(folder)
    assert not Path("/tmp/gptscope-nanochat-pwned").exists()


def _live_checkouts() -> list[tuple[str, Path]]:
    given = os.environ.get("GPTSCOPE_NANOCHAT", "")
    out = []
    for item in filter(None, given.split(",")):
        commit, _, path = item.rpartition("=")
        out.append((commit or Path(path).name, Path(path)))
    return out


@pytest.mark.slow  # imports nanochat's modules and writes a checkpoint with them
@pytest.mark.skipif(
    not _live_checkouts(),
    reason="nanochat's code is on no package registry: set GPTSCOPE_NANOCHAT to a checkout of "
    "karpathy/nanochat (COMMIT=PATH,...) to check the import live; the files it wrote are checked above",
)
def test_live_against_nanochats_own_code(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import nanochat_reference

    for commit, path in _live_checkouts():
        for seed in (0, 1, 2):
            out = tmp_path / f"{commit}-{seed}"
            ref = nanochat_reference.write(nanochat_reference.load(path), out, seed)
            ck = imported(out, tmp_path, f"live-{commit}-{seed}")
            diffs = check_parity(ck.model, ref)
            assert max(diffs.values()) < TOL, (commit, seed, diffs)


def test_every_view_of_the_imported_model_adds_up(tmp_path):
    """The logit lens ends on the model's own prediction (after the backout, capped), the decomposition
    splits the logit before the cap exactly and shows the cap, and nanochat's stages carry its numbers."""
    from fastapi.testclient import TestClient

    from gptscope.server.app import create_app
    from gptscope.server.config import Settings

    ck = imported(DATA / "92d63d4", tmp_path)
    app = create_app(Settings(checkpoint=ck.path, allow_hosts=["testserver"], data_dir=tmp_path / "data"))
    parts = ["logit_lens", "next_token", "decomposition", "stream_extras", "residual"]
    with TestClient(app) as client:
        info = client.get("/api/v1/health").json()["info"]
        assert info["source"] == "nanochat" and info["extras"] == [
            "smear",
            "x0_mix",
            "value_embed",
            "backout",
            "softcap",
        ]
        body = client.post("/api/v1/forward", json={"text": "To be, or not to be, that", "include": parts}).json()
        for r in [
            client.post(p, json={"text": "To be, or not", "corrupted": "To be, or yes"})
            for p in ("/api/v1/patch", "/api/v1/circuits")
        ]:
            assert r.status_code == 422 and "nanochat's block" in r.text
    d, top, lens = body["decomposition"], body["next_token"][0], body["logit_lens"]
    assert abs(d["residual_error"]) < 1e-4 and d["exact"] and d["softcap"] == 15.0
    assert d["target_id"] == top["id"] and abs(d["capped_logit"] - top["logit"]) < 1e-3
    assert abs(15 * torch.tanh(torch.tensor(d["logit"] / 15)).item() - d["capped_logit"]) < 1e-4
    assert [c["name"] for c in d["contributions"][:2]] == ["embed", "smear"]
    assert lens["stages"][-1] == "backout" and body["residual"]["stages"] == lens["stages"]
    last = lens["top"][-1][body["position"]][0]
    assert last["id"] == top["id"] and abs(last["prob"] - top["prob"]) < 1e-4
    x = body["stream_extras"]
    assert x["smear"]["gate"][0] == 0 and len(x["mixing"]) == 4 and [v["layer"] for v in x["value_embeds"]] == [1, 3]
    assert x["backout"]["layer"] == 2 and x["softcap"]["cap"] == 15.0
