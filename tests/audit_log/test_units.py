"""Audit-log logic: checkpoint dedupe, entry-to-event naming, the export's day files."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from audit_log.checkpoints import MAX_BOUNDARY_IDS, EventLogCheckpoint
from audit_log.events import audit_event, event_name, resource_kind
from audit_log.jsonl_export import DayFileExport, ExportCheckpoint
from compliance_api.errors import InputError
from compliance_api.models import EventLogEntry, LoggedEvent

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def record(entry_id: str, at: datetime, action: str = "VENDOR_DISCOVERED") -> dict[str, Any]:
    return {
        "id": entry_id,
        "actor": {"id": "u1", "type": "USER"},
        "date": at.isoformat(),
        "action": action,
        "targets": [{"id": f"t-{entry_id}", "type": "DiscoveredVendor"}],
    }


def entry(entry_id: str, at: datetime, action: str = "VENDOR_DISCOVERED") -> EventLogEntry:
    return EventLogEntry.model_validate(record(entry_id, at, action))


def logged(entry_id: str, at: datetime) -> LoggedEvent:
    return LoggedEvent.model_validate(record(entry_id, at))


# ------------------------------------------------------------------ checkpoint dedupe


def test_checkpoint_skips_the_boundary_and_older_entries_when_resuming_by_date() -> None:
    page = [entry("a", T0), entry("b", T0 + timedelta(seconds=1)), entry("c", T0 + timedelta(1))]
    checkpoint = EventLogCheckpoint().after_page(page[:2], "cur-2", handled=2)
    assert checkpoint.last_event_date == T0 + timedelta(seconds=1)
    assert checkpoint.boundary_ids == ["b"]
    # by date: a (older) and b (boundary) were handled, c is new
    assert [e.id for e in checkpoint.unhandled(page, by_cursor=False)] == ["c"]
    # same timestamp, different id: new
    late_twin = entry("b2", T0 + timedelta(seconds=1))
    assert checkpoint.unhandled([late_twin], by_cursor=False) == [late_twin]
    # after a cursor, position decides: an older-dated late write is still new, b is not
    late = entry("late", T0 - timedelta(1))
    assert checkpoint.unhandled([late, page[1]], by_cursor=True) == [late]
    # an id twice in one page counts once
    assert [e.id for e in checkpoint.unhandled([page[2], page[2]], by_cursor=True)] == ["c"]


def test_a_new_checkpoint_takes_every_entry() -> None:
    page = [entry("a", T0), entry("b", T0 - timedelta(1))]
    assert EventLogCheckpoint().unhandled(page, by_cursor=False) == page


def test_checkpoint_accumulates_ids_at_one_timestamp_and_never_moves_back() -> None:
    checkpoint = EventLogCheckpoint()
    checkpoint = checkpoint.after_page([entry("a", T0), entry("b", T0)], "c1", 2)
    checkpoint = checkpoint.after_page([entry("c", T0)], "c2", 1)
    assert checkpoint.boundary_ids == ["a", "b", "c"]
    checkpoint = checkpoint.after_page([entry("old", T0 - timedelta(1))], "c3", 1)
    assert checkpoint.last_event_date == T0
    assert checkpoint.cursor == "c3"
    assert checkpoint.entries_total == 4
    many = [entry(f"x{i}", T0 + timedelta(1)) for i in range(MAX_BOUNDARY_IDS + 10)]
    checkpoint = checkpoint.after_page(many, "c4", len(many))
    assert len(checkpoint.boundary_ids) == MAX_BOUNDARY_IDS
    assert checkpoint.boundary_ids[-1] == many[-1].id
    assert len(checkpoint.model_dump_json()) < 5000  # fits a Prefect Variable


# ------------------------------------------------------------------ event naming


def test_audit_entry_becomes_one_templatable_event() -> None:
    event = audit_event(entry("e1", T0))
    assert event.event == "compliance.vendor_discovered"
    assert event.resource.id == "compliance.discoveredvendor.t-e1"
    assert event.resource["compliance.target.id"] == "t-e1"
    assert event.resource["compliance.audit.id"] == "e1"
    assert event.occurred == T0
    actor = event.resource_in_role["actor"]
    assert actor.id == "compliance.actor.user.u1"
    assert event.payload["audit_entry"]["id"] == "e1"
    assert audit_event(entry("e1", T0)).id == event.id  # deterministic
    assert audit_event(entry("e2", T0)).id != event.id


def test_event_name_rule() -> None:
    assert (
        event_name("QUESTIONNAIRE_READY_FOR_REVIEW") == "compliance.questionnaire_ready_for_review"
    )
    assert event_name("Vendor Added/To Managed") == "compliance.vendor_added_to_managed"
    assert event_name("  ") == "compliance.unknown_action"
    assert resource_kind("Customer-Trust Account") == "customertrustaccount"


def test_entry_without_targets_is_its_own_resource() -> None:
    bare = EventLogEntry.model_validate(
        {"id": "z", "actor": {"id": "s", "type": "SYSTEM"}, "date": T0.isoformat(), "action": "X"}
    )
    assert audit_event(bare).resource.id == "compliance.audit-entry.z"


# ------------------------------------------------------------------ export files


def test_export_repair_cuts_uncommitted_lines_and_refuses_foreign_files(tmp_path: Path) -> None:
    export = DayFileExport(tmp_path)
    checkpoint = ExportCheckpoint(log=EventLogCheckpoint())
    export.commit(checkpoint)
    sizes: dict[str, int] = {}
    lines: dict[str, int] = {}
    written = export.append(sizes, lines, [logged("a", T0), logged("b", T0 + timedelta(1))])
    committed = ExportCheckpoint(log=checkpoint.log, files=sizes, lines=lines)
    export.sync_and_commit(written, committed)
    # a crashed slice: lines written, checkpoint not replaced
    export.append(
        dict(sizes), dict(lines), [logged("c", T0 + timedelta(1)), logged("d", T0 + timedelta(2))]
    )
    removed = export.repair(export.load() or committed)
    assert set(removed) == {"event-log-2025-03-02.jsonl", "event-log-2025-03-03.jsonl"}
    assert not (tmp_path / "event-log-2025-03-03.jsonl").exists()
    day2 = (tmp_path / "event-log-2025-03-02.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in day2] == ["b"]

    other = tmp_path / "other"
    other.mkdir()
    (other / "event-log-2025-01-01.jsonl").write_text("{}\n")
    with pytest.raises(InputError, match="output_dir"):
        DayFileExport(other).load()


def test_export_line_is_the_entry_as_sent_in_its_utc_day(tmp_path: Path) -> None:
    sent = (
        '{"id":"late","date":"2025-03-01T23:30:00.000-02:00","actor":{"id":"u1","type":"USER"},'
        '"action":"VENDOR_DISCOVERED","ip":"10.0.0.1","note":"caf\u00e9 \\"q\\"","targets":[]}'
    )
    entry = LoggedEvent.model_validate_json(sent)
    written = DayFileExport(tmp_path).append({}, {}, [entry])
    assert written == {"event-log-2025-03-02.jsonl"}  # 01:30 UTC the next day
    line = (tmp_path / "event-log-2025-03-02.jsonl").read_text(encoding="utf-8")
    assert line.endswith("\n") and json.loads(line) == json.loads(sent)
    assert list(json.loads(line)) == list(json.loads(sent))  # every field, in the sent order
    assert '"date":"2025-03-01T23:30:00.000-02:00"' in line  # the time as written


@pytest.mark.parametrize("body", ['{"date":"2025-03-01T00:00:00Z"}', '{"id":"x","date":"soon"}'])
def test_logged_event_still_requires_an_id_and_a_date(body: str) -> None:
    with pytest.raises(ValidationError) as caught:
        LoggedEvent.model_validate_json(body)
    assert caught.value.errors()[0]["loc"][0] in ("id", "date")
