"""The page reader: one page ahead at most, never past the end or the caller's limit."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from audit_log.checkpoints import EventLogCheckpoint
from audit_log.reading import _new_pages
from compliance_api.models import LoggedEvent, Page, PageInfo
from compliance_api.prefetch import request_sent

T0 = datetime(2025, 3, 1, tzinfo=UTC)


class FakeLog:
    """Five pages of two entries; counts the pages asked for and those still in flight."""

    def __init__(self, pages: int = 5) -> None:
        self.pages = pages
        self.asked: list[str | None] = []
        self.in_flight = 0

    async def fetch(
        self, start: datetime | None, cursor: str | None, size: int
    ) -> Page[LoggedEvent]:
        self.asked.append(cursor)
        self.in_flight += 1
        request_sent()  # what the client's httpx hook reports
        try:
            await asyncio.sleep(0.01)
        finally:
            self.in_flight -= 1
        n = 0 if cursor is None else int(cursor) + 1
        data = [
            LoggedEvent.model_validate(
                {"id": f"e{n}-{i}", "date": (T0 + timedelta(minutes=n, seconds=i)).isoformat()}
            )
            for i in range(2)
        ]
        info = PageInfo(has_next_page=n + 1 < self.pages, end_cursor=str(n))
        return Page[LoggedEvent](data=data, page_info=info)


async def test_reads_every_page_once_in_order() -> None:
    log = FakeLog()
    ids = [
        entry.id
        async for page in _new_pages(log.fetch, EventLogCheckpoint(), 2, None)
        for entry in page.new_entries
    ]
    assert ids == [f"e{n}-{i}" for n in range(5) for i in range(2)]
    assert log.asked == [None, "0", "1", "2", "3"]  # no request past the last page


async def test_the_read_ahead_stops_at_max_pages() -> None:
    log = FakeLog()
    pages = [page async for page in _new_pages(log.fetch, EventLogCheckpoint(), 2, 2)]
    assert len(pages) == 2 and log.asked == [None, "0"]


async def test_a_caller_that_stops_early_leaves_no_request_running() -> None:
    log = FakeLog()
    reader = _new_pages(log.fetch, EventLogCheckpoint(), 2, None)
    first = await anext(reader)
    assert first.new_entries[0].id == "e0-0"
    assert log.in_flight == 1  # the next page is being read while this one is handled
    await reader.aclose()
    await asyncio.sleep(0)
    assert log.in_flight == 0
