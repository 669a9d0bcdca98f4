"""Several machines: Prefect on PostgreSQL and Redis as two API replicas and one services
process, three workers spread over the replicas, each with its own state directory.

- A burst of 400 discovered vendors arrives while the services process is down (its events
  wait in Redis), and one API replica is restarted while the promotion runs (a rolling
  restart: its worker and flow runs retry meanwhile). Every vendor is managed exactly once,
  with one token mint and no 401, and every event reached the event store.
- Two workers' environments (separate state directories, the shared link ledger) attach the
  same 200 links at the same moment: each link is attached exactly once; a link the other run
  had claimed is reported for review, never sent twice.

This is the recipe of docs/scaling.md, run as written there (``python -m deployments.serve
--database-url ... --redis-url ... --api-replicas 2 --workers 3``).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import textwrap
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from deployments.database import connect_kwargs, ledger_role
from deployments.stack import LocalStack
from sandbox.apps import DEMO_MANAGE
from sandbox.control import SandboxControl
from tests.fixtures.chaos import start_child
from tests.fixtures.own_redis import OwnRedis, own_redis
from tests.fixtures.stack import (
    ADD_TO_MANAGED,
    BRIDGE,
    PROMOTE,
    assert_no_secret_in_prefect_database,
    eventually,
    final,
    finished,
    managed,
    restart_prefect_server,
    run_deployment,
    stack_options,
    triggered_runs,
)

pytestmark = pytest.mark.timeout(900)

BURST = 400
#: slow enough that the restart surely falls inside the promotion run
PROMOTION_LATENCY_MS = 200
LINKS = 200


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnRedis]:
    """The recipe's Redis (docs/scaling.md §4): a password, and an append-only file written on
    every change, so a crash loses no lease."""
    directory = tmp_path_factory.mktemp("redis")
    persistence = ("--appendonly", "yes", "--appendfsync", "always", "--save", "")
    with own_redis(directory, secrets.token_urlsafe(24), *persistence) as server:
        yield server


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_databases: Callable[[], str],
    redis_server: OwnRedis,
) -> Iterator[LocalStack]:
    options = stack_options(
        state_dir=tmp_path_factory.mktemp("replicas"),
        database_url=postgres_databases(),
        redis_url=redis_server.url(),
        api_replicas=2,
        workers=3,
    )
    with LocalStack(options) as running:
        assert running.redis is not None and running.redis.persistent is True
        yield running


def test_the_workers_are_spread_over_the_replicas_and_share_the_ledger(stack: LocalStack) -> None:
    urls = [stack.worker_env(name)["PREFECT_API_URL"] for name in stack.worker_names()]
    assert set(urls) == {server.api_url for server in stack.replicas} and len(stack.replicas) == 2
    ledgers = {
        stack.worker_env(name)["COMPLIANCE_LINK_LEDGER_URL"] for name in stack.worker_names()
    }
    assert ledgers == {stack.ledger_url}
    # the workers' ledger role: its own schema, nothing of Prefect's (not the server's superuser)
    assert stack.options.database_url is not None and stack.ledger_url is not None
    server, ledger = make_url(stack.options.database_url), make_url(stack.ledger_url)
    assert ledger.username == ledger_role(str(server.database)) != server.username
    assert asyncio.run(_what_the_ledger_role_may(stack.ledger_url)) == (False, True)
    assert stack.services is not None and stack.services.child is not None
    assert "--no-services" in stack.replicas[1].child.command  # type: ignore[union-attr]
    assert stack.services.env()["PREFECT_MESSAGING_BROKER"] == "prefect_redis.messaging"


async def _what_the_ledger_role_may(url: str) -> tuple[bool, bool]:
    """(read Prefect's flow runs, create a table in its own schema) as the ledger's role."""
    parsed = make_url(url)
    connection = await asyncpg.connect(**connect_kwargs(parsed, str(parsed.database)))
    try:
        try:
            await connection.fetchval("SELECT count(*) FROM public.flow_run")
            reads_prefect = True
        except asyncpg.InsufficientPrivilegeError:
            reads_prefect = False
        await connection.execute("CREATE TABLE ledger_probe (x int); DROP TABLE ledger_probe")
        return reads_prefect, True
    finally:
        await connection.close()


def test_a_burst_survives_a_services_restart_and_a_rolling_restart(stack: LocalStack) -> None:
    control = SandboxControl(stack.sandbox_url)
    control.set_fault(ADD_TO_MANAGED, latency_ms=PROMOTION_LATENCY_MS)
    started = datetime.now(UTC) - timedelta(seconds=5)
    vendors = {control.inject("vendor_discovered")["id"] for _ in range(BURST)}
    assert stack.services is not None

    # the services process is down while the bridge emits the burst's events
    stack.children.remove(stack.services.child)  # type: ignore[arg-type]
    stack.services.stop()
    bridge = run_deployment(
        stack, BRIDGE, {"start_date": started.isoformat(), "reset_checkpoint": True}
    )
    bridged = eventually("the bridge run", lambda: finished(stack, bridge), timeout=300)
    assert bridged["type"] == "COMPLETED", bridged
    assert triggered_runs(stack, PROMOTE) == [], "no trigger can fire without the services"
    stack.children.insert(0, stack.services.launch())
    stack.services.wait_ready()

    # a rolling restart of the second replica while the promotion runs
    eventually("the first promotions", lambda: len(managed(control)) >= 8, timeout=300)
    assert len(managed(control)) < BURST, "the restart came mid-burst"
    restart_prefect_server(stack, stack.replicas[1])

    def all_done() -> list[dict[str, Any]] | None:
        runs = triggered_runs(stack, PROMOTE)
        return runs if final(runs) and set(managed(control)) >= vendors else None

    runs = eventually("every vendor managed", all_done, timeout=600)
    assert {run["state"]["type"] for run in runs} == {"COMPLETED"}, runs
    assert len(runs) <= 3, "a burst is one run, or a few"
    counts = managed(control)
    assert set(counts) == vendors and set(counts.values()) == {1}, "each vendor managed once"
    stats = control.stats()
    assert stats["token_mints"] == {DEMO_MANAGE.client_id: 1} and stats["unauthorized"] == 0
    assert events_named(stack, "compliance.vendor_discovered", started) == BURST
    assert_no_secret_in_prefect_database(stack)


def active_slots(stack: LocalStack) -> dict[str, int]:
    """Every concurrency limit's slots taken (deployments' limits and the token endpoint's)."""
    limits = stack.request("POST", "/v2/concurrency_limits/filter", {"limit": 200}).json()
    return {limit["name"]: limit["active_slots"] for limit in limits}


def test_a_redis_crash_under_a_burst_leaves_no_concurrency_slot_taken(
    stack: LocalStack, redis_server: OwnRedis
) -> None:
    """Prefect frees a slot only through its lease, and the leases live in Redis: a Redis that
    forgot them would leave the deployment's slot taken for good (no later run starts). With
    the recipe's append-only file, Redis killed (SIGKILL) mid-burst and started again keeps
    every lease: every vendor is managed once and no slot stays taken."""
    control = SandboxControl(stack.sandbox_url)
    control.set_fault(ADD_TO_MANAGED, latency_ms=PROMOTION_LATENCY_MS)
    started = datetime.now(UTC) - timedelta(seconds=5)
    vendors = {control.inject("vendor_discovered")["id"] for _ in range(BURST // 2)}
    earlier = {run["id"] for run in triggered_runs(stack, PROMOTE)}
    bridge = run_deployment(stack, BRIDGE, {"start_date": started.isoformat()})
    assert eventually("the bridge run", lambda: finished(stack, bridge), 300)["type"] == "COMPLETED"

    def promoted() -> int:
        return len(set(managed(control)) & vendors)

    eventually("the first promotions", lambda: promoted() >= 8, timeout=300)
    held = {name: n for name, n in active_slots(stack).items() if n}
    assert held, "a promotion run holds its deployment's slot while Redis dies"
    redis_server.kill()
    redis_server.start()  # from its append-only file

    def all_done() -> list[dict[str, Any]] | None:
        runs = [r for r in triggered_runs(stack, PROMOTE) if r["id"] not in earlier]
        return runs if final(runs) and promoted() == len(vendors) else None

    runs = eventually("every vendor managed", all_done, timeout=600)
    assert {run["state"]["type"] for run in runs} == {"COMPLETED"}, runs
    counts = managed(control)
    assert {counts[vendor] for vendor in vendors} == {1}, "each vendor managed once"
    eventually("every slot given back", lambda: set(active_slots(stack).values()) <= {0}, 60)


ATTACH = """
import asyncio, json
from flows.document_links import attach_document_links

async def main():
    state = await attach_document_links(links=json.loads({links!r}), return_state=True)
    result = await state.result(raise_on_failure=False)
    summary = getattr(result, "summary", result)
    print("SUMMARY", json.dumps(summary.model_dump(mode="json")), flush=True)

asyncio.run(main())
"""


def test_two_machines_attaching_the_same_links_attach_each_once(stack: LocalStack) -> None:
    control = SandboxControl(stack.sandbox_url)
    seed = control.seed()
    documents = seed["documents"]
    links = [
        {
            "document_id": documents[n % len(documents)],
            "url": f"https://ev.example/{n}",
            "title": "E",
        }
        for n in range(LINKS)
    ]
    code = textwrap.dedent(ATTACH.format(links=json.dumps(links)))
    machines = stack.worker_names()[:2]
    assert (
        stack.worker_env(machines[0])["COMPLIANCE_STATE_DIR"]
        != stack.worker_env(machines[1])["COMPLIANCE_STATE_DIR"]
    )
    children = [start_child(code, stack.worker_env(name)) for name in machines]
    outputs = [child.communicate(timeout=300)[0] for child in children]
    summaries = [
        json.loads(line.removeprefix("SUMMARY "))
        for output in outputs
        for line in output.splitlines()
        if line.startswith("SUMMARY ")
    ]
    assert len(summaries) == 2, outputs
    attached = control.stats()["write_counts"]["document_link"]
    expected = {f"{link['document_id']} {link['url']}" for link in links}
    assert set(attached) == expected and set(attached.values()) == {1}, "each link attached once"
    # each run sent what it claimed and skipped what the other had attached; a link the other
    # run had claimed but not yet attached is reported for review
    # (its fate not yet known), never sent twice and never dropped
    for summary in summaries:
        assert set(summary["counts"]) <= {"succeeded", "skipped", "needs_review"}, summary["counts"]
        review = {
            f"{f['rerun_input']['document_id']} {f['rerun_input']['url']}"
            for f in (summary["failed_items"])
        }
        assert review <= expected and len(review) == summary["counts"].get("needs_review", 0)
    assert sum(summary["counts"].get("succeeded", 0) for summary in summaries) == LINKS


def events_named(stack: LocalStack, name: str, since: datetime) -> int:
    """How many events of that name the event store holds since ``since``."""
    body = {
        "filter": {"event": {"name": [name]}, "occurred": {"since": since.isoformat()}},
        "limit": 1,
    }
    return int(stack.request("POST", "/events/filter", body).json()["total"])
