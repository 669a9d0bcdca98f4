"""``prefect server start`` as a child process, on SQLite (default) or PostgreSQL.

The stack (``make serve``, the end-to-end tests) and the PostgreSQL test fixtures start their
server here, so every server the project runs gets the same settings
(``deployments/server_settings.py``): lease storage that survives a restart, batched task-run
recording, and the scheduler and triggers on. ``restart()`` stops and starts it on the same
port and database, as an operator's restart would.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from deployments.database import prepare_database
from deployments.processes import ChildProcess, wait_until
from deployments.server_settings import apply_server_settings

HOST = "127.0.0.1"
DATABASE_URL_ENV = "PREFECT_API_DATABASE_CONNECTION_URL"


@dataclass
class PrefectServerOptions:
    port: int
    #: PREFECT_HOME of the server: its SQLite database (when no database_url) and lease files
    home: Path
    #: postgresql+asyncpg://USER@HOST:PORT/DB; None: SQLite in ``home``
    database_url: str | None = None
    ui: bool = False
    log_path: Path | None = None
    startup_timeout: float = 120.0
    #: extra environment for the server process
    env: Mapping[str, str] = field(default_factory=dict)


class PrefectServer:
    """One Prefect server; ``start()``, ``stop()``, ``restart()``."""

    def __init__(self, options: PrefectServerOptions, base_env: Mapping[str, str]) -> None:
        self.options = options
        self.base_env = dict(base_env)
        self.child: ChildProcess | None = None
        if options.database_url:
            prepare_database(options.database_url)

    @property
    def api_url(self) -> str:
        return f"http://{HOST}:{self.options.port}/api"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.options.port}"

    @property
    def backend(self) -> str:
        return "PostgreSQL" if self.options.database_url else "SQLite"

    def env(self) -> dict[str, str]:
        env = dict(self.base_env)
        env["PREFECT_HOME"] = str(self.options.home)
        env["PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED"] = "true"
        env["PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED"] = "true"
        env["PREFECT_UI_API_URL"] = self.api_url
        # links in notifications (`ui_url` in automation templates) are built from this; without
        # PREFECT_API_URL in the server's environment Prefect cannot infer it
        env.setdefault("PREFECT_UI_URL", self.ui_url)
        env.pop(DATABASE_URL_ENV, None)
        if self.options.database_url:
            env[DATABASE_URL_ENV] = self.options.database_url
        apply_server_settings(env)
        env.update(self.options.env)
        return env

    def launch(self) -> ChildProcess:
        """Start the process without waiting (``wait_ready`` waits); returns it."""
        self.options.home.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "prefect",
            "server",
            "start",
            "--host",
            HOST,
            "--port",
            str(self.options.port),
            "--ui" if self.options.ui else "--no-ui",
            "--analytics-off",
        ]
        self.child = ChildProcess(
            "prefect server",
            command,
            env=self.env(),
            cwd=Path.cwd(),
            log_path=self.options.log_path,
        )
        return self.child

    def wait_ready(self) -> None:
        watch = [self.child] if self.child is not None else []
        wait_until(
            f"the Prefect server ({self.backend})",
            lambda: _http_ok(f"{self.api_url}/health"),
            timeout=self.options.startup_timeout,
            watch=watch,
        )

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
