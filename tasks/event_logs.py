"""Audit-log tasks: read a page of the log, load and save the bridge's checkpoint, write a page
of the export: each a step the UI shows and Prefect can retry on its own.

How the pages are walked and deduplicated lives in ``audit_log/reading.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from prefect import get_run_logger, task
from prefect.cache_policies import NONE

from audit_log.checkpoints import EventLogCheckpoint, VariableCheckpointStore
from audit_log.jsonl_export import DayFileExport, ExportCheckpoint
from compliance_api.client import ComplianceClient
from compliance_api.errors import InvalidRequestError
from compliance_api.models import EventLogEntry, Page
from runtime.retries import API_CALL


@dataclass
class FetchedPage:
    page: Page[EventLogEntry]
    query_start: datetime | None
    by_cursor: bool


@task(name="Read a page of the audit log", **API_CALL)
async def read_event_log_page(
    client: ComplianceClient, checkpoint: EventLogCheckpoint, page_size: int
) -> FetchedPage:
    """GET /v1/event-logs after the checkpoint.

    The client retries transient failures itself (an idempotent GET), the only retry layer
    (``runtime/retries.py``), so no task retries here.
    """
    if checkpoint.cursor is not None:
        try:
            page = await client.list_event_logs_page(
                start_date=checkpoint.cursor_start_date,
                page_cursor=checkpoint.cursor,
                page_size=page_size,
            )
            return FetchedPage(page, checkpoint.cursor_start_date, by_cursor=True)
        except InvalidRequestError as exc:
            get_run_logger().warning(
                "The service rejected the stored cursor (%s); resuming from startDate=%s and "
                "skipping entries already handled",
                exc.message,
                checkpoint.resume_date(),
            )
    start = checkpoint.resume_date()
    page = await client.list_event_logs_page(start_date=start, page_size=page_size)
    return FetchedPage(page, start, by_cursor=False)


@task(name="Save the audit-log checkpoint", cache_policy=NONE, retries=3, retry_delay_seconds=2)
async def save_log_checkpoint(
    store: VariableCheckpointStore, checkpoint: EventLogCheckpoint
) -> None:
    await store.save(checkpoint)


@task(name="Load the audit-log checkpoint", cache_policy=NONE, retries=3, retry_delay_seconds=2)
async def load_log_checkpoint(store: VariableCheckpointStore) -> EventLogCheckpoint | None:
    return await store.load()


@task(name="Write a page to the day files", cache_policy=NONE)
async def write_export_page(
    export: DayFileExport,
    checkpoint: ExportCheckpoint,
    entries: list[EventLogEntry],
    log_checkpoint: EventLogCheckpoint,
) -> ExportCheckpoint:
    """Append and fsync, then commit the checkpoint: the order that makes it exactly once.

    The caller passes ``unwalked(entries)`` (``runtime/task_inputs.py``), so Prefect does not
    walk a page's 100 entries field by field before the task starts.
    """
    return await asyncio.to_thread(_write_and_commit, export, checkpoint, entries, log_checkpoint)


def _write_and_commit(
    export: DayFileExport,
    checkpoint: ExportCheckpoint,
    entries: list[EventLogEntry],
    log_checkpoint: EventLogCheckpoint,
) -> ExportCheckpoint:
    sizes, lines = export.append_page(checkpoint, entries)
    committed = ExportCheckpoint(log=log_checkpoint, files=sizes, lines=lines)
    export.commit(committed)
    return committed
