"""Pure logic of the read flows: parameter checks, dedupe, naming, classification, files."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from audit_log.checkpoints import MAX_BOUNDARY_IDS, EventLogCheckpoint
from audit_log.events import audit_event, event_name, resource_kind
from audit_log.jsonl_export import DayFileExport, ExportCheckpoint
from compliance_api.client import check_page_size
from compliance_api.errors import InputError
from compliance_api.models import EventLogEntry, KnowledgeBaseResource, PackageVulnerability
from read_reports.connector_digests import VulnerabilityDigest, severity_band
from read_reports.filters import ListFilters, parse_tags, parse_timestamp
from read_reports.freshness import FreshnessRules, FreshnessTally, Reason, as_item
from read_reports.tables import BoundedTop

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


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"last_updated_after": "2025-13-01"}, "last_updated_after", "2025-13-01"),
        ({"expires_before": "yesterday"}, "expires_before", "yesterday"),
        ({"types": ["FILE", "PDF"]}, "types", "PDF"),
        ({"tags": ["no-colon"]}, "tags", "no-colon"),
        ({"tags": ["cat:"]}, "tags", "cat:"),
        ({"tags": [{"categoryId": "c"}]}, "tags", {"categoryId": "c"}),
        ({"tags": "cat:tag"}, "tags", "cat:tag"),
    ],
)
def test_bad_filters_name_the_parameter_and_value(kwargs: dict, field: str, value: object) -> None:
    with pytest.raises(InputError) as caught:
        ListFilters(**kwargs)
    assert caught.value.field == field
    assert caught.value.value == value
    assert field in str(caught.value)


def test_inverted_window_is_rejected() -> None:
    with pytest.raises(InputError, match="expires_after"):
        ListFilters(expires_after="2025-02-01", expires_before="2025-01-01")


@pytest.mark.parametrize("size", [0, 101, -1, True])
def test_page_size_outside_1_to_100_is_rejected(size: int) -> None:
    with pytest.raises(InputError, match="page_size"):
        check_page_size(size)


def test_filters_accept_dates_types_and_tags_in_operator_friendly_forms() -> None:
    filters = ListFilters(
        q="  SOC 2 ",
        types=["url", "FILE", "URL"],
        tags=["c1:t1", {"categoryId": "c2", "tagId": "t2"}],
        last_updated_after="2025-01-31",
        expires_before="2025-03-01T10:00:00Z",
    )
    params = dict(filters.for_resources().to_params())
    assert filters.q == "SOC 2"
    assert [t.value for t in filters.types or []] == ["URL", "FILE"]
    assert json.loads(params["matchesTags"]) == [
        {"categoryId": "c1", "tagId": "t1"},
        {"categoryId": "c2", "tagId": "t2"},
    ]
    assert params["lastUpdatedAfter"].startswith("2025-01-31T00:00:00")
    assert parse_timestamp("x", "2025-03-01T10:00:00") == datetime(2025, 3, 1, 10, tzinfo=UTC)
    assert "typeMatchesAny" not in dict(filters.for_answer_library().to_params())
    assert parse_tags("tags", []) is None


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


# ------------------------------------------------------------------ reports


def test_bounded_top_keeps_the_most_urgent_rows_stably() -> None:
    top: BoundedTop[int] = BoundedTop(3)
    for key, name in [(5, "e"), (1, "a"), (3, "c"), (1, "a2"), (9, "z"), (2, "b")]:
        top.offer(key, {"name": name})
    assert [row["name"] for row in top.rows()] == ["a", "a2", "b"]
    assert top.seen == 6 and top.truncated


def test_freshness_classifies_and_counts_by_owner() -> None:
    rules = FreshnessRules(as_of=T0, expiring_within_days=30, not_verified_days=90)
    tally = FreshnessTally(rules, top_n=10)

    def resource(rid: str, expires: datetime | None, verified: datetime | None, owner: str) -> None:
        record = KnowledgeBaseResource.model_validate(
            {
                "id": rid,
                "type": "FILE",
                "title": rid,
                "ownerAssignment": {"type": "User", "id": owner, "displayName": owner.upper()},
                "expirationDate": expires.isoformat() if expires else None,
                "lastVerified": verified.isoformat() if verified else None,
            }
        )
        tally.add(as_item(record))

    resource("expired", T0 - timedelta(days=1), T0, "o1")
    resource("soon", T0 + timedelta(days=29), T0, "o1")
    resource("later", T0 + timedelta(days=31), T0 - timedelta(days=91), "o2")
    resource("fine", None, T0, "o2")
    assert tally.totals == {"expired": 1, "expiring soon": 1, "not verified": 1, "current": 1}
    owners = {row["owner"]: row for row in tally.owner_rows()}
    assert owners["O1"]["expired"] == 1 and owners["O1"]["expiring_soon"] == 1
    assert owners["O2"]["not_verified"] == 1 and owners["O2"]["items"] == 2
    assert [row["id"] for row in tally.urgent.rows()] == ["expired", "soon", "later"]
    assert tally.urgent.rows()[0]["reason"] == Reason.EXPIRED.value


def test_vulnerabilities_are_banded_and_ordered_reachable_and_resolvable_first() -> None:
    digest = VulnerabilityDigest(top_n=10, min_severity=1.0)

    def vuln(uid: str, score: float, reachable: bool, resolvable: bool) -> None:
        digest.add(
            PackageVulnerability.model_validate(
                {
                    "displayName": uid,
                    "uniqueId": uid,
                    "severity": score,
                    "cvss3Score": score,
                    "isReachable": reachable,
                    "isResolvable": resolvable,
                    "cveId": f"CVE-{uid}",
                }
            )
        )

    vuln("crit-unreachable", 9.8, False, True)
    vuln("high-reach-fix", 7.5, True, True)
    vuln("crit-reach-nofix", 9.1, True, False)
    vuln("tiny", 0.5, True, True)
    assert [row["finding"] for row in digest.findings.rows()] == [
        "high-reach-fix",
        "crit-reach-nofix",
        "crit-unreachable",
    ]
    assert digest.summary()["by_severity"] == {"critical": 2, "high": 1}
    assert digest.below_threshold == 1
    assert [severity_band(s) for s in (9.0, 7.0, 4.0, 0.1, 0.0, None)] == [
        "critical",
        "high",
        "medium",
        "low",
        "none",
        "unknown",
    ]


# ------------------------------------------------------------------ export files


def test_export_repair_cuts_uncommitted_lines_and_refuses_foreign_files(tmp_path: Path) -> None:
    export = DayFileExport(tmp_path)
    checkpoint = ExportCheckpoint(log=EventLogCheckpoint())
    export.commit(checkpoint)
    sizes, lines = export.append_page(checkpoint, [entry("a", T0), entry("b", T0 + timedelta(1))])
    committed = ExportCheckpoint(log=checkpoint.log, files=sizes, lines=lines)
    export.commit(committed)
    # a crashed page: lines written, checkpoint not replaced
    export.append_page(committed, [entry("c", T0 + timedelta(1)), entry("d", T0 + timedelta(2))])
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
