"""Attribution graphs as background jobs (server/jobs.py's Analysis): POST /api/v1/attribution/jobs
checks the request at once, then computes the graph in a thread, its progress the features whose
incoming edges are done; a newer job cancels the one still going, and the last 8 are kept."""

from __future__ import annotations

from gptscope.model.patching import Cancelled

from .explain import attribution as explain_attribution
from .jobs import Analysis
from .schemas.attribution import AttributionResponse

GRAPHS: Analysis[AttributionResponse] = Analysis(
    "attribution job",
    "attribution/jobs",
    explain_attribution.plan,
    explain_attribution.compute_job,
    explain_attribution.MAX_JOB_ROWS,
    Cancelled,
)
