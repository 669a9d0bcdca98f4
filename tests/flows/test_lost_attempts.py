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
from prefect.flow_engine import run_flow_async
from prefect.states import AwaitingRetry, Crashed
from prefect.variables import Variable

from audit_log.checkpoints import EventLogCheckpoint, VariableCheckpointStore
from compliance_api.client import ComplianceClient
from compliance_api.write_fence import SendHeld
from flows.add_people_to_groups import add_people_to_groups
from flows.promote_vendors import VendorPromotion, promote_discovered_vendors, read_vendor_items
from runtime import attempts
from runtime.attempts import Attempt, AttemptLost
from runtime.connection import shared_broker
from runtime.credentials import load_run_settings
from runtime.variables import create_once, delete_all, variables_starting, versioned
from sandbox.runner import SandboxHandle
from tests.fixtures.runs import artifacts_of, unique_name
from write_engine.outcomes import Done, ItemsFailed, Outcome, RunSummary
from write_engine.run import WriteJob, run_write_job
from write_engine.send_record import (
    EarlierAttemptMismatch,
    IndexRanges,
    SendRecord,
    SendRecordValue,
    record_name,
    stored_records,
    units_digest,
)

ROUTE = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"


@pytest.fixture(autouse=True)
def quick_fence(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shorter fence timers (the tests are about what a lost attempt does, not how fast it learns
    it): confirmations every 0.3 s, writes within 2 s of one, a next attempt waits 2.5 s."""
    monkeypatch.setattr(attempts, "CONFIRM_EVERY_SECONDS", 0.3)
    monkeypatch.setattr(attempts, "WRITE_DEADLINE_SECONDS", 2.0)
    monkeypatch.setattr(attempts, "FRESH_SECONDS", 1.0)
    monkeypatch.setattr(attempts, "STALE_WRITE_MARGIN_SECONDS", 0.5)


def writes(sandbox: SandboxHandle) -> dict[str, int]:
    return dict(sandbox.control.stats()["write_counts"].get("add_to_managed", {}))


async def new_run(ids: list[str], concurrency: int = 2) -> FlowRun:
    async with get_client() as client:
        return await client.create_flow_run(
            promote_discovered_vendors,
            parameters={"discovered_vendor_ids": ids, "concurrency": concurrency},
        )


async def attempt(run: FlowRun, flow: Any = promote_discovered_vendors, **options: Any) -> Any:
    """One attempt of ``run`` in this process, as a worker's flow-run process would make it."""
    async with get_client() as client:
        current = await client.read_flow_run(run.id)
    return await run_flow_async(
        flow,
        flow_run=current,
        parameters=current.parameters,
        return_type=options.get("return_type", "state"),
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
    sandbox.control.set_fault(ROUTE, latency_ms=400)
    run = await new_run(ids)
    # a run outside a deployment: an ordinary exception for its caller, never Prefect's Abort
    with pytest.raises(AttemptLost, match="no longer this process's"):
        await asyncio.gather(attempt(run, return_type="result"), lose_after(sandbox, run.id, sent))
    state = await read_state(run.id)  # the engine's Failed was refused: crash detection's kept
    assert (state.type, state.message) == (StateType.CRASHED, "no heartbeat")
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
    assert await stored_records(_attempt(run.id, 2)) == {}  # gone once every item is reported


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

    lost, _ = await asyncio.gather(attempt(run, add_people_to_groups), lose_after_first_call())
    assert lost.type is StateType.CRASHED
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


async def test_an_unreachable_server_loses_a_restartable_attempt_after_the_grace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")  # nothing listens
    lost = Attempt(flow_run_id=uuid.uuid4(), state_id=uuid.uuid4(), run_count=1, restart_after=0.5)
    try:
        with pytest.raises(AttemptLost, match="could not confirm this run"):
            await lost.confirm_now()
        with pytest.raises(AttemptLost):  # and stays lost
            await lost.ready()
    finally:
        await lost.stop()


async def test_an_unconfirmed_run_no_one_can_restart_waits_instead_of_aborting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A direct call (no deployment: no one can start it again) is never lost for slowness: its
    writes wait, however long the server stays silent."""
    monkeypatch.setattr(attempts, "CONFIRM_EVERY_SECONDS", 0.1)
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:9/api")
    waiting = Attempt(flow_run_id=uuid.uuid4(), state_id=uuid.uuid4(), run_count=1)
    try:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2.5):
                await waiting.ready()
        assert waiting.lost is None
    finally:
        await waiting.stop()


def test_a_write_leaves_only_within_the_deadline_of_its_confirmation() -> None:
    current = Attempt(flow_run_id=uuid.uuid4(), state_id=uuid.uuid4(), run_count=1)
    with pytest.raises(SendHeld):  # never confirmed
        current.check_send()
    current.confirmed_at = attempts.time.monotonic() - attempts.WRITE_DEADLINE_SECONDS - 0.1
    with pytest.raises(SendHeld):
        current.check_send()
    current.confirmed_at = attempts.time.monotonic() - 1.0
    current.check_send()
    assert 1.0 <= current.longest_send_age < attempts.WRITE_DEADLINE_SECONDS


class HeldOnce:
    """A write fence that holds the first write at the socket, then lets writes go."""

    send_timeout = 5.0

    def __init__(self) -> None:
        self.checks = 0

    async def ready(self) -> None:
        return None

    def check_send(self) -> None:
        self.checks += 1
        if self.checks == 1:
            raise SendHeld("confirmation too old")


async def test_a_write_held_at_the_socket_is_sent_once_the_fence_lets_it(
    flows_env: SandboxHandle, seed: dict[str, Any]
) -> None:
    """Held before its first byte, the create is not lost and not sent twice."""
    (vendor,) = seed["discovered_vendors"][:1]
    settings = await load_run_settings()
    fence = HeldOnce()
    async with ComplianceClient.from_settings(
        settings, shared_broker(settings), write_fence=fence
    ) as client:
        await client.add_discovered_vendor_to_managed(vendor)
        assert client.stats.held_writes == 1
    assert fence.checks == 2
    assert writes(flows_env) == {vendor: 1}


async def test_a_record_is_kept_as_versions_and_the_highest_counts(prefect_server: None) -> None:
    """A Variable update reads, then writes: on a busy SQLite server it fails at once (503) and
    Prefect's client waits seconds; two writers race. Each save creates a version instead; a
    create retried after the server applied it is no failure, and a late lower version (or the
    unversioned record of an earlier release) does not count over the highest."""
    attempt = _attempt(uuid.uuid4(), 1)
    base = record_name(attempt, 1)
    old = SendRecordValue(
        attempt=1, units=3, digest="0" * 64, started_at=datetime.now(UTC), sent=[[0, 3]]
    )
    new = old.model_copy(update={"done": [[0, 2]]})
    await create_once(versioned(base, 2), new.model_dump(mode="json"))
    await create_once(versioned(base, 2), new.model_dump(mode="json"))  # the retried create
    await create_once(versioned(base, 1), old.model_dump(mode="json"))
    await Variable.aset(base, old.model_dump(mode="json"))

    assert await stored_records(attempt) == {1: (2, new)}
    await delete_all(name for name, _ in await variables_starting(base))
    assert await stored_records(attempt) == {}


async def test_a_record_is_written_once_per_window_not_once_per_unit(
    prefect_server: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the window covers the whole list, claims write nothing more: answers go out with the
    next window, at most every ANSWERS_EVERY_SECONDS, and with the flush (200 units: 200 writes
    before this was fixed, which a bulk run paid for in seconds on a busy server)."""
    from write_engine import send_record

    created: list[str] = []

    async def counted(name: str, value: Any) -> None:
        created.append(name)
        await create_once(name, value)

    monkeypatch.setattr(send_record, "create_once", counted)
    monkeypatch.setattr(send_record, "ANSWERS_EVERY_SECONDS", 3600)  # only the windows write
    units = [[_vendor(f"v-{n}")] for n in range(200)]
    attempt = _attempt(uuid.uuid4(), 1)
    attempt.confirmed_at = float("inf")  # always fresh: the record is what this test counts
    record = await SendRecord.open(attempt, units, window=16, max_window=2048)
    record.plan(list(range(len(units))))
    for index, unit in enumerate(units):
        await record.claim(index)
        await asyncio.sleep(0.002)  # the call: the window's write goes out meanwhile
        record.answered(index, [Done(unit[0].label())])
    claimed = await stored_records(attempt)
    await record.flush()

    assert claimed[1][1].sent == [[0, 200]] and claimed[1][1].done != [[0, 200]]
    assert (await stored_records(attempt))[1][1].done == [[0, 200]]
    assert len(created) <= 25, created
    await record.forget()
    assert await stored_records(attempt) == {}


async def test_answers_are_written_while_no_claim_writes(
    prefect_server: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the whole list claimed, answers still reach the record (every ANSWERS_EVERY_SECONDS,
    here at once), so a next attempt has little left to check or review."""
    from write_engine import send_record

    monkeypatch.setattr(send_record, "ANSWERS_EVERY_SECONDS", 0.0)
    units = [[_vendor(f"v-{n}")] for n in range(10)]
    attempt = _attempt(uuid.uuid4(), 1)
    attempt.confirmed_at = float("inf")
    record = await SendRecord.open(attempt, units, window=64, max_window=64)
    record.plan(list(range(len(units))))
    for index, unit in enumerate(units):
        # each claim's write lands before the unit's answer: a claim while a write is still in
        # flight leaves its answers to the next (how slow the server is must not decide this)
        await record.claim(index)
        await asyncio.gather(*record._ahead)
        record.answered(index, [Done(unit[0].label())])

    (_, stored), *_ = (await stored_records(attempt)).values()
    assert stored.sent == [[0, 10]] and stored.done == [[0, 9]]  # the last answer: with the flush
    await record.forget()


async def test_a_finished_run_stays_finished(prefect_server: None) -> None:
    """What a stale process, or Prefect's own crash handling (force=True), proposes after the run
    finished is refused; a run that did not complete may still be started again."""
    from prefect.states import Completed, Failed, Running

    async with get_client() as client:
        completed = await client.create_flow_run(promote_discovered_vendors, parameters={})
        failed = await client.create_flow_run(promote_discovered_vendors, parameters={})
        for run, end in ((completed, Completed()), (failed, Failed())):
            await client.set_flow_run_state(run.id, Running(), force=True)
            await client.set_flow_run_state(run.id, end, force=True)
        for proposal in (Crashed(), Running(), Failed(), AwaitingRetry()):
            for force in (True, False):
                await client.set_flow_run_state(completed.id, proposal, force=force)
                assert (await read_state(completed.id)).type is StateType.COMPLETED
        await client.set_flow_run_state(failed.id, Crashed(), force=True)
        assert (await read_state(failed.id)).type is StateType.FAILED
        await client.set_flow_run_state(
            failed.id, AwaitingRetry(scheduled_time=datetime.now(UTC)), force=True
        )
        assert (await read_state(failed.id)).type is StateType.SCHEDULED


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


async def test_two_savers_never_move_the_checkpoint_back(
    prefect_server: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A saver that read the checkpoint before a faster one saved further still cannot move it
    back (no compare-and-set on a Prefect Variable: every save is a Variable of its own)."""
    name = unique_name("compliance_test_checkpoint")
    store, slow = VariableCheckpointStore(name), VariableCheckpointStore(name)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ahead = [
        EventLogCheckpoint(start_date=start, last_event_date=start.replace(hour=h), entries_total=h)
        for h in range(1, 9)
    ]

    async def read_nothing() -> None:  # the slow saver read before any save
        return None

    monkeypatch.setattr(slow, "load", read_nothing)
    await asyncio.gather(*(store.save(checkpoint) for checkpoint in reversed(ahead)))
    assert await slow.save(ahead[0])  # passes its stale check ...
    assert await store.load() == ahead[-1]  # ... and moves nothing back
    await store.clear()
    assert await store.load() is None
