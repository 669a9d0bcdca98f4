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
    """The answers for one chunk, in request order, behind one opaque object.

    Prefect walks a task's return value and records every element it finds in a collection
    (for dependency tracking) in a map that lives as long as the flow run: a tuple of 100
    answers would cost 100 entries per call, 100,000 in a bulk run. An object that is not a
    collection is recorded once.
    """

    __slots__ = ("answers", "__weakref__")

    def __init__(self, answers: tuple[PersonAnswer, ...]) -> None:
        self.answers = answers

    def __repr__(self) -> str:
        return f"ChunkAnswers({len(self.answers)} answer(s))"


@task(
    name="Add people to group",
    task_run_name="add-{chunk_label}-to-{group_id}",
    **API_CALL,
)
async def add_people_to_group(
    client: ComplianceClient,
    group_id: str,
    person_ids: Sequence[str],
    chunk_label: str = "people",
    call_slots: anyio.CapacityLimiter | None = None,
) -> ChunkAnswers:
    """Add up to 100 people in one call; adding is a set operation, so a retry is harmless.

    The client's retries are the only ones (at most 6 sends of the chunk, ``runtime/retries.py``);
    this task adds none.

    Per-person failures come back as ERROR answers, not as an exception. The answers are plain
    tuples, in request order, in one :class:`ChunkAnswers`: a bulk run makes hundreds of these
    task runs, and Prefect inspects every argument and return value. Callers pass
    ``unwalked(person_ids)`` for the same reason.

    ``call_slots`` caps the calls in flight across task runs and is held around the call only,
    so Prefect's bookkeeping of this run does not keep a call slot busy. The client's retry
    waits are part of the call: a chunk backing off holds its slot, so a struggling service
    gets no more calls at once than ``concurrency``.
    """
    async with call_slots if call_slots is not None else nullcontext():
        results = await client.add_people_to_group(group_id, list(person_ids))
    return ChunkAnswers(tuple((r.id, str(r.status), r.message) for r in results))
