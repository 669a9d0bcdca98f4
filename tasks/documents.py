"""Document writes: one API operation per task."""

from __future__ import annotations

from prefect import task

from compliance_api.client import ComplianceClient
from compliance_api.models import DocumentLink, DocumentLinkCreate
from runtime.retries import API_CALL


@task(name="Attach document link", task_run_name="attach-link-to-{document_id}", **API_CALL)
async def create_document_link(
    client: ComplianceClient, document_id: str, link: DocumentLinkCreate
) -> DocumentLink:
    """Create one link. Not idempotent: retried only when the request provably never arrived
    (a 429, or a connection that failed before sending); anything else is left for review."""
    return await client.create_document_link(document_id, link)
