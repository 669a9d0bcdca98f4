"""Resend, wait or give up, from the records earlier runs left as events."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from prefect.events.schemas.events import ReceivedEvent

from redelivery.ledger import Ledger, gave_up_marker, read_ledger, sent_marker
from redelivery.plan import RESEND_SPACING, Missed, plan

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
SETTLE = timedelta(minutes=6)


def missed_event() -> ReceivedEvent:
    return ReceivedEvent(
        occurred=NOW - timedelta(hours=2),
        received=NOW - timedelta(minutes=10),
        event="compliance.vendor_discovered",
        resource={"prefect.resource.id": "compliance.discoveredvendor.dv-1"},
        id=uuid.uuid4(),
    )


def received(marker_event: object, at: datetime) -> ReceivedEvent:
    data = marker_event.model_dump()  # type: ignore[attr-defined]
    return ReceivedEvent(**(data | {"occurred": at, "received": at}))


def ledger_of(event: ReceivedEvent, *sent_at: datetime, gave_up: bool = False) -> Ledger:
    markers = [
        received(sent_marker(event, ["promote"], attempt), at)
        for attempt, at in enumerate(sent_at, start=1)
    ]
    if gave_up:
        markers.append(received(gave_up_marker(event, ["promote"], len(sent_at)), NOW))
    return read_ledger(markers)


def decide(
    event: ReceivedEvent, ledger: Ledger, max_attempts: int = 3, settle: timedelta = SETTLE
) -> str:
    result = plan(
        [Missed(event, ("promote",))], ledger, now=NOW, max_attempts=max_attempts, settle=settle
    )
    if result.resend:
        return f"resend {result.resend[0][1]}"
    if result.give_up:
        return f"give up after {result.give_up[0][1]}"
    assert len(result.waiting) == 1
    return "wait"


def test_a_newly_missed_event_is_resent_as_attempt_one() -> None:
    event = missed_event()
    assert decide(event, Ledger()) == "resend 1"


def test_a_resent_event_waits_for_prefect_then_for_the_servers_dedupe_window() -> None:
    event = missed_event()
    assert decide(event, ledger_of(event, NOW - timedelta(minutes=2))) == "wait"
    assert decide(event, ledger_of(event, NOW - SETTLE)) == "resend 2"
    # with no settle time, the server's 5-minute dedupe still spaces the resends
    just_under = NOW - RESEND_SPACING + timedelta(seconds=1)
    assert decide(event, ledger_of(event, just_under), settle=timedelta(0)) == "wait"
    assert decide(event, ledger_of(event, NOW - RESEND_SPACING), settle=timedelta(0)) == "resend 2"


def test_after_the_last_attempt_and_the_settle_time_the_event_is_given_up() -> None:
    event = missed_event()
    times = [NOW - timedelta(minutes=m) for m in (30, 20, 3)]
    assert decide(event, ledger_of(event, *times)) == "wait"  # Prefect may still act
    times[-1] = NOW - SETTLE
    assert decide(event, ledger_of(event, *times)) == "give up after 3"
    assert decide(event, ledger_of(event, *times[:1]), max_attempts=1) == "give up after 1"


def test_the_ledger_counts_attempts_once_and_remembers_giving_up() -> None:
    event, other = missed_event(), missed_event()
    first = received(sent_marker(event, ["promote"], 1), NOW - timedelta(minutes=9))
    again = received(sent_marker(event, ["promote"], 1), NOW - timedelta(minutes=9))
    second = received(sent_marker(event, ["promote"], 2), NOW - timedelta(minutes=3))
    done = received(gave_up_marker(other, ["promote"], 2), NOW)
    ledger = read_ledger([second, first, again, done])
    assert ledger.attempts == {event.id: 2}
    assert ledger.last_sent == {event.id: NOW - timedelta(minutes=3)}
    assert ledger.gave_up == {other.id}
    assert ledger.followed() == {event.id}
    assert first.id == again.id  # a retried task records an attempt under the same id


def test_a_record_names_the_missed_event_its_resource_and_automations() -> None:
    event = missed_event()
    marker = sent_marker(event, ["promote", "notify"], 2)
    assert marker.resource.id == f"prefect.event.{event.id}"
    assert marker.payload == {
        "attempt": 2,
        "event": "compliance.vendor_discovered",
        "event_resource": "compliance.discoveredvendor.dv-1",
        "automations": ["promote", "notify"],
    }
    assert sent_marker(event, ["promote"], 3).id != marker.id
    assert gave_up_marker(event, ["promote"], 2).id != marker.id
