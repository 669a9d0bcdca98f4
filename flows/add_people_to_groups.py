"""Runbook: add people to groups, per group in chunks of at most 100 people (one call each).

Each person's SUCCESS or ERROR comes back in the chunk's answer; a chunk that keeps failing
marks its people failed_retryable.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any

import anyio
from prefect import flow
from prefect.client.schemas.objects import State

from compliance_api.client import ComplianceClient
from compliance_api.errors import InputError
from compliance_api.models import MAX_ADD_PEOPLE, GroupUpdateStatus
from runtime import collector
from runtime.form import Maybe, title
from runtime.task_inputs import unwalked
from tasks.event_logs import logged_targets
from tasks.groups import PersonAnswer, add_people_to_group
from write_engine.approval import (
    DEFAULT_DEADLINE_HOURS,
    ApprovalDeadline,
    ApprovalPolicy,
    RequireApproval,
)
from write_engine.inputs import (
    Identifier,
    ItemInput,
    ParsedItems,
    collect_records,
    dedupe,
    parse_items,
)
from write_engine.outcomes import AnyResult, Done, ItemResult, Outcome, RunSummary
from write_engine.run import DEFAULT_CONCURRENCY, Concurrency, WriteJob, failure, run_write_job

FLOW_KEY = "add-people-to-groups"
CHUNK_SIZE = MAX_ADD_PEOPLE

#: the audit entry of people added to a group (targets: the group and each person added)
PEOPLE_ADDED = "GROUP_PEOPLE_ADDED"


class GroupMembershipInput(ItemInput):
    """One person to add to one group."""

    group_id: Identifier
    person_id: Identifier

    def key(self) -> str:
        return f"{self.group_id}/{self.person_id}"

    def label(self) -> str:
        return f"group {self.group_id} / person {self.person_id}"


class GroupMembership(WriteJob[GroupMembershipInput]):
    flow_key = FLOW_KEY
    item_model = GroupMembershipInput

    def __init__(self) -> None:
        self._call_slots: anyio.CapacityLimiter | None = None

    def units_in_flight(self, concurrency: int) -> int:
        """Twice as many task runs as calls: a chunk's task-run bookkeeping (states, events)
        happens while other chunks' calls are on the wire, not in a call slot. At most
        ``concurrency`` add-people calls are ever in flight."""
        self._call_slots = anyio.CapacityLimiter(concurrency)
        return 2 * concurrency

    def units(self, items: Sequence[GroupMembershipInput]) -> list[list[GroupMembershipInput]]:
        """Per group, chunks of at most 100 people, in input order."""
        by_group: dict[str, list[GroupMembershipInput]] = {}
        for item in items:
            by_group.setdefault(item.group_id, []).append(item)
        return [
            people[start : start + CHUNK_SIZE]
            for people in by_group.values()
            for start in range(0, len(people), CHUNK_SIZE)
        ]

    async def applied_by_lost_attempt(
        self,
        client: ComplianceClient,
        units: Sequence[Sequence[GroupMembershipInput]],
        since: datetime,
    ) -> set[int]:
        """The service logs the people it adds to a group, with the group, per call; a chunk
        it does not show in full is sent again (adding a member again changes nothing)."""
        added: dict[str, set[str]] = {}
        for entry in await logged_targets(client, PEOPLE_ADDED, since):
            for group in entry.get("Group", ()):
                added.setdefault(group, set()).update(entry.get("Person", ()))
        return {
            position
            for position, unit in enumerate(units)
            if all(item.person_id in added.get(item.group_id, ()) for item in unit)
        }

    def plan_groups(self, item: GroupMembershipInput) -> tuple[str]:
        return (f"group {item.group_id}",)

    def plan(self, unit: Sequence[GroupMembershipInput]) -> list[Done]:
        reason = f"would add in one call with {len(unit) - 1} other(s)"
        return [Done(item.label(), Outcome.PLANNED, reason) for item in unit]

    async def apply(
        self, client: ComplianceClient, unit: Sequence[GroupMembershipInput]
    ) -> list[AnyResult]:
        group_id = unit[0].group_id
        person_ids = [item.person_id for item in unit]
        try:
            answers = (
                await add_people_to_group(
                    client,
                    group_id,
                    unwalked(person_ids),
                    chunk_label=f"{len(person_ids)}-people",
                    call_slots=self._call_slots,
                )
            ).answers
        except Exception as error:  # the whole chunk failed after the task's retries
            return [failure(item, error) for item in unit]
        matched = _match(person_ids, answers)
        return [_result(item, answer) for item, answer in zip(unit, matched, strict=True)]


def _match(
    person_ids: Sequence[str], answers: Sequence[PersonAnswer]
) -> Sequence[PersonAnswer | None]:
    """The answer for each person: by position (the spec's promise), checked by id."""
    if len(answers) == len(person_ids) and all(
        answer[0] == person for answer, person in zip(answers, person_ids, strict=True)
    ):
        return answers
    by_id = {answer[0]: answer for answer in answers}
    return [by_id.get(person) for person in person_ids]


def _result(item: GroupMembershipInput, answer: PersonAnswer | None) -> AnyResult:
    if answer is None:
        return ItemResult(
            item=item.label(),
            outcome=Outcome.FAILED_RETRYABLE,
            reason="the service's answer had no result for this person",
            rerun_input=item.as_input(),
        )
    _, status, message = answer
    if status == GroupUpdateStatus.SUCCESS:
        return Done(item.label(), Outcome.SUCCEEDED, response="SUCCESS")
    return ItemResult(
        item=item.label(),
        outcome=Outcome.FAILED,
        reason=message or "the service reported ERROR without a message",
        response=status,
        rerun_input=item.as_input(),
    )


PERSON_FIELDS = ["person_id", "group_id"]


def read_membership_items(
    group_ids: list[str] | None,
    person_ids: list[str] | None,
    input_file: str | None,
    pasted_rows: str | None = None,
) -> ParsedItems[GroupMembershipInput]:
    """Pairs of (group, person).

    Inline: every person in ``person_ids`` goes into every group in ``group_ids``. From a file:
    CSV columns ``person_id`` and optional ``group_id``, or a JSON list of person ids or of
    ``{"person_id", "group_id"?}`` objects; pasted rows alike. A row without a group goes into
    every group of ``group_ids``.
    """
    groups = list(group_ids or [])
    if person_ids and not groups:
        raise InputError("group_ids", group_ids, "is required with person_ids")
    inline = [
        (f"person_ids[{index}]", {"person_id": person, "group_id": group})
        for index, person in enumerate(person_ids or [])
        for group in groups
    ]
    records = collect_records(
        inline if person_ids else None,
        input_file,
        what="group_ids with person_ids, input_file or pasted_rows",
        columns=PERSON_FIELDS,
        required=["person_id"],
        scalar_field="person_id",
        pasted_rows=pasted_rows,
    )
    expanded: list[tuple[str, dict[str, Any]]] = []
    for where, record in records:
        if record.get("group_id"):
            expanded.append((where, record))
        elif groups:
            for group in groups:
                expanded.append((where, {**record, "group_id": group}))
        else:
            raise InputError(
                "group_id", None, "is missing and no group_ids were given for the run", item=where
            )
    return dedupe(parse_items(GroupMembershipInput, expanded))


@flow(name="add-people-to-groups")
async def add_people_to_groups(
    group_ids: Annotated[Maybe[list[str]], title("Group ids")] = None,
    person_ids: Annotated[Maybe[list[str]], title("Person ids")] = None,
    input_file: Annotated[Maybe[str], title("Input file")] = None,
    pasted_rows: Annotated[Maybe[str], title("Pasted rows (CSV or JSON)")] = None,
    dry_run: Annotated[bool, title("Dry run")] = False,
    concurrency: Annotated[Concurrency, title("Concurrency")] = DEFAULT_CONCURRENCY,
    require_approval: RequireApproval = False,
    approval_deadline_hours: ApprovalDeadline = DEFAULT_DEADLINE_HOURS,
) -> RunSummary | State[Any]:
    """Add people to one or more groups, 100 people per call.

    Every id is checked first; duplicates are dropped and reported. Per-person errors (e.g. an
    unknown person) are collected with the service's message; the run is Failed (red) if any
    person was not added.

    Args:
        group_ids: Groups to add the people to: every person goes into every group. Also the
            groups of file rows that have no group_id.
        person_ids: People to add (needs group ids), e.g. ['p-1', 'p-2'].
        input_file: Path, on the worker's machine, of a CSV file with a column person_id and
            an optional group_id, or of a JSON list of person ids or of
            {"person_id", "group_id"?} objects.
        pasted_rows: Rows pasted into this form, e.g. from a spreadsheet: CSV with a header
            row, columns person_id and optional group_id; or a JSON list as for input_file.
            Checked exactly as a file is.
        dry_run: Only report what would be added; nothing is written.
        concurrency: How many add-people calls (up to 100 people each) are in flight at the
            same time (1 to 32).
    """
    # a bulk run: the garbage collector is tuned for this process while it reads and sends
    # (runtime/collector.py: 100,000 people otherwise cost more collector than API time)
    with collector.paused():
        parsed = read_membership_items(group_ids, person_ids, input_file, pasted_rows)
    with collector.tuned_for_bulk_run():
        return await run_write_job(
            GroupMembership(),
            parsed,
            dry_run=dry_run,
            concurrency=concurrency,
            approval=ApprovalPolicy(require_approval, approval_deadline_hours),
        )
