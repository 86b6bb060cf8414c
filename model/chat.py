"""Chat templates: a model's tokenizer_config.json `chat_template`, rendered as its makers' code renders
it, and nothing more.

A chat template is a Jinja2 program that turns a list of messages ({"role", "content"}) into the text
an instruct model was trained on, special tokens written out (<|im_start|>user ... <|im_end|>). It comes
with the downloaded folder, so it is untrusted code: it runs in Jinja2's ImmutableSandboxedEnvironment
(no attribute starting with "_", no method that changes a list or dict, no Python callables but the
three below), with the settings and helpers transformers' `apply_chat_template` gives it (trim_blocks,
lstrip_blocks, the loop controls, `raise_exception`, `strftime_now`, a `tojson` that keeps non-ASCII).
Whatever the sandbox refuses, and any template error, is a `ChatTemplateError` that names the template.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

from jinja2 import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

MAX_RENDERED_CHARS = 200_000  # a template that writes more than this is stopped (a loop that runs away)


class ChatTemplateError(ValueError):
    """The chat template cannot be rendered here: the sandbox refused it, or it failed or raised."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refuses these messages: {message}")


def _tojson(x, ensure_ascii: bool = False, indent=None, separators=None, sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=8)
def _compiled(template: str):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
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
        out = _compiled(template).render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos_token,
            eos_token=eos_token,
            tools=None,
            documents=None,
        )
    except ChatTemplateError:
        raise
    except SecurityError as e:
        raise ChatTemplateError(f"the chat template does what the sandbox refuses: {e}") from None
    except TemplateError as e:
        raise ChatTemplateError(f"the chat template cannot be rendered: {e}") from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, ZeroDivisionError, RecursionError) as e:
        raise ChatTemplateError(f"the chat template fails on these messages: {type(e).__name__}: {e}") from None
    if len(out) > MAX_RENDERED_CHARS:
        raise ChatTemplateError(f"the chat template wrote {len(out):,} characters, more than {MAX_RENDERED_CHARS:,}")
    return out
