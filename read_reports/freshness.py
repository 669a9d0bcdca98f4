"""Is a knowledge-base item still trustworthy? Classification (expired, expiring soon, not
verified: docs/read-flows.md) and the running tally. An item can be expired and not verified;
it counts in both, and in the urgent table under its most urgent reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from functools import cached_property
from typing import Any

from compliance_api.models import (
    AnswerLibraryEntry,
    AnswerLibraryEntrySummary,
    ExpirationStatus,
    KnowledgeBaseResource,
    KnowledgeBaseResourceSummary,
)
from read_reports.tables import BoundedTop

UNASSIGNED = "(unassigned)"
OTHER_OWNERS = "(other owners)"
#: distinct owners tracked by name; beyond this they are summed into one row (memory stays flat)
MAX_OWNERS = 5_000
TITLE_WIDTH = 90


class ItemKind(StrEnum):
    RESOURCE = "knowledge_base_resource"
    ANSWER = "answer_library_entry"


class Reason(StrEnum):
    EXPIRED = "expired"
    EXPIRING_SOON = "expiring soon"
    NOT_VERIFIED = "not verified"


@dataclass(slots=True)
class Owner:
    id: str | None
    type: str | None
    name: str


@dataclass(slots=True)
class KbItem:
    """The fields freshness needs, for both lists (slotted: a third of a frozen one's cost)."""

    kind: ItemKind
    id: str
    title: str
    owner: Owner
    expiration_status: str | None
    expiration_date: datetime | None
    last_verified: datetime | None
    last_updated: datetime | None
    url: str | None

    @property
    def resource_id(self) -> str:
        """``compliance.<kind with dashes>.<id>``, e.g. ``compliance.answer-library-entry.a1``."""
        return f"compliance.{self.kind.value.replace('_', '-')}.{self.id}"


def as_item(
    record: KnowledgeBaseResource
    | AnswerLibraryEntry
    | KnowledgeBaseResourceSummary
    | AnswerLibraryEntrySummary,
) -> KbItem:
    """Normalize either list's record (full or summary); never carries the signed ``fileUrl``."""
    actor = record.owner_assignment
    owner = (
        Owner(actor.id, str(actor.type), actor.display_name or actor.id)
        if actor is not None
        else Owner(None, None, UNASSIGNED)
    )
    if isinstance(record, KnowledgeBaseResource | KnowledgeBaseResourceSummary):
        kind, title, url = ItemKind.RESOURCE, record.title, record.url
    else:
        kind, title, url = ItemKind.ANSWER, record.question, None
    return KbItem(
        kind=kind,
        id=record.id,
        title=title,
        owner=owner,
        expiration_status=str(record.expiration_status) if record.expiration_status else None,
        expiration_date=record.expiration_date,
        last_verified=record.last_verified,
        last_updated=record.last_updated,
        url=url,
    )


@dataclass(frozen=True)
class FreshnessRules:
    as_of: datetime
    expiring_within_days: int
    not_verified_days: int

    @cached_property
    def expiring_horizon(self) -> datetime:
        return self.as_of + timedelta(days=self.expiring_within_days)

    @cached_property
    def verified_cutoff(self) -> datetime:
        return self.as_of - timedelta(days=self.not_verified_days)

    def reasons(self, item: KbItem) -> list[Reason]:
        found: list[Reason] = []
        expired_by_date = item.expiration_date is not None and item.expiration_date <= self.as_of
        if item.expiration_status == ExpirationStatus.EXPIRED or expired_by_date:
            found.append(Reason.EXPIRED)
        elif item.expiration_date is not None and item.expiration_date <= self.expiring_horizon:
            found.append(Reason.EXPIRING_SOON)
        if item.last_verified is None or item.last_verified < self.verified_cutoff:
            found.append(Reason.NOT_VERIFIED)
        return found

    def days_left(self, item: KbItem) -> int | None:
        expires = item.expiration_date
        return None if expires is None else (expires - self.as_of).days

    def days_since_verified(self, item: KbItem) -> int | None:
        verified = item.last_verified
        return None if verified is None else (self.as_of - verified).days


@dataclass
class OwnerCounts:
    name: str
    owner_id: str | None
    items: int = 0
    expired: int = 0
    expiring_soon: int = 0
    not_verified: int = 0

    def add(self, reasons: list[Reason]) -> None:
        self.items += 1
        self.expired += Reason.EXPIRED in reasons
        self.expiring_soon += Reason.EXPIRING_SOON in reasons
        self.not_verified += Reason.NOT_VERIFIED in reasons

    @property
    def needing_action(self) -> int:
        return self.expired + self.expiring_soon + self.not_verified

    def row(self) -> dict[str, Any]:
        return {
            "owner": self.name,
            "owner_id": self.owner_id or "",
            "items": self.items,
            "expired": self.expired,
            "expiring_soon": self.expiring_soon,
            "not_verified": self.not_verified,
        }


@dataclass
class FreshnessTally:
    """Counts over every item seen, plus the ``top_n`` most urgent rows. O(owners + top_n)."""

    rules: FreshnessRules
    top_n: int
    scanned: dict[str, int] = field(default_factory=dict)
    totals: dict[str, int] = field(
        default_factory=lambda: {reason.value: 0 for reason in Reason} | {"current": 0}
    )
    owners: dict[str, OwnerCounts] = field(default_factory=dict)
    urgent: BoundedTop[tuple[int, float]] = field(init=False)

    def __post_init__(self) -> None:
        self.urgent = BoundedTop(self.top_n)

    def add(self, item: KbItem) -> list[Reason]:
        reasons = self.rules.reasons(item)
        self.scanned[item.kind.value] = self.scanned.get(item.kind.value, 0) + 1
        for reason in reasons:
            self.totals[reason.value] += 1
        if not reasons:
            self.totals["current"] += 1
        self._owner(item.owner).add(reasons)
        if reasons:
            self.urgent.offer(self._urgency(item, reasons[0]), lambda: self._row(item, reasons))
        return reasons

    def _owner(self, owner: Owner) -> OwnerCounts:
        key = owner.id or UNASSIGNED
        counts = self.owners.get(key)
        if counts is None:
            if len(self.owners) >= MAX_OWNERS:
                return self.owners.setdefault(OTHER_OWNERS, OwnerCounts(OTHER_OWNERS, None))
            counts = self.owners[key] = OwnerCounts(owner.name, owner.id)
        return counts

    def _urgency(self, item: KbItem, reason: Reason) -> tuple[int, float]:
        """Expired longest ago, then expiring soonest, then verified longest ago."""
        moment = item.last_verified if reason is Reason.NOT_VERIFIED else item.expiration_date
        return _RANK[reason], moment.timestamp() if moment else float("-inf")

    def _row(self, item: KbItem, reasons: list[Reason]) -> dict[str, Any]:
        return {
            "reason": ", ".join(reason.value for reason in reasons),
            "kind": item.kind.value,
            "id": item.id,
            "title": _short(item.title),
            "owner": item.owner.name,
            "expires": item.expiration_date.date().isoformat() if item.expiration_date else "",
            "days_left": self.rules.days_left(item),
            "last_verified": item.last_verified.date().isoformat()
            if item.last_verified
            else "never",
            "days_since_verified": self.rules.days_since_verified(item),
        }

    def owner_rows(self) -> list[dict[str, Any]]:
        ordered = sorted(
            self.owners.values(), key=lambda counts: (-counts.needing_action, counts.name)
        )
        return [counts.row() for counts in ordered]


#: a reason's place in the urgency order (expired first)
_RANK = {reason: rank for rank, reason in enumerate(Reason)}


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= TITLE_WIDTH else text[: TITLE_WIDTH - 1] + "…"
