"""Flow parameters of the read flows, checked before the first API call (``InputError`` naming
the parameter and value, never an API call). Ranges and choices live in the flows' signatures
(``runtime/form.py``); the formats are checked here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

from compliance_api.errors import InputError
from compliance_api.models import (
    AnswerLibraryFilter,
    KnowledgeBaseFilter,
    KnowledgeBaseResourceType,
    TagAssignment,
)

TAG_FORMAT = "'<categoryId>:<tagId>' or {'categoryId': ..., 'tagId': ...}"


def parse_timestamp(parameter: str, value: str | datetime | date | None) -> datetime | None:
    """An ISO 8601 date or date-time; a naive value or a bare date is taken to be UTC."""
    if value is None or isinstance(value, datetime):
        return _as_utc(value) if value is not None else None
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    if not isinstance(value, str) or not value.strip():
        raise InputError(parameter, value, "must be an ISO 8601 date or date-time")
    try:
        parsed = datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        raise InputError(
            parameter,
            value,
            "is not an ISO 8601 date or date-time (e.g. 2025-01-31 or 2025-01-31T12:00:00Z)",
        ) from None
    return _as_utc(parsed)


def _as_utc(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def parse_tags(
    parameter: str, value: Sequence[str | Mapping[str, Any]] | None
) -> list[TagAssignment] | None:
    """Tags as ``"categoryId:tagId"`` (easy to type in the UI) or ``{categoryId, tagId}``."""
    if value is None:
        return None
    if isinstance(value, str | bytes):
        raise InputError(parameter, value, f"must be a list of tags, each {TAG_FORMAT}")
    return [_tag(parameter, item) for item in value] or None


def _tag(parameter: str, item: object) -> TagAssignment:
    if isinstance(item, Mapping):
        category_id = item.get("categoryId", item.get("category_id"))
        tag_id = item.get("tagId", item.get("tag_id"))
        extra = set(item) - {"categoryId", "category_id", "tagId", "tag_id"}
        if extra or not _non_blank_str(category_id) or not _non_blank_str(tag_id):
            raise InputError(parameter, dict(item), f"malformed tag; expected {TAG_FORMAT}")
        return TagAssignment(category_id=str(category_id).strip(), tag_id=str(tag_id).strip())
    if isinstance(item, str):
        category_id, separator, tag_id = item.partition(":")
        if not separator or ":" in tag_id or not category_id.strip() or not tag_id.strip():
            raise InputError(parameter, item, f"malformed tag; expected {TAG_FORMAT}")
        return TagAssignment(category_id=category_id.strip(), tag_id=tag_id.strip())
    raise InputError(parameter, item, f"malformed tag; expected {TAG_FORMAT}")


def _non_blank_str(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def check_window(
    after_name: str, after: datetime | None, before_name: str, before: datetime | None
) -> None:
    if after is not None and before is not None and after > before:
        raise InputError(
            after_name, after.isoformat(), f"is after {before_name} ({before.isoformat()})"
        )


class ListFilters:
    """The §4.1/§4.2 filters shared by both knowledge-base lists, parsed once per run."""

    def __init__(
        self,
        *,
        q: str | None = None,
        types: Sequence[str] | None = None,
        tags: Sequence[str | Mapping[str, Any]] | None = None,
        last_updated_after: str | datetime | None = None,
        last_updated_before: str | datetime | None = None,
        expires_after: str | datetime | None = None,
        expires_before: str | datetime | None = None,
    ) -> None:
        if q is not None and not isinstance(q, str):
            raise InputError("q", q, "must be text")
        self.q = q.strip() or None if isinstance(q, str) else None
        self.types = [KnowledgeBaseResourceType(t) for t in dict.fromkeys(types or ())] or None
        self.tags = parse_tags("tags", tags)
        self.last_updated_after = parse_timestamp("last_updated_after", last_updated_after)
        self.last_updated_before = parse_timestamp("last_updated_before", last_updated_before)
        self.expires_after = parse_timestamp("expires_after", expires_after)
        self.expires_before = parse_timestamp("expires_before", expires_before)
        check_window(
            "last_updated_after",
            self.last_updated_after,
            "last_updated_before",
            self.last_updated_before,
        )
        check_window("expires_after", self.expires_after, "expires_before", self.expires_before)

    def _common(self) -> dict[str, Any]:
        return {
            "q": self.q,
            "matches_tags": self.tags,
            "last_updated_after": self.last_updated_after,
            "last_updated_before": self.last_updated_before,
            "expires_after": self.expires_after,
            "expires_before": self.expires_before,
        }

    def for_resources(self) -> KnowledgeBaseFilter:
        return KnowledgeBaseFilter(type_matches_any=self.types, **self._common())

    def for_answer_library(self) -> AnswerLibraryFilter:
        return AnswerLibraryFilter(**self._common())

    def describe(self) -> dict[str, Any]:
        """JSON-safe summary for artifacts and results (what the report was filtered by)."""
        summary: dict[str, Any] = {
            "q": self.q,
            "types": [t.value for t in self.types] if self.types else None,
            "tags": [f"{t.category_id}:{t.tag_id}" for t in self.tags] if self.tags else None,
        }
        for name in (
            "last_updated_after",
            "last_updated_before",
            "expires_after",
            "expires_before",
        ):
            moment = getattr(self, name)
            summary[name] = moment.isoformat() if moment else None
        return {key: value for key, value in summary.items() if value is not None}
