"""Helpers for the sandbox's own tests: an HTTP client that checks every response it gets.

Every data response is validated against the published schema of its operation (or, for
errors, against the documented error shape), so each test also proves the schemas hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from sandbox.runner import SandboxHandle
from tests.sandbox import schemas

MANAGE = ("demo-manage", "demo-manage-secret-not-real")
MANAGE_BASIC = ("demo-manage-basic", "demo-manage-basic-secret-not-real")
PRIVATE = ("demo-private", "demo-private-secret-not-real")
PUBLIC = ("demo-public", "demo-public-secret-not-real")
AUDITOR = ("demo-auditor", "demo-auditor-secret-not-real")
GOV = ("demo-gov-manage", "demo-gov-manage-secret-not-real")
MANAGE_SCOPE = "service-api.all:read service-api.all:write"
INTEGRATION_SCOPE = "connectors.self:read-resource self:read-document self:write-document"
PUBLIC_REDIRECT = "http://127.0.0.1:8765/callback"


class OAuth:
    """Raw token-endpoint calls; checks the OAuth body shapes of answers."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    def post(self, body: dict[str, Any], path: str = "/oauth/token") -> httpx.Response:
        response = self.http.post(path, json=body)
        if response.status_code == 200 and path == "/oauth/token":
            Draft202012Validator(schemas.TOKEN_BODY).validate(response.json())
        elif response.status_code >= 400:
            Draft202012Validator(schemas.OAUTH_ERROR_BODY).validate(response.json())
        return response

    def client_credentials(
        self, app: tuple[str, str] = MANAGE, scope: str = MANAGE_SCOPE
    ) -> httpx.Response:
        return self.post(
            {
                "client_id": app[0],
                "client_secret": app[1],
                "scope": scope,
                "grant_type": "client_credentials",
            }
        )

    def token(self, app: tuple[str, str] = MANAGE, scope: str = MANAGE_SCOPE) -> str:
        response = self.client_credentials(app, scope)
        assert response.status_code == 200, response.text
        return str(response.json()["access_token"])

    def exchange(
        self, code: str, app: tuple[str, str] = PUBLIC, source_id: str = "source-1"
    ) -> httpx.Response:
        return self.post(
            {
                "client_id": app[0],
                "client_secret": app[1],
                "code": code,
                "redirect_uri": PUBLIC_REDIRECT,
                "source_id": source_id,
                "grant_type": "authorization_code",
            }
        )

    def refresh(self, refresh_token: str, app: tuple[str, str] = PUBLIC) -> httpx.Response:
        return self.post(
            {
                "client_id": app[0],
                "client_secret": app[1],
                "refresh_token": refresh_token,
                "grant_type": "refresh_token",
            }
        )

    def suspend(self, token: str, app: tuple[str, str] = PUBLIC) -> httpx.Response:
        body = {"token": token, "client_id": app[0], "client_secret": app[1]}
        return self.post(body, path="/v1/oauth/token/suspend")


class Api:
    """Data-endpoint calls by operation ("METHOD /v1/path/{template}"), schema-checked."""

    def __init__(self, http: httpx.Client, token: str | None) -> None:
        self.http = http
        self.token = token

    def call(
        self,
        route: str,
        path_params: dict[str, str] | None = None,
        *,
        token: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        method, template = route.split(" ", 1)
        path = template.format(**(path_params or {}))
        bearer = token or self.token
        headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
        response = self.http.request(method, path, headers=headers, **kwargs)
        check(route, response)
        return response

    def ok(self, route: str, path_params: dict[str, str] | None = None, **kwargs: Any) -> Any:
        response = self.call(route, path_params, **kwargs)
        assert response.status_code == schemas.expected_status(route), response.text
        return response.json()

    def all_pages(self, route: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Every item of a list endpoint, following endCursor."""
        params = dict(params or {})
        params.setdefault("pageSize", 100)
        items: list[dict[str, Any]] = []
        while True:
            page = self.ok(route, params=params)["results"]
            items.extend(page["data"])
            if not page["pageInfo"]["hasNextPage"]:
                return items
            params["pageCursor"] = page["pageInfo"]["endCursor"]


def check(route: str, response: httpx.Response) -> None:
    """A success body must match the published schema; an error body the documented shape."""
    if response.status_code == schemas.expected_status(route):
        schemas.validate_response(route, response.json())
    else:
        assert response.status_code >= 400, response.status_code
        Draft202012Validator(schemas.ERROR_BODY).validate(response.json())


@dataclass
class Env:
    sandbox: SandboxHandle
    http: httpx.Client
    gov_http: httpx.Client
    oauth: OAuth
    gov_oauth: OAuth
    api: Api
    seed: dict[str, Any]

    @property
    def control(self) -> Any:
        return self.sandbox.control

    def stats(self) -> dict[str, Any]:
        return self.sandbox.control.stats()

    def api_for(self, token: str, gov: bool = False) -> Api:
        return Api(self.gov_http if gov else self.http, token)


@pytest.fixture
def env(sandbox_reset: SandboxHandle) -> Iterator[Env]:
    """A reset sandbox, clients for both tiers and a manage-app token for data calls."""
    with (
        httpx.Client(base_url=sandbox_reset.url, timeout=30) as http,
        httpx.Client(base_url=sandbox_reset.gov_url, timeout=30) as gov_http,
    ):
        oauth = OAuth(http)
        yield Env(
            sandbox=sandbox_reset,
            http=http,
            gov_http=gov_http,
            oauth=oauth,
            gov_oauth=OAuth(gov_http),
            api=Api(http, None),
            seed=sandbox_reset.control.seed(),
        )


@pytest.fixture
def api(env: Env) -> Api:
    env.api.token = env.oauth.token()
    return env.api
