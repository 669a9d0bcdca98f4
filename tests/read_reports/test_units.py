"""Read-report logic: parameter checks, bounded tables, freshness and connector digests."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from compliance_api.client import check_page_size
from compliance_api.errors import InputError
from compliance_api.models import KnowledgeBaseResource, PackageVulnerability
from read_reports.connector_digests import VulnerabilityDigest, severity_band
from read_reports.filters import ListFilters, parse_tags, parse_timestamp
from read_reports.freshness import FreshnessRules, FreshnessTally, Reason, as_item
from read_reports.tables import BoundedTop

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


# ------------------------------------------------------------------ parameters


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"last_updated_after": "2025-13-01"}, "last_updated_after", "2025-13-01"),
        ({"expires_before": "yesterday"}, "expires_before", "yesterday"),
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
        types=["URL", "FILE", "URL"],
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


# ------------------------------------------------------------------ reports


def test_bounded_top_keeps_the_most_urgent_rows_stably() -> None:
    top: BoundedTop[int] = BoundedTop(3)
    for key, name in [(5, "e"), (1, "a"), (3, "c"), (1, "a2"), (9, "z"), (2, "b")]:
        top.offer(key, {"name": name})
    assert [row["name"] for row in top.rows()] == ["a", "a2", "b"]
    assert top.seen == 6


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
