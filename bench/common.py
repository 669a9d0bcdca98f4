"""What every benchmark shares: the sandbox in its own process, a Prefect server, child
processes timed from the outside (their wall time and peak RSS their own), the machine."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import resource
import subprocess
import tempfile
import time
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psutil

from sandbox.apps import DEMO_MANAGE
from sandbox.control import SandboxControl
from sandbox.launch import HEALTH_PATH, demo_environment, sandbox_command

if TYPE_CHECKING:  # imported when a server starts: the children of the plain side never pay
    from deployments.prefect_server import PrefectServer

REPO = Path(__file__).resolve().parent.parent
#: the body of a token request, as a plain script sends it
TOKEN_REQUEST = {
    "grant_type": "client_credentials",
    "client_id": DEMO_MANAGE.client_id,
    "client_secret": DEMO_MANAGE.client_secret,
    "scope": "service-api.all:read service-api.all:write",
}
#: a line a child prints last: ``BENCH-RESULT {json}``
RESULT_MARKER = "BENCH-RESULT "
#: the Prefect server's database in the benchmarks that compare them
BACKENDS = ("sqlite", "postgresql")
#: whether this environment had turned bytecode caching off (recorded with every run)
BYTECODE_DISABLED_BY_ENV = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))


def use_bytecode_cache(env: MutableMapping[str, str] | None = None) -> None:
    """Let processes cache compiled bytecode, as installed deployments do, in a private place."""
    target = os.environ if env is None else env
    target.pop("PYTHONDONTWRITEBYTECODE", None)
    cache = Path(tempfile.gettempdir()) / "compliance-flows-bench-pycache"
    target["PYTHONPYCACHEPREFIX"] = str(cache)


class ForeignCpu:
    """CPU time that processes outside this benchmark used while it ran (``with`` block). Ours:
    this process, its live descendants and the children it waited for; with ``database``, the
    PostgreSQL backends serving it (``database_seconds``); foreign: the rest of the busy time."""

    def __init__(self, database: str | None = None) -> None:
        self.database = database

    def __enter__(self) -> ForeignCpu:
        self._database0 = _database_cpu(self.database)
        self._start = (time.monotonic(), _machine_busy_seconds(), _tree_cpu_seconds())
        return self

    def __exit__(self, *_: object) -> None:
        wall0, busy0, ours0 = self._start
        wall = time.monotonic() - wall0
        self.ours_seconds = _tree_cpu_seconds() - ours0
        database = _database_cpu(self.database)
        self.database_seconds = sum(
            max(0.0, seconds - self._database0.get(pid, 0.0)) for pid, seconds in database.items()
        )
        busy = _machine_busy_seconds() - busy0
        self.seconds = max(0.0, busy - self.ours_seconds - self.database_seconds)
        self.share = self.seconds / (wall * (os.cpu_count() or 1)) if wall > 0 else 0.0

    def report(self) -> dict[str, float]:
        report = {"seconds": round(self.seconds, 1), "share_of_cores": round(self.share, 3)}
        report["ours_seconds"] = round(self.ours_seconds, 1)
        if self.database:
            report["database_seconds"] = round(self.database_seconds, 1)
        return report


def _database_cpu(database: str | None) -> dict[int, float]:
    """CPU seconds of each live PostgreSQL backend whose title names ``database`` (one that
    ended is not counted: this errs towards calling time foreign)."""
    seconds: dict[int, float] = {}
    for process in psutil.process_iter(["pid", "name", "cmdline"]) if database else []:
        with contextlib.suppress(psutil.Error):
            title = " ".join(process.info["cmdline"] or [])
            if process.info["name"].startswith("postgres") and f" {database} " in f"{title} ":
                times = process.cpu_times()
                seconds[process.info["pid"]] = times.user + times.system
    return seconds


def _machine_busy_seconds() -> float:
    """All CPU time not idle; steal counts as busy (guest time is already in user time)."""
    times = psutil.cpu_times()
    not_busy = ("idle", "iowait", "guest", "guest_nice")
    return float(sum(times) - sum(getattr(times, name, 0.0) for name in not_busy))


def _tree_cpu_seconds() -> float:
    """Each process counted once: live ones by their own time plus their waited-for children."""
    total = 0.0
    for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def machine() -> dict[str, Any]:
    """What the numbers were measured on, recorded with every run."""
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpus": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "prefect": metadata.version("prefect"),
        "httpx": metadata.version("httpx"),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "bytecode_disabled_by_env": BYTECODE_DISABLED_BY_ENV,
    }


def peak_rss_mb() -> float:
    """This process's peak RSS: ``VmHWM`` first, as Linux carries ``ru_maxrss`` across
    ``execve`` (a child of a big parent would report the parent's peak)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def emit_result(result: dict[str, Any]) -> None:
    """The child's last line, parsed by :func:`run_child`."""
    print(RESULT_MARKER + json.dumps(result), flush=True)


def upsert_limit(name: str, limit: int, per_second: float) -> None:
    """A global concurrency limit (a token-endpoint bucket) on the server this process uses."""
    import asyncio

    from prefect.client.orchestration import get_client

    async def upsert() -> None:
        async with get_client() as client:
            await client.upsert_global_concurrency_limit_by_name(
                name, limit=limit, slot_decay_per_second=per_second
            )

    asyncio.run(upsert())


@dataclass
class SandboxProcess:
    """A ``python -m sandbox`` child on free ports."""

    url: str
    process: subprocess.Popen[bytes]
    control: SandboxControl


@contextlib.contextmanager
def sandbox_process(*, scale: int = 1, latency_ms: float = 0.0) -> Iterator[SandboxProcess]:
    from deployments.processes import http_ok
    from deployments.stack import free_port

    port, gov_port = free_port(), free_port()
    command = sandbox_command(port, gov_port, scale=scale, latency_ms=latency_ms)
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    control = SandboxControl(url, timeout=120)
    try:
        deadline = time.monotonic() + 300
        while not http_ok(f"{url}{HEALTH_PATH}"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the sandbox ({' '.join(command)}) did not start")
            time.sleep(0.1)
        yield SandboxProcess(url, process, control)
    finally:
        control.close()
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def fresh_database(backend: str) -> Iterator[str | None]:
    """``None`` for SQLite (the server keeps it in its home); for PostgreSQL a new database
    ``compliance_flows_bench_<hex>``, dropped when the block ends (failure too)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r}: expected one of {BACKENDS}")
    if backend == "sqlite":
        yield None
        return
    import asyncio
    import uuid

    from deployments.database import prepare_database
    from tests.fixtures.postgres import drop_database, local_postgres_url

    url = local_postgres_url(f"compliance_flows_bench_{uuid.uuid4().hex[:12]}")
    prepare_database(url)  # a DatabaseError names what is missing
    try:
        yield url
    finally:
        asyncio.run(drop_database(url))


@contextlib.contextmanager
def fresh_redis() -> Iterator[str]:
    """An empty numbered database of REDIS_URL (default redis://127.0.0.1:6379), emptied after."""
    import redis

    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379").rstrip("/")
    for number in range(15, 0, -1):
        client = redis.Redis.from_url(f"{base}/{number}")
        if client.dbsize() == 0:
            break
    else:
        raise RuntimeError(f"every numbered database of {base} holds data")
    try:
        yield f"{base}/{number}"
    finally:
        client.flushdb()


@contextlib.contextmanager
def prefect_server(backend: str = "sqlite") -> Iterator[PrefectServer]:
    """``prefect server start`` (as ``make serve``: every service, the project's settings) on
    SQLite or a fresh PostgreSQL database; its API and auth string are this process's settings."""
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    from deployments.auth import generate_auth_string
    from deployments.prefect_server import PrefectServer, PrefectServerOptions
    from deployments.stack import free_port

    home = Path(tempfile.mkdtemp(prefix=f"compliance-bench-prefect-{backend}-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "COMPLIANCE_"))}
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = env["PREFECT_CLI_PROMPT"] = "false"
    env["PREFECT_LOGGING_LEVEL"] = "WARNING"
    # a traceback when it is stopped while flushing events: noise, not a result
    env["PREFECT_SERVER_LOGGING_LEVEL"] = "CRITICAL"
    with fresh_database(backend) as database_url:
        auth, log = generate_auth_string(), home / "server.log"
        options = PrefectServerOptions(
            free_port(), home, database_url, log_path=log, startup_timeout=180, auth_string=auth
        )
        server = PrefectServer(options, base_env=env)
        server.start()
        try:
            settings = {PREFECT_API_URL: server.api_url, PREFECT_API_AUTH_STRING: auth}
            with temporary_settings(settings):
                yield server
        finally:
            server.stop()


def prefect_client_env() -> dict[str, str]:
    """PREFECT_API_URL and PREFECT_API_AUTH_STRING of this process's server, for a child."""
    from prefect.settings import get_current_settings

    api = get_current_settings().api
    env = {"PREFECT_API_URL": str(api.url)} if api.url else {}
    if api.auth_string is not None:
        env["PREFECT_API_AUTH_STRING"] = api.auth_string.get_secret_value()
    return env


def database_name(database_url: str | None) -> str | None:
    """The database a PostgreSQL URL names (None for SQLite)."""
    from sqlalchemy.engine import make_url

    return make_url(database_url).database if database_url else None


def wait_for_prefect_idle(api_url: str, *, settle: float = 1.5, limit: float = 180) -> float:
    """Wait until the Prefect server has recorded the previous run's task runs (their count still
    for ``settle`` seconds), so the next run does not pay for them; returns the wait."""
    from deployments.auth import basic_auth

    started = stable_since = time.monotonic()
    last: int | None = None
    auth_string = prefect_client_env().get("PREFECT_API_AUTH_STRING")
    auth = basic_auth(auth_string) if auth_string else None
    with httpx.Client(base_url=api_url.rstrip("/") + "/", timeout=30, auth=auth) as client:
        while time.monotonic() - started < limit:
            count = int(client.post("task_runs/count", json={}).json())
            now = time.monotonic()
            if count != last:
                last, stable_since = count, now
            elif now - stable_since >= settle:
                break
            time.sleep(0.25)
    return round(time.monotonic() - started, 1)


def child_env(sandbox_url: str, api_url: str | None, state_dir: str) -> dict[str, str]:
    """The environment of a child that runs the project against the sandbox."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPLIANCE_", "PREFECT_"))}
    env |= demo_environment(sandbox_url, state_dir=state_dir)
    env |= {"PREFECT_HOME": os.path.join(state_dir, "prefect-home"), "PYTHONPATH": str(REPO)}
    env["PREFECT_LOGGING_LEVEL"] = "WARNING"
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = env["PREFECT_CLI_PROMPT"] = "false"
    use_bytecode_cache(env)
    if api_url:
        env.update(prefect_client_env())  # the auth string of the server this process uses
        env["PREFECT_API_URL"] = api_url
    return env


@dataclass
class ChildRun:
    """A child process timed from the outside."""

    wall_seconds: float
    returncode: int
    result: dict[str, Any]
    first_request_seconds: float | None
    first_data_call_seconds: float | None
    stderr_tail: str


def run_child(
    command: list[str],
    env: dict[str, str],
    *,
    control: SandboxControl | None = None,
    data_route: str | None = None,
    timeout: float = 1800,
) -> ChildRun:
    """Run a child to its end; with ``control``, time its first request (any) and its first call
    of ``data_route`` from the sandbox's counters every ~10 ms (the child is not touched)."""
    baseline = control.stats()["requests_total"] if control else 0
    first_any = first_data = None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=err)
        while control is not None and process.poll() is None:
            snapshot = control.stats()
            now = time.perf_counter() - started
            if first_any is None and snapshot["requests_total"] > baseline:
                first_any = now
            if data_route is None or snapshot["route_counts"].get(data_route):
                first_data = now if data_route else None
                break
            time.sleep(0.01)
        try:
            returncode = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    results = [line for line in stdout.splitlines() if line.startswith(RESULT_MARKER)]
    result = json.loads(results[-1][len(RESULT_MARKER) :]) if results else {}
    return ChildRun(wall, returncode, result, first_any, first_data, stderr[-4000:])


def ratio(numerator: float, denominator: float) -> float | None:
    return round(numerator / denominator, 3) if denominator else None
