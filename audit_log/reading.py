"""Reading the audit log forward from a checkpoint, one page at a time.

The log is ordered oldest first (the sandbox and the published schema agree). The reader resumes
with the checkpoint's cursor (``pageCursor`` starts after the marked entry), repeating the
``startDate`` of the query that issued it. A cursor the service rejects (400) is abandoned for
``startDate`` = the last handled entry's date; entries at or before the checkpoint are then
dropped by date and by the ids remembered at that timestamp, with a warning in the log.

Only one page is in memory at a time, however long the log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from audit_log.checkpoints import EventLogCheckpoint
from compliance_api.client import ComplianceClient
from compliance_api.models import EventLogEntry
from tasks.event_logs import read_event_log_page


@dataclass
class LogPage:
    """One page of the log: the entries not yet handled, and the checkpoint once they are."""

    new_entries: list[EventLogEntry]
    checkpoint: EventLogCheckpoint
    fetched: int
    skipped: int
    has_next_page: bool


async def iter_new_pages(
    client: ComplianceClient,
    checkpoint: EventLogCheckpoint,
    *,
    page_size: int,
    max_pages: int | None = None,
) -> AsyncIterator[LogPage]:
    """Pages after ``checkpoint``; the caller makes each durable, then saves ``page.checkpoint``.

    Each yielded checkpoint assumes the previous one was saved; if it was not (a crash), the
    next run starts again from the last saved one and the dedupe drops what is repeated.
    """
    pages = 0
    while max_pages is None or pages < max_pages:
        fetched = await read_event_log_page(client, checkpoint, page_size)
        entries = fetched.page.data
        if not entries:
            return
        fresh = _unique(
            [e for e in entries if not checkpoint.already_handled(e, by_cursor=fetched.by_cursor)]
        )
        checkpoint = checkpoint.after_page(
            entries, fetched.page.page_info.end_cursor, len(fresh)
        ).model_copy(update={"cursor_start_date": fetched.query_start})
        pages += 1
        yield LogPage(
            new_entries=fresh,
            checkpoint=checkpoint,
            fetched=len(entries),
            skipped=len(entries) - len(fresh),
            has_next_page=fetched.page.page_info.has_next_page,
        )
        if not fetched.page.page_info.has_next_page:
            return


def _unique(entries: list[EventLogEntry]) -> list[EventLogEntry]:
    """A page never repeats an id, but a defensive pass costs nothing at 100 entries."""
    seen: set[str] = set()
    unique: list[EventLogEntry] = []
    for entry in entries:
        if entry.id not in seen:
            seen.add(entry.id)
            unique.append(entry)
    return unique
