"""Token endpoint, consent, refresh, suspend, rotation and tiers (§5, §7, §8)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from jsonschema import Draft202012Validator

from sandbox.apps import DEMO_GOV_MANAGE, DEMO_MANAGE
from tests.fixtures.sandbox_api import (
    AUDITOR,
    GOV,
    INTEGRATION_SCOPE,
    MANAGE,
    MANAGE_BASIC,
    MANAGE_SCOPE,
    PRIVATE,
    PUBLIC,
    PUBLIC_REDIRECT,
    Env,
)
from tests.sandbox import schemas

EVENTS = "GET /v1/event-logs"
VULNS = "GET /v1/resources/package_vulnerability_connectors"
TOKEN_PATH = "/oauth/token"
SUSPEND_PATH = "/v1/oauth/token/suspend"
JSON = {"Content-Type": "application/json"}
_MANAGE_GRANT = {
    "client_id": MANAGE[0],
    "client_secret": MANAGE[1],
    "scope": MANAGE_SCOPE,
    "grant_type": "client_credentials",
}
# Token calls by demo-manage that the endpoint refuses (httpx.post keyword arguments).
MALFORMED_BY_MANAGE: dict[str, dict[str, Any]] = {
    "form-encoded": {"data": _MANAGE_GRANT},
    "json sent as text/plain": {
        "content": httpx.Request("POST", "/", json=_MANAGE_GRANT).content,
        "headers": {"Content-Type": "text/plain"},
    },
    "wrong secret": {"json": {**_MANAGE_GRANT, "client_secret": "wrong"}},
    "unknown grant type": {"json": {**_MANAGE_GRANT, "grant_type": "password"}},
    "missing scope": {"json": {k: v for k, v in _MANAGE_GRANT.items() if k != "scope"}},
}
# Token calls from which no client_id can be read.
UNATTRIBUTABLE: dict[str, dict[str, Any]] = {
    "no body": {"headers": JSON},
    "no body, no content type": {},
    "invalid json": {"content": json.dumps({"client_id": MANAGE[0]})[:-1], "headers": JSON},
    "json array": {"json": [MANAGE[0], MANAGE[1]]},
    "no client_id": {"json": {k: v for k, v in _MANAGE_GRANT.items() if k != "client_id"}},
    "client_id not a string": {"json": {**_MANAGE_GRANT, "client_id": 7}},
}


def _public_grant(env: Env, source_id: str = "source-1") -> dict[str, str]:
    code = env.control.approve_authorization(source_id=source_id)["code"]
    response = env.oauth.exchange(code, source_id=source_id)
    assert response.status_code == 200, response.text
    return dict(response.json())


def _vulns(env: Env, token: str) -> int:
    resource = env.seed["package_vulnerability_resources"][0]
    return env.api_for(token).call(VULNS, params={"resourceId": resource}).status_code


def test_client_credentials_grant_returns_a_bearer_token_for_3599_seconds(env: Env) -> None:
    response = env.oauth.client_credentials()
    assert response.status_code == 200
    body = response.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3599
    assert "refresh_token" not in body
    assert response.headers["cache-control"] == "no-store"
    assert env.api_for(body["access_token"]).call(EVENTS).status_code == 200


def test_form_encoded_token_request_is_rejected_with_invalid_request(env: Env) -> None:
    response = env.http.post(
        "/oauth/token",
        data={
            "client_id": MANAGE[0],
            "client_secret": MANAGE[1],
            "grant_type": "client_credentials",
            "scope": MANAGE_SCOPE,
        },
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_request"
    assert env.stats()["token_mints"] == {}


@pytest.mark.parametrize(
    "client_id, secret",
    [(MANAGE[0], "wrong-secret"), ("no-such-app", "whatever"), (MANAGE[0], None)],
)
def test_wrong_client_id_or_secret_is_invalid_client(env: Env, client_id: str, secret: str) -> None:
    response = env.oauth.client_credentials((client_id, secret))
    assert response.status_code == 401
    assert response.json()["error"] == "invalid_client"


@pytest.mark.parametrize(
    "app, scope",
    [
        (MANAGE, "auditor-api.audit:read"),
        (PRIVATE, "service-api.all:read"),
        (AUDITOR, "connectors.self:read-resource"),
        (MANAGE, "service-api.all:read service-api.everything:admin"),
    ],
)
def test_scope_not_allowed_for_the_application_type_is_invalid_scope(
    env: Env, app: tuple[str, str], scope: str
) -> None:
    response = env.oauth.client_credentials(app, scope)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_scope"


@pytest.mark.parametrize(
    "app, scope",
    [
        (MANAGE, "service-api.all:read service-api.all:write service-api.documents:upload"),
        (MANAGE, "vanta-api.all:read vanta-api.vendors:write"),
        (PRIVATE, INTEGRATION_SCOPE + " connectors.self:write-resource"),
        (AUDITOR, "auditor-api.audit:read auditor-api.auditor:write"),
    ],
)
def test_scopes_of_section_5_7_are_granted(env: Env, app: tuple[str, str], scope: str) -> None:
    assert env.oauth.client_credentials(app, scope).status_code == 200


def test_missing_scope_and_unknown_grant_type_are_invalid_requests(env: Env) -> None:
    base = {"client_id": MANAGE[0], "client_secret": MANAGE[1]}
    missing = env.oauth.post({**base, "grant_type": "client_credentials"})
    assert (missing.status_code, missing.json()["error"]) == (400, "invalid_request")
    unknown = env.oauth.post({**base, "grant_type": "password", "scope": MANAGE_SCOPE})
    assert (unknown.status_code, unknown.json()["error"]) == (400, "unsupported_grant_type")
    wrong = env.oauth.client_credentials(PUBLIC, INTEGRATION_SCOPE)
    assert (wrong.status_code, wrong.json()["error"]) == (400, "unauthorized_client")


def test_sixth_token_request_in_a_minute_gets_429_with_retry_after(env: Env) -> None:
    for _ in range(5):
        assert env.oauth.client_credentials().status_code == 200
    env.control.advance_clock(20)
    limited = env.oauth.client_credentials()
    assert limited.status_code == 429
    retry_after = int(limited.headers["Retry-After"])
    assert 39 <= retry_after <= 40
    # Another application has its own budget.
    assert env.oauth.client_credentials(MANAGE_BASIC, MANAGE_SCOPE).status_code == 200
    env.control.advance_clock(retry_after)
    assert env.oauth.client_credentials().status_code == 200
    assert env.stats()["token_requests"][DEMO_MANAGE.client_id] == 7
    assert env.stats()["token_mints"][DEMO_MANAGE.client_id] == 6


def test_token_budget_is_a_sliding_window(env: Env) -> None:
    for _ in range(3):
        assert env.oauth.client_credentials().status_code == 200
    env.control.advance_clock(30)
    for _ in range(2):
        assert env.oauth.client_credentials().status_code == 200
    assert env.oauth.client_credentials().status_code == 429
    env.control.advance_clock(31)  # the first three leave the window, the last two stay
    for _ in range(3):
        assert env.oauth.client_credentials().status_code == 200
    assert env.oauth.client_credentials().status_code == 429


def test_mint_refresh_and_suspend_share_the_budget(env: Env) -> None:
    grant = _public_grant(env)  # 1
    refreshed = env.oauth.refresh(grant["refresh_token"])  # 2
    assert refreshed.status_code == 200
    assert env.oauth.refresh(refreshed.json()["refresh_token"]).status_code == 200  # 3
    assert env.oauth.suspend(grant["access_token"]).status_code == 200  # 4
    assert env.oauth.exchange(env.control.approve_authorization()["code"]).status_code == 200  # 5
    limited = env.oauth.suspend("anything")
    assert limited.status_code == 429
    assert "Retry-After" in limited.headers


def _assert_rate_limited(response: httpx.Response) -> None:
    """429 with an OAuth 2.0 error body and a Retry-After of at most the 60 s window."""
    assert response.status_code == 429, response.text
    Draft202012Validator(schemas.OAUTH_ERROR_BODY).validate(response.json())
    assert 1 <= int(response.headers["Retry-After"]) <= 60


@pytest.mark.parametrize("kind", sorted(MALFORMED_BY_MANAGE))
def test_malformed_token_requests_count_toward_the_applications_budget(env: Env, kind: str) -> None:
    for _ in range(5):
        refused = env.http.post(TOKEN_PATH, **MALFORMED_BY_MANAGE[kind])
        assert refused.status_code in (400, 401), refused.text
    _assert_rate_limited(env.oauth.client_credentials())
    assert env.oauth.client_credentials(MANAGE_BASIC, MANAGE_SCOPE).status_code == 200
    assert env.stats()["token_requests"][MANAGE[0]] == 6
    assert MANAGE[0] not in env.stats()["token_mints"]


def test_malformed_suspend_calls_count_toward_the_shared_budget(env: Env) -> None:
    grant = _public_grant(env)  # 1
    body = {"token": grant["access_token"], "client_id": PUBLIC[0], "client_secret": PUBLIC[1]}
    for _ in range(4):  # 2-5: form-encoded, refused
        refused = env.http.post(SUSPEND_PATH, data=body)
        assert (refused.status_code, refused.json()["error"]) == (400, "invalid_request")
    _assert_rate_limited(env.oauth.suspend(grant["access_token"]))
    assert _vulns(env, grant["access_token"]) == 200  # the limited suspend did nothing
    _assert_rate_limited(env.oauth.refresh(grant["refresh_token"]))


@pytest.mark.parametrize("path", [TOKEN_PATH, SUSPEND_PATH])
def test_token_calls_without_a_readable_client_id_share_one_budget(env: Env, path: str) -> None:
    for _ in range(5):  # applications' calls do not use up the shared budget...
        assert env.oauth.client_credentials().status_code == 200
    calls = list(UNATTRIBUTABLE.values())
    for kwargs in calls[:5]:
        refused = env.http.post(path, **kwargs)
        assert (refused.status_code, refused.json()["error"]) == (400, "invalid_request")
    _assert_rate_limited(env.http.post(path, **calls[5]))
    # ...and the shared budget's calls are charged to no application.
    assert env.oauth.client_credentials(MANAGE_BASIC, MANAGE_SCOPE).status_code == 200
    assert env.stats()["token_requests"]["<none>"] == 6
    env.control.advance_clock(60)
    assert env.http.post(path, **calls[5]).status_code == 400


def test_new_mint_revokes_the_previous_token(env: Env) -> None:
    first = env.oauth.token()
    second = env.oauth.token()
    old = env.api_for(first).call(EVENTS)
    assert old.status_code == 401
    assert "superseded" in old.json()["message"]
    assert old.headers["www-authenticate"].startswith("Bearer")
    assert env.api_for(second).call(EVENTS).status_code == 200
    assert env.stats()["unauthorized"] == 1


def test_public_apps_have_one_token_per_source_id(env: Env) -> None:
    one = _public_grant(env, "source-1")["access_token"]
    two = _public_grant(env, "source-2")["access_token"]
    assert _vulns(env, one) == 200 and _vulns(env, two) == 200
    newer = _public_grant(env, "source-1")["access_token"]
    assert _vulns(env, one) == 401
    assert _vulns(env, two) == 200 and _vulns(env, newer) == 200


def test_token_expires_after_its_lifetime(env: Env) -> None:
    token = env.oauth.token()
    env.control.advance_clock(3598)
    assert env.api_for(token).call(EVENTS).status_code == 200
    env.control.advance_clock(2)
    expired = env.api_for(token).call(EVENTS)
    assert expired.status_code == 401
    assert "expired" in expired.json()["message"]


@pytest.mark.parametrize("header", [None, "Bearer", "Basic abc", "Bearer not-a-token"])
def test_data_routes_need_a_valid_bearer_token(env: Env, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    response = env.http.get("/v1/event-logs", headers=headers)
    assert response.status_code == 401
    assert set(response.json()) == {"error", "message"}
    assert env.stats()["unauthorized"] == 1


def test_token_without_a_fitting_scope_gets_403(env: Env) -> None:
    read_only = env.oauth.token(MANAGE, "service-api.all:read")
    group = env.seed["groups"][0]
    response = env.api_for(read_only).call(
        "POST /v1/groups/{groupId}/add-people",
        {"groupId": group},
        json={"updates": [{"id": env.seed["people"][0]}]},
    )
    assert response.status_code == 403
    assert response.json()["error"] == "insufficient_scope"
    integration = env.oauth.token(PRIVATE, INTEGRATION_SCOPE)
    assert _vulns(env, integration) == 200
    assert env.api_for(integration).call(EVENTS).status_code == 403
    auditor = env.oauth.token(AUDITOR, "auditor-api.audit:read")
    assert env.api_for(auditor).call(EVENTS).status_code == 200


def test_consent_page_redirects_with_code_and_state(env: Env) -> None:
    query = {
        "client_id": PUBLIC[0],
        "scope": INTEGRATION_SCOPE,
        "state": "xyz-123",
        "redirect_uri": PUBLIC_REDIRECT,
        "source_id": "acct-9",
        "response_type": "code",
    }
    page = env.http.get("/oauth/authorize", params=query)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert 'name="decision" value="approve"' in page.text and "acct-9" in page.text
    approved = env.http.post("/oauth/authorize", data={**query, "decision": "approve"})
    assert approved.status_code == 303
    location = urlsplit(approved.headers["location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == PUBLIC_REDIRECT
    params = parse_qs(location.query)
    assert params["state"] == ["xyz-123"]
    exchanged = env.oauth.exchange(params["code"][0], source_id="acct-9")
    assert exchanged.status_code == 200
    assert {"access_token", "refresh_token"} <= set(exchanged.json())
    denied = env.http.post("/oauth/authorize", data={**query, "decision": "deny"})
    assert parse_qs(urlsplit(denied.headers["location"]).query)["error"] == ["access_denied"]


@pytest.mark.parametrize(
    "change, status",
    [
        ({"redirect_uri": "http://evil.example/cb"}, 400),
        ({"client_id": DEMO_MANAGE.client_id}, 400),
        ({"scope": "service-api.all:read"}, 303),
        ({"response_type": "token"}, 303),
    ],
)
def test_consent_page_rejects_bad_requests(env: Env, change: dict[str, str], status: int) -> None:
    query = {
        "client_id": PUBLIC[0],
        "scope": INTEGRATION_SCOPE,
        "state": "s",
        "redirect_uri": PUBLIC_REDIRECT,
        "source_id": "acct",
        "response_type": "code",
        **change,
    }
    response = env.http.get("/oauth/authorize", params=query)
    assert response.status_code == status
    if status == 303:  # errors after the redirect_uri is verified go back to the client
        assert "error" in parse_qs(urlsplit(response.headers["location"]).query)


def test_authorization_code_is_valid_30_seconds_and_single_use(env: Env) -> None:
    approval = env.control.approve_authorization(state="st")
    assert approval["state"] == "st" and approval["redirect_url"].startswith(PUBLIC_REDIRECT)
    env.control.advance_clock(31)
    late = env.oauth.exchange(approval["code"])
    assert (late.status_code, late.json()["error"]) == (400, "invalid_grant")
    code = env.control.approve_authorization()["code"]
    env.control.advance_clock(29)
    assert env.oauth.exchange(code).status_code == 200
    again = env.oauth.exchange(code)
    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")


def test_refresh_rotates_and_old_refresh_token_works_for_3_hours_after_first_use(
    env: Env,
) -> None:
    grant = _public_grant(env)
    first = env.oauth.refresh(grant["refresh_token"])
    assert first.status_code == 200
    rotated = first.json()
    assert rotated["refresh_token"] != grant["refresh_token"]
    assert _vulns(env, grant["access_token"]) == 401  # the refresh minted a new access token
    env.control.advance_clock(2 * 3600)
    reused = env.oauth.refresh(grant["refresh_token"])
    assert reused.status_code == 200
    env.control.advance_clock(3600 + 1)
    expired = env.oauth.refresh(grant["refresh_token"])
    assert expired.status_code == 401
    assert expired.json()["error"] == "invalid_grant"
    # The newest refresh token has not been used yet, so it still works.
    assert env.oauth.refresh(reused.json()["refresh_token"]).status_code == 200


def test_suspend_revokes_the_token_and_rejects_other_clients_tokens(env: Env) -> None:
    grant = _public_grant(env)
    private = env.oauth.token(PRIVATE, INTEGRATION_SCOPE)
    foreign = env.oauth.suspend(private)
    assert foreign.status_code == 401
    assert env.oauth.suspend("not-a-token").status_code == 401
    suspended = env.oauth.suspend(grant["access_token"])
    assert suspended.status_code == 200
    assert _vulns(env, grant["access_token"]) == 401
    assert env.oauth.refresh(grant["refresh_token"]).status_code == 401
    assert _vulns(env, private) == 200
    wrong_app = env.oauth.suspend(private, PRIVATE)
    assert (wrong_app.status_code, wrong_app.json()["error"]) == (400, "unauthorized_client")


def test_rotating_a_secret_invalidates_client_credentials_tokens(env: Env) -> None:
    token = env.oauth.token()
    new_secret = env.control.rotate_secret(MANAGE[0])
    assert new_secret != MANAGE[1]
    assert env.api_for(token).call(EVENTS).status_code == 401
    assert env.oauth.client_credentials().status_code == 401  # the old secret
    fresh = env.oauth.token((MANAGE[0], new_secret))
    assert env.api_for(fresh).call(EVENTS).status_code == 200
    listed = {app["client_id"]: app for app in env.control.apps()}
    assert listed[MANAGE[0]]["client_secret"] == new_secret


def test_rotating_a_public_apps_secret_keeps_customer_tokens(env: Env) -> None:
    grant = _public_grant(env)
    new_secret = env.control.rotate_secret(PUBLIC[0])
    assert _vulns(env, grant["access_token"]) == 200
    assert (
        env.oauth.refresh(grant["refresh_token"]).status_code == 401
    )  # old secret: invalid_client
    assert env.oauth.refresh(grant["refresh_token"], (PUBLIC[0], new_secret)).status_code == 200


def test_gov_tier_has_its_own_applications_tokens_and_tenant(env: Env) -> None:
    assert env.oauth.client_credentials(GOV, MANAGE_SCOPE).json()["error"] == "invalid_client"
    assert env.gov_oauth.client_credentials(MANAGE, MANAGE_SCOPE).status_code == 401
    gov_token = env.gov_oauth.token(GOV, MANAGE_SCOPE)
    commercial_token = env.oauth.token()
    assert env.api_for(gov_token, gov=True).call(EVENTS).status_code == 200
    assert env.api_for(gov_token).call(EVENTS).status_code == 401
    assert env.api_for(commercial_token, gov=True).call(EVENTS).status_code == 401
    gov_seed = env.sandbox.gov_control.seed()
    assert gov_seed["tier"] == "gov"
    assert not set(gov_seed["groups"]) & set(env.seed["groups"])
    assert env.sandbox.gov_control.stats()["token_mints"] == {DEMO_GOV_MANAGE.client_id: 1}
