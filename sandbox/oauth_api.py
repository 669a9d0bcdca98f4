"""The token endpoint, the suspend operation and the browser consent page (§5)."""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from sandbox.errors import OAuthError, json_response, oauth_error_response
from sandbox.state import Tier
from sandbox.tokens import TokenService

NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


def _is_json(request: Request) -> bool:
    content_type = request.headers.get("content-type", "")
    return content_type.split(";")[0].strip().lower() == "application/json"


def _json_or_none(raw: bytes) -> Any:
    """The parsed body, or None when it is not JSON at all."""
    try:
        return json.loads(raw)
    except ValueError:
        return None


def claimed_client_id(raw: bytes, body: Any) -> str | None:
    """The client_id a token-endpoint body names, whatever its encoding; None if none can be read.

    ``body`` is ``raw`` parsed as JSON (None if it is not JSON). Only used to charge the call to
    an application's rate budget, so it reads a JSON object or a form-encoded body alike (a
    form-encoded call is refused, but it was still a call by that application).
    """
    if isinstance(body, dict):
        client_id = body.get("client_id")
    else:
        client_id = (parse_qs(raw.decode("latin-1")).get("client_id") or [None])[0]
    return client_id if isinstance(client_id, str) and client_id else None


async def _read_token_request(request: Request, tier: Tier) -> dict[str, Any]:
    """The JSON body of a token-endpoint or suspend call; OAuthError if unusable.

    Every call counts toward the 5-per-minute budget (§7, §8 count calls), malformed ones
    included: it is charged to the client_id it names, or, when none can be read, to the
    shared budget of unattributable calls (see :meth:`TokenService.consume_budget`). Only an
    injected outage answers first, as a failure in front of the service would.
    """
    raw = await request.body()
    body = _json_or_none(raw)
    client_id = claimed_client_id(raw, body)
    tier.stats.token_requests[client_id or "<none>"] += 1
    outage = tier.faults.token_outage(tier.clock.now())
    if outage is not None:
        raise OAuthError(
            outage,
            "temporarily_unavailable",
            "token endpoint outage (injected)",
            {"Retry-After": "1"},
        )
    tier.tokens.consume_budget(client_id)
    if not _is_json(request):
        raise OAuthError(
            400,
            "invalid_request",
            "the token endpoint accepts only Content-Type: application/json bodies",
        )
    if not isinstance(body, dict):
        raise OAuthError(400, "invalid_request", "the request body is not a JSON object")
    if not isinstance(body.get("client_id"), str) or not body["client_id"]:
        raise OAuthError(400, "invalid_request", "client_id is required")
    return body


def oauth_router(tier: Tier) -> APIRouter:
    router = APIRouter()
    tokens: TokenService = tier.tokens

    @router.post("/oauth/token")
    async def token_endpoint(request: Request) -> Response:
        try:
            body = await _read_token_request(request, tier)
            app = tokens.authenticate_client(body["client_id"], body.get("client_secret"))
            grant_type = body.get("grant_type")
            if grant_type == "client_credentials":
                result = tokens.client_credentials(app, body)
            elif grant_type == "authorization_code":
                result = tokens.authorization_code(app, body)
            elif grant_type == "refresh_token":
                result = tokens.refresh(app, body)
            elif grant_type is None:
                raise OAuthError(400, "invalid_request", "grant_type is required")
            else:
                raise OAuthError(
                    400,
                    "unsupported_grant_type",
                    f"grant_type {grant_type!r} is not client_credentials, authorization_code "
                    "or refresh_token",
                )
        except OAuthError as exc:
            return oauth_error_response(exc)
        return json_response(result, headers=NO_STORE)

    @router.post("/v1/oauth/token/suspend")
    async def suspend(request: Request) -> Response:
        try:
            body = await _read_token_request(request, tier)
            app = tokens.authenticate_client(body["client_id"], body.get("client_secret"))
            result = tokens.suspend(app, body)
        except OAuthError as exc:
            return oauth_error_response(exc)
        return json_response(result, headers=NO_STORE)

    @router.get("/oauth/authorize")
    async def authorize_page(request: Request) -> Response:
        params = {key: request.query_params.get(key, "") for key in _AUTHORIZE_FIELDS}
        problem = _check_authorization(tokens, params)
        if problem is not None:
            return problem
        return HTMLResponse(
            _consent_html(params, tier.sandbox.registry.apps[params["client_id"]].name)
        )

    @router.post("/oauth/authorize")
    async def authorize_decision(request: Request) -> Response:
        form = parse_qs((await request.body()).decode("utf-8"))
        params = {key: (form.get(key) or [""])[0] for key in (*_AUTHORIZE_FIELDS, "decision")}
        problem = _check_authorization(tokens, params)
        if problem is not None:
            return problem
        if params["decision"] != "approve":
            return _redirect(params["redirect_uri"], error="access_denied", state=params["state"])
        code = tokens.create_code(
            params["client_id"], params["redirect_uri"], params["scope"], params["source_id"]
        )
        return _redirect(params["redirect_uri"], code=code.value, state=params["state"])

    return router


_AUTHORIZE_FIELDS = ("client_id", "scope", "state", "redirect_uri", "source_id", "response_type")


def _redirect(redirect_uri: str, **query: str) -> Response:
    separator = "&" if "?" in redirect_uri else "?"
    return RedirectResponse(f"{redirect_uri}{separator}{urlencode(query)}", status_code=303)


def _check_authorization(tokens: TokenService, params: dict[str, str]) -> Response | None:
    """None if the request may be shown/approved; otherwise the error page or redirect.

    As in OAuth 2.0, problems with the client or redirect_uri are shown on the page (never
    redirected to an unverified address); other problems go back to the redirect_uri.
    """
    try:
        tokens.validate_authorization(
            params["client_id"],
            params["redirect_uri"],
            params["scope"] or None,
            params["source_id"],
        )
    except OAuthError as exc:
        if (
            exc.code in ("invalid_client", "unauthorized_client")
            or "redirect_uri" in exc.description
        ):
            return HTMLResponse(_error_html(exc.description), status_code=400)
        return _redirect(params["redirect_uri"], error=exc.code, state=params["state"])
    if params["response_type"] != "code":
        return _redirect(
            params["redirect_uri"], error="unsupported_response_type", state=params["state"]
        )
    return None


def _consent_html(params: dict[str, str], app_name: str) -> str:
    hidden = "\n".join(
        f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in params.items()
    )
    scopes = "".join(f"<li><code>{escape(s)}</code></li>" for s in params["scope"].split())
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Authorize {escape(app_name)}</title></head>
<body>
<h1>Authorize {escape(app_name)}</h1>
<p>The application <strong>{escape(app_name)}</strong> asks for access to your tenant
for the account <strong>{escape(params["source_id"])}</strong> with these scopes:</p>
<ul>{scopes}</ul>
<form method="post" action="/oauth/authorize">
{hidden}
<button type="submit" name="decision" value="approve">Approve</button>
<button type="submit" name="decision" value="deny">Deny</button>
</form>
<p><small>Compliance API sandbox: no real tenant is involved.</small></p>
</body></html>"""


def _error_html(message: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Authorization error</title>"
        f"</head><body><h1>Authorization error</h1><p>{escape(message)}</p></body></html>"
    )
