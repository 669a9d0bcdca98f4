"""Deciding, per missed event, whether to send it again, wait, or give up.

After a resend Prefect gets ``settle`` (the flow's grace) to start the run before the event
counts as missed again. Another resend waits for ``RESEND_SPACING`` besides: the Prefect server
drops an event id it has published in the last five minutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from prefect.events.schemas.events import ReceivedEvent

from redelivery.ledger import Ledger

#: Prefect's publisher drops an event id seen in the last 5 minutes; a little more than that
RESEND_SPACING = timedelta(minutes=5, seconds=30)


@dataclass(frozen=True)
class Missed:
    """An event that automations covering it did not act on."""

    event: ReceivedEvent
    automations: tuple[str, ...]


@dataclass
class Plan:
    resend: list[tuple[Missed, int]] = field(default_factory=list)
    give_up: list[tuple[Missed, int]] = field(default_factory=list)
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
        if since_last is not None and since_last < settle:
            result.waiting.append(item)
        elif attempts >= max_attempts:
            result.give_up.append((item, attempts))
        elif since_last is not None and since_last < RESEND_SPACING:
            result.waiting.append(item)
        else:
            result.resend.append((item, attempts + 1))
    return result
