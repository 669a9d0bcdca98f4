"""Bounded report building for the read flows: counts grow, rows do not (the ``top_n`` most
urgent rows, kept in order while pages stream past).
"""

from __future__ import annotations

import bisect
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
        #: (key, arrival, row), most urgent first
        self._kept: list[tuple[Any, int, Row]] = []

    def offer(self, key: K, row: Callable[[], Row] | Row) -> None:
        """Add a candidate; ``row`` may be a callable so rows that lose are never built."""
        self.seen += 1
        rank = (key, self.seen)
        full = len(self._kept) >= self.limit
        if self.limit > 0 and (not full or rank < self._kept[-1][:2]):
            kept = (*rank, row() if callable(row) else row)
            bisect.insort(self._kept, kept, key=lambda item: item[:2])
            del self._kept[self.limit :]

    def rows(self) -> list[Row]:
        """The kept rows, most urgent first."""
        return [row for _, _, row in self._kept]


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
