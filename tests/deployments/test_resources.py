"""What bootstrap creates for a burst and for day one: the work pool's concurrency limit and
the audit-log readers' starting point (against the session's real Prefect server)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from prefect.client.orchestration import get_client
from prefect.variables import Variable

from audit_log.checkpoints import (
    BRIDGE_CHECKPOINT_VARIABLE,
    PROMOTE_CHECKPOINT_VARIABLE,
    READER_CHECKPOINT_VARIABLES,
    ROUTE_CHECKPOINT_VARIABLE,
    START_MARGIN,
    VariableCheckpointStore,
)
from compliance_api.errors import ConfigurationError
from deployments.resources import (
    WORK_POOL_CONCURRENCY_ENV,
    ensure_audit_log_starts,
    ensure_work_pool,
    work_pool_concurrency,
)

pytestmark = pytest.mark.usefixtures("prefect_server")


async def test_a_new_work_pool_gets_the_concurrency_limit_an_existing_one_keeps_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = f"pool-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv(WORK_POOL_CONCURRENCY_ENV, "5")
    assert "concurrency limit 5" in await ensure_work_pool(name)
    async with get_client() as client:
        assert (await client.read_work_pool(name)).concurrency_limit == 5
    monkeypatch.setenv(WORK_POOL_CONCURRENCY_ENV, "9")
    assert (await ensure_work_pool(name)).startswith(f"kept work pool {name!r}")
    async with get_client() as client:
        assert (await client.read_work_pool(name)).concurrency_limit == 5


@pytest.mark.parametrize("raw", ["0", "-3", "many", "1001"])
def test_a_bad_work_pool_concurrency_names_the_variable(
    raw: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(WORK_POOL_CONCURRENCY_ENV, raw)
    with pytest.raises(ConfigurationError, match=rf"{WORK_POOL_CONCURRENCY_ENV}='{raw}'"):
        work_pool_concurrency()


async def test_bootstrap_records_where_every_audit_log_reader_starts_once() -> None:
    """The bridge and the event-triggered write flows start at the same point, once."""
    for name in READER_CHECKPOINT_VARIABLES:
        await VariableCheckpointStore(name).clear()
    # a checkpoint kept the way it was before versions (one Variable): still the checkpoint
    await Variable.aset(ROUTE_CHECKPOINT_VARIABLE, {"last_event_id": "kept"})
    now = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
    said = await ensure_audit_log_starts(now)
    assert BRIDGE_CHECKPOINT_VARIABLE in said and PROMOTE_CHECKPOINT_VARIABLE in said
    assert f"kept audit-log checkpoints {ROUTE_CHECKPOINT_VARIABLE}" in said
    for name in (BRIDGE_CHECKPOINT_VARIABLE, PROMOTE_CHECKPOINT_VARIABLE):
        stored = await VariableCheckpointStore(name).load()
        assert stored is not None
        assert stored.start_date == now - START_MARGIN and stored.last_event_id is None
    later = datetime(2026, 11, 25, tzinfo=UTC)
    assert (await ensure_audit_log_starts(later)).startswith("kept")
    kept = await VariableCheckpointStore(BRIDGE_CHECKPOINT_VARIABLE).load()
    assert kept is not None and kept.start_date == now - START_MARGIN
    assert (await Variable.aget(ROUTE_CHECKPOINT_VARIABLE)) == {"last_event_id": "kept"}
    for name in READER_CHECKPOINT_VARIABLES:
        await VariableCheckpointStore(name).clear()
