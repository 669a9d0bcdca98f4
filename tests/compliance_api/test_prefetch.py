"""started(): the next page's request is on the wire before the caller handles the current one."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from compliance_api.client import ComplianceClient
from compliance_api.models import LoggedEvent
from compliance_api.prefetch import started
from compliance_api.providers import StaticTokenProvider

PAGE = json.dumps(
    {"results": {"data": [], "pageInfo": {"endCursor": None, "hasNextPage": False}}}
).encode()


class SlowServer:
    """Answers each request on one connection only once ``release`` is set, and records when
    each arrived (in a thread of its own, so it sees requests while the event loop is busy)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.arrived: list[float] = []
        self.release = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            while True:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                self.arrived.append(time.monotonic())
                self.release.wait(10)
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(PAGE)}\r\n\r\n".encode()
                    + PAGE
                )


@pytest.fixture
def server() -> Iterator[SlowServer]:
    slow = SlowServer()
    yield slow
    slow.release.set()
    slow.listener.close()


async def test_the_request_is_sent_before_the_caller_goes_on(server: SlowServer) -> None:
    async with ComplianceClient(server.url, StaticTokenProvider("t")) as client:
        pending = await started(client.list_page(LoggedEvent))
        handled_from = time.monotonic()
        # handling the current page: CPU work, during which the event loop does not turn
        time.sleep(0.3)  # noqa: ASYNC251
        assert server.arrived and server.arrived[0] < handled_from + 0.1  # sent before it
        assert not pending.done()  # started() did not wait for the answer
        server.release.set()
        page = await pending
    assert page.data == [] and not page.page_info.has_next_page


async def test_a_call_that_fails_before_sending_is_returned_done() -> None:
    async def refused() -> None:
        raise RuntimeError("no token")

    pending = await asyncio.wait_for(started(refused()), 5)
    assert pending.done() and isinstance(pending.exception(), RuntimeError)
