"""Reading ahead: :func:`started` returns a call's task once its request is on the wire (httpx's
``trace`` extension), so the caller handles page n while the service prepares n + 1; a bare task
would not send until the caller next awaits, after its CPU work.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

#: set only inside a task made by :func:`started`: called once its request has been sent
_on_sent: ContextVar[Callable[[], None] | None] = ContextVar("compliance_on_sent", default=None)


def sent_hook() -> dict[str, Any] | None:
    """The request extensions that report the send to :func:`started` (None outside it)."""
    return None if _on_sent.get() is None else {"trace": _trace}


def request_sent() -> None:
    """Tell the :func:`started` that made this task that its request left (no-op elsewhere)."""
    callback = _on_sent.get()
    if callback is not None:
        callback()


async def _trace(event: str, info: dict[str, Any]) -> None:
    if event == "http11.send_request_body.complete":
        request_sent()


async def started(call: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """``call`` as a task, returned once its request is on the wire (or it has finished)."""
    sent = asyncio.Event()
    reset = _on_sent.set(sent.set)
    try:
        task = asyncio.ensure_future(call)  # the task copies the context, hook included
    finally:
        _on_sent.reset(reset)
    waiting = asyncio.ensure_future(sent.wait())
    try:
        await asyncio.wait((task, waiting), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    return task
