"""Document writes: one API operation per task."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from compliance_api.client import ComplianceClient
from compliance_api.models import DocumentLink, DocumentLinkCreate
from tasks.retries import RETRY_JITTER, WRITE_RETRIES, WRITE_RETRY_DELAYS, retry_if_unapplied


@task(
    name="Attach document link",
    task_run_name="attach-link-to-{document_id}",
    retries=WRITE_RETRIES,
    retry_delay_seconds=WRITE_RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_if_unapplied,
    cache_policy=NONE,
    persist_result=False,
)
async def create_document_link(
    client: ComplianceClient, document_id: str, link: DocumentLinkCreate
) -> DocumentLink:
    """Create one link. Not idempotent: retried only when the request provably never arrived
    (a 429, or a connection that failed before sending); anything else is left for review."""
    return await client.create_document_link(document_id, link)
