"""Resend, wait or give up, from the records earlier runs left as events."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from prefect.events.schemas.events import ReceivedEvent

from redelivery.ledger import Ledger, copy_id, gave_up_marker, read_ledger, sent_marker
from redelivery.plan import NO_RUN, PARTLY_ACTED, Missed, plan

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
        markers.append(received(gave_up_marker(event, ["promote"], len(sent_at), NO_RUN), NOW))
    return read_ledger(markers)


def decide(
    event: ReceivedEvent, ledger: Ledger, max_attempts: int = 3, *, partly_acted: bool = False
) -> str:
    missed = Missed(event, ("promote",), partly_acted=partly_acted)
    result = plan([missed], ledger, now=NOW, max_attempts=max_attempts, settle=SETTLE)
    if result.resend:
        return f"resend {result.resend[0][1]}"
    if result.give_up:
        _, attempts, why = result.give_up[0]
        return f"give up after {attempts}: {why}"
    assert len(result.waiting) == 1
    return "wait"


def test_a_newly_missed_event_is_resent_as_attempt_one() -> None:
    event = missed_event()
    assert decide(event, Ledger()) == "resend 1"


def test_a_resent_event_gets_the_settle_time_before_it_is_sent_again() -> None:
    event = missed_event()
    assert decide(event, ledger_of(event, NOW - timedelta(minutes=2))) == "wait"
    assert decide(event, ledger_of(event, NOW - SETTLE)) == "resend 2"


def test_an_event_some_automations_acted_on_is_given_up_without_a_resend() -> None:
    event = missed_event()
    assert decide(event, Ledger(), partly_acted=True) == f"give up after 0: {PARTLY_ACTED}"


def test_after_the_last_attempt_and_the_settle_time_the_event_is_given_up() -> None:
    event = missed_event()
    times = [NOW - timedelta(minutes=m) for m in (30, 20, 3)]
    assert decide(event, ledger_of(event, *times)) == "wait"  # Prefect may still act
    times[-1] = NOW - SETTLE
    assert decide(event, ledger_of(event, *times)) == f"give up after 3: {NO_RUN}"
    assert (
        decide(event, ledger_of(event, *times[:1]), max_attempts=1) == f"give up after 1: {NO_RUN}"
    )


def test_the_ledger_counts_attempts_once_and_remembers_giving_up() -> None:
    event, other = missed_event(), missed_event()
    first = received(sent_marker(event, ["promote"], 1), NOW - timedelta(minutes=9))
    again = received(sent_marker(event, ["promote"], 1), NOW - timedelta(minutes=9))
    second = received(sent_marker(event, ["promote"], 2), NOW - timedelta(minutes=3))
    done = received(gave_up_marker(other, ["promote"], 2, NO_RUN), NOW)
    ledger = read_ledger([second, first, again, done])
    assert ledger.attempts == {event.id: 2}
    assert ledger.last_sent == {event.id: NOW - timedelta(minutes=3)}
    assert ledger.gave_up == {other.id}
    assert ledger.followed() == {event.id}
    assert first.id == again.id  # a retried task records an attempt under the same id
    # the copies sent are known, so they are never taken for new events
    assert ledger.originals == {copy_id(event.id, 1): event.id, copy_id(event.id, 2): event.id}
    assert ledger.copies_of(event.id) == {copy_id(event.id, 1), copy_id(event.id, 2)}


def test_a_record_names_the_missed_event_its_resource_and_automations() -> None:
    event = missed_event()
    marker = sent_marker(event, ["promote", "notify"], 2)
    assert marker.resource.id == f"prefect.event.{event.id}"
    assert marker.payload == {
        "attempt": 2,
        "event": "compliance.vendor_discovered",
        "event_resource": "compliance.discoveredvendor.dv-1",
        "automations": ["promote", "notify"],
        "copy_id": str(copy_id(event.id, 2)),
    }
    assert copy_id(event.id, 2) not in {event.id, copy_id(event.id, 1)}
    assert sent_marker(event, ["promote"], 3).id != marker.id
    assert gave_up_marker(event, ["promote"], 2, NO_RUN).id != marker.id
