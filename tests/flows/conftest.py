"""Flow tests: the session sandbox and Prefect server, a fresh state dir per test.

``flows_env`` (write flows) makes the data client's retry waits zero (a ``Retry-After`` is
capped at 0.05 s); their count and conditions stay as in production, since they are the only
retries of a call in a flow run (the tasks declare none), so a fault the sandbox injects is
retried - at most 6 sends per call - by the client under test. ``reads_env`` (read flows) gives
a generous token-endpoint limit. Helpers are in ``tests/fixtures/``.
"""

from __future__ import annotations

import pytest

from sandbox.runner import SandboxHandle


@pytest.fixture
def flows_env(write_flow_env: SandboxHandle) -> SandboxHandle:
    """Sandbox reset, demo manage app, private state dir, instant client retries."""
    return write_flow_env


@pytest.fixture
def reads_env(flow_env: SandboxHandle) -> SandboxHandle:
    """Sandbox reset, demo manage app, private state dir, a generous token-endpoint limit."""
    return flow_env
