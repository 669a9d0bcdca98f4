"""Fault-tolerance tests: the sandbox's fault injection against the real flows.

Every scenario ends with the same four proofs, read from the sandbox's per-item counters:
0 items lost, 0 items applied twice, every permanent failure reported with a rerun input (and
the rerun finishes the job), and no lock held by a dead process for more than 60 s.

Selection: every test here is marked ``chaos``. The fast ones run in the default ``pytest``
(``make test``); the slow ones are also marked ``slow`` and run only with
``CHAOS_FULL=1 uv run --no-sync pytest -m chaos``.

Task retry waits are set to zero (the declared counts and conditions stay), and the data
client's own retries are off (``COMPLIANCE_MAX_RETRIES=0``) unless a scenario turns them on,
so faults reach the Prefect task retries under test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandbox.runner import SandboxHandle
from tests.fixtures.flows import run_flow, run_id

__all__ = ["run_flow", "run_id"]

ADD_PEOPLE = "POST /v1/groups/{groupId}/add-people"
ADD_TO_MANAGED = "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed"
CREATE_LINK = "POST /v1/documents/{documentId}/links"
REPO = Path(__file__).resolve().parents[2]
#: child processes may cache bytecode here (this environment turns caching off; without it
#: every child compiles Prefect from source, seconds of CPU per start)
PYCACHE = Path(tempfile.gettempdir()) / "compliance-flows-test-pycache"


FULL = os.environ.get("CHAOS_FULL") == "1"
slow = pytest.mark.skipif(not FULL, reason="slow chaos scenario: set CHAOS_FULL=1")


@pytest.fixture
def chaos_env(write_flow_env: SandboxHandle) -> SandboxHandle:
    return write_flow_env


def stats(sandbox: SandboxHandle) -> dict[str, Any]:
    return sandbox.control.stats()


def group_adds(sandbox: SandboxHandle, group: str) -> dict[str, int]:
    return dict(stats(sandbox)["group_add_counts"].get(group, {}))


def write_counts(sandbox: SandboxHandle, kind: str) -> dict[str, int]:
    return dict(stats(sandbox)["write_counts"][kind])


# --------------------------------------------------------------------------- child processes
def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This test's environment (sandbox, credentials, state dir) plus the harness's API URL."""
    from prefect.settings import get_current_settings

    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        PYTHONPYCACHEPREFIX=str(PYCACHE),
        PYTHONPATH=str(REPO),
        PREFECT_API_URL=str(get_current_settings().api.url),
        PREFECT_LOGGING_LEVEL="WARNING",
    )
    env.update(extra or {})
    return env


def start_child(code: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(
    condition: Callable[[], bool], child: subprocess.Popen[str], *, timeout: float = 180
) -> None:
    """Until ``condition`` holds; fails with the child's output if it exits or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if child.poll() is not None:
            out, err = child.communicate()
            raise AssertionError(f"child exited ({child.returncode}) early:\n{out}\n{err[-3000:]}")
        if time.monotonic() > deadline:
            child.kill()
            raise AssertionError("timed out waiting for the child")
        time.sleep(0.05)


def kill_hard(child: subprocess.Popen[str]) -> None:
    """SIGKILL: no cleanup, no finally blocks, no atexit - a crash or an OOM kill."""
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL


async def start_lock_holder(code: str) -> subprocess.Popen[str]:
    """Start ``code`` in a child that takes a lock and prints HELD; return once it holds it."""
    child = start_child(code, child_env())
    assert child.stdout is not None
    line = await asyncio.to_thread(child.stdout.readline)
    assert line.strip() == "HELD", child.stderr.read() if child.stderr else ""
    return child


async def settle_reviewed_links(
    present: list[dict[str, Any]], absent: list[dict[str, Any]]
) -> None:
    """The operator's follow-up of needs_review links, after checking each document: the links
    found there are marked attached (nothing sent), the missing ones are resent once."""
    from flows.document_links import attach_document_links
    from write_engine.outcomes import Outcome

    if present:
        _, settled = await run_flow(
            attach_document_links, links=present, unconfirmed_links="mark_attached"
        )
        assert settled.failed == 0
    if absent:
        _, resent = await run_flow(attach_document_links, links=absent, unconfirmed_links="resend")
        assert resent.counts == {Outcome.SUCCEEDED: len(absent)}
