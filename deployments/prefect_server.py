"""``prefect server start`` as a child process, on SQLite (default) or PostgreSQL, with the
project's server settings (``server_settings.py``); ready when ``/api/health`` answers.

With Redis a server can be split as Prefect's scaling guide does: API replicas (``role="api"``,
a process and port each, so one restarts while the others serve) and one ``role="services"``
process, which serves nothing (only its exit is watched). Every role gets the auth string.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from compliance_api.files import make_dirs
from deployments.auth import CLIENT_AUTH_ENV, SERVER_AUTH_ENV, check_exposure, url_host
from deployments.database import tls_settings
from deployments.processes import ChildProcess, http_ok, wait_until
from deployments.server_settings import apply_server_settings, redis_settings

HOST = "127.0.0.1"


@dataclass
class PrefectServerOptions:
    port: int
    #: PREFECT_HOME of the server: its SQLite database (when no database_url) and lease files
    home: Path
    #: postgresql+asyncpg://USER@HOST:PORT/DB (an existing database); None: SQLite in ``home``
    database_url: str | None = None
    #: the CA of the database's certificate: verified TLS to PostgreSQL (another host needs it)
    database_ca_file: Path | None = None
    ui: bool = False
    log_path: Path | None = None
    startup_timeout: float = 120.0
    #: redis://HOST:PORT/DB for messaging, event ordering, leases and the docket (prefect-redis)
    redis_url: str | None = None
    #: ``all``: API and services in one process; ``api``: API only; ``services``: services only
    role: Literal["all", "api", "services"] = "all"
    #: the address the API (and UI) listens on; beyond loopback only with an auth string
    host: str = HOST
    #: USER:PASSWORD: Prefect's basic auth (PREFECT_SERVER_API_AUTH_STRING); None: none
    auth_string: str | None = field(default=None, repr=False)
    #: the API address clients, the UI and links use, if not this server's (TLS proxy, replica 1)
    public_api_url: str | None = None


class PrefectServer:
    """One Prefect server process; ``start()`` (``launch()`` then ``wait_ready()``), ``stop()``."""

    def __init__(self, options: PrefectServerOptions, base_env: Mapping[str, str]) -> None:
        self.options = options
        self.base_env = dict(base_env)
        self.child: ChildProcess | None = None

    @property
    def api_url(self) -> str:
        return f"{self.ui_url}/api"

    @property
    def ui_url(self) -> str:
        return f"http://{url_host(self.options.host)}:{self.options.port}"

    @property
    def name(self) -> str:
        if self.options.role == "services":
            return "prefect services"
        return "prefect server" + (f" :{self.options.port}" if self.options.role == "api" else "")

    def env(self) -> dict[str, str]:
        env = dict(self.base_env)
        env["PREFECT_HOME"] = str(self.options.home)
        env["PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED"] = "true"
        env["PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED"] = "true"
        public_api = self.options.public_api_url or self.api_url
        env["PREFECT_UI_API_URL"] = public_api
        # notification links are built from it; Prefect cannot infer it here
        env.setdefault("PREFECT_UI_URL", public_api.removesuffix("/api"))
        if self.options.auth_string:
            # the server checks it; as a client of its own API (the services) it sends it
            env[SERVER_AUTH_ENV] = self.options.auth_string
            env[CLIENT_AUTH_ENV] = self.options.auth_string
        if self.options.database_url:
            env["PREFECT_API_DATABASE_CONNECTION_URL"] = self.options.database_url
        if self.options.database_ca_file is not None:
            env.update(tls_settings(self.options.database_ca_file))
        if self.options.redis_url:
            env.update(redis_settings(self.options.redis_url))
        apply_server_settings(env)
        return env

    def launch(self) -> ChildProcess:
        """Start the process without waiting; ``AuthError`` beyond loopback without auth."""
        env = self.env()
        command = [sys.executable, "-m", "deployments.prefect_entry", "server"]
        if self.options.role == "services":
            command += ["services", "start"]
        else:
            check_exposure(self.options.host, env.get(SERVER_AUTH_ENV))
            command += ["start", "--host", self.options.host, "--port", str(self.options.port)]
            command += ["--ui" if self.options.ui else "--no-ui", "--analytics-off"]
            command += ["--no-services"] if self.options.role == "api" else []
        make_dirs(self.options.home)
        self.child = ChildProcess(
            self.name, command, env=env, cwd=Path.cwd(), log_path=self.options.log_path
        )
        return self.child

    def wait_ready(self) -> None:
        """Until ``/api/health`` answers (the services process: only that it has not exited)."""
        backend = "PostgreSQL" if self.options.database_url else "SQLite"
        wait_until(
            f"the {self.name} ({backend})",
            lambda: self.options.role == "services" or http_ok(f"{self.api_url}/health"),
            timeout=self.options.startup_timeout,
            watch=[self.child] if self.child is not None else [],
        )

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None
