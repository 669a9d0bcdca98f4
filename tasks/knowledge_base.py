"""Knowledge-base scans: a slice of pages per task run (docs/performance.md), each page added to
the report's tally as it arrives, so only one page of records is held at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import task

from compliance_api.client import ComplianceClient
from compliance_api.models import (
    AnswerLibraryEntrySummary,
    AnswerLibraryFilter,
    KnowledgeBaseFilter,
    KnowledgeBaseResourceSummary,
)
from read_reports.freshness import FreshnessTally, KbItem, Reason, as_item
from runtime.retries import API_CALL

#: the findings an event tells an owner about
NOTIFIED = (Reason.EXPIRING_SOON, Reason.EXPIRED)


@dataclass
class SliceScanned:
    """A slice tallied: the next slice's cursor (None: the end), and the items to notify about."""

    pages: int = 0
    cursor: str | None = None
    to_notify: list[tuple[KbItem, Reason]] = field(default_factory=list)


@task(**API_CALL)
async def scan_pages(
    client: ComplianceClient,
    filters: KnowledgeBaseFilter | AnswerLibraryFilter,
    page_size: int,
    cursor: str | None,
    pages: int,
    tally: FreshnessTally,
    notify: bool,
) -> SliceScanned:
    """Up to ``pages`` pages from ``cursor`` of the list ``filters`` belongs to, each added to
    ``tally`` as it arrives."""
    scanned = SliceScanned()
    kb = isinstance(filters, KnowledgeBaseFilter)
    summary: type[KnowledgeBaseResourceSummary | AnswerLibraryEntrySummary] = (
        KnowledgeBaseResourceSummary if kb else AnswerLibraryEntrySummary
    )
    while scanned.pages < pages:
        page = await client.list_page(
            summary, filters=filters, page_size=page_size, page_cursor=cursor
        )
        for record in page.data:
            item = as_item(record)
            reasons = tally.add(item)
            if notify and reasons:
                scanned.to_notify += [(item, reason) for reason in NOTIFIED if reason in reasons]
        scanned.pages += 1
        cursor = page.page_info.end_cursor
        if not page.page_info.has_next_page or not cursor:
            return scanned
    scanned.cursor = cursor
    return scanned


#: the step each list shows in the UI
scan_resources = scan_pages.with_options(name="Scan knowledge-base resources")
scan_answers = scan_pages.with_options(name="Scan the answer library")
