"""The client against the real sandbox over HTTP: every operation, pagination, 401, retries.

Uses the session ``sandbox`` fixture when the sandbox area provides it, else starts its own.
Counts come from ``/_sandbox/stats``, never from timing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from compliance_api.auth import AccessToken
from compliance_api.client import ComplianceClient
from compliance_api.errors import NotFoundError, PermissionDeniedError, ServerError
from compliance_api.models import (
    AccountTags,
    AccountUpdate,
    AnswerLibraryEntry,
    DocumentLinkCreate,
    KnowledgeBaseFilter,
    KnowledgeBaseResource,
    QuestionnaireStatus,
    QuestionnaireUpdate,
    TagRef,
)
from compliance_api.retry import RetryPolicy
from sandbox.apps import DEMO_MANAGE, DEMO_MANAGE_BASIC
from sandbox.runner import SandboxHandle
from tests.fixtures.fake_api import InMemoryTokenProvider
from tests.fixtures.lists import read_all

CLIENT_ID = DEMO_MANAGE.client_id
FAST = RetryPolicy(max_attempts=4, initial_wait=0.001, max_wait=0.005, max_retry_after=0.05)


@pytest.fixture(scope="module")
def sandbox_url(sandbox: SandboxHandle) -> str:
    return sandbox.url


@pytest.fixture
def control(sandbox_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{sandbox_url}/_sandbox", timeout=30) as http:
        http.post("/reset").raise_for_status()
        yield http
        http.delete("/faults")


@pytest.fixture
def seed(control: httpx.Client) -> dict[str, Any]:
    return dict(control.get("/seed").json())


def manage_provider(sandbox_url: str, client_id: str = CLIENT_ID) -> InMemoryTokenProvider:
    """Mints client_credentials tokens of a demo manage application."""

    async def mint() -> AccessToken:
        async with httpx.AsyncClient() as http:
            response = await http.post(
                f"{sandbox_url}/oauth/token",
                json={
                    "client_id": client_id,
                    "client_secret": f"{client_id}-secret-not-real",
                    "scope": "service-api.all:read service-api.all:write",
                    "grant_type": "client_credentials",
                },
            )
            response.raise_for_status()
            body = response.json()
        expires = datetime.now(UTC) + timedelta(seconds=body["expires_in"])
        return AccessToken(SecretStr(body["access_token"]), expires)

    return InMemoryTokenProvider(mint)


@pytest.fixture
def provider(sandbox_url: str) -> InMemoryTokenProvider:
    return manage_provider(sandbox_url)


@pytest.fixture
async def client(
    sandbox_url: str, provider: InMemoryTokenProvider
) -> AsyncIterator[ComplianceClient]:
    async with ComplianceClient(sandbox_url, provider, retry_policy=FAST) as instance:
        yield instance


def stats(control: httpx.Client) -> dict[str, Any]:
    return dict(control.get("/stats").json())


def fail_next(control: httpx.Client, route: str, count: int) -> None:
    """The next ``count`` calls of ``route`` answer 503 (the sandbox's fault injection)."""
    control.post("/faults", json={"route": route, "status": 503, "count": count}).raise_for_status()


def revoke(control: httpx.Client) -> None:
    """As if another process minted a token for the same application."""
    control.post("/revoke", json={"client_id": CLIENT_ID}).raise_for_status()


async def test_lists_follow_every_page(
    client: ComplianceClient, control: httpx.Client, seed: dict[str, Any]
) -> None:
    resources = await read_all(client, KnowledgeBaseResource, page_size=7)
    assert len(resources) == seed["knowledge_base_resources"]
    assert len({item.id for item in resources}) == len(resources)
    answers = await read_all(client, AnswerLibraryEntry, page_size=100)
    assert len(answers) == seed["answer_library_entries"]
    events = [item async for item in client.iter_event_logs(page_size=100)]
    assert len(events) == seed["event_logs"]
    routes = stats(control)["route_counts"]
    assert routes["GET /v1/knowledge-base/resources"] == -(-len(resources) // 7)


async def test_filters_reach_the_service(client: ComplianceClient, seed: dict[str, Any]) -> None:
    category = (await client.list_tag_categories())[0]
    detail = await client.get_tag_category(category.id)
    tag = TagRef(category_id=detail.category.id, tag_id=detail.tags[0].id)
    filters = KnowledgeBaseFilter(type_matches_any=["FILE"], matches_tags=[tag])
    files = await read_all(client, KnowledgeBaseResource, filters=filters)
    assert files, "the seeded data has tagged files"
    assert all(item.type == "FILE" and tag in item.tags for item in files)


async def test_timestamps_the_client_sends_are_accepted_and_mean_their_instant(
    client: ComplianceClient, seed: dict[str, Any]
) -> None:
    """UTC, milliseconds, ``Z`` in query filters and bodies; sub-milliseconds are floored."""
    events = [item async for item in client.iter_event_logs(page_size=100)]
    pivot = events[len(events) // 2]
    at = [e.id async for e in client.iter_event_logs(start_date=pivot.date, page_size=100)]
    assert at == [e.id for e in events if e.date >= pivot.date] and at[0] == pivot.id
    # an inclusive lower bound between two milliseconds reads from the earlier one (never less)
    between = pivot.date + timedelta(microseconds=500)
    floored = [e.id async for e in client.iter_event_logs(start_date=between, page_size=100)]
    assert floored == at

    resources = await read_all(client, KnowledgeBaseResource)
    stamp = sorted(item.last_updated for item in resources if item.last_updated)[0]
    exact = KnowledgeBaseFilter(last_updated_after=stamp, last_updated_before=stamp)
    found = await read_all(client, KnowledgeBaseResource, filters=exact)
    assert found and {item.last_updated for item in found} == {stamp}

    due = datetime(2030, 1, 2, 5, 4, 5, 678901, tzinfo=timezone(timedelta(hours=2)))
    updated = await client.update_questionnaire(
        seed["questionnaires"][0], QuestionnaireUpdate(due_date=due)
    )
    assert updated.due_date == datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    link = await client.create_document_link(
        seed["documents"][0],
        DocumentLinkCreate(url="https://evidence.test/t", title="T", effective_date=due),
    )
    assert link.effective_date == updated.due_date


async def test_every_write(
    client: ComplianceClient, control: httpx.Client, seed: dict[str, Any]
) -> None:
    questionnaire_id = seed["questionnaires"][0]
    updated = await client.update_questionnaire(
        questionnaire_id, QuestionnaireUpdate(status="IN_REVIEW", due_date=None)
    )
    assert updated.status is QuestionnaireStatus.IN_REVIEW and updated.due_date is None
    approved = await client.approve_questionnaire(questionnaire_id, "reviewed")
    assert approved.status is QuestionnaireStatus.APPROVED
    category = seed["tag_categories"][0]
    tag_id = seed["tags"][category][0]
    account = await client.update_account(
        seed["accounts"][0],
        AccountUpdate(tags_by_category=[AccountTags(category_id=category, tag_ids=[tag_id])]),
    )
    assert AccountTags(category_id=category, tag_ids=[tag_id]) in account.tags_by_category
    vendor = await client.add_discovered_vendor_to_managed(seed["discovered_vendors"][0])
    assert vendor.status == "MANAGED"
    link = await client.create_document_link(
        seed["documents"][0], DocumentLinkCreate(url="https://evidence.test/x", title="Evidence")
    )
    assert link.url == "https://evidence.test/x"
    results = await client.add_people_to_group(seed["groups"][0], [*seed["people"][:2], "nobody"])
    assert [result.ok for result in results] == [True, True, False]
    assert results[2].message
    assert await client.list_package_vulnerabilities(seed["package_vulnerability_resources"][0])
    assert await client.list_user_security_training(seed["user_security_training_resources"][0])
    with pytest.raises(NotFoundError):
        await client.approve_questionnaire("no-such-questionnaire")
    writes = stats(control)["write_counts"]
    assert writes["questionnaire_patch"] == {questionnaire_id: 1}
    assert sum(writes["document_link"].values()) == 1


async def test_superseded_token_is_replaced_once(
    client: ComplianceClient, provider: InMemoryTokenProvider, control: httpx.Client
) -> None:
    await client.list_tag_categories()
    revoke(control)
    await client.list_tag_categories()
    assert provider.mints == 2
    counts = stats(control)
    assert counts["unauthorized"] == 1
    assert counts["token_mints"][CLIENT_ID] == 2


async def test_add_people_is_retried_through_503s(
    client: ComplianceClient, control: httpx.Client, seed: dict[str, Any]
) -> None:
    fail_next(control, "POST /v1/groups/{groupId}/add-people", 2)
    group, person = seed["groups"][1], seed["people"][5]
    results = await client.add_people_to_group(group, [person])
    assert results[0].ok
    assert client.stats.retries == 2
    assert stats(control)["group_add_counts"][group] == {person: 1}


async def test_document_link_is_not_retried_after_a_503(
    client: ComplianceClient, control: httpx.Client, seed: dict[str, Any]
) -> None:
    fail_next(control, "POST /v1/documents/{documentId}/links", 1)
    with pytest.raises(ServerError):
        await client.create_document_link(
            seed["documents"][1], DocumentLinkCreate(url="https://evidence.test/y", title="Y")
        )
    assert client.stats.requests == 1 and client.stats.retries == 0


@pytest.mark.parametrize(
    "approver", [None, {"type": "User", "id": "from-seed"}], ids=["unassign", "assign"]
)
async def test_approver_assignment_without_the_entitlement_is_a_clear_permission_error(
    sandbox_url: str, control: httpx.Client, seed: dict[str, Any], approver: Any
) -> None:
    questionnaire_id = seed["questionnaires"][0]
    if approver is not None:
        approver = {**approver, "id": seed["people"][0]}
    async with ComplianceClient(
        sandbox_url, manage_provider(sandbox_url, DEMO_MANAGE_BASIC.client_id), retry_policy=FAST
    ) as basic:
        with pytest.raises(PermissionDeniedError) as caught:
            await basic.update_questionnaire(
                questionnaire_id, QuestionnaireUpdate(approver_assignment=approver)
            )
        assert basic.stats.requests == 1 and basic.stats.retries == 0
    error = caught.value
    assert error.status_code == 403 and error.operation == "update_questionnaire"
    assert "approverAssignment" in str(error) and "QuestionnaireAutomationAdvanced" in str(error)
    assert stats(control)["write_counts"]["questionnaire_patch"] == {}


async def test_approver_assignment_null_with_the_entitlement_unassigns(
    client: ComplianceClient, seed: dict[str, Any]
) -> None:
    questionnaire = await client.update_questionnaire(
        seed["questionnaires"][0], QuestionnaireUpdate(approver_assignment=None)
    )
    assert questionnaire.approver_assignment is None
