"""A new event is missed once its automations passed it, or after the grace (the fallback)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from uuid import UUID

from redelivery.backlog import PASSED_SETTLE, Acted, ActedOn, missed_by, not_acted, passed_until

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
GRACE = timedelta(minutes=15)
#: the event checked: received 3 minutes ago, well inside the grace
EVENT = uuid.uuid4()
RECEIVED = NOW - timedelta(minutes=3)


def acted_on(received: datetime | None, executed: datetime) -> dict[UUID, Acted]:
    """One other event an automation acted on."""
    return {uuid.uuid4(): Acted(received=received, executed=executed)}


def missed(
    *by_automation: dict[UUID, Acted],
    received: datetime = RECEIVED,
    ids: set[UUID] | None = None,
    follows: bool = False,
) -> tuple[str, ...]:
    acted = {
        f"automation-{n}": ActedOn.of(by_id, now=NOW)
        for n, by_id in enumerate(by_automation, start=1)
    }
    return missed_by(ids or {EVENT}, received, acted, now=NOW, grace=GRACE, follows=follows)


def test_an_event_passed_long_enough_ago_by_a_later_one_is_missed_before_the_grace() -> None:
    later = acted_on(RECEIVED + timedelta(seconds=5), NOW - PASSED_SETTLE)
    assert missed(later) == ("automation-1",)


def test_an_event_that_follows_another_is_left_to_the_grace_even_when_passed() -> None:
    """Prefect holds such an event back until its predecessor arrives: later ones pass it."""
    later = acted_on(RECEIVED + timedelta(seconds=5), NOW - PASSED_SETTLE)
    assert missed(later, follows=True) == ()
    assert missed(later, follows=True, received=NOW - GRACE) == ("automation-1",)


def test_a_later_event_acted_on_only_seconds_ago_does_not_pass_it_yet() -> None:
    # its own action may still be running behind the later one's
    later = acted_on(RECEIVED + timedelta(seconds=5), NOW - timedelta(seconds=10))
    assert missed(later) == ()


def test_with_only_earlier_events_acted_on_it_waits_for_the_grace() -> None:
    earlier = acted_on(RECEIVED - timedelta(seconds=5), NOW - timedelta(minutes=2))
    same_time = acted_on(RECEIVED, NOW - timedelta(minutes=2))  # not later: does not pass it
    assert missed(earlier | same_time) == ()
    assert missed(earlier, received=NOW - GRACE) == ("automation-1",)


def test_without_any_event_acted_on_the_grace_decides() -> None:
    assert missed({}) == ()
    assert missed({}, received=NOW - GRACE + timedelta(seconds=1)) == ()
    assert missed({}, received=NOW - GRACE) == ("automation-1",)


def test_an_event_older_than_the_grace_is_missed_as_before() -> None:
    earlier = acted_on(NOW - timedelta(hours=1), NOW - timedelta(minutes=50))
    assert missed(earlier, {}, received=NOW - timedelta(minutes=20)) == (
        "automation-1",
        "automation-2",
    )


def test_an_event_acted_on_is_not_missed_under_its_own_id_or_a_copys() -> None:
    copy = uuid.uuid4()
    later = acted_on(RECEIVED + timedelta(seconds=5), NOW - timedelta(minutes=5))
    itself = {EVENT: Acted(received=RECEIVED, executed=NOW - timedelta(minutes=2))}
    assert missed(later | itself) == ()
    assert missed(itself, received=NOW - timedelta(hours=1)) == ()
    a_copy = {copy: Acted(received=NOW - timedelta(minutes=1), executed=NOW)}
    assert missed(later | a_copy, ids={EVENT, copy}) == ()


def test_one_automation_passing_it_shows_the_others_missed_it_too() -> None:
    """The trigger service evaluates an event for every automation at once: one that acted on
    it and on a later event names those that did not as missing it (partly acted on)."""
    later = acted_on(RECEIVED + timedelta(seconds=5), NOW - PASSED_SETTLE)
    itself = {EVENT: Acted(received=RECEIVED, executed=NOW - timedelta(minutes=2))}
    assert missed(itself | later, {}) == ("automation-2",)
    assert missed(itself, {}) == ()  # nothing later acted on: wait for the grace


def test_an_acted_on_event_the_flow_did_not_read_passes_nothing() -> None:
    unknown = acted_on(None, NOW - timedelta(minutes=5))
    assert missed(unknown) == ()


def test_not_acted_names_the_automations_without_a_record_for_any_id() -> None:
    copy = uuid.uuid4()
    record = Acted(received=None, executed=NOW)
    acted = {
        name: ActedOn.of(events, now=NOW)
        for name, events in {"b": {copy: record}, "a": {}, "c": {uuid.uuid4(): record}}.items()
    }
    assert not_acted({EVENT, copy}, acted) == ("a", "c")


def test_an_automation_has_passed_up_to_the_latest_event_it_acted_on_long_enough_ago() -> None:
    first = Acted(received=NOW - timedelta(minutes=9), executed=NOW - timedelta(minutes=8))
    second = Acted(received=NOW - timedelta(minutes=4), executed=NOW - PASSED_SETTLE)
    running = Acted(received=NOW - timedelta(minutes=2), executed=NOW - timedelta(seconds=30))
    assert passed_until([first, second, running], now=NOW) == second.received
    assert passed_until([running], now=NOW) is None
