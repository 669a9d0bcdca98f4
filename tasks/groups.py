"""Group writes: one API operation per task."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

from prefect import task
from prefect.cache_policies import NONE

from compliance_api.client import ComplianceClient
from tasks.retries import RETRY_JITTER, WRITE_RETRIES, WRITE_RETRY_DELAYS, retry_transient

#: one person's answer: (person id, status, the service's message or None)
PersonAnswer: TypeAlias = tuple[str, str, str | None]


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
) -> tuple[PersonAnswer, ...]:
    """Add up to 100 people in one call; adding is a set operation, so a retry is harmless.

    Per-person failures come back as ERROR answers, not as an exception. The answers are plain
    tuples, in request order: a bulk run makes hundreds of these task runs, and Prefect
    inspects every return value. Callers pass ``quote(person_ids)`` for the same reason.
    """
    results = await client.add_people_to_group(group_id, list(person_ids))
    return tuple((result.id, str(result.status), result.message) for result in results)
