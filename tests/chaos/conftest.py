"""Fault-tolerance tests: the sandbox's fault injection against the real flows.

Every scenario ends with the same four proofs, read from the sandbox's per-item counters:
0 items lost, 0 items applied twice, every permanent failure reported with a rerun input (and
the rerun finishes the job), and no lock held by a dead process for long (a file lock: at once;
a lock on the Prefect server: within 90 s, tests/deployments/test_scale_out.py).

Selection: every test here is marked ``chaos``; the slow ones are also marked ``slow`` and need
``CHAOS_FULL=1``, which ``make test`` sets (a plain ``pytest`` runs only the fast ones).

The data client's retry waits are set to zero (a ``Retry-After`` is capped at 0.05 s); their
count and conditions stay as in production, since they are the only retries of a call in a
flow run (the tasks declare none), so faults reach the one retry layer under test.
"""

from __future__ import annotations

import pytest

from sandbox.runner import SandboxHandle


@pytest.fixture
def chaos_env(write_flow_env: SandboxHandle) -> SandboxHandle:
    return write_flow_env
