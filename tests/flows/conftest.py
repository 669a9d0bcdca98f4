"""Flow tests: the session sandbox and Prefect server, a fresh state dir per test.

``flows_env`` (write flows) makes task retry waits zero (the declared counts and conditions
stay) and turns the data client's own retries off (``COMPLIANCE_MAX_RETRIES=0``), so a fault the
sandbox injects is seen - and retried - by the Prefect tasks under test. ``reads_env`` (read
flows) gives a generous token-endpoint limit. Helpers are in ``tests/fixtures/``.
"""

from __future__ import annotations

import pytest

from sandbox.runner import SandboxHandle


@pytest.fixture
def flows_env(write_flow_env: SandboxHandle) -> SandboxHandle:
    """Sandbox reset, demo manage app, private state dir, instant task retries."""
    return write_flow_env


@pytest.fixture
def reads_env(flow_env: SandboxHandle) -> SandboxHandle:
    """Sandbox reset, demo manage app, private state dir, a generous token-endpoint limit."""
    return flow_env
