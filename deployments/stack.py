"""The local stack of ``make serve`` and the end-to-end tests: sandbox, Prefect server(s),
bootstrap, ``prefect deploy --all`` and workers, all state in one directory.

What it starts, its options and what the workers share: docs/operators.md §1, docs/scaling.md.
Secrets (auth string, token key, database and Redis passwords) reach children only through
their environment and are never printed.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Self
from urllib.parse import urlsplit

import httpx
from cryptography.fernet import Fernet
from pydantic import SecretStr
from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential

from compliance_api.files import make_dirs
from compliance_api.network import is_loopback
from deployments.auth import (
    AUTH_FILE_NAME,
    CLIENT_AUTH_ENV,
    SERVER_AUTH_ENV,
    SSL_CERT_ENV,
    basic_auth,
    check_auth_string,
    check_exposure,
    generate_auth_string,
    secret_file,
    url_host,
)
from deployments.automations import BLOCK_ENV, GRACE_ENV, WEBHOOK_ENV
from deployments.database import (
    check_tls,
    parse_database_url,
    prepare_database,
    prepare_ledger,
    redact_text,
    redacted,
)
from deployments.identity import IdentityEndpoint
from deployments.prefect_server import HOST, PrefectServer, PrefectServerOptions
from deployments.processes import (
    ChildProcess,
    http_ok,
    run_to_completion,
    tls_context,
    wait_until,
)
from deployments.redis_check import RedisFacts, check_redis_url, preflight
from deployments.resources import PROJECT_DIR, WORK_POOL_NAME
from deployments.tls_proxy import TLSProxy, TLSProxyOptions, require_nginx
from sandbox.launch import HEALTH_PATH, demo_environment, sandbox_command

DEFAULT_STATE_DIR = PROJECT_DIR / ".compliance-flows"
DEFAULT_PREFECT_PORT = 4200
DEFAULT_SANDBOX_PORT = 8700

KEY_FILE_NAME = "token-encryption.key"
#: the sandbox's control-API token, used only when the sandbox listens beyond loopback
SANDBOX_TOKEN_FILE_NAME = "sandbox-control-token"  # noqa: S105 - a file name
SANDBOX_TOKEN_ENV = "SANDBOX_CONTROL_TOKEN"  # noqa: S105 - the variable's name, not a token
WORKER_NAME = "local-worker"

#: a busy server (429/502/503) must make runs wait, not crash: Prefect's default is 5 retries
CLIENT_RETRY_ENV = {"PREFECT_CLIENT_MAX_RETRIES": "10"}
REDIS_SCHEMES = ("redis", "rediss", "redis+sentinel", "rediss+sentinel")


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = HOST) -> int:
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def preferred_port(port: int | None, host: str = HOST) -> int:
    """``port`` if free to listen on (servers set SO_REUSEADDR too, so TIME_WAIT does not
    count), otherwise (or ``None``) any free port."""
    if port is not None:
        with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
                return port
            except OSError:
                pass
    return free_port(host)


def _busy(error: BaseException) -> bool:
    """A 503, or a timed-out GET (a timed-out write may have landed: not repeated)."""
    if isinstance(error, httpx.HTTPStatusError):
        return error.response.status_code == 503
    return isinstance(error, httpx.TimeoutException) and error.request.method == "GET"


def encryption_key(state_dir: Path) -> str:
    """The Fernet key that encrypts stored tokens: created once, in a file only we can read."""
    return secret_file(state_dir / KEY_FILE_NAME, lambda: Fernet.generate_key().decode())


@dataclass
class StackOptions:
    state_dir: Path = DEFAULT_STATE_DIR
    #: that port if free, else (or None) any free port
    prefect_port: int | None = DEFAULT_PREFECT_PORT
    sandbox_port: int | None = DEFAULT_SANDBOX_PORT
    #: False: talk to the service configured by the COMPLIANCE_* variables instead
    use_sandbox: bool = True
    ui: bool = True
    worker_poll_seconds: float = 5.0
    worker_output_to_terminal: bool = False
    #: extra environment for the worker (and so for every flow run)
    worker_env: Mapping[str, str] = field(default_factory=dict)
    #: seconds without a heartbeat before a run is Crashed; None: the environment's, else 90
    unresponsive_run_grace_seconds: int | None = None
    startup_timeout: float = 120.0
    #: postgresql+asyncpg://USER@HOST:PORT/DB for the Prefect server; None: SQLite
    database_url: str | None = None
    #: workers, each standing for a machine of its own (docs/scaling.md)
    workers: int = 1
    #: the CA of the database's certificate: verified TLS to PostgreSQL, which a database on
    #: another host needs (the servers, bootstrap's preparation and the workers' ledger)
    database_ca_file: Path | None = None
    #: redis://HOST:PORT/DB: Prefect's messaging, event ordering and leases in Redis
    redis_url: str | None = None
    #: API servers (more than one: PostgreSQL and Redis required, and a services process)
    api_replicas: int = 1
    #: where the Prefect API/UI and the sandbox listen; every URL the stack hands out names it
    host: str = HOST
    #: USER:PASSWORD; default: PREFECT_SERVER_API_AUTH_STRING, else generated into state_dir
    auth_string: str | None = field(
        default_factory=lambda: os.environ.get(SERVER_AUTH_ENV), repr=False
    )
    #: PEM certificate (chain) and key for host: the nginx TLS proxy in front of the API
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: the CA bundle clients trust (PREFECT_API_SSL_CERT_FILE); default: tls_cert
    tls_ca: Path | None = None
    #: people sign in with the names and passwords of this file (``deployments/identity.py``):
    #: at the TLS proxy, or without TLS (loopback only) at the API server itself; the stack's
    #: own processes use the server directly
    people_file: Path | None = None
    #: the access policy the servers enforce (COMPLIANCE_ACCESS_POLICY; default: the shipped one)
    access_policy: Path | None = None
    #: worker name -> its own password in ``people_file``: that worker signs in at the proxy as
    #: itself (the ``worker`` role) instead of holding the server's string
    worker_passwords: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._check_tls()
        for name, most in (("workers", 16), ("api_replicas", 8)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise ValueError(f"{name}={value!r}: must be a whole number from 1 to {most}")
        if not self.host.strip():
            raise ValueError("host: must name an address, e.g. 127.0.0.1")
        if self.auth_string is not None:
            check_auth_string(self.auth_string, SERVER_AUTH_ENV)
        if self.database_url is not None:
            parse_database_url(self.database_url)  # a clear error before anything starts
            check_tls(self.database_url, self.database_ca_file)
        if self.database_ca_file is not None and not Path(self.database_ca_file).is_file():
            raise ValueError(f"database_ca_file={str(self.database_ca_file)!r}: no such file")
        if self.redis_url is not None and urlsplit(self.redis_url).scheme not in REDIS_SCHEMES:
            raise ValueError(
                f"redis_url={redact_text(self.redis_url)!r}: must be a redis:// or rediss:// URL"
            )
        if self.redis_url is not None:
            check_redis_url(self.redis_url)
        if self.api_replicas > 1 and (self.database_url is None or self.redis_url is None):
            raise ValueError(
                f"api_replicas={self.api_replicas}: several API servers need PostgreSQL "
                "(database_url) and Redis (redis_url) to share their state"
            )

    def _check_tls(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key: give both (the certificate and its key)")
        if self.tls_cert is None and self.tls_ca is not None:
            raise ValueError("tls_ca: only with tls_cert and tls_key")
        for name in ("tls_cert", "tls_key", "tls_ca"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{name}={str(path)!r}: no such file")
        if self.worker_passwords and self.people_file is None:
            raise ValueError("worker_passwords: workers sign in at the proxy (give people_file)")
        if self.people_file is not None and self.tls_cert is None and not is_loopback(self.host):
            raise ValueError(
                f"people_file: people sign in over plain HTTP only on loopback, not on "
                f"{self.host!r} (give tls_cert/tls_key)"
            )
        for name in ("people_file", "access_policy"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ValueError(f"{name}={str(path)!r}: no such file")
        if self.tls_cert is not None and self.api_replicas > 1:
            raise ValueError(
                "tls_cert with api_replicas > 1: put TLS on the load balancer in front of the "
                "replicas instead (docs/scaling.md)"
            )


class LocalStack:
    """``start()`` (or ``with LocalStack(options) as stack:``); ``stop()`` stops every child
    and everything below it."""

    def __init__(self, options: StackOptions | None = None) -> None:
        self.options = options or StackOptions()
        self.state_dir = self.options.state_dir.resolve()
        self.logs_dir = self.state_dir / "logs"
        self.prefect_port = 0
        #: the Prefect server's own port: ``prefect_port`` unless it sits behind the TLS proxy
        self.server_port = 0
        self.sandbox_port = 0
        self.sandbox_gov_port = 0
        self.children: list[ChildProcess] = []
        #: the API servers; the first is ``server`` (the one bootstrap and deploy talk to)
        self.replicas: list[PrefectServer] = []
        #: the workers' shared link ledger (its own role), once the database is prepared
        self.ledger_url: str | None = None
        #: what the Redis preflight found (``redis_url`` set; None before the start)
        self.redis: RedisFacts | None = None
        self.services: PrefectServer | None = None
        self.timings: dict[str, float] = {}
        self.bootstrap_output = ""

    @property
    def auth_file(self) -> Path:
        """The generated auth string (0600; ``cat`` it into the UI's login)."""
        return self.state_dir / AUTH_FILE_NAME

    @property
    def auth_from_environment(self) -> bool:
        """The operator supplied the auth string (PREFECT_SERVER_API_AUTH_STRING)."""
        return self.options.auth_string is not None

    @property
    def auth_string(self) -> str:
        """Prefect's basic-auth string for this stack (a secret: never print it)."""
        return self.options.auth_string or secret_file(self.auth_file, generate_auth_string)

    @property
    def http_auth(self) -> httpx.BasicAuth:
        """``auth=`` for an httpx client of this stack's Prefect API."""
        return basic_auth(self.auth_string)

    @property
    def sandbox_token_file(self) -> Path:
        return self.state_dir / SANDBOX_TOKEN_FILE_NAME

    @property
    def sandbox_control_token(self) -> str | None:
        """The bearer token of the sandbox's ``/_sandbox/`` API: only beyond loopback."""
        if is_loopback(self.options.host):
            return None
        return secret_file(self.sandbox_token_file, lambda: secrets.token_urlsafe(32))

    @property
    def ledger_password(self) -> str:
        """The ledger role's password (0600 file in the state dir, created once)."""
        return secret_file(self.state_dir / "ledger-db-password", lambda: secrets.token_urlsafe(32))

    def secret_values(self) -> list[str]:
        """Every secret value of this stack, for redaction and secret scans."""
        urls = [url for url in (self.options.database_url, self.options.redis_url) if url]
        values = [self.auth_string, encryption_key(self.state_dir), self.sandbox_control_token]
        values += [urlsplit(url).password for url in urls]
        values += [self.ledger_password] if self.ledger_url else []
        return [value for value in values if value]

    @property
    def server(self) -> PrefectServer | None:
        return self.replicas[0] if self.replicas else None

    @property
    def host(self) -> str:
        return self.options.host

    @property
    def api_url(self) -> str:
        return f"{self.ui_url}/api"

    @property
    def tls(self) -> bool:
        return self.options.tls_cert is not None

    @property
    def tls_ca(self) -> Path | None:
        """What clients trust for the https API (None without TLS)."""
        if self.options.tls_cert is None:
            return None
        return Path(self.options.tls_ca or self.options.tls_cert).resolve()

    @property
    def ui_url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{url_host(self.host)}:{self.prefect_port}"

    @property
    def sandbox_url(self) -> str:
        return f"http://{url_host(self.host)}:{self.sandbox_port}"

    @property
    def sandbox_gov_url(self) -> str:
        return f"http://{url_host(self.host)}:{self.sandbox_gov_port}"

    @property
    def database_path(self) -> Path:
        """The SQLite database (unused when ``database_url`` is set)."""
        return self.state_dir / "prefect" / "prefect.db"

    @property
    def database_label(self) -> str:
        if self.options.database_url is None:
            return f"SQLite ({self.database_path})"
        return f"PostgreSQL ({redacted(parse_database_url(self.options.database_url))})"

    def worker_names(self) -> list[str]:
        if self.options.workers == 1:
            return [WORKER_NAME]
        return [f"{WORKER_NAME}-{index}" for index in range(1, self.options.workers + 1)]

    def base_env(self) -> dict[str, str]:
        """This environment minus PREFECT_*, COMPLIANCE_* and the sandbox token: no child
        inherits a profile's server or a secret not meant for it."""
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("PREFECT_", "COMPLIANCE_")) and name != SANDBOX_TOKEN_ENV
        }
        env["PYTHONUNBUFFERED"] = "1"
        return env

    @property
    def own_api_url(self) -> str:
        """Where the stack's own processes reach the API: past the sign-in proxy, which is for
        people (they hold the server's auth string; people never do)."""
        if self.options.people_file is None or self.server is None:
            return self.api_url
        return self.server.api_url

    def client_env(self, api_url: str | None = None) -> dict[str, str]:
        """API URL, auth string and (behind the TLS proxy) the CA bundle to trust."""
        url = api_url or self.own_api_url
        env = {"PREFECT_API_URL": url, CLIENT_AUTH_ENV: self.auth_string}
        if self.tls_ca is not None and url.startswith("https"):
            env[SSL_CERT_ENV] = str(self.tls_ca)
        return env

    def prefect_env(self) -> dict[str, str]:
        """Every child talks to this stack's Prefect server, never to a profile's."""
        return {
            **self.base_env(),
            "PREFECT_HOME": str(self.state_dir / "prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_CLI_PROMPT": "false",
            "PREFECT_LOGGING_LEVEL": os.environ.get("PREFECT_LOGGING_LEVEL", "INFO"),
            "COMPLIANCE_STATE_DIR": str(self.state_dir / "compliance"),
            **self.client_env(),
            **self._policy_env(),
        }

    def _policy_env(self) -> dict[str, str]:
        """The access policy, and (no TLS proxy to sign people in) the people file, for the
        servers."""
        env: dict[str, str] = {}
        if self.options.access_policy is not None:
            env["COMPLIANCE_ACCESS_POLICY"] = str(Path(self.options.access_policy).resolve())
        if self.options.people_file is not None and not self.tls:
            env["COMPLIANCE_PEOPLE_FILE"] = str(Path(self.options.people_file).resolve())
        return env

    def worker_env(self, name: str = WORKER_NAME) -> dict[str, str]:
        """One worker's (and its flow runs') environment: the sandbox demo app's COMPLIANCE_*
        settings, or (``use_sandbox`` false) the caller's."""
        env = self.prefect_env() | CLIENT_RETRY_ENV
        if self.options.use_sandbox:
            env |= demo_environment(
                self.sandbox_url,
                self.sandbox_gov_url,
                state_dir=env["COMPLIANCE_STATE_DIR"],
                encryption_key=encryption_key(self.state_dir),
            )
        else:  # the state directory stays the stack's
            service = {n: v for n, v in os.environ.items() if n.startswith("COMPLIANCE_")}
            env.update(service, COMPLIANCE_STATE_DIR=env["COMPLIANCE_STATE_DIR"])
        env["PREFECT_WORKER_QUERY_SECONDS"] = f"{self.options.worker_poll_seconds:g}"
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        if len(self.replicas) > 1:  # spread round-robin over the API replicas
            names = self.worker_names()
            index = names.index(name) if name in names else 0
            env.update(self.client_env(self.replicas[index % len(self.replicas)].api_url))
        if self.options.workers > 1:
            machine = self.state_dir / "workers" / name
            env["PREFECT_HOME"] = str(machine / "prefect")
            env["COMPLIANCE_STATE_DIR"] = str(machine / "compliance")
            env["COMPLIANCE_TOKEN_STORE"] = "prefect"  # noqa: S105 - a store kind, not a secret
            if self.ledger_url is not None:  # one link ledger for every machine
                env["COMPLIANCE_LINK_LEDGER_URL"] = self.ledger_url
        password = self.options.worker_passwords.get(name)
        if password is not None:  # through the sign-in proxy, as itself
            env |= self.client_env(self.api_url) | {CLIENT_AUTH_ENV: f"{name}:{password}"}
        env.update(self.options.worker_env)
        return env

    def start(self) -> None:
        """Bring everything up (sandbox beside server, workers beside ``prefect deploy``); on
        any failure stop what was started and raise."""
        try:
            make_dirs(self.state_dir)
            check_exposure(self.host, self.auth_string)
            if self.tls:
                require_nginx()
            self._timed("sandbox + prefect server", self.start_servers)
            self._timed("bootstrap", self.bootstrap)
            workers = [self.launch_worker(name) for name in self.worker_names()]
            self._timed("deploy", self.deploy)
            self._timed("workers", lambda: self.wait_for_workers(workers))
            if failed := self.failed_children():  # e.g. the services process, never polled
                raise RuntimeError(f"{failed[0].describe_exit()} while the stack started")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Workers first, all at once (each cancels its flow runs), then the rest in reverse."""
        workers = self.workers()
        with ThreadPoolExecutor(max_workers=max(len(workers), 1)) as pool:
            list(pool.map(ChildProcess.stop, workers))
        for worker in workers:
            self.children.remove(worker)
        while self.children:
            self.children.pop().stop()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _timed(self, name: str, step: Callable[[], object]) -> None:
        begin = time.monotonic()
        step()
        self.timings[name] = time.monotonic() - begin

    def start_servers(self) -> None:
        """Sandbox and first server together; once it has migrated the database, the TLS
        proxy and the other replicas and services process."""
        if self.options.database_url is not None:
            ca_file = self.options.database_ca_file
            prepare_database(self.options.database_url, ca_file)  # fails before anything runs
            if self.options.workers > 1:  # their shared ledger, under a role of its own
                password = self.ledger_password
                self.ledger_url = prepare_ledger(self.options.database_url, password, ca_file)
        if self.options.redis_url is not None:
            self.redis = preflight(self.options.redis_url)  # a refusal before anything runs
        wait_for_sandbox = self.launch_sandbox()
        self.prefect_port = preferred_port(self.options.prefect_port, self.host)
        self.server_port = free_port(HOST) if self.tls else self.prefect_port
        split = self.options.api_replicas > 1
        first = self._prefect_server(
            self.server_port, "api" if split else "all", "prefect-server.log"
        )
        self.replicas = [first]
        self.children.append(first.launch())
        wait_for_sandbox()
        first.wait_ready()
        if self.tls:
            self._start_tls_proxy()
        if split:
            self._start_the_rest()

    def launch_sandbox(self) -> Callable[[], None]:
        if not self.options.use_sandbox:
            return lambda: None
        self.sandbox_port = preferred_port(self.options.sandbox_port, self.host)
        self.sandbox_gov_port = preferred_port(self.sandbox_port + 1, self.host)
        env = self.base_env()  # no Prefect setting and no auth string: it is not a client
        token = self.sandbox_control_token
        if token is not None:  # beyond loopback; in the environment, never on a command line
            env[SANDBOX_TOKEN_ENV] = token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        child = ChildProcess(
            "sandbox",
            sandbox_command(self.sandbox_port, self.sandbox_gov_port, host=self.host),
            env=env,
            cwd=PROJECT_DIR,
            log_path=self.logs_dir / "sandbox.log",
        )
        self.children.append(child)
        return lambda: wait_until(
            "the sandbox",
            lambda: http_ok(f"{self.sandbox_url}{HEALTH_PATH}", headers),
            timeout=self.options.startup_timeout,
            watch=[child],
        )

    def _prefect_server(
        self, port: int, role: Literal["all", "api", "services"], log: str
    ) -> PrefectServer:
        """One Prefect process (the UI on the first only) handing out the stack's public API
        address."""
        return PrefectServer(
            PrefectServerOptions(
                port=port,
                home=self.state_dir / "prefect",
                database_url=self.options.database_url,
                database_ca_file=self.options.database_ca_file,
                ui=self.options.ui and not self.replicas,
                log_path=self.logs_dir / log,
                startup_timeout=self.options.startup_timeout,
                redis_url=self.options.redis_url,
                role=role,
                host=HOST if self.tls else self.host,  # behind the TLS proxy: loopback only
                auth_string=self.auth_string,
                public_api_url=self.api_url,
            ),
            base_env=self.prefect_env(),
        )

    def _start_tls_proxy(self) -> None:
        """nginx on ``host:prefect_port`` in front of the first server (``tls_cert`` set)."""
        cert, key = self.options.tls_cert, self.options.tls_key
        assert cert is not None and key is not None
        identity_url = self._start_identity_endpoint()
        proxy = TLSProxy(
            TLSProxyOptions(
                listen_host=self.host,
                listen_port=self.prefect_port,
                upstream=self.replicas[0].ui_url,
                cert_file=cert,
                key_file=key,
                state_dir=self.state_dir / "tls-proxy",
                startup_timeout=self.options.startup_timeout,
                identity_url=identity_url,
                server_auth_string=SecretStr(self.auth_string) if identity_url else None,
            )
        )
        self.children.append(proxy.launch())
        proxy.wait_ready()

    def _start_identity_endpoint(self) -> str | None:
        """The sign-in endpoint the proxy asks about each request (``people_file`` set)."""
        if self.options.people_file is None:
            return None
        identity = IdentityEndpoint(
            Path(self.options.people_file).resolve(), free_port(HOST), self.logs_dir
        )
        self.children.append(identity.launch())
        identity.wait_ready()
        return identity.auth_url

    def _start_the_rest(self) -> None:
        self.services = self._prefect_server(0, "services", "prefect-services.log")
        for number in range(2, self.options.api_replicas + 1):
            log = f"prefect-server-{number}.log"
            self.replicas.append(self._prefect_server(free_port(self.host), "api", log))
        for server in [self.services, *self.replicas[1:]]:
            self.children.append(server.launch())
        for server in [self.services, *self.replicas[1:]]:
            server.wait_ready()

    def bootstrap(self) -> None:
        env = self.prefect_env()
        grace = self.options.unresponsive_run_grace_seconds or os.environ.get(GRACE_ENV)
        if grace:
            env[GRACE_ENV] = str(grace)
        # notification settings are for bootstrap only (base_env drops every COMPLIANCE_*)
        env.update(
            {name: os.environ[name] for name in (WEBHOOK_ENV, BLOCK_ENV) if name in os.environ}
        )
        self.bootstrap_output = run_to_completion(
            "bootstrap",
            [sys.executable, "-m", "deployments.bootstrap"],
            env=env,
            cwd=PROJECT_DIR,
            log_path=self.logs_dir / "bootstrap.log",
            timeout=self.options.startup_timeout,
        )

    def deploy(self) -> None:
        """``prefect deploy --all`` from the checkout, exactly as an operator runs it."""
        run_to_completion(
            "prefect deploy --all",
            [sys.executable, "-m", "prefect", "--no-prompt", "deploy", "--all"],
            env=self.prefect_env(),
            cwd=PROJECT_DIR,
            log_path=self.logs_dir / "deploy.log",
            timeout=self.options.startup_timeout * 2,
        )

    def launch_worker(self, name: str = WORKER_NAME) -> ChildProcess:
        log_path = None if self.options.worker_output_to_terminal else self.logs_dir / f"{name}.log"
        env = self.worker_env(name)
        # Prefect creates its home without parents: without this it runs with none
        Path(env["PREFECT_HOME"]).mkdir(mode=0o700, parents=True, exist_ok=True)
        child = ChildProcess(
            name,
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", WORK_POOL_NAME]
            + ["--name", name, "--type", "process"],
            env=env,
            cwd=PROJECT_DIR,
            log_path=log_path,
        )
        self.children.append(child)
        return child

    def workers(self) -> list[ChildProcess]:
        return [child for child in self.children if child.name in self.worker_names()]

    def wait_for_workers(self, workers: list[ChildProcess]) -> None:
        """Until each of ``workers`` is ONLINE on the Prefect server."""
        wait_until(
            "the workers " + ", ".join(worker.name for worker in workers),
            lambda: all(self.worker_online(worker.name) for worker in workers),
            timeout=self.options.startup_timeout,
            watch=workers,
            interval=0.5,
        )

    def api(self) -> httpx.Client:
        """An HTTP client of the Prefect API with the stack's auth and CA (``request`` retries)."""
        verify = tls_context(self.tls_ca)
        url = self.own_api_url
        return httpx.Client(base_url=url, timeout=30.0, auth=self.http_auth, verify=verify)

    @retry(
        retry=retry_if_exception(_busy),
        wait=wait_random_exponential(multiplier=0.1, max=2.0),
        stop=stop_after_delay(150),
        reraise=True,
    )
    def request(self, method: str, path: str, json: object = None) -> httpx.Response:
        """A Prefect API call, repeated while a SQLite-backed server answers 503 (busy)."""
        with self.api() as client:
            response = client.request(method, path, json=json)
        response.raise_for_status()
        return response

    def worker_online(self, name: str = WORKER_NAME) -> bool:
        try:
            with self.api() as client:
                response = client.post(f"/work_pools/{WORK_POOL_NAME}/workers/filter", json={})
        except httpx.HTTPError:
            return False
        return response.status_code == 200 and any(
            worker.get("name") == name and worker.get("status") == "ONLINE"
            for worker in response.json()
        )

    def failed_children(self) -> list[ChildProcess]:
        return [child for child in self.children if not child.alive()]
