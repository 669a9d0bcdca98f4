"""Whether an event not resent yet is missed, or may still be queued in Prefect's trigger service.

The trigger service evaluates events in the order the server received them, and runs an event's
actions before those of later events. So once an automation covering an event has run its
action for a later event, at least ``PASSED_SETTLE`` ago, the service has *passed* the event:
its evaluation is over, and its own action, had it run, would be recorded by now. Such an event
is missed at once; without a later event acted on, only the grace tells a dropped event from a
queued one.

Prefect holds back an event whose ``follows`` predecessor it has not seen (up to 15 minutes),
and later events pass it meanwhile: such an event (Prefect's own flow-run state events, crash
recovery's trigger, set ``follows``; the bridge's events do not) is judged by the grace alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

#: after a later event's action ran, the time the passed event's own action gets to be recorded:
#: Prefect's action service runs two actions side by side, and its client retries a request that
#: a busy database answers 503 five times with backoff (2 + 4 + 8 + 16 + 32 s, plus jitter)
PASSED_SETTLE = timedelta(minutes=3)


@dataclass(frozen=True)
class Acted:
    """An automation ran its action for an event: when the server received that event (None if
    the flow did not read it) and when the action ran."""

    received: datetime | None
    executed: datetime


@dataclass(frozen=True)
class ActedOn:
    """The events one automation ran its action for, and how far it has passed: every event
    received before ``passed_until`` (computed once, not per event checked)."""

    events: Mapping[UUID, Acted]
    passed_until: datetime | None

    @classmethod
    def of(cls, events: Mapping[UUID, Acted], *, now: datetime) -> ActedOn:
        return cls(events, passed_until(events.values(), now=now))


def passed_until(acted: Iterable[Acted], *, now: datetime) -> datetime | None:
    """When the latest event acted on ``PASSED_SETTLE`` ago or longer was received."""
    settled = [
        item.received
        for item in acted
        if item.received is not None and item.executed <= now - PASSED_SETTLE
    ]
    return max(settled, default=None)


def not_acted(event_ids: Set[UUID], acted: Mapping[str, ActedOn]) -> tuple[str, ...]:
    """The automations (names in ``acted``) without a record for the event under any of
    ``event_ids`` (the original and its copies)."""
    return tuple(name for name in sorted(acted) if not event_ids & acted[name].events.keys())


def missed_by(
    event_ids: Set[UUID],
    received: datetime,
    acted: Mapping[str, ActedOn],
    *,
    now: datetime,
    grace: timedelta,
    follows: bool = False,
) -> tuple[str, ...]:
    """The automations covering an event (the names in ``acted``) that missed it; none while it
    may still be queued: received within the grace and passed by none of them (the service
    evaluates an event for every automation at once, so one passing it is enough). An event that
    ``follows`` another may be held back, so passing it proves nothing."""
    left = not_acted(event_ids, acted)
    if not left:
        return ()
    passed = not follows and any(
        item.passed_until is not None and item.passed_until > received for item in acted.values()
    )
    return left if passed or received <= now - grace else ()
