"""Hostile model folders (issue #59): sizes in a config that the weights do not hold, a missing
embedding, and every other way an import can fail, each refused by name at once.

A 1 KB config.json naming a million layers cost 2.6-5.7 GB and 15-58 s before the refusal (the name
map of every layer was made before a tensor was looked at; GPT-2 built its model for real and ended in
a MemoryError or the allocator's RuntimeError). Now each size is checked against the tensors' shapes,
read from the safetensors headers before anything of that size is made. Each refusal here is timed
and its peak memory measured (the process's high-water mark, reset first), and each unedited folder
imports, so a refusal is the edit's doing. The folders are tiny random models that `transformers`
builds offline (tests/hf_families.py) and nanochat's own checkpoint in tests/data/nanochat/."""

from __future__ import annotations

import json
import re
import resource
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from gptscope.model import checkpoint as ckpt
from gptscope.model import importers
from gptscope.server.cli import main as cli_main

NANOCHAT = Path(__file__).parent / "data" / "nanochat" / "92d63d4"
MILLION = 1_000_000
MAX_SECONDS, MAX_MB = 2.0, 200  # a refusal's time and the growth of the process's peak memory
CLEAR_REFS = Path("/proc/self/clear_refs")

# kind -> (its config file, the field holding its layers, its width, the embedding as the file names it
# and as messages name it, how the weights file is called in messages, the layers' names)
KINDS = {
    "llama": ("config.json", "num_hidden_layers", "hidden_size", "model.embed_tokens.weight", "model.layers."),
    "pythia": ("config.json", "num_hidden_layers", "hidden_size", "gpt_neox.embed_in.weight", "gpt_neox.layers."),
    "phi3": ("config.json", "num_hidden_layers", "hidden_size", "model.embed_tokens.weight", "model.layers."),
    "gemma2": ("config.json", "num_hidden_layers", "hidden_size", "model.embed_tokens.weight", "model.layers."),
    "gpt2": ("config.json", "n_layer", "n_embd", "transformer.wte.weight", "h."),
    "nanochat": ("meta_000000.json", "n_layer", "n_embd", "transformer.wte.weight", "transformer.h."),
}
HF_FAMILY_ARCH = {"llama": "llama3", "pythia": "pythia", "phi3": "phi3", "gemma2": "gemma2"}


def weights_file(kind: str) -> str:
    return "model_000000.pt" if kind == "nanochat" else "model.safetensors"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """Each kind's folder, as its maker saves it: transformers' random models (the four Hugging Face
    families, GPT-2 with its own 50,257-token vocabulary) and nanochat's checkpoint."""
    pytest.importorskip("transformers")
    import transformers
    from hf_families import build

    root = tmp_path_factory.mktemp("hostile")
    out = {kind: root / kind for kind in KINDS}
    for kind, arch in HF_FAMILY_ARCH.items():
        build(arch, out[kind])
    torch.manual_seed(0)
    gpt2 = transformers.GPT2Config(vocab_size=50257, n_layer=2, n_head=2, n_embd=16, n_positions=32)
    transformers.GPT2LMHeadModel(gpt2).save_pretrained(out["gpt2"])
    shutil.copytree(NANOCHAT, out["nanochat"])
    return out


def copy(built: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    return shutil.copytree(built[kind], tmp_path / kind)


def edit_config(folder: Path, kind: str, **fields) -> None:
    """Set fields of the folder's config (nanochat's: of its meta's model_config)."""
    p = folder / KINDS[kind][0]
    raw = json.loads(p.read_text())
    (raw["model_config"] if kind == "nanochat" else raw).update(fields)
    p.write_text(json.dumps(raw))


def drop_tensor(folder: Path, kind: str, name: str) -> None:
    if kind == "nanochat":
        sd = torch.load(folder / "model_000000.pt", weights_only=True)
        del sd[name]
        torch.save(sd, folder / "model_000000.pt")
    else:
        t = load_file(str(folder / "model.safetensors"))
        del t[name]
        save_file(t, str(folder / "model.safetensors"))


def peak_mb() -> float:
    """The process's peak resident memory (VmHWM) in MB; since the last reset where Linux has one."""
    if CLEAR_REFS.exists():
        return int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1)) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def refused_at_once(folder: Path, data: Path, message: str) -> str:
    """Import `folder`: refused with `message` (a regex) in under MAX_SECONDS, the process's peak
    memory grown by under MAX_MB; returns the refusal."""
    if CLEAR_REFS.exists():
        CLEAR_REFS.write_text("5")  # the high-water mark starts again from the memory in use
    before, t0 = peak_mb(), time.monotonic()
    with pytest.raises(importers.ImportFailed, match=message) as e:
        importers.import_model(folder, "hostile", data)
    took, grew = time.monotonic() - t0, peak_mb() - before
    assert took < MAX_SECONDS and grew < MAX_MB, f"refused after {took:.2f} s, peak memory +{grew:.0f} MB"
    return str(e.value)


def cli_refuses(folder: Path, data: Path, message: str, capsys) -> None:
    """`gptscope import` says `error: ...` (matching `message`) on one line, no traceback, exits 2 and
    stores nothing."""
    capsys.readouterr()
    assert cli_main(["import", str(folder), "--name", "hostile", "--data-dir", str(data)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert re.search(message, err), err
    assert not (data / "models").exists() or not list((data / "models").iterdir())


@pytest.mark.slow  # builds transformers' random models (their classes take seconds to load)
@pytest.mark.parametrize("kind", KINDS)
def test_each_unedited_folder_imports(built, tmp_path, kind):
    """The folders the refusals below edit import as they are: each refusal is its edit's doing."""
    dest, summary = importers.import_model(built[kind], kind, tmp_path / "data")
    assert summary["config"]["n_layer"] == (4 if kind == "nanochat" else 2)
    assert ckpt.load(dest).model.cfg.n_layer == summary["config"]["n_layer"]


@pytest.mark.slow  # builds transformers' random models (their classes take seconds to load)
@pytest.mark.parametrize("kind", KINDS)
def test_a_config_naming_a_million_layers_is_refused_at_once_naming_the_field(built, tmp_path, capsys, kind):
    """Before: 15-58 s and 2.6-5.7 GB to refuse (GPT-2's model was built: past 14 GB, an allocator
    error); now the number of layers is checked against the layers the weights hold first."""
    config, field, _, _, layers = KINDS[kind]
    folder = copy(built, kind, tmp_path)
    edit_config(folder, kind, **{field: MILLION})
    held = 3 if kind == "nanochat" else 1
    where = f"{config} field model_config.n_layer" if kind == "nanochat" else f"{config} field {field}"
    message = (
        rf"{re.escape(where)} is 1,000,000, but {weights_file(kind)} holds layers 0\.\.{held} "
        rf"\({re.escape(layers)}N\.\*\)"
    )
    refused_at_once(folder, tmp_path / "data", f"^{message}$")
    cli_refuses(folder, tmp_path / "data", message, capsys)


@pytest.mark.slow  # builds transformers' random models (their classes take seconds to load)
@pytest.mark.parametrize("kind", KINDS)
def test_a_width_that_disagrees_with_the_tensors_is_refused_naming_the_field_and_the_tensor(
    built, tmp_path, capsys, kind
):
    """The issue's 1.4 KB checkpoint naming n_embd 4096, for every kind: the embedding's shape says
    otherwise, and the refusal names both the embedding and the field."""
    _, _, width, embed, _ = KINDS[kind]
    folder = copy(built, kind, tmp_path)
    edit_config(folder, kind, **{width: 4096})
    shown = embed.removeprefix("transformer.") if kind == "gpt2" else embed
    message = (
        rf"tensor {re.escape(shown)} in {weights_file(kind)} has shape \((\d+), (\d+)\); "
        rf".*needs \(\1, 4096\): its {width} is 4,096"
    )
    refused_at_once(folder, tmp_path / "data", message)
    cli_refuses(folder, tmp_path / "data", message, capsys)


@pytest.mark.slow  # builds transformers' random models (their classes take seconds to load)
@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_embedding_is_refused_naming_the_tensor(built, tmp_path, capsys, kind):
    """No KeyError traceback: the tensor is named (GPT-2's as its messages name them, without the
    'transformer.' its LM-head files add)."""
    embed = KINDS[kind][3]
    folder = copy(built, kind, tmp_path)
    drop_tensor(folder, kind, embed)
    shown = embed.removeprefix("transformer.") if kind == "gpt2" else embed
    message = rf"tensor {re.escape(shown)} is missing from {weights_file(kind)}"
    refused_at_once(folder, tmp_path / "data", message)
    cli_refuses(folder, tmp_path / "data", message, capsys)


@pytest.mark.slow  # builds transformers' random models (their classes take seconds to load)
@pytest.mark.parametrize(
    ("kind", "fields", "message"),
    [
        # the MLP's width against layer 0's up-projection (hf_state named the tensor only, after loading all)
        (
            "llama",
            {"intermediate_size": MILLION},
            r"tensor model\.layers\.0\.mlp\.up_proj\.weight in model\.safetensors has shape \(96, 64\); "
            r"config\.json needs \(1000000, 64\): its intermediate_size is 1,000,000",
        ),
        # Phi-3's fused gate and up-projection: twice the field
        (
            "phi3",
            {"intermediate_size": 4096},
            r"gate_up_proj\.weight in model\.safetensors has shape \(192, 64\); config\.json needs \(8192, 64\): "
            r"its 2 \* intermediate_size is 8,192",
        ),
        # heads: W_Q's rows are the heads times the head size
        (
            "gemma2",
            {"num_attention_heads": 8, "num_key_value_heads": 8},
            r"q_proj\.weight in model\.safetensors has shape \(64, 64\); config\.json needs \(128, 64\): "
            r"its num_attention_heads \* head_dim is 128",
        ),
        # a context no tensor holds (RoPE): capped, where it used to import and size every KV cache by it
        (
            "llama",
            {"max_position_embeddings": 10**12},
            "field max_position_embeddings is 1,000,000,000,000; gptscope reads at most 16,777,216",
        ),
        (
            "nanochat",
            {"sequence_len": 10**12},
            "model_config.sequence_len is 1,000,000,000,000; gptscope reads at most",
        ),
    ],
    ids=["mlp-width", "phi3-fused-mlp", "heads", "context", "nanochat-context"],
)
def test_other_sizes_are_refused_naming_the_field(built, tmp_path, kind, fields, message):
    folder = copy(built, kind, tmp_path)
    edit_config(folder, kind, **fields)
    refused_at_once(folder, tmp_path / "data", message)


@pytest.mark.slow  # builds transformers' random models (their classes take seconds to load)
def test_a_refusal_quoting_a_huge_field_is_cut_short(built, tmp_path):
    """A config.json field of a million entries quoted whole made a refusal of megabytes."""
    folder = copy(built, "gemma2", tmp_path)
    edit_config(folder, "gemma2", layer_types=["full_attention"] * 100_000)
    text = refused_at_once(folder, tmp_path / "data", r"field layer_types is \['full_attention'")
    assert len(text) < 2100 and text.endswith("more characters)"), len(text)


def test_gemmas_layer_pattern_is_found_in_one_pass():
    """The shortest window pattern that tiles the layers, as the old search (every length in turn,
    quadratic in the layers) found it; and in one pass over 200,000 layers of no shorter pattern."""
    from gptscope.model.importers.gemma import smallest_period

    def slow(s: str) -> int:
        return next(p for p in range(1, len(s) + 1) if (s[:p] * len(s))[: len(s)] == s)

    for s in ("S", "L", "SL", "SSL", "SSSSSL", "SLSLS", "SSLSSLS", "SLL" * 5 + "S", "SSLSL", "LSSSSSL"):
        assert smallest_period(s) == slow(s), s
    t0 = time.monotonic()
    assert smallest_period("S" * 199_999 + "L") == 200_000
    assert time.monotonic() - t0 < 1


def _nanochat(tmp_path: Path) -> Path:
    return shutil.copytree(NANOCHAT, tmp_path / "run")


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (PermissionError(13, "Permission denied", "run/meta_000000.json"), r"cannot be read: Permission denied \("),
        (MemoryError(), "too large to convert in this machine's memory"),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried"), "too large to convert"),
        (KeyError("transformer.wte.weight"), r"failed unexpectedly \(KeyError: 'transformer\.wte\.weight'\)"),
        (RuntimeError("a bug\nits second line"), r"failed unexpectedly \(RuntimeError: a bug\); it stored nothing"),
    ],
    ids=["unreadable", "memory", "allocator", "keyerror", "bug"],
)
def test_a_conversion_that_fails_any_way_is_one_error_line_and_exit_2(tmp_path, capsys, monkeypatch, fault, message):
    """Whatever converting raises, `gptscope import` prints one `error:` line and exits 2: a file that
    cannot be read and memory running out are refusals naming them, anything unforeseen says so."""

    def fail(*_a, **_k):
        raise fault

    monkeypatch.setattr(importers, "convert", fail)
    cli_refuses(_nanochat(tmp_path), tmp_path / "data", message, capsys)


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        (OSError(28, "No space left on device", "x.safetensors"), r"cannot be written under .*: No space left"),
        (ckpt.CheckpointError("hash mismatch"), "the checkpoint written does not read back: hash mismatch"),
    ],
    ids=["disk-full", "reads-back-wrong"],
)
def test_a_store_that_fails_is_one_error_line_and_leaves_nothing(tmp_path, capsys, monkeypatch, fault, message):
    """A data folder that cannot be written (a full disk) or a checkpoint that does not read back: a
    refusal naming it, and the half-written temporary folder removed."""
    real_save = ckpt.save

    def save(folder, *a, **k):
        real_save(folder, *a, **k)  # written, then the failure: what is left must go
        raise fault

    monkeypatch.setattr(ckpt, "save", save)
    data = tmp_path / "data"
    cli_refuses(_nanochat(tmp_path), data, message, capsys)
    assert list((data / "models").iterdir()) == []  # no .hostile.importing-* left behind
