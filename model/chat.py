"""Chat templates: a model's tokenizer_config.json `chat_template`, rendered as its makers' code renders
it, and nothing more.

A chat template is a Jinja2 program that turns a list of messages ({"role", "content"}) into the text
an instruct model was trained on, special tokens written out (<|im_start|>user ... <|im_end|>). It comes
with the downloaded folder, so it is untrusted code: it runs in Jinja2's ImmutableSandboxedEnvironment
(no attribute starting with "_", no method that changes a list or dict, no Python callables but the
three below), with the settings and helpers transformers' `apply_chat_template` gives it (trim_blocks,
lstrip_blocks, the loop controls, `raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII).
Whatever the sandbox refuses, and any template error, is a `ChatTemplateError` that names the template.
The rendering is bounded as it runs, not after: its output (MAX_RENDERED_CHARS, counted chunk by
chunk), its time (MAX_RENDER_S, checked on every line the compiled template runs, so a loop that
writes nothing is stopped too), each range (Jinja2's sandbox: at most 100,000 numbers) and every
string, list or number that `*` or `**` would make (no `'a' * 10**12`).
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from functools import lru_cache
from typing import Any

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

MAX_RENDERED_CHARS = 200_000  # a template that writes more than this is stopped (a loop that runs away)
MAX_RENDER_S = 2.0  # a template that runs longer than this is stopped, written or not
MAX_POWER_BITS = 4096  # ** may make numbers up to this many bits
TEMPLATE_FILE = "<template>"  # the file name of a template Jinja2 compiled from a string


class ChatTemplateError(ValueError):
    """The chat template cannot be rendered here: the sandbox refused it, or it failed or raised."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refuses these messages: {message}")


def _tojson(x, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _Bounded(ImmutableSandboxedEnvironment):
    """The immutable sandbox whose `*` and `**` check the size of what they would make first."""

    intercepted_binops = frozenset(["*", "**"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_RENDERED_CHARS:
                    raise ChatTemplateError(
                        f"the chat template makes a {type(seq).__name__} of {len(seq) * n:,} items with *, more "
                        f"than {MAX_RENDERED_CHARS:,}"
                    )
        big = operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1
        if big and right * max(1, abs(left).bit_length()) > MAX_POWER_BITS:
            raise ChatTemplateError(
                f"the chat template computes {left} ** {right}, a number of more than {MAX_POWER_BITS:,} bits"
            )
        return super().call_binop(context, operator, left, right)


@lru_cache(maxsize=8)
def _compiled(template: str):
    env = _Bounded(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
    return env.from_string(template)


def render(
    template: str,
    messages: list[dict],
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
) -> str:
    """The template's text for these messages (and, with add_generation_prompt, the start of the
    assistant's turn the model is to write). ChatTemplateError for what the sandbox or the template refuses."""
    try:
        out = _bounded_render(
            _compiled(template),
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            tools=None,
            documents=None,
        )
    except ChatTemplateError:
        raise
    except OverflowError as e:  # the sandbox's range limit
        raise ChatTemplateError(f"the chat template asks for too much: {e}") from None
    except MemoryError:
        raise ChatTemplateError("the chat template needs more memory than a chat may take") from None
    except SecurityError as e:
        raise ChatTemplateError(f"the chat template does what the sandbox refuses: {e}") from None
    except TemplateError as e:
        raise ChatTemplateError(f"the chat template cannot be rendered: {e}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError, RecursionError) as e:
        raise ChatTemplateError(f"the chat template fails on these messages: {type(e).__name__}: {e}") from None
    return out


def _bounded_render(compiled: Any, **variables: Any) -> str:
    """The template's output, stopped once it passes MAX_RENDERED_CHARS or runs past MAX_RENDER_S: the
    output is counted chunk by chunk as the template yields it, and the clock is read on every line
    the compiled template runs (a trace function on this thread, on the template's own frames only)."""
    deadline = time.monotonic() + MAX_RENDER_S

    def on_line(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise ChatTemplateError(f"the chat template ran longer than {MAX_RENDER_S:g} s (a loop that runs away)")
        return on_line

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        return on_line if frame.f_code.co_filename == TEMPLATE_FILE else None

    chunks, size = [], 0
    before = sys.gettrace()
    sys.settrace(on_call)
    try:
        for chunk in compiled.generate(**variables):
            size += len(chunk)
            if size > MAX_RENDERED_CHARS:
                raise ChatTemplateError(f"the chat template wrote more than {MAX_RENDERED_CHARS:,} characters")
            chunks.append(chunk)
    finally:
        sys.settrace(before)
    return "".join(chunks)
