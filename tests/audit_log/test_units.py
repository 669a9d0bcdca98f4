"""Audit-log logic: checkpoint dedupe, entry-to-event naming, the export's day files."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from audit_log.checkpoints import MAX_BOUNDARY_IDS, EventLogCheckpoint
from audit_log.events import audit_event, event_name, resource_kind
from audit_log.jsonl_export import DayFileExport, ExportCheckpoint
from compliance_api.errors import InputError
from compliance_api.models import EventLogEntry

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def entry(entry_id: str, at: datetime, action: str = "VENDOR_DISCOVERED") -> EventLogEntry:
    return EventLogEntry.model_validate(
        {
            "id": entry_id,
            "actor": {"id": "u1", "type": "USER"},
            "date": at.isoformat(),
            "action": action,
            "targets": [{"id": f"t-{entry_id}", "type": "DiscoveredVendor"}],
        }
    )


# ------------------------------------------------------------------ checkpoint dedupe


def test_checkpoint_skips_the_boundary_and_older_entries_when_resuming_by_date() -> None:
    page = [entry("a", T0), entry("b", T0 + timedelta(seconds=1)), entry("c", T0 + timedelta(1))]
    checkpoint = EventLogCheckpoint().after_page(page[:2], "cur-2", handled=2)
    assert checkpoint.last_event_date == T0 + timedelta(seconds=1)
    assert checkpoint.boundary_ids == ["b"]
    # by date: a (older) and b (boundary) were handled, c is new
    assert [e.id for e in page if not checkpoint.already_handled(e, by_cursor=False)] == ["c"]
    # same timestamp, different id: new
    late_twin = entry("b2", T0 + timedelta(seconds=1))
    assert not checkpoint.already_handled(late_twin, by_cursor=False)
    # after a cursor, position decides: an older-dated late write is still new
    assert not checkpoint.already_handled(entry("late", T0 - timedelta(1)), by_cursor=True)
    assert checkpoint.already_handled(entry("b", T0 + timedelta(seconds=1)), by_cursor=True)


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
    written = export.append(sizes, lines, [entry("a", T0), entry("b", T0 + timedelta(1))])
    committed = ExportCheckpoint(log=checkpoint.log, files=sizes, lines=lines)
    export.sync_and_commit(written, committed)
    # a crashed slice: lines written, checkpoint not replaced
    export.append(
        dict(sizes), dict(lines), [entry("c", T0 + timedelta(1)), entry("d", T0 + timedelta(2))]
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
