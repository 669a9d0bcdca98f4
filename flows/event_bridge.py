"""The audit-log bridge: every audit entry becomes exactly one Prefect event.

Per page after the checkpoint: send the events, wait until the server accepts them, then save
the checkpoint. A crash replays at most one page with the same event ids (uuid5 of the entry),
which the server deduplicates (docs/read-flows.md).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Annotated

from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from audit_log.checkpoints import (
    BRIDGE_CHECKPOINT_VARIABLE,
    EventLogCheckpoint,
    VariableCheckpointStore,
    exclusive_run,
)
from audit_log.events import audit_event
from audit_log.reading import iter_new_pages
from read_reports.filters import parse_timestamp
from runtime.attempts import abort_if_lost
from runtime.connection import compliance_client
from runtime.events import EventSink
from runtime.form import AtLeastOne, Maybe, NonBlank, PageSize, Seconds, title
from runtime.locks import LockTimeoutError
from runtime.task_inputs import unwalked
from tasks.event_logs import load_log_checkpoint, save_log_checkpoint
from tasks.events import send_events

DEFAULT_CHECKPOINT_VARIABLE = BRIDGE_CHECKPOINT_VARIABLE
DEFAULT_LOCK = "compliance-event-bridge"
#: Prefect Variable names: lowercase letters, digits, dashes and underscores
VariableName = Annotated[str, Field(pattern=r"^[a-z0-9_-]{1,255}$")]
#: distinct event names counted in a run's result (an audit log has a few dozen actions)
MAX_COUNTED_NAMES = 200


class BridgeResult(BaseModel):
    """What one run did; ``events_by_name`` shows which automations it may have triggered."""

    skipped: bool = False
    reason: str = ""
    emitted: int = 0
    pages: int = 0
    duplicates_skipped: int = 0
    events_by_name: dict[str, int] = Field(default_factory=dict)
    checkpoint: dict[str, object] = Field(default_factory=dict)


@flow(name="bridge-event-log")
async def bridge_event_log(
    start_date: Annotated[Maybe[str], title("Start date")] = None,
    page_size: Annotated[PageSize, title("Page size")] = 100,
    max_pages: Annotated[Maybe[AtLeastOne], title("Max pages")] = None,
    checkpoint_variable: Annotated[
        VariableName, title("Checkpoint variable")
    ] = DEFAULT_CHECKPOINT_VARIABLE,
    lock_name: Annotated[NonBlank, title("Lock name")] = DEFAULT_LOCK,
    lock_wait_seconds: Annotated[Seconds, title("Lock wait (seconds)")] = 60.0,
    reset_checkpoint: Annotated[bool, title("Reset checkpoint")] = False,
) -> BridgeResult:
    """Emit one Prefect event per new audit-log entry, resuming from the stored checkpoint.

    Args:
        start_date: Where a bridge with no checkpoint starts (ISO 8601, e.g. '2025-01-31').
            Empty: now. Bootstrap already records a start for the deployed bridge, so this
            applies with reset checkpoint (or a new checkpoint variable); otherwise runs
            resume from the checkpoint.
        page_size: Audit-log entries read per API call (1 to 100).
        max_pages: Stop after this many pages, to catch up in slices. Empty: read to the end.
        checkpoint_variable: The Prefect variable holding the checkpoint (lowercase letters,
            digits, '-' and '_'). Change it only for a separate bridge.
        lock_name: The lock on the Prefect server that keeps two runs from overlapping.
        lock_wait_seconds: How long to wait for a running bridge before skipping this run
            (the next run continues from the checkpoint).
        reset_checkpoint: Ignore the stored checkpoint and start again at the start date.
    """
    first_start = parse_timestamp("start_date", start_date)
    logger = get_run_logger()
    try:
        async with exclusive_run(lock_name, lock_wait_seconds):
            return await _bridge(
                VariableCheckpointStore(checkpoint_variable),
                first_start,
                page_size,
                max_pages,
                reset_checkpoint,
            )
    except LockTimeoutError as exc:
        reason = f"another run held {lock_name!r} for more than {lock_wait_seconds:g}s ({exc})"
        logger.warning("Skipped: %s; the next run continues from the checkpoint", reason)
        return BridgeResult(skipped=True, reason=reason)


async def _bridge(
    store: VariableCheckpointStore,
    first_start: datetime | None,
    page_size: int,
    max_pages: int | None,
    reset_checkpoint: bool,
) -> BridgeResult:
    logger = get_run_logger()
    checkpoint = None if reset_checkpoint else await load_log_checkpoint(store)
    if checkpoint is None:
        checkpoint = EventLogCheckpoint(start_date=first_start or datetime.now(UTC))
        logger.info("No checkpoint in %r: starting at %s", store.name, checkpoint.start_date)
        # Saved before reading: if this run finds nothing, the next one must still start here,
        # not at its own "now", or entries logged in between would never be bridged.
        await save_log_checkpoint(store, checkpoint, forward_only=not reset_checkpoint)
    elif first_start is not None:
        logger.info("Resuming from the checkpoint in %r; start_date is ignored", store.name)
    result = BridgeResult()
    names: Counter[str] = Counter()
    async with compliance_client() as client, EventSink() as sink:
        async for page in iter_new_pages(
            client, checkpoint, page_size=page_size, max_pages=max_pages
        ):
            events = [audit_event(entry) for entry in page.new_entries]
            if events:
                await send_events(sink, unwalked(events))
            await abort_if_lost()  # a run started again elsewhere owns the checkpoint now
            await save_log_checkpoint(store, page.checkpoint, forward_only=not reset_checkpoint)
            checkpoint = page.checkpoint
            result.emitted += len(events)
            result.pages += 1
            result.duplicates_skipped += page.skipped
            for event in events:
                if event.event in names or len(names) < MAX_COUNTED_NAMES:
                    names[event.event] += 1
    result.events_by_name = dict(names.most_common())
    result.checkpoint = {
        "last_event_id": checkpoint.last_event_id,
        "last_event_date": checkpoint.last_event_date.isoformat()
        if checkpoint.last_event_date
        else None,
        "entries_total": checkpoint.entries_total,
    }
    logger.info(
        "Emitted %s events from %s pages (%s already emitted entries skipped)",
        result.emitted,
        result.pages,
        result.duplicates_skipped,
    )
    return result
