"""The sandbox's own control API under ``/_sandbox/``.

On loopback it has no auth (a test tool). A sandbox may listen beyond loopback only with a
control token (``--control-token`` or ``SANDBOX_CONTROL_TOKEN``); then every ``/_sandbox/`` call,
health included, needs ``Authorization: Bearer <token>`` (``ControlTokenMiddleware``), since the
control API can list every credential the sandbox issued.

Stats, faults, token outages and injected events act on the tier of the port they are called
on; reset, the clock, the application list, secret rotation, revocation and consent approval
act on the whole sandbox (applications know their tier).
"""

from __future__ import annotations

import hmac
import math
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.responses import Response

from sandbox import validation as v
from sandbox.errors import ApiError, OAuthError, bad_request, json_response
from sandbox.faults import FaultRule, Outage
from sandbox.middleware import RouteTable
from sandbox.state import Sandbox, Tier
from sandbox.times import DAY_MS, iso

EVENT_KINDS = (
    "vendor_discovered",
    "questionnaire_ready_for_review",
    "person_joined",
    "kb_item_expiring",
)
SYSTEM_ACTOR = {"id": "system", "type": "SYSTEM"}


@dataclass
class IssuedCredentials:
    """Every access token, refresh token and client secret this sandbox has handed out since it
    started, kept across resets, so a test can scan logs and databases for the literal values
    (``GET /_sandbox/issued-credentials``)."""

    access_tokens: set[str] = field(default_factory=set)
    refresh_tokens: set[str] = field(default_factory=set)
    client_secrets: set[str] = field(default_factory=set)

    def harvest(self, sandbox: Sandbox) -> None:
        for tier in sandbox.tiers.values():
            self.access_tokens.update(tier.tokens.access)
            self.refresh_tokens.update(tier.tokens.refresh_tokens)
        self.client_secrets.update(app.client_secret for app in sandbox.registry.apps.values())

    def public(self) -> dict[str, list[str]]:
        return {
            "access_tokens": sorted(self.access_tokens),
            "refresh_tokens": sorted(self.refresh_tokens),
            "client_secrets": sorted(self.client_secrets),
        }


class ControlTokenMiddleware:
    """401 for a ``/_sandbox/`` call without ``Authorization: Bearer <token>`` (plain ASGI)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (path == "/_sandbox" or path.startswith("/_sandbox/")):
            given = next(
                (bytes(value) for key, value in scope["headers"] if key == b"authorization"), b""
            )
            if not hmac.compare_digest(given, self._expected):
                response = json_response(
                    {
                        "error": "unauthorized",
                        "message": "the control API needs Authorization: Bearer <control token>",
                    },
                    401,
                    {"WWW-Authenticate": 'Bearer realm="_sandbox"'},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


_issued: weakref.WeakKeyDictionary[Sandbox, IssuedCredentials] = weakref.WeakKeyDictionary()


def issued_credentials(sandbox: Sandbox) -> IssuedCredentials:
    return _issued.setdefault(sandbox, IssuedCredentials())


def control_router(sandbox: Sandbox, tier: Tier, table: Callable[[], RouteTable]) -> APIRouter:
    router = APIRouter(prefix="/_sandbox")

    def app_tier(client_id: Any) -> Tier:
        if not isinstance(client_id, str) or sandbox.tier_of(client_id) is None:
            raise ApiError(404, "not_found", f"application {client_id!r} not found")
        found = sandbox.tier_of(client_id)
        assert found is not None
        return found

    @router.get("/health")
    async def health() -> Response:
        return json_response({"status": "ok", "tier": tier.name, "now": iso(tier.now_ms())})

    @router.get("/stats")
    async def stats() -> Response:
        return json_response(tier.stats.snapshot())

    @router.post("/reset")
    async def reset() -> Response:
        issued_credentials(sandbox).harvest(sandbox)  # before the reset forgets them
        sandbox.reset()
        return json_response({"status": "reset"})

    @router.get("/issued-credentials")
    async def issued() -> Response:
        record = issued_credentials(sandbox)
        record.harvest(sandbox)
        return json_response(record.public())

    @router.get("/apps")
    async def apps() -> Response:
        return json_response([app.public() for app in sandbox.registry.apps.values()])

    @router.post("/apps/{client_id}/rotate-secret")
    async def rotate_secret(client_id: str) -> Response:
        owner = app_tier(client_id)
        app = sandbox.registry.rotate_secret(client_id)
        revoked = owner.tokens.secret_rotated(app)
        issued_credentials(sandbox).harvest(sandbox)
        return json_response(
            {"client_id": client_id, "client_secret": app.client_secret, "revoked_tokens": revoked}
        )

    @router.get("/seed")
    async def seed() -> Response:
        ds = tier.dataset
        return json_response(
            {
                "tier": tier.name,
                "groups": [g["id"] for g in ds.group_list],
                "people": [p["id"] for p in ds.people],
                "discovered_vendors": [d["id"] for d in ds.discovered],
                "questionnaires": list(ds.questionnaire_order),
                "accounts": list(ds.accounts),
                "documents": [d["id"] for d in ds.document_list],
                "tag_categories": [c["id"] for c in ds.tag_categories],
                "tags": {cat: [t["id"] for t in tags] for cat, tags in ds.tags.items()},
                "package_vulnerability_resources": list(ds.package_vulnerabilities),
                "user_security_training_resources": list(ds.security_training),
                "group_members": {g: sorted(m) for g, m in ds.members.items()},
                "knowledge_base_resources": len(ds.kb),
                "answer_library_entries": len(ds.answers),
                "event_logs": len(ds.events),
            }
        )

    # ------------------------------------------------------------------ faults
    @router.get("/faults")
    async def get_faults() -> Response:
        return json_response(tier.faults.describe())

    @router.post("/faults")
    async def set_fault(request: Request) -> Response:
        body = await v.json_object(request)
        v.only_fields(body, tuple(FaultRule.__dataclass_fields__))
        try:
            rule = FaultRule(**body)
            rule.validate(table().keys)
        except (TypeError, ValueError) as exc:
            raise bad_request(str(exc)) from None
        tier.faults.set(rule)
        return json_response(asdict(rule))

    @router.delete("/faults")
    async def clear_faults() -> Response:
        tier.faults.clear()
        return json_response(tier.faults.describe())

    @router.post("/token-outage")
    async def token_outage(request: Request) -> Response:
        body = await v.json_object(request, required=False)
        v.only_fields(body, ("status", "count", "seconds"))
        status = body.get("status", 503)
        if not isinstance(status, int) or not 400 <= status <= 599:
            raise bad_request(f"status {status!r} is not an HTTP error status")
        count, seconds = body.get("count"), body.get("seconds")
        if count is not None and (not isinstance(count, int) or count < 0):
            raise bad_request(f"count {count!r} is not a non-negative integer")
        if seconds is not None and (not isinstance(seconds, int | float) or seconds < 0):
            raise bad_request(f"seconds {seconds!r} is not a non-negative number")
        until = None if seconds is None else tier.clock.now() + seconds
        tier.faults.outage = Outage(status=status, count=count, until=until)
        return json_response(tier.faults.describe())

    @router.delete("/token-outage")
    async def end_token_outage() -> Response:
        tier.faults.outage = None
        return json_response(tier.faults.describe())

    # ------------------------------------------------------------------ tokens and clock
    @router.post("/revoke")
    async def revoke(request: Request) -> Response:
        body = await v.json_object(request)
        owner = app_tier(body.get("client_id"))
        revoked = owner.tokens.revoke_current(body["client_id"], body.get("source_id"))
        return json_response({"revoked": revoked})

    @router.get("/clock")
    async def clock() -> Response:
        return json_response({"now": iso(tier.now_ms()), "offset_seconds": sandbox.clock.offset})

    @router.post("/clock/advance")
    async def advance_clock(request: Request) -> Response:
        body = await v.json_object(request)
        seconds = body.get("seconds")
        if (
            not isinstance(seconds, int | float)
            or isinstance(seconds, bool)
            or seconds < 0
            or not math.isfinite(seconds)
        ):
            raise bad_request(f"seconds {seconds!r} is not a non-negative number")
        sandbox.clock.advance(float(seconds))
        return json_response({"now": iso(tier.now_ms()), "offset_seconds": sandbox.clock.offset})

    @router.post("/authorize/approve")
    async def approve_authorization(request: Request) -> Response:
        body = await v.json_object(request)
        owner = app_tier(body.get("client_id"))
        redirect_uri = body.get("redirect_uri")
        app = sandbox.registry.get(body["client_id"])
        assert app is not None
        if redirect_uri is None and app.redirect_uris:
            redirect_uri = app.redirect_uris[0]
        state = str(body.get("state") or "")
        try:
            code = owner.tokens.create_code(
                body["client_id"],
                str(redirect_uri),
                body.get("scope"),
                str(body.get("source_id") or ""),
            )
        except OAuthError as exc:
            raise ApiError(400, exc.code, exc.description) from None
        separator = "&" if "?" in code.redirect_uri else "?"
        redirect_url = (
            f"{code.redirect_uri}{separator}{urlencode({'code': code.value, 'state': state})}"
        )
        return json_response({"code": code.value, "state": state, "redirect_url": redirect_url})

    # ------------------------------------------------------------------ domain events
    @router.post("/events")
    async def inject_event(request: Request) -> Response:
        body = await v.json_object(request)
        kind = body.get("kind")
        handler = _EVENT_HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is None:
            raise bad_request(f"kind {kind!r} is not one of {', '.join(EVENT_KINDS)}")
        return json_response(handler(tier, body))

    return router


def _vendor_discovered(tier: Tier, body: dict[str, Any]) -> dict[str, Any]:
    name = body.get("name")
    vendor = tier.dataset.add_discovered_vendor(
        v.string(name, "name") if name is not None else None
    )
    entry = tier.dataset.record_event(
        tier.now_ms(),
        SYSTEM_ACTOR,
        "VENDOR_DISCOVERED",
        [{"id": vendor["id"], "type": "DiscoveredVendor"}],
    )
    return {"kind": "vendor_discovered", "id": vendor["id"], "event_log_id": entry["id"]}


def _questionnaire_ready(tier: Tier, body: dict[str, Any]) -> dict[str, Any]:
    ds = tier.dataset
    qid = body.get("questionnaire_id") or body.get("id")
    now = iso(tier.now_ms())
    if qid is None:
        qid = ds.new_id()
        ds.questionnaire_order.append(qid)
        ds.questionnaires[qid] = {
            "id": qid,
            "displayName": str(
                body.get("display_name") or f"Security review {len(ds.questionnaire_order)}"
            ),
            "type": "SPREADSHEET",
            "status": "IN_PROGRESS",
            "statusLog": [],
            "tagAndCategoryIds": [],
            "createdDate": now,
            "updatedDate": now,
        }
    questionnaire = ds.questionnaires.get(qid)
    if questionnaire is None:
        raise ApiError(404, "not_found", f"questionnaire {qid} not found")
    questionnaire["status"] = "READY_FOR_REVIEW"
    questionnaire["updatedDate"] = now
    questionnaire["statusLog"].insert(
        0,
        {
            "updatedBy": {"id": "system", "displayName": "Questionnaire automation", "email": None},
            "updatedAt": now,
            "status": "READY_FOR_REVIEW",
            "message": "All questions have draft answers",
        },
    )
    entry = ds.record_event(
        tier.now_ms(),
        SYSTEM_ACTOR,
        "QUESTIONNAIRE_READY_FOR_REVIEW",
        [{"id": qid, "type": "Questionnaire"}],
    )
    return {"kind": "questionnaire_ready_for_review", "id": qid, "event_log_id": entry["id"]}


def _person_joined(tier: Tier, body: dict[str, Any]) -> dict[str, Any]:
    ds = tier.dataset
    group_id = body.get("group_id")
    if group_id is not None and group_id not in ds.groups:
        raise ApiError(404, "not_found", f"group {group_id} not found")
    person = ds.add_person(body.get("display_name"), body.get("email"))
    targets = [{"id": person["id"], "type": "Person"}]
    if group_id is not None:
        targets.append({"id": group_id, "type": "Group"})
    entry = ds.record_event(tier.now_ms(), SYSTEM_ACTOR, "PERSON_JOINED", targets)
    return {"kind": "person_joined", "id": person["id"], "event_log_id": entry["id"]}


def _kb_item_expiring(tier: Tier, body: dict[str, Any]) -> dict[str, Any]:
    ds = tier.dataset
    resource_id = body.get("resource_id") or body.get("id")
    days = body.get("days", 7)
    if not isinstance(days, int | float) or isinstance(days, bool):
        raise bad_request(f"days {days!r} is not a number")
    if resource_id is None:
        now = tier.now_ms()
        index = next(
            (i for i, item in enumerate(ds.kb) if item.expires is not None and item.expires > now),
            0,
        )
    else:
        found = ds.kb_index.get(resource_id)
        if found is None:
            raise ApiError(404, "not_found", f"knowledge-base resource {resource_id} not found")
        index = found
    item = ds.set_kb_expiry(index, tier.now_ms() + int(days * DAY_MS))
    entry = ds.record_event(
        tier.now_ms(),
        SYSTEM_ACTOR,
        "KB_ITEM_EXPIRING",
        [{"id": item.doc["id"], "type": "KnowledgeBaseResource"}],
    )
    return {
        "kind": "kb_item_expiring",
        "id": item.doc["id"],
        "expirationDate": item.doc["expirationDate"],
        "event_log_id": entry["id"],
    }


_EVENT_HANDLERS = {
    "vendor_discovered": _vendor_discovered,
    "questionnaire_ready_for_review": _questionnaire_ready,
    "person_joined": _person_joined,
    "kb_item_expiring": _kb_item_expiring,
}
