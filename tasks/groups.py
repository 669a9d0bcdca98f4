"""Group writes: one API operation per task."""

from __future__ import annotations

from collections.abc import Sequence

from prefect import task
from prefect.cache_policies import NONE

from compliance_api.client import ComplianceClient
from compliance_api.models import GroupUpdateResult
from tasks.retries import RETRY_JITTER, WRITE_RETRIES, WRITE_RETRY_DELAYS, retry_transient


@task(
    name="Add people to group",
    task_run_name="add-{chunk_label}-to-{group_id}",
    retries=WRITE_RETRIES,
    retry_delay_seconds=WRITE_RETRY_DELAYS,
    retry_jitter_factor=RETRY_JITTER,
    retry_condition_fn=retry_transient,
    cache_policy=NONE,
    persist_result=False,
)
async def add_people_to_group(
    client: ComplianceClient, group_id: str, person_ids: Sequence[str], chunk_label: str = "people"
) -> list[GroupUpdateResult]:
    """Add up to 100 people in one call; adding is a set operation, so a retry is harmless.

    Per-person failures come back as ERROR results, not as an exception.
    """
    return await client.add_people_to_group(group_id, list(person_ids))
