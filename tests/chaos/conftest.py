"""Fault-tolerance tests: the sandbox's fault injection against the real flows.

Every scenario ends with the same four proofs, read from the sandbox's per-item counters:
0 items lost, 0 items applied twice, every permanent failure reported with a rerun input (and
the rerun finishes the job), and no lock held by a dead process for long (a file lock: at once;
a lock on the Prefect server: within 90 s, tests/deployments/test_scale_out.py).

Selection: every test here is marked ``chaos``. The fast ones run in the default ``pytest``
(``make test``); the slow ones are also marked ``slow`` and run only with
``CHAOS_FULL=1 uv run --no-sync pytest -m chaos``.

Task retry waits are set to zero (the declared counts and conditions stay), and the data
client's own retries are off (``COMPLIANCE_MAX_RETRIES=0``) unless a scenario turns them on,
so faults reach the Prefect task retries under test.
"""

from __future__ import annotations

import pytest

from sandbox.runner import SandboxHandle


@pytest.fixture
def chaos_env(write_flow_env: SandboxHandle) -> SandboxHandle:
    return write_flow_env
