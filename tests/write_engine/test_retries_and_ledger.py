"""The one retry layer of a write (the client's conditions; tasks add none) and the
document-link ledger (a local file, or a PostgreSQL database shared by every worker)."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import stat
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prefect import Task
from sqlalchemy.engine import URL

import tasks
from compliance_api.errors import (
    InvalidRequestError,
    NotFoundError,
    RateLimitedError,
    ServerError,
    TransportError,
)
from compliance_api.retry import RetryMode, RetryNotice, is_retryable
from runtime.retries import log_client_retry
from tasks import documents
from write_engine.link_ledger import LinkLedger, ledger_url

OP = "op"
#: every module of tasks/, so a new one is checked without being listed here
TASK_MODULES = [
    importlib.import_module(f"tasks.{module.name}")
    for module in pkgutil.iter_modules(tasks.__path__)
]


@pytest.mark.parametrize(
    ("error", "idempotent", "create"),
    [
        (ServerError("x", operation=OP, status_code=503), True, False),
        (RateLimitedError("x", operation=OP), True, True),
        (TransportError("x", operation=OP, request_sent=True), True, False),
        (TransportError("x", operation=OP, request_sent=False), True, True),
        (NotFoundError("x", operation=OP, status_code=404), False, False),
        (InvalidRequestError("x", operation=OP, status_code=400), False, False),
        (RuntimeError("bug"), False, False),
        # the token endpoint's failure is the broker's to retry, not the data call's
        (ServerError("x", operation="client_credentials", status_code=503), False, False),
    ],
)
def test_only_transient_errors_are_retried_and_creates_only_when_unapplied(
    error: BaseException, idempotent: bool, create: bool
) -> None:
    assert is_retryable(error, RetryMode.IDEMPOTENT, OP) is idempotent
    assert is_retryable(error, RetryMode.UNAPPLIED_ONLY, OP) is create


def api_tasks() -> list[Task[..., object]]:
    """Every task that takes the data client, found rather than listed (a new one counts)."""
    return [
        value
        for module in TASK_MODULES
        for value in vars(module).values()
        if isinstance(value, Task) and "client" in inspect.signature(value.fn).parameters
    ]


def test_tasks_that_call_the_api_declare_no_retries_of_their_own() -> None:
    """The client's retries are the only layer: a task retry on top would multiply the sends."""
    tasks = api_tasks()
    names = {task.name for task in tasks}
    assert {"Add people to group", "Attach document link", "Promote discovered vendor"} <= names
    assert [(task.name, task.retries) for task in tasks if task.retries] == []
    assert all(task.retry_condition_fn is None for task in tasks)
    assert documents.create_document_link.persist_result is False


def test_client_retries_are_logged_with_the_attempt_and_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = ServerError("down", operation="add_people_to_group", status_code=503)
    with caplog.at_level(logging.WARNING, logger="compliance_flows.retries"):
        log_client_retry(6)(RetryNotice("add_people_to_group", 2, 0.5, error))
    (record,) = caplog.records
    assert record.getMessage() == (
        "Retrying add_people_to_group in 0.5 s (attempt 2 of 6 failed: "
        "add_people_to_group failed (503): down)"
    )


@pytest.fixture(params=["local file", "shared PostgreSQL"])
def ledger_at(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], URL]:
    """Where a ledger lives: the state dir's file, or a fresh PostgreSQL database."""
    if request.param == "local file":
        return lambda: ledger_url(tmp_path, None)
    database = request.getfixturevalue("postgres_databases")()
    return lambda: ledger_url(tmp_path / "unused", database)


def test_ledger_claims_once_per_tenant_and_survives_reopening(ledger_at: Callable[[], URL]) -> None:
    with LinkLedger(ledger_at(), "tenant-a") as ledger:
        assert ledger.claim("d-1", "https://x.test/a", "run-1") is None
        earlier = ledger.claim("d-1", "https://x.test/a", "run-2")
        assert earlier is not None and earlier.state == "pending" and earlier.flow_run_id == "run-1"
        ledger.mark_attached("d-1", "https://x.test/a", "link-9", "run-1")
        assert ledger.claim("d-2", "https://x.test/a", "run-1") is None
        ledger.release("d-2", "https://x.test/a")
    with LinkLedger(ledger_at(), "tenant-a") as reopened:
        entry = reopened.lookup("d-1", "https://x.test/a")
        assert entry is not None and (entry.state, entry.link_id) == ("attached", "link-9")
        assert reopened.lookup("d-2", "https://x.test/a") is None
        reopened.release("d-1", "https://x.test/a")  # release never forgets an attached link
        assert reopened.lookup("d-1", "https://x.test/a") is not None
    with LinkLedger(ledger_at(), "tenant-b") as other:
        assert other.claim("d-1", "https://x.test/a", "run-3") is None


def test_two_ledgers_claiming_the_same_links_at_once_win_each_once(
    ledger_at: Callable[[], URL],
) -> None:
    """Two workers (own connections, racing in threads) claim the same 200 links."""
    links = [(f"d-{n}", f"https://x.test/{n}") for n in range(200)]
    start = threading.Barrier(2, timeout=30)

    def claim_all(run: str) -> list[tuple[str, str]]:
        try:
            ledger = LinkLedger(ledger_at(), "tenant")
        except BaseException:
            start.abort()  # the other thread stops waiting; this error is the one reported
            raise
        with ledger:
            start.wait()
            return [link for link in links if ledger.claim(*link, run) is None]

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(claim_all, run) for run in ("run-1", "run-2")]
    causes = [f.exception() for f in futures if f.exception() is not None]
    causes.sort(key=lambda error: isinstance(error, threading.BrokenBarrierError))
    if causes:
        raise causes[0]
    won = [future.result() for future in futures]
    assert sorted(won[0] + won[1]) == sorted(links)  # every link claimed, none twice


def test_the_local_ledger_and_its_journal_are_the_owners_only(tmp_path: Path) -> None:
    """The SQLite ledger (0600): SQLite gives its -wal and -shm files the file's mode."""
    with LinkLedger(ledger_url(tmp_path / "state", None), "t") as ledger:
        assert ledger.claim("d-1", "https://x.test/a", "run-1") is None
        files = sorted((tmp_path / "state").iterdir())
        assert len(files) == 3, files  # the ledger, its -wal and -shm
        assert {stat.S_IMODE(path.stat().st_mode) for path in files} == {0o600}
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700


def test_the_ledger_says_where_it_is_and_never_the_password(tmp_path: Path) -> None:
    local = LinkLedger(ledger_url(tmp_path, None), "t")
    assert "this machine only" in local.describe() and not local.shared
    url = ledger_url(tmp_path, "postgresql+asyncpg://app:hunter2@db.example:5432/prefect")
    assert url.drivername == "postgresql+psycopg" and url.password == "hunter2"
    assert "hunter2" not in url.render_as_string(hide_password=True)
    with pytest.raises(ValueError, match="must be PostgreSQL"):
        ledger_url(tmp_path, "mysql://db.example/x")
