"""Four-eyes approval of a write run: publish the plan, suspend for a decision, apply only it.

How suspend, restart and the recorded decision fit together: docs/write-flows.md (approval).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from prefect.artifacts import acreate_table_artifact
from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.events import Event
from prefect.flow_runs import asuspend_flow_run
from prefect.input import RunInput
from prefect.input.actions import (
    acreate_flow_run_input,
    adelete_flow_run_input,
    aread_flow_run_input,
)
from prefect.logging import get_run_logger
from pydantic import BaseModel, Field

from compliance_api.errors import ComplianceError, InputError
from runtime.events import deliver, deterministic_event_id
from runtime.form import NonBlank, form_field
from write_engine.attestation import (
    DECISION_KEY,
    DECISION_KEY_ROUTE,
    PAUSE_KEY,
    PLAN_KEY,
    DecisionRecord,
    NotAttested,
    digest_of,
    public_key_from_text,
    verified,
)
from write_engine.inputs import ItemInput, ItemT
from write_engine.outcomes import AnyResult, Approval
from write_engine.reporting import result_rows, run_link

DEFAULT_DEADLINE_HOURS = 24.0
#: the write flows' approval parameters, with their label and help in the run form
RequireApproval = Annotated[
    bool,
    form_field(
        "Require approval",
        "Publish the plan and wait, suspended (no worker is held), until someone approves or "
        "rejects it with the run's Resume button; only a run of a deployment can wait. Rejected "
        "or unanswered: nothing is sent. Items that change between the plan and the decision "
        "(an edited file; with from_audit_log, new log entries) refuse the run: plan again. "
        "A deployment that requires approval cannot be turned off here.",
    ),
]
ApprovalDeadline = Annotated[
    float,
    Field(gt=0, le=24 * 30),
    form_field(
        "Approval deadline (hours)",
        "With require_approval: how long the plan waits for a decision before the run fails, "
        "nothing sent (default 24).",
    ),
]
AWAITING_EVENT = "compliance.write-run.awaiting-approval"
APPROVED_EVENT = "compliance.write-run.approved"
REJECTED_EVENT = "compliance.write-run.rejected"
#: most item rows the plan artifact lists (its description names the rest)
MAX_PLAN_ROWS = 10_000
#: groups the plan's counts name one by one (the rest are summed up)
MAX_COUNT_LINES = 50


@dataclass(frozen=True)
class ApprovalPolicy:
    """A write flow's approval parameters."""

    required: bool = False
    deadline_hours: float = DEFAULT_DEADLINE_HOURS


NO_APPROVAL = ApprovalPolicy()


class ApprovalInput(RunInput):
    """The UI's Resume form of a run that waits for approval where people sign in: the sign-in
    names the approver and the server signs the decision (docs/access.md)."""

    #: no default, so a slip neither approves nor rejects (the form asks to choose)
    approve: Literal["yes", "no"] = Field(
        title="Approve",
        description="yes: apply exactly this plan. no: reject it (nothing is sent).",
    )
    reason: NonBlank = Field(
        title="Reason",
        description="Why: the change ticket that authorises it, or why it is rejected.",
    )


class TypedApprovalInput(ApprovalInput):
    """The form on a server where no one signs in (its policy names no people): the approver
    names themself, and the record says it was typed, not signed."""

    approver: str = Field(
        default="",
        title="Approver",
        description="Your name as it should appear in the record (this server has no sign-in).",
    )


class PlanRecord(BaseModel):
    """What the approver was shown, kept on the run to check the approved run against."""

    digest: str
    total: int
    counts: dict[str, int]
    planned_at: datetime
    #: each item's hash, in order: ``digest`` is their digest, so the signed decision covers
    #: the list, and a rerun sends only items in it
    items: list[str] = Field(default_factory=list)

    def holds(self, item: ItemInput) -> bool:
        return item_hash(item) in set(self.items)


class PlanChanged(ComplianceError):
    """The approved run's items are not the planned ones: nothing is sent."""


class DecisionRefused(ComplianceError):
    """The decision is missing, unsigned, forged, or not this run's and plan's: nothing is sent."""


@dataclass(frozen=True)
class Signing:
    """The server's decision key, and whether decisions must carry its signature (people sign
    in at the proxy: the access policy names them)."""

    public_key: Any
    required: bool


async def server_signing() -> Signing:
    """Asked of the Prefect server's gatekeeper (deployments/gatekeeper.py)."""
    async with get_client() as client:
        response = await client._client.get(DECISION_KEY_ROUTE)  # noqa: SLF001
    response.raise_for_status()
    answer = response.json()
    return Signing(public_key_from_text(answer["public_key"]), bool(answer.get("required")))


def _recorded(run_id: Any, stored: Any, plan: PlanRecord, signing: Signing) -> Approval:
    """A decision kept on the run: signed by the server (checked), or, where people do not sign
    in, as the flow recorded it from the form."""
    if signing.required or (isinstance(stored, dict) and "signature" in stored):
        return _attested(run_id, stored, plan, signing)
    return Approval.model_validate(stored)


def _typed(answer: TypedApprovalInput, plan: PlanRecord) -> Approval:
    """Where no one signs in (the try-out): the approver is who the form says."""
    if not answer.approver.strip():
        raise DecisionRefused(
            "approver: name yourself in the Resume form (this server has no sign-in, "
            "docs/access.md); nothing was sent"
        )
    return Approval(
        approved=answer.approve == "yes",
        approver=answer.approver.strip(),
        reason=answer.reason,
        decided_at=datetime.now(UTC),
        plan_digest=plan.digest,
        total=plan.total,
    )


def _attested(run_id: Any, stored: Any, plan: PlanRecord, signing: Signing) -> Approval:
    """The decision the server signed for this run's plan after the plan was shown;
    ``DecisionRefused`` otherwise."""
    if stored is None:
        raise DecisionRefused(
            f"flow run {run_id} was resumed without a decision signed by the Prefect server: "
            "approve or reject signed in at the proxy (docs/access.md). Nothing was sent"
        )
    try:
        record = verified(DecisionRecord, stored, signing.public_key)
    except NotAttested as error:
        raise DecisionRefused(f"flow run {run_id}: {error}; nothing was sent") from None
    problems = []
    if record.flow_run_id != str(run_id):
        problems.append(f"it is flow run {record.flow_run_id}'s")
    if record.plan_digest != plan.digest:
        problems.append(f"it is about plan {record.plan_digest[:12]}, not {plan.digest[:12]}")
    if record.decided_at < plan.planned_at:
        problems.append("it was made before this plan was shown")
    if problems:
        raise DecisionRefused(
            f"flow run {run_id}: the signed decision does not hold ({'; '.join(problems)}); "
            "nothing was sent"
        )
    return Approval(
        approved=record.approved,
        approver=record.approver,
        requester=record.requester,
        reason=record.reason,
        decided_at=record.decided_at,
        plan_digest=record.plan_digest,
        total=record.total,
        signature_checked=True,
    )


def item_hash(item: ItemInput) -> str:
    """An item's full input, hashed (128 bits: a plan of 100,000 items keeps 3.2 MB of them)."""
    encoded = json.dumps(item.as_input(), sort_keys=True, default=str).encode()
    return hashlib.sha256(encoded).hexdigest()[:32]


def plan_digest(items: Sequence[ItemInput]) -> str:
    return digest_of([item_hash(item) for item in items])


def plan_counts(items: Iterable[ItemT], groups: Callable[[ItemT], Iterable[str]]) -> dict[str, int]:
    """Items per group (per group, tag or document: the job says), largest first."""
    counter: Counter[str] = Counter()
    for item in items:
        counter.update(groups(item))
    return dict(counter.most_common())


def counts_text(counts: dict[str, int]) -> str:
    """``group g-1: 120, group g-2: 30``: one line for events and notifications."""
    shown = [f"{name}: {n}" for name, n in list(counts.items())[:MAX_COUNT_LINES]]
    rest = len(counts) - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest > 0 else "")


async def approved_or_rejected(
    flow_key: str,
    items: Sequence[ItemT],
    groups: Callable[[ItemT], Iterable[str]],
    planned: Callable[[], Sequence[AnyResult]],
    policy: ApprovalPolicy,
) -> Approval:
    """The decision on this run's plan: recorded earlier, or asked for now (the run suspends; this
    returns in the resumed run). ``PlanChanged`` if an approved plan is not what this run sends.
    The counts and rows (``planned``) are worked out only when the plan is first shown."""
    run_id = _flow_run_id()
    digest = plan_digest(items)
    signing = await server_signing()
    asked = await _asked_before(run_id)
    recorded = await aread_flow_run_input(DECISION_KEY, flow_run_id=run_id)
    decision: Approval | None = None
    if recorded is not None:  # decided (a resumed or restarted run): it is not asked again
        if not asked:
            raise DecisionRefused(
                f"flow run {run_id} holds a decision stored before it asked for one; nothing "
                "was sent. Start a new run: its plan is decided when it asks"
            )
        decision = _recorded(run_id, recorded, await _shown_plan(run_id), signing)
    if decision is None:
        seconds = max(1, round(policy.deadline_hours * 3600))
        if asked:  # resumed: the answer is about the plan it was shown
            plan = await _shown_plan(run_id)
        else:
            counts = plan_counts(items, groups)
            hashes = [item_hash(item) for item in items]
            plan = PlanRecord(
                digest=digest_of(hashes),
                total=len(items),
                counts=counts,
                planned_at=datetime.now(UTC),
                items=hashes,
            )
            plan = await _keep_plan(run_id, plan)
            await _announce(flow_key, run_id, plan, planned(), seconds)
        # suspends; in the resumed run, this returns the form's answer at once
        form_type = ApprovalInput if signing.required else TypedApprovalInput
        form = form_type.with_initial_data(description=_form_text(flow_key, plan, seconds))
        answer = await asuspend_flow_run(wait_for_input=form, timeout=seconds, key=PAUSE_KEY)
        if signing.required:  # resumed past the gatekeeper: it stored no signed decision
            decision = _attested(run_id, None, plan, signing)
        else:
            decision = _typed(TypedApprovalInput.model_validate(answer.model_dump()), plan)
            await acreate_flow_run_input(DECISION_KEY, decision.model_dump(mode="json"), run_id)
    await _emit_decision(flow_key, run_id, decision)  # a repeat is a no-op (its id)
    verb = "approved" if decision.approved else "rejected"
    get_run_logger().info(
        "Plan of %d item(s) %s by %s at %s: %s",
        decision.total,
        verb,
        decision.approver,
        decision.decided_at.isoformat(timespec="seconds"),
        decision.reason,
    )
    if decision.approved and decision.plan_digest != digest:
        raise PlanChanged(
            f"the items of this run are not the approved plan ({decision.total} item(s), "
            f"digest {decision.plan_digest[:12]}; now {len(items)} item(s), digest "
            f"{digest[:12]}): the input file changed or the audit log has new entries since "
            "the plan. Nothing was sent; start a new run to plan and approve the change again"
        )
    return decision


async def as_deployed(policy: ApprovalPolicy) -> ApprovalPolicy:
    """A deployment whose parameters require approval requires it of every run: a run's own
    ``require_approval: false`` does not turn it off (only a change of the deployment, an
    admin's, does)."""
    context = FlowRunContext.get()
    run = context.flow_run if context else None
    if policy.required or run is None or run.deployment_id is None:
        return policy
    async with get_client() as client:
        deployment = await client.read_deployment(run.deployment_id)
    if deployment.parameters.get("require_approval") is not True:
        return policy
    get_run_logger().warning(
        "require_approval is false on this run, but its deployment %r requires approval: the "
        "plan waits for a decision",
        deployment.name,
    )
    return replace(policy, required=True)


async def approved_plan(flow_run_id: UUID) -> PlanRecord | None:
    """The plan the run ``flow_run_id`` was approved for, checked: the decision (signed where
    people sign in), approved, and its digest that of the plan's item list. None: the run did
    not wait for approval. ``DecisionRefused`` if the record does not hold."""
    decision = await aread_flow_run_input(DECISION_KEY, flow_run_id=flow_run_id)
    if decision is None:
        return None
    plan = await _shown_plan(flow_run_id)
    approval = _recorded(flow_run_id, decision, plan, await server_signing())
    if not approval.approved:
        raise DecisionRefused(f"flow run {flow_run_id}'s plan was rejected: nothing to rerun")
    if not plan.items or digest_of(plan.items) != approval.plan_digest:
        raise DecisionRefused(
            f"flow run {flow_run_id}'s plan record is not the approved plan (its item list "
            "does not give the approved digest): nothing is rerun"
        )
    return plan


def check_can_wait() -> None:
    """Only a deployment's run can be suspended and resumed: refuse any other before a call."""
    _flow_run_id()


def _flow_run_id() -> Any:
    context = FlowRunContext.get()
    run = context.flow_run if context else None
    if run is None or run.deployment_id is None:
        raise InputError(
            "require_approval",
            True,
            "needs a run of a deployment (it waits suspended for the approval, and only a "
            "deployment's run can be resumed); run it through its deployment, or without "
            "require_approval",
        )
    return run.id


async def _keep_plan(run_id: Any, plan: PlanRecord) -> PlanRecord:
    """Store the plan on the run; an earlier attempt's is kept if the same (someone may be reading
    it), else replaced."""
    stored = await aread_flow_run_input(PLAN_KEY, flow_run_id=run_id)
    if stored:
        earlier = PlanRecord.model_validate(stored)
        if earlier.digest == plan.digest:
            return earlier
        await adelete_flow_run_input(PLAN_KEY, flow_run_id=run_id)
    await acreate_flow_run_input(PLAN_KEY, plan.model_dump(mode="json"), flow_run_id=run_id)
    return plan


async def _shown_plan(run_id: Any) -> PlanRecord:
    stored = await aread_flow_run_input(PLAN_KEY, flow_run_id=run_id)
    if not stored:
        raise PlanChanged(
            f"the plan this run showed for approval is gone (its flow-run input {PLAN_KEY!r} "
            "was deleted): nothing was sent; start a new run"
        )
    return PlanRecord.model_validate(stored)


async def _announce(
    flow_key: str, run_id: Any, plan: PlanRecord, planned: Sequence[AnyResult], seconds: int
) -> None:
    """Publish the plan and tell the approvers (once: the resumed run does not repeat it)."""
    await _publish_plan(flow_key, plan, planned, seconds)
    await _emit_awaiting(flow_key, run_id, plan, seconds)
    get_run_logger().info(
        "Waiting for approval of %d item(s) (%s); the run is suspended and its worker free "
        "until someone resumes it (within %s)",
        plan.total,
        counts_text(plan.counts),
        _duration(seconds),
    )


async def _asked_before(run_id: Any) -> bool:
    """Whether this run was suspended for approval already (this attempt is the resumed one)."""
    async with get_client() as client:
        run = await client.read_flow_run(run_id)
    return PAUSE_KEY in (run.empirical_policy.pause_keys or set())


async def _publish_plan(
    flow_key: str, plan: PlanRecord, planned: Sequence[AnyResult], seconds: int
) -> None:
    rows, hidden = result_rows(planned[:MAX_PLAN_ROWS], max_others=MAX_PLAN_ROWS)
    hidden += max(0, len(planned) - MAX_PLAN_ROWS)
    lines = [
        f"**Plan awaiting approval: {plan.total} item(s).** Nothing is sent until someone "
        f"approves it with the run's Resume button (within {_duration(seconds)}).",
        "| to | items |\n|---|---|\n"
        + "\n".join(f"| {name} | {n} |" for name, n in list(plan.counts.items())[:MAX_COUNT_LINES]),
        f"Plan digest `{plan.digest[:12]}`: an approved run applies exactly these items, or "
        "nothing if its input changed since.",
    ]
    if hidden:
        lines.append(f"{hidden} more item(s) not listed here (they are in the run's input).")
    await acreate_table_artifact(rows, key=f"{flow_key}-plan", description="\n\n".join(lines))


def _form_text(flow_key: str, plan: PlanRecord, seconds: int) -> str:
    return (
        f"**{flow_key}** waits for approval of {plan.total} item(s): {counts_text(plan.counts)}."
        f"\n\nThe full list is the artifact `{flow_key}-plan` (this run's Artifacts tab). "
        "Approve to apply exactly that plan; reject to send nothing. Who decided, the reason "
        "and the time go into the run's results and an event. "
        f"Unanswered, the run fails after {_duration(seconds)}."
    )


def _duration(seconds: int) -> str:
    hours = seconds / 3600
    return f"{hours:g} h" if hours >= 1 else f"{seconds} s"


async def _emit_awaiting(flow_key: str, run_id: Any, plan: PlanRecord, seconds: int) -> None:
    payload = {
        "flow": flow_key,
        "flow_run_id": str(run_id),
        "total": plan.total,
        "counts": plan.counts if len(plan.counts) <= MAX_COUNT_LINES else {},
        "counts_text": counts_text(plan.counts),
        "plan_digest": plan.digest,
        "deadline_seconds": seconds,
        "run_link": run_link(str(run_id)),
    }
    await _emit(AWAITING_EVENT, flow_key, run_id, payload, plan.digest)


async def _emit_decision(flow_key: str, run_id: Any, decision: Approval) -> None:
    name = APPROVED_EVENT if decision.approved else REJECTED_EVENT
    payload = {"flow": flow_key, "flow_run_id": str(run_id), **decision.model_dump(mode="json")}
    await _emit(name, flow_key, run_id, payload, decision.plan_digest)


async def _emit(name: str, flow_key: str, run_id: Any, payload: dict[str, Any], key: str) -> None:
    """Acknowledged by the server before the run goes on, retried while it is busy: a decision
    (audit trail) or the run fails; the awaiting-approval notice or the run's log says it was
    not sent. The derived id makes a restarted run's repeat a no-op."""
    event = Event(
        id=deterministic_event_id(name, str(run_id), key),
        event=name,
        occurred=datetime.now(UTC),
        resource={
            "prefect.resource.id": f"prefect.flow-run.{run_id}",
            "prefect.resource.role": "flow-run",
            "compliance.write-flow": flow_key,
        },
        payload=payload,
    )
    await deliver([event], f"the {name} event of this run", required=name != AWAITING_EVENT)
