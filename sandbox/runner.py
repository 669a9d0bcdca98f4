"""Running the sandbox: both tiers' uvicorn servers in one event loop, in a thread or in the CLI.

``run_sandbox_in_thread()`` is what tests and the demo use: it binds free loopback ports itself
(no race between choosing and binding), starts both servers in a background thread, waits until
they accept connections, yields a :class:`SandboxHandle`, and stops them on exit.

Either refuses a host beyond loopback (anything but 127.0.0.0/8, ::1, ``localhost``) unless the
config has a ``control_token``: the control API can list every credential the sandbox issued.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import uvicorn

from sandbox.app import create_app
from sandbox.control import SandboxControl
from sandbox.state import Sandbox, SandboxConfig

STARTUP_TIMEOUT_SECONDS = 60.0
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or ``localhost``: reachable from this machine only."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_exposure(config: SandboxConfig) -> None:
    """A ``ValueError`` before anything binds: beyond loopback only with a control token."""
    if not config.control_token and not is_loopback(config.host):
        raise ValueError(
            f"refusing to listen on {config.host!r} without a control token: the /_sandbox/ "
            "control API lists issued credentials; give --control-token or "
            "SANDBOX_CONTROL_TOKEN (then it requires Authorization: Bearer <token>), or "
            "listen on loopback"
        )


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass
class SandboxHandle:
    url: str
    gov_url: str
    sandbox: Sandbox = field(repr=False)
    control: SandboxControl = field(repr=False)
    gov_control: SandboxControl = field(repr=False)


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket; with the explicit protocol asyncio sets TCP_NODELAY on accepted
    connections (without it, keep-alive responses wait ~40 ms for delayed ACKs)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class _QuietServer(uvicorn.Server):
    """A server that leaves signal handling to the process (or to the first server)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _server(app: object, log_level: str, quiet: bool) -> uvicorn.Server:
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        lifespan="off",
        log_level=log_level,
        access_log=False,
        http="h11",
        loop="asyncio",
        timeout_keep_alive=30,
        backlog=2048,
    )
    return _QuietServer(config) if quiet else uvicorn.Server(config)


def build_servers(
    sandbox: Sandbox, tiers: list[str], *, log_level: str, in_main_thread: bool
) -> dict[str, uvicorn.Server]:
    """One uvicorn server per tier; only the commercial one in the main thread takes signals."""
    return {
        name: _server(
            create_app(sandbox, name), log_level, quiet=not in_main_thread or name != "commercial"
        )
        for name in tiers
    }


async def serve_tiers(
    servers: dict[str, uvicorn.Server], sockets: dict[str, socket.socket]
) -> None:
    """Serve every tier until the first server exits (Ctrl-C), then stop the others."""
    tasks = [asyncio.create_task(servers[name].serve(sockets=[sockets[name]])) for name in servers]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for server in servers.values():
        server.should_exit = True
    if pending:
        await asyncio.wait(pending)


@contextlib.contextmanager
def run_sandbox_in_thread(
    config: SandboxConfig | None = None, *, log_level: str = "warning", **options: object
) -> Iterator[SandboxHandle]:
    """Start the sandbox on free (or configured) loopback ports; stop it when the block ends.

    ``options`` are SandboxConfig fields (seed, scale, latency_ms, ...); port 0 (the default
    here) means a free port for each tier.
    """
    if config is None:
        options.setdefault("port", 0)
        config = SandboxConfig(**options)  # type: ignore[arg-type]
    check_exposure(config)
    sandbox = Sandbox(config)
    gov_port = (
        config.gov_port if config.gov_port is not None else (config.port + 1 if config.port else 0)
    )
    sockets = {
        "commercial": bind_socket(config.host, config.port),
        "gov": bind_socket(config.host, gov_port),
    }
    ports = {name: sock.getsockname()[1] for name, sock in sockets.items()}
    servers = build_servers(sandbox, list(sockets), log_level=log_level, in_main_thread=False)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(serve_tiers(servers, sockets))
        except BaseException as exc:  # reported to the starting thread
            errors.append(exc)

    thread = threading.Thread(target=run, name="compliance-sandbox", daemon=True)
    thread.start()
    url = _url(config.host, ports["commercial"])
    gov_url = _url(config.host, ports["gov"])
    control = SandboxControl(url, control_token=config.control_token)
    gov_control = SandboxControl(gov_url, control_token=config.control_token)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
        while not all(server.started for server in servers.values()):
            if errors or not thread.is_alive():
                raise RuntimeError(f"the sandbox failed to start: {errors!r}")
            if time.monotonic() > deadline:
                raise RuntimeError("the sandbox did not start in time")
            time.sleep(0.01)
        yield SandboxHandle(url, gov_url, sandbox, control, gov_control)
    finally:
        control.close()
        gov_control.close()
        for server in servers.values():
            server.should_exit = True
        thread.join(timeout=15)
        for sock in sockets.values():
            sock.close()


def serve_forever(config: SandboxConfig, *, log_level: str = "info") -> None:
    """The CLI: serve until Ctrl-C."""
    check_exposure(config)
    sandbox = Sandbox(config)
    gov_port = config.gov_port if config.gov_port is not None else config.port + 1
    sockets = {
        "commercial": bind_socket(config.host, config.port),
        "gov": bind_socket(config.host, gov_port),
    }
    print(  # noqa: T201 - the CLI's one line of output
        f"compliance-sandbox: commercial {_url(config.host, config.port)}  "
        f"gov {_url(config.host, gov_port)}  (seed {config.seed}, scale {config.scale})"
        + ("  control API: bearer token required" if config.control_token else ""),
        flush=True,
    )
    servers = build_servers(sandbox, list(sockets), log_level=log_level, in_main_thread=True)
    asyncio.run(serve_tiers(servers, sockets))
