"""Token attribution at every position as a background job (server/jobs.py's Analysis):
POST /api/v1/token-attribution/jobs checks the request at once, then computes it in a thread, a batched
pass at a time with the model's lock held per pass, its progress the runs of the prompt made (each
occluded token, each point of each row's path); a newer job cancels the one still going, and the last 8
are kept."""

from __future__ import annotations

from gptscope.model.patching import Cancelled

from .explain import token_attribution as explain_ta
from .jobs import Analysis
from .schemas.token_attribution import TokenAttributionResponse

TOKEN_ATTRIBUTIONS: Analysis[TokenAttributionResponse] = Analysis(
    "token attribution job",
    "token-attribution/jobs",
    explain_ta.plan,
    explain_ta.compute,
    explain_ta.MAX_JOB_MACS,
    Cancelled,
)
