"""Which automations the redelivery checks, and Prefect's matching rules in ``covers``."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prefect.events.actions import DoNothing, RunDeployment
from prefect.events.schemas.automations import (
    Automation,
    CompoundTrigger,
    EventTrigger,
    Posture,
)
from prefect.events.schemas.events import ReceivedEvent

from redelivery.automations import classify, covers


def trigger(**fields: Any) -> EventTrigger:
    values: dict[str, Any] = {
        "expect": {"compliance.vendor_discovered"},
        "match": {"compliance.target.type": "DiscoveredVendor"},
        "posture": Posture.Reactive,
        "threshold": 1,
        "within": timedelta(0),
    }
    return EventTrigger(**(values | fields))


def automation(name: str, *, enabled: bool = True, **fields: Any) -> Automation:
    actions = fields.pop("actions", [RunDeployment(source="selected", deployment_id=uuid.uuid4())])
    return Automation(
        id=uuid.uuid4(),
        name=name,
        enabled=enabled,
        trigger=fields.pop("trigger", trigger(**fields)),
        actions=actions,
    )


def event(name: str = "compliance.vendor_discovered", **resource: str) -> ReceivedEvent:
    labels = {"prefect.resource.id": "compliance.discoveredvendor.dv-1"}
    labels |= {"compliance.target.type": "DiscoveredVendor"} | resource
    return ReceivedEvent(
        occurred=datetime.now(UTC),
        received=datetime.now(UTC),
        event=name,
        resource=labels,
        related=[
            {"prefect.resource.id": "prefect.tag.write", "prefect.resource.role": "tag"},
        ],
        id=uuid.uuid4(),
    )


def test_one_run_per_event_automations_are_checked_and_the_rest_say_why() -> None:
    checked, unchecked = classify(
        [
            automation("promote"),
            automation("paused", enabled=False),
            automation("proactive", posture=Posture.Proactive),
            automation("counting", threshold=3),
            automation("windowed", within=timedelta(minutes=5)),
            automation("after", after={"compliance.vendor_created"}),
            automation("everything", expect=set()),
            automation("odd pattern", expect={"compliance.*.created"}),
            automation(
                "compound",
                trigger=CompoundTrigger(triggers=[trigger(), trigger()], require="all"),
            ),
            automation("notifies", actions=[DoNothing()]),
        ]
    )
    assert [a.name for a in checked] == ["promote"]
    reasons = {item.name: item.reason for item in unchecked}
    assert set(reasons) == {
        "paused",
        "proactive",
        "counting",
        "windowed",
        "after",
        "everything",
        "odd pattern",
        "compound",
    }
    assert reasons["paused"] == "paused"
    assert "threshold" in reasons["counting"]
    assert "notifies" not in reasons  # starts no deployment: nothing to check


@pytest.mark.parametrize(
    ("the_trigger", "the_event", "covered"),
    [
        (trigger(), event(), True),
        (trigger(), event("compliance.vendor_created"), False),
        (trigger(), event(**{"compliance.target.type": "Vendor"}), False),
        (trigger(expect={"compliance.vendor_*"}), event(), True),
        (trigger(match={"compliance.target.type": "!Vendor"}), event(), True),
        (
            trigger(
                match_related={
                    "prefect.resource.role": "tag",
                    "prefect.resource.id": "prefect.tag.write",
                }
            ),
            event(),
            True,
        ),
        (
            trigger(
                match_related={
                    "prefect.resource.role": "tag",
                    "prefect.resource.id": "prefect.tag.read",
                }
            ),
            event(),
            False,
        ),
    ],
)
def test_covers_applies_prefects_matching_rules(
    the_trigger: EventTrigger, the_event: ReceivedEvent, covered: bool
) -> None:
    assert covers(the_trigger, the_event) is covered
