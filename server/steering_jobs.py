"""Steering four ways as a background job (server/jobs.py's Analysis): POST /api/v1/steering/jobs checks the
request at once, then reads the concept from the examples and generates in a thread, the model's lock held
per generation; its progress counts decode steps. A newer job cancels the one still going; the last 8 are
kept."""

from __future__ import annotations

from gptscope.model.errors import Cancelled

from .explain import steering as explain_steering
from .jobs import Analysis
from .schemas.steering import SteeringResponse

STEERINGS: Analysis[SteeringResponse] = Analysis(
    "steering job",
    "steering/jobs",
    explain_steering.plan,
    explain_steering.compute,
    explain_steering.MAX_JOB_TOKENS,
    Cancelled,
)
