"""Which automations can be checked, and whether one of them covers an event.

Checked: enabled automations whose trigger reacts to every single matching event (an event
trigger, reactive, threshold 1, no time window, no ``after``) with a ``run-deployment`` action:
for those, one covered event must lead to one ``action.executed`` event. Any other automation
(proactive, counting, compound) has no such one-to-one rule and is listed as not checked.

``covers`` applies Prefect's own rules for ``expect``, ``match`` and ``match_related``
(``ResourceSpecification.includes`` and ``matches``), as the server's trigger does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from prefect.events.schemas.automations import Automation, EventTrigger, Posture
from prefect.events.schemas.events import ReceivedEvent, ResourceSpecification, matches

RUN_DEPLOYMENT = "run-deployment"


@dataclass(frozen=True)
class CheckedAutomation:
    """An automation whose every covered event must start one deployment run."""

    name: str
    trigger: EventTrigger

    @property
    def expected_events(self) -> list[str]:
        return sorted(self.trigger.expect)


@dataclass(frozen=True)
class UncheckedAutomation:
    name: str
    reason: str


def classify(
    automations: list[Automation],
) -> tuple[list[CheckedAutomation], list[UncheckedAutomation]]:
    """Split automations into those checked and those left alone (with why)."""
    checked: list[CheckedAutomation] = []
    unchecked: list[UncheckedAutomation] = []
    for automation in automations:
        reason = why_unchecked(automation)
        if reason is None:
            assert isinstance(automation.trigger, EventTrigger)
            checked.append(CheckedAutomation(automation.name, automation.trigger))
        elif reason != "":
            unchecked.append(UncheckedAutomation(automation.name, reason))
    return checked, unchecked


def why_unchecked(automation: Automation) -> str | None:
    """None if checked; "" if it starts no deployment (nothing to report); else the reason."""
    if not any(action.type == RUN_DEPLOYMENT for action in automation.actions):
        return ""
    if not automation.enabled:
        return "paused"
    trigger = automation.trigger
    if not isinstance(trigger, EventTrigger):
        return f"a {trigger.type} trigger, not one run per event"
    if trigger.posture != Posture.Reactive or trigger.threshold != 1:
        return "not one run per event (proactive, or a threshold above 1)"
    if trigger.within != timedelta(0) or trigger.after:
        return "not one run per event (a time window or an 'after' event)"
    if not trigger.expect:
        return "expects every event"
    if any("*" in name[:-1] for name in trigger.expect):
        return "an expected event name with '*' before its end"
    return None


def covers(trigger: EventTrigger, event: ReceivedEvent) -> bool:
    """Whether the trigger reacts to the event (Prefect's matching rules)."""
    if not any(matches(expected, event.event) for expected in trigger.expect):
        return False
    if not _spec(trigger.match).includes([event.resource]):
        return False
    related = trigger.match_related
    specs = related if isinstance(related, list) else [related]
    return all(_spec(spec).includes(event.related) for spec in specs)


def _spec(value: ResourceSpecification | dict[str, str | list[str]]) -> ResourceSpecification:
    """Prefect coerces a trigger's specs on validation; the type still admits a plain dict."""
    return value if isinstance(value, ResourceSpecification) else ResourceSpecification(value)
