"""The redelivery's parameters: a bad value stops it, naming the field, before any read.

The flow's behaviour against a real server (a dropped event resent and run, an event given up
and reported once) is in tests/deployments/test_e2e.py; its decisions in tests/redelivery/.
"""

from __future__ import annotations

from typing import Any

import pytest

from compliance_api.errors import InputError
from flows.redeliver_missed_events import redeliver_missed_events


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"grace_minutes": -1}, "grace_minutes"),
        ({"grace_minutes": "6"}, "grace_minutes"),
        ({"window_minutes": 24 * 60 + 1}, "window_minutes"),
        ({"grace_minutes": 10, "window_minutes": 8}, "window_minutes"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"lookback_hours": 0.5}, "lookback_hours"),
    ],
)
async def test_a_bad_parameter_stops_the_run_naming_the_field(
    parameters: dict[str, Any], field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def no_reads() -> None:
        raise AssertionError("read the Prefect API before checking its input")

    monkeypatch.setattr("flows.redeliver_missed_events.read_automations", no_reads)
    with pytest.raises(InputError) as error:
        await redeliver_missed_events.fn(**parameters)
    assert error.value.field == field
    assert f"{field}={parameters[field]!r}" in str(error.value)
