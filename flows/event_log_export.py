"""Export the audit log to JSON Lines files an auditor can take, one file per UTC day.

A file lock in ``output_dir`` keeps two runs apart; each slice of pages is appended, fsynced,
then committed in ``checkpoint.json``, and a crashed run's uncommitted lines are cut off first,
so every entry lands exactly once (format: ``audit_log/jsonl_export.py``).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

from filelock import AsyncFileLock, Timeout
from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from audit_log.checkpoints import EventLogCheckpoint
from audit_log.jsonl_export import LOCK_FILE, DayFileExport, ExportCheckpoint
from compliance_api.errors import InputError
from compliance_api.files import GROUP_READABLE_DIR, PRIVATE, make_dirs
from read_reports.filters import parse_timestamp
from read_reports.tables import markdown_table, publish_markdown
from runtime import collector
from runtime.connection import compliance_client
from runtime.form import AtLeastOne, Maybe, PageSize, Seconds, title
from runtime.task_inputs import unwalked
from tasks.event_logs import export_pages

#: pages per task run (one fsync and one checkpoint each): 20,000 entries at the default size
SLICE_PAGES = 200


class ExportResult(BaseModel):
    output_dir: str
    skipped: bool = False
    reason: str = ""
    written: int = 0
    pages: int = 0
    duplicates_skipped: int = 0
    repaired_bytes: dict[str, int] = Field(default_factory=dict)
    files: dict[str, int] = Field(default_factory=dict)
    last_event_id: str | None = None
    last_event_date: datetime | None = None


def _output_dir(value: str) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise InputError("output_dir", value, "must be a directory path")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError("output_dir", value, "exists and is not a directory")
    return path


@flow(name="export-event-log")
async def export_event_log(
    output_dir: Annotated[str, title("Output directory")],
    start_date: Annotated[Maybe[str], title("Start date")] = None,
    page_size: Annotated[PageSize, title("Page size")] = 100,
    max_pages: Annotated[Maybe[AtLeastOne], title("Max pages")] = None,
    lock_wait_seconds: Annotated[Seconds, title("Lock wait (seconds)")] = 60.0,
) -> ExportResult:
    """Append new audit-log entries to output_dir/event-log-YYYY-MM-DD.jsonl, exactly once.

    Args:
        output_dir: The directory, on the worker's machine, of the day files and
            checkpoint.json (created if missing). The deployment takes it from the Prefect
            variable compliance_event_log_export_dir.
        start_date: Where the first export into this directory starts (ISO 8601, e.g.
            '2025-01-01'). Empty: the whole log. Later runs resume from
            output_dir/checkpoint.json.
        page_size: Audit-log entries read per API call (1 to 100).
        max_pages: Stop after this many pages, to catch up in slices. Empty: read to the end.
        lock_wait_seconds: How long to wait for an export already writing into output_dir
            before skipping this run (the next run continues from the checkpoint).
    """
    directory = _output_dir(output_dir)
    first_start = parse_timestamp("start_date", start_date)
    make_dirs(directory, GROUP_READABLE_DIR)
    logger = get_run_logger()
    try:
        lock = AsyncFileLock(directory / LOCK_FILE, timeout=lock_wait_seconds, mode=PRIVATE)
        held = await lock.acquire()
    except Timeout as exc:
        reason = f"another export held the lock for more than {lock_wait_seconds:g}s ({exc})"
        logger.warning("Skipped: %s; the next run continues from the checkpoint", reason)
        return ExportResult(output_dir=str(directory), skipped=True, reason=reason)
    async with held:
        with collector.frozen_for_long_read():
            result = await _export(DayFileExport(directory), first_start, page_size, max_pages)
    await _publish(result)
    return result


async def _export(
    export: DayFileExport, first_start: datetime | None, page_size: int, max_pages: int | None
) -> ExportResult:
    logger = get_run_logger()
    checkpoint = export.load()
    if checkpoint is None:
        checkpoint = ExportCheckpoint(log=EventLogCheckpoint(start_date=first_start))
        export.commit(checkpoint)
        logger.info("New export into %s from %s", export.directory, first_start or "the start")
    elif first_start is not None:
        logger.info("Resuming the export in %s; start_date is ignored", export.directory)
    result = ExportResult(output_dir=str(export.directory))
    result.repaired_bytes = export.repair(checkpoint)
    if result.repaired_bytes:
        logger.warning(
            "Removed lines written after the last checkpoint (a run stopped mid-slice): %s",
            result.repaired_bytes,
        )
    touched: set[str] = set()
    async with compliance_client() as client:
        more = True
        while more and (max_pages is None or result.pages < max_pages):
            pages = SLICE_PAGES if max_pages is None else min(SLICE_PAGES, max_pages - result.pages)
            done = await export_pages(
                client, unwalked(export), unwalked(checkpoint), page_size, pages
            )
            checkpoint, more = done.checkpoint, done.more
            touched |= done.touched
            result.written += done.written
            result.pages += done.pages
            result.duplicates_skipped += done.duplicates_skipped
            if more:
                logger.info(
                    "Exported %s entries so far, through %s",
                    result.written,
                    checkpoint.log.last_event_date,
                )
    result.files = {name: checkpoint.lines[name] for name in sorted(touched)}
    result.last_event_id = checkpoint.log.last_event_id
    result.last_event_date = checkpoint.log.last_event_date
    logger.info(
        "Exported %s entries into %s day files in %s",
        result.written,
        len(touched),
        export.directory,
    )
    return result


async def _publish(result: ExportResult) -> None:
    rows = [{"file": name, "lines_in_file": lines} for name, lines in result.files.items()]
    lines = [
        "# Audit-log export",
        "",
        f"{result.written} new entries written to `{result.output_dir}` "
        f"({result.pages} pages; last entry {result.last_event_id or '-'} at "
        f"{result.last_event_date.isoformat() if result.last_event_date else '-'}).",
        "",
        "Day files written by this run (total lines now in each file):",
        "",
        markdown_table(rows[:60]),
    ]
    if len(rows) > 60:
        lines.append(f"\n…and {len(rows) - 60} more day files.")
    if result.repaired_bytes:
        lines += ["", f"Repaired after an interrupted run: {result.repaired_bytes} bytes removed."]
    await publish_markdown("event-log-export", "\n".join(lines), "Audit-log export")
