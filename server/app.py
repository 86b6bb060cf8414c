"""The FastAPI application: model loaded once in the lifespan, one router per area."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from gptscope import __version__
from gptscope.model import corpus as corpus_mod

from . import contract, errors, memory
from .config import STATIC_DIR, Settings
from .job_kinds import make_runners
from .models import ModelRegistry
from .routers import api_routers, docs, pages
from .security import GuardMiddleware
from .service import ModelService
from .wire import Compress, ServerTiming

log = logging.getLogger("gptscope")

API_PREFIX = "/api/v1"


def create_app(
    settings: Settings | None = None, service: ModelService | None = None, own_process: bool = False
) -> FastAPI:
    """Build the app. Tests may pass a ready `service` so the model is loaded once per session.
    own_process: the app is the whole process (`gptscope serve`): see service.freeze_heap."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if not app.state.models.serving:  # a second lifespan (a test's) keeps the model it switched to
            app.state.models.serve(service or settings.checkpoint)  # no local name: it would outlive a switch
            log.info("serving %s from %s", app.state.models.served.name, app.state.models.served.path)
        yield
        for runner in app.state.jobs.values():
            runner.shutdown()  # cancel every job still going; a run's snapshots stay loadable

    app = FastAPI(
        title="gptscope",
        version=__version__,
        summary="See inside a small GPT trained on your own machine.",
        description="Every number the gptscope pages show comes from these endpoints. "
        'Errors are JSON: `{"detail": ...}` naming the field and the limit.',
        lifespan=lifespan,
        docs_url=None,  # served by routers.docs from local files: FastAPI's default loads Swagger UI from a CDN
        redoc_url=None,
    )
    door_token = settings.door_token()  # before anything is built: an exposed app without one is refused
    app.add_middleware(Compress, minimum_size=4096)  # gzip, except the binary form
    app.add_middleware(
        GuardMiddleware,
        allowed_hosts=settings.allowed_hosts(),
        json_limit=settings.json_body_limit,
        upload_limit=corpus_mod.MAX_CORPUS_BYTES + 64 * 1024,
        max_concurrent=settings.max_concurrent,
        token=door_token,
    )
    app.add_middleware(ServerTiming)  # outermost: the time it reports includes the guard and compression
    app.state.settings = settings
    memory.BUDGET.configure(settings.memory_budget)  # one budget for the process (server/memory.py)
    app.state.door_token = door_token
    app.state.models = ModelRegistry(settings, own_process)  # every model the app loads
    app.state.jobs = make_runners(settings)  # every kind of background job (server/job_kinds.py)
    errors.install(app)
    contract.install(app)  # every operation's error answers in /openapi.json; a 405's Allow names every method
    for router in api_routers():
        app.include_router(router, prefix=API_PREFIX)
    app.include_router(pages.router)
    app.include_router(docs.router)
    docs.mount_assets(app)
    app.mount("/static", StaticFiles(directory=str(STATIC_DIR)), name="static")
    return app
