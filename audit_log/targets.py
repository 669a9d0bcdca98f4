"""The work of an event-triggered write flow: targets of one action logged since its checkpoint.

The audit log is the source of truth (no endpoint lists discovered vendors or questionnaires to
review); an event only wakes the flow. The flow's own checkpoint moves only once every target is
handled (``commit``), so a crashed run's entries are read again; repeats count as done.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prefect import get_run_logger
from prefect.client.schemas.objects import State

from audit_log.checkpoints import START_MARGIN, EventLogCheckpoint, VariableCheckpointStore
from audit_log.reading import iter_new_pages
from runtime.attempts import abort_if_lost
from runtime.connection import compliance_client
from tasks.event_logs import load_log_checkpoint, save_log_checkpoint
from write_engine.approval import NO_APPROVAL, ApprovalPolicy
from write_engine.inputs import ItemT, ParsedItems, split_identifiers
from write_engine.outcomes import RunSummary
from write_engine.run import WriteJob, run_write_job, unusable_id


@dataclass(frozen=True)
class AuditLogSource:
    """Where a write flow finds its work: entries with ``action`` about a ``target_type``;
    entries with ``done_action`` about the same target say the work is done already."""

    action: str
    target_type: str
    checkpoint_variable: str
    #: e.g. ``VENDOR_ADDED_TO_MANAGED``: a target logged with it after the checkpoint is skipped
    done_action: str | None = None


@dataclass
class NewTargets:
    """The targets found after a checkpoint, and the checkpoint once they are handled."""

    source: AuditLogSource
    #: the checkpoint the run started from
    loaded: EventLogCheckpoint
    #: the checkpoint after the last page read
    checkpoint: EventLogCheckpoint
    ids: list[str] = field(default_factory=list)
    #: targets the log shows done since the checkpoint (by another run, or a lost attempt)
    done: set[str] = field(default_factory=set)
    entries_read: int = 0


async def read_new_targets(source: AuditLogSource, *, page_size: int = 100) -> NewTargets:
    """Every ``source`` target logged after the checkpoint, oldest first, each once. A missing
    checkpoint starts ``START_MARGIN`` back and is saved first, so no entry is skipped later."""
    logger = get_run_logger()
    store = VariableCheckpointStore(source.checkpoint_variable)
    checkpoint = await load_log_checkpoint(store)
    if checkpoint is None:
        checkpoint = EventLogCheckpoint(start_date=datetime.now(UTC) - START_MARGIN)
        logger.info("No checkpoint in %r: starting at %s", store.name, checkpoint.start_date)
        await save_log_checkpoint(store, checkpoint)
    found = NewTargets(source=source, checkpoint=checkpoint, loaded=checkpoint)
    ordered: dict[str, None] = {}  # each target once, in the order first logged
    async with compliance_client() as client:
        async for page in iter_new_pages(client, checkpoint, page_size=page_size):
            found.entries_read += len(page.new_entries)
            found.checkpoint = page.checkpoint
            for entry in page.new_entries:
                ids = [t.id for t in entry.targets if t.type == source.target_type]
                if entry.action == source.done_action:
                    found.done.update(ids)
                if entry.action == source.action:
                    ordered.update(dict.fromkeys(ids))
    found.ids = list(ordered)
    logger.info(
        "Audit log since the checkpoint in %r: %d entries, %d with %s",
        store.name,
        found.entries_read,
        len(found.ids),
        source.action,
    )
    return found


async def commit(found: NewTargets) -> None:
    """Move the checkpoint past what ``found`` read: call once every target is handled."""
    if found.checkpoint != found.loaded:
        await abort_if_lost()  # a run started again elsewhere owns the checkpoint now
        store = VariableCheckpointStore(found.source.checkpoint_variable)
        if not await save_log_checkpoint(store, found.checkpoint):
            get_run_logger().info(
                "The checkpoint in %r is already past what this run read: kept", store.name
            )


async def run_on_new_targets(
    job: WriteJob[ItemT],
    source: AuditLogSource,
    parse: Callable[[list[str]], ParsedItems[ItemT]],
    *,
    dry_run: bool,
    concurrency: int,
    approval: ApprovalPolicy = NO_APPROVAL,
) -> RunSummary | State[Any]:
    """Run ``job`` on the new targets' items, then ``commit`` (not after a dry run or a rejected
    plan). An id no URL can carry is a failed row, not a stop that would block every later run."""
    found = await read_new_targets(source)
    ids, unusable = split_identifiers(found.ids)
    done = {i: f"done already: the audit log shows {source.done_action}" for i in found.done}
    outcome = await run_write_job(
        job,
        parse(ids),
        dry_run=dry_run,
        concurrency=concurrency,
        carried=[unusable_id(value) for value in unusable],
        done=done,
        approval=approval,
    )
    rejected = isinstance(outcome, State) and outcome.is_cancelled()
    if not dry_run and not rejected:
        await commit(found)
    return outcome
