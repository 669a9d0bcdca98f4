"""Fixtures for the data-client tests: published schemas and a schema-checking fake API.

The fake runs inside ``httpx.MockTransport`` (no sockets, no sandbox): it is only used for what
the sandbox cannot be told to do precisely (a given status sequence, a dropped connection, a
server that echoes a token). Every request body it receives is validated against the
operation's published request schema, so any client test doubles as a contract test.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jsonschema
import pytest
from pydantic import SecretStr

from compliance_api.auth import AccessToken
from compliance_api.client import ComplianceClient
from compliance_api.providers import InMemoryTokenProvider
from compliance_api.retry import RetryPolicy
from tests.fixtures import spec

BASE_URL = "http://api.test"
FAST_RETRIES = RetryPolicy(max_attempts=4, initial_wait=0.001, max_wait=0.002, max_retry_after=0.05)


def load_schemas() -> dict[str, dict[str, Any]]:
    return spec.schema_files()


@pytest.fixture(scope="session")
def schemas() -> dict[str, dict[str, Any]]:
    return load_schemas()


def validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


@dataclass
class Seen:
    """One request as the fake API received it."""

    operation: str
    method: str
    path: str
    params: list[tuple[str, str]]
    authorization: str | None
    body: Any

    def param(self, name: str) -> list[str]:
        return [value for key, value in self.params if key == name]


Reply = httpx.Response | dict[str, Any] | Exception | Callable[[httpx.Request], httpx.Response]


@dataclass
class FakeAPI:
    """Queued replies per operation (named like the schema files); records what it saw."""

    schemas: dict[str, dict[str, Any]]
    replies: dict[str, deque[Reply]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    default: dict[str, Reply] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._routes = []
        for name, document in self.schemas.items():
            pattern = re.sub(r"\{[^}]+\}", "[^/]+", document["path"])
            self._routes.append((document["method"], re.compile(f"^{pattern}$"), name))
        # literal routes first, so /tag-categories does not match /tag-categories/{id}
        self._routes.sort(key=lambda route: route[1].pattern.count("[^/]+"))

    def reply(self, operation: str, *replies: Reply) -> None:
        self.replies.setdefault(operation, deque()).extend(replies)

    def always(self, operation: str, reply: Reply) -> None:
        self.default[operation] = reply

    def calls(self, operation: str | None = None) -> list[Seen]:
        return [seen for seen in self.seen if operation is None or seen.operation == operation]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.raw_path.decode().split("?")[0]
        operation = self._operation(request.method, path)
        body = json.loads(request.content) if request.content else None
        schema = self.schemas[operation]["request_body"]
        if schema is not None:
            assert body is not None, f"{operation}: a body is required (at least {{}})"
            validator(schema).validate(body)
            assert request.headers["content-type"] == "application/json"
        else:
            assert body is None, f"{operation} takes no body"
        self.seen.append(
            Seen(
                operation,
                request.method,
                path,
                list(request.url.params.multi_items()),
                request.headers.get("authorization"),
                body,
            )
        )
        queue = self.replies.get(operation)
        if queue:
            reply = queue.popleft()
        elif operation in self.default:
            reply = self.default[operation]
        else:
            raise AssertionError(f"unexpected call to {operation} (no reply queued)")
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, dict):
            status = spec.EXPECTED_STATUS[spec.route_of(self.schemas[operation])]
            return httpx.Response(status, json=reply)
        if isinstance(reply, httpx.Response):
            return reply
        return reply(request)

    def _operation(self, method: str, path: str) -> str:
        for route_method, pattern, name in self._routes:
            if route_method == method and pattern.match(path):
                return name
        raise AssertionError(f"no operation for {method} {path}")


@pytest.fixture
def api(schemas: dict[str, dict[str, Any]]) -> FakeAPI:
    return FakeAPI(schemas)


def minting_provider(prefix: str = "tok") -> InMemoryTokenProvider:
    """Mints ``<prefix>-1``, ``<prefix>-2``... valid for an hour."""
    counter = {"n": 0}

    async def mint() -> AccessToken:
        counter["n"] += 1
        value = SecretStr(f"{prefix}-secret-value-{counter['n']}")
        return AccessToken(value, datetime.now(UTC) + timedelta(hours=1))

    return InMemoryTokenProvider(mint)


@pytest.fixture
def provider() -> InMemoryTokenProvider:
    return minting_provider()


@pytest.fixture
async def client(api: FakeAPI, provider: InMemoryTokenProvider) -> Any:
    async with ComplianceClient(
        BASE_URL, provider, transport=api.transport(), retry_policy=FAST_RETRIES
    ) as instance:
        yield instance
