"""Deciding, per missed event, whether to send it again, wait, or give up.

After a resend Prefect gets ``settle`` (the flow's grace) to start the run before the event
counts as missed again. An event that some automations acted on and others did not is given up
at once: a copy would make the ones that acted act again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from prefect.events.schemas.events import ReceivedEvent

from redelivery.ledger import Ledger

PARTLY_ACTED = "other automations acted on it: a copy would make them act again"
NO_RUN = "no run after the last resend"


@dataclass(frozen=True)
class Missed:
    """An event that automations covering it did not act on."""

    event: ReceivedEvent
    automations: tuple[str, ...]
    #: some automations covering it acted on it
    partly_acted: bool = False


@dataclass
class Plan:
    resend: list[tuple[Missed, int]] = field(default_factory=list)
    #: (event, attempts so far, why)
    give_up: list[tuple[Missed, int, str]] = field(default_factory=list)
    waiting: list[Missed] = field(default_factory=list)


def plan(
    missed: list[Missed],
    ledger: Ledger,
    *,
    now: datetime,
    max_attempts: int,
    settle: timedelta,
) -> Plan:
    """Attempt n+1 for an event resent n < max_attempts times; give up on one resent
    max_attempts times; events given up before are not in ``missed``."""
    result = Plan()
    for item in missed:
        attempts = ledger.attempts.get(item.event.id, 0)
        last = ledger.last_sent.get(item.event.id)
        since_last = now - last if last is not None else None
        if item.partly_acted:
            result.give_up.append((item, attempts, PARTLY_ACTED))
        elif since_last is not None and since_last < settle:
            result.waiting.append(item)
        elif attempts >= max_attempts:
            result.give_up.append((item, attempts, NO_RUN))
        else:
            result.resend.append((item, attempts + 1))
    return result
