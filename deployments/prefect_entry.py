"""``python -m deployments.prefect_entry server start …``: Prefect's own CLI, in a process that
has the project's orchestration rule installed (``deployments/orchestration.py``) and serves the
API behind the access policy (``deployments/gatekeeper.py``); the project starts every Prefect
server and services process this way."""

from __future__ import annotations

from deployments import gatekeeper
from deployments.access import load_policy
from deployments.orchestration import install
from deployments.settings import deployment_settings

if __name__ == "__main__":
    install()
    # a policy file that cannot be used stops the start
    settings = deployment_settings()
    gatekeeper.install(load_policy(), settings.decision_key_file, settings.people_file)
    from prefect.cli import app

    app()
