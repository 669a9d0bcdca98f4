"""Test-session environment: a private PREFECT_HOME and quiet Prefect, set before Prefect loads.

Fixtures live in ``tests/fixtures/`` (one module per area) and are registered here.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_HOME = tempfile.mkdtemp(prefix="compliance-flows-tests-")
os.environ["PREFECT_HOME"] = os.path.join(_HOME, "prefect")
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["PREFECT_CLI_PROMPT"] = "false"
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ["COMPLIANCE_STATE_DIR"] = os.path.join(_HOME, "state")
# Keep a developer's own .env or COMPLIANCE_* variables out of the tests.
for _name in list(os.environ):
    if _name.startswith("COMPLIANCE_") and _name != "COMPLIANCE_STATE_DIR":
        del os.environ[_name]

#: tests that must run after every other test of the session (they scan what the others left)
RUN_LAST = ("tests/secrets/",)

pytest_plugins = [
    "tests.fixtures.templates",
    "tests.fixtures.prefect",
    "tests.fixtures.sandbox",
    "tests.fixtures.flows",
    "tests.fixtures.postgres",
    "tests.fixtures.redis",
    "tests.fixtures.tokens",
    "tests.fixtures.hosts",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the secret scan to the end of the run, whatever the order of the folders."""
    last = [item for item in items if item.nodeid.startswith(RUN_LAST)]
    if last:
        items[:] = [item for item in items if item not in last] + last


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's PREFECT_HOME and state directory (its token store among them)."""
    shutil.rmtree(_HOME, ignore_errors=True)
