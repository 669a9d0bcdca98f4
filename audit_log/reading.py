"""Reading the audit log (oldest first) forward from a checkpoint, one page at a time.

Resumes by the checkpoint's cursor, or by date if the service rejects it (docs/read-flows.md).
At most two pages are in memory: the caller's and the next, requested as soon as this page's
cursor is known (``compliance_api/prefetch.py``). Pages are plain client calls, not task runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Generic, TypeVar

from prefect.exceptions import MissingContextError
from prefect.logging import get_run_logger

from audit_log.checkpoints import EventLogCheckpoint
from compliance_api.client import ComplianceClient
from compliance_api.errors import InvalidRequestError
from compliance_api.models import EventLogEntry, LoggedEvent, Page
from compliance_api.prefetch import started

E = TypeVar("E", EventLogEntry, LoggedEvent)
#: a client method reading one page: (start_date, page_cursor, page_size) -> the page
Fetch = Callable[[datetime | None, str | None, int], Awaitable[Page[E]]]


@dataclass
class FetchedPage(Generic[E]):
    page: Page[E]
    query_start: datetime | None
    by_cursor: bool


async def read_page(
    fetch: Fetch[E], checkpoint: EventLogCheckpoint, page_size: int
) -> FetchedPage[E]:
    """GET /v1/event-logs after the checkpoint: by its cursor, or by date if that is refused."""
    if checkpoint.cursor is not None:
        try:
            page = await fetch(checkpoint.cursor_start_date, checkpoint.cursor, page_size)
            return FetchedPage(page, checkpoint.cursor_start_date, by_cursor=True)
        except InvalidRequestError as exc:
            _logger().warning(
                "The service rejected the stored cursor (%s); resuming from startDate=%s and "
                "skipping entries already handled",
                exc.message,
                checkpoint.resume_date(),
            )
    start = checkpoint.resume_date()
    return FetchedPage(await fetch(start, None, page_size), start, by_cursor=False)


def _logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    """The run's logger (the warning belongs in the run's log), else this module's."""
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


@dataclass
class LogPage(Generic[E]):
    """One page of the log: the entries not yet handled, and the checkpoint once they are."""

    new_entries: list[E]
    checkpoint: EventLogCheckpoint
    skipped: int
    has_next_page: bool


def _fetch(client: ComplianceClient, item: type[E]) -> Fetch[E]:
    """The client's ``list_page`` of the event log, called as :func:`read_page` calls it."""
    return lambda start, cursor, size: client.list_page(
        item, start_date=start, page_cursor=cursor, page_size=size
    )


def iter_new_pages(
    client: ComplianceClient,
    checkpoint: EventLogCheckpoint,
    *,
    page_size: int,
    max_pages: int | None = None,
) -> AsyncIterator[LogPage[EventLogEntry]]:
    """Pages after ``checkpoint``; the caller makes each durable, then saves ``page.checkpoint``
    (after a crash the next run resumes from the last saved one; the dedupe drops repeats)."""
    return _new_pages(_fetch(client, EventLogEntry), checkpoint, page_size, max_pages)


def iter_new_logged_pages(
    client: ComplianceClient,
    checkpoint: EventLogCheckpoint,
    *,
    page_size: int,
    max_pages: int | None = None,
) -> AsyncIterator[LogPage[LoggedEvent]]:
    """:func:`iter_new_pages` of entries kept as the service sent them (only id and date read)."""
    return _new_pages(_fetch(client, LoggedEvent), checkpoint, page_size, max_pages)


async def _new_pages(
    fetch: Fetch[E], checkpoint: EventLogCheckpoint, page_size: int, max_pages: int | None
) -> AsyncIterator[LogPage[E]]:
    pages = 0
    pending: asyncio.Task[FetchedPage[E]] | None = await started(
        read_page(fetch, checkpoint, page_size)
    )
    try:
        while pending is not None:
            fetched = await pending
            pending = None
            entries = fetched.page.data
            if not entries:
                return
            fresh = checkpoint.unhandled(entries, by_cursor=fetched.by_cursor)
            checkpoint = checkpoint.after_page(
                entries, fetched.page.page_info.end_cursor, len(fresh)
            ).model_copy(update={"cursor_start_date": fetched.query_start})
            pages += 1
            if fetched.page.page_info.has_next_page and (max_pages is None or pages < max_pages):
                pending = await started(read_page(fetch, checkpoint, page_size))
            yield LogPage(
                new_entries=fresh,
                checkpoint=checkpoint,
                skipped=len(entries) - len(fresh),
                has_next_page=fetched.page.page_info.has_next_page,
            )
    finally:
        if pending is not None:
            pending.cancel()
