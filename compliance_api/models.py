"""Pydantic models of the Compliance API's resources, list envelopes and request bodies.

Responses are lenient (the service drifts): unknown fields are kept, an unknown enum value stays
a ``str``. Request bodies are strict (``InputError`` before any call) and send only the fields set,
keeping an explicit ``None`` where ``null`` means something. snake_case here, camelCase on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Generic, Self, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SkipValidation,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from compliance_api.errors import InputError

MAX_PAGE_SIZE = 100
MAX_ADD_PEOPLE = 100

T = TypeVar("T")


class QuestionnaireStatus(StrEnum):
    APPROVED = "APPROVED"
    IN_PROGRESS = "IN_PROGRESS"
    IN_REVIEW = "IN_REVIEW"
    READY_FOR_REVIEW = "READY_FOR_REVIEW"
    WAITING_ON_ANSWERS = "WAITING_ON_ANSWERS"
    ON_HOLD = "ON_HOLD"
    NO_LONGER_NEEDED = "NO_LONGER_NEEDED"
    COMPLETE = "COMPLETE"
    ERROR = "ERROR"
    EXTRACTING_QUESTIONS = "EXTRACTING_QUESTIONS"
    QUEUED_FOR_SECTION_EXTRACTION = "QUEUED_FOR_SECTION_EXTRACTION"
    EXTRACTING_SECTIONS = "EXTRACTING_SECTIONS"
    MAPPING_SECTIONS = "MAPPING_SECTIONS"
    QUEUED_FOR_ANSWERING = "QUEUED_FOR_ANSWERING"
    GENERATING_ANSWERS = "GENERATING_ANSWERS"
    QUEUED_FOR_EXTRACTION = "QUEUED_FOR_EXTRACTION"
    PROCESSING = "PROCESSING"
    QUEUED_FOR_PROCESSING = "QUEUED_FOR_PROCESSING"
    WAITING_ON_COLUMN_SELECTION = "WAITING_ON_COLUMN_SELECTION"
    WAITING_ON_COLUMN_APPROVAL = "WAITING_ON_COLUMN_APPROVAL"
    QUEUED_FOR_COLUMN_DETECTION = "QUEUED_FOR_COLUMN_DETECTION"
    DETECTING_COLUMNS = "DETECTING_COLUMNS"


SETTABLE_QUESTIONNAIRE_STATUSES: frozenset[QuestionnaireStatus] = frozenset(
    {
        QuestionnaireStatus.IN_PROGRESS,
        QuestionnaireStatus.IN_REVIEW,
        QuestionnaireStatus.READY_FOR_REVIEW,
        QuestionnaireStatus.WAITING_ON_ANSWERS,
        QuestionnaireStatus.ON_HOLD,
        QuestionnaireStatus.NO_LONGER_NEEDED,
    }
)


class QuestionnaireType(StrEnum):
    SPREADSHEET = "SPREADSHEET"
    WEBSITE = "WEBSITE"
    DOCUMENT = "DOCUMENT"


class ActorType(StrEnum):
    """Assignment actor types; event-log actors use upper-case values (kept as plain str)."""

    USER = "User"
    TEAM = "Team"


class KnowledgeBaseResourceType(StrEnum):
    FILE = "FILE"
    URL = "URL"


class CustomerVisibility(StrEnum):
    PUBLIC = "PUBLIC"
    SHAREABLE = "SHAREABLE"
    PRIVATE = "PRIVATE"
    REQUEST_ACCESS = "REQUEST_ACCESS"


class DownloadPermission(StrEnum):
    VIEW_ONLY = "VIEW_ONLY"
    VIEW_AND_DOWNLOAD = "VIEW_AND_DOWNLOAD"


class ExpirationStatus(StrEnum):
    CURRENT = "CURRENT"
    EXPIRED = "EXPIRED"


class NdaStatus(StrEnum):
    SIGNED = "SIGNED"
    NOT_REQUIRED = "NOT_REQUIRED"
    INCOMPLETE = "INCOMPLETE"


class GrantAccessOption(StrEnum):
    INCLUDE_EVERYTHING_REQUESTED = "INCLUDE_EVERYTHING_REQUESTED"
    INCLUDE_ONLY_CONFIGURED = "INCLUDE_ONLY_CONFIGURED"


class VendorStatus(StrEnum):
    MANAGED = "MANAGED"
    ARCHIVED = "ARCHIVED"
    IN_PROCUREMENT = "IN_PROCUREMENT"


class RiskLevel(StrEnum):
    CRITICAL = "CRITICAL"
    HIGH = "HIGH"
    LOW = "LOW"
    MEDIUM = "MEDIUM"
    UNSCORED = "UNSCORED"


class AuthMethod(StrEnum):
    AUTH_0 = "AUTH_0"
    AZURE_AD = "AZURE_AD"
    GOOGLE_WORKSPACE = "GOOGLE_WORKSPACE"
    O_AUTH = "O_AUTH"
    O365 = "O365"
    OKTA = "OKTA"
    ONE_LOGIN = "ONE_LOGIN"
    OWA = "OWA"
    SSO = "SSO"
    USERNAME_PASSWORD = "USERNAME_PASSWORD"  # noqa: S105 - an enum value
    OTHER = "OTHER"


class DecisionStatus(StrEnum):
    APPROVED = "APPROVED"
    CONDITIONALLY_APPROVED = "CONDITIONALLY_APPROVED"
    NOT_APPROVED = "NOT_APPROVED"


class TrainingStatus(StrEnum):
    INCOMPLETE = "INCOMPLETE"
    COMPLETE = "COMPLETE"


class TrainingFramework(StrEnum):
    SOC2 = "SOC2"
    ISO27001 = "ISO27001"
    HIPAA = "HIPAA"
    PCI = "PCI"
    GDPR = "GDPR"
    CCPA = "CCPA"


class GroupUpdateStatus(StrEnum):
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class ProductContext(StrEnum):
    """Filter values of the tag-category list (``productContextIdsMatchesAny``)."""

    EXTERNAL_TRUST_CENTER = "EXTERNAL_TRUST_CENTER"
    DOCUMENT_SHARING = "DOCUMENT_SHARING"
    CONTROL_SHARING = "CONTROL_SHARING"
    QUESTIONNAIRE = "QUESTIONNAIRE"


#: an "open" enum field: the enum member if the value is one, else the string as it came
Open = Annotated[T | str, Field(union_mode="left_to_right")]


class APIModel(BaseModel):
    """A response object: camelCase on the wire, unknown fields kept rather than rejected."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")


def _input_error(model: str, exc: ValidationError) -> InputError:
    """Name the first bad field and its value; mention how many other problems there are."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    original = first.get("ctx", {}).get("error")
    if len(errors) == 1 and isinstance(original, InputError):
        return original  # raised by a nested request model: already names field and value
    field = ".".join(str(part) for part in first["loc"]) or model
    problem = str(first["msg"]).removeprefix("Value error, ")
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem(s) in {model})"
    value = first.get("input") if first["type"] != "missing" else None
    if isinstance(value, list | tuple | dict) and len(value) > 10:
        value = f"<{type(value).__name__} of {len(value)} items>"
    if first["type"] == "missing":
        problem = f"is required by {model}"
    return InputError(field, value, problem)


class RequestPart(BaseModel):
    """A strict nested piece of a request body; no custom ``__init__``, so lists of them validate
    fast and a bad field is reported with its full path (``updates.3.id``)."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )


class RequestModel(RequestPart):
    """A request body: strict; construction and :meth:`model_validate` raise :class:`InputError`
    instead of ``ValidationError``, so every layer handles bad input the same way."""

    model_config = ConfigDict(validate_assignment=True)

    #: fields the API rejects as ``null`` even though ``None`` marks them "not set" here
    _not_nullable: ClassVar[frozenset[str]] = frozenset()
    #: True where the API takes no ``null`` at all: a ``None`` field is left out of the body
    _drop_nulls: ClassVar[bool] = False

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise _input_error(type(self).__name__, exc) from None

    @classmethod
    def model_validate(cls, obj: Any, **options: Any) -> Self:
        try:
            return super().model_validate(obj, **options)
        except ValidationError as exc:
            raise _input_error(cls.__name__, exc) from None

    @model_validator(mode="after")
    def _reject_null_where_not_allowed(self) -> Self:
        for name in self._not_nullable & self.model_fields_set:
            if getattr(self, name) is None:
                raise ValueError(f"{to_camel(name)} cannot be null")
        return self

    def to_wire(self) -> dict[str, Any]:
        """The JSON body: camelCase, only the fields that were set (explicit nulls kept)."""
        return self.model_dump(
            mode="json", by_alias=True, exclude_unset=True, exclude_none=self._drop_nulls
        )

    def to_wire_json(self) -> bytes:
        """Same as :meth:`to_wire`, serialized in one pass (the fast path for sending)."""
        return self.model_dump_json(
            by_alias=True, exclude_unset=True, exclude_none=self._drop_nulls
        ).encode()


def _not_blank(what: str) -> AfterValidator:
    """The validator of a string field that must not be blank (``what`` names it)."""

    def check(value: str) -> str:
        if not value.strip():
            raise ValueError(f"{what} must not be blank")
        return value

    return AfterValidator(check)


def _no_repeats(values: Sequence[Any], what: str) -> None:
    """The service's handling of repeated entries is unspecified: never send any."""
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{what} lists {value!r} more than once")
        seen.add(value)


class Actor(APIModel):
    """Owner/approver of a resource, or the actor of an event (``type`` like ``USER``)."""

    type: Open[ActorType]
    id: str
    display_name: str | None = None


class TagRef(APIModel):
    """One tag in one category: the shape used by knowledge base, answers and questionnaires."""

    category_id: str
    tag_id: str


class AccountTags(APIModel):
    """All tags of one category on a customer-trust account (replaced per category)."""

    category_id: str
    tag_ids: list[str]


class CustomField(APIModel):
    label: str
    value: str | list[str]


class MetadataEntry(APIModel):
    key: str
    value: str


class PageInfo(APIModel):
    """Where a list page sits; ``end_cursor`` asks for the next one while ``has_next_page``."""

    has_next_page: bool
    has_previous_page: bool = False
    start_cursor: str | None = None
    end_cursor: str | None = None


class Page(APIModel, Generic[T]):
    """One page of a paginated list (the ``results`` object of the envelope)."""

    data: list[T]
    page_info: PageInfo


class ListEnvelope(APIModel, Generic[T]):
    """``{results: {data, pageInfo}}`` as the paginated endpoints return it."""

    results: Page[T]


class ResultsEnvelope(APIModel, Generic[T]):
    """``{results: [...]}`` (add-people, tag categories)."""

    results: list[T]


class ResourcesEnvelope(APIModel, Generic[T]):
    """``{resources: [...]}`` (connector resources; no pagination)."""

    resources: list[T]


class KnowledgeBaseResource(APIModel):
    """A file or web link in the knowledge base."""

    id: str
    type: Open[KnowledgeBaseResourceType]
    title: str
    description: str | None = None
    file_url: str | None = None
    url: str | None = None
    include_sub_pages: bool | None = None
    customer_visibility: Open[CustomerVisibility] | None = None
    download_permission: Open[DownloadPermission] | None = None
    is_used_in_questionnaires: bool | None = None
    owner_assignment: Actor | None = None
    expiration_status: Open[ExpirationStatus] | None = None
    expiration_date: datetime | None = None
    last_updated: datetime | None = None
    last_verified: datetime | None = None
    tags: list[TagRef] = Field(default_factory=list)
    category_id: str | None = None


class AnswerLibraryEntry(APIModel):
    """A reusable question-and-answer pair."""

    id: str
    question: str
    answer: str
    expiration_status: Open[ExpirationStatus] | None = None
    owner_assignment: Actor | None = None
    expiration_date: datetime | None = None
    last_updated: datetime | None = None
    last_verified: datetime | None = None
    tags: list[TagRef] = Field(default_factory=list)


class OwnerRef(BaseModel):
    """An owner as a report names it: id, type and display name as sent."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    id: str
    type: str
    display_name: str | None = None


class KnowledgeItemSummary(BaseModel):
    """Owner and dates of a knowledge-base record, for reports over a whole list; the rest is
    skipped, not validated (docs/performance.md)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    id: str
    owner_assignment: OwnerRef | None = None
    expiration_status: str | None = None
    expiration_date: datetime | None = None
    last_updated: datetime | None = None
    last_verified: datetime | None = None


class KnowledgeBaseResourceSummary(KnowledgeItemSummary):
    title: str
    url: str | None = None


class AnswerLibraryEntrySummary(KnowledgeItemSummary):
    question: str


class StatusUpdater(APIModel):
    """Who changed a questionnaire's status."""

    id: str
    display_name: str | None = None
    email: str | None = None


class StatusLogEntry(APIModel):
    """One status change of a questionnaire (the log is newest first)."""

    updated_by: StatusUpdater | None = None
    updated_at: datetime
    status: Open[QuestionnaireStatus]
    message: str | None = None


class Questionnaire(APIModel):
    """A customer-trust security questionnaire."""

    id: str
    display_name: str
    type: Open[QuestionnaireType]
    status: Open[QuestionnaireStatus]
    status_log: list[StatusLogEntry] = Field(default_factory=list)
    tag_and_category_ids: list[TagRef] = Field(default_factory=list)
    created_date: datetime
    updated_date: datetime
    url: str | None = None
    owner_assignment: Actor | None = None
    approver_assignment: Actor | None = None
    customer_trust_account_id: str | None = None
    due_date: datetime | None = None
    metadata: list[MetadataEntry] = Field(default_factory=list)
    completed_date: datetime | None = None


class NdaDetails(APIModel):
    nda_status: Open[NdaStatus] | None = None
    nda_satisfied_date: datetime | None = None


class AccessConfig(APIModel):
    auto_approval_enabled: bool | None = None
    grant_access_option: Open[GrantAccessOption] | None = None


class CustomerTrustAccount(APIModel):
    """A customer's account in the trust center, with its tags per category."""

    id: str
    name: str
    email_domain: str | None = None
    created_date: datetime | None = None
    updated_date: datetime | None = None
    nda_details: NdaDetails | None = None
    access_config: AccessConfig | None = None
    custom_fields: list[CustomField] = Field(default_factory=list)
    tags_by_category: list[AccountTags] = Field(default_factory=list)


class VendorCategory(APIModel):
    display_name: str


class AuthDetails(APIModel):
    method: Open[AuthMethod] | None = None
    password_mfa: bool | None = Field(default=None, alias="passwordMFA")
    password_requires_number: bool | None = None
    password_requires_symbol: bool | None = None
    password_minimum_length: float | None = None


class ContractAmount(APIModel):
    amount: float
    currency: str


class LatestDecision(APIModel):
    status: Open[DecisionStatus]
    last_updated_at: datetime | None = None


class ProcurementRequest(APIModel):
    service: str | None = None
    url: str | None = None


class Vendor(APIModel):
    """A managed vendor (what add-to-managed returns)."""

    id: str
    name: str
    status: Open[VendorStatus]
    website_url: str | None = None
    account_manager_name: str | None = None
    account_manager_email: str | None = None
    services_provided: str | None = None
    additional_notes: str | None = None
    security_owner_user_id: str | None = None
    business_owner_user_id: str | None = None
    contract_start_date: datetime | None = None
    contract_renewal_date: datetime | None = None
    contract_termination_date: datetime | None = None
    next_security_review_due_date: datetime | None = None
    last_security_review_completion_date: datetime | None = None
    is_visible_to_auditors: bool | None = None
    is_risk_auto_scored: bool | None = None
    risk_attribute_ids: list[str] = Field(default_factory=list)
    category: VendorCategory | None = None
    auth_details: AuthDetails | None = None
    inherent_risk_level: Open[RiskLevel] | None = None
    residual_risk_level: Open[RiskLevel] | None = None
    vendor_headquarters: str | None = None
    contract_amount: ContractAmount | None = None
    custom_fields: list[CustomField] | None = None
    latest_decision: LatestDecision | None = None
    linked_task_tracker_task_procurement_request: ProcurementRequest | None = None


class DocumentLink(APIModel):
    """A link attached to a document as evidence."""

    id: str
    creation_date: datetime | None = None
    effective_date: datetime | None = None
    title: str
    url: str
    description: str | None = None


class PackageVulnerability(APIModel):
    """A vulnerable package reported by a connector (severity 0-10)."""

    display_name: str
    unique_id: str
    external_url: str | None = None
    package_name: str | None = None
    package_version: str | None = None
    severity: float | None = None
    vulnerable_component_unique_id: str | None = None
    description: str | None = None
    is_resolvable: bool | None = None
    remediation_instructions: str | None = None
    is_reachable: bool | None = None
    cve_id: str | None = None
    cvss3_vector: str | None = None
    cvss3_score: float | None = None


class UserSecurityTrainingStatus(APIModel):
    """One person's status in one security training, reported by a connector."""

    display_name: str
    unique_id: str
    external_url: str | None = None
    training_id: str | None = None
    training_name: str | None = None
    frameworks_fulfilled: list[Open[TrainingFramework]] = Field(default_factory=list)
    trainee_full_name: str | None = None
    trainee_account_name: str | None = None
    trainee_email: str | None = None
    status: Open[TrainingStatus] | None = None
    training_created_timestamp: datetime | None = None
    training_due_timestamp: datetime | None = None
    training_completed_timestamp: datetime | None = None


class GroupUpdateResult(APIModel):
    """The outcome for one person of add-people; a per-item ERROR does not fail the call."""

    id: str
    status: Open[GroupUpdateStatus]
    message: str | None = None

    @property
    def ok(self) -> bool:
        """True when the person is (now) in the group."""
        return self.status == GroupUpdateStatus.SUCCESS


class EventTarget(APIModel):
    id: str
    type: str


class EventLogEntry(APIModel):
    """One audit event: who did what to which targets, when."""

    id: str
    actor: Actor
    date: datetime
    action: str
    targets: list[EventTarget] = Field(default_factory=list)


class LoggedEvent(BaseModel):
    """An audit entry kept as sent (``record``), with ``id`` and ``date`` read from it, for the
    export, which writes entries back unchanged (docs/performance.md)."""

    model_config = ConfigDict(frozen=True)

    id: str
    date: datetime
    record: SkipValidation[dict[str, Any]]

    @model_validator(mode="before")
    @classmethod
    def _keep_record(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data  # pydantic reports the type
        read = {key: data[key] for key in ("id", "date") if key in data}
        return {**read, "record": data}


class TagCategory(APIModel):
    id: str
    display_name: str


class Tag(APIModel):
    id: str
    category: str
    display_name: str


class TagCategoryDetail(APIModel):
    """A tag category with all its tags (to resolve names to ids for ``matchesTags``)."""

    category: TagCategory
    tags: list[Tag] = Field(default_factory=list)


def assume_utc(moment: datetime) -> datetime:
    """A naive datetime (no usable offset) is taken to be UTC, never the machine's local time."""
    if moment.utcoffset() is None:
        return moment.replace(tzinfo=UTC)
    return moment


def iso_timestamp(moment: datetime) -> str:
    """The service's form, ``2026-01-02T03:04:05.123Z``: naive means UTC, finer digits are
    floored (docs/client.md, Timestamps); an instant always gives the same text."""
    utc = assume_utc(moment).astimezone(UTC)
    return utc.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


#: a datetime a caller sends: made aware (UTC if naive) when set, written by ``iso_timestamp``
#: (UTC, milliseconds, ``Z``) so bodies and query parameters carry the same text for an instant
RequestDatetime = Annotated[
    datetime,
    AfterValidator(assume_utc),
    PlainSerializer(iso_timestamp, return_type=str, when_used="json"),
]


class Assignee(RequestPart):
    """Owner or approver to assign: ``{type: User|Team, id}`` (no display name on the wire)."""

    type: ActorType
    id: Annotated[str, _not_blank("id")]


class TagAssignment(RequestPart):
    """``{categoryId, tagId}`` in a request; both are required."""

    category_id: Annotated[str, _not_blank("tag and category ids")]
    tag_id: Annotated[str, _not_blank("tag and category ids")]


class AccountTagAssignment(RequestPart):
    """``{categoryId, tagIds}`` in an account update; replaces that category's tags."""

    category_id: Annotated[str, _not_blank("categoryId")]
    tag_ids: list[str]

    @field_validator("tag_ids")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        _no_repeats(value, "tagIds")
        return value


class CustomFieldValue(RequestPart):
    label: str
    value: str | list[str]


class MetadataValue(RequestPart):
    key: str
    value: str


def _as_plain(value: Any) -> Any:
    """Let callers pass response models (e.g. a ``TagRef``) as the items of request lists."""
    if not isinstance(value, list | tuple):
        return value
    return [
        item.model_dump(include=set(type(item).model_fields))
        if isinstance(item, BaseModel)
        else item
        for item in value
    ]


#: a request list whose items may also be given as response models
ModelList = Annotated[list[T], BeforeValidator(_as_plain)]


class QuestionnaireUpdate(RequestModel):
    """PATCH body of a questionnaire: ``None`` clears ``due_date`` or unassigns; touching the
    approver needs QuestionnaireAutomationAdvanced; ``tag_and_category_ids`` replaces all tags."""

    _not_nullable: ClassVar[frozenset[str]] = frozenset(
        {"display_name", "status", "metadata", "tag_and_category_ids"}
    )

    display_name: str | None = None
    due_date: RequestDatetime | None = None
    status: QuestionnaireStatus | None = None
    owner_assignment: Assignee | None = None
    approver_assignment: Assignee | None = None
    metadata: ModelList[MetadataValue] | None = None
    tag_and_category_ids: ModelList[TagAssignment] | None = None

    @field_validator("owner_assignment", "approver_assignment", mode="before")
    @classmethod
    def _accept_actor(cls, value: Any) -> Any:
        if isinstance(value, BaseModel):
            return {"type": getattr(value, "type", None), "id": getattr(value, "id", None)}
        return value

    @field_validator("tag_and_category_ids")
    @classmethod
    def _unique_tags(cls, value: list[TagAssignment] | None) -> list[TagAssignment] | None:
        _no_repeats([(tag.category_id, tag.tag_id) for tag in value or []], "tagAndCategoryIds")
        return value

    @field_validator("status")
    @classmethod
    def _settable(cls, value: QuestionnaireStatus | None) -> QuestionnaireStatus | None:
        if value is not None and value not in SETTABLE_QUESTIONNAIRE_STATUSES:
            allowed = ", ".join(sorted(SETTABLE_QUESTIONNAIRE_STATUSES))
            raise ValueError(f"{value.value} cannot be set through an update; allowed: {allowed}")
        return value


class AccountUpdate(RequestModel):
    """PATCH body of a customer-trust account. ``tags_by_category`` replaces per category."""

    _not_nullable: ClassVar[frozenset[str]] = frozenset(
        {"name", "email_domain", "custom_fields", "tags_by_category"}
    )

    name: str | None = None
    email_domain: str | None = None
    custom_fields: ModelList[CustomFieldValue] | None = None
    tags_by_category: ModelList[AccountTagAssignment] | None = None

    @field_validator("tags_by_category")
    @classmethod
    def _one_entry_per_category(
        cls, value: list[AccountTagAssignment] | None
    ) -> list[AccountTagAssignment] | None:
        _no_repeats([entry.category_id for entry in value or []], "tagsByCategory")
        return value


class DocumentLinkCreate(RequestModel):
    """POST body of a document link: ``url`` (http/https) and ``title`` are required."""

    url: str
    title: Annotated[str, _not_blank("title")]
    description: str | None = None
    effective_date: RequestDatetime | None = None

    @field_validator("url")
    @classmethod
    def _absolute_url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("must be an absolute http(s) URL")
        return value.strip()


class ApproveQuestionnaire(RequestModel):
    """POST body of approve; the reason is optional (an empty body ``{}`` is sent without it)."""

    _drop_nulls: ClassVar[bool] = True

    status_change_message: str | None = None


class PersonRef(RequestPart):
    id: Annotated[str, _not_blank("person id")]


class AddPeopleRequest(RequestModel):
    """POST body of add-people: 1 to 100 person ids (adding is a set operation, so retry-safe)."""

    updates: list[PersonRef] = Field(min_length=1, max_length=MAX_ADD_PEOPLE)

    @classmethod
    def for_people(cls, person_ids: Any) -> AddPeopleRequest:
        """Build the body from plain ids (checked like :func:`add_people_body`)."""
        ids = check_person_ids(person_ids)
        return cls.model_construct(updates=[PersonRef.model_construct(id=pid) for pid in ids])


def check_person_ids(person_ids: Any) -> list[str]:
    """The add-people bounds, checked without pydantic: this is the bulk hot path."""
    if isinstance(person_ids, str | bytes) or not isinstance(person_ids, Iterable):
        raise InputError("person_ids", person_ids, "must be a list of person ids")
    ids = list(person_ids)
    if not 1 <= len(ids) <= MAX_ADD_PEOPLE:
        raise InputError(
            "person_ids",
            f"<{len(ids)} ids>",
            f"add-people takes 1 to {MAX_ADD_PEOPLE} ids per call; split larger sets",
        )
    for index, person_id in enumerate(ids):
        if not isinstance(person_id, str) or not person_id.strip():
            raise InputError(f"person_ids[{index}]", person_id, "must be a non-blank string")
    return ids


def add_people_body(person_ids: Any) -> bytes:
    """The add-people JSON body ``{"updates": [{"id": ...}]}``, validated, in one pass."""
    ids = check_person_ids(person_ids)
    return json.dumps({"updates": [{"id": pid} for pid in ids]}, separators=(",", ":")).encode()


class _ListFilter(RequestModel):
    q: str | None = None
    last_updated_after: RequestDatetime | None = None
    last_updated_before: RequestDatetime | None = None
    matches_tags: ModelList[TagAssignment] | None = None
    expires_before: RequestDatetime | None = None
    expires_after: RequestDatetime | None = None

    @model_validator(mode="after")
    def _ranges_make_sense(self) -> Self:
        for low, high in (
            ("last_updated_after", "last_updated_before"),
            ("expires_after", "expires_before"),
        ):
            start, end = getattr(self, low), getattr(self, high)
            if start is not None and end is not None and start > end:
                raise ValueError(f"{low} ({start.isoformat()}) is after {high} ({end.isoformat()})")
        return self

    def to_params(self) -> list[tuple[str, str]]:
        """Query parameters; arrays repeat their name, tags are JSON-encoded."""
        params: list[tuple[str, str]] = []
        if self.q is not None:
            params.append(("q", self.q))
        for name, moment in (
            ("lastUpdatedAfter", self.last_updated_after),
            ("lastUpdatedBefore", self.last_updated_before),
            ("expiresBefore", self.expires_before),
            ("expiresAfter", self.expires_after),
        ):
            if moment is not None:
                params.append((name, iso_timestamp(moment)))
        if self.matches_tags:
            # a JSON-encoded array of {categoryId, tagId}
            tags = [tag.model_dump(by_alias=True) for tag in self.matches_tags]
            params.append(("matchesTags", json.dumps(tags, separators=(",", ":"))))
        return params


class KnowledgeBaseFilter(_ListFilter):
    """Filters of the knowledge-base list. Tags in one category OR, across categories AND."""

    type_matches_any: list[KnowledgeBaseResourceType] | None = None

    def to_params(self) -> list[tuple[str, str]]:
        params = super().to_params()
        for resource_type in self.type_matches_any or ():
            params.append(("typeMatchesAny", resource_type.value))
        return params


class AnswerLibraryFilter(_ListFilter):
    """Filters of the answer-library list. Entries matching any given tag are returned."""


def coerce_request(model: type[RequestModel], value: RequestModel | Mapping[str, Any]) -> Any:
    """Accept a model or a plain mapping wherever the client takes a request body."""
    if isinstance(value, model):
        return value
    if isinstance(value, Mapping):
        return model.model_validate(dict(value))
    raise InputError(model.__name__, type(value).__name__, f"expected {model.__name__} or a dict")
