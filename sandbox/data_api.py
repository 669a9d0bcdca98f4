"""The data endpoints of §4, each enforcing its rules and answering in the published shapes.

Every successful write appends an audit entry (actor ``{id: <client_id>, type: APPLICATION}``)
and bumps its ``write_counts`` entry in the stats. Handlers take the raw request so responses
are built as plain dicts, without per-request model validation (it would dominate the cost).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from sandbox import validation as v
from sandbox.apps import ADVANCED_ENTITLEMENT
from sandbox.data import PRODUCT_CONTEXTS, SETTABLE_STATUSES, Dataset, KbItem
from sandbox.errors import ApiError, bad_request, json_response, not_found
from sandbox.pagination import page_size, paginate
from sandbox.state import Tier
from sandbox.times import iso
from sandbox.tokens import AccessToken

KB_TYPES = ("FILE", "URL")
ACTOR_TYPES = ("User", "Team")
QUESTIONNAIRE_FIELDS = (
    "displayName",
    "dueDate",
    "status",
    "ownerAssignment",
    "approverAssignment",
    "metadata",
    "tagAndCategoryIds",
)
ACCOUNT_FIELDS = ("name", "emailDomain", "customFields", "tagsByCategory")
LINK_FIELDS = ("url", "title", "description", "effectiveDate")
MAX_GROUP_UPDATES = 100


def _token(request: Request) -> AccessToken:
    token: AccessToken = request.scope["state"]["token"]
    return token


def _app_actor(token: AccessToken) -> dict[str, str]:
    return {"id": token.app.client_id, "type": "APPLICATION"}


def _expiry_renderer(now_ms: int) -> Callable[[KbItem], dict[str, Any]]:
    def render(item: KbItem) -> dict[str, Any]:
        doc = dict(item.doc)
        expired = item.expires is not None and item.expires <= now_ms
        doc["expirationStatus"] = "EXPIRED" if expired else "CURRENT"
        return doc

    return render


def _common_matcher(request: Request) -> list[Callable[[KbItem], bool]]:
    """Filters shared by the knowledge base and the answer library (bounds are inclusive)."""
    checks: list[Callable[[KbItem], bool]] = []
    q = request.query_params.get("q")
    if q is not None and q.strip():
        words = q.lower().split()
        checks.append(lambda item: all(word in item.text for word in words))
    after = v.query_timestamp(request, "lastUpdatedAfter")
    before = v.query_timestamp(request, "lastUpdatedBefore")
    expires_after = v.query_timestamp(request, "expiresAfter")
    expires_before = v.query_timestamp(request, "expiresBefore")
    if after is not None:
        checks.append(lambda item: item.updated * 1000 >= after)
    if before is not None:
        checks.append(lambda item: item.updated * 1000 <= before)
    if expires_after is not None:
        checks.append(
            lambda item: item.expires is not None and item.expires * 1000 >= expires_after
        )
    if expires_before is not None:
        checks.append(
            lambda item: item.expires is not None and item.expires * 1000 <= expires_before
        )
    return checks


def _all(checks: list[Callable[[KbItem], bool]]) -> Callable[[KbItem], bool] | None:
    if not checks:
        return None
    return lambda item: all(check(item) for check in checks)


def data_router(tier: Tier) -> APIRouter:
    router = APIRouter()
    ds: Dataset = tier.dataset
    stats = tier.stats

    def audit(token: AccessToken, action: str, targets: list[dict[str, str]]) -> None:
        ds.record_event(tier.now_ms(), _app_actor(token), action, targets)

    # ------------------------------------------------------------------ knowledge base
    @router.get("/v1/knowledge-base/resources")
    async def list_knowledge_base(request: Request) -> Response:
        size = page_size(request.query_params.get("pageSize"))
        checks = _common_matcher(request)
        types = v.enum_list(request, "typeMatchesAny", KB_TYPES)
        if types:
            checks.append(lambda item: item.doc["type"] in types)
        tags = v.matches_tags(request.query_params.get("matchesTags"))
        if tags:
            by_category: dict[str, set[tuple[str, str]]] = {}
            for pair in tags:
                by_category.setdefault(pair[0], set()).add(pair)
            groups = list(by_category.values())
            # OR within a category, AND across categories.
            checks.append(lambda item: all(not item.tags.isdisjoint(group) for group in groups))
        page = paginate(
            "kb",
            ds.kb,
            size=size,
            cursor=request.query_params.get("pageCursor"),
            matches=_all(checks),
            render=_expiry_renderer(tier.now_ms()),
        )
        return json_response(page)

    @router.get("/v1/knowledge-base/answer-library")
    async def list_answer_library(request: Request) -> Response:
        size = page_size(request.query_params.get("pageSize"))
        checks = _common_matcher(request)
        tags = v.matches_tags(request.query_params.get("matchesTags"))
        if tags:
            wanted = set(tags)
            checks.append(lambda item: not item.tags.isdisjoint(wanted))  # OR
        page = paginate(
            "answers",
            ds.answers,
            size=size,
            cursor=request.query_params.get("pageCursor"),
            matches=_all(checks),
            render=_expiry_renderer(tier.now_ms()),
        )
        return json_response(page)

    # ------------------------------------------------------------------ tags
    @router.get("/v1/customer-trust/tag-categories")
    async def list_tag_categories(request: Request) -> Response:
        """Categories used in any of the ``productContextIdsMatchesAny`` contexts (all if none)."""
        contexts = v.enum_list(request, "productContextIdsMatchesAny", PRODUCT_CONTEXTS)
        categories = [
            dict(c)
            for c in ds.tag_categories
            if not contexts or contexts & ds.tag_category_contexts[c["id"]]
        ]
        return json_response({"results": categories})

    @router.get("/v1/customer-trust/tag-categories/{tagCategoryId}")
    async def get_tag_category(request: Request, tagCategoryId: str) -> Response:
        category = next((c for c in ds.tag_categories if c["id"] == tagCategoryId), None)
        if category is None:
            raise not_found("tag category", tagCategoryId)
        return json_response(
            {"category": dict(category), "tags": [dict(t) for t in ds.tags[tagCategoryId]]}
        )

    def check_tag(category_id: str, tag_id: str, field: str) -> None:
        if category_id not in ds.tags:
            raise bad_request(f"{field}: unknown tag category {category_id!r}")
        if ds.tag_category_of.get(tag_id) != category_id:
            raise bad_request(f"{field}: tag {tag_id!r} is not a tag of category {category_id!r}")

    # ------------------------------------------------------------------ questionnaires
    def actor(value: Any, field: str) -> dict[str, Any] | None:
        if value is None:
            return None
        if not isinstance(value, dict) or set(value) - {"type", "id"}:
            raise bad_request(f"{field} must be {{type: User|Team, id: string}} or null")
        kind, actor_id = value.get("type"), value.get("id")
        if kind not in ACTOR_TYPES:
            raise bad_request(f"{field}.type {kind!r} is not one of User, Team")
        actor_id = v.string(actor_id, f"{field}.id")
        if kind == "User":
            index = ds.people_index.get(actor_id)
            if index is None:
                raise bad_request(f"{field}.id: no user {actor_id!r}")
            name = ds.people[index]["displayName"]
        else:
            group = ds.groups.get(actor_id)
            if group is None:
                raise bad_request(f"{field}.id: no team {actor_id!r}")
            name = group["name"]
        return {"type": kind, "id": actor_id, "displayName": name}

    def status_entry(
        token: AccessToken, status: str, message: str | None, at: str
    ) -> dict[str, Any]:
        """A status-log entry stamped ``at``: the same instant as the change it records."""
        return {
            "updatedBy": {"id": token.app.client_id, "displayName": token.app.name, "email": None},
            "updatedAt": at,
            "status": status,
            "message": message,
        }

    @router.patch("/v1/customer-trust/questionnaires/{questionnaireId}")
    async def update_questionnaire(request: Request, questionnaireId: str) -> Response:
        token = _token(request)
        questionnaire = ds.questionnaires.get(questionnaireId)
        if questionnaire is None:
            raise not_found("questionnaire", questionnaireId)
        body = await v.json_object(request)
        v.only_fields(body, QUESTIONNAIRE_FIELDS)
        if "approverAssignment" in body and ADVANCED_ENTITLEMENT not in token.app.entitlements:
            raise ApiError(
                403,
                "forbidden",
                f"approverAssignment requires the {ADVANCED_ENTITLEMENT} entitlement, which "
                f"application {token.app.client_id} does not have",
            )
        changes: dict[str, Any] = {}
        if "displayName" in body:
            changes["displayName"] = v.string(body["displayName"], "displayName")
        if "dueDate" in body:
            due = body["dueDate"]
            changes["dueDate"] = (
                None if due is None else iso(v.date_time_us(due, "dueDate") // 1000)
            )
        if "status" in body:
            status = body["status"]
            if status not in SETTABLE_STATUSES:
                raise bad_request(
                    f"status {json.dumps(status)} cannot be set; settable statuses: "
                    + ", ".join(SETTABLE_STATUSES)
                )
            changes["status"] = status
        for field in ("ownerAssignment", "approverAssignment"):
            if field in body:
                changes[field] = actor(body[field], field)
        if "metadata" in body:
            entries = v.object_list(body["metadata"], "metadata")
            for index, entry in enumerate(entries):
                if set(entry) != {"key", "value"} or not all(
                    isinstance(entry[k], str) for k in entry
                ):
                    raise bad_request(f"metadata[{index}] must be {{key: string, value: string}}")
            changes["metadata"] = [{"key": e["key"], "value": e["value"]} for e in entries]
        if "tagAndCategoryIds" in body:
            pairs = v.tag_refs(body["tagAndCategoryIds"], "tagAndCategoryIds")
            v.no_duplicates(
                body["tagAndCategoryIds"],
                "tagAndCategoryIds",
                key=lambda e: (e["categoryId"], e["tagId"]),
            )
            for category_id, tag_id in pairs:
                check_tag(category_id, tag_id, "tagAndCategoryIds")
            changes["tagAndCategoryIds"] = [{"categoryId": c, "tagId": t} for c, t in pairs]
        for field, value in changes.items():
            if field == "status":
                continue
            if value is None:
                questionnaire.pop(field, None)
            else:
                questionnaire[field] = value
        now = iso(tier.now_ms())
        if "status" in changes:
            questionnaire["status"] = changes["status"]
            questionnaire["statusLog"].insert(0, status_entry(token, changes["status"], None, now))
        questionnaire["updatedDate"] = now
        stats.write_counts["questionnaire_patch"][questionnaireId] += 1
        audit(token, "QUESTIONNAIRE_UPDATED", [{"id": questionnaireId, "type": "Questionnaire"}])
        return json_response(questionnaire)

    @router.post("/v1/customer-trust/questionnaires/{questionnaireId}/approve")
    async def approve_questionnaire(request: Request, questionnaireId: str) -> Response:
        token = _token(request)
        questionnaire = ds.questionnaires.get(questionnaireId)
        if questionnaire is None:
            raise not_found("questionnaire", questionnaireId)
        body = await v.json_object(request)
        v.only_fields(body, ("statusChangeMessage",))
        message = None  # the schema types it string: absent is fine, null is not
        if "statusChangeMessage" in body:
            message = v.string(body["statusChangeMessage"], "statusChangeMessage", empty=True)
        now = iso(tier.now_ms())
        questionnaire["status"] = "APPROVED"
        questionnaire["statusLog"].insert(0, status_entry(token, "APPROVED", message, now))
        questionnaire["updatedDate"] = now
        questionnaire["completedDate"] = now
        stats.write_counts["questionnaire_approve"][questionnaireId] += 1
        audit(token, "QUESTIONNAIRE_APPROVED", [{"id": questionnaireId, "type": "Questionnaire"}])
        return json_response(questionnaire)

    # ------------------------------------------------------------------ accounts
    def account_tags(value: Any) -> dict[str, list[str]]:
        """``tagsByCategory`` checked whole: known tags of their category, no repeats.

        A category listed twice would make the replacement order-dependent and a tag listed
        twice means nothing in a set of tags, so both are 400s (see the README).
        """
        entries = v.object_list(value, "tagsByCategory")
        for index, entry in enumerate(entries):
            category_id, tag_ids = entry.get("categoryId"), entry.get("tagIds")
            if (
                set(entry) != {"categoryId", "tagIds"}
                or not isinstance(category_id, str)
                or not isinstance(tag_ids, list)
                or not all(isinstance(t, str) for t in tag_ids)
            ):
                raise bad_request(
                    f"tagsByCategory[{index}] must be {{categoryId: string, tagIds: string[]}}"
                )
            if category_id not in ds.tags:
                raise bad_request(f"tagsByCategory[{index}]: unknown tag category {category_id!r}")
            v.no_duplicates(tag_ids, f"tagsByCategory[{index}].tagIds")
            for tag_id in tag_ids:
                check_tag(category_id, tag_id, f"tagsByCategory[{index}]")
        v.no_duplicates(entries, "tagsByCategory", key=lambda entry: entry["categoryId"])
        return {entry["categoryId"]: list(entry["tagIds"]) for entry in entries}

    @router.patch("/v1/customer-trust/accounts/{accountId}")
    async def update_account(request: Request, accountId: str) -> Response:
        token = _token(request)
        account = ds.accounts.get(accountId)
        if account is None:
            raise not_found("customer-trust account", accountId)
        body = await v.json_object(request)
        v.only_fields(body, ACCOUNT_FIELDS)
        name = v.string(body["name"], "name") if "name" in body else None
        domain = None
        if "emailDomain" in body:
            domain = v.string(body["emailDomain"], "emailDomain").strip().lower()
            if "@" in domain or "." not in domain or " " in domain:
                raise bad_request(f"emailDomain {body['emailDomain']!r} is not a domain name")
        fields = None
        if "customFields" in body:
            fields = v.object_list(body["customFields"], "customFields")
            for index, entry in enumerate(fields):
                value = entry.get("value")
                ok_value = isinstance(value, str) or (
                    isinstance(value, list) and all(isinstance(x, str) for x in value)
                )
                if (
                    set(entry) != {"label", "value"}
                    or not isinstance(entry["label"], str)
                    or not ok_value
                ):
                    raise bad_request(
                        f"customFields[{index}] must be {{label: string, value: string | string[]}}"
                    )
        by_category = account_tags(body["tagsByCategory"]) if "tagsByCategory" in body else None
        if name is not None:
            account["name"] = name
        if domain is not None:
            account["emailDomain"] = domain
        if fields is not None:
            current = {f["label"]: f for f in account["customFields"]}
            for entry in fields:
                current[entry["label"]] = {"label": entry["label"], "value": entry["value"]}
            account["customFields"] = list(current.values())
        if by_category is not None:
            merged = {e["categoryId"]: e["tagIds"] for e in account["tagsByCategory"]}
            merged.update(by_category)
            account["tagsByCategory"] = [
                {"categoryId": c, "tagIds": t} for c, t in merged.items() if t
            ]
        account["updatedDate"] = iso(tier.now_ms())
        stats.write_counts["account_patch"][accountId] += 1
        audit(token, "ACCOUNT_UPDATED", [{"id": accountId, "type": "CustomerTrustAccount"}])
        return json_response(account)

    # ------------------------------------------------------------------ vendors
    @router.post("/v1/discovered-vendors/{discoveredVendorId}/add-to-managed")
    async def add_to_managed(request: Request, discoveredVendorId: str) -> Response:
        token = _token(request)
        index = ds.discovered_index.get(discoveredVendorId)
        if index is None:
            raise not_found("discovered vendor", discoveredVendorId)
        vendor = ds.managed.get(discoveredVendorId)
        if vendor is None:
            vendor = _managed_vendor(ds.new_id(), ds.discovered[index])
            ds.managed[discoveredVendorId] = vendor
            audit(
                token,
                "VENDOR_ADDED_TO_MANAGED",
                [
                    {"id": discoveredVendorId, "type": "DiscoveredVendor"},
                    {"id": vendor["id"], "type": "Vendor"},
                ],
            )
        stats.write_counts["add_to_managed"][discoveredVendorId] += 1
        return json_response(vendor)

    # ------------------------------------------------------------------ documents
    @router.post("/v1/documents/{documentId}/links")
    async def create_document_link(request: Request, documentId: str) -> Response:
        token = _token(request)
        if documentId not in ds.documents:
            raise not_found("document", documentId)
        body = await v.json_object(request)
        v.only_fields(body, LINK_FIELDS)
        for required in ("url", "title"):
            if required not in body:
                raise bad_request(f"{required} is required")
        url = v.string(body["url"], "url")
        if not url.startswith(("http://", "https://")):
            raise bad_request(f"url {url!r} is not an http(s) URL")
        title = v.string(body["title"], "title")
        description = body.get("description")
        if description is not None:
            v.string(description, "description", empty=True)
        effective = body.get("effectiveDate")
        effective_iso = (
            None if effective is None else iso(v.date_time_us(effective, "effectiveDate") // 1000)
        )
        link: dict[str, Any] = {
            "id": ds.new_id(),
            "creationDate": iso(tier.now_ms()),
            "effectiveDate": effective_iso,
            "title": title,
            "url": url,
            "description": description or "",
        }
        ds.links[documentId].append(link)
        stats.write_counts["document_link"][f"{documentId} {url}"] += 1
        audit(
            token,
            "DOCUMENT_LINK_CREATED",
            [
                {"id": documentId, "type": "Document"},
                {"id": str(link["id"]), "type": "DocumentLink"},
            ],
        )
        return json_response(link, status=201)

    # ------------------------------------------------------------------ groups
    @router.post("/v1/groups/{groupId}/add-people")
    async def add_people(request: Request, groupId: str) -> Response:
        token = _token(request)
        if groupId not in ds.groups:
            raise not_found("group", groupId)
        body = await v.json_object(request)
        updates = body.get("updates")
        if not isinstance(updates, list) or not 1 <= len(updates) <= MAX_GROUP_UPDATES:
            count = len(updates) if isinstance(updates, list) else "no"
            raise bad_request(
                f"updates must be an array of 1 to 100 {{id}} objects, got {count} items"
            )
        for index, update in enumerate(updates):
            if not isinstance(update, dict) or not isinstance(update.get("id"), str):
                raise bad_request(
                    f"updates[{index}] must be {{id: string}}, got {json.dumps(update)}"
                )
        members = ds.members[groupId]
        counts = stats.group_add_counts[groupId]
        results: list[dict[str, str]] = []
        added: list[dict[str, str]] = []
        for update in updates:
            person_id = update["id"]
            if person_id not in ds.people_index:
                results.append(
                    {"id": person_id, "status": "ERROR", "message": f"person {person_id} not found"}
                )
                continue
            members.add(person_id)
            counts[person_id] += 1
            results.append({"id": person_id, "status": "SUCCESS"})
            added.append({"id": person_id, "type": "Person"})
        if added:
            audit(token, "GROUP_PEOPLE_ADDED", [{"id": groupId, "type": "Group"}, *added])
        return json_response({"results": results})

    # ------------------------------------------------------------------ connector resources
    def connector(rows_by_resource: dict[str, list[dict[str, Any]]], request: Request) -> Response:
        resource_id = request.query_params.get("resourceId")
        if not resource_id:
            raise bad_request("resourceId is required")
        rows = rows_by_resource.get(resource_id)
        if rows is None:
            raise not_found("resource", resource_id)
        return json_response({"resources": rows})

    @router.get("/v1/resources/package_vulnerability_connectors")
    async def package_vulnerabilities(request: Request) -> Response:
        return connector(ds.package_vulnerabilities, request)

    @router.get("/v1/resources/user_security_training_status")
    async def security_training(request: Request) -> Response:
        return connector(ds.security_training, request)

    # ------------------------------------------------------------------ event log
    @router.get("/v1/event-logs")
    async def list_event_logs(request: Request) -> Response:
        size = page_size(request.query_params.get("pageSize"))
        start_us = v.query_timestamp(request, "startDate")
        start = 0 if start_us is None else ds.first_event_at_or_after(start_us)
        page = paginate(
            "events",
            ds.events,
            size=size,
            cursor=request.query_params.get("pageCursor"),
            start=start,
            render=lambda entry: entry,
        )
        return json_response(page)

    return router


_HEADQUARTERS = ("USA", "DEU", "GBR", "FRA", "CAN", "IRL", "NLD", "SWE")


def _managed_vendor(vendor_id: str, discovered: dict[str, Any]) -> dict[str, Any]:
    """A new managed-vendor record: what the discovery knew, the rest unset.

    Every key is present except ``linkedTaskTrackerTaskProcurementRequest``, which the
    specification sends only when a procurement request is linked (never as ``null``); a new
    vendor has none linked, so the key is left out.
    """
    hq = _HEADQUARTERS[sum(map(ord, discovered["id"])) % len(_HEADQUARTERS)]
    return {
        "id": vendor_id,
        "name": discovered["name"],
        "websiteUrl": discovered["websiteUrl"],
        "accountManagerName": None,
        "accountManagerEmail": None,
        "servicesProvided": None,
        "additionalNotes": f"Discovered through {discovered['source']}",
        "securityOwnerUserId": None,
        "businessOwnerUserId": None,
        "contractStartDate": None,
        "contractRenewalDate": None,
        "contractTerminationDate": None,
        "nextSecurityReviewDueDate": None,
        "lastSecurityReviewCompletionDate": None,
        "isVisibleToAuditors": False,
        "isRiskAutoScored": True,
        "riskAttributeIds": [],
        "category": {"displayName": "Uncategorized"},
        "authDetails": {
            "method": None,
            "passwordMFA": None,
            "passwordRequiresNumber": None,
            "passwordRequiresSymbol": None,
            "passwordMinimumLength": None,
        },
        "status": "MANAGED",
        "inherentRiskLevel": "UNSCORED",
        "residualRiskLevel": "UNSCORED",
        "vendorHeadquarters": hq,
        "contractAmount": {"amount": 0, "currency": "USD"},
        "customFields": [],
        "latestDecision": None,
    }
