"""The rerun flow's own rules, the CLI, the failure event, and secrets in what runs leave."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from prefect.exceptions import ParameterTypeError

from compliance_api.errors import InputError
from flows import rerun as rerun_module
from flows.promote_vendors import promote_discovered_vendors
from flows.rerun import rerun_failed_items
from runtime.connection import shared_broker
from runtime.events import EventSink
from sandbox.apps import DEMO_MANAGE
from sandbox.runner import SandboxHandle
from tests.fixtures.flows import MAX_SENDS, run_flow, run_id
from tests.fixtures.runs import artifacts_of, results_table
from write_engine import reporting

ROUTE = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"


def record_failed_items_events(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The failed-items events runs send (they still reach the server), as JSON."""
    events: list[dict[str, Any]] = []
    original = EventSink.send

    async def recording(self: EventSink, batch: Any) -> None:
        await original(self, batch)
        events.extend(
            event.model_dump(mode="json")
            for event in batch
            if event.event == reporting.FAILED_ITEMS_EVENT
        )

    monkeypatch.setattr(EventSink, "send", recording)
    return events


async def test_rejects_bad_ids_unknown_runs_and_too_many_attempts(
    flows_env: SandboxHandle,
) -> None:
    for flow_run_id, error, message in [
        ("nope", ParameterTypeError, "flow_run_id: Input should be a valid UUID"),
        (str(uuid.uuid4()), InputError, "no such flow run"),
    ]:
        with pytest.raises(error, match=message):
            await rerun_failed_items(flow_run_id=flow_run_id)
    first, _ = await run_flow(promote_discovered_vendors, discovered_vendor_ids=["missing"])
    second, summary = await run_flow(rerun_failed_items, flow_run_id=run_id(first))
    assert summary.attempt == 2
    with pytest.raises(InputError, match="exceeds max_attempts=2"):
        await rerun_failed_items(flow_run_id=run_id(second), max_attempts=2)
    assert flows_env.control.stats()["route_counts"][ROUTE] == 2


async def test_dry_run_leaves_nothing_to_rerun(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    state, _ = await run_flow(promote_discovered_vendors, discovered_vendor_ids=["x"], dry_run=True)
    with pytest.raises(InputError, match="left no failed-items record"):
        await rerun_failed_items(flow_run_id=run_id(state))


async def test_rerun_links_to_the_original_and_event_names_the_failures(
    flows_env: SandboxHandle, seed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    events = record_failed_items_events(monkeypatch)
    ids = [seed["discovered_vendors"][0], "missing-vendor"]
    first, _ = await run_flow(promote_discovered_vendors, discovered_vendor_ids=ids)
    (event,) = events
    assert event["event"] == "compliance.write-run.failed-items"
    assert event["resource"]["prefect.resource.id"] == f"prefect.flow-run.{run_id(first)}"
    assert event["payload"]["failed"] == 1 and event["payload"]["attempt"] == 1
    # a vendor that does not exist will not appear by asking again: no automatic rerun
    assert event["resource"]["compliance.retryable-items"] == "false"
    assert event["payload"]["retryable"] == 0
    second, summary = await run_flow(rerun_failed_items, flow_run_id=run_id(first))
    assert summary.rerun_of == run_id(first) and summary.total == 1
    _, description = await results_table(run_id(second))
    assert f"/runs/flow-run/{run_id(first)}" in description
    assert events[-1]["payload"]["attempt"] == 2
    assert flows_env.control.stats()["write_counts"]["add_to_managed"] == {ids[0]: 1}


async def test_cli_exit_codes(
    flows_env: SandboxHandle, seed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    ok_run, _ = await run_flow(promote_discovered_vendors, discovered_vendor_ids=["missing"])
    # the CLI runs its own event loop: call it from a worker thread
    import anyio

    code = await anyio.to_thread.run_sync(rerun_module.main, [run_id(ok_run)])
    assert code == 1 and "python -m flows.rerun" in capsys.readouterr().out
    code = await anyio.to_thread.run_sync(rerun_module.main, ["not-a-uuid"])
    assert code == 2


async def test_no_secret_in_results_artifacts_or_state(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    state, summary = await run_flow(
        promote_discovered_vendors, discovered_vendor_ids=[seed["discovered_vendors"][0], "gone"]
    )
    token = (await shared_broker().get_token()).value.get_secret_value()
    texts = [summary.model_dump_json(), state.message or ""]
    for artifact in await artifacts_of(run_id(state)):
        texts += [str(artifact.data), artifact.description or ""]
    for text in texts:
        assert DEMO_MANAGE.client_secret not in text and token not in text


async def test_retryable_only_sends_transient_failures_and_carries_the_rest(
    flows_env: SandboxHandle, seed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    events = record_failed_items_events(monkeypatch)
    vendor = seed["discovered_vendors"][0]
    # one call at a time: the first vendor's six sends (the client's bound, the only retry
    # layer) meet the six 503s; the unknown vendor then gets its 404
    flows_env.control.set_fault(ROUTE, error_rate=1.0, status=503, count=MAX_SENDS)
    first, summary = await run_flow(
        promote_discovered_vendors, discovered_vendor_ids=[vendor, "missing"], concurrency=1
    )
    assert {r.item: r.outcome.value for r in summary.failed_items} == {
        vendor: "failed_retryable",
        "missing": "failed",
    }
    assert events[-1]["resource"]["compliance.retryable-items"] == "true"
    assert events[-1]["payload"]["retryable"] == 1
    calls_before = flows_env.control.stats()["route_counts"][ROUTE]

    second, rerun = await run_flow(
        rerun_failed_items, flow_run_id=run_id(first), retryable_only=True
    )
    # only the transient failure was sent, and it went through
    assert flows_env.control.stats()["route_counts"][ROUTE] == calls_before + 1
    assert flows_env.control.stats()["write_counts"]["add_to_managed"] == {vendor: 1}
    # the refusal is reported again, unsent: the run is red and its record still lists it
    assert second.is_failed()
    (carried,) = rerun.failed_items
    assert carried.item == "missing" and carried.outcome.value == "failed"
    assert carried.reason.startswith("not rerun automatically (failed): not found")
    assert carried.rerun_input == {"discovered_vendor_id": "missing"}
    record = await reporting.read_failed_items(run_id(second))
    assert record is not None and record.inputs == [{"discovered_vendor_id": "missing"}]
    # nothing left that a later attempt can fix: the chain of automatic reruns ends here
    assert events[-1]["resource"]["compliance.retryable-items"] == "false"
    # carried once more (a chain that goes on for other items), it is described only once
    _, again = await run_flow(rerun_failed_items, flow_run_id=run_id(second), retryable_only=True)
    assert [r.reason for r in again.failed_items] == [carried.reason]

    # the operator's rerun by hand of that last run sends the refusal again
    _, by_hand = await run_flow(rerun_failed_items, flow_run_id=run_id(second))
    assert by_hand.attempt == 3 and by_hand.failed == 1
    assert by_hand.failed_items[0].reason.startswith("not found")
    assert flows_env.control.stats()["route_counts"][ROUTE] == calls_before + 2
