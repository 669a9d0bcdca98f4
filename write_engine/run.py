"""The shape every write flow shares: validate, apply in bounded parallel, report, fail red.

A flow states *what* to do with one unit of work (a ``WriteJob``); this module does the rest
the same way for all of them: a progress bar while units finish, a results table, the
failed-items record a rerun reads, an event when something failed, and a final state that is
Completed only when every item succeeded.

Concurrency is a capacity limiter around awaited async task calls on the flow's own event
loop, so every task shares the one pooled ``ComplianceClient`` and the one token broker.

A run may be started again on another host after its process lost contact (crash recovery).
Each attempt writes only while the run is still its own (``runtime/attempts.py``), records
what it sends before sending it (``write_engine/send_record.py``), and starts from what earlier
attempts recorded: nothing is sent twice, and a lost attempt reports nothing.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, Generic

import anyio
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext
from prefect.exceptions import Abort
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
from runtime.attempts import Attempt, AttemptLost, abort_if_lost, claimed, fenced
from runtime.connection import compliance_client
from tasks.token import get_shared_access_token
from write_engine.approval import (
    NO_APPROVAL,
    ApprovalPolicy,
    approved_or_rejected,
    check_can_wait,
)
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
    """One write flow's rules: how items group into API calls, and what a call does.

    A *unit* is the list of items one call (or one sequence of calls) handles: one vendor, one
    chunk of up to 100 people of one group, one questionnaire's route.
    """

    #: the flow's key: names its artifacts and tells the rerun flow which job to use
    flow_key: ClassVar[str]
    item_model: ClassVar[type[Any]]
    #: dry runs need a client only when validation reads from the service
    reads_during_validation: ClassVar[bool] = False

    def units(self, items: Sequence[ItemT]) -> list[list[ItemT]]:
        return [[item] for item in items]

    def plan_groups(self, item: ItemT) -> Iterable[str]:
        """What the plan an approver reads counts the item under (its group, tags or document);
        by default a plain total."""
        return ("items",)

    def units_in_flight(self, concurrency: int) -> int:
        """How many units run at once: ``concurrency``, unless the job caps its API calls
        itself (then it may prepare more units than it sends calls)."""
        return concurrency

    async def validate_remotely(self, client: ComplianceClient, items: Sequence[ItemT]) -> None:
        """Checks that need reads from the service; raise InputError before any write."""

    @abstractmethod
    def plan(self, unit: Sequence[ItemT]) -> Sequence[AnyResult]:
        """Dry run: what would be sent (no call)."""

    @abstractmethod
    async def apply(self, client: ComplianceClient, unit: Sequence[ItemT]) -> Sequence[AnyResult]:
        """Send the unit; every item gets a result, API errors become failed items.

        Items that need no follow-up may be reported as a brief :class:`Done` (cheap in bulk);
        failures are full :class:`ItemResult` rows with their rerun input.
        """

    async def applied_by_lost_attempt(
        self, client: ComplianceClient, units: Sequence[Sequence[ItemT]], since: datetime
    ) -> set[int] | None:
        """Of ``units``, claimed by an earlier attempt of this run that never got their answers
        (each was sent or not), the positions the service shows as applied, e.g. in its audit
        log since ``since``; the others are sent. ``None``: the service cannot tell, so every
        one is reported for review, never sent twice (the default).
        """
        return None

    def summarize(self, summary: RunSummary, results: Sequence[ItemResult]) -> RunSummary:
        """A flow-specific summary (a subclass of RunSummary) if the flow has more to say.

        ``results`` are the full ItemResult rows the job reported (not the brief ``Done``s).
        """
        return summary


def failure(item: ItemInput, error: BaseException, *, prefix: str = "") -> ItemResult:
    """An item result for an error that outlasted the task's retries."""
    outcome, reason = classify(error)
    return ItemResult(
        item=item.label(),
        outcome=outcome,
        reason=f"{prefix}{reason}",
        rerun_input=item.as_input(),
    )


def unusable_id(item: str) -> ItemResult:
    """The failed row of an id read from the audit log that cannot be sent (nothing to rerun:
    the same id would be refused again)."""
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
    """Apply (or plan) every item, publish the reports, and return the run's final outcome.

    Returns the summary when every item succeeded (or was skipped/planned), otherwise a Failed
    state whose data is :class:`ItemsFailed` carrying the same summary.

    ``carried`` are rows this run reports without sending them: earlier failures (an automatic
    rerun leaves refusals to a person), which keep the run red and stay in its failed-items
    record, so the last run of a chain always lists everything still to do. ``done`` maps the
    keys of items known to be done already (e.g. by the audit log) to why: reported skipped,
    not sent.

    With ``approval.required`` (and not a dry run) the run applies only a plan someone
    approved (write_engine/approval.py): it suspends until then, and a rejected plan ends the
    run Cancelled with nothing sent.

    A run that is no longer this process's (``runtime/attempts.py``) ends with Prefect's
    ``Abort``: nothing published, no state proposed.
    """
    try:
        return await _run_write_job(
            job,
            parsed,
            dry_run=dry_run,
            concurrency=concurrency,
            rerun_of=rerun_of,
            attempt=attempt,
            carried=carried,
            done=done or {},
            approval=approval,
        )
    except AttemptLost as lost:
        raise Abort(str(lost)) from None


async def _run_write_job(
    job: WriteJob[ItemT],
    parsed: ParsedItems[ItemT],
    *,
    dry_run: bool,
    concurrency: int,
    rerun_of: str | None,
    attempt: int,
    carried: Sequence[ItemResult],
    done: Mapping[str, str],
    approval: ApprovalPolicy,
) -> RunSummary | State[Any]:
    logger = get_run_logger()
    items = parsed.items
    if parsed.duplicates:
        logger.warning(
            "Removed %d duplicate item(s): %s", len(parsed.duplicates), ", ".join(parsed.duplicates)
        )
    units = job.units(items)
    progress = Progress(job.flow_key, len(units))
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
                await obtain_token_first(logger)
            await job.validate_remotely(client, items)
        if waits and units:
            decision = await approved_or_rejected(
                job.flow_key, items, job.plan_groups, lambda: _plan_all(job, units), approval
            )
            if not decision.approved:
                return await _rejected(job, parsed, decision, rerun_of=rerun_of, attempt=attempt)
            logger.info("Applying %d approved item(s)", len(items))
            await obtain_token_first(logger)
        await progress.start()
        if dry_run:
            results = _plan_all(job, units)
            await progress.finish()
        elif units:
            assert client is not None
            results, record = await _apply_attempt(
                job, client, units, concurrency, progress, fence, done
            )
        else:  # only carried failures: nothing to send
            results = []
            await progress.finish()
    if not dry_run:
        await abort_if_lost()  # a lost attempt reports nothing and proposes no final state

    if carried:
        results = [*results, *carried]
    summary = _summary(job, parsed, results, dry_run=dry_run, rerun_of=rerun_of, attempt=attempt)
    summary.approval = decision
    await publish_results_table(job.flow_key, summary, results)
    if not dry_run:
        await publish_failed_items(job.flow_key, summary)
        emit_failed_items_event(job.flow_key, summary)
    _log_outcome(logger, summary)
    if record is not None:
        await record.forget()
    if summary.failed:
        failed = ItemsFailed(summary)
        return Failed(message=str(failed), data=failed)
    return summary


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
    """A rejected plan: every item reported not applied, no failed-items record (nothing to
    rerun), and the run Cancelled with the decision as its message."""
    reason = f"not applied: {decision.line()}"
    results: list[AnyResult] = [Done(i.label(), Outcome.SKIPPED, reason) for i in parsed.items]
    summary = _summary(job, parsed, results, dry_run=False, rerun_of=rerun_of, attempt=attempt)
    summary.approval = decision
    await publish_results_table(job.flow_key, summary, results)
    get_run_logger().warning("%s; nothing was sent", decision.line())
    return Cancelled(message=f"{decision.line()}; nothing was sent", data=summary)


async def obtain_token_first(logger: logging.Logger | logging.LoggerAdapter[Any]) -> None:
    """Get the shared token before the first write, as its own task run.

    The run then starts its calls with a token in hand: the UI shows which token (fingerprint and
    expiry, never the value) before any item is sent, and the token endpoint's rate-limit slot is
    taken before hundreds of task runs start (on a SQLite Prefect server, that slot's update
    otherwise collides with the recording of their first states and waits out a 2 s retry).

    A failure here is not the run's end: every call asks the broker again (with its retries) and
    reports its own items, so an outage still leaves each item failed_retryable and rerunnable.
    """
    try:
        await get_shared_access_token.with_options(retries=0)()
    except Exception as error:
        logger.warning(
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
    """This attempt's results, in unit order: what is known done (``done``: item key ->
    reason) and what earlier attempts settled, then the rest, sent."""
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
    """The units (but ``skip``) earlier attempts of this run settled: done, or claimed without
    an answer."""
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
            settled[index] = [_unknown_fate(item) for item in units[index]]
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


def _unknown_fate(item: ItemInput) -> ItemResult:
    return ItemResult(
        item=item.label(),
        outcome=Outcome.NEEDS_REVIEW,
        reason=(
            "claimed by an earlier attempt of this run that was lost before the answer; not "
            "sent again: check whether it was applied, rerun it if not"
        ),
        rerun_input=item.as_input(),
    )


async def _apply_all(
    job: WriteJob[ItemT],
    client: ComplianceClient,
    units: dict[int, list[ItemT]],
    in_flight: int,
    progress: Progress,
    record: SendRecord | None = None,
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
            return [_not_sent(item, error) for item in unit]
    try:
        with claimed() if record is not None else nullcontext():
            results = await job.apply(client, unit)
    except Exception as error:  # a bug or an unforeseen error fails its items only
        results = [failure(item, error) for item in unit]
    if record is not None:
        record.answered(index, results)
    return results


def _not_sent(item: ItemInput, error: BaseException) -> ItemResult:
    return ItemResult(
        item=item.label(),
        outcome=Outcome.FAILED_RETRYABLE,
        reason=f"not sent: the Prefect server did not record it ({describe_error(error)})",
        rerun_input=item.as_input(),
    )


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
        counts={outcome: counts.get(outcome, 0) for outcome in Outcome if counts.get(outcome)},
        duplicates_removed=parsed.duplicates,
        failed_items=[r for r in results if isinstance(r, ItemResult) and r.outcome.is_failure],
        rerun_of=rerun_of,
        attempt=attempt,
    )
    return job.summarize(summary, [r for r in results if isinstance(r, ItemResult)])


def _log_outcome(logger: logging.Logger | logging.LoggerAdapter[Any], summary: RunSummary) -> None:
    logger.info("Result: %s", summary.headline())
    for result in summary.failed_items[:20]:
        logger.warning("%s: %s - %s", result.item, result.outcome.value, result.reason)
    if summary.failed > 20:
        logger.warning("... and %d more failed item(s)", summary.failed - 20)
    if summary.failed and summary.flow_run_id:
        logger.warning(rerun_hint(summary.flow_run_id))
