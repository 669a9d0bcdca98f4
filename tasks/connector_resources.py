"""Connector-resource reads: one API operation per task (whole lists, no pagination)."""

from __future__ import annotations

from prefect import task

from compliance_api.client import ComplianceClient
from compliance_api.models import PackageVulnerability, UserSecurityTrainingStatus
from runtime.retries import API_CALL


@task(name="Read package vulnerabilities", **API_CALL)
async def read_package_vulnerabilities(
    client: ComplianceClient, resource_id: str
) -> list[PackageVulnerability]:
    return await client.list_package_vulnerabilities(resource_id)


@task(name="Read security-training statuses", **API_CALL)
async def read_security_training(
    client: ComplianceClient, resource_id: str
) -> list[UserSecurityTrainingStatus]:
    return await client.list_user_security_training(resource_id)
