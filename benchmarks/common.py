"""What the benchmark scripts share: the machine's CPU name, the best time of repeated runs, a prompt
of a given number of tokens, and a served model of random weights of a given shape.
(Imported as `common`: a script's own folder is the first place Python looks.)"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gptscope.model.gpt import GPTConfig
    from gptscope.server.service import ModelService


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), platform.machine())
    except OSError:
        return platform.processor() or platform.machine()


def best(fn: Callable[[], object], repeat: int) -> float:
    """The shortest wall-clock time of `repeat` calls of fn, in seconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


# Romeo's lines, repeated as long as a prompt needs
ROMEO = (
    "But soft what light through yonder window breaks It is the east and Juliet is the sun Arise fair sun "
    "and kill the envious moon who is already sick and pale with grief"
)
WORDS = ROMEO.split(" ")


def prompt_of(encode: Callable[[str], list[int]], n: int) -> str:
    """A prompt of exactly n tokens under `encode` (Romeo's words, then cut a character at a time)."""
    text, i = "", 0
    while len(encode(text)) < n:
        text += ("" if not text else " ") + WORDS[i % len(WORDS)]
        i += 1
    while len(encode(text)) > n:
        text = text[:-1]
    return text


def random_service(cfg: GPTConfig, tmp: Path, name: str, command: str) -> ModelService:
    """A ModelService of a checkpoint of random weights of shape `cfg` (seed 0, GPT-2's tokenizer) saved
    in tmp/name; `command` is the script that made it, as the checkpoint records."""
    import torch

    from gptscope.model import checkpoint
    from gptscope.model.gpt import GPT
    from gptscope.server.service import ModelService

    torch.manual_seed(0)
    tokens, corpus = {"kind": "tiktoken", "name": "gpt2"}, {"name": "unknown (random weights)"}
    meta = dict(name=name, tokenizer=tokens, corpus=corpus, step=0, final=True, evals=[], command=command)
    return ModelService(checkpoint.save(tmp / name, GPT(cfg), meta))
