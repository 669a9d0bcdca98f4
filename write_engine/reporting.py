"""What a write run leaves in the Prefect UI: results table, progress, failed-items record, event.

The failed-items record is a table artifact of the flow run, so a rerun works from any machine
that reaches the Prefect API. It holds item inputs only, never a credential.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefect.artifacts import (
    acreate_progress_artifact,
    acreate_table_artifact,
    aupdate_progress_artifact,
)
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    ArtifactFilterKey,
)
from prefect.client.schemas.sorting import ArtifactSort
from prefect.events import Event
from prefect.logging import get_run_logger

from runtime.events import deliver
from runtime.retries import again_when_busy
from write_engine.outcomes import AnyResult, Outcome, RunSummary

#: key prefix of the artifact that lists a run's failed items with their rerun inputs
FAILED_ITEMS_PREFIX = "failed-items-"
#: the event a run with failed items emits (automations hang reruns on it)
FAILED_ITEMS_EVENT = "compliance.write-run.failed-items"
#: that event's resource label: "true" when some failed items are worth an automatic rerun
RETRYABLE_LABEL = "compliance.retryable-items"
#: most rows of succeeded/skipped items shown in the results table (failures are always shown)
MAX_OK_ROWS = 1000

#: stable namespace for event ids, so a replayed run end is deduplicated by the server
_EVENT_NAMESPACE = uuid.UUID("b7e0c1d2-5f4a-4b8e-9c3d-2a1f0e9d8c7b")


def run_link(flow_run_id: str) -> str:
    """A link to a flow run, relative to the Prefect UI (works in markdown cells)."""
    return f"[{flow_run_id}](/runs/flow-run/{flow_run_id})"


def rerun_hint(flow_run_id: str) -> str:
    return (
        f"Rerun the failed items with `python -m flows.rerun {flow_run_id}` or the "
        f"'rerun-failed-items/on-failed-items' deployment (flow_run_id={flow_run_id})."
    )


def result_rows(
    results: Sequence[AnyResult], max_others: int = MAX_OK_ROWS
) -> tuple[list[dict[str, str]], int]:
    """Rows for the table: every failure, then other items up to ``max_others``."""
    failures: list[AnyResult] = []
    others: list[AnyResult] = []
    for result in results:
        if result.outcome.is_failure:
            failures.append(result)
        elif len(others) < max_others:
            others.append(result)
    shown = failures + others
    rows = [
        {
            "item": r.item,
            "outcome": r.outcome.value,
            "reason": r.reason,
            "response": r.response,
        }
        for r in shown
    ]
    return rows, len(results) - len(shown)


@again_when_busy
async def publish_results_table(
    flow_key: str, summary: RunSummary, results: Sequence[AnyResult]
) -> None:
    rows, hidden = result_rows(results)
    lines = [f"**{summary.headline()}**"]
    if summary.duplicates_removed:
        lines.append(
            f"{len(summary.duplicates_removed)} duplicate(s) removed: "
            + ", ".join(summary.duplicates_removed[:20])
            + (" ..." if len(summary.duplicates_removed) > 20 else "")
        )
    if summary.approval:
        lines.append(f"{summary.approval.line()}.")
    if summary.rerun_of:
        lines.append(f"Rerun (attempt {summary.attempt}) of {run_link(summary.rerun_of)}.")
    if hidden:
        lines.append(f"{hidden} succeeded/skipped row(s) not shown.")
    if summary.failed and summary.flow_run_id:
        lines.append(rerun_hint(summary.flow_run_id))
    await acreate_table_artifact(
        rows or [{"item": "", "outcome": "", "reason": "no items", "response": ""}],
        key=f"{flow_key}-results",
        description="\n\n".join(lines),
    )


class Progress:
    """A progress artifact, updated as units of work finish (at most once a second). Only a
    display: an update runs beside the work, and one the server fails is skipped, never the run's
    failure (a busy server costs time, not items)."""

    def __init__(self, flow_key: str, total_units: int) -> None:
        self.flow_key = flow_key
        self.total = max(total_units, 1)
        self.done = 0
        self._artifact_id: uuid.UUID | None = None
        self._last_update = 0.0
        self._updating: asyncio.Task[None] | None = None
        self._warned = False

    async def start(self) -> None:
        try:
            self._artifact_id = await acreate_progress_artifact(
                0.0, key=f"{self.flow_key}-progress", description=self._describe()
            )
        except Exception as error:
            self._skipped(error)
        self._last_update = time.monotonic()

    async def advance(self) -> None:
        self.done += 1
        now = time.monotonic()
        busy = self._updating is not None and not self._updating.done()
        if not busy and (self.done >= self.total or now - self._last_update >= 1.0):
            self._last_update = now
            self._updating = asyncio.ensure_future(self._update())

    async def finish(self) -> None:
        self.done = self.total
        if self._updating is not None:
            await self._updating
        await self._update()

    async def _update(self) -> None:
        if self._artifact_id is None:
            return
        try:
            await aupdate_progress_artifact(
                self._artifact_id, 100.0 * self.done / self.total, description=self._describe()
            )
        except Exception as error:
            self._skipped(error)

    def _skipped(self, error: Exception) -> None:
        if not self._warned:
            self._warned = True
            get_run_logger().warning(
                "The progress artifact was not updated (%s: %s); the run goes on",
                type(error).__name__,
                error,
            )

    def _describe(self) -> str:
        return f"{min(self.done, self.total)} of {self.total} call(s) done"


@again_when_busy
async def publish_failed_items(flow_key: str, summary: RunSummary) -> None:
    """Record the failed items with their rerun input; always written (empty if none), so a
    finished run is told apart from one that crashed before reporting."""
    rows = [
        {
            "item": r.item,
            "outcome": r.outcome.value,
            "reason": r.reason,
            "rerun_input": json.dumps(r.rerun_input, sort_keys=True),
            "attempt": summary.attempt,
        }
        for r in summary.failed_items
        if r.rerun_input is not None
    ]
    description = f"{len(rows)} failed item(s) of this run, with the input a rerun sends." + (
        f" {rerun_hint(summary.flow_run_id)}" if rows and summary.flow_run_id else ""
    )
    await acreate_table_artifact(
        rows or {"item": [], "outcome": [], "reason": [], "rerun_input": [], "attempt": []},
        key=f"{FAILED_ITEMS_PREFIX}{flow_key}",
        description=description,
    )


@dataclass(frozen=True)
class FailedItemsRecord:
    """What a finished write run recorded about its failed items."""

    flow_key: str
    rows: list[dict[str, Any]]

    @property
    def inputs(self) -> list[dict[str, Any]]:
        return [json.loads(row["rerun_input"]) for row in self.rows]

    @property
    def attempt(self) -> int:
        """Which attempt the recorded run was (the original run is attempt 1)."""
        return int(self.rows[0].get("attempt") or 1) if self.rows else 1


async def read_failed_items(flow_run_id: str) -> FailedItemsRecord | None:
    """The failed-items record of a flow run, or None if the run never wrote one."""
    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(
                flow_run_id=ArtifactFilterFlowRunId(any_=[uuid.UUID(flow_run_id)]),
                key=ArtifactFilterKey(like_=f"{FAILED_ITEMS_PREFIX}%"),
            ),
            sort=ArtifactSort.CREATED_DESC,
            limit=1,
        )
    if not artifacts:
        return None
    artifact = artifacts[0]
    assert artifact.key is not None
    data = json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data
    return FailedItemsRecord(artifact.key.removeprefix(FAILED_ITEMS_PREFIX), _rows(data))


def _rows(data: Any) -> list[dict[str, Any]]:
    """Table artifacts are stored as a list of rows or as a dict of columns."""
    if isinstance(data, list):
        return [dict(row) for row in data]
    if isinstance(data, dict):  # transposed: one row per position in the columns
        return [dict(zip(data, row, strict=True)) for row in zip(*data.values(), strict=True)]
    return []


async def emit_failed_items_event(flow_key: str, summary: RunSummary) -> None:
    """Tell automations this run left failed items; ``RETRYABLE_LABEL`` says whether any failed
    transiently, so an automatic rerun can leave refusals to a person. Sent over HTTP and
    acknowledged; if it cannot be, the run's log says that no automatic rerun will follow."""
    if not summary.failed or summary.flow_run_id is None:
        return
    by_outcome = {
        outcome.value: n for outcome, n in summary.counts.items() if outcome.is_failure and n
    }
    retryable = summary.counts.get(Outcome.FAILED_RETRYABLE, 0)
    event = Event(
        event=FAILED_ITEMS_EVENT,
        resource={
            "prefect.resource.id": f"prefect.flow-run.{summary.flow_run_id}",
            "prefect.resource.role": "flow-run",
            "compliance.write-flow": flow_key,
            RETRYABLE_LABEL: "true" if retryable else "false",
        },
        payload={
            "flow": flow_key,
            "flow_run_id": summary.flow_run_id,
            "failed": summary.failed,
            "retryable": retryable,
            "failed_by_outcome": by_outcome,
            "total": summary.total,
            "attempt": summary.attempt,
            "rerun_of": summary.rerun_of,
        },
        id=uuid.uuid5(_EVENT_NAMESPACE, f"{FAILED_ITEMS_EVENT}:{summary.flow_run_id}"),
    )
    hint = rerun_hint(summary.flow_run_id)
    what = f"the {FAILED_ITEMS_EVENT} event: no automatic rerun follows; {hint}"
    await deliver([event], what)
