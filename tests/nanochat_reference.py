"""nanochat's own code as the reference for gptscope's nanochat import: a tiny checkpoint written by
nanochat's save functions, and the logits nanochat's own GPT computes for it.

nanochat is on no package registry (PyPI's `nanochat` 0.1.1 and 0.1.2 hold only its `rustbpe`
tokenizer trainer, none of its model code), so nothing here is installed or copied: the code is read
from a checkout of karpathy/nanochat that you name.

    python tests/nanochat_reference.py --nanochat PATH [--out tests/data/nanochat/<commit>]

writes, with nanochat's own functions and random weights (every parameter, the lambdas and gates
included, drawn so that each piece of the block shows in the logits):
  model_000000.pt, meta_000000.json   checkpoint_manager.save_checkpoint, as base_train calls it
                                      (wte and the value embeddings in bfloat16, as a GPU run keeps them)
  tokenizer/tokenizer.pkl             RustBPETokenizer.save: a pickled tiktoken Encoding, of merges made
                                      here (nanochat trains them with rustbpe; the Encoding is built as
                                      its train_from_iterator builds it)
  reference.safetensors               the logits of nanochat's GPT, loaded by its own build_model, for a
                                      200-token prompt (every third position's), and those of the last
                                      position after a KV-cached prefill and each decoding step after it
tests/test_import_nanochat.py checks gptscope's import of those files against those logits, and, when
GPTSCOPE_NANOCHAT=PATH names a checkout, runs this module's `write` on it live.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import types
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import save_file

# The tiny shape: four layers (windows S S S L, value embeddings on layers 1 and 3, the backout after
# layer 2), 4 query heads sharing 2 key/value heads, and a context long enough for the short window
# (nanochat rounds it up to 128 keys, FA3's tile) to cut some keys off.
CONFIG = dict(sequence_len=256, n_layer=4, n_head=4, n_kv_head=2, n_embd=24, window_pattern="SSSL")
PROMPT_LEN, DECODE_STEPS = 200, 8
TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings. " * 4


def load(path: Path) -> types.SimpleNamespace:
    """nanochat's gpt, checkpoint_manager, engine and tokenizer modules, from the checkout at `path`.
    rustbpe (its tokenizer trainer, a compiled extension) is only imported, never used here: a stand-in
    takes its place when it is not installed."""
    root = str(Path(path).resolve())
    for name in [m for m in sys.modules if m == "nanochat" or m.startswith("nanochat.")]:
        del sys.modules[name]  # another checkout's modules
    sys.modules.setdefault("rustbpe", types.ModuleType("rustbpe"))
    sys.path.insert(0, root)
    try:
        mods = {
            n: importlib.import_module(f"nanochat.{n}") for n in ("gpt", "checkpoint_manager", "engine", "tokenizer")
        }
    finally:
        sys.path.remove(root)
    for name in mods:
        assert str(Path(mods[name].__file__).resolve()).startswith(root), f"nanochat.{name} came from elsewhere"
    return types.SimpleNamespace(**mods)


def encoding(nc: types.SimpleNamespace):
    """A tiktoken Encoding as nanochat's RustBPETokenizer.train_from_iterator builds it (its split
    pattern, mergeable ranks, its special tokens after them), of byte-pair merges learnt from TEXT."""
    import tiktoken

    from gptscope.model.bpe import train_bpe

    bpe = train_bpe(TEXT, 256 + 24, pattern=nc.tokenizer.SPLIT_PATTERN, special_tokens=())
    ranks = {b: i for i, b in enumerate(bpe.token_bytes())}
    specials = {name: len(ranks) + i for i, name in enumerate(nc.tokenizer.SPECIAL_TOKENS)}
    return tiktoken.Encoding(
        name="rustbpe", pat_str=nc.tokenizer.SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens=specials
    )


@torch.no_grad()
def randomise(model: torch.nn.Module, seed: int) -> None:
    """Every parameter drawn at random, at sizes where each piece of the block matters: the output
    projections nanochat starts at zero, lambdas away from their start, logits past the softcap."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name == "resid_lambdas":
            new = 0.6 + 0.8 * torch.rand(p.shape, generator=g)
        elif name in ("x0_lambdas", "smear_lambda", "backout_lambda"):
            new = 0.2 + 0.6 * torch.rand(p.shape, generator=g)
        elif name == "lm_head.weight":
            new = torch.randn(p.shape, generator=g) * 1.5
        else:
            new = torch.randn(p.shape, generator=g) / max(1.0, p.shape[-1] ** 0.5)
        p.copy_(new.to(p.dtype))


def write(nc: types.SimpleNamespace, out: Path, seed: int = 0) -> dict:
    """Write the checkpoint, the tokenizer and nanochat's logits into `out`; returns the reference."""
    out.mkdir(parents=True, exist_ok=True)
    enc = encoding(nc)
    tok = nc.tokenizer.RustBPETokenizer(enc, "<|bos|>")
    tok.save(str(out / "tokenizer"))
    config = nc.gpt.GPTConfig(vocab_size=enc.n_vocab, **CONFIG)
    with torch.device("meta"):
        model = nc.gpt.GPT(config)
    model.to_empty(device="cpu")
    model.init_weights()
    randomise(model, seed)
    model.transformer.wte.to(dtype=torch.bfloat16)  # as init_weights leaves them on a GPU (COMPUTE_DTYPE)
    for ve in model.value_embeds.values():
        ve.to(dtype=torch.bfloat16)
    meta = {"step": 0, "val_bpb": None, "model_config": asdict(config), "user_config": {"depth": CONFIG["n_layer"]}}
    nc.checkpoint_manager.save_checkpoint(str(out), 0, model.state_dict(), None, meta)
    os.environ["NANOCHAT_BASE_DIR"] = str(out)  # build_model reads the tokenizer from <base dir>/tokenizer
    ref, _tok, _meta = nc.checkpoint_manager.build_model(str(out), 0, torch.device("cpu"), "eval")
    ids = [tok.get_bos_token_id(), *tok.encode(TEXT)][:PROMPT_LEN]
    assert len(ids) == PROMPT_LEN, len(ids)
    x = torch.tensor([ids])
    logits = ref(x)  # (1, T, V)
    hs = CONFIG["n_embd"] // CONFIG["n_head"]
    cache = nc.engine.KVCache(
        1, CONFIG["n_kv_head"], CONFIG["sequence_len"], hs, CONFIG["n_layer"], "cpu", torch.float32
    )
    prefix = PROMPT_LEN - DECODE_STEPS
    steps = [ref(x[:, :prefix], kv_cache=cache)[0, -1]]
    for t in range(prefix, PROMPT_LEN):  # one token at a time, reading the cache
        steps.append(ref(x[:, t : t + 1], kv_cache=cache)[0, -1])
    keep = torch.arange(0, PROMPT_LEN, 3)  # every third position's logits (the file stays small)
    reference = {
        "ids": x[0],
        "positions": keep,
        "logits": logits[0, keep].contiguous(),
        "kv_logits": torch.stack(steps),
    }
    save_file(reference, str(out / "reference.safetensors"), metadata={"decode_from": str(prefix)})
    return reference


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nanochat", required=True, type=Path, help="a checkout of karpathy/nanochat")
    ap.add_argument("--out", required=True, type=Path, help="the folder to write")
    ap.add_argument("--seed", type=int, default=0, help="the random weights' seed")
    args = ap.parse_args()
    write(load(args.nanochat), args.out, args.seed)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
