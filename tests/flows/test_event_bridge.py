"""bridge_event_log: one Prefect event per audit entry, exactly once, across runs and crashes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prefect.events import Event
from prefect.exceptions import ParameterTypeError
from prefect.variables import Variable

from audit_log.checkpoints import VariableCheckpointStore, exclusive_run
from audit_log.events import audit_event_id
from compliance_api.errors import InputError
from flows import event_bridge
from flows.event_bridge import bridge_event_log
from runtime.events import EventSink
from sandbox.runner import SandboxHandle
from tests.fixtures.runs import calls, no_calls, read_events, unique_name

pytestmark = pytest.mark.usefixtures("reads_env")

LOGS = "GET /v1/event-logs"


def seeded(sandbox: SandboxHandle) -> list[dict[str, Any]]:
    return sandbox.sandbox.tiers["commercial"].dataset.events


@pytest.fixture
def sent_ids(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every batch the bridge sends, as audit-entry ids (to compare runs)."""
    batches: list[list[str]] = []
    original = EventSink.send

    async def recording(self: EventSink, events: list[Event]) -> None:
        await original(self, events)
        batches.append([e.resource["compliance.audit.id"] for e in events])

    monkeypatch.setattr(EventSink, "send", recording)
    return batches


async def test_each_entry_once_across_runs_then_only_new_entries(reads_env: SandboxHandle) -> None:
    name = unique_name("bridge").replace("-", "_")
    window = seeded(reads_env)[-250:]
    total = len(window)
    first = await bridge_event_log(
        start_date=window[0]["date"], checkpoint_variable=name, page_size=50
    )
    assert (first.emitted, first.pages, first.duplicates_skipped) == (total, 5, 0)
    assert first.events_by_name["compliance.vendor_discovered"] == sum(
        e["action"] == "VENDOR_DISCOVERED" for e in window
    )
    second = await bridge_event_log(checkpoint_variable=name, page_size=50)
    assert second.emitted == 0
    assert calls(reads_env, LOGS) == 5 + 1

    vendor = reads_env.control.inject("vendor_discovered", name="Bridge Test Vendor")
    review = reads_env.control.inject("questionnaire_ready_for_review")
    third = await bridge_event_log(checkpoint_variable=name)
    assert third.emitted == 2
    assert third.events_by_name == {
        "compliance.vendor_discovered": 1,
        "compliance.questionnaire_ready_for_review": 1,
    }
    checkpoint = await VariableCheckpointStore(name).load()
    assert checkpoint is not None and checkpoint.last_event_id == review["event_log_id"]
    assert checkpoint.entries_total == total + 2

    stored = await read_events(ids=[audit_event_id(vendor["event_log_id"])], expect=1)
    assert len(stored) == 1
    event = stored[0]
    assert event.event == "compliance.vendor_discovered"
    assert event.resource.id == f"compliance.discoveredvendor.{vendor['id']}"
    assert event.resource["compliance.target.id"] == vendor["id"]
    assert event.resource["compliance.target.type"] == "DiscoveredVendor"
    assert event.resource["compliance.audit.id"] == vendor["event_log_id"]
    assert event.resource_in_role["actor"]["compliance.actor.id"] == "system"
    assert event.payload["audit_entry"]["targets"] == [
        {"id": vendor["id"], "type": "DiscoveredVendor"}
    ]


async def test_overlapping_runs_emit_each_entry_once(reads_env: SandboxHandle) -> None:
    name = unique_name("overlap").replace("-", "_")
    lock = unique_name("bridge-lock")
    start = seeded(reads_env)[-150]["date"]
    results = await asyncio.gather(
        bridge_event_log(start_date=start, checkpoint_variable=name, lock_name=lock),
        bridge_event_log(start_date=start, checkpoint_variable=name, lock_name=lock),
    )
    assert sorted(r.emitted for r in results) == [0, 150]
    assert calls(reads_env, LOGS) == 2 + 1  # the second run read one empty page

    async with exclusive_run(lock, 5):
        blocked = await bridge_event_log(
            checkpoint_variable=name, lock_name=lock, lock_wait_seconds=0.5
        )
    assert blocked.skipped and "held" in blocked.reason
    assert calls(reads_env, LOGS) == 3


async def test_crash_between_emit_and_checkpoint_replays_the_same_event_ids(
    reads_env: SandboxHandle, monkeypatch: pytest.MonkeyPatch, sent_ids: list[list[str]]
) -> None:
    name = unique_name("crash").replace("-", "_")
    entries = seeded(reads_env)[-120:]
    saves = 0
    original = VariableCheckpointStore.save

    async def dies_after_page_two(
        self: VariableCheckpointStore, checkpoint: Any, **options: Any
    ) -> bool:
        nonlocal saves
        saves += 1
        if saves >= 3:  # 1: the starting point, 2: after page 1, 3: after page 2
            raise RuntimeError("worker killed after sending page 2, before its checkpoint")
        return await original(self, checkpoint, **options)

    monkeypatch.setattr(VariableCheckpointStore, "save", dies_after_page_two)
    monkeypatch.setattr(event_bridge.save_log_checkpoint, "retries", 0)
    with pytest.raises(RuntimeError, match="worker killed"):
        await bridge_event_log(
            start_date=entries[0]["date"], checkpoint_variable=name, page_size=40
        )
    assert [len(batch) for batch in sent_ids] == [40, 40]
    crashed_page = sent_ids[1]

    monkeypatch.setattr(VariableCheckpointStore, "save", original)
    rerun = await bridge_event_log(checkpoint_variable=name, page_size=40)
    assert rerun.emitted == 80  # the unsaved page again, then the last one
    assert sent_ids[2] == crashed_page  # same entries, hence the same event ids
    assert [e["id"] for e in entries] == sent_ids[0] + sent_ids[2] + sent_ids[3]

    ids = [audit_event_id(entry_id) for entry_id in crashed_page]
    stored = await read_events(ids=ids, expect=len(ids))
    assert sorted(str(e.id) for e in stored) == sorted(str(i) for i in ids)  # once each


async def test_rejected_cursor_falls_back_to_date_without_duplicates(
    reads_env: SandboxHandle,
) -> None:
    name = unique_name("cursor").replace("-", "_")
    log = seeded(reads_env)
    boundary = log[-31]
    await Variable.aset(
        name,
        {
            "cursor": "not-a-cursor-of-this-service",
            "last_event_id": boundary["id"],
            "last_event_date": boundary["date"],
            "boundary_ids": [boundary["id"]],
        },
        overwrite=True,
    )
    result = await bridge_event_log(checkpoint_variable=name)
    assert result.emitted == 30
    assert result.duplicates_skipped == 1  # the boundary entry came back by date, was dropped
    assert calls(reads_env, LOGS) == 2  # the rejected cursor, then startDate


async def test_max_pages_bounds_a_run_and_the_next_continues(reads_env: SandboxHandle) -> None:
    name = unique_name("slices").replace("-", "_")
    start = seeded(reads_env)[-25]["date"]
    first = await bridge_event_log(
        start_date=start, checkpoint_variable=name, page_size=10, max_pages=1
    )
    rest = await bridge_event_log(checkpoint_variable=name, page_size=10)
    assert (first.emitted, first.pages) == (10, 1)
    assert (rest.emitted, rest.pages) == (15, 2)


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"start_date": "2025-01-32"}, "start_date"),
        ({"page_size": 500}, "page_size"),
        ({"max_pages": 0}, "max_pages"),
        ({"checkpoint_variable": "Not A Name!"}, "checkpoint_variable"),
        ({"lock_wait_seconds": -1}, "lock_wait_seconds"),
    ],
)
async def test_bad_input_fails_before_any_call(
    reads_env: SandboxHandle, parameters: dict[str, Any], field: str
) -> None:
    with pytest.raises((InputError, ParameterTypeError)) as caught:
        await bridge_event_log(**parameters)
    assert field in str(caught.value)  # the flow's InputError or Prefect's check
    assert no_calls(reads_env)


async def test_a_first_run_that_finds_nothing_still_fixes_the_starting_point(
    reads_env: SandboxHandle,
) -> None:
    """Entries logged between an empty first run and the next one must not be lost."""
    name = unique_name("empty-first").replace("-", "_")
    first = await bridge_event_log(checkpoint_variable=name)  # starts "now": nothing yet
    assert first.emitted == 0
    stored = await VariableCheckpointStore(name).load()
    assert stored is not None, "the first run must save where it started"

    vendor = reads_env.control.inject("vendor_discovered", name="Logged Between Runs")
    second = await bridge_event_log(checkpoint_variable=name)
    assert second.emitted == 1
    assert second.events_by_name == {"compliance.vendor_discovered": 1}
    checkpoint = await VariableCheckpointStore(name).load()
    assert checkpoint is not None and checkpoint.last_event_id == vendor["event_log_id"]
