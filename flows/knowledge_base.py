"""Knowledge-base freshness: what is expired, what expires soon, what nobody verified, by owner.

Streams resources and answer-library entries page by page (memory: one page plus bounded
counters), classifies them (``read_reports/freshness.py``) and sends one event per item to act on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from compliance_api.client import ComplianceClient
from read_reports.events import kb_item_event
from read_reports.filters import (
    ListFilters,
    parse_timestamp,
)
from read_reports.freshness import FreshnessRules, FreshnessTally, Reason
from read_reports.tables import markdown_table, publish_markdown, publish_table, shown_note
from runtime import collector
from runtime.connection import compliance_client
from runtime.events import EventSink
from runtime.form import AtLeastOne, Maybe, NonNegative, PageSize, title
from runtime.task_inputs import unwalked
from tasks.events import send_events
from tasks.knowledge_base import scan_answers, scan_resources

Source = Literal["resources", "answer_library"]
SOURCES: tuple[Source, ...] = ("resources", "answer_library")
Sources = Annotated[list[Source], Field(min_length=1)]
#: pages per task run: the run's steps in the UI (one per 20,000 items at the default size)
SLICE_PAGES = 200
#: the values of ``KnowledgeBaseResourceType`` (a test keeps them equal)
ResourceType = Literal["FILE", "URL"]


class FreshnessReport(BaseModel):
    """The flow's result: counts over everything scanned (rows live in the artifacts)."""

    as_of: datetime
    filters: dict[str, Any]
    scanned: dict[str, int]
    expired: int
    expiring_soon: int
    not_verified: int
    current: int
    owners: int
    events_sent: int
    pages: int
    urgent_items: list[dict[str, Any]] = Field(default_factory=list)


class FreshnessParameters:
    """Every flow parameter, checked; raises InputError before any API call."""

    def __init__(
        self,
        *,
        filters: ListFilters,
        sources: Sequence[Source],
        expiring_within_days: int,
        not_verified_days: int,
        as_of: str | None,
        page_size: int,
        top_n: int,
    ) -> None:
        self.filters = filters
        self.sources = list(dict.fromkeys(sources))
        self.rules = FreshnessRules(
            as_of=parse_timestamp("as_of", as_of) or datetime.now(UTC),
            expiring_within_days=expiring_within_days,
            not_verified_days=not_verified_days,
        )
        self.page_size = page_size
        self.top_n = top_n
        # Build the API filters now: their own checks must fail before the first call too.
        self.resource_filter = filters.for_resources()
        self.answer_filter = filters.for_answer_library()


async def scan_source(
    client: ComplianceClient,
    source: Source,
    params: FreshnessParameters,
    tally: FreshnessTally,
    sink: EventSink | None,
) -> tuple[int, int]:
    """Stream one list through the tally; returns (pages read, events sent)."""
    pages = sent = 0
    cursor: str | None = None
    scan, filters = (
        (scan_resources, params.resource_filter)
        if source == "resources"
        else (scan_answers, params.answer_filter)
    )
    while True:
        scanned = await scan(
            client,
            filters,
            params.page_size,
            cursor,
            SLICE_PAGES,
            unwalked(tally),
            sink is not None,
        )
        pages += scanned.pages
        if scanned.to_notify and sink is not None:
            events = [
                kb_item_event(item, reason, params.rules) for item, reason in scanned.to_notify
            ]
            sent += await send_events(sink, unwalked(events))
        cursor = scanned.cursor
        if cursor is None:
            return pages, sent


async def publish_freshness_report(params: FreshnessParameters, tally: FreshnessTally) -> None:
    rules = params.rules
    urgent = tally.urgent.rows()
    owners = tally.owner_rows()
    shown_owners = owners[: max(params.top_n, 100)]
    needing = sum(tally.totals[reason.value] for reason in Reason)
    note = shown_note(len(urgent), tally.urgent.seen, "items needing action")
    owner_note = shown_note(len(shown_owners), len(owners), "owners")
    await publish_table(
        "knowledge-base-needs-action",
        urgent,
        f"Knowledge-base items needing action as of {rules.as_of:%Y-%m-%d %H:%M} UTC. {note}",
    )
    await publish_table(
        "knowledge-base-freshness-by-owner",
        shown_owners,
        f"Knowledge-base freshness per owner. {owner_note}",
    )
    filters = params.filters.describe()
    lines = [
        f"# Knowledge-base freshness ({rules.as_of:%Y-%m-%d %H:%M} UTC)",
        "",
        f"Scanned: {', '.join(f'{n} {k}' for k, n in tally.scanned.items()) or 'nothing'}"
        f" (sources: {', '.join(params.sources)}; filters: {filters or 'none'}).",
        "",
        "| status | items |",
        "|---|---|",
        f"| expired | {tally.totals[Reason.EXPIRED.value]} |",
        f"| expiring within {rules.expiring_within_days} days"
        f" | {tally.totals[Reason.EXPIRING_SOON.value]} |",
        f"| not verified for {rules.not_verified_days} days"
        f" | {tally.totals[Reason.NOT_VERIFIED.value]} |",
        f"| current | {tally.totals['current']} |",
        "",
        f"{needing} findings across {tally.urgent.seen} items. An item can be expired and not "
        "verified at once, so findings can exceed items.",
        "",
        "## Owners with the most to do",
        "",
        markdown_table(shown_owners[:15]),
        "",
        "## Most urgent items",
        "",
        note,
        "",
        markdown_table(urgent[:25]),
    ]
    await publish_markdown(
        "knowledge-base-freshness", "\n".join(lines), "Knowledge-base freshness summary"
    )


@flow(name="knowledge-base-freshness")
async def knowledge_base_freshness(
    q: Annotated[Maybe[str], title("Search text")] = None,
    types: Annotated[Maybe[list[ResourceType]], title("Resource types")] = None,
    tags: Annotated[Maybe[list[str]], title("Tags")] = None,
    last_updated_after: Annotated[Maybe[str], title("Updated after")] = None,
    last_updated_before: Annotated[Maybe[str], title("Updated before")] = None,
    expires_after: Annotated[Maybe[str], title("Expires after")] = None,
    expires_before: Annotated[Maybe[str], title("Expires before")] = None,
    expiring_within_days: Annotated[NonNegative, title("Expiring within (days)")] = 30,
    not_verified_days: Annotated[NonNegative, title("Not verified for (days)")] = 180,
    sources: Annotated[Maybe[Sources], title("Sources")] = None,
    as_of: Annotated[Maybe[str], title("Report time")] = None,
    emit_events: Annotated[bool, title("Send events")] = True,
    page_size: Annotated[PageSize, title("Page size")] = 100,
    top_n: Annotated[AtLeastOne, title("Most urgent items listed")] = 50,
) -> FreshnessReport:
    """Report expired, soon-expiring and unverified knowledge-base items, by owner.

    Times are ISO 8601, e.g. '2025-01-31' (a bare date is midnight UTC) or
    '2025-01-31T12:00:00Z'.

    Args:
        q: Only items matching this full-text search. Empty: no text filter.
        types: Only resources of these types (FILE, URL). Answers have no type, so setting
            this leaves the answer library out unless sources names it.
        tags: Only items with any of these tags, each 'categoryId:tagId', e.g. 'cat-1:tag-7'.
        last_updated_after: Only items last updated after this time (ISO 8601).
        last_updated_before: Only items last updated before this time (ISO 8601).
        expires_after: Only items expiring after this time (ISO 8601).
        expires_before: Only items expiring before this time (ISO 8601).
        expiring_within_days: An item expiring within this many days of the report time is
            "expiring soon" (and gets an event).
        not_verified_days: An item nobody verified for this many days is "not verified".
        sources: What to scan: 'resources' (the knowledge base) and/or 'answer_library'.
            Empty: both, or only resources when types is set.
        as_of: The time the report is made for (ISO 8601). Empty: now.
        emit_events: Send one event per item expiring soon and per expired item, so an
            automation can tell its owner.
        page_size: Items read per API call (1 to 100).
        top_n: How many of the most urgent items the table lists (the counts cover all).
    """
    params = FreshnessParameters(
        filters=ListFilters(
            q=q,
            types=types,
            tags=tags,
            last_updated_after=last_updated_after,
            last_updated_before=last_updated_before,
            expires_after=expires_after,
            expires_before=expires_before,
        ),
        # a type filter means "these resources": answers have no type, so they are left out
        sources=(["resources"] if types else SOURCES) if sources is None else sources,
        expiring_within_days=expiring_within_days,
        not_verified_days=not_verified_days,
        as_of=as_of,
        page_size=page_size,
        top_n=top_n,
    )
    logger = get_run_logger()
    tally = FreshnessTally(params.rules, params.top_n)
    pages = sent = 0
    with collector.frozen_for_long_read():
        async with compliance_client() as client, EventSink() as sink:
            for source in params.sources:
                read, emitted = await scan_source(
                    client, source, params, tally, sink if emit_events else None
                )
                pages += read
                sent += emitted
    await publish_freshness_report(params, tally)
    logger.info(
        "Scanned %s: %s expired, %s expiring soon, %s not verified; %s events sent",
        tally.scanned,
        tally.totals[Reason.EXPIRED.value],
        tally.totals[Reason.EXPIRING_SOON.value],
        tally.totals[Reason.NOT_VERIFIED.value],
        sent,
    )
    return FreshnessReport(
        as_of=params.rules.as_of,
        filters=params.filters.describe(),
        scanned=dict(tally.scanned),
        expired=tally.totals[Reason.EXPIRED.value],
        expiring_soon=tally.totals[Reason.EXPIRING_SOON.value],
        not_verified=tally.totals[Reason.NOT_VERIFIED.value],
        current=tally.totals["current"],
        owners=len(tally.owners),
        events_sent=sent,
        pages=pages,
        urgent_items=tally.urgent.rows()[:10],
    )
