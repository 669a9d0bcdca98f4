"""Prefect flow-run operations for crash recovery: read a run's state history, reschedule it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from prefect import task
from prefect.cache_policies import NONE
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.responses import OrchestrationResult
from prefect.states import AwaitingRetry

FLOW_RUN_RESOURCE_PREFIX = "prefect.flow-run."


@dataclass(frozen=True)
class RunHistory:
    """What crash recovery needs to know about one flow run."""

    flow_run_id: str
    name: str
    deployment_id: str | None
    parameters: dict[str, Any]
    state_type: StateType | None
    crashes: int
    started: bool


def flow_run_uuid(value: str) -> UUID:
    """A flow run id, given bare or as the event resource id ``prefect.flow-run.<id>``."""
    raw = value.removeprefix(FLOW_RUN_RESOURCE_PREFIX) if isinstance(value, str) else value
    return UUID(str(raw))


@task(name="Read a flow run and its states", cache_policy=NONE, retries=3, retry_delay_seconds=2)
async def read_run_history(flow_run_id: UUID) -> RunHistory:
    async with get_client() as client:
        run = await client.read_flow_run(flow_run_id)
        states = await client.read_flow_run_states(flow_run_id)
    return RunHistory(
        flow_run_id=str(run.id),
        name=run.name,
        deployment_id=str(run.deployment_id) if run.deployment_id else None,
        parameters=dict(run.parameters),
        state_type=run.state.type if run.state else None,
        crashes=sum(1 for state in states if state.type == StateType.CRASHED),
        started=any(state.type == StateType.RUNNING for state in states),
    )


@task(name="Reschedule a crashed flow run", cache_policy=NONE, retries=3, retry_delay_seconds=2)
async def reschedule_run(flow_run_id: UUID, message: str) -> bool:
    """Back to Scheduled (as the UI's Retry does), so a worker starts it again; False if the
    server refused (the run left Crashed meanwhile, e.g. an operator acted first)."""
    async with get_client() as client:
        result: OrchestrationResult[Any] = await client.set_flow_run_state(
            flow_run_id,
            AwaitingRetry(scheduled_time=datetime.now(UTC), message=message),
            force=True,
        )
    return result.state is not None and result.state.type == StateType.SCHEDULED
