"""Customer-trust account writes and the tag-category reads that validate them."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from compliance_api.client import ComplianceClient
from compliance_api.models import (
    AccountUpdate,
    CustomerTrustAccount,
    TagCategory,
    TagCategoryDetail,
)
from tasks.retries import (
    READ_RETRIES,
    READ_RETRY_DELAYS,
    RETRY_JITTER,
    WRITE_RETRIES,
    WRITE_RETRY_DELAYS,
    retry_transient,
)


@task(
    name="List tag categories",
    retries=READ_RETRIES,
    retry_delay_seconds=READ_RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
    persist_result=False,
)
async def list_tag_categories(client: ComplianceClient) -> list[TagCategory]:
    """Every tag category of the tenant (one unpaginated call)."""
    return await client.list_tag_categories()


@task(
    name="Read tag category",
    task_run_name="read-tag-category-{tag_category_id}",
    retries=READ_RETRIES,
    retry_delay_seconds=READ_RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
    persist_result=False,
)
async def read_tag_category(client: ComplianceClient, tag_category_id: str) -> TagCategoryDetail:
    """One category with its tags, to check tag ids before any write."""
    return await client.get_tag_category(tag_category_id)


@task(
    name="Update account tags",
    task_run_name="update-account-{account_id}",
    retries=WRITE_RETRIES,
    retry_delay_seconds=WRITE_RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
    persist_result=False,
)
async def update_account(
    client: ComplianceClient, account_id: str, update: AccountUpdate
) -> CustomerTrustAccount:
    """PATCH one account. Tags are replaced per category named in the update (others stay)."""
    return await client.update_account(account_id, update)
