"""Client behaviour against a schema-checking fake API (httpx.MockTransport, no network)."""

from __future__ import annotations

import asyncio
import json
import pickle
import traceback
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from compliance_api.client import ComplianceClient
from compliance_api.errors import (
    APIError,
    APIStatusError,
    AuthenticationError,
    ConflictError,
    InputError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitedError,
    ServerError,
    TransportError,
)
from compliance_api.models import (
    AnswerLibraryEntry,
    AnswerLibraryEntrySummary,
    DocumentLinkCreate,
    EventLogEntry,
    KnowledgeBaseFilter,
    KnowledgeBaseResource,
    KnowledgeBaseResourceSummary,
    LoggedEvent,
    Questionnaire,
    QuestionnaireStatus,
    QuestionnaireUpdate,
    TagRef,
)
from compliance_api.providers import StaticTokenProvider
from compliance_api.retry import RetryNotice, RetryPolicy
from compliance_api.settings import Settings
from sandbox.apps import DEMO_MANAGE
from tests.compliance_api import samples
from tests.fixtures.fake_api import (
    BASE_URL,
    FAST_RETRIES,
    FakeAPI,
    InMemoryTokenProvider,
    minting_provider,
)

KB = "get_knowledge_base_resources"
ANSWERS = "get_knowledge_base_answer_library"
EVENTS = "get_event_logs"
PATCH_Q = "patch_customer_trust_questionnaires_questionnaireId"
APPROVE = "post_customer_trust_questionnaires_questionnaireId_approve"
PATCH_ACCOUNT = "patch_customer_trust_accounts_accountId"
ADD_VENDOR = "post_discovered_vendors_discoveredVendorId_add_to_managed"
LINKS = "post_documents_documentId_links"
ADD_PEOPLE = "post_groups_groupId_add_people"
VULNS = "get_resources_package_vulnerability_connectors"
TRAININGS = "get_resources_user_security_training_status"
CATEGORIES = "get_customer_trust_tag_categories"
CATEGORY = "get_customer_trust_tag_categories_tagCategoryId"

LINK = DocumentLinkCreate(url="https://evidence.test/a", title="Evidence")


def kb_item(index: int) -> dict[str, Any]:
    return {**samples.KB_URL, "id": f"kb-{index}"}


def event(index: int) -> dict[str, Any]:
    return {**samples.EVENT, "id": f"ev-{index}"}


def error(status: int, body: Any = None, **headers: str) -> httpx.Response:
    if body is None:
        return httpx.Response(status, headers=headers)
    if isinstance(body, str):
        return httpx.Response(status, text=body, headers=headers)
    return httpx.Response(status, json=body, headers=headers)


# ---------------------------------------------------------------------------------------------
# Pagination and query parameters
# ---------------------------------------------------------------------------------------------


async def test_iterator_follows_end_cursor_across_pages(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(
        EVENTS,
        samples.list_body([event(1), event(2)], "cursor-1", True),
        samples.list_body([event(3)], "cursor-2", True),
        samples.list_body([event(4)], None, False),
    )
    ids = [item.id async for item in client.iter_event_logs(page_size=2)]
    assert ids == ["ev-1", "ev-2", "ev-3", "ev-4"]
    calls = api.calls(EVENTS)
    assert [call.param("pageCursor") for call in calls] == [[], ["cursor-1"], ["cursor-2"]]
    assert all(call.param("pageSize") == ["2"] for call in calls)


async def test_iterator_fetches_the_next_page_only_when_needed(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(
        EVENTS,
        samples.list_body([event(1)], "c-1", True),
        samples.list_body([event(2)], None, False),
    )
    iterator = client.iter_event_logs(page_size=1)
    first = await anext(iterator)
    assert first.id == "ev-1"
    assert len(api.calls(EVENTS)) == 1  # one page in memory, the next not yet requested
    rest = [item async for item in iterator]
    assert len(rest) == 1 and len(api.calls(EVENTS)) == 2


@pytest.mark.parametrize(
    ("item", "operation", "path"),
    [
        (KnowledgeBaseResource, KB, "/v1/knowledge-base/resources"),
        (KnowledgeBaseResourceSummary, KB, "/v1/knowledge-base/resources"),
        (AnswerLibraryEntry, ANSWERS, "/v1/knowledge-base/answer-library"),
        (AnswerLibraryEntrySummary, ANSWERS, "/v1/knowledge-base/answer-library"),
        (EventLogEntry, EVENTS, "/v1/event-logs"),
        (LoggedEvent, EVENTS, "/v1/event-logs"),
    ],
)
async def test_a_page_is_read_from_the_list_of_its_item_model(
    api: FakeAPI, client: ComplianceClient, item: type[Any], operation: str, path: str
) -> None:
    record = {KB: kb_item(1), ANSWERS: samples.ANSWER, EVENTS: samples.EVENT}[operation]
    api.reply(operation, samples.list_body([record], "next", True))
    page = await client.list_page(item, page_size=3, page_cursor="c-1")
    assert isinstance(page.data[0], item) and page.data[0].id == record["id"]
    assert page.page_info.end_cursor == "next" and page.page_info.has_next_page
    (call,) = api.calls(operation)
    assert call.path == path
    assert (call.param("pageSize"), call.param("pageCursor")) == (["3"], ["c-1"])


async def test_filters_repeat_array_params_and_json_encode_tags(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(KB, samples.list_body([], None, False))
    filters = KnowledgeBaseFilter(
        q="soc 2",
        type_matches_any=["FILE", "URL"],
        matches_tags=[TagRef(category_id="c1", tag_id="t1"), TagRef(category_id="c2", tag_id="t2")],
        expires_before=datetime(2026, 1, 1, tzinfo=UTC),
    )
    page = await client.list_page(KnowledgeBaseResource, filters=filters)
    assert page.data == []
    (call,) = api.calls(KB)
    assert call.param("typeMatchesAny") == ["FILE", "URL"]
    assert json.loads(call.param("matchesTags")[0]) == [
        {"categoryId": "c1", "tagId": "t1"},
        {"categoryId": "c2", "tagId": "t2"},
    ]
    assert call.param("q") == ["soc 2"]
    assert call.param("expiresBefore") == ["2026-01-01T00:00:00.000Z"]
    assert call.param("pageSize") == ["100"]


async def test_filters_may_be_given_as_a_dict(api: FakeAPI, client: ComplianceClient) -> None:
    api.reply(ANSWERS, samples.list_body([samples.ANSWER], None, False))
    page = await client.list_page(AnswerLibraryEntry, filters={"q": "encrypt"}, page_size=5)
    assert page.data[0].question.startswith("Do you")
    assert api.calls(ANSWERS)[0].param("q") == ["encrypt"]


async def test_next_page_without_cursor_is_an_error_not_a_loop(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(
        EVENTS,
        {
            "results": {
                "data": [samples.EVENT],
                "pageInfo": {"hasNextPage": True, "hasPreviousPage": False},
            }
        },
    )
    seen = []
    with pytest.raises(APIError, match="no endCursor") as caught:
        async for item in client.iter_event_logs():
            seen.append(item.id)
    assert seen == [samples.EVENT["id"]]  # the page that did arrive was delivered
    assert caught.value.operation == "list_event_logs"
    assert len(api.calls(EVENTS)) == 1


async def test_a_repeated_cursor_is_an_error_not_a_loop(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.always(EVENTS, samples.list_body([samples.EVENT], "same", True))
    with pytest.raises(APIError, match="same endCursor"):
        async for _ in client.iter_event_logs():
            pass
    assert len(api.calls(EVENTS)) == 2


async def test_event_logs_resume_from_a_cursor_with_start_date(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(EVENTS, samples.list_body([samples.EVENT], "c-9", False))
    start = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    page = await client.list_page(EventLogEntry, start_date=start, page_cursor="c-8", page_size=50)
    assert page.page_info.end_cursor == "c-9"  # what a watcher checkpoints
    (call,) = api.calls(EVENTS)
    assert call.param("startDate") == ["2025-03-01T12:00:00.000Z"]
    assert call.param("pageCursor") == ["c-8"]
    assert page.data[0].actor.type == "USER"


@pytest.mark.parametrize("page_size", [0, 101, -1, True, "10"])
async def test_page_size_outside_1_to_100_fails_before_any_request(
    api: FakeAPI, client: ComplianceClient, page_size: Any
) -> None:
    with pytest.raises(InputError) as caught:
        async for _ in client.iter_event_logs(page_size=page_size):
            pass
    assert caught.value.field == "page_size" and caught.value.value == page_size
    with pytest.raises(InputError):
        await client.list_page(KnowledgeBaseResourceSummary, page_size=page_size)
    assert api.seen == []


async def test_bad_filter_fails_before_any_request(api: FakeAPI, client: ComplianceClient) -> None:
    with pytest.raises(InputError) as caught:
        await client.list_page(KnowledgeBaseResource, filters={"typeMatchesAny": ["PDF"]})
    assert caught.value.value == "PDF"
    assert api.seen == []


@pytest.mark.parametrize(
    ("item", "query", "field"),
    [
        (Questionnaire, {}, "item"),  # not read from a list
        (EventLogEntry, {"filters": {"q": "x"}}, "filters"),  # the event log takes startDate
        (KnowledgeBaseResource, {"start_date": datetime(2025, 3, 1, tzinfo=UTC)}, "start_date"),
        (LoggedEvent, {"start_date": "yesterday"}, "start_date"),
        (AnswerLibraryEntry, {"page_cursor": " "}, "page_cursor"),
    ],
)
async def test_a_query_the_list_does_not_take_fails_before_any_request(
    api: FakeAPI, client: ComplianceClient, item: type[Any], query: dict[str, Any], field: str
) -> None:
    with pytest.raises(InputError) as caught:
        await client.list_page(item, **query)
    assert caught.value.field == field
    assert api.seen == []


# ---------------------------------------------------------------------------------------------
# Every operation: path, params, body (validated by the fake against the request schema)
# ---------------------------------------------------------------------------------------------


async def test_each_write_sends_a_schema_valid_body(api: FakeAPI, client: ComplianceClient) -> None:
    api.reply(PATCH_Q, samples.QUESTIONNAIRE)
    api.reply(APPROVE, samples.QUESTIONNAIRE_MINIMAL, samples.QUESTIONNAIRE_MINIMAL)
    api.reply(PATCH_ACCOUNT, samples.ACCOUNT)
    api.reply(ADD_VENDOR, samples.VENDOR)
    api.reply(LINKS, samples.DOCUMENT_LINK)
    api.reply(ADD_PEOPLE, samples.GROUP_RESULTS)

    questionnaire = await client.update_questionnaire(
        "q-1", QuestionnaireUpdate(status="IN_REVIEW", due_date=None)
    )
    assert questionnaire.status is QuestionnaireStatus.IN_REVIEW
    await client.approve_questionnaire("q-1")
    await client.approve_questionnaire("q-1", "looks good")
    account = await client.update_account(
        "acct-1", {"tags_by_category": [{"categoryId": "c", "tagIds": ["t"]}]}
    )
    assert account.tags_by_category[0].tag_ids == ["tag-eu", "tag-us"]
    vendor = await client.add_discovered_vendor_to_managed("dv-1")
    assert vendor.id == "vendor-1"
    link = await client.create_document_link("doc-1", LINK)
    assert link.id == "link-1"
    results = await client.add_people_to_group("grp-1", ["person-1", "person-2"])
    assert [r.ok for r in results] == [True, False]

    bodies = [(call.operation, call.path, call.body) for call in api.seen]
    assert bodies == [
        (
            PATCH_Q,
            "/v1/customer-trust/questionnaires/q-1",
            {"status": "IN_REVIEW", "dueDate": None},
        ),
        (APPROVE, "/v1/customer-trust/questionnaires/q-1/approve", {}),
        (
            APPROVE,
            "/v1/customer-trust/questionnaires/q-1/approve",
            {"statusChangeMessage": "looks good"},
        ),
        (
            PATCH_ACCOUNT,
            "/v1/customer-trust/accounts/acct-1",
            {"tagsByCategory": [{"categoryId": "c", "tagIds": ["t"]}]},
        ),
        (ADD_VENDOR, "/v1/discovered-vendors/dv-1/add-to-managed", None),
        (
            LINKS,
            "/v1/documents/doc-1/links",
            {"url": "https://evidence.test/a", "title": "Evidence"},
        ),
        (
            ADD_PEOPLE,
            "/v1/groups/grp-1/add-people",
            {"updates": [{"id": "person-1"}, {"id": "person-2"}]},
        ),
    ]
    assert all(call.authorization == "Bearer tok-secret-value-1" for call in api.seen)


async def test_naive_datetimes_in_bodies_go_out_as_utc_like_query_params(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(PATCH_Q, samples.QUESTIONNAIRE)
    api.reply(LINKS, samples.DOCUMENT_LINK)
    api.reply(EVENTS, samples.list_body([samples.EVENT], None, False))
    naive = datetime(2026, 1, 2, 3, 4, 5, 678901)

    await client.update_questionnaire("q-1", {"due_date": naive})
    await client.create_document_link(
        "doc-1", DocumentLinkCreate(url="https://evidence.test/b", title="B", effective_date=naive)
    )
    await client.list_page(EventLogEntry, start_date=naive)

    patch, link, events = api.seen
    # the service's own form (every published example): UTC, milliseconds, Z
    assert patch.body == {"dueDate": "2026-01-02T03:04:05.678Z"}
    assert link.body["effectiveDate"] == "2026-01-02T03:04:05.678Z"
    assert events.param("startDate") == ["2026-01-02T03:04:05.678Z"]


async def test_reads_of_connector_resources_and_tag_categories(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(VULNS, {"resources": [samples.VULNERABILITY]})
    api.reply(TRAININGS, {"resources": [samples.TRAINING]})
    api.reply(CATEGORIES, samples.TAG_CATEGORIES)
    api.reply(CATEGORY, samples.TAG_CATEGORY)
    vulns = await client.list_package_vulnerabilities("res-1")
    assert vulns[0].severity == 7.5 and vulns[0].cve_id == "CVE-2020-8203"
    trainings = await client.list_user_security_training("res-2")
    assert trainings[0].status == "INCOMPLETE"
    categories = await client.list_tag_categories(["QUESTIONNAIRE", "DOCUMENT_SHARING"])
    assert categories[0].display_name == "Framework"
    detail = await client.get_tag_category("cat-framework")
    assert detail.tags[0].display_name == "SOC 2"
    assert api.calls(VULNS)[0].param("resourceId") == ["res-1"]
    assert api.calls(TRAININGS)[0].param("resourceId") == ["res-2"]
    assert api.calls(CATEGORIES)[0].param("productContextIdsMatchesAny") == [
        "QUESTIONNAIRE",
        "DOCUMENT_SHARING",
    ]
    assert api.calls(CATEGORY)[0].path == "/v1/customer-trust/tag-categories/cat-framework"


async def test_identifiers_stay_one_path_segment(api: FakeAPI, client: ComplianceClient) -> None:
    api.reply(ADD_VENDOR, samples.VENDOR)
    await client.add_discovered_vendor_to_managed("dv/../1")
    assert api.calls(ADD_VENDOR)[0].path == "/v1/discovered-vendors/dv%2F..%2F1/add-to-managed"


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda c: c.add_people_to_group("g", []), "person_ids"),
        (lambda c: c.add_people_to_group("g", [f"p{i}" for i in range(101)]), "person_ids"),
        (lambda c: c.add_people_to_group("g", "person-1"), "person_ids"),
        (lambda c: c.add_people_to_group(" ", ["p"]), "group_id"),
        (lambda c: c.update_questionnaire("q", {"status": "APPROVED"}), "status"),
        (lambda c: c.update_questionnaire("", QuestionnaireUpdate()), "questionnaire_id"),
        (lambda c: c.create_document_link("d", {"title": "no url"}), "url"),
        (lambda c: c.list_package_vulnerabilities(""), "resource_id"),
        (lambda c: c.list_tag_categories(["EVERYTHING"]), "product_contexts"),
    ],
)
async def test_invalid_input_fails_before_any_request(
    api: FakeAPI, client: ComplianceClient, call: Any, field: str
) -> None:
    with pytest.raises(InputError) as caught:
        await call(client)
    assert caught.value.field == field
    assert api.seen == []


async def test_add_people_result_count_must_match_the_request(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(ADD_PEOPLE, {"results": [{"id": "p1", "status": "SUCCESS"}]})
    with pytest.raises(APIError, match="1 results for 2 people"):
        await client.add_people_to_group("g", ["p1", "p2"])


async def test_add_people_results_must_match_the_ids_sent_position_by_position(
    api: FakeAPI, client: ComplianceClient
) -> None:
    swapped = {
        "results": [
            {"id": "p2", "status": "SUCCESS"},
            {"id": "p1", "status": "ERROR", "message": "not a person"},
            {"id": "p3", "status": "SUCCESS"},
        ]
    }
    api.reply(ADD_PEOPLE, swapped)
    with pytest.raises(APIError) as caught:
        await client.add_people_to_group("g", ["p1", "p2", "p3"])
    message = str(caught.value)
    assert "result 0 is for id 'p2' but id 'p1' was sent there" in message
    assert "result 1 is for id 'p1' but id 'p2' was sent there" in message
    assert "p3" not in message  # only the mismatches are reported
    assert caught.value.operation == "add_people_to_group"
    assert len(api.calls(ADD_PEOPLE)) == 1  # the service answered; nothing to retry


async def test_add_people_results_in_request_order_pass_duplicates_included(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(
        ADD_PEOPLE,
        {"results": [{"id": pid, "status": "SUCCESS"} for pid in ("p1", "p2", "p1")]},
    )
    results = await client.add_people_to_group("g", ["p1", "p2", "p1"])
    assert [result.id for result in results] == ["p1", "p2", "p1"]


async def test_a_success_body_that_does_not_fit_is_an_api_error(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(PATCH_Q, {"displayName": "no id"})
    with pytest.raises(APIError, match="unexpected response body") as caught:
        await client.update_questionnaire("q-1", QuestionnaireUpdate(display_name="x"))
    assert caught.value.status_code == 200
    assert caught.value.operation == "update_questionnaire"


async def test_drifted_response_parses_through_the_client(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(APPROVE, {**samples.QUESTIONNAIRE_MINIMAL, "status": "SIGNED_OFF", "riskScore": 3})
    questionnaire = await client.approve_questionnaire("q-2")
    assert questionnaire.status == "SIGNED_OFF"
    assert questionnaire.model_extra == {"riskScore": 3}


# ---------------------------------------------------------------------------------------------
# Error mapping
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "error_class", "message", "code"),
    [
        (
            error(400, {"error": "invalid_request", "message": "bad dueDate"}),
            InvalidRequestError,
            "bad dueDate",
            "invalid_request",
        ),
        (error(422, {"message": "tagId unknown"}), InvalidRequestError, "tagId unknown", None),
        (
            error(403, {"error": "forbidden", "error_description": "needs entitlement"}),
            PermissionDeniedError,
            "needs entitlement",
            "forbidden",
        ),
        (
            error(404, {"error": "not_found", "message": "questionnaire q-1 not found"}),
            NotFoundError,
            "questionnaire q-1 not found",
            "not_found",
        ),
        (error(409, {"error": "conflict"}), ConflictError, "conflict", "conflict"),
        (error(418, ["a", "list"]), APIStatusError, "I'm a teapot", None),
        (error(500, "upstream exploded"), ServerError, "upstream exploded", None),
        (error(502, "<html><body>Bad gateway</body></html>"), ServerError, "Bad Gateway", None),
        (
            error(503, {"message": 42, "error": "unavailable"}),
            ServerError,
            "unavailable",
            "unavailable",
        ),
        (error(504), ServerError, "Gateway Timeout", None),
    ],
)
async def test_error_statuses_map_to_exceptions_with_the_server_message(
    api: FakeAPI,
    response: httpx.Response,
    error_class: type[APIError],
    message: str,
    code: str | None,
) -> None:
    api.always(PATCH_Q, response)
    async with ComplianceClient(
        BASE_URL,
        minting_provider(),
        transport=api.transport(),
        retry_policy=RetryPolicy(max_attempts=1),
    ) as client:
        with pytest.raises(error_class) as caught:
            await client.update_questionnaire("q-1", QuestionnaireUpdate(display_name="x"))
    assert type(caught.value) is error_class
    assert caught.value.message == message
    assert caught.value.code == code
    assert caught.value.status_code == response.status_code
    assert caught.value.operation == "update_questionnaire"
    assert str(response.status_code) in str(caught.value)


# ---------------------------------------------------------------------------------------------
# Retries
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "update",
    [
        QuestionnaireUpdate(approver_assignment=None),
        QuestionnaireUpdate(approver_assignment={"type": "Team", "id": "t-1"}, status="ON_HOLD"),
    ],
    ids=["unassign", "assign"],
)
async def test_approver_assignment_403_names_the_entitlement(
    api: FakeAPI, client: ComplianceClient, update: QuestionnaireUpdate
) -> None:
    api.reply(PATCH_Q, error(403, {"error": "forbidden", "message": "Forbidden"}))
    with pytest.raises(PermissionDeniedError) as caught:
        await client.update_questionnaire("q-1", update)
    message = str(caught.value)
    assert "Forbidden" in message  # the service's own words stay
    assert "approverAssignment" in message and "QuestionnaireAutomationAdvanced" in message
    assert caught.value.status_code == 403 and caught.value.code == "forbidden"
    assert len(api.calls(PATCH_Q)) == 1


async def test_other_403s_of_a_questionnaire_update_get_no_entitlement_hint(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.reply(PATCH_Q, error(403, {"error": "insufficient_scope", "message": "needs all:write"}))
    with pytest.raises(PermissionDeniedError) as caught:
        await client.update_questionnaire("q-1", QuestionnaireUpdate(status="ON_HOLD"))
    assert "QuestionnaireAutomationAdvanced" not in str(caught.value)


async def test_transient_5xx_is_retried_until_success(
    api: FakeAPI, provider: InMemoryTokenProvider
) -> None:
    notices: list[RetryNotice] = []
    api.reply(ADD_PEOPLE, error(503), error(500, "boom"), samples.GROUP_RESULTS)
    async with ComplianceClient(
        BASE_URL,
        provider,
        transport=api.transport(),
        retry_policy=FAST_RETRIES,
        on_retry=notices.append,
    ) as client:
        results = await client.add_people_to_group("g", ["person-1", "person-2"])
    assert len(results) == 2
    assert len(api.calls(ADD_PEOPLE)) == 3
    assert client.stats.retries == 2 and client.stats.requests == 3
    assert [(n.attempt, type(n.error)) for n in notices] == [(1, ServerError), (2, ServerError)]
    assert all(0 <= n.wait_seconds <= FAST_RETRIES.max_wait for n in notices)


async def test_retries_are_bounded(api: FakeAPI, client: ComplianceClient) -> None:
    api.always(PATCH_Q, error(503, {"message": "down"}))
    with pytest.raises(ServerError, match="down"):
        await client.update_questionnaire("q-1", QuestionnaireUpdate(display_name="x"))
    assert len(api.calls(PATCH_Q)) == FAST_RETRIES.max_attempts


async def test_max_retries_zero_means_one_attempt(
    api: FakeAPI, provider: InMemoryTokenProvider
) -> None:
    api.always(EVENTS, error(503))
    async with ComplianceClient(
        BASE_URL, provider, transport=api.transport(), max_retries=0
    ) as client:
        with pytest.raises(ServerError):
            await client.list_page(EventLogEntry)
    assert len(api.calls(EVENTS)) == 1


async def test_429_waits_for_retry_after(api: FakeAPI, provider: InMemoryTokenProvider) -> None:
    notices: list[RetryNotice] = []
    api.reply(
        APPROVE,
        error(429, {"message": "slow down"}, **{"Retry-After": "0.03"}),
        samples.QUESTIONNAIRE,
    )
    api.reply(APPROVE, error(429, None, **{"Retry-After": "3600"}), samples.QUESTIONNAIRE)
    async with ComplianceClient(
        BASE_URL,
        provider,
        transport=api.transport(),
        retry_policy=FAST_RETRIES,
        on_retry=notices.append,
    ) as client:
        await client.approve_questionnaire("q-1")
        await client.approve_questionnaire("q-1")
    assert [n.wait_seconds for n in notices] == [0.03, FAST_RETRIES.max_retry_after]
    assert isinstance(notices[0].error, RateLimitedError) and notices[0].error.retry_after == 0.03
    assert len(api.calls(APPROVE)) == 4


async def test_4xx_is_not_retried(api: FakeAPI, client: ComplianceClient) -> None:
    api.always(ADD_VENDOR, error(404, {"message": "no such discovered vendor"}))
    with pytest.raises(NotFoundError):
        await client.add_discovered_vendor_to_managed("dv-x")
    assert len(api.calls(ADD_VENDOR)) == 1


@pytest.mark.parametrize("failure", [httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("reset")])
async def test_idempotent_calls_retry_after_the_request_was_sent(
    api: FakeAPI, client: ComplianceClient, failure: Exception
) -> None:
    api.reply(PATCH_ACCOUNT, failure, samples.ACCOUNT)
    account = await client.update_account("acct-1", {"name": "Acme"})
    assert account.id == "acct-1"
    assert len(api.calls(PATCH_ACCOUNT)) == 2


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("syn"),
        httpx.PoolTimeout("pool"),
        error(429, {"message": "slow down"}, **{"Retry-After": "0"}),  # refused before any work
    ],
)
async def test_document_link_is_retried_when_it_provably_was_not_applied(
    api: FakeAPI, client: ComplianceClient, failure: Any
) -> None:
    api.reply(LINKS, failure, samples.DOCUMENT_LINK)
    link = await client.create_document_link("doc-1", LINK)
    assert link.id == "link-1"
    assert len(api.calls(LINKS)) == 2


@pytest.mark.parametrize(
    ("reply", "error_class"),
    [
        (httpx.ReadTimeout("no answer"), TransportError),
        (httpx.RemoteProtocolError("closed mid-response"), TransportError),
        (error(503), ServerError),
        (error(500, {"message": "oops"}), ServerError),
    ],
)
async def test_document_link_is_not_retried_once_it_may_have_arrived(
    api: FakeAPI, client: ComplianceClient, reply: Any, error_class: type[APIError]
) -> None:
    api.reply(LINKS, reply, samples.DOCUMENT_LINK)
    with pytest.raises(error_class) as caught:
        await client.create_document_link("doc-1", LINK)
    assert len(api.calls(LINKS)) == 1
    if isinstance(caught.value, TransportError):
        assert caught.value.request_sent is True


async def test_transport_error_says_whether_the_request_left(
    api: FakeAPI, provider: InMemoryTokenProvider
) -> None:
    api.always(EVENTS, httpx.ConnectError("connection refused"))
    async with ComplianceClient(
        BASE_URL,
        provider,
        transport=api.transport(),
        retry_policy=RetryPolicy(max_attempts=2, initial_wait=0),
    ) as client:
        with pytest.raises(TransportError) as caught:
            await client.list_page(EventLogEntry)
    assert caught.value.request_sent is False
    assert "connection refused" in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__context__ is None
    assert len(api.calls(EVENTS)) == 2


async def test_token_provider_failures_are_not_retried_by_the_data_call(api: FakeAPI) -> None:
    class Failing:
        calls = 0

        async def get_token(self) -> Any:
            Failing.calls += 1
            raise ServerError(
                "token endpoint down", operation="client_credentials", status_code=503
            )

        async def replace_token(self, failed: Any) -> Any:
            raise AssertionError("not reached")

    async with ComplianceClient(
        BASE_URL, Failing(), transport=api.transport(), retry_policy=FAST_RETRIES
    ) as client:
        with pytest.raises(ServerError, match="token endpoint down"):
            await client.list_page(EventLogEntry)
    assert Failing.calls == 1
    assert api.seen == []


# ---------------------------------------------------------------------------------------------
# 401: replace exactly the failed token, once
# ---------------------------------------------------------------------------------------------


async def test_401_replaces_the_token_and_retries_once(
    api: FakeAPI, client: ComplianceClient, provider: InMemoryTokenProvider
) -> None:
    api.reply(LINKS, error(401, {"message": "token superseded"}), samples.DOCUMENT_LINK)
    link = await client.create_document_link("doc-1", LINK)  # safe: a 401 applied nothing
    assert link.id == "link-1"
    assert [call.authorization for call in api.calls(LINKS)] == [
        "Bearer tok-secret-value-1",
        "Bearer tok-secret-value-2",
    ]
    assert provider.mints == 2
    assert client.stats.token_replacements == 1


async def test_a_second_401_is_an_authentication_error(
    api: FakeAPI, client: ComplianceClient, provider: InMemoryTokenProvider
) -> None:
    api.always(PATCH_Q, error(401, {"message": "expired"}))
    with pytest.raises(AuthenticationError, match="expired"):
        await client.update_questionnaire("q-1", {"display_name": "x"})
    assert len(api.calls(PATCH_Q)) == 2  # not retried further: no stampede on the token endpoint
    assert provider.mints == 2


async def test_concurrent_401s_on_one_token_cause_one_replacement(
    api: FakeAPI, client: ComplianceClient, provider: InMemoryTokenProvider
) -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        if request.headers["authorization"] == "Bearer tok-secret-value-1":
            return error(401)
        return httpx.Response(200, json=samples.GROUP_RESULTS)

    api.always(ADD_PEOPLE, reply)
    await provider.get_token()
    results = await asyncio.gather(
        *(client.add_people_to_group(f"g-{i}", ["person-1", "person-2"]) for i in range(10))
    )
    assert len(results) == 10
    assert provider.mints == 2  # the first mint plus exactly one replacement


async def test_static_provider_gives_a_clear_401(api: FakeAPI) -> None:
    api.always(EVENTS, error(401))
    provider = StaticTokenProvider("static-secret-token")
    async with ComplianceClient(BASE_URL, provider, transport=api.transport()) as client:
        with pytest.raises(AuthenticationError) as caught:
            await client.list_page(EventLogEntry)
    assert caught.value.status_code == 401
    assert "static-secret-token" not in repr(provider)


# ---------------------------------------------------------------------------------------------
# Secrets never reach an error
# ---------------------------------------------------------------------------------------------


async def test_a_token_echoed_by_the_server_is_redacted(
    api: FakeAPI, client: ComplianceClient
) -> None:
    api.always(
        PATCH_Q,
        error(
            403,
            {
                "error": "forbidden tok-secret-value-1",
                "message": "token tok-secret-value-1 lacks scope",
            },
        ),
    )
    with pytest.raises(PermissionDeniedError) as caught:
        await client.update_questionnaire("q-1", {"display_name": "x"})
    _assert_no_secret(caught.value, "tok-secret-value-1")
    assert "[redacted]" in caught.value.message


@pytest.mark.parametrize(
    "reply",
    [
        httpx.ReadTimeout("timed out"),
        error(500, "boom"),
        error(401),
        error(404, {"message": "gone"}),
    ],
)
async def test_no_error_carries_the_token(
    api: FakeAPI, provider: InMemoryTokenProvider, reply: Any
) -> None:
    api.always(LINKS, reply)
    async with ComplianceClient(
        BASE_URL, provider, transport=api.transport(), retry_policy=FAST_RETRIES
    ) as client:
        with pytest.raises(APIError) as caught:
            await client.create_document_link("doc-1", LINK)
    for n in (1, 2):
        _assert_no_secret(caught.value, f"tok-secret-value-{n}")


def _assert_no_secret(exc: BaseException, secret: str) -> None:
    rendered = "".join(traceback.format_exception(exc))
    assert secret not in rendered
    assert secret not in repr(exc) and secret not in str(exc.args)
    assert secret.encode() not in pickle.dumps(exc)
    assert secret not in repr(vars(exc))
    assert exc.__cause__ is None and exc.__context__ is None


# ---------------------------------------------------------------------------------------------
# Construction
# ---------------------------------------------------------------------------------------------


def test_from_settings_uses_gov_base_url_timeout_and_retries(
    provider: InMemoryTokenProvider,
) -> None:
    settings = Settings(
        client_id=DEMO_MANAGE.client_id,
        client_secret=DEMO_MANAGE.client_secret,
        use_gov=True,
        gov_base_url="http://gov.test/",
        http_timeout_seconds=7,
        max_retries=2,
    )
    client = ComplianceClient.from_settings(settings, provider)
    assert client.base_url == "http://gov.test"
    assert client._policy.max_attempts == 3
    assert (client._policy.max_wait, client._policy.max_retry_after) == (30.0, 60.0)
    waits = settings.model_copy(update={"retry_max_wait_seconds": 0, "retry_after_max_seconds": 1})
    quick = ComplianceClient.from_settings(waits, provider, max_retries=0)._policy
    assert (quick.max_attempts, quick.max_wait, quick.max_retry_after) == (1, 0, 1)
    assert client._http.timeout.read == 7
    assert "secret" not in repr(client)


async def test_stats_count_requests(api: FakeAPI, client: ComplianceClient) -> None:
    api.reply(CATEGORIES, samples.TAG_CATEGORIES)
    await client.list_tag_categories()
    assert (client.stats.requests, client.stats.retries, client.stats.token_replacements) == (
        1,
        0,
        0,
    )
