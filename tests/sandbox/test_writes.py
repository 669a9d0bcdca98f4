"""Write endpoints (§4.3-4.10): rules, idempotency, 404s, audit entries and write counts."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.apps import DEMO_MANAGE
from tests.fixtures.sandbox_api import MANAGE_BASIC, MANAGE_SCOPE, Api, Env
from tests.sandbox import schemas

Q_PATCH = "PATCH /v1/customer-trust/questionnaires/{questionnaireId}"
Q_APPROVE = "POST /v1/customer-trust/questionnaires/{questionnaireId}/approve"
ACCOUNT = "PATCH /v1/customer-trust/accounts/{accountId}"
MANAGED = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"
LINKS = "POST /v1/documents/{documentId}/links"
ADD_PEOPLE = "POST /v1/groups/{groupId}/add-people"
EVENTS = "GET /v1/event-logs"
SETTABLE = [
    "IN_PROGRESS",
    "IN_REVIEW",
    "READY_FOR_REVIEW",
    "WAITING_ON_ANSWERS",
    "ON_HOLD",
    "NO_LONGER_NEEDED",
]


def _last_event(api: Api) -> dict[str, Any]:
    return api.all_pages(EVENTS)[-1]


def _qid(env: Env) -> dict[str, str]:
    return {"questionnaireId": env.seed["questionnaires"][0]}


@pytest.mark.parametrize("status", SETTABLE)
def test_questionnaire_status_can_be_set_to_each_settable_status(
    env: Env, api: Api, status: str
) -> None:
    before = api.call(Q_PATCH, _qid(env), json={}).json()
    updated = api.ok(Q_PATCH, _qid(env), json={"status": status})
    assert updated["status"] == status
    entry = updated["statusLog"][0]
    assert entry["status"] == status and entry["message"] is None
    assert entry["updatedBy"]["id"] == DEMO_MANAGE.client_id
    assert entry["updatedAt"] >= before["updatedDate"]
    assert updated["statusLog"][1:] == before["statusLog"]


@pytest.mark.parametrize("status", ["APPROVED", "COMPLETE", "PROCESSING", "approved", None, 3])
def test_questionnaire_status_outside_the_six_is_400_naming_them(
    env: Env, api: Api, status: Any
) -> None:
    response = api.call(Q_PATCH, _qid(env), json={"status": status, "displayName": "Changed"})
    assert response.status_code == 400
    message = response.json()["message"]
    assert all(s in message for s in SETTABLE)
    after = api.call(Q_PATCH, _qid(env), json={}).json()
    assert after["displayName"] != "Changed"  # nothing half-applied
    assert env.stats()["write_counts"]["questionnaire_patch"] == {_qid(env)["questionnaireId"]: 1}


def test_status_log_is_newest_first_with_who_when_and_message(env: Env, api: Api) -> None:
    api.ok(Q_PATCH, _qid(env), json={"status": "IN_PROGRESS"})
    env.control.advance_clock(60)
    api.ok(Q_PATCH, _qid(env), json={"status": "READY_FOR_REVIEW"})
    env.control.advance_clock(60)
    approved = api.ok(Q_APPROVE, _qid(env), json={"statusChangeMessage": "Looks good"})
    log = approved["statusLog"]
    assert [e["status"] for e in log[:3]] == ["APPROVED", "READY_FOR_REVIEW", "IN_PROGRESS"]
    assert log[0]["message"] == "Looks good"
    assert log[0]["updatedAt"] > log[1]["updatedAt"] > log[2]["updatedAt"]
    assert approved["status"] == "APPROVED" and approved["completedDate"] == log[0]["updatedAt"]
    assert env.stats()["write_counts"]["questionnaire_approve"] == {_qid(env)["questionnaireId"]: 1}


def test_approve_needs_a_json_body_and_accepts_an_empty_one(env: Env, api: Api) -> None:
    assert api.call(Q_APPROVE, _qid(env)).status_code == 400
    assert api.call(Q_APPROVE, _qid(env), json={"reason": "x"}).status_code == 400
    assert api.ok(Q_APPROVE, _qid(env), json={})["statusLog"][0]["message"] is None


def test_tag_and_category_ids_replace_all_tags(env: Env, api: Api) -> None:
    category = env.seed["tag_categories"][1]
    tag = env.seed["tags"][category][0]
    updated = api.ok(
        Q_PATCH, _qid(env), json={"tagAndCategoryIds": [{"categoryId": category, "tagId": tag}]}
    )
    assert updated["tagAndCategoryIds"] == [{"categoryId": category, "tagId": tag}]
    cleared = api.ok(Q_PATCH, _qid(env), json={"tagAndCategoryIds": []})
    assert cleared["tagAndCategoryIds"] == []


@pytest.mark.parametrize(
    "tags",
    [
        [{"categoryId": "unknown", "tagId": "unknown"}],
        [{"categoryId": "CATEGORY"}],
        [{"categoryId": "CATEGORY", "tagId": "OTHER_TAG"}],
    ],
)
def test_bad_tag_and_category_ids_are_400(env: Env, api: Api, tags: list[dict[str, str]]) -> None:
    categories = env.seed["tag_categories"]
    other_tag = env.seed["tags"][categories[1]][0]
    body = [
        {
            k: v.replace("CATEGORY", categories[0]).replace("OTHER_TAG", other_tag)
            for k, v in t.items()
        }
        for t in tags
    ]
    response = api.call(Q_PATCH, _qid(env), json={"tagAndCategoryIds": body})
    assert response.status_code == 400
    assert "tagAndCategoryIds" in response.json()["message"]


def test_approver_assignment_needs_the_entitlement(env: Env, api: Api) -> None:
    person = env.seed["people"][3]
    assignment = {"approverAssignment": {"type": "User", "id": person}}
    basic = env.oauth.token(MANAGE_BASIC, MANAGE_SCOPE)
    denied = env.api_for(basic).call(Q_PATCH, _qid(env), json=assignment)
    assert denied.status_code == 403
    assert "QuestionnaireAutomationAdvanced" in denied.json()["message"]
    granted = api.ok(Q_PATCH, _qid(env), json=assignment)
    assert granted["approverAssignment"]["id"] == person
    assert granted["approverAssignment"]["displayName"]
    unassigned = api.ok(Q_PATCH, _qid(env), json={"approverAssignment": None})
    assert "approverAssignment" not in unassigned


def test_questionnaire_fields_set_and_clear(env: Env, api: Api) -> None:
    group = env.seed["groups"][0]
    updated = api.ok(
        Q_PATCH,
        _qid(env),
        json={
            "displayName": "Renamed review",
            "dueDate": "2030-01-02T03:04:05Z",
            "ownerAssignment": {"type": "Team", "id": group},
            "metadata": [{"key": "crm", "value": "OPP-1"}],
        },
    )
    assert updated["displayName"] == "Renamed review"
    assert updated["dueDate"] == "2030-01-02T03:04:05.000Z"
    assert updated["ownerAssignment"]["type"] == "Team"
    assert updated["metadata"] == [{"key": "crm", "value": "OPP-1"}]
    cleared = api.ok(Q_PATCH, _qid(env), json={"dueDate": None, "ownerAssignment": None})
    assert "dueDate" not in cleared and "ownerAssignment" not in cleared


@pytest.mark.parametrize(
    "body, field",
    [
        ({"color": "red"}, "color"),
        ({"dueDate": "soon"}, "dueDate"),
        ({"ownerAssignment": {"type": "Robot", "id": "x"}}, "ownerAssignment"),
        ({"ownerAssignment": {"type": "User", "id": "nobody"}}, "ownerAssignment"),
        ({"metadata": [{"key": "k"}]}, "metadata"),
        ({"displayName": ""}, "displayName"),
    ],
)
def test_invalid_questionnaire_bodies_are_400_naming_the_field(
    env: Env, api: Api, body: dict[str, Any], field: str
) -> None:
    response = api.call(Q_PATCH, _qid(env), json=body)
    assert response.status_code == 400
    assert field in response.json()["message"]


def _write_date_time(env: Env, api: Api, route: str, field: str, value: str) -> Any:
    """Send ``value`` as the date-time ``field`` of a questionnaire PATCH or a new link."""
    if route == Q_PATCH:
        return api.call(route, _qid(env), json={"displayName": "Dated", field: value})
    body = {"url": "https://dated.example.com", "title": "Dated", field: value}
    return api.call(route, {"documentId": env.seed["documents"][0]}, json=body)


DATE_TIME_FIELDS = [(Q_PATCH, "dueDate"), (LINKS, "effectiveDate")]


@pytest.mark.parametrize("route, field", DATE_TIME_FIELDS)
@pytest.mark.parametrize(
    "value",
    [
        "2030-01-02T03:04:05",
        "2030-01-02T03:04:05.250",
        "2030-01-02",
        "2030-01-02T03:04",
        "2030-01-02 03:04:05",
    ],
)
def test_date_time_without_a_utc_offset_is_400_naming_the_field(
    env: Env, api: Api, route: str, field: str, value: str
) -> None:
    response = _write_date_time(env, api, route, field, value)
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_request"
    assert field in body["message"] and "offset" in body["message"]
    assert not any(env.stats()["write_counts"].values())  # nothing half-applied


@pytest.mark.parametrize("route, field", DATE_TIME_FIELDS)
@pytest.mark.parametrize(
    "value",
    [
        "2030-01-02T03:04Z",
        "2030-01-02T03:04:05+0200",
        "2030-01-02 03:04:05Z",
        "2030-02-30T00:00:00Z",
    ],
)
def test_date_time_that_is_not_rfc_3339_is_400_naming_the_field(
    env: Env, api: Api, route: str, field: str, value: str
) -> None:
    response = _write_date_time(env, api, route, field, value)
    assert response.status_code == 400 and field in response.json()["message"]


@pytest.mark.parametrize("route, field", DATE_TIME_FIELDS)
@pytest.mark.parametrize(
    "value, stored",
    [
        ("2030-01-02T03:04:05Z", "2030-01-02T03:04:05.000Z"),
        ("2030-01-02T05:04:05+02:00", "2030-01-02T03:04:05.000Z"),
        ("2030-01-01T22:04:05.5-05:00", "2030-01-02T03:04:05.500Z"),
        ("2030-01-02t03:04:05.123456789z", "2030-01-02T03:04:05.123Z"),
    ],
)
def test_rfc_3339_date_times_are_stored_in_utc(
    env: Env, api: Api, route: str, field: str, value: str, stored: str
) -> None:
    response = _write_date_time(env, api, route, field, value)
    assert response.status_code == schemas.expected_status(route), response.text
    assert response.json()[field] == stored


@pytest.mark.parametrize("message", [None, 7, ["ok"]])
def test_status_change_message_must_be_a_string(env: Env, api: Api, message: Any) -> None:
    before = api.ok(Q_PATCH, _qid(env), json={})
    response = api.call(Q_APPROVE, _qid(env), json={"statusChangeMessage": message})
    assert response.status_code == 400
    assert "statusChangeMessage" in response.json()["message"]
    assert api.ok(Q_PATCH, _qid(env), json={})["statusLog"] == before["statusLog"]
    assert env.stats()["write_counts"]["questionnaire_approve"] == {}


def _repeated_tags(env: Env, where: str) -> tuple[str, dict[str, str], dict[str, Any], str]:
    """(route, path params, a body whose only fault is a repeat, the field the 400 must name)."""
    first, second = env.seed["tag_categories"][:2]
    tag, other = env.seed["tags"][first][:2]
    pair = {"categoryId": first, "tagId": tag}
    elsewhere = {"categoryId": second, "tagId": env.seed["tags"][second][0]}
    account = {"accountId": env.seed["accounts"][0]}
    if where == "questionnaire pair":
        body = {"displayName": "Changed", "tagAndCategoryIds": [pair, elsewhere, dict(pair)]}
        return Q_PATCH, _qid(env), body, "tagAndCategoryIds"
    if where == "account tag id":
        entries = [{"categoryId": first, "tagIds": [tag, other, tag]}]
        return ACCOUNT, account, {"name": "Changed", "tagsByCategory": entries}, "tagIds"
    entries = [{"categoryId": first, "tagIds": [tag]}, {"categoryId": first, "tagIds": [other]}]
    return ACCOUNT, account, {"name": "Changed", "tagsByCategory": entries}, "tagsByCategory"


@pytest.mark.parametrize("where", ["questionnaire pair", "account tag id", "account category"])
def test_repeated_tags_are_400_naming_the_field(env: Env, api: Api, where: str) -> None:
    route, params, body, field = _repeated_tags(env, where)
    before = api.ok(route, params, json={})
    response = api.call(route, params, json=body)
    assert response.status_code == 400
    message = response.json()["message"]
    assert field in message and "repeats" in message
    after = api.ok(route, params, json={})
    unchanged = {k: v for k, v in before.items() if k != "updatedDate"}
    assert {k: v for k, v in after.items() if k != "updatedDate"} == unchanged


def test_account_tags_by_category_replace_per_category(env: Env, api: Api) -> None:
    account = {"accountId": env.seed["accounts"][0]}
    first, second = env.seed["tag_categories"][:2]
    tags = env.seed["tags"]
    api.ok(
        ACCOUNT,
        account,
        json={
            "tagsByCategory": [
                {"categoryId": first, "tagIds": tags[first][:2]},
                {"categoryId": second, "tagIds": tags[second][:1]},
            ]
        },
    )
    updated = api.ok(
        ACCOUNT,
        account,
        json={"tagsByCategory": [{"categoryId": first, "tagIds": tags[first][2:3]}]},
    )
    by_category = {e["categoryId"]: e["tagIds"] for e in updated["tagsByCategory"]}
    assert by_category[first] == tags[first][2:3]
    assert by_category[second] == tags[second][:1]  # untouched category kept
    emptied = api.ok(
        ACCOUNT, account, json={"tagsByCategory": [{"categoryId": first, "tagIds": []}]}
    )
    assert first not in {e["categoryId"] for e in emptied["tagsByCategory"]}
    assert env.stats()["write_counts"]["account_patch"] == {account["accountId"]: 3}


@pytest.mark.parametrize("problem", ["unknown_category", "unknown_tag", "foreign_tag"])
def test_account_unknown_category_or_tag_is_400(env: Env, api: Api, problem: str) -> None:
    account = {"accountId": env.seed["accounts"][0]}
    first, second = env.seed["tag_categories"][:2]
    entry = {
        "unknown_category": {"categoryId": "nope", "tagIds": []},
        "unknown_tag": {"categoryId": first, "tagIds": ["nope"]},
        "foreign_tag": {"categoryId": first, "tagIds": [env.seed["tags"][second][0]]},
    }[problem]
    before = api.ok(ACCOUNT, account, json={})
    response = api.call(ACCOUNT, account, json={"name": "Renamed", "tagsByCategory": [entry]})
    assert response.status_code == 400
    assert "tagsByCategory" in response.json()["message"]
    assert api.ok(ACCOUNT, account, json={})["name"] == before["name"]


def test_account_fields_update(env: Env, api: Api) -> None:
    account = {"accountId": env.seed["accounts"][1]}
    updated = api.ok(
        ACCOUNT,
        account,
        json={
            "name": "Renamed Co",
            "emailDomain": "renamed.example.com",
            "customFields": [{"label": "Region", "value": ["EU", "UK"]}],
        },
    )
    assert updated["name"] == "Renamed Co" and updated["emailDomain"] == "renamed.example.com"
    assert {"label": "Region", "value": ["EU", "UK"]} in updated["customFields"]
    assert api.call(ACCOUNT, account, json={"emailDomain": "not a domain"}).status_code == 400


def test_add_to_managed_is_idempotent_and_returns_the_same_vendor(env: Env, api: Api) -> None:
    vendor_id = env.seed["discovered_vendors"][0]
    first = api.ok(MANAGED, {"discoveredVendorId": vendor_id})
    second = api.ok(MANAGED, {"discoveredVendorId": vendor_id})
    assert first == second and first["status"] == "MANAGED"
    assert env.stats()["write_counts"]["add_to_managed"] == {vendor_id: 2}
    events = [e for e in api.all_pages(EVENTS) if e["action"] == "VENDOR_ADDED_TO_MANAGED"]
    assert len(events) == 1
    assert {"id": first["id"], "type": "Vendor"} in events[0]["targets"]


def test_managed_vendor_leaves_out_an_unlinked_procurement_request(env: Env, api: Api) -> None:
    """compliance-api.md: the link is "present only when a procurement request is linked"."""
    vendor = api.ok(MANAGED, {"discoveredVendorId": env.seed["discovered_vendors"][0]})
    assert "linkedTaskTrackerTaskProcurementRequest" not in vendor
    assert "latestDecision" in vendor and vendor["latestDecision"] is None  # the rest all present


def test_document_link_is_created_with_201(env: Env, api: Api) -> None:
    document = env.seed["documents"][0]
    body = {"url": "https://evidence.example.com/a", "title": "Evidence A"}
    link = api.ok(LINKS, {"documentId": document}, json=body)
    assert (
        link["url"] == body["url"] and link["description"] == "" and link["effectiveDate"] is None
    )
    dated = api.ok(
        LINKS,
        {"documentId": document},
        json={**body, "description": "d", "effectiveDate": "2025-01-01T00:00:00Z"},
    )
    assert dated["effectiveDate"] == "2025-01-01T00:00:00.000Z" and dated["id"] != link["id"]
    assert env.stats()["write_counts"]["document_link"] == {f"{document} {body['url']}": 2}


@pytest.mark.parametrize(
    "body, field",
    [
        ({"url": "https://x.example"}, "title"),
        ({"title": "t"}, "url"),
        ({"url": "ftp://x", "title": "t"}, "url"),
        ({"url": "https://x.example", "title": "t", "effectiveDate": "later"}, "effectiveDate"),
        ({"url": "https://x.example", "title": "t", "extra": 1}, "extra"),
    ],
)
def test_invalid_document_links_are_400(
    env: Env, api: Api, body: dict[str, Any], field: str
) -> None:
    response = api.call(LINKS, {"documentId": env.seed["documents"][0]}, json=body)
    assert response.status_code == 400 and field in response.json()["message"]


def test_add_people_results_follow_request_order(env: Env, api: Api) -> None:
    group = env.seed["groups"][0]
    members = set(env.seed["group_members"][group])
    member = sorted(members)[0]
    newcomer = next(p for p in env.seed["people"] if p not in members)
    updates = [{"id": newcomer}, {"id": "ghost-person"}, {"id": member}, {"id": newcomer}]
    results = api.ok(ADD_PEOPLE, {"groupId": group}, json={"updates": updates})["results"]
    assert [r["id"] for r in results] == [u["id"] for u in updates]
    assert [r["status"] for r in results] == ["SUCCESS", "ERROR", "SUCCESS", "SUCCESS"]
    assert "ghost-person" in results[1]["message"] and "message" not in results[0]
    assert env.stats()["group_add_counts"] == {group: {newcomer: 2, member: 1}}
    assert newcomer in env.control.seed()["group_members"][group]
    event = _last_event(api)
    assert event["action"] == "GROUP_PEOPLE_ADDED"
    assert event["targets"][0] == {"id": group, "type": "Group"}


@pytest.mark.parametrize("count", [0, 101])
def test_add_people_takes_1_to_100_updates(env: Env, api: Api, count: int) -> None:
    people = env.seed["people"]
    updates = [{"id": people[i % len(people)]} for i in range(count)]
    response = api.call(ADD_PEOPLE, {"groupId": env.seed["groups"][0]}, json={"updates": updates})
    assert response.status_code == 400 and "updates" in response.json()["message"]
    hundred = [{"id": people[i]} for i in range(100)]
    assert (
        len(
            api.ok(ADD_PEOPLE, {"groupId": env.seed["groups"][0]}, json={"updates": hundred})[
                "results"
            ]
        )
        == 100
    )


@pytest.mark.parametrize(
    "route, params, body",
    [
        (Q_PATCH, {"questionnaireId": "nope"}, {}),
        (Q_APPROVE, {"questionnaireId": "nope"}, {}),
        (ACCOUNT, {"accountId": "nope"}, {}),
        (MANAGED, {"discoveredVendorId": "nope"}, None),
        (LINKS, {"documentId": "nope"}, {"url": "https://x.example", "title": "t"}),
        (ADD_PEOPLE, {"groupId": "nope"}, {"updates": [{"id": "p"}]}),
    ],
)
def test_unknown_ids_are_404(api: Api, route: str, params: dict[str, str], body: Any) -> None:
    response = api.call(route, params, json=body) if body is not None else api.call(route, params)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found" and "nope" in response.json()["message"]


@pytest.mark.parametrize(
    "route, resource_kind",
    [
        ("GET /v1/resources/package_vulnerability_connectors", "package_vulnerability_resources"),
        ("GET /v1/resources/user_security_training_status", "user_security_training_resources"),
    ],
)
def test_connector_resources(env: Env, api: Api, route: str, resource_kind: str) -> None:
    resource = env.seed[resource_kind][0]
    assert api.ok(route, params={"resourceId": resource})["resources"]
    assert api.call(route).status_code == 400
    assert api.call(route, params={"resourceId": "nope"}).status_code == 404


def test_every_write_appends_an_audit_entry_by_the_application(env: Env, api: Api) -> None:
    seed = env.seed
    start = env.control.clock()["now"]
    api.ok(Q_PATCH, _qid(env), json={"status": "IN_REVIEW"})
    api.ok(Q_APPROVE, _qid(env), json={})
    api.ok(ACCOUNT, {"accountId": seed["accounts"][0]}, json={"name": "X Co"})
    api.ok(MANAGED, {"discoveredVendorId": seed["discovered_vendors"][1]})
    api.ok(
        LINKS, {"documentId": seed["documents"][0]}, json={"url": "https://e.example", "title": "E"}
    )
    api.ok(
        ADD_PEOPLE, {"groupId": seed["groups"][1]}, json={"updates": [{"id": seed["people"][0]}]}
    )
    written = api.all_pages(EVENTS, {"startDate": start})
    assert [e["action"] for e in written] == [
        "QUESTIONNAIRE_UPDATED",
        "QUESTIONNAIRE_APPROVED",
        "ACCOUNT_UPDATED",
        "VENDOR_ADDED_TO_MANAGED",
        "DOCUMENT_LINK_CREATED",
        "GROUP_PEOPLE_ADDED",
    ]
    assert all(e["actor"] == {"id": DEMO_MANAGE.client_id, "type": "APPLICATION"} for e in written)
    assert [e["targets"][0]["type"] for e in written] == [
        "Questionnaire",
        "Questionnaire",
        "CustomerTrustAccount",
        "DiscoveredVendor",
        "Document",
        "Group",
    ]


def test_every_seeded_object_validates_against_the_published_schemas(env: Env, api: Api) -> None:
    """Not only the first item: every questionnaire, account, vendor and connector row."""
    seed = env.seed
    for questionnaire in seed["questionnaires"]:
        api.ok(Q_PATCH, {"questionnaireId": questionnaire}, json={})
    for account in seed["accounts"]:
        api.ok(ACCOUNT, {"accountId": account}, json={})
    for vendor in seed["discovered_vendors"]:
        api.ok(MANAGED, {"discoveredVendorId": vendor})
    for resource in seed["package_vulnerability_resources"]:
        api.ok(
            "GET /v1/resources/package_vulnerability_connectors", params={"resourceId": resource}
        )
    for resource in seed["user_security_training_resources"]:
        api.ok("GET /v1/resources/user_security_training_status", params={"resourceId": resource})
    for category in seed["tag_categories"]:
        api.ok("GET /v1/customer-trust/tag-categories/{tagCategoryId}", {"tagCategoryId": category})
    assert len(env.stats()["write_counts"]["add_to_managed"]) == len(seed["discovered_vendors"])
