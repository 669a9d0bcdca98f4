"""Customer-trust account writes and the tag-category reads that validate them."""

from __future__ import annotations

from prefect import task

from compliance_api.client import ComplianceClient
from compliance_api.models import (
    AccountUpdate,
    CustomerTrustAccount,
    TagCategory,
    TagCategoryDetail,
)
from runtime.retries import API_CALL


@task(name="List tag categories", **API_CALL)
async def list_tag_categories(client: ComplianceClient) -> list[TagCategory]:
    """Every tag category of the tenant (one unpaginated call)."""
    return await client.list_tag_categories()


@task(name="Read tag category", task_run_name="read-tag-category-{tag_category_id}", **API_CALL)
async def read_tag_category(client: ComplianceClient, tag_category_id: str) -> TagCategoryDetail:
    """One category with its tags, to check tag ids before any write."""
    return await client.get_tag_category(tag_category_id)


@task(name="Update account tags", task_run_name="update-account-{account_id}", **API_CALL)
async def update_account(
    client: ComplianceClient, account_id: str, update: AccountUpdate
) -> CustomerTrustAccount:
    """PATCH one account. Tags are replaced per category named in the update (others stay)."""
    return await client.update_account(account_id, update)
