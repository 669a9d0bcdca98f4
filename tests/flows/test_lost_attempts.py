"""A run that is started again while its first process still runs: nothing twice, nothing undone.

The first attempt runs in this process against the sandbox (with latency, so calls are in
flight); the test then does what crash detection and recovery do on the server: the run becomes
Crashed, then AwaitingRetry, and a second attempt of the same flow run starts. The sandbox
counts every add-to-managed call per vendor.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun, StateType
from prefect.exceptions import Abort
from prefect.flow_engine import run_flow_async
from prefect.states import AwaitingRetry, Crashed
from prefect.variables import Variable

from audit_log.checkpoints import EventLogCheckpoint, VariableCheckpointStore
from flows.add_people_to_groups import add_people_to_groups
from flows.promote_vendors import VendorPromotion, promote_discovered_vendors, read_vendor_items
from runtime.attempts import Attempt, AttemptLost
from sandbox.runner import SandboxHandle
from tests.fixtures.runs import artifacts_of, unique_name
from write_engine.outcomes import ItemsFailed, Outcome, RunSummary
from write_engine.run import WriteJob, run_write_job
from write_engine.send_record import (
    EarlierAttemptMismatch,
    IndexRanges,
    SendRecordValue,
    record_name,
    units_digest,
)

ROUTE = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"


def writes(sandbox: SandboxHandle) -> dict[str, int]:
    return dict(sandbox.control.stats()["write_counts"].get("add_to_managed", {}))


async def new_run(ids: list[str], concurrency: int = 2) -> FlowRun:
    async with get_client() as client:
        return await client.create_flow_run(
            promote_discovered_vendors,
            parameters={"discovered_vendor_ids": ids, "concurrency": concurrency},
        )


async def attempt(run: FlowRun, flow: Any = promote_discovered_vendors) -> Any:
    """One attempt of ``run`` in this process, as a worker's flow-run process would make it."""
    async with get_client() as client:
        current = await client.read_flow_run(run.id)
    return await run_flow_async(
        flow,
        flow_run=current,
        parameters=current.parameters,
        return_type="state",
    )


async def crash_and_reschedule(run_id: uuid.UUID, *, reschedule: bool = True) -> None:
    """What crash detection, then crash recovery, do on the server."""
    async with get_client() as client:
        await client.set_flow_run_state(run_id, Crashed(message="no heartbeat"), force=True)
        if reschedule:
            await client.set_flow_run_state(
                run_id, AwaitingRetry(scheduled_time=datetime.now(UTC)), force=True
            )


async def read_state(run_id: uuid.UUID) -> Any:
    async with get_client() as client:
        return (await client.read_flow_run(run_id)).state


async def lose_after(sandbox: SandboxHandle, run_id: uuid.UUID, sent: int) -> None:
    for _ in range(600):
        if sum(writes(sandbox).values()) >= sent:
            break
        await asyncio.sleep(0.05)
    await crash_and_reschedule(run_id, reschedule=False)


async def lost_first_attempt(sandbox: SandboxHandle, ids: list[str], sent: int) -> FlowRun:
    """A promotion of ``ids`` whose first attempt is lost once ``sent`` calls were made."""
    sandbox.control.set_fault(ROUTE, latency_ms=150)
    run = await new_run(ids)
    with pytest.raises(Abort, match="no longer this process's"):
        await asyncio.gather(attempt(run), lose_after(sandbox, run.id, sent))
    return run


async def test_a_lost_attempt_stops_writing_and_proposes_no_state(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["discovered_vendors"][:30]
    run = await lost_first_attempt(flows_env, ids, 4)
    state = await read_state(run.id)
    assert state.type is StateType.CRASHED  # not overwritten by a late Failed/Completed
    sent = writes(flows_env)
    assert 4 <= sum(sent.values()) < len(ids) and set(sent.values()) == {1}
    # no results table, no failed-items record; the progress bar stopped where the run was lost
    (progress,) = await artifacts_of(str(run.id))
    assert progress.type == "progress" and progress.data < 100


async def test_the_next_attempt_sends_nothing_the_lost_one_sent(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["discovered_vendors"][:24]
    run = await lost_first_attempt(flows_env, ids, 6)
    first = writes(flows_env)
    await crash_and_reschedule(run.id)
    flows_env.control.clear_faults()

    state = await attempt(run)

    assert state.is_completed(), state.message
    summary = await state.result()
    assert isinstance(summary, RunSummary)
    assert summary.counts == {Outcome.SUCCEEDED: len(ids)}
    assert writes(flows_env) == {vendor: 1 for vendor in ids}  # each applied exactly once
    assert set(first) < set(ids)
    for number in (1, 2):  # the records are gone once the run reported every item
        assert await Variable.aget(record_name(_attempt(run.id, number), number)) is None


async def test_people_added_by_a_lost_attempt_are_not_added_again(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    group, people = seed["groups"][0], seed["people"][:250]  # three calls: 100, 100, 50
    flows_env.control.set_fault("POST /v1/groups/{groupId}/add-people", latency_ms=400)
    async with get_client() as client:
        run = await client.create_flow_run(
            add_people_to_groups,
            parameters={"group_ids": [group], "person_ids": people, "concurrency": 1},
        )

    async def lose_after_first_call() -> None:
        for _ in range(600):
            if flows_env.control.stats()["group_add_counts"].get(group):
                break
            await asyncio.sleep(0.05)
        await crash_and_reschedule(run.id, reschedule=False)

    with pytest.raises(Abort):
        await asyncio.gather(attempt(run, add_people_to_groups), lose_after_first_call())
    await crash_and_reschedule(run.id)

    state = await attempt(run, add_people_to_groups)

    assert state.is_completed(), state.message
    counts = flows_env.control.stats()["group_add_counts"][group]
    assert counts == {person: 1 for person in people}


async def seed_lost_record(run: FlowRun, ids: list[str], **sets: list[list[int]]) -> None:
    """What attempt 1 left: a record with these index ranges; the next attempt is number 2."""
    lost = SendRecordValue(
        attempt=1,
        units=len(ids),
        digest=units_digest([[_vendor(i)] for i in ids]),
        started_at=datetime.now(UTC),
        **sets,
    )
    await Variable.aset(record_name(_attempt(run.id, 1), 1), lost.model_dump(mode="json"))
    await _enter_running_once(run.id)


async def test_the_audit_log_tells_which_unanswered_units_were_applied(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["discovered_vendors"][:5]
    run = await new_run(ids)
    await promote_discovered_vendors(discovered_vendor_ids=[ids[2]])  # "attempt 1" applied it
    # 0 done, 1 refused, 2 and 3 claimed without an answer (2 applied, 3 never sent), 4 new
    await seed_lost_record(run, ids, sent=[[0, 4]], done=[[0, 1]], refused=[[1, 2]])

    state = await attempt(run)

    assert state.is_completed(), state.message
    summary = await state.result()
    assert isinstance(summary, RunSummary)
    assert summary.counts == {Outcome.SUCCEEDED: 5}
    assert writes(flows_env) == {ids[1]: 1, ids[2]: 1, ids[3]: 1, ids[4]: 1}
    async with get_client() as client:
        assert (await client.read_flow_run(run.id)).run_count == 2


class Unverifiable(VendorPromotion):
    """A job whose service cannot tell what a lost attempt applied (the default)."""

    applied_by_lost_attempt = WriteJob.applied_by_lost_attempt  # type: ignore[assignment]


@flow(name="promote-unverifiable")
async def promote_unverifiable(discovered_vendor_ids: list[str]) -> Any:
    return await run_write_job(
        Unverifiable(), read_vendor_items(discovered_vendor_ids, None), dry_run=False, concurrency=2
    )


async def test_an_unanswered_unit_goes_to_review_where_the_service_cannot_tell(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["discovered_vendors"][:3]
    async with get_client() as client:
        run = await client.create_flow_run(
            promote_unverifiable, parameters={"discovered_vendor_ids": ids}
        )
    await seed_lost_record(run, ids, sent=[[0, 2]], done=[[0, 1]])

    state = await attempt(run, promote_unverifiable)

    assert state.is_failed()
    failed = await state.result(raise_on_failure=False)
    assert isinstance(failed, ItemsFailed)
    (review,) = failed.summary.failed_items
    assert (review.item, review.outcome) == (ids[1], Outcome.NEEDS_REVIEW)
    assert review.rerun_input == {"discovered_vendor_id": ids[1]}
    assert writes(flows_env) == {ids[2]: 1}  # only the unit no attempt claimed


async def test_a_changed_list_is_refused_before_any_write(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    ids = seed["discovered_vendors"][:3]
    run = await new_run(ids)
    other = SendRecordValue(
        attempt=1, units=2, digest="0" * 64, started_at=datetime.now(UTC), sent=[[0, 1]]
    )
    await Variable.aset(record_name(_attempt(run.id, 1), 1), other.model_dump(mode="json"))
    await _enter_running_once(run.id)

    state = await attempt(run)

    assert state.is_failed()
    with pytest.raises(EarlierAttemptMismatch, match="different list"):
        await state.result()
    assert writes(flows_env) == {}


async def test_an_unreachable_server_loses_the_attempt_after_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runtime import attempts

    monkeypatch.setattr(attempts, "UNCONFIRMED_LIMIT_SECONDS", 0.0)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # nothing listens
    lost = Attempt(flow_run_id=uuid.uuid4(), state_id=uuid.uuid4(), run_count=1)
    with pytest.raises(AttemptLost, match="could not confirm"):
        await lost.ensure_current(fresh=True)
    with pytest.raises(AttemptLost):  # and stays lost, without asking again
        await lost.ensure_current()


def test_index_ranges_round_trip() -> None:
    ranges = IndexRanges([[0, 3], [5, 6]])
    for index in (3, 9, 4):
        ranges.add(index)
    assert ranges.ranges() == [[0, 6], [9, 10]]
    assert 4 in ranges and 7 not in ranges and len(ranges) == 7


def _attempt(run_id: uuid.UUID, number: int) -> Attempt:
    return Attempt(flow_run_id=run_id, state_id=uuid.uuid4(), run_count=number)


def _vendor(vendor_id: str) -> Any:
    from flows.promote_vendors import DiscoveredVendorInput

    return DiscoveredVendorInput(discovered_vendor_id=vendor_id)


async def _enter_running_once(run_id: uuid.UUID) -> None:
    """Make the next Running the run's second (an earlier attempt ran and crashed)."""
    from prefect.states import Running

    async with get_client() as client:
        await client.set_flow_run_state(run_id, Running(), force=True)
    await crash_and_reschedule(run_id)


async def test_the_audit_log_checkpoint_only_moves_forward(prefect_server: None) -> None:
    store = VariableCheckpointStore(unique_name("compliance_test_checkpoint"))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    older = EventLogCheckpoint(start_date=start, last_event_date=start, entries_total=5)
    newer = older.model_copy(update={"last_event_date": start.replace(hour=1)})
    assert await store.save(newer)
    assert not await store.save(older)  # a late save from a lost attempt: kept as it was
    assert await store.load() == newer
    assert await store.save(older, forward_only=False)  # a deliberate reset
    assert await store.load() == older
    await store.clear()
