"""Vendor writes: one API operation per task."""

from __future__ import annotations

from prefect import task

from compliance_api.client import ComplianceClient
from compliance_api.models import Vendor
from runtime.retries import API_CALL


@task(name="Promote discovered vendor", task_run_name="promote-{discovered_vendor_id}", **API_CALL)
async def promote_discovered_vendor(client: ComplianceClient, discovered_vendor_id: str) -> Vendor:
    """Add a discovered vendor to the managed vendors (repeating it returns the same vendor)."""
    return await client.add_discovered_vendor_to_managed(discovered_vendor_id)
