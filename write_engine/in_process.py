"""Run a write flow in this process (the demo, the tests) and get both what it returned and the
state the server recorded.

The summary is the flow's own return value, never the final state's data: when the server had
accepted the final state but its answer was lost (a busy server, a read timeout), Prefect's client
sends the same proposal again, the server answers with the state it already holds (a repeated
transition is refused), and that state carries no result unless results are persisted, so
``state.result()`` raised ``MissingResult`` on a run that had completed.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State

from write_engine.outcomes import ItemsFailed, RunSummary


async def run_in_process(flow: Any, **parameters: Any) -> tuple[State, RunSummary]:
    """Run ``flow`` with ``parameters``; its recorded final state and its summary, also when
    items failed (the Failed state's ``ItemsFailed``). Any other error is raised."""
    try:
        summary = await flow(**parameters)
    except ItemsFailed as failed:
        summary = failed.summary
    if not isinstance(summary, RunSummary) or summary.flow_run_id is None:
        raise TypeError(f"{flow.name} returned {summary!r}, not the summary of a flow run")
    return await recorded_state(summary.flow_run_id), summary


async def recorded_state(flow_run_id: str) -> State:
    """The run's current state as the server holds it."""
    async with get_client() as client:
        run = await client.read_flow_run(UUID(flow_run_id))
    if run.state is None:
        raise LookupError(f"flow run {flow_run_id} has no state")
    return run.state
