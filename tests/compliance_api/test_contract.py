"""The models against the published schemas: responses parse, requests validate, drift survives."""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from pydantic import BaseModel

from compliance_api import models
from compliance_api.errors import InputError
from compliance_api.models import (
    SETTABLE_QUESTIONNAIRE_STATUSES,
    AccountTags,
    AccountUpdate,
    Actor,
    AddPeopleRequest,
    AnswerLibraryEntry,
    ApproveQuestionnaire,
    CustomerTrustAccount,
    DocumentLink,
    DocumentLinkCreate,
    EventLogEntry,
    GroupUpdateResult,
    GroupUpdateStatus,
    KnowledgeBaseFilter,
    KnowledgeBaseResource,
    ListEnvelope,
    PackageVulnerability,
    Questionnaire,
    QuestionnaireStatus,
    QuestionnaireUpdate,
    ResourcesEnvelope,
    ResultsEnvelope,
    TagCategory,
    TagCategoryDetail,
    TagRef,
    UserSecurityTrainingStatus,
    Vendor,
    VendorStatus,
    iso_timestamp,
)
from tests.compliance_api import samples
from tests.fixtures.fake_api import validator

#: schema file -> the model (or envelope) the client parses its response with
RESPONSE_MODELS: dict[str, type[BaseModel]] = {
    "get_knowledge_base_resources": ListEnvelope[KnowledgeBaseResource],
    "get_knowledge_base_answer_library": ListEnvelope[AnswerLibraryEntry],
    "get_event_logs": ListEnvelope[EventLogEntry],
    "patch_customer_trust_questionnaires_questionnaireId": Questionnaire,
    "post_customer_trust_questionnaires_questionnaireId_approve": Questionnaire,
    "patch_customer_trust_accounts_accountId": CustomerTrustAccount,
    "post_discovered_vendors_discoveredVendorId_add_to_managed": Vendor,
    "get_resources_package_vulnerability_connectors": ResourcesEnvelope[PackageVulnerability],
    "get_resources_user_security_training_status": ResourcesEnvelope[UserSecurityTrainingStatus],
    "post_documents_documentId_links": DocumentLink,
    "post_groups_groupId_add_people": ResultsEnvelope[GroupUpdateResult],
    "get_customer_trust_tag_categories": ResultsEnvelope[TagCategory],
    "get_customer_trust_tag_categories_tagCategoryId": TagCategoryDetail,
}

ALL_RESPONSES = list(samples.RESPONSES.items()) + samples.MORE_RESPONSES


def test_every_operation_has_a_sample_and_a_model(schemas: dict[str, Any]) -> None:
    operations = {name for name in schemas if name != "README"}
    assert operations == set(samples.RESPONSES) == set(RESPONSE_MODELS)


@pytest.mark.parametrize(("operation", "body"), ALL_RESPONSES)
def test_samples_are_valid_against_the_published_response_schema(
    schemas: dict[str, Any], operation: str, body: Any
) -> None:
    validator(schemas[operation]["response"]).validate(body)


@pytest.mark.parametrize(("operation", "body"), ALL_RESPONSES)
def test_models_parse_samples_and_dump_back_to_valid_wire_json(
    schemas: dict[str, Any], operation: str, body: Any
) -> None:
    model = RESPONSE_MODELS[operation].model_validate(body)
    wire = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    # every field made it through under its wire name (e.g. passwordMFA, cvss3Vector)
    validator(schemas[operation]["response"]).validate(wire)
    assert set(_keys(wire)) == set(_keys(body))


def _keys(value: Any, prefix: str = "") -> list[str]:
    if isinstance(value, dict):
        keys = []
        for key, item in value.items():
            keys.append(prefix + key)
            keys.extend(_keys(item, f"{prefix}{key}."))
        return keys
    if isinstance(value, list):
        return [key for item in value for key in _keys(item, prefix)]
    return []


def test_parsed_values_are_typed() -> None:
    vendor = Vendor.model_validate(samples.VENDOR)
    assert vendor.status is VendorStatus.MANAGED
    assert vendor.auth_details is not None and vendor.auth_details.password_mfa is True
    assert vendor.contract_start_date is not None and vendor.contract_start_date.year == 2025
    questionnaire = Questionnaire.model_validate(samples.QUESTIONNAIRE)
    assert questionnaire.status is QuestionnaireStatus.IN_REVIEW
    assert questionnaire.status_log[0].updated_by is not None
    assert questionnaire.tag_and_category_ids == [
        TagRef(category_id="cat-framework", tag_id="tag-soc2")
    ]
    results = ResultsEnvelope[GroupUpdateResult].model_validate(samples.GROUP_RESULTS).results
    assert [r.ok for r in results] == [True, False]
    assert results[1].message == "person person-2 not found"


def test_vendor_procurement_link_may_be_filled_null_or_absent() -> None:
    linked = Vendor.model_validate(samples.VENDOR).linked_task_tracker_task_procurement_request
    assert linked is not None and (linked.service, linked.url) == (
        "jira",
        "https://jira.example.test/P-1",
    )
    for body in (samples.VENDOR_NULLS, samples.VENDOR_UNLINKED):
        assert Vendor.model_validate(body).linked_task_tracker_task_procurement_request is None


def test_knowledge_base_page_without_cursors_parses() -> None:
    # the published examples of the two knowledge-base lists omit start/endCursor
    body = {
        "results": {
            "data": [samples.KB_URL],
            "pageInfo": {"hasNextPage": False, "hasPreviousPage": False},
        }
    }
    page = ListEnvelope[KnowledgeBaseResource].model_validate(body).results
    assert page.page_info.end_cursor is None
    assert page.data[0].id == "kb-url-1"


ENUM_KEYS = {
    "type", "status", "expirationStatus", "customerVisibility", "downloadPermission", "ndaStatus",
    "grantAccessOption", "inherentRiskLevel", "residualRiskLevel", "method", "currency",
    "vendorHeadquarters", "frameworksFulfilled",
}  # fmt: skip


def _drift(value: Any, key: str = "") -> Any:
    """Add an unknown field to every object and give every enum-valued field an unknown value."""
    if isinstance(value, dict):
        drifted = {name: _drift(item, name) for name, item in value.items()}
        drifted["addedByServerLater"] = {"nested": True}
        return drifted
    if isinstance(value, list):
        return [_drift(item, key) for item in value]
    if key in ENUM_KEYS and isinstance(value, str):
        return "BRAND_NEW_VALUE"
    return value


@pytest.mark.parametrize(("operation", "body"), ALL_RESPONSES)
def test_extra_fields_and_unknown_enum_values_parse_and_are_kept(operation: str, body: Any) -> None:
    drifted = _drift(body)
    model = RESPONSE_MODELS[operation].model_validate(drifted)
    assert model.model_extra == {"addedByServerLater": {"nested": True}}
    wire = model.model_dump(mode="json", by_alias=True, exclude_unset=True)
    # nothing lost: same keys everywhere, every unknown value kept verbatim
    assert set(_keys(wire)) == set(_keys(drifted))
    assert json.dumps(wire).count("BRAND_NEW_VALUE") == json.dumps(drifted).count("BRAND_NEW_VALUE")


def test_unknown_status_stays_a_plain_string() -> None:
    body = {**samples.QUESTIONNAIRE_MINIMAL, "status": "ARCHIVED_BY_ROBOT", "type": "VIDEO"}
    questionnaire = Questionnaire.model_validate(body)
    assert questionnaire.status == "ARCHIVED_BY_ROBOT"
    assert not isinstance(questionnaire.status, QuestionnaireStatus)
    assert questionnaire.type == "VIDEO"


def test_enums_match_the_published_schemas(schemas: dict[str, Any]) -> None:
    patch = schemas["patch_customer_trust_questionnaires_questionnaireId"]
    assert {s.value for s in QuestionnaireStatus} == set(
        patch["response"]["properties"]["status"]["enum"]
    )
    assert {s.value for s in SETTABLE_QUESTIONNAIRE_STATUSES} == set(
        patch["request_body"]["properties"]["status"]["enum"]
    )
    result_items = schemas["post_groups_groupId_add_people"]["response"]["properties"]["results"][
        "items"
    ]
    assert {s.value for s in GroupUpdateStatus} == {"SUCCESS", "ERROR"}
    assert len(result_items["anyOf"]) == 2


# ---------------------------------------------------------------------------------------------
# Request bodies
# ---------------------------------------------------------------------------------------------

REQUEST_BODIES: list[tuple[str, Any]] = [
    ("patch_customer_trust_questionnaires_questionnaireId", QuestionnaireUpdate()),
    (
        "patch_customer_trust_questionnaires_questionnaireId",
        QuestionnaireUpdate(
            display_name="Renamed",
            due_date="2025-05-01T00:00:00Z",
            status="READY_FOR_REVIEW",
            owner_assignment=Actor(type="User", id="user-1", display_name="dropped on the wire"),
            approver_assignment={"type": "Team", "id": "team-1"},
            metadata=[{"key": "crm", "value": "1"}],
            tag_and_category_ids=[TagRef(category_id="c", tag_id="t")],
        ),
    ),
    (
        "patch_customer_trust_questionnaires_questionnaireId",
        QuestionnaireUpdate(due_date=None, owner_assignment=None, approver_assignment=None),
    ),
    ("patch_customer_trust_accounts_accountId", AccountUpdate()),
    (
        "patch_customer_trust_accounts_accountId",
        AccountUpdate(
            name="Acme",
            email_domain="acme.test",
            custom_fields=[{"label": "Tier", "value": ["a", "b"]}],
            tags_by_category=[AccountTags(category_id="c", tag_ids=[])],
        ),
    ),
    ("post_documents_documentId_links", DocumentLinkCreate(url="https://e.test/x", title="X")),
    (
        "post_documents_documentId_links",
        DocumentLinkCreate(
            url="https://e.test/x",
            title="X",
            description=None,
            effective_date="2025-01-01T00:00:00Z",
        ),
    ),
    ("post_customer_trust_questionnaires_questionnaireId_approve", ApproveQuestionnaire()),
    (
        "post_customer_trust_questionnaires_questionnaireId_approve",
        ApproveQuestionnaire(status_change_message=None),
    ),
    (
        "post_customer_trust_questionnaires_questionnaireId_approve",
        ApproveQuestionnaire(status_change_message="ok"),
    ),
    ("post_groups_groupId_add_people", AddPeopleRequest.for_people(["p1"])),
    ("post_groups_groupId_add_people", AddPeopleRequest.for_people([f"p{i}" for i in range(100)])),
]


@pytest.mark.parametrize(("operation", "model"), REQUEST_BODIES)
def test_request_bodies_validate_against_the_published_request_schema(
    schemas: dict[str, Any], operation: str, model: Any
) -> None:
    validator(schemas[operation]["request_body"]).validate(model.to_wire())


def test_only_set_fields_are_sent_and_explicit_null_is_kept() -> None:
    assert QuestionnaireUpdate(status="ON_HOLD").to_wire() == {"status": "ON_HOLD"}
    assert QuestionnaireUpdate(due_date=None).to_wire() == {"dueDate": None}
    assert QuestionnaireUpdate(owner_assignment=None).to_wire() == {"ownerAssignment": None}
    assert AccountUpdate(email_domain="x.test").to_wire() == {"emailDomain": "x.test"}
    assert ApproveQuestionnaire().to_wire() == {}
    link = DocumentLinkCreate(url="https://e.test", title="t")
    assert link.to_wire() == {"url": "https://e.test", "title": "t"}
    assert QuestionnaireUpdate(display_name="n").to_wire_json() == b'{"displayName":"n"}'


@pytest.mark.parametrize("status", sorted(SETTABLE_QUESTIONNAIRE_STATUSES))
def test_settable_statuses_are_accepted(status: QuestionnaireStatus) -> None:
    assert QuestionnaireUpdate(status=status.value).to_wire() == {"status": status.value}


@pytest.mark.parametrize(
    "status", sorted(set(QuestionnaireStatus) - SETTABLE_QUESTIONNAIRE_STATUSES)
)
def test_other_statuses_are_rejected_naming_field_and_value(status: QuestionnaireStatus) -> None:
    with pytest.raises(InputError) as caught:
        QuestionnaireUpdate(status=status.value)
    assert caught.value.field == "status"
    assert caught.value.value == status.value
    assert status.value in str(caught.value) and "status" in str(caught.value)


@pytest.mark.parametrize(
    ("build", "field", "value"),
    [
        (lambda: QuestionnaireUpdate(status="DONE"), "status", "DONE"),
        (lambda: QuestionnaireUpdate(display_name=None), "QuestionnaireUpdate", None),
        (lambda: QuestionnaireUpdate(metadata=None), "QuestionnaireUpdate", None),
        (lambda: QuestionnaireUpdate(displayname="typo"), "displayname", "typo"),
        (lambda: QuestionnaireUpdate(due_date="next tuesday"), "due_date", "next tuesday"),
        (
            lambda: QuestionnaireUpdate(owner_assignment={"type": "Robot", "id": "r"}),
            "owner_assignment.type",
            "Robot",
        ),
        (
            lambda: QuestionnaireUpdate(tag_and_category_ids=[{"categoryId": "c"}]),
            "tag_and_category_ids.0.tagId",
            None,
        ),
        (lambda: AccountUpdate(name=None), "AccountUpdate", None),
        (
            lambda: AccountUpdate(tags_by_category=[{"categoryId": "c", "tagIds": "t"}]),
            "tags_by_category.0.tagIds",
            "t",
        ),
        (lambda: DocumentLinkCreate(title="t"), "url", None),
        (lambda: DocumentLinkCreate(url="https://e.test"), "title", None),
        (lambda: DocumentLinkCreate(url="evidence.pdf", title="t"), "url", "evidence.pdf"),
        (lambda: DocumentLinkCreate(url="https://e.test", title="  "), "title", "  "),
        (lambda: AddPeopleRequest.for_people([]), "person_ids", "<0 ids>"),
        (
            lambda: AddPeopleRequest.for_people([str(i) for i in range(101)]),
            "person_ids",
            "<101 ids>",
        ),
        (lambda: AddPeopleRequest.for_people("person-1"), "person_ids", "person-1"),
        (lambda: AddPeopleRequest.for_people(["p", ""]), "person_ids[1]", ""),
        (lambda: KnowledgeBaseFilter(type_matches_any=["PDF"]), "type_matches_any.0", "PDF"),
        (
            lambda: KnowledgeBaseFilter(
                expires_after="2025-02-01T00:00:00Z", expires_before="2025-01-01T00:00:00Z"
            ),
            "KnowledgeBaseFilter",
            None,
        ),
    ],
)
def test_bad_input_fails_with_field_and_value(build: Any, field: str, value: Any) -> None:
    with pytest.raises(InputError) as caught:
        build()
    assert caught.value.field == field
    if value is not None:
        assert caught.value.value == value
        assert repr(value) in str(caught.value)


def test_model_validate_of_a_request_raises_input_error() -> None:
    with pytest.raises(InputError, match="status='APPROVED'"):
        QuestionnaireUpdate.model_validate({"status": "APPROVED"})
    update = QuestionnaireUpdate.model_validate({"dueDate": None, "status": "IN_REVIEW"})
    assert update.to_wire() == {"dueDate": None, "status": "IN_REVIEW"}


def test_filters_encode_repeated_arrays_and_json_tags() -> None:
    params = KnowledgeBaseFilter(
        q="soc",
        type_matches_any=["FILE", "URL"],
        matches_tags=[TagRef(category_id="c1", tag_id="t1"), {"categoryId": "c2", "tagId": "t2"}],
        last_updated_after="2025-01-01T00:00:00",
    ).to_params()
    assert ("typeMatchesAny", "FILE") in params and ("typeMatchesAny", "URL") in params
    assert (
        "matchesTags",
        '[{"categoryId":"c1","tagId":"t1"},{"categoryId":"c2","tagId":"t2"}]',
    ) in params
    # a naive timestamp is taken as UTC and sent the service's way (milliseconds, Z)
    assert ("lastUpdatedAfter", "2025-01-01T00:00:00.000Z") in params
    assert ("q", "soc") in params


# ---------------------------------------------------------------------------------------------
# Datetimes in request bodies: UTC, milliseconds and Z, formatted like the query parameters
# ---------------------------------------------------------------------------------------------

NAIVE = datetime(2026, 1, 2, 3, 4, 5)
PLUS_TWO = datetime(2026, 1, 2, 5, 4, 5, tzinfo=timezone(timedelta(hours=2)))

#: the least each request model needs to be built, so any datetime field can be set on top
MINIMAL_REQUESTS: dict[str, dict[str, Any]] = {
    "QuestionnaireUpdate": {},
    "DocumentLinkCreate": {"url": "https://e.test/x", "title": "X"},
    "KnowledgeBaseFilter": {},
    "AnswerLibraryFilter": {},
}


def _mentions_datetime(annotation: Any) -> bool:
    if annotation is datetime:
        return True
    return any(_mentions_datetime(arg) for arg in typing.get_args(annotation))


def request_datetime_fields() -> list[tuple[type[BaseModel], str]]:
    """Every datetime field of every request model (bodies and filters) in compliance_api."""
    found = []
    for value in vars(models).values():
        is_request = isinstance(value, type) and issubclass(
            value, models.RequestModel | models.RequestPart
        )
        if not is_request or value.__name__.startswith("_"):
            continue  # the bases themselves, and private bases whose fields subclasses carry
        found += [
            (value, name)
            for name, info in value.model_fields.items()
            if _mentions_datetime(info.annotation)
        ]
    return found


def test_the_known_request_datetime_fields_are_all_checked() -> None:
    found = {(model.__name__, name) for model, name in request_datetime_fields()}
    assert ("QuestionnaireUpdate", "due_date") in found
    assert ("DocumentLinkCreate", "effective_date") in found
    # a new request model with a datetime field must be added to MINIMAL_REQUESTS
    assert {model for model, _ in found} <= set(MINIMAL_REQUESTS)


@pytest.mark.parametrize(
    ("model", "field"),
    request_datetime_fields(),
    ids=lambda item: getattr(item, "__name__", item),
)
def test_a_naive_request_datetime_is_sent_as_utc_with_z(
    model: type[models.RequestModel], field: str
) -> None:
    request = model(**MINIMAL_REQUESTS[model.__name__], **{field: NAIVE})
    wire_name = model.model_fields[field].alias or field
    expected = "2026-01-02T03:04:05.000Z"
    assert request.to_wire()[wire_name] == expected
    assert json.loads(request.to_wire_json())[wire_name] == expected
    assert expected == iso_timestamp(NAIVE)  # the same text as the query parameters


@pytest.mark.parametrize(
    ("build", "wire_name"),
    [
        (lambda moment: QuestionnaireUpdate(due_date=moment), "dueDate"),
        (
            lambda moment: DocumentLinkCreate(
                url="https://e.test/x", title="X", effective_date=moment
            ),
            "effectiveDate",
        ),
    ],
    ids=["questionnaire-due-date", "document-link-effective-date"],
)
def test_an_aware_request_datetime_keeps_its_instant_in_utc(build: Any, wire_name: str) -> None:
    sent = build(PLUS_TWO).to_wire()[wire_name]
    assert sent == iso_timestamp(PLUS_TWO) == "2026-01-02T03:04:05.000Z"
    assert datetime.fromisoformat(sent) == PLUS_TWO
    assert build(PLUS_TWO.astimezone(UTC)).to_wire()[wire_name] == sent


def test_a_datetime_set_after_construction_is_sent_as_utc_with_z() -> None:
    update = QuestionnaireUpdate()
    update.due_date = NAIVE
    assert update.to_wire() == {"dueDate": "2026-01-02T03:04:05.000Z"}
    assert QuestionnaireUpdate(due_date=None).to_wire() == {"dueDate": None}


#: the form of every published example, and of the timestamps the sandbox writes
SERVICE_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


@pytest.mark.parametrize(
    ("moment", "expected"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC), "2026-01-02T03:04:05.123Z"),
        (datetime(2026, 1, 2, 3, 4, 5, 123999), "2026-01-02T03:04:05.123Z"),  # naive; floored
        (datetime(2026, 1, 2, 3, 4, 5, 999, tzinfo=UTC), "2026-01-02T03:04:05.000Z"),
        (PLUS_TWO.replace(microsecond=7000), "2026-01-02T03:04:05.007Z"),
        # an offset with seconds, which RFC 3339 cannot write: the same instant, in UTC
        (
            datetime(2026, 1, 2, 0, 0, 30, tzinfo=timezone(timedelta(seconds=30))),
            "2026-01-02T00:00:00.000Z",
        ),
        # back across midnight and the year
        (
            datetime(2026, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
            "2025-12-31T19:30:00.000Z",
        ),
    ],
)
def test_iso_timestamp_is_utc_milliseconds_and_z(moment: datetime, expected: str) -> None:
    assert iso_timestamp(moment) == expected
    assert SERVICE_TIMESTAMP.fullmatch(expected)


def test_iso_timestamp_floors_so_an_inclusive_lower_bound_never_skips_the_instant() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 123999, tzinfo=UTC)
    sent = datetime.fromisoformat(iso_timestamp(moment))
    assert sent <= moment and moment - sent < timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (
            lambda: QuestionnaireUpdate(
                tag_and_category_ids=[{"category_id": "c", "tag_id": "t"}] * 2
            ),
            "tagAndCategoryIds",
        ),
        (
            lambda: AccountUpdate(tags_by_category=[{"category_id": "c", "tag_ids": ["t", "t"]}]),
            "tagIds",
        ),
        (
            lambda: AccountUpdate(
                tags_by_category=[
                    {"category_id": "c", "tag_ids": ["a"]},
                    {"category_id": "c", "tag_ids": ["b"]},
                ]
            ),
            "tagsByCategory",
        ),
    ],
)
def test_repeated_tags_are_refused_before_anything_is_sent(
    build: Callable[[], object], field: str
) -> None:
    with pytest.raises(InputError, match=f"{field} lists .* more than once"):
        build()
