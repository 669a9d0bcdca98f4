"""Knowledge-base reads: one API operation per task (resources and the answer library)."""

from __future__ import annotations

from prefect import task

from compliance_api.client import ComplianceClient
from compliance_api.models import (
    AnswerLibraryEntry,
    AnswerLibraryFilter,
    KnowledgeBaseFilter,
    KnowledgeBaseResource,
    Page,
)
from runtime.retries import API_CALL


@task(name="Read a page of knowledge-base resources", **API_CALL)
async def read_resources_page(
    client: ComplianceClient, filters: KnowledgeBaseFilter, page_size: int, cursor: str | None
) -> Page[KnowledgeBaseResource]:
    return await client.list_knowledge_base_resources_page(filters, page_size, cursor)


@task(name="Read a page of the answer library", **API_CALL)
async def read_answers_page(
    client: ComplianceClient, filters: AnswerLibraryFilter, page_size: int, cursor: str | None
) -> Page[AnswerLibraryEntry]:
    return await client.list_answer_library_page(filters, page_size, cursor)
