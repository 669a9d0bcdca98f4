"""Runbook: move questionnaires through review to approval.

Per questionnaire: one update (owner, approver, due date, tags), each status of the route not yet
reached, then approve. A failed step stops that questionnaire only; its rerun sends only the
steps that did not happen.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, Self

from prefect import flow
from prefect.client.schemas.objects import State
from pydantic import field_validator, model_validator

from audit_log.checkpoints import ROUTE_CHECKPOINT_VARIABLE
from audit_log.targets import AuditLogSource, run_on_new_targets
from compliance_api.client import ComplianceClient
from compliance_api.errors import PermissionDeniedError
from compliance_api.models import (
    SETTABLE_QUESTIONNAIRE_STATUSES,
    QuestionnaireStatus,
    QuestionnaireUpdate,
)
from runtime.form import Maybe, one_of, title
from tasks.questionnaires import approve_questionnaire, update_questionnaire
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
    split_list,
)
from write_engine.outcomes import ItemResult, Outcome, RunSummary
from write_engine.run import DEFAULT_CONCURRENCY, Concurrency, WriteJob, classify, run_write_job

FLOW_KEY = "route-questionnaires"
#: where ``from_audit_log`` finds its questionnaires
READY_FOR_REVIEW = AuditLogSource(
    action="QUESTIONNAIRE_READY_FOR_REVIEW",
    target_type="Questionnaire",
    checkpoint_variable=ROUTE_CHECKPOINT_VARIABLE,
)
ENTITLEMENT = "QuestionnaireAutomationAdvanced"
APPROVED = QuestionnaireStatus.APPROVED.value
SETTABLE = sorted(status.value for status in SETTABLE_QUESTIONNAIRE_STATUSES)
ActorKind = Literal["User", "Team"]
#: a route step: the form offers the settable statuses (in the service's order); the route's
#: own check names a wrong one
RouteStatus = Annotated[
    str, one_of(*(s.value for s in QuestionnaireStatus if s in SETTABLE_QUESTIONNAIRE_STATUSES))
]


class QuestionnaireRouteInput(ItemInput):
    """What to do with one questionnaire: assignments, a route of statuses, then approval."""

    questionnaire_id: Identifier
    route: list[str] = []
    owner_id: Identifier | None = None
    owner_type: ActorKind = "User"
    approver_id: Identifier | None = None
    approver_type: ActorKind = "User"
    due_date: datetime | None = None
    tags: list[str] | None = None
    approve: bool = True
    approval_message: str | None = None

    @field_validator("route", mode="before")
    @classmethod
    def _route_list(cls, value: Any) -> Any:
        value = split_list(value)
        if isinstance(value, list):
            return [item.strip().upper() if isinstance(item, str) else item for item in value]
        return value

    @field_validator("route")
    @classmethod
    def _settable(cls, value: list[str]) -> list[str]:
        for status in value:
            if status not in SETTABLE:
                hint = " (approval is the separate approve step)" if status == APPROVED else ""
                raise ValueError(
                    f"{status!r} cannot be set by a client{hint}; settable: {', '.join(SETTABLE)}"
                )
        return value

    @field_validator("tags", mode="before")
    @classmethod
    def _tag_list(cls, value: Any) -> Any:
        value = split_list(value)
        if isinstance(value, list):
            return [
                f"{tag['category_id']}:{tag['tag_id']}" if isinstance(tag, dict) else tag
                for tag in value
            ]
        return value

    @field_validator("tags")
    @classmethod
    def _tag_format(cls, value: list[str] | None) -> list[str] | None:
        for tag in value or []:
            category, _, tag_id = tag.partition(":")
            if not category.strip() or not tag_id.strip():
                raise ValueError(f"{tag!r} is not 'category_id:tag_id'")
        # a tag given twice means it once (the API must not get repeats)
        return None if value is None else list(dict.fromkeys(value))

    @model_validator(mode="after")
    def _something_to_do(self) -> Self:
        if not (self.route or self.approve or self.has_assignments()):
            raise ValueError("nothing to do: give a route, assignments or approve=true")
        return self

    def key(self) -> str:
        return self.questionnaire_id

    def label(self) -> str:
        return f"questionnaire {self.questionnaire_id}"

    def has_assignments(self) -> bool:
        return bool(self.owner_id or self.approver_id or self.due_date or self.tags is not None)

    def assignment_update(self) -> QuestionnaireUpdate:
        fields: dict[str, Any] = {}
        if self.owner_id:
            fields["owner_assignment"] = {"type": self.owner_type, "id": self.owner_id}
        if self.approver_id:
            fields["approver_assignment"] = {"type": self.approver_type, "id": self.approver_id}
        if self.due_date:
            fields["due_date"] = self.due_date
        if self.tags is not None:
            fields["tag_and_category_ids"] = [
                {"category_id": tag.partition(":")[0], "tag_id": tag.partition(":")[2]}
                for tag in self.tags
            ]
        return QuestionnaireUpdate(**fields)

    def describe_assignments(self) -> str:
        parts = []
        if self.owner_id:
            parts.append(f"owner {self.owner_type} {self.owner_id}")
        if self.approver_id:
            parts.append(f"approver {self.approver_type} {self.approver_id}")
        if self.due_date:
            parts.append(f"due {self.due_date.isoformat()}")
        if self.tags is not None:
            parts.append(f"tags [{', '.join(self.tags)}] (replacing all tags)")
        return "assign " + ", ".join(parts)

    def without_assignments(self, route: list[str]) -> QuestionnaireRouteInput:
        """The same questionnaire with only the remaining route (and approval) to do."""
        return self.model_copy(
            update={"owner_id": None, "approver_id": None, "due_date": None, "tags": None}
            | {"route": route}
        )


class _Progress:
    """What has happened to one questionnaire so far."""

    def __init__(self) -> None:
        self.status: str | None = None
        self.done: list[str] = []
        self.skipped: list[str] = []

    def did(self, step: str, status: object) -> None:
        """``step`` succeeded; the questionnaire is now at ``status``."""
        self.done.append(step)
        self.status = str(getattr(status, "value", status))

    def reached(self, route_rest: list[str]) -> bool:
        """True if the questionnaire already is at this route step or a later one."""
        return self.status is not None and (self.status == APPROVED or self.status in route_rest)


class QuestionnaireRouting(WriteJob[QuestionnaireRouteInput]):
    flow_key = FLOW_KEY
    item_model = QuestionnaireRouteInput

    def plan(self, unit: Sequence[QuestionnaireRouteInput]) -> list[ItemResult]:
        (item,) = unit
        steps = []
        if item.has_assignments():
            steps.append(item.describe_assignments())
        steps.extend(f"set {status}" for status in item.route)
        if item.approve:
            steps.append("approve")
        return [
            ItemResult(
                item=item.label(),
                outcome=Outcome.PLANNED,
                reason="would " + " -> ".join(steps) + " (steps already reached are skipped)",
            )
        ]

    async def apply(
        self, client: ComplianceClient, unit: Sequence[QuestionnaireRouteInput]
    ) -> list[ItemResult]:
        (item,) = unit
        qid = item.questionnaire_id
        progress = _Progress()
        if item.has_assignments():
            try:
                answer = await update_questionnaire(client, qid, item.assignment_update(), "assign")
            except Exception as error:
                return [_failed(item, progress, "assign", error, rerun=item)]
            progress.did(item.describe_assignments(), answer.status)
        for index, status in enumerate(item.route):
            if progress.reached(item.route[index:]):
                progress.skipped.append(status)
                continue
            update = QuestionnaireUpdate(status=QuestionnaireStatus(status))
            try:
                answer = await update_questionnaire(client, qid, update, status)
            except Exception as error:
                rest = item.without_assignments(item.route[index:])
                return [_failed(item, progress, f"set {status}", error, rerun=rest)]
            progress.did(f"set {status}", answer.status)
        if item.approve:
            if progress.status == APPROVED:
                progress.skipped.append("approve")
            else:
                try:
                    answer = await approve_questionnaire(client, qid, _message(item))
                except Exception as error:
                    rest = item.without_assignments([])
                    return [_failed(item, progress, "approve", error, rerun=rest)]
                progress.did("approve", answer.status)
        return [_succeeded(item, progress)]


def _message(item: QuestionnaireRouteInput) -> str:
    if item.approval_message:
        return item.approval_message
    route = " -> ".join(item.route) or "review"
    return f"Approved by the 'route-questionnaires' flow after {route}"


def _succeeded(item: QuestionnaireRouteInput, progress: _Progress) -> ItemResult:
    skipped = (
        f"skipped (already reached): {', '.join(progress.skipped)}" if progress.skipped else ""
    )
    done = "; ".join(progress.done)
    return ItemResult(
        item=item.label(),
        outcome=Outcome.SUCCEEDED if progress.done else Outcome.SKIPPED,
        reason="; ".join(part for part in (done, skipped) if part) or "nothing to do",
        response=f"status {progress.status}" if progress.status else "",
    )


def _failed(
    item: QuestionnaireRouteInput,
    progress: _Progress,
    step: str,
    error: BaseException,
    *,
    rerun: QuestionnaireRouteInput,
) -> ItemResult:
    outcome, reason = classify(error)
    if isinstance(error, PermissionDeniedError) and step == "assign" and item.approver_id:
        reason = (
            f"assigning an approver needs the {ENTITLEMENT} entitlement, which this "
            f"application does not have ({error.message})"
        )
    done = f"; done before: {'; '.join(progress.done)}" if progress.done else ""
    return ItemResult(
        item=item.label(),
        outcome=outcome,
        reason=f"{step} failed: {reason}{done}",
        response=f"status {progress.status}" if progress.status else "",
        rerun_input=rerun.as_input(),
    )


FIELDS = list(QuestionnaireRouteInput.model_fields)


def read_route_items(
    questionnaire_ids: list[str] | None,
    input_file: str | None,
    defaults: dict[str, Any],
    *,
    from_audit_log: list[str] | None = None,
    pasted_rows: str | None = None,
) -> ParsedItems[QuestionnaireRouteInput]:
    """Ids inline (each gets the run's route and assignments) and/or file rows (CSV columns or
    JSON keys named like the fields; a field a row leaves out comes from the run's parameters);
    then the ids the audit log named, like inline ids (``None``: the run does not read the log,
    so it needs ids or a file)."""
    given = {name: value for name, value in defaults.items() if value is not None}
    inline = [
        (f"questionnaire_ids[{index}]", {"questionnaire_id": value})
        for index, value in enumerate(questionnaire_ids or [])
    ]
    inline += [
        (f"audit log ({index})", {"questionnaire_id": value})
        for index, value in enumerate(from_audit_log or [])
    ]
    records = collect_records(
        inline,
        input_file,
        what="questionnaire_ids, input_file, pasted_rows or from_audit_log",
        columns=FIELDS,
        required=["questionnaire_id"],
        scalar_field="questionnaire_id",
        allow_empty=from_audit_log is not None,
        pasted_rows=pasted_rows,
    )
    return dedupe(parse_items(QuestionnaireRouteInput, [(w, {**given, **r}) for w, r in records]))


@flow(name="route-questionnaires")
async def route_questionnaires(
    questionnaire_ids: Annotated[Maybe[list[str]], title("Questionnaire ids")] = None,
    route: Annotated[Maybe[list[RouteStatus]], title("Route")] = None,
    owner_id: Annotated[Maybe[str], title("Owner id")] = None,
    owner_type: Annotated[ActorKind, title("Owner type")] = "User",
    approver_id: Annotated[Maybe[str], title("Approver id")] = None,
    approver_type: Annotated[ActorKind, title("Approver type")] = "User",
    due_date: Annotated[Maybe[datetime], title("Due date")] = None,
    tags: Annotated[Maybe[list[str]], title("Tags")] = None,
    approve: Annotated[bool, title("Approve")] = True,
    approval_message: Annotated[Maybe[str], title("Approval message")] = None,
    input_file: Annotated[Maybe[str], title("Input file")] = None,
    pasted_rows: Annotated[Maybe[str], title("Pasted rows (CSV or JSON)")] = None,
    from_audit_log: Annotated[bool, title("Questionnaires ready since the last run")] = False,
    dry_run: Annotated[bool, title("Dry run")] = False,
    concurrency: Annotated[Concurrency, title("Concurrency")] = DEFAULT_CONCURRENCY,
    require_approval: RequireApproval = False,
    approval_deadline_hours: ApprovalDeadline = DEFAULT_DEADLINE_HOURS,
) -> RunSummary | State[Any]:
    """Assign, route through review statuses and approve questionnaires.

    Per questionnaire: the assignments (one update), then each status of the route, then the
    approval. Steps a questionnaire has already reached are skipped; a step that fails stops
    that questionnaire (the others go on) and its rerun sends only the steps not done.

    Args:
        questionnaire_ids: Questionnaires to process; each gets the route, assignments and
            approval of this run. Can be combined with an input file.
        route: Statuses to set, in this order. Settable: IN_PROGRESS, IN_REVIEW,
            READY_FOR_REVIEW, WAITING_ON_ANSWERS, ON_HOLD, NO_LONGER_NEEDED (approval is the
            separate approve step); anything else stops the run before any call.
        owner_id: Assign this owner (a user or team id, see owner type).
        owner_type: Whether the owner id is a User or a Team.
        approver_id: Assign this approver (a user or team id). Needs the
            QuestionnaireAutomationAdvanced entitlement: without it the questionnaire fails
            with that reason.
        approver_type: Whether the approver id is a User or a Team.
        due_date: Set this due date (ISO 8601, e.g. '2025-06-30T17:00:00Z').
        tags: Set these tags, each 'category_id:tag_id'; they REPLACE all of the
            questionnaire's tags.
        approve: Approve each questionnaire after its route (unless it is already approved).
        approval_message: The status-change message of the approval. Empty: one naming the
            route.
        input_file: Path, on the worker's machine, of a CSV/JSON file with one row per
            questionnaire: questionnaire_id plus any of the fields above as columns (or keys);
            a field a row leaves out comes from this run's parameters.
        pasted_rows: Rows pasted into this form: CSV with a header row and the columns of
            input_file, or a JSON list as for input_file. Checked exactly as a file is.
        from_audit_log: Also process every questionnaire the audit log reported ready for
            review since the last such run (its checkpoint), with this run's route,
            assignments and approval; the deployment's trigger and schedule set it. The
            checkpoint moves on once they are all handled (not in a dry run).
        dry_run: Only report what would be done; nothing is written.
        concurrency: How many questionnaires are processed at the same time (1 to 32).
    """
    defaults = {
        "route": route,
        "owner_id": owner_id,
        "owner_type": owner_type,
        "approver_id": approver_id,
        "approver_type": approver_type,
        "due_date": due_date,
        "tags": tags,
        "approve": approve,
        "approval_message": approval_message,
    }
    parsed = read_route_items(
        questionnaire_ids,
        input_file,
        defaults,
        from_audit_log=[] if from_audit_log else None,
        pasted_rows=pasted_rows,
    )
    approval = ApprovalPolicy(require_approval, approval_deadline_hours)
    if not from_audit_log:
        return await run_write_job(
            QuestionnaireRouting(),
            parsed,
            dry_run=dry_run,
            concurrency=concurrency,
            approval=approval,
        )
    return await run_on_new_targets(
        QuestionnaireRouting(),
        READY_FOR_REVIEW,
        lambda ids: read_route_items(
            questionnaire_ids, input_file, defaults, from_audit_log=ids, pasted_rows=pasted_rows
        ),
        dry_run=dry_run,
        concurrency=concurrency,
        approval=approval,
    )
