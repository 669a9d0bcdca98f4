"""Every request body the published schema rejects gets 400 naming the field.

The bad bodies are derived from the published request schemas themselves, starting from one
valid body per write operation: each property in turn is set to ``null`` (where the schema
does not allow null), to a value of the wrong type, outside its enum, below its ``minItems``
or (``format: date-time``) without a UTC offset; each required key is dropped and, where
``additionalProperties`` is false, an unknown key is added. Every variant is first shown to
break the published schema, so the test follows the schemas instead of a hand-made list.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator, ValidationError

from tests.fixtures import spec
from tests.fixtures.sandbox_api import Api, Env, check
from tests.sandbox import schemas

Path = tuple[str | int, ...]
MISSING = object()  # "drop this key" as a replacement value


def _request_schemas() -> dict[str, dict[str, Any]]:
    """Published request-body schema of every operation that takes a body."""
    documents = spec.schema_files().values()
    return {spec.route_of(d): d["request_body"] for d in documents if d["request_body"]}


def _valid_bodies(env: Env) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
    """(path parameters, a body using every property) per operation, all valid and accepted."""
    seed = env.seed
    person = seed["people"][0]
    category = seed["tag_categories"][0]
    tag = seed["tags"][category][0]
    questionnaire = {"questionnaireId": seed["questionnaires"][0]}
    actor = {"type": "User", "id": person}
    return {
        "PATCH /v1/customer-trust/questionnaires/{questionnaireId}": (
            questionnaire,
            {
                "displayName": "Renamed",
                "dueDate": "2030-01-02T03:04:05Z",
                "status": "IN_REVIEW",
                "ownerAssignment": actor,
                "approverAssignment": dict(actor),
                "metadata": [{"key": "k", "value": "v"}],
                "tagAndCategoryIds": [{"categoryId": category, "tagId": tag}],
            },
        ),
        "POST /v1/customer-trust/questionnaires/{questionnaireId}/approve": (
            questionnaire,
            {"statusChangeMessage": "Reviewed"},
        ),
        "PATCH /v1/customer-trust/accounts/{accountId}": (
            {"accountId": seed["accounts"][0]},
            {
                "name": "Renamed Co",
                "emailDomain": "renamed.example.com",
                "customFields": [{"label": "Segment", "value": "SMB"}],
                "tagsByCategory": [{"categoryId": category, "tagIds": [tag]}],
            },
        ),
        "POST /v1/documents/{documentId}/links": (
            {"documentId": seed["documents"][0]},
            {
                "url": "https://evidence.example.com/x",
                "title": "Evidence",
                "description": "d",
                "effectiveDate": "2025-01-01T00:00:00Z",
            },
        ),
        "POST /v1/groups/{groupId}/add-people": (
            {"groupId": seed["groups"][0]},
            {"updates": [{"id": person}]},
        ),
    }


def _allows_null(schema: dict[str, Any]) -> bool:
    types = schema.get("type")
    if types == "null" or (isinstance(types, list) and "null" in types):
        return True
    return any(_allows_null(branch) for branch in schema.get("anyOf", ()))


def _branch(schema: dict[str, Any], value: Any) -> dict[str, Any]:
    """The ``anyOf`` branch ``value`` matches (the schema itself when it has none)."""
    for branch in schema.get("anyOf", ()):
        if Draft202012Validator(branch).is_valid(value):
            return dict(branch)
    return schema


def _variants(schema: dict[str, Any], value: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(where, replacement) pairs that each break ``schema`` at one place of ``value``."""
    if not _allows_null(schema):
        yield path, None
    yield path, 7 if isinstance(value, str | list | dict) else "seven"
    schema = _branch(schema, value)
    if "enum" in schema:
        yield path, "NOT_A_LISTED_VALUE"
    if schema.get("format") == "date-time":
        yield path, "2030-01-02T03:04:05"
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            yield (*path, key), MISSING
        if schema.get("additionalProperties") is False:
            yield (*path, "unexpectedField"), 1
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                yield from _variants(sub, value[key], (*path, key))
    if isinstance(value, list) and value:
        if schema.get("minItems"):
            yield path, []
        yield from _variants(schema["items"], value[0], (*path, 0))


def _replaced(body: dict[str, Any], path: Path, replacement: Any) -> Any:
    """A copy of ``body`` with the value at ``path`` replaced (or dropped for MISSING)."""
    if not path:
        return replacement
    changed = copy.deepcopy(body)
    parent: Any = changed
    for step in path[:-1]:
        parent = parent[step]
    if replacement is MISSING:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement
    return changed


def _send(api: Api, route: str, params: dict[str, str], body: Any) -> httpx.Response:
    """``body`` as JSON text (a top-level ``null`` included), schema-checked like Api.call."""
    method, template = route.split(" ", 1)
    response = api.http.request(
        method,
        template.format(**params),
        content=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {api.token}", "Content-Type": "application/json"},
    )
    check(route, response)
    return response


def test_every_operation_with_a_body_has_a_valid_example(env: Env) -> None:
    assert set(_valid_bodies(env)) == set(_request_schemas())


@pytest.mark.parametrize("route", sorted(_request_schemas()))
def test_bodies_the_published_schema_rejects_are_400_naming_the_field(
    env: Env, api: Api, route: str
) -> None:
    params, valid = _valid_bodies(env)[route]
    schemas.validate_request(route, valid)
    assert _send(api, route, params, valid).status_code == schemas.expected_status(route)
    problems = []
    variants = list(_variants(_request_schemas()[route], valid))
    for path, replacement in variants:
        body = _replaced(valid, path, replacement)
        with pytest.raises(ValidationError):  # the variant really breaks the schema
            schemas.validate_request(route, body)
        response = _send(api, route, params, body)
        named = str(path[0]) if path else ""
        if response.status_code != 400 or named not in response.json()["message"]:
            problems.append(f"{path} = {replacement!r}: {response.status_code} {response.text}")
    assert not problems, "\n".join(problems)
    assert len(variants) >= 5
