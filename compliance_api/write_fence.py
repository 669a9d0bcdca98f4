"""The hook a caller gives the client to hold writes it may not send yet (a fenced flow run).

Before each try of a write the client awaits ``ready()``; then, at the moment the request is
handed to the socket (httpx's ``trace`` extension, before the first header byte), it calls
``check_send()``. Raising :class:`SendHeld` there stops the request with nothing sent: the client
waits in ``ready()`` again and resends, so a held write costs time, never the item.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

#: httpcore's trace events just before a request's first byte is written (HTTP/1.1, HTTP/2)
SEND_EVENTS = frozenset(
    {"http11.send_request_headers.started", "http2.send_request_headers.started"}
)

Trace = Callable[[str, dict[str, Any]], Awaitable[None]]


class SendHeld(Exception):
    """Raised by ``check_send``: the write may not leave now; nothing of it was sent."""


class WriteFence(Protocol):
    """What decides whether a write may be sent, and when."""

    @property
    def send_timeout(self) -> float:
        """Pool, connect and write time limit for writes (below the fence's deadline)."""
        ...

    async def ready(self) -> None:
        """Return once a write may be sent; raise to stop it for good."""
        ...

    def check_send(self) -> None:
        """Raise :class:`SendHeld` if the write must not be handed to the socket now."""
        ...


def fenced_trace(fence: WriteFence, inner: Trace | None) -> Trace:
    """A ``trace`` callback that runs ``fence.check_send()`` before the request is sent, then
    ``inner`` (another trace hook of the same request), if any."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event in SEND_EVENTS:
            fence.check_send()
        if inner is not None:
            await inner(event, info)

    return trace
