"""Activation-patching sweeps too big to answer at once, as background jobs (server/jobs.py's Analysis).

POST /api/v1/patch/jobs checks the request (its 422s come at once, as from POST /api/v1/patch),
then runs the sweep in a thread, the model's lock held per batch so other requests go on between
batches; GET /api/v1/patch/jobs/{id} tells how many patched runs are done and, once finished, holds
the answer. A newer job cancels the one still going (the page starts one per change of its
prompts), and only the last 8 jobs are kept.
"""

from __future__ import annotations

from gptscope.model.patching import Cancelled

from .explain import patch as explain_patch
from .jobs import Analysis
from .schemas.patch import PatchResponse

SWEEPS: Analysis[PatchResponse] = Analysis(
    "patching job", "patch/jobs", explain_patch.plan, explain_patch.compute, explain_patch.MAX_JOB_MACS, Cancelled
)
