"""Runbook: events that an event-triggered deployment never got its run for are sent again.

Prefect's trigger service can drop an event: on SQLite a burst makes its evaluation fail with
"database is locked", or the run-deployment action fails with a 503 from the busy database; a
server restart forgets events not yet evaluated. The deployment never gets its run, and nothing
else would notice. The deployment ``redeliver-missed-events`` runs this flow every 5 minutes:

1. Take the automations that start one deployment run per event (``redelivery/automations.py``);
   others are listed as not checked.
2. For each, the events it covers received in the last ``window_minutes``, plus those resent by
   earlier runs, against the ``prefect.automation.action.executed`` events of its runs. An event
   without one (for the original or any copy of it) is missed once Prefect has passed it (see
   below) or it is older than ``grace_minutes``.
3. Send a copy of a missed event under a new id (the server ignores an id it has evaluated
   for 30 minutes, even when the action failed): Prefect matches it, fills in the parameters
   and starts the run as it would have. Each resend is recorded as a
   ``compliance.redelivery.sent`` event (``redelivery/ledger.py``), at most ``max_attempts``
   times, ``grace_minutes`` apart.
4. An event still without a run ``grace_minutes`` after the last resend, or one that some of
   its automations acted on and others not (a copy would repeat the former), is reported (an
   artifact and a ``compliance.redelivery.gave-up`` event) and the run ends Failed, for an
   operator.

An event still queued in the trigger service (a SQLite server deep in a burst falls minutes
behind) is not missed: the service takes events in the order received, so an event counts as
dropped only once an automation covering it acted on a later event 3 minutes ago or longer
(``redelivery/backlog.py``; not for an event that ``follows`` another, which Prefect may hold
back). Otherwise ``grace_minutes`` decides: a backlog longer than it gets copies sent, and a
second run of those events (every deployment's flow is safe to run again).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Annotated
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact
from prefect.events.schemas.events import ReceivedEvent
from pydantic import BaseModel

from compliance_api.errors import InputError
from redelivery.automations import CheckedAutomation, classify, covers
from redelivery.backlog import PASSED_SETTLE, Acted, ActedOn, missed_by, not_acted
from redelivery.ledger import Ledger, copy_id, gave_up_marker, read_ledger, sent_marker
from redelivery.plan import Missed, Plan, plan
from runtime.form import title
from tasks.redelivery import (
    as_copy,
    read_acted_on,
    read_automations,
    read_covered_events,
    read_events_by_id,
    read_redelivery_records,
    resend_events,
)

#: for an event no later event has passed: longer than the trigger service's backlog in a
#: SQLite burst (up to about 9 minutes in the bench), as a copy of a queued event would start a
#: second run
DEFAULT_GRACE_MINUTES = 15.0
DEFAULT_WINDOW_MINUTES = 30.0
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_LOOKBACK_HOURS = 24.0
#: a resent event is looked up by id this far back (its own time may lie before the lookback)
FOLLOW_UP_DAYS = 30


class MissedEventRow(BaseModel):
    event_id: str
    event: str
    resource: str
    received: datetime
    automations: list[str]
    attempt: int
    reason: str = ""


class RedeliveryReport(BaseModel):
    """What one run found and did."""

    automations_checked: list[str] = []
    automations_not_checked: dict[str, str] = {}
    events_checked: int = 0
    resent: list[MissedEventRow] = []
    given_up: list[MissedEventRow] = []
    waiting: int = 0


class EventsNotRedelivered(RuntimeError):
    """Events still without their run after the last resend: they wait for an operator."""


def _check_minutes(parameter: str, value: float, *, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InputError(parameter, value, f"must be a number from {low:g} to {high:g}")
    return float(value)


def _check_max_attempts(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10:
        raise InputError("max_attempts", value, "must be a whole number from 1 to 10")
    return value


@flow(name="redeliver-missed-events", log_prints=False)
async def redeliver_missed_events(
    grace_minutes: Annotated[float, title("Grace (minutes)")] = DEFAULT_GRACE_MINUTES,
    window_minutes: Annotated[float, title("Window (minutes)")] = DEFAULT_WINDOW_MINUTES,
    max_attempts: Annotated[int, title("Max resends")] = DEFAULT_MAX_ATTEMPTS,
    lookback_hours: Annotated[float, title("Lookback (hours)")] = DEFAULT_LOOKBACK_HOURS,
) -> RedeliveryReport:
    """Send again the events whose event-triggered deployment run never started, or report them.

    Args:
        grace_minutes: An event received more recently is left to Prefect (it may still be
            queued) unless an automation covering it acted on a later event 3 minutes ago or
            longer; also the wait after a resend before it counts as failed. Keep it above the
            trigger service's backlog: a queued event nothing later passed gets a second run.
        window_minutes: Events received longer ago than this are not checked for the first
            time (up to a day).
        max_attempts: Resends of one event before it is reported for an operator (1 to 10).
        lookback_hours: How far back an event's own time may lie (a bridged audit entry keeps
            the entry's date).
    """
    grace = timedelta(minutes=_check_minutes("grace_minutes", grace_minutes, low=0, high=60))
    window = timedelta(
        minutes=_check_minutes("window_minutes", window_minutes, low=0, high=24 * 60)
    )
    if window < grace:
        raise InputError("window_minutes", window_minutes, "must not be below grace_minutes")
    max_attempts = _check_max_attempts(max_attempts)
    lookback = timedelta(
        hours=_check_minutes("lookback_hours", lookback_hours, low=1, high=24 * 30)
    )
    logger = get_run_logger()
    now = datetime.now(UTC)

    checked, unchecked = classify(await read_automations())
    report = RedeliveryReport(
        automations_checked=[automation.name for automation in checked],
        automations_not_checked={item.name: item.reason for item in unchecked},
    )
    ledger = read_ledger(await read_redelivery_records(now - timedelta(days=FOLLOW_UP_DAYS)))
    covered = await _covered(checked, ledger, now, grace, window, lookback)
    report.events_checked = len(covered.candidates)
    missed = await _missed(covered, ledger, now, grace)
    decided = plan(missed, ledger, now=now, max_attempts=max_attempts, settle=grace)
    report.waiting = len(decided.waiting)
    await _resend(decided, report)
    if decided.give_up:
        await _give_up(decided, report)
    logger.info(
        "Checked %s events of %s automations: %s resent, %s given up, %s waiting",
        report.events_checked,
        len(checked),
        len(report.resent),
        len(report.given_up),
        report.waiting,
    )
    if report.given_up:
        raise EventsNotRedelivered(
            f"{len(report.given_up)} events still have no run after up to {max_attempts} "
            "resends (see the artifact 'missed-events'); start their deployments by hand"
        )
    return report


@dataclass
class Covered:
    """What the checked automations cover: the events to check with the automations covering
    each, and when each covered event read was received (a later one acted on passes a
    candidate)."""

    candidates: dict[UUID, ReceivedEvent] = field(default_factory=dict)
    covering: defaultdict[UUID, set[str]] = field(default_factory=lambda: defaultdict(set))
    received: dict[UUID, datetime] = field(default_factory=dict)

    def add(self, event: ReceivedEvent, automation: str) -> None:
        self.candidates[event.id] = event
        self.covering[event.id].add(automation)


async def _covered(
    checked: list[CheckedAutomation],
    ledger: Ledger,
    now: datetime,
    grace: timedelta,
    window: timedelta,
    lookback: timedelta,
) -> Covered:
    """Candidates: events received inside the window (up to ``PASSED_SETTLE`` ago: a newer one
    cannot be passed yet, unless the grace is shorter), and those resent before."""
    covered = Covered()
    followed = ledger.followed()
    newest = now - min(grace, PASSED_SETTLE)
    for automation in checked:
        for event in await read_covered_events(automation, now - lookback, now):
            covered.received[event.id] = event.received
            if event.id in ledger.originals:
                continue  # a copy this flow sent: it is checked as its original
            new = now - window <= event.received <= newest
            if event.id not in ledger.gave_up and (new or event.id in followed):
                covered.add(event, automation.name)
    unseen = sorted(followed - set(covered.candidates), key=str)
    if unseen:
        for event in await read_events_by_id(unseen, now - timedelta(days=FOLLOW_UP_DAYS)):
            for automation in checked:
                if covers(automation.trigger, event):
                    covered.add(event, automation.name)
    return covered


async def _missed(
    covered: Covered, ledger: Ledger, now: datetime, grace: timedelta
) -> list[Missed]:
    """Candidates that some automation covering them did not act on (for the original or a
    copy): a resent one at once (``plan`` gives it time), a new one once Prefect passed it or
    the grace is over."""
    if not covered.candidates:
        return []
    names = sorted({name for names in covered.covering.values() for name in names})
    earliest = min(event.received for event in covered.candidates.values()) - timedelta(minutes=1)
    executed = await read_acted_on(names, earliest)
    acted_on = {name: _acted_on(executed.get(name, {}), covered.received, now) for name in names}
    followed = ledger.followed()
    missed: list[Missed] = []
    for event_id, event in sorted(covered.candidates.items(), key=lambda item: item[1].received):
        ids = {event_id} | ledger.copies_of(event_id)
        acted = {name: acted_on[name] for name in covered.covering[event_id]}
        if event_id in followed:
            left = not_acted(ids, acted)
        else:
            left = missed_by(
                ids, event.received, acted, now=now, grace=grace, follows=event.follows is not None
            )
        if left:
            missed.append(Missed(event, left, partly_acted=len(left) < len(acted)))
    return missed


def _acted_on(
    executed: dict[UUID, datetime], received: dict[UUID, datetime], now: datetime
) -> ActedOn:
    """An automation's executed records joined with the received times of their events (copies
    this flow sent included: a copy acted on passes earlier events too)."""
    events = {
        event_id: Acted(received=received.get(event_id), executed=at)
        for event_id, at in executed.items()
    }
    return ActedOn.of(events, now=now)


async def _resend(decided: Plan, report: RedeliveryReport) -> None:
    if not decided.resend:
        return
    logger = get_run_logger()
    await resend_events(
        [as_copy(item.event, copy_id(item.event.id, attempt)) for item, attempt in decided.resend]
    )
    await resend_events(
        [sent_marker(item.event, item.automations, attempt) for item, attempt in decided.resend]
    )
    for item, attempt in decided.resend:
        row = _row(item, attempt)
        report.resent.append(row)
        logger.warning(
            "Resent %s %s (%s; received %s): %s did not start a run (attempt %s)",
            row.event,
            row.event_id,
            row.resource,
            row.received.isoformat(),
            ", ".join(row.automations),
            attempt,
        )
    await _publish(report)


async def _give_up(decided: Plan, report: RedeliveryReport) -> None:
    markers = [
        gave_up_marker(item.event, item.automations, n, why) for item, n, why in decided.give_up
    ]
    await resend_events(markers)
    report.given_up = [_row(item, n, why) for item, n, why in decided.give_up]
    await _publish(report)


def _row(item: Missed, attempt: int, reason: str = "") -> MissedEventRow:
    return MissedEventRow(
        event_id=str(item.event.id),
        event=item.event.event,
        resource=item.event.resource.id,
        received=item.event.received,
        automations=list(item.automations),
        attempt=attempt,
        reason=reason,
    )


async def _publish(report: RedeliveryReport) -> None:
    lines = [
        "| event | resource | received | automation | resends | outcome |",
        "|---|---|---|---|---|---|",
    ]
    for rows in (report.resent, report.given_up):
        for row in rows:
            outcome = f"**given up**: {row.reason}" if row.reason else "resent"
            lines.append(
                f"| `{row.event}` `{row.event_id}` | `{row.resource}` | "
                f"{row.received.isoformat(timespec='seconds')} | {', '.join(row.automations)} | "
                f"{row.attempt} | {outcome} |"
            )
    next_step = (
        "\n\nGiven up: open the event in the Event Feed, then run the automation's deployment "
        "by hand with the parameters it would have set (every flow is safe to run again)."
        if report.given_up
        else ""
    )
    await acreate_markdown_artifact(
        key="missed-events",
        markdown=(
            "## Events whose deployment run never started\n\n"
            "A resent event goes through its automation again as a copy under a new id; the "
            "next runs check that it started its run.\n\n" + "\n".join(lines) + next_step
        ),
        description=f"{len(report.resent)} resent, {len(report.given_up)} given up",
    )
