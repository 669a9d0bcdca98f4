"""Write-flow tests: the session sandbox and Prefect server, a fresh state dir per test.

Retry waits of the write tasks are set to zero here (the declared counts and conditions stay),
and the data client's own retries are turned off (``COMPLIANCE_MAX_RETRIES=0``), so a fault
the sandbox injects is seen - and retried - by the Prefect tasks under test.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from sandbox.runner import SandboxHandle
from tests.fixtures.flows import run_flow, run_id

__all__ = ["run_flow", "run_id"]


@pytest.fixture
def flows_env(write_flow_env: SandboxHandle) -> SandboxHandle:
    """Sandbox reset, demo manage app, private state dir, instant task retries."""
    return write_flow_env


def api_calls(sandbox: SandboxHandle) -> dict[str, int]:
    """Data-route calls since the last reset (token calls excluded)."""
    routes: dict[str, int] = sandbox.control.stats()["route_counts"]
    return {route: n for route, n in routes.items() if "oauth" not in route}


def write_calls(sandbox: SandboxHandle) -> dict[str, int]:
    return {route: n for route, n in api_calls(sandbox).items() if not route.startswith("GET ")}


async def artifacts_of(flow_run_id: str) -> list[Any]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async with get_client() as client:
        return await client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[uuid.UUID(flow_run_id)])
            )
        )


async def results_table(flow_run_id: str) -> tuple[list[dict[str, Any]], str]:
    """Rows and description of a run's results table artifact."""
    import json

    for artifact in await artifacts_of(flow_run_id):
        if artifact.key and artifact.key.endswith("-results"):
            return json.loads(artifact.data), artifact.description or ""
    raise AssertionError(f"run {flow_run_id} has no results table")
