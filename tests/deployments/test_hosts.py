"""The multi-host harness (``tests/fixtures/hosts.py``) with real parts, in seconds.

A tiny HTTP server on the server host's bridge address is reached by two worker hosts and a
stranger. Cutting one worker partitions it the way a lost machine is: its new connections time
out, the other worker is unaffected, and a request it had in flight is neither answered nor
reset until the cut ends, then completes. The stranger reaches the bridge address but not the
server host's 127.0.0.1 (PostgreSQL's either), and nothing beyond the bridge. Leaving a network,
even on an error, kills what ran in its hosts and deletes namespaces, veths and the bridge; what
a killed run left is removed by the next one.

Needs root and iproute2 (skipped otherwise, failing under ``CI=true``).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.fixtures.hosts import (
    SUBNET,
    Network,
    link_names,
    namespace_names,
    remove_leftovers,
    tcp_connect,
    unavailable,
    wait_tcp,
)

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]

#: GET /ok answers at once, GET /slow after a second; it logs when /slow arrives and is answered
HTTP_SERVER = """
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        slow = self.path.startswith("/slow")
        if slow:
            print("slow-received", flush=True)
            time.sleep(1.0)
        body = b"slow" if slow else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if slow:
            print("slow-answered", flush=True)

    def log_message(self, *args):
        pass

ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), Handler).serve_forever()
"""

#: writes its environment and network namespace to argv[1], then sleeps
SLEEPER = """
import json, os, sys, time
report = {"env": dict(os.environ), "netns": os.readlink("/proc/self/ns/net")}
with open(sys.argv[1] + ".tmp", "w") as handle:
    json.dump(report, handle)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def existing() -> set[str]:
    return {*namespace_names(), *link_names()}


def wait_for_line(path: Path, line: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and line in path.read_text().splitlines()):
        assert time.monotonic() < deadline, f"no {line!r} in {path} after {timeout:.0f}s"
        time.sleep(0.05)


@pytest.fixture
def leaves_nothing(netns_available: None) -> Iterator[set[str]]:
    """Set up before ``network``, so torn down after it: the names a test puts here must be
    gone once the ``network`` fixture has exited."""
    names: set[str] = set()
    yield names
    assert names, "the test recorded its network's names"
    assert not names & existing(), "the network fixture left namespaces or links behind"


def test_two_workers_a_partition_and_a_stranger(
    leaves_nothing: set[str], network: Network, tmp_path: Path
) -> None:
    worker_1 = network.add_host("worker-1")
    worker_2 = network.add_host("worker-2")
    stranger = network.add_host("stranger")
    base = network.subnet.network_address
    assert network.subnet.subnet_of(SUBNET)
    assert [network.address, worker_1.address, worker_2.address, stranger.address] == [
        str(base + offset) for offset in (1, 11, 12, 13)
    ]

    port = network.free_port()
    log = tmp_path / "http.log"
    network.server.popen(
        [sys.executable, "-I", "-c", HTTP_SERVER, network.address, str(port)],
        log_path=log,
    )
    wait_tcp(None, network.address, port, timeout=10)
    url = f"http://{network.address}:{port}"
    for host in (worker_1, worker_2, stranger):
        wait_tcp(host, network.address, port, timeout=10)
        assert host.http_get(f"{url}/ok").status == 200, host

    in_flight = worker_1.start_http_get(f"{url}/slow", timeout=60)
    wait_for_line(log, "slow-received")
    worker_1.cut()
    try:
        assert worker_1.is_cut
        assert worker_2.http_get(f"{url}/ok").status == 200, "the other worker is unaffected"
        # a partition, not a refusal: nothing comes back, so a connect can only time out
        connect = worker_1.tcp_connect(network.address, port, timeout=1.5)
        assert connect.timed_out, connect
        request = worker_1.http_get(f"{url}/ok", timeout=1.5)
        assert request.status is None and "timed out" in str(request.error), request
        # nor does the server host reach the cut host (no ECONNREFUSED from it either)
        back = tcp_connect(None, worker_1.address, 9, timeout=1.5)
        assert not back.ok and back.errno != errno.ECONNREFUSED, back
        # the server answered the in-flight request during the cut: the answer is dropped and
        # the connection is not reset, so the request neither completes nor fails
        wait_for_line(log, "slow-answered")
        with pytest.raises(subprocess.TimeoutExpired):
            in_flight.result(timeout=1.0)
        assert in_flight.running()
    finally:
        worker_1.restore()
    assert not worker_1.is_cut
    # after the cut TCP retransmits the answer on the same connection
    answered = in_flight.result(timeout=30)
    assert (answered.status, answered.body) == (200, "slow"), answered
    assert worker_1.tcp_connect(network.address, port).ok
    assert worker_1.http_get(f"{url}/ok").status == 200

    # the stranger's 127.0.0.1 is its own loopback, not the server host's
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        loopback_port = listener.getsockname()[1]
        assert tcp_connect(None, "127.0.0.1", loopback_port).ok
        assert stranger.tcp_connect("127.0.0.1", loopback_port).errno == errno.ECONNREFUSED
    if tcp_connect(None, "127.0.0.1", 5432).ok:  # the machine's PostgreSQL
        assert stranger.tcp_connect("127.0.0.1", 5432).errno == errno.ECONNREFUSED
    # and there is no way beyond the bridge (no route: nothing is even sent)
    assert stranger.tcp_connect("198.51.100.1", 80).errno == errno.ENETUNREACH
    leaves_nothing.update(network.names())


def test_leaving_kills_every_process_and_deletes_everything(
    netns_available: None, tmp_path: Path
) -> None:
    class Boom(Exception):
        pass

    report = tmp_path / "report.json"
    with pytest.raises(Boom), Network() as network:
        host = network.add_host("worker-1")
        env = host.env(tmp_path, EXTRA="1")
        host.popen([sys.executable, "-c", SLEEPER, str(report)], env=env, log_path=tmp_path / "l")
        # one that leaves our process group: the namespace sweep finds it
        host.popen(["setsid", "--fork", sys.executable, "-c", "import time; time.sleep(600)"])
        deadline = time.monotonic() + 10
        while not report.exists() or len(_pids(host.namespace)) < 2:
            assert time.monotonic() < deadline, "both processes started"
            time.sleep(0.05)
        pids = _pids(host.namespace)
        names = network.names()
        raise Boom

    seen = json.loads(report.read_text())
    assert seen["env"]["PREFECT_HOME"] == str(tmp_path / "worker-1" / "prefect")
    assert seen["env"]["COMPLIANCE_STATE_DIR"] == str(tmp_path / "worker-1" / "state")
    assert seen["env"]["EXTRA"] == "1"
    assert seen["netns"] != os.readlink("/proc/self/ns/net"), "it ran in the host's namespace"
    still = [pid for pid in pids if psutil.pid_exists(pid) and not _zombie(pid)]
    assert still == [], "every process in the host was killed"
    assert len(names) == 3  # namespace, veth, bridge
    assert not names & existing()
    assert not [name for name in existing() if network.id in name]


def test_leftovers_of_a_killed_run_are_removed(network: Network) -> None:
    host = network.add_host("worker-1")
    code = (
        "import json, os, signal\n"
        "from tests.fixtures.hosts import Network\n"
        "network = Network()\n"
        "network.start()\n"
        "network.add_host('worker-1')\n"
        "print(json.dumps(sorted(network.names())), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert killed.returncode == -9, killed.stderr
    left = set(json.loads(killed.stdout))
    assert left <= existing(), "the killed run left its network behind"

    removed = remove_leftovers()
    assert not left & existing()
    assert {name for name in left if not name.startswith("cfv")} <= set(removed)
    assert network.remaining() == network.names(), "a live run's network is left alone"
    assert host.tcp_connect(network.address, 9).errno == errno.ECONNREFUSED  # still connected


@pytest.mark.parametrize("ci", ["true", ""])
def test_unavailable_skips_outside_ci_and_fails_in_ci(
    ci: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="needs root and iproute2: run as root, e.g. in CI"):
        unavailable("this process is not root (uid 1000)")


def _pids(namespace: str | None) -> list[int]:
    assert namespace is not None
    done = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True)
    return [int(pid) for pid in done.stdout.split()]


def _zombie(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
