"""Prefect API reads and writes of the redelivery flow: automations, events, resends.

Each task is a few calls to the Prefect API, retried by Prefect when the server is busy; events
are read in pages (the API returns 50 at most) up to ``MAX_EVENTS`` per query.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any
from uuid import UUID

from prefect import task
from prefect.cache_policies import NONE
from prefect.client.orchestration import PrefectClient, get_client
from prefect.events import Event
from prefect.events.filters import (
    EventFilter,
    EventIDFilter,
    EventNameFilter,
    EventOccurredFilter,
    EventResourceFilter,
)
from prefect.events.schemas.automations import Automation
from prefect.events.schemas.events import ReceivedEvent, ResourceSpecification

from redelivery.automations import CheckedAutomation, covers
from redelivery.ledger import GAVE_UP, SENT, event_id_of
from runtime.events import EventSink

#: the most the events API returns per page
PAGE_SIZE = 50
#: events read per query at most; a larger backlog is checked over several runs
MAX_EVENTS = 10_000
EXECUTED = "prefect.automation.action.executed"
TRIGGERING_EVENT_ROLE = "triggering-event"
#: ids per query when reading events by id (keeps the request small)
ID_BATCH = 100
_API_CALLS: dict[str, Any] = {"cache_policy": NONE, "retries": 3, "retry_delay_seconds": 2}


async def _read_all(client: PrefectClient, event_filter: EventFilter) -> list[ReceivedEvent]:
    page = await client.read_events(filter=event_filter, limit=PAGE_SIZE)
    events = list(page.events)
    while page.next_page is not None and len(events) < MAX_EVENTS:
        page = await client.read_events_page(str(page.next_page))
        events.extend(page.events)
    return events


def _name_filter(pattern: str) -> EventNameFilter:
    if pattern.endswith("*"):
        return EventNameFilter(prefix=[pattern[:-1]])
    return EventNameFilter(name=[pattern])


@task(name="Read automations", **_API_CALLS)
async def read_automations() -> list[Automation]:
    async with get_client() as client:
        return await client.read_automations()


@task(
    name="Read the events an automation covers", cache_policy=NONE, retries=3, retry_delay_seconds=2
)
async def read_covered_events(
    automation: CheckedAutomation, since: datetime, until: datetime
) -> list[ReceivedEvent]:
    """Events of the automation's expected names that occurred in [since, until] and that its
    trigger covers."""
    events: dict[UUID, ReceivedEvent] = {}
    async with get_client() as client:
        for pattern in automation.expected_events:
            event_filter = EventFilter(
                occurred=EventOccurredFilter(since=since, until=until),
                event=_name_filter(pattern),
            )
            for event in await _read_all(client, event_filter):
                if covers(automation.trigger, event):
                    events[event.id] = event
    return list(events.values())


@task(
    name="Read the events automations acted on", cache_policy=NONE, retries=3, retry_delay_seconds=2
)
async def read_acted_on(names: list[str], since: datetime) -> dict[str, dict[UUID, datetime]]:
    """Per automation name, the events it ran its actions for since ``since``: event id -> when
    the action ran (the latest record), which tells how long ago it passed earlier events.

    Automations are told apart by name: ``prefect deploy`` replaces a deployment's automations
    (new ids, same names), and runs started before that still count.
    """
    acted: dict[str, dict[UUID, datetime]] = defaultdict(dict)
    if not names:
        return acted
    event_filter = EventFilter(
        occurred=EventOccurredFilter(since=since),
        event=EventNameFilter(name=[EXECUTED]),
        resource=EventResourceFilter(
            labels=ResourceSpecification({"prefect.resource.name": names})
        ),
    )
    async with get_client() as client:
        executed = await _read_all(client, event_filter)
    for event in executed:
        name = event.resource.get("prefect.resource.name")
        if name not in names:
            continue
        for triggering in _triggering_events(event):
            previous = acted[name].get(triggering)
            if previous is None or event.occurred > previous:
                acted[name][triggering] = event.occurred
    return acted


def _triggering_events(executed: ReceivedEvent) -> list[UUID]:
    """The ids of the events an ``action.executed`` record names as triggering it."""
    found = (
        event_id_of(related.id)
        for related in executed.related
        if related.role == TRIGGERING_EVENT_ROLE
    )
    return [event_id for event_id in found if event_id is not None]


@task(name="Read earlier redeliveries", **_API_CALLS)
async def read_redelivery_records(since: datetime) -> list[ReceivedEvent]:
    event_filter = EventFilter(
        occurred=EventOccurredFilter(since=since),
        event=EventNameFilter(name=[SENT, GAVE_UP]),
    )
    async with get_client() as client:
        return await _read_all(client, event_filter)


@task(name="Read events by id", **_API_CALLS)
async def read_events_by_id(ids: list[UUID], since: datetime) -> list[ReceivedEvent]:
    found: list[ReceivedEvent] = []
    async with get_client() as client:
        for start in range(0, len(ids), ID_BATCH):
            event_filter = EventFilter(
                occurred=EventOccurredFilter(since=since),
                id=EventIDFilter(id=ids[start : start + ID_BATCH]),
            )
            found.extend(await _read_all(client, event_filter))
    return found


@task(name="Send missed events again", cache_policy=NONE, retries=2, retry_delay_seconds=2)
async def resend_events(events: list[Event]) -> int:
    """Send events as built (no run context added: copies must match as the originals did).

    Retrying is safe: every id is derived, and the server keeps an id once.
    """
    async with EventSink(attach_run_context=False) as sink:
        await sink.send(events)
    return len(events)


def as_copy(event: ReceivedEvent, new_id: UUID) -> Event:
    """The event as its emitter sent it, under ``new_id``, without the server's ``received``
    and without ``follows``: the trigger service holds an event back until the one it follows
    has been processed, which for a missed event is long past (or was itself forgotten)."""
    data = event.model_dump(exclude={"received", "follows"})
    return Event.model_validate(data | {"id": new_id})
