"""Property-based fuzzing of the whole /api/v1 OpenAPI schema with schemathesis, in-process.

Every operation gets generated requests (valid and invalid by the schema); no answer may be a
5xx, and every answer with a documented schema must match it. Training runs that the fuzzer
starts are accepted and validated but do not train (the trainer itself is tested elsewhere).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import response_schema_conformance
from schemathesis.checks import not_a_server_error

from server.app import create_app
from server.config import BUILTIN_CHECKPOINT, Settings
from server.service import ModelService
from server.runs import RunManager


class NoTrainManager(RunManager):
    def _run(self, job, tc):  # accept the run, train nothing
        job.status = "done"


# Built at import (schemathesis parametrizes at collection time); its own model and temp data folder.
_DATA = tempfile.mkdtemp(prefix="gptscope-fuzz-")
SERVICE = ModelService(BUILTIN_CHECKPOINT)
APP = create_app(Settings(checkpoint=BUILTIN_CHECKPOINT, data_dir=_DATA, allow_hosts=["testserver"]), service=SERVICE)
APP.state.runs = NoTrainManager(Path(_DATA))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_responses_match_the_schema(case):
    # a generous read timeout: this test is about 5xx and the schema, not speed (/heads ablates heads)
    case.call_and_validate(checks=[not_a_server_error, response_schema_conformance], timeout=120)
    assert not SERVICE.model.training
