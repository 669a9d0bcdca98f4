"""Cursor pagination shared by the list endpoints.

A cursor is base64url of ``<list>:<position>``: opaque to clients, and stable when items are
appended because positions never move. ``pageCursor`` starts the page *after* the marked item.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sandbox.errors import bad_request

T = TypeVar("T")
DEFAULT_PAGE_SIZE = 10
MAX_PAGE_SIZE = 100


def encode_cursor(kind: str, position: int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{position}".encode()).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str, length: int) -> int:
    """Position of the item the cursor marks; 400 naming pageCursor when it is not ours."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        text = base64.urlsafe_b64decode(padded.encode()).decode()
        cursor_kind, _, raw = text.partition(":")
        position = int(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise bad_request(
            f"pageCursor {cursor!r} is not a cursor issued by this endpoint"
        ) from None
    if cursor_kind != kind or not 0 <= position < length:
        raise bad_request(f"pageCursor {cursor!r} is not a cursor issued by this endpoint")
    return position


def page_size(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_PAGE_SIZE
    try:
        size = int(raw)
    except ValueError:
        raise bad_request(f"pageSize {raw!r} is not an integer (allowed: 1 to 100)") from None
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise bad_request(f"pageSize {size} is out of range (allowed: 1 to 100)")
    return size


def paginate(
    kind: str,
    items: Sequence[T],
    *,
    size: int,
    cursor: str | None,
    start: int = 0,
    matches: Callable[[T], bool] | None = None,
    render: Callable[[T], Any],
) -> dict[str, Any]:
    """One page of ``items`` from ``start`` (or after ``cursor``), keeping those ``matches``."""
    if cursor is not None:
        start = max(start, decode_cursor(kind, cursor, len(items)) + 1)
    data: list[Any] = []
    positions: list[int] = []
    has_next = False
    for position in range(start, len(items)):
        item = items[position]
        if matches is not None and not matches(item):
            continue
        if len(data) == size:
            has_next = True
            break
        data.append(render(item))
        positions.append(position)
    return {
        "results": {
            "data": data,
            "pageInfo": {
                "startCursor": encode_cursor(kind, positions[0]) if positions else None,
                "endCursor": encode_cursor(kind, positions[-1]) if positions else None,
                "hasNextPage": has_next,
                "hasPreviousPage": cursor is not None,
            },
        }
    }
