"""Runbook: rerun exactly the items that failed in an earlier write run, from its failed-items
record, with the same flow's rules.

From the command line:
``python -m flows.rerun <flow_run_id> [--attempt N] [--dry-run] [--retryable-only]``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Annotated, Any

from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.exceptions import ObjectNotFound, ParameterTypeError
from prefect.logging import get_run_logger

from compliance_api.errors import ComplianceError, InputError
from flows.account_tags import AccountTags
from flows.add_people_to_groups import GroupMembership
from flows.document_links import UnconfirmedLinks, document_links_job
from flows.promote_vendors import VendorPromotion
from flows.questionnaires import QuestionnaireRouting
from runtime import collector
from runtime.form import AtLeastOne, Maybe, title
from write_engine.approval import approved_plan
from write_engine.inputs import ParsedItems, dedupe, parse_items
from write_engine.outcomes import ItemResult, ItemsFailed, Outcome, RunSummary
from write_engine.reporting import FailedItemsRecord, read_failed_items
from write_engine.run import DEFAULT_CONCURRENCY, Concurrency, WriteJob, run_write_job

JobFactory = Callable[[UnconfirmedLinks], AbstractAsyncContextManager[WriteJob[Any]]]

#: every write flow, by the key its failed-items record carries
JOBS: dict[str, JobFactory] = {
    VendorPromotion.flow_key: lambda _: nullcontext(VendorPromotion()),
    GroupMembership.flow_key: lambda _: nullcontext(GroupMembership()),
    AccountTags.flow_key: lambda _: nullcontext(AccountTags()),
    QuestionnaireRouting.flow_key: lambda _: nullcontext(QuestionnaireRouting()),
    "attach-document-links": document_links_job,
}

#: attempts in total, the original run included
DEFAULT_MAX_ATTEMPTS = 5
#: how a retryable-only rerun reports an earlier failure it did not send
NOT_RERUN = "not rerun automatically"


async def _failed_items_of(flow_run_id: str) -> FailedItemsRecord:
    """The record, or an InputError saying why there is none."""
    record = await read_failed_items(flow_run_id)
    if record is not None:
        return record
    async with get_client() as client:
        try:
            run = await client.read_flow_run(uuid.UUID(flow_run_id))
        except ObjectNotFound:
            raise InputError("flow_run_id", flow_run_id, "no such flow run") from None
        flow_name = (await client.read_flow(run.flow_id)).name
    state = run.state.name if run.state else "unknown"
    raise InputError(
        "flow_run_id",
        flow_run_id,
        f"run of {flow_name!r} (state {state}) left no failed-items record: it is not a write "
        "run, was a dry run, its plan was rejected or never approved, or it stopped before "
        "reporting; run the flow again with its input (document links are protected by the "
        "ledger)",
    )


def _split(
    record: FailedItemsRecord, retryable_only: bool
) -> tuple[list[dict[str, Any]], list[ItemResult]]:
    """The inputs to send, and the earlier failures reported again without sending them."""
    if not retryable_only:
        return record.inputs, []
    send: list[dict[str, Any]] = []
    kept: list[ItemResult] = []
    for row, data in zip(record.rows, record.inputs, strict=True):
        outcome = Outcome(row["outcome"])
        if outcome is Outcome.FAILED_RETRYABLE:
            send.append(data)
            continue
        reason = str(row["reason"])
        if not reason.startswith(NOT_RERUN):  # carried along a chain: say it once
            reason = f"{NOT_RERUN} ({outcome.value}): {reason}"
        kept.append(
            ItemResult(item=str(row["item"]), outcome=outcome, reason=reason, rerun_input=data)
        )
    return send, kept


@flow(name="rerun-failed-items", flow_run_name="rerun-{flow_run_id}")
async def rerun_failed_items(
    flow_run_id: Annotated[uuid.UUID, title("Flow run id")],
    attempt: Annotated[Maybe[AtLeastOne], title("Attempt")] = None,
    max_attempts: Annotated[AtLeastOne, title("Max attempts")] = DEFAULT_MAX_ATTEMPTS,
    unconfirmed_links: Annotated[UnconfirmedLinks, title("Unconfirmed links")] = "report",
    dry_run: Annotated[bool, title("Dry run")] = False,
    concurrency: Annotated[Concurrency, title("Concurrency")] = DEFAULT_CONCURRENCY,
    retryable_only: Annotated[bool, title("Retryable items only")] = False,
) -> RunSummary | State[Any]:
    """Rerun exactly the failed items of an earlier run of any write flow (or of a rerun).

    Items that succeeded are never sent again; a questionnaire resumes at the step that failed.

    Args:
        flow_run_id: The earlier run whose failed items to send again: its flow run id (a
            UUID), shown in its logs and on its page in the UI.
        attempt: Which attempt this rerun is; the original run is attempt 1. Empty: the
            earlier run's attempt + 1.
        max_attempts: The rerun refuses to start when its attempt is above this (the original
            run counts). After the automatic reruns stopped, rerun by hand with a higher value.
        unconfirmed_links: Only for document links reported needs_review (the service gave no
            clear answer): 'report' reports them again; after checking the document, 'resend'
            sends them (the link is not there) or 'mark_attached' records them as attached
            (it is).
        dry_run: Only report what would be sent; nothing is written.
        concurrency: How many items are sent at the same time (1 to 32).
        retryable_only: Send only the items that failed for a transient reason (what the
            automatic rerun does). The others (not found, permission denied, links to review)
            are reported again, unsent, and stay in this run's failed-items record.
    """
    run_id = str(flow_run_id)
    record = await _failed_items_of(run_id)
    attempt = attempt or record.attempt + 1
    if attempt > max_attempts:
        raise InputError(
            "attempt",
            attempt,
            f"exceeds max_attempts={max_attempts} (the original run is attempt 1); "
            "look at the failures and rerun by hand with a higher max_attempts",
        )
    factory = JOBS.get(record.flow_key)
    if factory is None:
        raise InputError("flow_run_id", run_id, f"unknown write flow {record.flow_key!r}")
    send, kept = _split(record, retryable_only)
    logger = get_run_logger()
    logger.info(
        "Rerunning %d failed item(s) of %s run %s (attempt %d)",
        len(send),
        record.flow_key,
        run_id,
        attempt,
    )
    if kept:
        logger.warning(
            "Not sending %d item(s) that failed for a reason a rerun cannot fix (only "
            "failed_retryable items are rerun automatically); they stay failed in this run's "
            "record: fix them, then rerun this run by hand",
            len(kept),
        )
    # a rerun of a bulk run may send tens of thousands of items: the same collector tuning as
    # add-people-to-groups (runtime/collector.py)
    async with factory(unconfirmed_links) as job:
        records = [(f"failed item {i}", data) for i, data in enumerate(send, start=1)]
        parsed = dedupe(parse_items(job.item_model, records))
        parsed, outside = await _inside_the_approved_plan(run_id, parsed)
        kept += outside
        with collector.tuned_for_bulk_run():
            return await run_write_job(
                job,
                parsed,
                dry_run=dry_run,
                concurrency=concurrency,
                rerun_of=run_id,
                attempt=attempt,
                carried=kept,
            )


#: reruns followed back to the run that started the chain, at most
MAX_CHAIN = 100
OUTSIDE_PLAN = "not in the plan approved for run {run}: not sent (start a new run to plan it)"


async def _inside_the_approved_plan(
    run_id: str, parsed: ParsedItems[Any]
) -> tuple[ParsedItems[Any], list[ItemResult]]:
    """Where the chain began with an approved run, only items of its approved plan are sent
    (its decision and plan checked again); the rest are reported, unsent and not rerunnable."""
    original = await _original_run(uuid.UUID(run_id))
    plan = await approved_plan(original)
    if plan is None:
        return parsed, []
    inside = [item for item in parsed.items if plan.holds(item)]
    reason = OUTSIDE_PLAN.format(run=original)
    outside = [
        ItemResult(item=item.label(), outcome=Outcome.FAILED, reason=reason)
        for item in parsed.items
        if not plan.holds(item)
    ]
    if outside:
        get_run_logger().warning("%d item(s) are %s", len(outside), reason)
    return ParsedItems(inside, parsed.duplicates), outside


async def _original_run(flow_run_id: uuid.UUID) -> uuid.UUID:
    """The write run a chain of reruns began with (each rerun names its source run)."""
    async with get_client() as client:
        for _ in range(MAX_CHAIN):
            run = await client.read_flow_run(flow_run_id)
            flow = await client.read_flow(run.flow_id)
            source = run.parameters.get("flow_run_id")
            if flow.name != rerun_failed_items.name or source is None:
                return flow_run_id
            flow_run_id = uuid.UUID(str(source))
    raise InputError("flow_run_id", str(flow_run_id), f"a chain of more than {MAX_CHAIN} reruns")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m flows.rerun",
        description="Rerun exactly the failed items of an earlier write flow run.",
    )
    parser.add_argument("flow_run_id", help="id of the earlier run (shown in its logs and UI)")
    parser.add_argument("--attempt", type=int, default=None, help="default: earlier + 1")
    parser.add_argument("--max-attempts", type=int, default=DEFAULT_MAX_ATTEMPTS)
    parser.add_argument(
        "--unconfirmed-links", choices=["report", "resend", "mark_attached"], default="report"
    )
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument(
        "--retryable-only",
        action="store_true",
        help="send only items that failed for a transient reason (as the automatic rerun does)",
    )
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Exit 0 when every item now succeeded, 1 when some failed again, 2 on bad input."""
    args = _arguments(argv)
    try:
        summary = asyncio.run(
            rerun_failed_items(
                flow_run_id=args.flow_run_id,
                attempt=args.attempt,
                max_attempts=args.max_attempts,
                unconfirmed_links=args.unconfirmed_links,
                dry_run=args.dry_run,
                concurrency=args.concurrency,
                retryable_only=args.retryable_only,
            )
        )
    except ItemsFailed as failed:
        print(f"Rerun finished with failures: {failed.summary.headline()}")
        for item in failed.summary.failed_items:
            print(f"  {item.item}: {item.outcome.value} - {item.reason}")
        if failed.summary.flow_run_id:
            print(f"Rerun those with: python -m flows.rerun {failed.summary.flow_run_id}")
        return 1
    except (ComplianceError, ParameterTypeError) as error:
        print(f"Cannot rerun: {error}", file=sys.stderr)
        return 2
    assert isinstance(summary, RunSummary)  # a Failed run raised ItemsFailed above
    print(f"Rerun finished: {summary.headline()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
