"""The engine every write flow shares: validate, apply in bounded parallel, report, fail red.

A ``WriteJob`` says how one unit of items is sent; the engine adds progress, the results table,
the failed-items record and event, and attempt fencing so a restarted run sends nothing twice
(docs/write-flows.md#when-a-run-is-started-again-lost-attempts). Units run as async tasks on the
flow's event loop, so all share one pooled ``ComplianceClient`` and one token broker.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, Generic

import anyio
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger
from prefect.states import Cancelled, Failed
from pydantic import Field

from compliance_api.client import ComplianceClient
from compliance_api.errors import (
    APIError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    TransportError,
)
from runtime.attempts import Attempt, AttemptLost, abort_when_lost, fenced
from runtime.connection import compliance_client
from tasks.token import get_shared_access_token
from write_engine.approval import (
    NO_APPROVAL,
    ApprovalPolicy,
    approved_or_rejected,
    as_deployed,
    check_can_wait,
)
from write_engine.in_process import keep_summary
from write_engine.inputs import UNUSABLE_ID, ItemInput, ItemT, ParsedItems
from write_engine.outcomes import (
    AnyResult,
    Approval,
    Done,
    ItemResult,
    ItemsFailed,
    Outcome,
    RunSummary,
)
from write_engine.reporting import (
    Progress,
    emit_failed_items_event,
    publish_failed_items,
    publish_results_table,
    rerun_hint,
)
from write_engine.send_record import SendRecord

DEFAULT_CONCURRENCY = 8
MAX_CONCURRENCY = 32
#: how many items a write flow sends at once (its ``concurrency`` parameter)
Concurrency = Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]
#: units claimed ahead at most, for jobs that can tell what a lost attempt applied
MAX_CLAIM_WINDOW = 2048
#: the service's clock may be a little behind ours: look this much earlier in its audit log
CLOCK_MARGIN = timedelta(minutes=5)


class WriteJob(ABC, Generic[ItemT]):
    """One write flow's rules: how items group into *units* (what one call, or one sequence of
    calls, handles: a vendor, a chunk of 100 people, a questionnaire's route) and what a call does.
    """

    #: the flow's key: names its artifacts and tells the rerun flow which job to use
    flow_key: ClassVar[str]
    item_model: ClassVar[type[Any]]
    #: dry runs need a client only when validation reads from the service
    reads_during_validation: ClassVar[bool] = False

    def units(self, items: Sequence[ItemT]) -> list[list[ItemT]]:
        return [[item] for item in items]

    def plan_groups(self, item: ItemT) -> Iterable[str]:
        """What the approver's plan counts the item under (group, tags, document)."""
        return ("items",)

    def units_in_flight(self, concurrency: int) -> int:
        """Units run at once; a job that caps its API calls itself may prepare more."""
        return concurrency

    async def validate_remotely(self, client: ComplianceClient, items: Sequence[ItemT]) -> None:
        """Checks that need reads from the service; raise InputError before any write."""

    @abstractmethod
    def plan(self, unit: Sequence[ItemT]) -> Sequence[AnyResult]:
        """Dry run: what would be sent (no call)."""

    @abstractmethod
    async def apply(self, client: ComplianceClient, unit: Sequence[ItemT]) -> Sequence[AnyResult]:
        """Send the unit; every item gets a result (a cheap ``Done``, or a full ``ItemResult`` with
        rerun input for failures); API errors become failed items."""

    async def applied_by_lost_attempt(
        self, client: ComplianceClient, units: Sequence[Sequence[ItemT]], since: datetime
    ) -> set[int] | None:
        """Of ``units`` a lost attempt claimed without an answer, the positions the service shows
        applied since ``since`` (the rest are sent); ``None``: cannot tell, all go to review."""
        return None

    def summarize(self, summary: RunSummary, results: Sequence[ItemResult]) -> RunSummary:
        """A flow-specific RunSummary subclass, from the full ItemResult rows (not ``Done``s)."""
        return summary


def failure(item: ItemInput, error: BaseException) -> ItemResult:
    """An item result for an error that outlasted the task's retries."""
    return _failed_row(item, *classify(error))


def _failed_row(item: ItemInput, outcome: Outcome, reason: str) -> ItemResult:
    return ItemResult(
        item=item.label(), outcome=outcome, reason=reason, rerun_input=item.as_input()
    )


def unusable_id(item: str) -> ItemResult:
    """The failed row of an audit-log id no URL can carry (no rerun input: it would fail again)."""
    return ItemResult(item=item, outcome=Outcome.FAILED, reason=UNUSABLE_ID)


def classify(error: BaseException) -> tuple[Outcome, str]:
    """Transient errors that survived every retry are worth rerunning later; others are not."""
    if isinstance(error, NotFoundError):
        return Outcome.FAILED, f"not found: {error.message}"
    if isinstance(error, PermissionDeniedError):
        return Outcome.FAILED, f"permission denied: {error.message}"
    if isinstance(error, ServerError | RateLimitedError | TransportError):
        return Outcome.FAILED_RETRYABLE, f"{describe_error(error)} (after retries)"
    if isinstance(error, APIError):
        return Outcome.FAILED, describe_error(error)
    return Outcome.FAILED, f"unexpected error: {type(error).__name__}: {error}"


def describe_error(error: BaseException) -> str:
    """``503 service_unavailable: message`` - the status, the service's code and message."""
    if not isinstance(error, APIError):
        return f"{type(error).__name__}: {error}"
    status = f"{error.status_code} " if error.status_code else ""
    code = f"{error.code}: " if error.code else ""
    kind = "" if status or code else f"{type(error).__name__}: "
    return f"{status}{code}{kind}{error.message}".strip()


def current_flow_run_id() -> str | None:
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return None
    return str(context.flow_run.id)


@abort_when_lost
async def run_write_job(
    job: WriteJob[ItemT],
    parsed: ParsedItems[ItemT],
    *,
    dry_run: bool,
    concurrency: int,
    rerun_of: str | None = None,
    attempt: int = 1,
    carried: Sequence[ItemResult] = (),
    done: Mapping[str, str] | None = None,
    approval: ApprovalPolicy = NO_APPROVAL,
) -> RunSummary | State[Any]:
    """Apply (or plan) every item, publish the reports; the summary, or a Failed state whose data
    is ``ItemsFailed``, or Cancelled when the approver rejects the plan.

    ``carried``: rows reported unsent (e.g. refusals a rerun leaves to a person), which keep the
    run red and stay in its failed-items record. ``done``: item key -> why it is done already
    (reported skipped). A lost attempt (``runtime/attempts.py``) ends with ``Abort``: nothing
    published, no state proposed.
    """
    logger = get_run_logger()
    items = parsed.items
    if parsed.duplicates:
        logger.warning(
            "Removed %d duplicate item(s): %s",
            len(parsed.duplicates),
            ", ".join(parsed.duplicates),
        )
    units = job.units(items)
    progress = Progress(job.flow_key, len(units))
    if not dry_run:
        approval = await as_deployed(approval)
    waits = approval.required and not dry_run
    mode = "Dry run: planning" if dry_run else "Planning for approval" if waits else "Applying"
    logger.info("%s %d item(s) in %d call unit(s)", mode, len(items), len(units))

    needs_client = bool(units) and (not dry_run or job.reads_during_validation)
    record: SendRecord | None = None
    decision: Approval | None = None
    if waits:
        check_can_wait()  # before any call
    async with (
        compliance_client() if needs_client else nullcontext(None) as client,
        fenced() as fence,
    ):
        if client is not None:
            if not waits:  # a run that waits gets its token once approved
                await obtain_token_first()
            await job.validate_remotely(client, items)
        if waits and units:
            decision = await approved_or_rejected(
                job.flow_key, items, job.plan_groups, lambda: _plan_all(job, units), approval
            )
            if not decision.approved:
                if fence is not None:
                    await fence.confirm_now()
                return await _rejected(job, parsed, decision, rerun_of=rerun_of, attempt=attempt)
            logger.info("Applying %d approved item(s)", len(items))
            await obtain_token_first()
        await progress.start()
        if dry_run:
            results = _plan_all(job, units)
            await progress.finish()
        elif units:
            assert client is not None
            results, record = await _apply_attempt(
                job, client, units, concurrency, progress, fence, done or {}
            )
        else:  # only carried failures: nothing to send
            results = []
            await progress.finish()
        # what outlives the run is written by a confirmed attempt only: a lost one reports
        # nothing and proposes no final state
        confirmed = fence.confirm_now if fence is not None and not dry_run else _nothing
        if carried:
            results = [*results, *carried]
        summary = _summary(
            job, parsed, results, dry_run=dry_run, rerun_of=rerun_of, attempt=attempt
        )
        summary.approval = decision
        await confirmed()
        await publish_results_table(job.flow_key, summary, results)
        if not dry_run:
            await confirmed()
            await publish_failed_items(job.flow_key, summary)
            await confirmed()
            await emit_failed_items_event(job.flow_key, summary)
        _log_outcome(summary)
        if record is not None:
            await confirmed()
            await record.forget()
        await confirmed()
    keep_summary(summary)
    if summary.failed:
        failed = ItemsFailed(summary)
        return Failed(message=str(failed), data=failed)
    return summary


async def _nothing() -> None:
    """No confirmation needed (a dry run, or no flow run)."""


def _plan_all(job: WriteJob[ItemT], units: Sequence[Sequence[ItemT]]) -> list[AnyResult]:
    """What a dry run reports, and what an approver is shown: every unit's plan, in order."""
    return [result for unit in units for result in job.plan(unit)]


async def _rejected(
    job: WriteJob[ItemT],
    parsed: ParsedItems[ItemT],
    decision: Approval,
    *,
    rerun_of: str | None,
    attempt: int,
) -> State[Any]:
    """Every item reported not applied, no failed-items record, the run Cancelled."""
    reason = f"not applied: {decision.line()}"
    results: list[AnyResult] = [Done(i.label(), Outcome.SKIPPED, reason) for i in parsed.items]
    summary = _summary(job, parsed, results, dry_run=False, rerun_of=rerun_of, attempt=attempt)
    summary.approval = decision
    await publish_results_table(job.flow_key, summary, results)
    get_run_logger().warning("%s; nothing was sent", decision.line())
    return Cancelled(message=f"{decision.line()}; nothing was sent", data=summary)


async def obtain_token_first() -> None:
    """Get the shared token as its own task run before the first write (docs/performance.md#kept);
    not fatal if it fails: every call asks the broker again and reports its own items."""
    try:
        await get_shared_access_token.with_options(retries=0)()
    except Exception as error:
        get_run_logger().warning(
            "No access token yet (%s); each call will ask again and report its items",
            describe_error(error),
        )


async def _apply_attempt(
    job: WriteJob[ItemT],
    client: ComplianceClient,
    units: list[list[ItemT]],
    concurrency: int,
    progress: Progress,
    attempt: Attempt | None,
    done: Mapping[str, str],
) -> tuple[list[AnyResult], SendRecord | None]:
    """This attempt's results in unit order: known done, settled by earlier attempts, then sent."""
    by_unit: dict[int, Sequence[AnyResult]] = {
        index: [Done(item.label(), Outcome.SKIPPED, done[item.key()]) for item in unit]
        for index, unit in enumerate(units)
        if all(item.key() in done for item in unit)
    }
    record: SendRecord | None = None
    in_flight = job.units_in_flight(concurrency)  # once: a job may set up its call slots here
    if attempt is not None:  # in a flow run: fence the writes, record them, resume
        verifiable = type(job).applied_by_lost_attempt is not WriteJob.applied_by_lost_attempt
        record = await SendRecord.open(  # the whole list: every attempt numbers it alike
            attempt,
            units,
            window=2 * in_flight,
            max_window=MAX_CLAIM_WINDOW if verifiable else 2 * in_flight,
        )
        by_unit |= await _settle_earlier(job, client, units, record, skip=set(by_unit))
    for _ in by_unit:
        await progress.advance()
    todo = {index: unit for index, unit in enumerate(units) if index not in by_unit}
    if record is not None:
        record.plan(list(todo))
    by_unit |= await _apply_all(job, client, todo, in_flight, progress, record)
    if attempt is not None and attempt.lost is not None:
        raise AttemptLost(attempt.lost)
    if record is not None:
        await record.flush()
    return [result for index in sorted(by_unit) for result in by_unit[index]], record


async def _settle_earlier(
    job: WriteJob[ItemT],
    client: ComplianceClient,
    units: list[list[ItemT]],
    record: SendRecord,
    skip: set[int],
) -> dict[int, Sequence[AnyResult]]:
    """The units (but ``skip``) earlier attempts settled: done, or claimed without an answer."""
    if not record.earlier:
        return {}
    settled: dict[int, Sequence[AnyResult]] = {}
    unknown: list[int] = []
    for index, unit in enumerate(units):
        if index in skip:
            continue
        if record.settled(index):
            settled[index] = [Done(item.label(), reason=EARLIER_DONE) for item in unit]
        elif record.unknown(index):
            unknown.append(index)
    done = len(settled)
    applied: set[int] | None = None
    if unknown:
        await record.attempt.outlast_stale_writes()  # a late write of theirs lands first
        since = record.started_at - CLOCK_MARGIN
        try:
            applied = await job.applied_by_lost_attempt(client, [units[i] for i in unknown], since)
        except Exception as error:
            get_run_logger().warning(
                "Could not tell which units the lost attempt applied (%s): all go to review",
                describe_error(error),
            )
    for position, index in enumerate(unknown):
        if applied is None:
            outcome = Outcome.NEEDS_REVIEW
            settled[index] = [_failed_row(item, outcome, UNKNOWN_FATE) for item in units[index]]
        elif position in applied:
            record.confirmed(index)
            settled[index] = [Done(item.label(), reason=EARLIER_CONFIRMED) for item in units[index]]
    get_run_logger().info(
        "Attempt %d of this run, after attempt(s) %s: of %d call unit(s), %d were done, %d were "
        "claimed without an answer (%s), %d are to send",
        record.attempt.run_count,
        ", ".join(map(str, record.earlier)),
        len(units),
        done,
        len(unknown),
        "all for review: not sent again"
        if applied is None
        else f"{len(applied)} applied according to the service",
        len(units) - len(settled),
    )
    return settled


EARLIER_DONE = "applied by an earlier attempt of this run"
EARLIER_CONFIRMED = "applied by an earlier attempt of this run that lost contact (service confirms)"
UNKNOWN_FATE = (
    "claimed by an earlier attempt of this run that was lost before the answer; not sent again: "
    "check whether it was applied, rerun it if not"
)


async def _apply_all(
    job: WriteJob[ItemT],
    client: ComplianceClient,
    units: dict[int, list[ItemT]],
    in_flight: int,
    progress: Progress,
    record: SendRecord | None,
) -> dict[int, Sequence[AnyResult]]:
    limiter = anyio.CapacityLimiter(in_flight)
    by_unit: dict[int, Sequence[AnyResult]] = {}

    async def run(index: int, unit: list[ItemT]) -> None:
        async with limiter:
            by_unit[index] = await _send_unit(job, client, index, unit, record)
        if record is None or record.attempt.lost is None:  # a lost attempt shows nothing more
            await progress.advance()

    async with anyio.create_task_group() as group:
        for index, unit in units.items():
            group.start_soon(run, index, unit)
    return by_unit


async def _send_unit(
    job: WriteJob[ItemT],
    client: ComplianceClient,
    index: int,
    unit: list[ItemT],
    record: SendRecord | None,
) -> Sequence[AnyResult]:
    """Claim the unit in the send record, send it, note the answer; every item gets a result."""
    if record is not None:
        try:
            await record.claim(index)
        except AttemptLost as lost:  # the run aborts: these rows are never reported
            return [failure(item, lost) for item in unit]
        except Exception as error:
            reason = f"not sent: the Prefect server did not record it ({describe_error(error)})"
            return [_failed_row(item, Outcome.FAILED_RETRYABLE, reason) for item in unit]
    try:
        results = await job.apply(client, unit)
    except Exception as error:  # a bug or an unforeseen error fails its items only
        results = [failure(item, error) for item in unit]
    if record is not None:
        record.answered(index, results)
    return results


def _summary(
    job: WriteJob[ItemT],
    parsed: ParsedItems[ItemT],
    results: list[AnyResult],
    *,
    dry_run: bool,
    rerun_of: str | None,
    attempt: int,
) -> RunSummary:
    counts = Counter(result.outcome for result in results)
    summary = RunSummary(
        flow=job.flow_key,
        flow_run_id=current_flow_run_id(),
        dry_run=dry_run,
        total=len(results),
        counts={outcome: counts[outcome] for outcome in Outcome if counts[outcome]},
        duplicates_removed=parsed.duplicates,
        failed_items=[r for r in results if isinstance(r, ItemResult) and r.outcome.is_failure],
        rerun_of=rerun_of,
        attempt=attempt,
    )
    return job.summarize(summary, [r for r in results if isinstance(r, ItemResult)])


def _log_outcome(summary: RunSummary) -> None:
    logger = get_run_logger()
    logger.info("Result: %s", summary.headline())
    for result in summary.failed_items[:20]:
        logger.warning("%s: %s - %s", result.item, result.outcome.value, result.reason)
    if summary.failed > 20:
        logger.warning("... and %d more failed item(s)", summary.failed - 20)
    if summary.failed and summary.flow_run_id:
        logger.warning(rerun_hint(summary.flow_run_id))
