"""``python -m deployments.prefect_entry server start …``: Prefect's own CLI, in a process that
has the project's orchestration rule installed (``deployments/orchestration.py``); the project
starts every Prefect server and services process this way."""

from __future__ import annotations

from deployments.orchestration import install

if __name__ == "__main__":
    install()
    from prefect.cli import app

    app()
