"""The async data client: one method per Compliance API operation over one pooled
``httpx.AsyncClient``; tokens from a ``TokenProvider`` (a 401 replaces the failed one and resends
once), retries per :mod:`compliance_api.retry`. Behaviour and usage: docs/client.md.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from compliance_api.auth import AccessToken, TokenProvider
from compliance_api.errors import APIError, InputError, PermissionDeniedError, TransportError
from compliance_api.http_errors import error_from_response, error_from_transport
from compliance_api.models import (
    MAX_PAGE_SIZE,
    AccountUpdate,
    AnswerLibraryEntry,
    AnswerLibraryEntrySummary,
    AnswerLibraryFilter,
    ApproveQuestionnaire,
    CustomerTrustAccount,
    DocumentLink,
    DocumentLinkCreate,
    EventLogEntry,
    GroupUpdateResult,
    KnowledgeBaseFilter,
    KnowledgeBaseResource,
    KnowledgeBaseResourceSummary,
    ListEnvelope,
    LoggedEvent,
    PackageVulnerability,
    Page,
    ProductContext,
    Questionnaire,
    QuestionnaireUpdate,
    ResourcesEnvelope,
    ResultsEnvelope,
    TagCategory,
    TagCategoryDetail,
    UserSecurityTrainingStatus,
    Vendor,
    add_people_body,
    check_person_ids,
    coerce_request,
    iso_timestamp,
)
from compliance_api.prefetch import sent_hook
from compliance_api.retry import RetryMode, RetryNotice, RetryPolicy, retrying
from compliance_api.settings import Settings
from compliance_api.write_fence import SendHeld, WriteFence, fenced_trace

M = TypeVar("M", bound=BaseModel)

#: sized for 16-32 concurrent task runs sharing one client
DEFAULT_LIMITS = httpx.Limits(max_connections=32, max_keepalive_connections=32, keepalive_expiry=30)
USER_AGENT = "compliance-flows/0.1 (+httpx)"

_GROUP_RESULTS = ResultsEnvelope[GroupUpdateResult]
_TAG_CATEGORIES = ResultsEnvelope[TagCategory]
_VULNERABILITIES = ResourcesEnvelope[PackageVulnerability]
_TRAININGS = ResourcesEnvelope[UserSecurityTrainingStatus]

#: what a questionnaire update needs to set or clear ``approverAssignment`` (spec §4.3)
APPROVER_ENTITLEMENT = "QuestionnaireAutomationAdvanced"


@dataclass
class ClientStats:
    """Counters a flow or benchmark can read: HTTP requests, retries, token replacements."""

    requests: int = 0
    retries: int = 0
    token_replacements: int = 0
    #: writes the write fence held back before their first byte (then sent once it let them)
    held_writes: int = 0


class ComplianceClient:
    """One client per event loop; share it between tasks (the connection pool is the point)."""

    def __init__(
        self,
        base_url: str,
        token_provider: TokenProvider,
        *,
        timeout: float = 30.0,
        max_retries: int = 5,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_policy: RetryPolicy | None = None,
        on_retry: Callable[[RetryNotice], None] | None = None,
        write_fence: WriteFence | None = None,
    ) -> None:
        self._base_url = base_url.rstrip("/")
        self._tokens = token_provider
        #: holds every write, retries included, until it may be sent (``write_fence.py``)
        self._fence = write_fence
        self._timeout = timeout
        self._policy = retry_policy or RetryPolicy.from_max_retries(max_retries)
        self._on_retry = on_retry
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout),
            limits=DEFAULT_LIMITS,
            transport=transport,
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
            follow_redirects=False,
        )
        self.stats = ClientStats()

    @classmethod
    def from_settings(
        cls, settings: Settings, token_provider: TokenProvider, **kwargs: Any
    ) -> ComplianceClient:
        """Base URL (gov tier included), timeout and retries from ``COMPLIANCE_*``; ``max_retries``
        or ``retry_policy`` in ``kwargs`` take precedence."""
        kwargs.setdefault("timeout", settings.http_timeout_seconds)
        if kwargs.get("retry_policy") is None:
            max_retries = kwargs.pop("max_retries", settings.max_retries)
            kwargs["retry_policy"] = replace(
                RetryPolicy.from_max_retries(max_retries),
                max_wait=settings.retry_max_wait_seconds,
                max_retry_after=settings.retry_after_max_seconds,
            )
        return cls(settings.api_base_url, token_provider, **kwargs)

    @property
    def base_url(self) -> str:
        """Where requests go (the gov base URL for government-tier customers)."""
        return self._base_url

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close pooled connections; the client cannot be used afterwards."""
        await self._http.aclose()

    def __repr__(self) -> str:
        return f"ComplianceClient(base_url={self._base_url!r})"

    async def list_page(
        self,
        item: type[M],
        *,
        filters: KnowledgeBaseFilter | AnswerLibraryFilter | Mapping[str, Any] | None = None,
        start_date: datetime | None = None,
        page_size: int = MAX_PAGE_SIZE,
        page_cursor: str | None = None,
    ) -> Page[M]:
        """One page of the list ``item`` belongs to (``_LISTS``); ``page_info.end_cursor`` asks
        for the next. The item models and their filters: docs/client.md, Lists."""
        if item not in _LISTS:
            names = ", ".join(model.__name__ for model in _LISTS)
            raise InputError("item", item.__name__, f"must be one of {names}")
        listing, envelope = _LISTS[item]
        params = [("pageSize", str(check_page_size(page_size)))]
        if page_cursor is not None:
            params.append(("pageCursor", _required("page_cursor", page_cursor)))
        params += listing.query(filters, start_date)
        response = await self._call(listing.operation, "GET", listing.path, params=params)
        return _parse(envelope, response, listing.operation).results

    async def iter_event_logs(
        self, start_date: datetime | None = None, page_size: int = MAX_PAGE_SIZE
    ) -> AsyncIterator[EventLogEntry]:
        """Every event at or after ``start_date``, one page in memory; a next page without a new
        cursor raises ``APIError`` instead of looping."""
        cursor: str | None = None
        while True:
            page = await self.list_page(
                EventLogEntry, start_date=start_date, page_size=page_size, page_cursor=cursor
            )
            for entry in page.data:
                yield entry
            info = page.page_info
            if not info.has_next_page:
                return
            if not info.end_cursor or info.end_cursor == cursor:
                problem = (
                    f"the service returned the same endCursor twice ({cursor!r})"
                    if info.end_cursor
                    else "the service says there is a next page but sent no endCursor to reach it"
                )
                raise APIError(problem, operation="list_event_logs")
            cursor = info.end_cursor

    async def update_questionnaire(
        self, questionnaire_id: str, update: QuestionnaireUpdate | Mapping[str, Any]
    ) -> Questionnaire:
        """Send the fields set on ``update``; a 403 for setting or clearing the approver names the
        entitlement it needs."""
        path = f"/v1/customer-trust/questionnaires/{_segment('questionnaire_id', questionnaire_id)}"
        request: QuestionnaireUpdate = coerce_request(QuestionnaireUpdate, update)
        body = request.to_wire_json()
        try:
            response = await self._call("update_questionnaire", "PATCH", path, content=body)
        except PermissionDeniedError as exc:
            if "approver_assignment" not in request.model_fields_set:
                raise
            raise _approver_entitlement_error(exc) from None
        return _parse(Questionnaire, response, "update_questionnaire")

    async def approve_questionnaire(
        self, questionnaire_id: str, status_change_message: str | None = None
    ) -> Questionnaire:
        """Approve, optionally with the reason shown in the status log; safe to repeat."""
        ident = _segment("questionnaire_id", questionnaire_id)
        path = f"/v1/customer-trust/questionnaires/{ident}/approve"
        body = ApproveQuestionnaire(status_change_message=status_change_message).to_wire_json()
        response = await self._call("approve_questionnaire", "POST", path, content=body)
        return _parse(Questionnaire, response, "approve_questionnaire")

    async def update_account(
        self, account_id: str, update: AccountUpdate | Mapping[str, Any]
    ) -> CustomerTrustAccount:
        """Rename, set custom fields or replace tags per category on a customer-trust account."""
        path = f"/v1/customer-trust/accounts/{_segment('account_id', account_id)}"
        body = coerce_request(AccountUpdate, update).to_wire_json()
        response = await self._call("update_account", "PATCH", path, content=body)
        return _parse(CustomerTrustAccount, response, "update_account")

    async def add_discovered_vendor_to_managed(self, discovered_vendor_id: str) -> Vendor:
        """Promote a discovered vendor; the service treats a repeat as the same promotion."""
        ident = _segment("discovered_vendor_id", discovered_vendor_id)
        path = f"/v1/discovered-vendors/{ident}/add-to-managed"
        response = await self._call("add_discovered_vendor_to_managed", "POST", path)
        return _parse(Vendor, response, "add_discovered_vendor_to_managed")

    async def create_document_link(
        self, document_id: str, link: DocumentLinkCreate | Mapping[str, Any]
    ) -> DocumentLink:
        """Attach a link; not idempotent, so it is resent only if it provably was not applied
        (a 429, or a request that never left this machine), never after a 5xx or a lost answer."""
        path = f"/v1/documents/{_segment('document_id', document_id)}/links"
        body = coerce_request(DocumentLinkCreate, link).to_wire_json()
        response = await self._call(
            "create_document_link", "POST", path, content=body, mode=RetryMode.UNAPPLIED_ONLY
        )
        return _parse(DocumentLink, response, "create_document_link")

    async def add_people_to_group(
        self, group_id: str, person_ids: Sequence[str]
    ) -> list[GroupUpdateResult]:
        """Add 1-100 people; per-person failures are ERROR items, each checked against the id sent
        at its position."""
        path = f"/v1/groups/{_segment('group_id', group_id)}/add-people"
        ids = check_person_ids(person_ids)
        body = add_people_body(ids)
        response = await self._call("add_people_to_group", "POST", path, content=body)
        results = _parse(_GROUP_RESULTS, response, "add_people_to_group").results
        problem = _group_results_problem(ids, results)
        if problem is not None:
            raise APIError(
                problem, operation="add_people_to_group", status_code=response.status_code
            )
        return results

    async def list_package_vulnerabilities(self, resource_id: str) -> list[PackageVulnerability]:
        """Vulnerable packages a connector reported for one registered resource."""
        params = [("resourceId", _required("resource_id", resource_id))]
        response = await self._call(
            "list_package_vulnerabilities",
            "GET",
            "/v1/resources/package_vulnerability_connectors",
            params=params,
        )
        return _parse(_VULNERABILITIES, response, "list_package_vulnerabilities").resources

    async def list_user_security_training(
        self, resource_id: str
    ) -> list[UserSecurityTrainingStatus]:
        """Security-training statuses a connector reported for one registered resource."""
        params = [("resourceId", _required("resource_id", resource_id))]
        response = await self._call(
            "list_user_security_training",
            "GET",
            "/v1/resources/user_security_training_status",
            params=params,
        )
        return _parse(_TRAININGS, response, "list_user_security_training").resources

    async def list_tag_categories(
        self, product_contexts: Sequence[ProductContext | str] | None = None
    ) -> list[TagCategory]:
        """All tag categories (not paginated), optionally only those of some product contexts."""
        params = [
            ("productContextIdsMatchesAny", _product_context(value))
            for value in (product_contexts or ())
        ]
        response = await self._call(
            "list_tag_categories", "GET", "/v1/customer-trust/tag-categories", params=params
        )
        return _parse(_TAG_CATEGORIES, response, "list_tag_categories").results

    async def get_tag_category(self, tag_category_id: str) -> TagCategoryDetail:
        """One category with its tags."""
        ident = _segment("tag_category_id", tag_category_id)
        response = await self._call(
            "get_tag_category", "GET", f"/v1/customer-trust/tag-categories/{ident}"
        )
        return _parse(TagCategoryDetail, response, "get_tag_category")

    async def _call(
        self,
        operation: str,
        method: str,
        path: str,
        *,
        params: list[tuple[str, str]] | None = None,
        content: bytes | None = None,
        mode: RetryMode = RetryMode.IDEMPOTENT,
    ) -> httpx.Response:
        """Send with auth, retrying transient failures as far as ``mode`` allows."""
        url = self._base_url + path
        async for attempt in retrying(self._policy, mode, operation, self._note_retry):
            with attempt:
                return await self._attempt(operation, method, url, params, content)
        raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover

    def _note_retry(self, notice: RetryNotice) -> None:
        self.stats.retries += 1
        if self._on_retry is not None:
            self._on_retry(notice)

    async def _attempt(
        self,
        operation: str,
        method: str,
        url: str,
        params: list[tuple[str, str]] | None,
        content: bytes | None,
    ) -> httpx.Response:
        """One try: on a 401, replace exactly the refused token and resend once."""
        token = await self._tokens.get_token()
        response = await self._send(operation, method, url, params, content, token)
        if response.status_code == 401:
            self.stats.token_replacements += 1
            token = await self._tokens.replace_token(token)
            response = await self._send(operation, method, url, params, content, token)
        if response.is_success:
            return response
        error = error_from_response(response, operation, secrets=(token.value.get_secret_value(),))
        del response  # its request holds the bearer header; keep it off the traceback
        raise error

    async def _send(
        self,
        operation: str,
        method: str,
        url: str,
        params: list[tuple[str, str]] | None,
        content: bytes | None,
        token: AccessToken,
    ) -> httpx.Response:
        self.stats.requests += 1
        headers = {"Authorization": "Bearer " + token.value.get_secret_value()}
        if content is not None:
            headers["Content-Type"] = "application/json"
        extensions = sent_hook() or {}
        timeout: httpx.Timeout | None = None
        fence = self._fence if method != "GET" else None
        if fence is not None:
            extensions = {"trace": fenced_trace(fence, extensions.get("trace"))}
            limit = min(self._timeout, fence.send_timeout)
            timeout = httpx.Timeout(self._timeout, connect=limit, pool=limit, write=limit)
        failure: TransportError
        while True:
            if fence is not None:
                await fence.ready()
            try:
                return await self._http.request(
                    method,
                    url,
                    params=tuple(params) if params else None,
                    content=content,
                    headers=headers,
                    extensions=extensions,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except SendHeld:  # nothing was sent: wait until the fence lets it go
                self.stats.held_writes += 1
            except httpx.TransportError as exc:
                failure = error_from_transport(exc, operation)
                break
        # raised outside ``except`` so the httpx error (and its request headers) is not chained
        raise failure


def check_page_size(page_size: int) -> int:
    """The API takes 1 to 100 items per page (spec §4, pagination)."""
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise InputError("page_size", page_size, f"must be an integer from 1 to {MAX_PAGE_SIZE}")
    if not 1 <= page_size <= MAX_PAGE_SIZE:
        raise InputError("page_size", page_size, f"must be from 1 to {MAX_PAGE_SIZE}")
    return page_size


def _required(name: str, value: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(name, value, "must be a non-blank string")
    return value


def _segment(name: str, value: str) -> str:
    """An identifier as one path segment: ``a/b`` must not address another route."""
    return quote(_required(name, value), safe="")


def _approver_entitlement_error(error: PermissionDeniedError) -> PermissionDeniedError:
    """A 403 on an update that sets the approver: name the entitlement it needs."""
    if APPROVER_ENTITLEMENT in error.message:
        return error
    return PermissionDeniedError(
        f"{error.message}. Setting or clearing approverAssignment (also to null) requires the "
        f"{APPROVER_ENTITLEMENT} entitlement, which this application may not have: leave "
        "approver_assignment out of the update, or have the entitlement enabled",
        operation=error.operation,
        status_code=error.status_code,
        code=error.code,
    )


def _product_context(value: ProductContext | str) -> str:
    try:
        return ProductContext(value).value
    except ValueError:
        allowed = ", ".join(context.value for context in ProductContext)
        raise InputError("product_contexts", value, f"must be one of {allowed}") from None


@dataclass(frozen=True)
class _Listing:
    """A paginated list: its operation, path, and the filter model of its query (None: the
    event log, whose only filter is ``startDate``)."""

    operation: str
    path: str
    filter_model: type[KnowledgeBaseFilter] | type[AnswerLibraryFilter] | None

    def query(
        self,
        filters: KnowledgeBaseFilter | AnswerLibraryFilter | Mapping[str, Any] | None,
        start_date: datetime | None,
    ) -> list[tuple[str, str]]:
        """The list's filters as query parameters, refusing the other list's kind."""
        if self.filter_model is None:
            if filters is not None:
                raise InputError("filters", filters, "the event log takes start_date instead")
            if start_date is None:
                return []
            if not isinstance(start_date, datetime):
                raise InputError("start_date", start_date, "must be a datetime")
            return [("startDate", iso_timestamp(start_date))]
        if start_date is not None:
            raise InputError("start_date", start_date, f"{self.operation} takes filters instead")
        return [] if filters is None else coerce_request(self.filter_model, filters).to_params()


_KNOWLEDGE_BASE = _Listing(
    "list_knowledge_base_resources", "/v1/knowledge-base/resources", KnowledgeBaseFilter
)
_ANSWER_LIBRARY = _Listing(
    "list_answer_library", "/v1/knowledge-base/answer-library", AnswerLibraryFilter
)
_EVENT_LOGS = _Listing("list_event_logs", "/v1/event-logs", None)
#: per item model: the list it is read from and the envelope its pages are parsed with
_LISTS: dict[type[BaseModel], tuple[_Listing, type[ListEnvelope[Any]]]] = {
    KnowledgeBaseResource: (_KNOWLEDGE_BASE, ListEnvelope[KnowledgeBaseResource]),
    KnowledgeBaseResourceSummary: (_KNOWLEDGE_BASE, ListEnvelope[KnowledgeBaseResourceSummary]),
    AnswerLibraryEntry: (_ANSWER_LIBRARY, ListEnvelope[AnswerLibraryEntry]),
    AnswerLibraryEntrySummary: (_ANSWER_LIBRARY, ListEnvelope[AnswerLibraryEntrySummary]),
    EventLogEntry: (_EVENT_LOGS, ListEnvelope[EventLogEntry]),
    LoggedEvent: (_EVENT_LOGS, ListEnvelope[LoggedEvent]),
}

#: how many mismatched add-people results an error lists before summarising the rest
_MISMATCHES_SHOWN = 5


def _group_results_problem(sent: list[str], results: list[GroupUpdateResult]) -> str | None:
    """What is wrong with add-people results (one per id sent, in order), or None."""
    if len(results) != len(sent):
        return f"service returned {len(results)} results for {len(sent)} people"
    mismatches = [
        f"result {index} is for id {result.id!r} but id {person_id!r} was sent there"
        for index, (person_id, result) in enumerate(zip(sent, results, strict=True))
        if result.id != person_id
    ]
    if not mismatches:
        return None
    shown = "; ".join(mismatches[:_MISMATCHES_SHOWN])
    more = len(mismatches) - _MISMATCHES_SHOWN
    rest = f"; and {more} more" if more > 0 else ""
    return (
        "the results do not match the ids sent, position by position (one result per id, in "
        f"request order), so none can be attributed: {shown}{rest}"
    )


def _parse(model: type[M], response: httpx.Response, operation: str) -> M:
    """Parse a success body; a body that does not fit is the service's fault, said so plainly."""
    try:
        return model.model_validate_json(response.content)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}"
            for error in exc.errors(include_url=False, include_input=False)[:3]
        )
        message = f"unexpected response body: {problems}"
    raise APIError(message, operation=operation, status_code=response.status_code)
