"""Several real hosts (Linux network namespaces on a bridge): what docs/scaling.md promises.

- The **server host** (the root namespace): PostgreSQL (the Prefect database), the Prefect
  server on loopback behind nginx (TLS with the test's own CA) on the bridge address, with
  Prefect's basic auth, and the sandbox; the sandbox's control API needs its token.
- Two **worker hosts**, each with its own PREFECT_HOME and state dir, reaching nothing but the
  Prefect API (https, trusting the CA through PREFECT_API_SSL_CERT_FILE) and the (sandbox)
  Compliance API.
- A **stranger host** on the same network without any credential.

The stranger is refused everywhere that lists, starts or reads something. A worker host cut
off mid-promotion (past crash detection) and then restored changes nothing that the other worker
finished: every vendor is promoted exactly once, the run ends Completed, nothing is rerun and
the audit-log checkpoint does not move back. Counts come from the sandbox; the waits only bound
a hung test.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any
from urllib.parse import urlsplit

import psutil
import pytest

from audit_log.checkpoints import PROMOTE_CHECKPOINT_VARIABLE, EventLogCheckpoint, position_key
from deployments.resources import CRASH_MAX_ATTEMPTS_VARIABLE, PROJECT_DIR, WORK_POOL_NAME
from deployments.stack import LocalStack
from runtime.attempts import WRITE_DEADLINE_SECONDS
from sandbox.control import SandboxControl
from tests.fixtures.hosts import Host, Network, tcp_connect
from tests.fixtures.relay import Relay
from tests.fixtures.stack import (
    ADD_TO_MANAGED,
    PROMOTE,
    StackWithVariables,
    deployment_id,
    eventually,
    managed,
    run_deployment,
    sandbox_control,
    stack_options,
    state_of,
)
from tests.fixtures.tls import make_ca, nginx_or_skip

pytestmark = pytest.mark.timeout(900)

#: longer than the 30 s heartbeat, shorter than the 90 s default: the test waits less
GRACE_SECONDS = 45
VENDORS = 100
#: every promotion takes this long, so calls are in flight when the link goes down
PROMOTION_LATENCY_MS = 1000
#: the link goes down once this many vendors are managed
CUT_AFTER = 24
RERUN = "rerun-failed-items/on-failed-items"
WORKERS = ("local-worker-1", "local-worker-2")


@dataclass
class Site:
    """The running hosts: the stack on the server host, the worker processes on theirs."""

    network: Network
    stack: LocalStack
    control: SandboxControl
    hosts: dict[str, Host]
    stranger: Host
    workers: dict[str, Popen[str]] = field(default_factory=dict)

    def start_worker(self, name: str, **extra_env: str) -> None:
        env = self.stack.worker_env(name) | extra_env
        Path(env["PREFECT_HOME"]).mkdir(mode=0o700, parents=True, exist_ok=True)
        command = [sys.executable, "-m", "prefect", "worker", "start"]
        command += ["--pool", WORK_POOL_NAME, "--name", name, "--type", "process"]
        self.workers[name] = self.hosts[name].popen(
            command, env=env, cwd=PROJECT_DIR, log_path=self.stack.logs_dir / f"{name}.log"
        )
        eventually(f"{name} online", lambda: self.stack.worker_online(name), timeout=120)

    def stop_worker(self, name: str) -> None:
        self.hosts[name].stop(self.workers.pop(name))


@pytest.fixture(scope="module")
def site(
    netns_available: None, tmp_path_factory: pytest.TempPathFactory, postgres_databases: Any
) -> Iterator[Site]:
    nginx_or_skip()
    with Network() as network:
        certificates = tmp_path_factory.mktemp("tls")
        ca = make_ca(certificates)
        server = ca.issue(certificates, [network.address])
        options = stack_options(
            state_dir=tmp_path_factory.mktemp("multi-host"),
            host=network.address,
            tls_cert=server.cert_file,
            tls_key=server.key_file,
            tls_ca=ca.cert_file,
            unresponsive_run_grace_seconds=GRACE_SECONDS,
            database_url=postgres_databases(),
            workers=len(WORKERS),
        )
        stack = StackWithVariables(options, {CRASH_MAX_ATTEMPTS_VARIABLE: 3})
        try:
            stack.state_dir.mkdir(parents=True, exist_ok=True)
            stack.start_servers()  # the server host; the workers run on hosts of their own
            stack.bootstrap()
            stack.deploy()
            site = Site(
                network=network,
                stack=stack,
                control=sandbox_control(stack),
                hosts={name: network.add_host(name.removeprefix("local-")) for name in WORKERS},
                stranger=network.add_host("stranger"),
            )
            for name in WORKERS:
                site.start_worker(name)
            yield site
        finally:
            stack.stop()


# ------------------------------------------------------------------------------ the stranger

PROBE = textwrap.dedent(
    """
    import asyncio, base64, json, ssl, sys, urllib.error, urllib.request
    import websockets

    # a stranger does not care whose certificate it is: it checks nothing
    UNCHECKED = ssl.create_default_context()
    UNCHECKED.check_hostname = False
    UNCHECKED.verify_mode = ssl.CERT_NONE

    def http(method, url, body, auth):
        request = urllib.request.Request(url, method=method, data=body and body.encode())
        request.add_header("content-type", "application/json")
        if auth:
            request.add_header("authorization", "Basic " + base64.b64encode(auth.encode()).decode())
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=UNCHECKED)
        )
        try:
            with opener.open(request, timeout=10) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    async def websocket(url, token):
        try:
            tls = UNCHECKED if url.startswith("wss:") else None
            async with websockets.connect(url, open_timeout=10, ssl=tls) as socket:
                if token is not None:
                    await socket.send(json.dumps({"type": "auth", "token": token}))
                answer = await asyncio.wait_for(socket.recv(), 10)
                return "open", answer
        except websockets.ConnectionClosed as closed:
            return "closed", str(closed.rcvd)
        except Exception as error:
            return "refused", f"{type(error).__name__}: {error}"

    kind, *args = json.loads(sys.argv[1])
    if kind == "http":
        print(json.dumps(http(*args)))
    else:
        print(json.dumps(asyncio.run(websocket(*args))))
    """
)


def probe(host: Host, *args: Any) -> Any:
    done = host.run([sys.executable, "-c", PROBE, json.dumps(args)], timeout=60, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_stranger_on_the_network_can_list_start_and_read_nothing(site: Site) -> None:
    stack, stranger = site.stack, site.stranger
    api = stack.api_url
    promote = deployment_id(stack, PROMOTE)
    calls = {
        "list deployments": ("POST", f"{api}/deployments/filter", "{}"),
        "start a run": ("POST", f"{api}/deployments/{promote}/create_flow_run", "{}"),
        "read blocks with secrets": (
            "POST",
            f"{api}/block_documents/filter?include_secrets=true",
            "{}",
        ),
        "list flow runs": ("POST", f"{api}/flow_runs/filter", "{}"),
        "read variables": ("POST", f"{api}/variables/filter", "{}"),
    }
    for what, (method, url, body) in calls.items():
        status, _ = probe(stranger, "http", method, url, body, None)
        assert status == 401, f"{what}: {status}"
        wrong, _ = probe(stranger, "http", method, url, body, "admin:guessed")
        assert wrong == 401, f"{what} with a wrong password: {wrong}"
    assert probe(stranger, "http", "GET", f"{api}/health", None, None)[0] == 200  # no data

    assert api.startswith("https://")  # the stranger meets nginx, not Prefect
    server_port = tcp_connect(stranger, site.network.address, stack.server_port, timeout=3)
    assert not server_port.ok  # the Prefect server itself listens on loopback only
    events = api.replace("https://", "wss://") + "/events/in"
    for token in (None, "admin:guessed"):
        outcome, detail = probe(stranger, "websocket", events, token)
        assert outcome != "open", f"events websocket with token {token!r}: {detail}"
    # the sandbox's control API (issued credentials, faults) wants its token too
    status, _ = probe(stranger, "http", "GET", f"{stack.sandbox_url}/_sandbox/stats", None, None)
    assert status in (401, 403)
    # and a worker host that has the string is let in: the refusals above are about credentials
    worker = site.hosts[WORKERS[0]]
    status, _ = probe(worker, "http", "POST", f"{api}/deployments/filter", "{}", stack.auth_string)
    assert status == 200


# ------------------------------------------------------------------------------ the partition


def flow_processes(worker: Popen[str]) -> list[psutil.Process]:
    """The flow-run processes a worker started (its children that run a flow)."""
    try:
        children = psutil.Process(worker.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [child for child in children if _is_flow_run(child)]


#: what a flow-run process's command line holds: the engine (prefect.yaml's command), or
#: Prefect's own CLI for one run
FLOW_RUN_COMMANDS = ("prefect.engine", "flow-run execute")


def _is_flow_run(process: psutil.Process) -> bool:
    try:
        command = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return any(mark in command for mark in FLOW_RUN_COMMANDS)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def running_at_the_cut(
    site: Site, name: str, run_id: str, promoted: Callable[[], int]
) -> list[psutil.Process]:
    """The run's flow-run processes on host ``name`` once ``CUT_AFTER`` vendors are managed.

    They are collected at every probe from the start, so a starved machine that answers the
    probe late still finds them; the run must still be running then, or the cut tests nothing.
    """
    seen: list[psutil.Process] = []

    def cut_now() -> bool:
        seen.extend(p for p in flow_processes(site.workers[name]) if p not in seen)
        return promoted() >= CUT_AFTER

    eventually(f"{CUT_AFTER} vendors managed", cut_now, timeout=300)
    state = state_of(site.stack, run_id)
    assert seen and state["type"] == "RUNNING", (
        f"the run is not running on the host about to be cut off: {state['name']}, "
        f"flow-run processes seen there: {seen}"
    )
    return seen


def checkpoint(stack: LocalStack) -> EventLogCheckpoint:
    """The furthest of the checkpoint's versions (``audit_log.checkpoints``)."""
    query = {"variables": {"name": {"like_": PROMOTE_CHECKPOINT_VARIABLE}}}
    rows = stack.request("POST", "/variables/filter", query).json()
    stored = [EventLogCheckpoint.model_validate(row["value"]) for row in rows]
    return max(stored, key=position_key)


def completed_elsewhere(stack: LocalStack, run_id: str) -> None:
    eventually(
        "the run Completed on the other host",
        lambda: state_of(stack, run_id)["type"] == "COMPLETED",
        timeout=420,
    )


def cut_off_process_ended(site: Site, name: str, stale: list[psutil.Process]) -> None:
    """The cut-off worker is back, and its flow-run process ended by itself: it could not confirm
    the run while cut off, and once the link is back it finds the run is no longer its own; only
    then are the counts final."""
    eventually("the cut-off worker back online", lambda: site.stack.worker_online(name))
    eventually(
        "the cut-off flow-run process to end",
        lambda: not any(_alive(process) for process in stale),
        timeout=300,
    )


def assert_each_promoted_once_and_nothing_rerun(site: Site, vendors: list[str]) -> None:
    counts = managed(site.control)
    assert {vendor: counts.get(vendor, 0) for vendor in vendors} == dict.fromkeys(vendors, 1)
    reruns = site.stack.request(
        "POST",
        "/flow_runs/filter",
        {"flow_runs": {"deployment_id": {"any_": [deployment_id(site.stack, RERUN)]}}},
    ).json()
    assert reruns == []


def history(stack: LocalStack, flow_run_id: str) -> list[str]:
    states = stack.request("GET", f"/flow_run_states/?flow_run_id={flow_run_id}").json()
    return [state["type"] for state in sorted(states, key=lambda s: s["timestamp"])]


def test_a_worker_cut_off_mid_run_never_applies_twice_or_rewrites_the_run(site: Site) -> None:
    stack, control = site.stack, site.control
    lost_name, other_name = WORKERS
    lost_host = site.hosts[lost_name]
    site.stop_worker(other_name)  # the run must start on the host that will be cut off
    vendors = [control.inject("vendor_discovered")["id"] for _ in range(VENDORS)]
    control.set_fault(ADD_TO_MANAGED, latency_ms=PROMOTION_LATENCY_MS)

    run_id = run_deployment(stack, PROMOTE, {"from_audit_log": True, "concurrency": 8})
    stale = running_at_the_cut(site, lost_name, run_id, lambda: sum(managed(control).values()))
    lost_host.cut()
    try:
        site.start_worker(other_name)
        completed_elsewhere(stack, run_id)
        assert "CRASHED" in history(stack, run_id)  # crash detection did act
        done_at = checkpoint(stack)
    finally:
        lost_host.restore()
    cut_off_process_ended(site, lost_name, stale)

    counts = managed(control)
    applied_twice = sorted(vendor for vendor in vendors if counts.get(vendor, 0) > 1)
    assert applied_twice == []
    assert_each_promoted_once_and_nothing_rerun(site, vendors)
    states = history(stack, run_id)
    assert states[-1] == "COMPLETED" and states.count("COMPLETED") == 1, states
    assert "FAILED" not in states, states
    assert not checkpoint(stack).behind(done_at)


#: the link comes back this long after the other worker completed the run: what matters is
#: that the cut-off process, still alive, talks to the server again after that (a longer cut
#: only makes its client give up more of what it still had to say)
RESTORE_AFTER_COMPLETED_SECONDS = 10
#: what the flow-run process logs when its fence ends (runtime/attempts.py)
SEND_AGE = re.compile(r"Writes left at most ([0-9.]+) s after the check that confirmed")


def test_a_worker_that_loses_only_the_prefect_api_applies_nothing_twice(site: Site) -> None:
    """The usual layout: Prefect on a private network, the service on the internet. The cut-off
    host reaches Prefect through a relay that goes silent (tests/fixtures/relay.py) and the
    service directly; its flow-run process still reaches the service but cannot confirm its
    attempt: its writes stop within the
    deadline of its last confirmation, the other worker finishes the run, and when the link comes
    back nothing replaces the Completed state and nothing starts the run again."""
    stack, control = site.stack, site.control
    lost_name, other_name = WORKERS
    lost_host = site.hosts[lost_name]
    site.stop_worker(other_name)
    api = urlsplit(stack.api_url)
    assert api.hostname is not None and api.port is not None
    # the cut-off host reaches the Prefect API through a path that can go silent, and the
    # Compliance API (the sandbox) directly
    relay = Relay(api.hostname, (api.hostname, api.port))
    site.stop_worker(lost_name)
    relayed = api._replace(netloc=f"{api.hostname}:{relay.port}").geturl()
    site.start_worker(lost_name, PREFECT_API_URL=relayed)
    vendors = [control.inject("vendor_discovered")["id"] for _ in range(VENDORS)]
    control.set_fault(ADD_TO_MANAGED, latency_ms=PROMOTION_LATENCY_MS)

    def promoted() -> int:
        counts = managed(control)
        return sum(counts.get(vendor, 0) for vendor in vendors)

    run_id = run_deployment(stack, PROMOTE, {"from_audit_log": True, "concurrency": 8})
    stale = running_at_the_cut(site, lost_name, run_id, promoted)
    relay.cut()
    try:
        # the Compliance API (the sandbox) still answers; the Prefect API does not
        assert lost_host.http_get(f"{stack.sandbox_url}/_sandbox/health").status is not None
        silent = lost_host.http_get(f"{relayed}/health", timeout=3)
        assert silent.status is None and "timed out" in (silent.error or ""), silent
        site.start_worker(other_name)
        completed_elsewhere(stack, run_id)
        run_count = stack.request("GET", f"/flow_runs/{run_id}").json()["run_count"]
        time.sleep(RESTORE_AFTER_COMPLETED_SECONDS)
    finally:
        relay.restore()
    cut_off_process_ended(site, lost_name, stale)
    time.sleep(30)  # whatever the cut-off host still had to say reaches the server now

    assert_each_promoted_once_and_nothing_rerun(site, vendors)
    states = history(stack, run_id)
    assert states[states.index("COMPLETED") :] == ["COMPLETED"], states  # nothing after it
    assert stack.request("GET", f"/flow_runs/{run_id}").json()["run_count"] == run_count
    log = (stack.logs_dir / f"{lost_name}.log").read_text(errors="replace")
    ages = [float(age) for age in SEND_AGE.findall(log)]
    print(f"longest confirmation age at a write on the cut-off host: {max(ages, default=0):.2f} s")
    assert ages and max(ages) <= WRITE_DEADLINE_SECONDS, ages
    site.stop_worker(lost_name)
    relay.close()
