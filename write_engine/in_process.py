"""Run a write flow in this process (the demo, the tests) and get both what it returned and the
state the server recorded.

The summary is kept as the flow makes it (``keep_summary``), never read from the final state:
when the server had accepted the final state but its answer was lost (a busy server, a read
timeout), Prefect's client sends the same proposal again, the server answers with the state it
already holds (a repeated transition is refused), and that state carries no data unless results
are persisted. ``state.result()`` then raised ``MissingResult`` on a run that had completed, and
a bare ``FailedRun`` instead of ``ItemsFailed`` on one whose items failed.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.exceptions import FailedRun

from write_engine.outcomes import ItemsFailed, RunSummary

#: the summaries of the write flows run by ``run_in_process`` (subflows first, its own last)
_kept: ContextVar[list[RunSummary] | None] = ContextVar("in_process_summaries", default=None)


def keep_summary(summary: RunSummary) -> None:
    """Hand a run's summary to ``run_in_process`` when one is waiting for it (else nothing)."""
    kept = _kept.get()
    if kept is not None:
        kept.append(summary)


async def run_in_process(flow: Any, **parameters: Any) -> tuple[State, RunSummary]:
    """Run ``flow`` with ``parameters``; its recorded final state and its summary, also when
    items failed. Any other error is raised."""
    kept: list[RunSummary] = []
    token = _kept.set(kept)
    try:
        await flow(**parameters)
    except (ItemsFailed, FailedRun):
        if not kept:  # it failed before it had a summary: not a failure of items
            raise
    finally:
        _kept.reset(token)
    summary = kept[-1] if kept else None
    if summary is None or summary.flow_run_id is None:
        raise TypeError(f"{flow.name} made no summary of a flow run")
    return await recorded_state(summary.flow_run_id), summary


async def recorded_state(flow_run_id: str) -> State:
    """The run's current state as the server holds it."""
    async with get_client() as client:
        run = await client.read_flow_run(UUID(flow_run_id))
    if run.state is None:
        raise LookupError(f"flow run {flow_run_id} has no state")
    return run.state
