"""export_event_log: JSON Lines per UTC day, exactly once across runs and crashes."""

from __future__ import annotations

import json
import stat
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from filelock import AsyncFileLock
from prefect.exceptions import ParameterTypeError

from audit_log.jsonl_export import CHECKPOINT_FILE, LOCK_FILE, DayFileExport
from compliance_api.errors import InputError
from flows import event_log_export
from flows.event_log_export import export_event_log
from sandbox.runner import SandboxHandle
from tests.fixtures.runs import calls, no_calls

pytestmark = pytest.mark.usefixtures("reads_env")

LOGS = "GET /v1/event-logs"


def exported(directory: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for path in sorted(directory.glob("event-log-*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert path.name == f"event-log-{record['date'][:10]}.jsonl"  # its own UTC day
            lines.append(record)
    return lines


async def test_export_writes_every_entry_once_and_appends_only_new_ones(
    reads_env: SandboxHandle, tmp_path: Path
) -> None:
    log = reads_env.sandbox.tiers["commercial"].dataset.events
    out = tmp_path / "audit"
    first = await export_event_log(output_dir=str(out), page_size=25)
    records = exported(out)
    assert first.written == len(records) == len(log)
    assert [r["id"] for r in records] == [e["id"] for e in log]  # log order, nothing twice
    assert records[0] == log[0]  # the entry as the API returned it
    assert calls(reads_env, LOGS) == first.pages == len(log) // 25
    assert sum(first.files.values()) == len(log)
    # an auditor's group may read the export; nobody else, and nobody but the owner writes it
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in out.iterdir()}
    assert set(modes.values()) <= {0o640, 0o600}, modes
    assert modes[CHECKPOINT_FILE] == 0o640 and modes[LOCK_FILE] == 0o600
    assert stat.S_IMODE(out.stat().st_mode) == 0o750

    again = await export_event_log(output_dir=str(out))
    assert again.written == 0 and len(exported(out)) == len(log)

    joined = reads_env.control.inject("person_joined", display_name="New Auditor")
    latest = await export_event_log(output_dir=str(out), start_date="1999-01-01")
    records = exported(out)
    assert latest.written == 1 and records[-1]["id"] == joined["event_log_id"]
    assert len(records) == len(log) and max(Counter(r["id"] for r in records).values()) == 1


@pytest.mark.parametrize(
    ("slice_pages", "dying_commit", "on_disk", "committed"),
    [
        (1, 3, 60, 30),  # slices of a page: page 2's commit dies, page 1 stays committed
        (50, 2, 90, 0),  # one slice of 3 pages: its only commit dies, nothing committed
    ],
)
async def test_crash_between_write_and_checkpoint_leaves_no_duplicate(
    reads_env: SandboxHandle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    slice_pages: int,
    dying_commit: int,
    on_disk: int,
    committed: int,
) -> None:
    log = reads_env.sandbox.tiers["commercial"].dataset.events[-90:]
    monkeypatch.setattr(event_log_export, "SLICE_PAGES", slice_pages)
    commits = 0
    original = DayFileExport.commit

    def dies_on_a_commit(self: DayFileExport, checkpoint: Any) -> None:
        nonlocal commits
        commits += 1  # 1: the new export's empty checkpoint, then one per slice
        if commits == dying_commit:
            raise OSError("disk full after writing the slice, before its checkpoint")
        original(self, checkpoint)

    monkeypatch.setattr(DayFileExport, "commit", dies_on_a_commit)
    with pytest.raises(OSError, match="disk full"):
        await export_event_log(output_dir=str(tmp_path), start_date=log[0]["date"], page_size=30)
    assert len(exported(tmp_path)) == on_disk  # the dying slice is on disk but not committed

    monkeypatch.setattr(DayFileExport, "commit", original)
    rerun = await export_event_log(output_dir=str(tmp_path), page_size=30)
    assert sum(rerun.repaired_bytes.values()) > 0
    assert rerun.written == 90 - committed
    assert [r["id"] for r in exported(tmp_path)] == [e["id"] for e in log]
    checkpoint = json.loads((tmp_path / CHECKPOINT_FILE).read_text())
    assert checkpoint["log"]["entries_total"] == 90


async def test_empty_log_after_start_writes_nothing(
    reads_env: SandboxHandle, tmp_path: Path
) -> None:
    result = await export_event_log(output_dir=str(tmp_path), start_date="2999-01-01")
    assert result.written == 0 and exported(tmp_path) == []
    assert calls(reads_env, LOGS) == 1


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"start_date": "01/02/2025"}, "start_date"),
        ({"page_size": 0}, "page_size"),
        ({"max_pages": -3}, "max_pages"),
        ({"output_dir": ""}, "output_dir"),
    ],
)
async def test_bad_input_fails_before_any_call(
    reads_env: SandboxHandle, tmp_path: Path, parameters: dict[str, Any], field: str
) -> None:
    with pytest.raises((InputError, ParameterTypeError)) as caught:
        await export_event_log(**{"output_dir": str(tmp_path), **parameters})
    assert field in str(caught.value)  # the flow's InputError or Prefect's check
    assert no_calls(reads_env)


async def test_foreign_files_without_checkpoint_are_refused(
    reads_env: SandboxHandle, tmp_path: Path
) -> None:
    (tmp_path / "event-log-2025-01-01.jsonl").write_text('{"id": "someone else"}\n')
    with pytest.raises(InputError, match="no checkpoint.json"):
        await export_event_log(output_dir=str(tmp_path))
    assert no_calls(reads_env)


async def test_a_run_started_while_another_writes_the_directory_is_skipped(
    reads_env: SandboxHandle, tmp_path: Path
) -> None:
    """The one lock the export takes: a run started outside the deployment (which runs one
    export at a time) against the same output_dir skips instead of writing the same files."""
    held = await AsyncFileLock(tmp_path / LOCK_FILE).acquire()
    async with held:
        result = await export_event_log(output_dir=str(tmp_path), lock_wait_seconds=0)
    assert result.skipped and "lock" in result.reason
    assert exported(tmp_path) == [] and no_calls(reads_env)
