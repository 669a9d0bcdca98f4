"""Checks of request bodies and query parameters; each failure is a 400 naming field and value.

Bodies are checked completely before anything changes, so a request is applied whole or not at
all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Hashable
from typing import Any

from starlette.requests import Request

from sandbox.errors import bad_request
from sandbox.times import parse_iso_us, parse_rfc3339_us


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
    """``value`` if it is a string (non-blank unless ``empty``); ``null`` is not a string."""
    if not isinstance(value, str) or (not empty and not value.strip()):
        kind = "a string" if empty else "a non-empty string"
        raise bad_request(f"{field} must be {kind}, got {json.dumps(value)}")
    return value


def timestamp_us(value: Any, field: str) -> int:
    if not isinstance(value, str):
        raise bad_request(f"{field} must be an ISO 8601 timestamp string, got {json.dumps(value)}")
    try:
        return parse_iso_us(value)
    except ValueError as exc:
        raise bad_request(f"{field}: {exc}") from None


def date_time_us(value: Any, field: str) -> int:
    """A body field typed date-time: RFC 3339 with a UTC offset, as epoch microseconds.

    A time without an offset is a 400 naming the field, not a guess at UTC: the published
    schemas declare these ``format: date-time`` (RFC 3339), which needs the offset.
    """
    if not isinstance(value, str):
        raise bad_request(f"{field} must be an RFC 3339 date-time string, got {json.dumps(value)}")
    try:
        return parse_rfc3339_us(value)
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


def no_duplicates(
    items: list[Any], field: str, key: Callable[[Any], Hashable] = lambda item: item
) -> None:
    """400 naming ``field[i]`` when an entry repeats an earlier one (same ``key``).

    Used where a list stands for a set (tags): a repeat has no meaning, so it is taken as the
    client bug it almost always is instead of being silently collapsed.
    """
    first: dict[Hashable, int] = {}
    for index, item in enumerate(items):
        seen = first.setdefault(key(item), index)
        if seen != index:
            raise bad_request(
                f"{field}[{index}] repeats {field}[{seen}] ({json.dumps(item)}); "
                "each entry may appear only once"
            )


def enum_list(request: Request, name: str, allowed: Collection[str]) -> set[str]:
    """The values of a repeated query parameter (``name=A&name=B``); 400 for any other value.

    An empty result means the parameter was not given. Unknown values are refused rather than
    ignored, so a misspelt filter never silently returns everything.
    """
    values = request.query_params.getlist(name)
    for value in values:
        if value not in allowed:
            raise bad_request(f"{name} {value!r} is not one of {', '.join(allowed)}")
    return set(values)


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
