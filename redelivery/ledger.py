"""The record of redeliveries, kept as Prefect events (visible in the UI's event feed).

A missed event is sent again as a copy under a new id (``copy_id``: derived from the original's
id and the attempt), because the server ignores an id it has already evaluated for 30 minutes
(an automation whose action failed has evaluated it). Each resend is followed by a
``compliance.redelivery.sent`` event about the original (``prefect.event.<id>``, with the
attempt and the copy's id); an event that still has no run after the last attempt gets one
``compliance.redelivery.gave-up`` event. All these ids are derived, so a retried task sends and
records an attempt once.
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
    #: copy id -> the original it was sent for
    originals: dict[UUID, UUID] = field(default_factory=dict)

    def copies_of(self, original: UUID) -> set[UUID]:
        return {copy for copy, of in self.originals.items() if of == original}

    def followed(self) -> set[UUID]:
        """Events resent before and not given up: each needs another look."""
        return set(self.attempts) - self.gave_up


def read_ledger(markers: Iterable[ReceivedEvent]) -> Ledger:
    ledger = Ledger()
    for marker in markers:
        missed_id = event_id_of(marker.resource.id)
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
            copy = _uuid(marker.payload.get("copy_id"))
            if copy is not None:
                ledger.originals[copy] = missed_id
    return ledger


def copy_id(original: UUID, attempt: int) -> UUID:
    """The id of the copy of ``original`` sent at ``attempt``."""
    return deterministic_event_id("redelivery-copy", str(original), str(attempt))


def sent_marker(missed: ReceivedEvent, automations: Sequence[str], attempt: int) -> Event:
    marker = _marker(SENT, missed, automations, attempt)
    marker.payload["copy_id"] = str(copy_id(missed.id, attempt))
    return marker


def gave_up_marker(
    missed: ReceivedEvent, automations: Sequence[str], attempts: int, reason: str
) -> Event:
    marker = _marker(GAVE_UP, missed, automations, attempts)
    marker.payload["reason"] = reason
    return marker


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


def event_id_of(resource_id: str) -> UUID | None:
    """The event id in a ``prefect.event.<id>`` resource id (a marker's resource, an executed
    record's triggering event); None for any other resource."""
    if not resource_id.startswith(EVENT_RESOURCE_PREFIX):
        return None
    return _uuid(resource_id.removeprefix(EVENT_RESOURCE_PREFIX))


def _uuid(value: object) -> UUID | None:
    try:
        return UUID(str(value)) if value is not None else None
    except ValueError:
        return None


def _attempt(marker: ReceivedEvent) -> int:
    value = marker.payload.get("attempt")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
