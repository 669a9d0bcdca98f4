"""Knowledge-base reads: a slice of pages of resources or of the answer library per task run.

A page is one API call the client retries on its own (the one retry layer); a task run per page
cost more than the call (docs/performance.md), so the UI shows one step per slice of pages.
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
    Page,
)
from runtime.retries import API_CALL


@dataclass
class PagesRead:
    """The items of a slice of pages, and where the next slice starts (None: the end)."""

    items: list[KnowledgeBaseResourceSummary | AnswerLibraryEntrySummary] = field(
        default_factory=list
    )
    pages: int = 0
    cursor: str | None = None


async def _read(
    client: ComplianceClient,
    filters: KnowledgeBaseFilter | AnswerLibraryFilter,
    page_size: int,
    cursor: str | None,
    pages: int,
) -> PagesRead:
    read = PagesRead()
    while read.pages < pages:
        page: Page[KnowledgeBaseResourceSummary] | Page[AnswerLibraryEntrySummary]
        if isinstance(filters, KnowledgeBaseFilter):
            page = await client.list_knowledge_base_summaries_page(filters, page_size, cursor)
        else:
            page = await client.list_answer_library_summaries_page(filters, page_size, cursor)
        read.items.extend(page.data)
        read.pages += 1
        cursor = page.page_info.end_cursor
        if not page.page_info.has_next_page or not cursor:
            return read
    read.cursor = cursor
    return read


@task(name="Read knowledge-base resources", **API_CALL)
async def read_resources(
    client: ComplianceClient,
    filters: KnowledgeBaseFilter,
    page_size: int,
    cursor: str | None,
    pages: int,
) -> PagesRead:
    """Up to ``pages`` pages of resources from ``cursor``."""
    return await _read(client, filters, page_size, cursor, pages)


@task(name="Read the answer library", **API_CALL)
async def read_answers(
    client: ComplianceClient,
    filters: AnswerLibraryFilter,
    page_size: int,
    cursor: str | None,
    pages: int,
) -> PagesRead:
    """Up to ``pages`` pages of answer-library entries from ``cursor``."""
    return await _read(client, filters, page_size, cursor, pages)
