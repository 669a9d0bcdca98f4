"""Vendor writes: one API operation per task."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from compliance_api.client import ComplianceClient
from compliance_api.models import Vendor
from tasks.retries import RETRY_JITTER, WRITE_RETRIES, WRITE_RETRY_DELAYS, retry_transient


@task(
    name="Promote discovered vendor",
    task_run_name="promote-{discovered_vendor_id}",
    retries=WRITE_RETRIES,
    retry_delay_seconds=WRITE_RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
    persist_result=False,
)
async def promote_discovered_vendor(client: ComplianceClient, discovered_vendor_id: str) -> Vendor:
    """Add a discovered vendor to the managed vendors (repeating it returns the same vendor)."""
    return await client.add_discovered_vendor_to_managed(discovered_vendor_id)
