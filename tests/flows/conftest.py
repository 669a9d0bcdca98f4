"""Write-flow tests: the session sandbox and Prefect server, a fresh state dir per test.

Retry waits of the write tasks are set to zero here (the declared counts and conditions stay),
and the data client's own retries are turned off (``COMPLIANCE_MAX_RETRIES=0``), so a fault
the sandbox injects is seen - and retried - by the Prefect tasks under test.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.runner import SandboxHandle
from tasks import accounts, documents, groups, questionnaires, vendors
from tasks.connection import forget_brokers
from tasks.outcomes import ItemsFailed, RunSummary

#: a generous token-endpoint limit just for these tests (each test mints once after a reset)
TEST_TOKEN_LIMIT = "flows-tests-token-endpoint"

WRITE_TASKS = [
    vendors.promote_discovered_vendor,
    groups.add_people_to_group,
    accounts.list_tag_categories,
    accounts.read_tag_category,
    accounts.update_account,
    questionnaires.update_questionnaire,
    questionnaires.approve_questionnaire,
    documents.create_document_link,
]


@pytest.fixture(scope="session")
async def token_limit(prefect_server: None) -> str:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        await client.upsert_global_concurrency_limit_by_name(
            TEST_TOKEN_LIMIT, limit=100, slot_decay_per_second=100.0
        )
    return TEST_TOKEN_LIMIT


@pytest.fixture
def flows_env(
    token_limit: str,
    sandbox_reset: SandboxHandle,
    manage_env: SandboxHandle,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Iterator[SandboxHandle]:
    """Sandbox reset, demo manage app, private state dir, instant task retries."""
    monkeypatch.setenv("COMPLIANCE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COMPLIANCE_TOKEN_RATE_LIMIT_NAME", token_limit)
    monkeypatch.setenv("COMPLIANCE_MAX_RETRIES", "0")
    for task in WRITE_TASKS:
        monkeypatch.setattr(task, "retry_delay_seconds", [0.0])
        monkeypatch.setattr(task, "retry_jitter_factor", None)
    forget_brokers()
    yield sandbox_reset
    forget_brokers()


@pytest.fixture(scope="session")
def seed(sandbox: SandboxHandle) -> dict[str, Any]:
    return sandbox.control.seed()


async def run_flow(flow: Any, **parameters: Any) -> tuple[Any, RunSummary]:
    """Run a flow for real; return its final state and its summary (also when it failed)."""
    state = await flow(**parameters, return_state=True)
    result = await state.result(raise_on_failure=False)
    if isinstance(result, ItemsFailed):
        return state, result.summary
    assert isinstance(result, RunSummary), f"unexpected result {result!r} ({state.message})"
    return state, result


def run_id(state: Any) -> str:
    return str(state.state_details.flow_run_id)


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
