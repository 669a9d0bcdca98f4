"""The record of redeliveries, kept as Prefect events (visible in the UI's event feed).

Each resend of a missed event is followed by a ``compliance.redelivery.sent`` event about it
(``prefect.event.<id>``, with the attempt); an event that still has no run after the last
attempt gets one ``compliance.redelivery.gave-up`` event. Their ids are derived from the missed
event's id and the attempt, so a retried task records an attempt once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from prefect.events import Event
from prefect.events.schemas.events import ReceivedEvent

from runtime.events import deterministic_event_id

SENT = "compliance.redelivery.sent"
GAVE_UP = "compliance.redelivery.gave-up"
EVENT_RESOURCE_PREFIX = "prefect.event."


@dataclass
class Ledger:
    """What earlier runs did, per missed event id."""

    attempts: dict[UUID, int] = field(default_factory=dict)
    last_sent: dict[UUID, datetime] = field(default_factory=dict)
    gave_up: set[UUID] = field(default_factory=set)

    def followed(self) -> set[UUID]:
        """Events resent before and not given up: each needs another look."""
        return set(self.attempts) - self.gave_up


def read_ledger(markers: Iterable[ReceivedEvent]) -> Ledger:
    ledger = Ledger()
    for marker in markers:
        missed_id = _missed_event_id(marker)
        if missed_id is None:
            continue
        if marker.event == GAVE_UP:
            ledger.gave_up.add(missed_id)
        elif marker.event == SENT:
            attempt = _attempt(marker)
            if attempt > ledger.attempts.get(missed_id, 0):
                ledger.attempts[missed_id] = attempt
            previous = ledger.last_sent.get(missed_id)
            if previous is None or marker.occurred > previous:
                ledger.last_sent[missed_id] = marker.occurred
    return ledger


def sent_marker(missed: ReceivedEvent, automations: Sequence[str], attempt: int) -> Event:
    return _marker(SENT, missed, automations, attempt)


def gave_up_marker(missed: ReceivedEvent, automations: Sequence[str], attempts: int) -> Event:
    return _marker(GAVE_UP, missed, automations, attempts)


def _marker(name: str, missed: ReceivedEvent, automations: Sequence[str], attempt: int) -> Event:
    return Event(
        id=deterministic_event_id(name, str(missed.id), str(attempt)),
        event=name,
        resource={
            "prefect.resource.id": f"{EVENT_RESOURCE_PREFIX}{missed.id}",
            "prefect.resource.name": missed.event,
        },
        related=[
            {
                "prefect.resource.id": missed.resource.id,
                "prefect.resource.role": "missed-event-resource",
            }
        ],
        payload={
            "attempt": attempt,
            "event": missed.event,
            "event_resource": missed.resource.id,
            "automations": list(automations),
        },
    )


def _missed_event_id(marker: ReceivedEvent) -> UUID | None:
    resource_id = marker.resource.id
    if not resource_id.startswith(EVENT_RESOURCE_PREFIX):
        return None
    try:
        return UUID(resource_id.removeprefix(EVENT_RESOURCE_PREFIX))
    except ValueError:
        return None


def _attempt(marker: ReceivedEvent) -> int:
    value = marker.payload.get("attempt")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
