"""Every kind of background job the app runs, in one list (KINDS).

`create_app` makes one runner of each into `app.state.jobs` (by the kind's name) and stops them all
at shutdown; a router's endpoints reach theirs through the kind (`Depends(kind.runner)`), and the
fuzz test replaces each with one that does no work. A new kind is one line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from .attribution_jobs import GRAPHS
from .circuit_jobs import SEARCHES
from .config import Settings
from .export_model_jobs import runner as export_runner
from .finetune_jobs import FinetuneManager
from .jobs import JobRunner
from .lenses import LENSES
from .patch_jobs import SWEEPS
from .runs import RunManager
from .saes import SAES
from .steering_jobs import STEERINGS
from .timeline_jobs import runner as timeline_runner
from .token_attribution_jobs import TOKEN_ATTRIBUTIONS
from .transcoders import TRANSCODERS


@dataclass(frozen=True)
class JobKind:
    name: str  # its key in app.state.jobs
    make: Callable[[Settings], JobRunner[Any]]  # the app's runner of this kind

    def runner(self, request: Request) -> JobRunner[Any]:
        """The app's runner of this kind (a FastAPI dependency)."""
        return request.app.state.jobs[self.name]


TRAINING = JobKind("training", lambda s: RunManager(s.data_dir))
FINETUNE = JobKind("finetune", lambda s: FinetuneManager(s.data_dir))
SAE_TRAINING = JobKind("sae", lambda s: SAES.runner())
LENS_TRAINING = JobKind("lens", lambda s: LENSES.runner())
TRANSCODER_TRAINING = JobKind("transcoders", lambda s: TRANSCODERS.runner())
PATCH = JobKind("patch", lambda s: SWEEPS.runner())
CIRCUITS = JobKind("circuits", lambda s: SEARCHES.runner())
ATTRIBUTION_GRAPHS = JobKind("attribution", lambda s: GRAPHS.runner())
TOKEN_ATTRIBUTION = JobKind("token_attribution", lambda s: TOKEN_ATTRIBUTIONS.runner())
EXPORT_MODEL = JobKind("export_model", lambda s: export_runner())
STEERING = JobKind("steering", lambda s: STEERINGS.runner())
TIMELINE = JobKind("timeline", lambda s: timeline_runner())

KINDS: tuple[JobKind, ...] = (
    TRAINING,
    FINETUNE,
    SAE_TRAINING,
    LENS_TRAINING,
    TRANSCODER_TRAINING,
    PATCH,
    CIRCUITS,
    ATTRIBUTION_GRAPHS,
    TOKEN_ATTRIBUTION,
    EXPORT_MODEL,
    STEERING,
    TIMELINE,
)


def make_runners(settings: Settings) -> dict[str, JobRunner[Any]]:
    """One runner of every kind, by name (app.state.jobs)."""
    return {kind.name: kind.make(settings) for kind in KINDS}
