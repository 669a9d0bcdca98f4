"""Group writes: one API operation per task."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import TypeAlias

import anyio
from prefect import task

from compliance_api.client import ComplianceClient
from runtime.retries import API_CALL

#: one person's answer: (person id, status, the service's message or None)
PersonAnswer: TypeAlias = tuple[str, str, str | None]


class ChunkAnswers:
    """One chunk's answers in request order, behind one opaque object: Prefect records every
    element of a returned collection for the whole flow run, but a non-collection only once."""

    __slots__ = ("answers", "__weakref__")

    def __init__(self, answers: tuple[PersonAnswer, ...]) -> None:
        self.answers = answers

    def __repr__(self) -> str:
        return f"ChunkAnswers({len(self.answers)} answer(s))"


@task(name="Add people to group", task_run_name="add-{chunk_label}-to-{group_id}", **API_CALL)
async def add_people_to_group(
    client: ComplianceClient,
    group_id: str,
    person_ids: Sequence[str],
    chunk_label: str = "people",
    call_slots: anyio.CapacityLimiter | None = None,
) -> ChunkAnswers:
    """Add up to 100 people in one call (a set operation: retries are harmless; only the
    client's). Per-person failures are ERROR answers. Callers pass ``unwalked(person_ids)``.

    ``call_slots`` caps calls in flight across task runs, held around the call (retry waits
    included) but not Prefect's bookkeeping.
    """
    async with call_slots if call_slots is not None else nullcontext():
        results = await client.add_people_to_group(group_id, list(person_ids))
    return ChunkAnswers(tuple((r.id, str(r.status), r.message) for r in results))
