"""Secret scan: after the suites, no client secret, access token or refresh token anywhere.

A collection hook (``tests/conftest.py``) runs it last, so in a full run it sees what every test
left behind in this session: the Prefect database (logs, events, artifacts, flow-run
parameters and state messages, variables, block documents - read from the file and through the
API), PREFECT_HOME (local result storage, profiles), every test's state directory (token stores,
ledgers, exports: all under pytest's base temp and COMPLIANCE_STATE_DIR) and every log record
emitted in this process since collection. Run on its own, it first produces activity of its own
(mints, a revoked token and its re-mint, failed items, reruns) so it still has something to
find.

The literal values come from the sandbox (``GET /_sandbox/issued-credentials``: every access
and refresh token and client secret handed out since the session's sandbox started, resets
included) plus the demo applications' published secrets. Sandboxes that single tests start for
themselves are not covered by the token list (their client secrets are: the demo set is fixed).

Runs that take their credentials from a ``Compliance Credentials`` block are covered: the
activity below includes one, with no credentials in the environment. Its block is deleted when
the run is over, because the scan reads every block document *with* its secrets and a block is
meant to hold one; what the scan then proves is that the run left the secret nowhere else, and
that the database file holds no plain-text copy of it (the block was stored encrypted).
``tests/runtime/test_credentials_block.py`` checks the file while the block exists.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sandbox.apps import DEMO_CREDENTIALS, DEMO_MANAGE
from sandbox.runner import SandboxHandle
from tests.fixtures.credentials import credentials_block
from tests.fixtures.prefect import prefect_database_files

DEMO_SECRETS = [app.client_secret for app in DEMO_CREDENTIALS]
ADD_PEOPLE = "POST /v1/groups/{groupId}/add-people"
#: a run of URL-safe characters at least as long as the shortest token
_CANDIDATE = re.compile(rb"[A-Za-z0-9_\-]{20,}")


# --------------------------------------------------------------------------- log capture
class _Recorder:
    """Every log message created in this process from collection on.

    A log-record factory rather than a handler: Prefect reconfigures its loggers' handlers
    (``dictConfig``) when its settings change, which would silently drop a handler.
    """

    def __init__(self) -> None:
        self.messages: list[str] = []
        self._guard = threading.Lock()
        self._factory = logging.getLogRecordFactory()
        logging.setLogRecordFactory(self._record)

    def _record(self, *args: object, **kwargs: object) -> logging.LogRecord:
        record = self._factory(*args, **kwargs)
        try:
            text = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                text += f"\n{record.exc_info[1]!r}"
        except Exception:  # a broken log call must not break the suite
            return record
        with self._guard:
            self.messages.append(text)
        return record


RECORDER = _Recorder()


# --------------------------------------------------------------------------- the scanner
@dataclass
class Secrets:
    """The literal values to look for; tokens are matched by windows of their exact lengths."""

    plain: set[str]
    tokens: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._lengths = sorted({len(t) for t in self.tokens})
        self._encoded = {t.encode() for t in self.tokens}
        self._plain = {s.encode() for s in self.plain}

    def hits(self, data: bytes) -> set[str]:
        found = {s.decode() for s in self._plain if s in data}
        if not self._lengths:
            return found
        for match in _CANDIDATE.finditer(data):
            run = match.group()
            for length in self._lengths:
                for start in range(0, len(run) - length + 1):
                    if run[start : start + length] in self._encoded:
                        found.add(run[start : start + length].decode())
        return found


@dataclass
class Report:
    scanned: dict[str, int] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)

    def count(self, kind: str, n: int = 1) -> None:
        self.scanned[kind] = self.scanned.get(kind, 0) + n

    def check(self, where: str, data: bytes | str, secrets: Secrets) -> None:
        raw = data.encode(errors="replace") if isinstance(data, str) else data
        for secret in secrets.hits(raw):
            self.hits.append(f"{where}: {_redact(secret)}")


def _redact(secret: str) -> str:
    return f"{secret[:4]}...({len(secret)} chars)"


def _files(roots: Iterable[Path]) -> Iterator[Path]:
    seen: set[Path] = set()
    for root in roots:
        if not root.exists():
            continue
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and not path.is_symlink() and path.resolve() not in seen:
                seen.add(path.resolve())
                yield path


def scan_files(roots: Iterable[Path], secrets: Secrets, report: Report) -> None:
    for path in _files(roots):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        report.count("files")
        report.count("bytes", len(data))
        report.check(str(path), data, secrets)


async def offset_pages(
    read: Callable[..., Awaitable[Sequence[Any]]], size: int = 200
) -> AsyncIterator[Sequence[Any]]:
    """Every page of a Prefect ``read_*`` call that pages by ``limit`` and ``offset``."""
    for offset in range(0, 1_000_000, size):
        page = await read(limit=size, offset=offset)
        yield page
        if len(page) < size:
            return


async def scan_prefect_api(secrets: Secrets, report: Report) -> None:
    """What the Prefect API serves: logs, artifacts, events, flow runs, variables, blocks."""
    from prefect.client.orchestration import get_client
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogHandler

    await APILogHandler.aflush()  # logs and events are sent in batches: send what is queued
    await EventsWorker.drain_all()
    async with get_client() as client:
        async for logs in offset_pages(client.read_logs):
            for log in logs:
                report.check(f"log {log.id}", log.message, secrets)
            report.count("logs", len(logs))
        async for artifacts in offset_pages(client.read_artifacts):
            for artifact in artifacts:
                text = f"{artifact.key} {artifact.description} {artifact.data!r}"
                report.check(f"artifact {artifact.key or artifact.id}", text, secrets)
            report.count("artifacts", len(artifacts))
        async for runs in offset_pages(client.read_flow_runs):
            for run in runs:
                report.check(f"flow run {run.name}", run.model_dump_json(), secrets)
            report.count("flow_runs", len(runs))
        variables = await client.read_variables()
        for variable in variables:
            report.check(f"variable {variable.name}", repr(variable.value), secrets)
        report.count("variables", len(variables))
        blocks = await client.read_block_documents(include_secrets=True)
        for block in blocks:
            report.check(f"block {block.name}", repr(block.data), secrets)
        report.count("block_documents", len(blocks))
        page = await client.read_events(limit=50)
        pages = 0
        while page is not None and pages < 500:
            for event in page.events:
                report.check(f"event {event.event}", event.model_dump_json(), secrets)
            report.count("events", len(page.events))
            pages += 1
            page = await client.read_events_page(page.next_page) if page.next_page else None


# --------------------------------------------------------------------------- activity
@pytest.fixture
async def activity(flow_env: SandboxHandle, monkeypatch: pytest.MonkeyPatch) -> SandboxHandle:
    """Runs that handle tokens and fail in the ways that tend to leak: a revoked token and its
    re-mint mid-run, per-item errors, an exception, a rerun, a dry run, and a run whose
    credentials come from a Compliance Credentials block."""
    from flows.add_people_to_groups import add_people_to_groups
    from flows.promote_vendors import promote_discovered_vendors
    from flows.rerun import rerun_failed_items

    monkeypatch.setenv("COMPLIANCE_MAX_RETRIES", "0")
    sandbox = flow_env
    seed = sandbox.control.seed()
    group = seed["groups"][0]
    sandbox.control.set_fault(route=ADD_PEOPLE, latency_ms=100)
    stop = threading.Event()

    def revoke_once() -> None:
        while not stop.is_set():
            if sandbox.control.stats()["route_counts"].get(ADD_PEOPLE, 0) >= 2:
                sandbox.control.revoke(DEMO_MANAGE.client_id)
                return
            stop.wait(0.02)

    revoker = threading.Thread(target=revoke_once, daemon=True)
    revoker.start()
    state = await add_people_to_groups(
        group_ids=[group],
        person_ids=[*seed["people"][:600], "0000000000000000000000aa"],
        concurrency=2,
        return_state=True,
    )
    stop.set()
    revoker.join()
    sandbox.control.clear_faults()
    await rerun_failed_items(flow_run_id=str(state.state_details.flow_run_id), return_state=True)
    await promote_discovered_vendors(
        discovered_vendor_ids=seed["discovered_vendors"][:2], dry_run=True, return_state=True
    )
    await promote_discovered_vendors(discovered_vendor_ids=["bad id"], return_state=True)
    async with credentials_block(sandbox):  # the credentials from a block, none in the env
        state = await promote_discovered_vendors(
            discovered_vendor_ids=seed["discovered_vendors"][2:3], return_state=True
        )
    assert state.is_completed(), state.message
    assert sandbox.control.stats()["token_mints"].get(DEMO_MANAGE.client_id, 0) >= 2
    return sandbox


# --------------------------------------------------------------------------- the tests
def test_the_scanner_finds_planted_secrets() -> None:
    token = "A" * 10 + "tokenvalue_-" + "B" * 21  # 43 characters, like the sandbox's
    secrets = Secrets(plain={DEMO_MANAGE.client_secret}, tokens={token})
    # outside pytest's base temp, which the real scan covers
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        (root / "a.log").write_text(f"prefix{token}suffix and '{DEMO_MANAGE.client_secret}'")
        (root / "clean.log").write_text("nothing " + token[:-1])
        report = Report()
        scan_files([root], secrets, report)
    assert report.scanned["files"] == 2
    assert len(report.hits) == 2 and all("a.log" in hit for hit in report.hits)


async def test_no_secret_anywhere_after_the_suites(
    activity: SandboxHandle, tmp_path_factory: pytest.TempPathFactory
) -> None:
    issued = activity.control.issued_credentials()
    tokens = set(issued["access_tokens"]) | set(issued["refresh_tokens"])
    assert issued["access_tokens"], "the sandbox must have issued tokens to look for"
    secrets = Secrets(plain=set(DEMO_SECRETS) | set(issued["client_secrets"]), tokens=tokens)
    report = Report()

    database = prefect_database_files()
    assert database, "the Prefect test database must be found and scanned"
    roots = [
        *database,
        Path(os.environ["PREFECT_HOME"]),
        Path(os.environ["COMPLIANCE_STATE_DIR"]).parent,  # conftest's session directory
        tmp_path_factory.getbasetemp(),  # every test's tmp_path: state dirs, ledgers, exports
    ]
    scan_files(roots, secrets, report)
    await scan_prefect_api(secrets, report)
    for index, message in enumerate(list(RECORDER.messages)):
        report.check(f"log record {index}", message, secrets)
    report.count("log_records", len(RECORDER.messages))

    print(f"secret scan coverage: {report.scanned}")  # noqa: T201 - shown with -rP
    assert report.scanned.get("logs", 0) > 0 and report.scanned.get("artifacts", 0) > 0
    assert report.scanned.get("events", 0) > 0 and report.scanned.get("log_records", 0) > 0
    assert report.hits == [], f"secrets found ({report.scanned}):\n" + "\n".join(report.hits)
