"""Checks of request bodies and query parameters; each failure is a 400 naming field and value.

Bodies are checked completely before anything changes, so a request is applied whole or not at
all.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

from sandbox.errors import bad_request
from sandbox.times import parse_iso_us


async def json_object(request: Request, *, required: bool = True) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        if required:
            raise bad_request("a JSON object body is required (send {} for no changes)")
        return {}
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise bad_request(
            f"Content-Type must be application/json, not {content_type or 'missing'!r}"
        )
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise bad_request(f"the body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise bad_request("the body must be a JSON object")
    return body


def only_fields(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise bad_request(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")


def string(value: Any, field: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise bad_request(f"{field} must be a non-empty string, got {json.dumps(value)}")
    return value


def timestamp_us(value: Any, field: str) -> int:
    if not isinstance(value, str):
        raise bad_request(f"{field} must be an ISO 8601 timestamp string, got {json.dumps(value)}")
    try:
        return parse_iso_us(value)
    except ValueError as exc:
        raise bad_request(f"{field}: {exc}") from None


def query_timestamp(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    return None if raw is None else timestamp_us(raw, name)


def object_list(value: Any, field: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise bad_request(f"{field} must be an array of objects, got {json.dumps(value)}")
    return value


def tag_refs(value: Any, field: str) -> list[tuple[str, str]]:
    """``[{categoryId, tagId}]``: each entry needs both fields as strings."""
    pairs = []
    for index, item in enumerate(object_list(value, field)):
        category, tag = item.get("categoryId"), item.get("tagId")
        if (
            not isinstance(category, str)
            or not isinstance(tag, str)
            or set(item) - {"categoryId", "tagId"}
        ):
            raise bad_request(
                f"{field}[{index}] must be {{categoryId: string, tagId: string}}, "
                f"got {json.dumps(item)}"
            )
        pairs.append((category, tag))
    return pairs


def matches_tags(raw: str | None) -> list[tuple[str, str]] | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        raise bad_request(
            f"matchesTags must be a JSON-encoded array of {{categoryId, tagId}}, got {raw!r}"
        ) from None
    return tag_refs(value, "matchesTags")
