"""Bounded report building for the read flows: counts grow, rows do not (the ``top_n`` most
urgent rows, kept in a heap while pages stream past).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact

Row = dict[str, Any]
K = TypeVar("K")


class BoundedTop(Generic[K]):
    """Keep the ``limit`` rows with the smallest sort key (most urgent) out of a stream; ties keep
    the earlier row, so reports are stable."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.seen = 0
        self._heap: list[tuple[Any, int, Row]] = []
        self._counter = itertools.count()

    def offer(self, key: K, row: Callable[[], Row] | Row) -> None:
        """Add a candidate; ``row`` may be a callable so rows that lose are never built."""
        self.seen += 1
        if self.limit <= 0:
            return
        order = -next(self._counter)
        entry_key = _Reversed(key)
        if len(self._heap) < self.limit:
            heapq.heappush(self._heap, (entry_key, order, row() if callable(row) else row))
        elif (entry_key, order) > (self._heap[0][0], self._heap[0][1]):
            heapq.heapreplace(self._heap, (entry_key, order, row() if callable(row) else row))

    def rows(self) -> list[Row]:
        """The kept rows, most urgent first."""
        ordered = sorted(self._heap, key=lambda item: (item[0], item[1]), reverse=True)
        return [row for _, _, row in ordered]

    @property
    def truncated(self) -> bool:
        return self.seen > len(self._heap)


class _Reversed:
    """Invert comparisons so a min-heap evicts the least urgent (largest key) row first."""

    __slots__ = ("key",)

    def __init__(self, key: Any) -> None:
        self.key = key

    def __lt__(self, other: _Reversed) -> bool:
        return bool(other.key < self.key)

    def __gt__(self, other: _Reversed) -> bool:
        return bool(other.key > self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and bool(self.key == other.key)

    def __le__(self, other: _Reversed) -> bool:
        return self < other or self == other

    def __ge__(self, other: _Reversed) -> bool:
        return self > other or self == other

    __hash__ = None  # type: ignore[assignment]


def shown_note(shown: int, total: int, what: str) -> str:
    """The sentence every truncated table carries, so nobody mistakes it for the full list."""
    if total <= shown:
        return f"All {total} {what}."
    return f"Showing the {shown} most urgent of {total} {what}; counts cover all of them."


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured table; pipes and newlines in values are escaped."""
    if not rows:
        return "_None._"
    header = list(columns or rows[0].keys())
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(column)) for column in header) + " |")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list | tuple | set):
        value = ", ".join(str(item) for item in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def artifact_key(*parts: str) -> str:
    """Artifact keys allow only lowercase letters, digits and dashes."""
    raw = "-".join(part for part in parts if part)
    cleaned = "".join(ch if ch.isalnum() and ch.isascii() else "-" for ch in raw.lower())
    return "-".join(piece for piece in cleaned.split("-") if piece)[:200]


async def publish_table(key: str, rows: Iterable[Row], description: str) -> None:
    """A table artifact; an empty table still gets a row saying so (the UI shows nothing else)."""
    table = list(rows) or [{"result": "nothing to report"}]
    await acreate_table_artifact(table=table, key=key, description=description)


async def publish_markdown(key: str, markdown: str, description: str) -> None:
    await acreate_markdown_artifact(markdown=markdown, key=key, description=description)
