"""Audit-log tasks: load and save a checkpoint, export a slice of pages, find what a lost
attempt of a write run applied. Paging and dedupe live in ``audit_log/reading.py``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from prefect import task
from prefect.cache_policies import NONE

from audit_log.checkpoints import EventLogCheckpoint, VariableCheckpointStore
from audit_log.jsonl_export import DayFileExport, ExportCheckpoint
from audit_log.reading import iter_new_logged_pages
from compliance_api.client import ComplianceClient
from runtime.retries import API_CALL


@task(name="Save the audit-log checkpoint", cache_policy=NONE, retries=3, retry_delay_seconds=2)
async def save_log_checkpoint(
    store: VariableCheckpointStore, checkpoint: EventLogCheckpoint, forward_only: bool = True
) -> bool:
    """False (and nothing written) if the stored checkpoint got further than this one."""
    return await store.save(checkpoint, forward_only=forward_only)


@task(name="Load the audit-log checkpoint", cache_policy=NONE, retries=3, retry_delay_seconds=2)
async def load_log_checkpoint(store: VariableCheckpointStore) -> EventLogCheckpoint | None:
    return await store.load()


@dataclass
class ExportedSlice:
    """What one slice of the export did, and the checkpoint it committed."""

    checkpoint: ExportCheckpoint
    written: int = 0
    pages: int = 0
    duplicates_skipped: int = 0
    touched: frozenset[str] = frozenset()
    more: bool = True


@task(name="Export pages of the audit log", **API_CALL)
async def export_pages(
    client: ComplianceClient,
    export: DayFileExport,
    checkpoint: ExportCheckpoint,
    page_size: int,
    pages: int,
) -> ExportedSlice:
    """Up to ``pages`` pages appended to their day files, then made durable and committed once
    (one fsync per slice, not per page; still exactly once: ``audit_log/jsonl_export.py``)."""
    done = ExportedSlice(checkpoint)
    log = checkpoint.log
    files, lines = dict(checkpoint.files), dict(checkpoint.lines)
    touched: set[str] = set()
    async for page in iter_new_logged_pages(client, log, page_size=page_size, max_pages=pages):
        # in the loop, not a thread: a thread was slower (GIL hand-offs, docs/performance.md)
        touched |= export.append(files, lines, page.new_entries)
        log = page.checkpoint
        done.written += len(page.new_entries)
        done.pages += 1
        done.duplicates_skipped += page.skipped
        done.more = page.has_next_page
    if done.pages < pages:
        done.more = False
    if done.pages:
        done.checkpoint = ExportCheckpoint(log=log, files=files, lines=lines)
        await asyncio.to_thread(export.sync_and_commit, touched, done.checkpoint)
    done.touched = frozenset(touched)
    return done


@task(name="Look in the audit log for what a lost attempt applied", **API_CALL)
async def logged_targets(
    client: ComplianceClient, action: str, since: datetime
) -> list[dict[str, set[str]]]:
    """Per ``action`` entry logged since ``since``, its target ids by target type."""
    found: list[dict[str, set[str]]] = []
    async for entry in client.iter_event_logs(start_date=since):
        if entry.action == action:
            targets: dict[str, set[str]] = {}
            for target in entry.targets:
                targets.setdefault(target.type, set()).add(target.id)
            found.append(targets)
    return found
