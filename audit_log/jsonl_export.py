"""The audit-log export on disk: one JSON Lines file per UTC day, exactly once.

Day files are appended and fsynced, *then* ``checkpoint.json`` (with their committed sizes) is
replaced atomically; the next run cuts every day file back to its committed size before reading
again. Layout and design: docs/read-flows.md#export-event-log.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import defaultdict
from datetime import UTC, date
from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_core import to_json

from audit_log.checkpoints import EventLogCheckpoint
from compliance_api.errors import InputError
from compliance_api.files import GROUP_READABLE, open_append, open_new
from compliance_api.models import LoggedEvent

CHECKPOINT_FILE = "checkpoint.json"
LOCK_FILE = ".export.lock"
DAY_FILE = re.compile(r"^event-log-(\d{4}-\d{2}-\d{2})\.jsonl$")


class ExportCheckpoint(BaseModel):
    """The log position plus the committed byte size of every day file."""

    log: EventLogCheckpoint
    files: dict[str, int] = Field(default_factory=dict)
    lines: dict[str, int] = Field(default_factory=dict)


class DayFileExport:
    """Appends pages to day files and commits them with the checkpoint."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.checkpoint_path = directory / CHECKPOINT_FILE

    def load(self) -> ExportCheckpoint | None:
        if not self.checkpoint_path.exists():
            stray = sorted(p.name for p in self.day_files())
            if stray:
                raise InputError(
                    "output_dir",
                    str(self.directory),
                    f"holds day files ({stray[0]} ...) but no {CHECKPOINT_FILE}; export into an "
                    "empty directory or restore the checkpoint that belongs to these files",
                )
            return None
        return ExportCheckpoint.model_validate_json(self.checkpoint_path.read_bytes())

    def day_files(self) -> list[Path]:
        return [p for p in self.directory.iterdir() if DAY_FILE.match(p.name)]

    def repair(self, checkpoint: ExportCheckpoint) -> dict[str, int]:
        """Cut every day file back to its committed size; returns bytes removed per file."""
        removed: dict[str, int] = {}
        for path in self.day_files():
            committed = checkpoint.files.get(path.name, 0)
            size = path.stat().st_size
            if size > committed:
                removed[path.name] = size - committed
                if committed == 0:
                    path.unlink()
                else:
                    with path.open("r+b") as handle:
                        handle.truncate(committed)
                        os.fsync(handle.fileno())
            elif size < committed:
                raise InputError(
                    "output_dir",
                    str(self.directory),
                    f"{path.name} is shorter ({size} bytes) than the checkpoint says it was "
                    f"committed with ({committed} bytes): the file was edited or truncated",
                )
        if removed:
            _fsync_directory(self.directory)
        return removed

    def append(
        self, files: dict[str, int], lines: dict[str, int], entries: list[LoggedEvent]
    ) -> set[str]:
        """Append ``entries`` to their day files (not yet durable: see ``sync_and_commit``);
        ``files`` and ``lines`` become the sizes and line counts to commit. Returns the files
        written."""
        by_day: dict[date, list[bytes]] = defaultdict(list)
        for entry in entries:
            # the entry's JSON object as the API returned it: same fields, order and values
            by_day[entry.date.astimezone(UTC).date()].append(to_json(entry.record))
        written: set[str] = set()
        for day, rows in by_day.items():
            name = f"event-log-{day.isoformat()}.jsonl"  # a DAY_FILE
            with open_append(self.directory / name, GROUP_READABLE) as handle:
                handle.write(b"\n".join(rows) + b"\n")
                files[name] = handle.tell()
            lines[name] = lines.get(name, 0) + len(rows)
            written.add(name)
        return written

    def sync_and_commit(self, written: set[str], checkpoint: ExportCheckpoint) -> None:
        """fsync the day files written, then commit: the order that makes it exactly once."""
        for name in sorted(written):
            with (self.directory / name).open("rb") as handle:
                os.fsync(handle.fileno())
        if written:
            _fsync_directory(self.directory)
        self.commit(checkpoint)

    def commit(self, checkpoint: ExportCheckpoint) -> None:
        """Replace the checkpoint atomically (write, fsync, rename, fsync the directory)."""
        temporary = self.checkpoint_path.with_suffix(".json.tmp")
        with open_new(temporary, GROUP_READABLE) as handle:
            handle.write(checkpoint.model_dump_json(indent=1).encode())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.checkpoint_path)
        _fsync_directory(self.directory)


def _fsync_directory(directory: Path) -> None:
    """Make a created, removed or renamed entry durable (POSIX; a no-op where unsupported)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
