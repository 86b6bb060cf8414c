"""Settings, read from the environment (GPTSCOPE_*) or given by the CLI."""

from __future__ import annotations

import atexit
import os
from contextlib import ExitStack
from importlib import resources
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from .security import LOOPBACK_NAMES, is_loopback

_extracted = ExitStack()  # folders copied out of a zipped install, removed at exit
atexit.register(_extracted.close)


def package_folder(package: str, *parts: str) -> Path:
    """A folder shipped inside the gptscope package, found through importlib.resources: the
    checkout's folder in an editable install, the installed copy otherwise; never a path relative
    to the source tree. StaticFiles and Jinja2 read real folders, so an install that is not one on
    disk (a zip) has it copied out once."""
    folder = resources.files(package)
    for part in parts:
        folder = folder / part
    if isinstance(folder, Path):
        return folder.resolve()
    return _extracted.enter_context(resources.as_file(folder))


BUILTIN_CHECKPOINT = package_folder("gptscope.model", "builtin")
TEMPLATES_DIR = package_folder("gptscope.templates")
STATIC_DIR = package_folder("gptscope.static")

# Limits that bad or huge input runs into; each refusal names the limit.
MAX_TEXT_CHARS = 100_000  # tokenizer text
MAX_MERGES_TEXT_CHARS = 5_000  # BPE merge walk: its output grows with the square of a pre-token's length
MAX_MERGES_PRETOKEN_BYTES = 256  # ... so each pre-token it walks is capped too
MAX_MERGES_PAGE = 1_000  # merges per page of the model tokenizer's merge list
LARGE_MODEL_PARAMS = 20_000_000  # from here on a request uses every core (see Settings.torch_threads)

# How long uvicorn keeps an idle connection open. Its default, 5 s, is also the idle expiry of the usual
# HTTP clients (Node's agent, Playwright's request context, httpx), so a client could send its next request
# on a connection the server was closing at that very moment and get ECONNRESET (seen in the browser tests;
# a browser retries such a request, those clients do not). With the server's timeout longer than theirs,
# the client always closes an idle connection first.
KEEP_ALIVE_S = 75

# The interpreter's switch interval in `gptscope serve` (Python's default: 5 ms): how long a thread
# running Python keeps the GIL while another waits for it (see cli.cmd_serve).
SWITCH_INTERVAL_S = 0.0005


ALL_CORES = max(1, os.cpu_count() or 1)


def default_threads(params: int) -> int:
    """Torch threads for a request on a model of `params` parameters (see Settings.torch_threads)."""
    return 1 if params < LARGE_MODEL_PARAMS else ALL_CORES


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPTSCOPE_")

    host: str = "127.0.0.1"
    port: int = 8000
    checkpoint: Path = BUILTIN_CHECKPOINT
    data_dir: Path = Path.home() / ".gptscope"
    device: str = "cpu"  # inference device; the explainer's models are small, the CPU is plenty
    # Threads torch uses per forward pass; 0 = by the loaded model's size. A small model's matrices
    # are small: one thread answers a request fastest and leaves the other cores to concurrent
    # requests and to a training run (two threads fighting over two busy cores made a 64-token
    # forward pass 40x slower here). A large one (an imported GPT-2: 124M parameters and up) is
    # matmul-bound, and every core shortens each request.
    torch_threads: int = 0

    def threads_for(self, params: int) -> int:
        return self.torch_threads if self.torch_threads > 0 else default_threads(params)

    # Host names the server answers to besides loopback (127.0.0.1, localhost, ::1). Binding to
    # 0.0.0.0 or :: without naming any accepts every Host header (the user chose to expose it).
    allow_hosts: list[str] = []
    json_body_limit: int = 2 * 1024 * 1024  # bytes of a JSON request body
    max_concurrent: int = 32  # API requests worked on at once; more get 503 at once instead of queueing
    # Bytes of weights kept loaded beside the served model (compare's sides, a run's snapshots;
    # server/models.py): the least recently used model goes first when one more would not fit.
    model_cache_bytes: int = 2 * 1024**3
    # Bytes that the work going at once may take beyond the loaded models and caches (server/memory.py):
    # every request and job that grows with what it is asked estimates its peak first and is refused
    # (422) when it could never fit, or waits for room. 0: 4 GiB, or half the machine's memory if less.
    memory_budget: int = Field(0, ge=0)

    # The door beyond loopback (server/security.py): bound to an address other machines reach, every
    # request must carry this token; `gptscope serve` makes one when none is given. insecure_no_token
    # serves such an address without one (anyone who reaches the port can use every endpoint).
    token: str | None = None
    insecure_no_token: bool = False

    @property
    def exposed(self) -> bool:
        """Bound to an address that other machines can reach (not 127.0.0.0/8, ::1 or localhost)."""
        return not is_loopback(self.host)

    def door_token(self) -> str | None:
        """The token every request must carry: the one given (on loopback too, if given); bound beyond
        loopback without one, an error unless insecure_no_token says to go without."""
        if self.token is not None:
            if len(self.token) < 8:
                raise ValueError("the token must be at least 8 characters")
            return self.token
        if self.exposed and not self.insecure_no_token:
            raise ValueError(
                f"serving on {self.host} needs a token (GPTSCOPE_TOKEN, or gptscope serve makes one), "
                "or insecure_no_token to go without"
            )
        return None

    def allowed_hosts(self) -> list[str] | None:
        loopback = list(LOOPBACK_NAMES)
        if self.host in ("0.0.0.0", "::") and not self.allow_hosts:
            return None
        extra = [] if self.host in ("0.0.0.0", "::") else [self.host]
        return sorted({*loopback, *extra, *self.allow_hosts})
