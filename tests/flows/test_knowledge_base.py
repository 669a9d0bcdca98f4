"""knowledge_base_freshness against the sandbox and a real Prefect server."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.exceptions import ParameterTypeError

from compliance_api.errors import InputError
from compliance_api.models import (
    AnswerLibraryEntry,
    AnswerLibraryFilter,
    KnowledgeBaseFilter,
    KnowledgeBaseResource,
)
from flows.knowledge_base import knowledge_base_freshness
from read_reports.events import KB_EXPIRED, KB_EXPIRING_SOON
from runtime.connection import compliance_client
from runtime.events import deterministic_event_id
from sandbox.runner import SandboxHandle
from tests.fixtures.lists import read_all
from tests.fixtures.runs import calls, no_calls, read_events

pytestmark = pytest.mark.usefixtures("reads_env")

RESOURCES = "GET /v1/knowledge-base/resources"
ANSWERS = "GET /v1/knowledge-base/answer-library"


def parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def oracle(sandbox: SandboxHandle, as_of: datetime, days: int, stale_days: int) -> dict[str, Any]:
    """The expected classification, computed straight from the sandbox's seeded documents."""
    dataset = sandbox.sandbox.tiers["commercial"].dataset
    expected: dict[str, Any] = {"expired": [], "expiring": [], "not_verified": 0, "current": 0}
    for kind, items in (
        ("knowledge_base_resource", dataset.kb),
        ("answer_library_entry", dataset.answers),
    ):
        for item in items:
            doc = item.doc
            expires, verified = parse(doc.get("expirationDate")), parse(doc.get("lastVerified"))
            flagged = False
            if doc.get("expirationStatus") == "EXPIRED" or (expires and expires <= as_of):
                expected["expired"].append((kind, doc["id"]))
                flagged = True
            elif expires and expires <= as_of + timedelta(days=days):
                expected["expiring"].append((kind, doc["id"]))
                flagged = True
            if verified is None or verified < as_of - timedelta(days=stale_days):
                expected["not_verified"] += 1
                flagged = True
            expected["current"] += not flagged
    return expected


async def test_report_matches_the_data_and_every_expiring_item_reaches_prefect(
    reads_env: SandboxHandle,
) -> None:
    as_of = datetime.now(UTC) + timedelta(days=37)  # a report day no other test uses
    report = await knowledge_base_freshness(
        as_of=as_of.isoformat(), expiring_within_days=30, not_verified_days=120
    )
    expected = oracle(reads_env, as_of, 30, 120)
    assert report.scanned == {"knowledge_base_resource": 300, "answer_library_entry": 200}
    assert report.expired == len(expected["expired"]) > 0
    assert report.expiring_soon == len(expected["expiring"]) > 0
    assert report.not_verified == expected["not_verified"]
    assert report.current == expected["current"]
    assert report.events_sent == report.expired + report.expiring_soon
    assert calls(reads_env, RESOURCES) == 3 and calls(reads_env, ANSWERS) == 2

    day = as_of.date().isoformat()
    ids = [deterministic_event_id(KB_EXPIRING_SOON, k, i, day) for k, i in expected["expiring"]]
    ids += [deterministic_event_id(KB_EXPIRED, k, i, day) for k, i in expected["expired"]]
    stored = await read_events(ids=ids, expect=len(ids))
    assert len(stored) == len(ids)
    soon = next(e for e in stored if e.event == KB_EXPIRING_SOON and "owner" in e.resource_in_role)
    assert soon.resource["compliance.item.id"] == soon.payload["id"]
    assert 0 <= soon.payload["days_left"] <= 30
    owner = soon.resource_in_role["owner"]
    assert owner["compliance.owner.id"] == soon.payload["owner"]["id"]
    assert "flow-run" in soon.resource_in_role  # which run said so

    async with get_client() as client:
        artifacts = await client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=["knowledge-base-needs-action"])
            )
        )
    latest = max(artifacts, key=lambda a: a.created)
    rows = json.loads(latest.data) if isinstance(latest.data, str) else latest.data
    assert "Showing the 50 most urgent of" in (latest.description or "")
    assert len(rows) == 50
    assert rows[0]["reason"].startswith("expired")  # expired first, longest ago first


async def test_filters_reach_the_service_and_narrow_the_report(
    reads_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    window = {
        "last_updated_after": (datetime.now(UTC) - timedelta(days=300)).isoformat(),
        "expires_before": (datetime.now(UTC) + timedelta(days=200)).isoformat(),
    }
    tag = reads_env.sandbox.tiers["commercial"].dataset.tag_pairs[0]
    report = await knowledge_base_freshness(
        q="policy",
        types=["URL", "FILE"],
        sources=["resources", "answer_library"],
        emit_events=False,
        **window,
    )
    tagged = await knowledge_base_freshness(
        tags=[f"{tag[0]}:{tag[1]}"], sources=["answer_library"], emit_events=False
    )
    url_only = await knowledge_base_freshness(types=["URL"], emit_events=False)  # no answers
    async with compliance_client() as client:
        filters = KnowledgeBaseFilter(
            q="policy",
            last_updated_after=window["last_updated_after"],
            expires_before=window["expires_before"],
        )
        policy = await read_all(client, KnowledgeBaseResource, filters=filters)
        answers = await read_all(
            client,
            AnswerLibraryEntry,
            filters=AnswerLibraryFilter(
                q="policy",
                **{
                    "last_updated_after": window["last_updated_after"],
                    "expires_before": window["expires_before"],
                },
            ),
        )
        tagged_answers = await read_all(
            client,
            AnswerLibraryEntry,
            filters=AnswerLibraryFilter(matches_tags=[{"category_id": tag[0], "tag_id": tag[1]}]),
        )
        urls = await read_all(client, KnowledgeBaseResource, filters={"type_matches_any": ["URL"]})
    assert 0 < report.scanned["knowledge_base_resource"] == len(policy) < 300
    assert report.scanned.get("answer_library_entry", 0) == len(answers)
    assert report.filters["types"] == ["URL", "FILE"]
    assert 0 < tagged.scanned["answer_library_entry"] == len(tagged_answers) < 200
    assert "knowledge_base_resource" not in tagged.scanned
    assert 0 < url_only.scanned["knowledge_base_resource"] == len(urls) < 300
    assert "answer_library_entry" not in url_only.scanned
    assert all(r.type == "URL" for r in urls)


async def test_empty_result_is_a_report_not_an_error(reads_env: SandboxHandle) -> None:
    report = await knowledge_base_freshness(q="zz-no-such-title-zz")
    assert report.scanned == {}
    assert report.events_sent == report.expired == report.expiring_soon == 0
    assert calls(reads_env, RESOURCES) == 1 and calls(reads_env, ANSWERS) == 1


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"expires_before": "2025-02-30"}, "expires_before"),
        ({"last_updated_after": "last tuesday"}, "last_updated_after"),
        ({"types": ["PDF"]}, "types"),
        ({"tags": ["categoryWithoutTag"]}, "tags"),
        ({"page_size": 0}, "page_size"),
        ({"page_size": 101}, "page_size"),
        ({"expiring_within_days": -1}, "expiring_within_days"),
        ({"not_verified_days": -5}, "not_verified_days"),
        ({"sources": ["documents"]}, "sources"),
        ({"as_of": "soon"}, "as_of"),
        ({"expires_after": "2025-03-01", "expires_before": "2025-01-01"}, "expires_after"),
    ],
)
async def test_bad_input_fails_before_any_call(
    reads_env: SandboxHandle, parameters: dict[str, Any], field: str
) -> None:
    with pytest.raises((InputError, ParameterTypeError)) as caught:
        await knowledge_base_freshness(**parameters)
    assert field in str(caught.value)
    assert no_calls(reads_env)


async def test_many_small_pages_are_all_read(reads_env: SandboxHandle) -> None:
    report = await knowledge_base_freshness(
        sources=["answer_library"], page_size=7, emit_events=False, top_n=5
    )
    assert report.scanned == {"answer_library_entry": 200}
    assert report.pages == calls(reads_env, ANSWERS) == math.ceil(200 / 7)
    assert len(report.urgent_items) == 5
