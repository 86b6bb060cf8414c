"""The app served by uvicorn in a background thread, on a free loopback port: what a notebook (and
the contract test) talks to. One per process, reused; stopped when the process exits."""

from __future__ import annotations

import atexit
import threading
import time

import uvicorn

from gptscope.server.config import KEEP_ALIVE_S


class BackgroundServer:
    """uvicorn running `app` in a daemon thread on 127.0.0.1 (port 0: the system picks a free one)."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="on", timeout_keep_alive=KEEP_ALIVE_S
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="gptscope-server", daemon=True)
        self.host, self.port = host, port

    def start(self, timeout: float = 120.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gptscope server did not start (see the log above)")
            time.sleep(0.05)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        atexit.register(self.stop)
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self._server.started and not self._server.should_exit

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=30)
