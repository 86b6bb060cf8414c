"""Edge circuits too big to answer at once (exact scores of every edge, a larger model, long
prompts), as background jobs (server/jobs.py's Analysis).

POST /api/v1/circuits/jobs checks the request (its 422s come at once, as from POST
/api/v1/circuits), then scores the edges in a thread, the model's lock held per batch of graph runs
so other requests go on between them; GET /api/v1/circuits/jobs/{id} tells how many graph runs are
done and, once finished, holds the answer. A newer job cancels the one still going (the page starts
one per change of its form), and only the last 8 jobs are kept.
"""

from __future__ import annotations

from gptscope.model.patching import Cancelled

from .explain import circuits as explain_circuits
from .jobs import Analysis
from .schemas.circuits import CircuitResponse

SEARCHES: Analysis[CircuitResponse] = Analysis(
    "circuit job",
    "circuits/jobs",
    explain_circuits.plan,
    explain_circuits.compute,
    explain_circuits.MAX_JOB_MACS,
    Cancelled,
)
