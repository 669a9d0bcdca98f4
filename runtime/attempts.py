"""Is this process still the one running its flow run? The fence a cut-off process stops at.

The attempt's identity is the Running state the engine entered: while the server's current state
is that state, no other attempt has started (Prefect still accepts a stale process's proposals,
PrefectHQ/prefect#16429). Checks fail closed; a lost attempt raises ``AttemptLost`` at every
write and the write engine ends it with ``Abort``, which proposes no state
(docs/write-flows.md#when-a-run-is-started-again-lost-attempts).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.context import FlowRunContext
from prefect.exceptions import Abort
from prefect.logging import get_run_logger

#: a confirmation is good for this long (crash detection alone waits 90 s by default)
CONFIRM_SECONDS = 1.0
#: a process that cannot confirm for this long treats its attempt as lost (fails closed)
UNCONFIRMED_LIMIT_SECONDS = 30.0
#: one check's time limit; the next one follows after ``RECHECK_SECONDS``
CHECK_TIMEOUT_SECONDS = 5.0
RECHECK_SECONDS = 1.0

P = ParamSpec("P")
R = TypeVar("R")


class AttemptLost(Exception):
    """This process no longer runs its flow run: it must not write or report anything more."""


@dataclass
class Attempt:
    """This process's attempt at a flow run: the run's id and the Running state it entered."""

    flow_run_id: UUID
    state_id: UUID
    run_count: int
    #: when the server last confirmed the attempt (monotonic seconds)
    confirmed_at: float = field(default_factory=time.monotonic)
    #: why the attempt is lost (None while it is current)
    lost: str | None = None
    _checking: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def ensure_current(self, *, fresh: bool = False) -> None:
        """Raise :class:`AttemptLost` unless the run is still this attempt's (``fresh``: ask the
        server now instead of trusting a recent confirmation)."""
        asked = time.monotonic()
        needed = asked if fresh else asked - CONFIRM_SECONDS
        if self.lost is None and self.confirmed_at > needed:
            return
        async with self._checking:  # concurrent writers share one check
            while self.lost is None and self.confirmed_at <= needed:
                await self._check_once()
        if self.lost is not None:
            raise AttemptLost(self.lost)

    async def _check_once(self) -> None:
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS), get_client() as client:
                run = await client.read_flow_run(self.flow_run_id)
        except Exception as error:  # unreachable or busy: not confirmed, maybe lost
            unconfirmed = time.monotonic() - self.confirmed_at
            if unconfirmed >= UNCONFIRMED_LIMIT_SECONDS:
                self._lose(
                    f"the Prefect server could not confirm this run for {unconfirmed:.0f} s "
                    f"({type(error).__name__}); it may have been started again elsewhere"
                )
            else:
                await asyncio.sleep(RECHECK_SECONDS)
            return
        state = run.state
        if state is not None and state.id == self.state_id:
            self.confirmed_at = time.monotonic()
            return
        now = f"{state.name} (state {state.id})" if state is not None else "without a state"
        self._lose(
            f"the run is {now}, run count {run.run_count}; this process started attempt "
            f"{self.run_count} (state {self.state_id})"
        )

    def _lose(self, reason: str) -> None:
        self.lost = f"Flow run {self.flow_run_id} is no longer this process's: {reason}"
        with contextlib.suppress(Exception):  # no run logger outside a run
            get_run_logger().warning("%s. Stopping without writing anything more.", self.lost)


_current: ContextVar[Attempt | None] = ContextVar("compliance_attempt", default=None)


def this_attempt() -> Attempt | None:
    """The attempt of the flow run this code runs in (None outside a flow run)."""
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None or run.state is None:
        return None
    attempt = _current.get()
    if attempt is None or attempt.flow_run_id != run.id or attempt.state_id != run.state.id:
        attempt = Attempt(flow_run_id=run.id, state_id=run.state.id, run_count=run.run_count)
    return attempt


@asynccontextmanager
async def fenced() -> AsyncIterator[Attempt | None]:
    """Fence every Compliance API write made in the body (``guard_write``) by this attempt."""
    attempt = this_attempt()
    token = _current.set(attempt)
    try:
        yield attempt
    finally:
        _current.reset(token)


def abort_when_lost(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """``function``, ending with ``Abort`` (no state proposed) where it raises ``AttemptLost``."""

    @functools.wraps(function)
    async def aborting(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await function(*args, **kwargs)
        except AttemptLost as lost:
            raise Abort(str(lost)) from None

    return aborting


@abort_when_lost
async def abort_if_lost() -> None:
    """``Abort`` (no state proposed) if the run is no longer ours; call it before anything that
    outlives the run (a checkpoint, the final state)."""
    attempt = _current.get() or this_attempt()
    if attempt is not None:
        await attempt.ensure_current(fresh=True)


#: a claim's confirmation lets its first write through without a check for this long
TICKET_SECONDS = 10.0


@dataclass
class _Ticket:
    unused: bool = True
    issued_at: float = field(default_factory=time.monotonic)


_ticket: ContextVar[_Ticket | None] = ContextVar("compliance_claimed_write", default=None)


@contextlib.contextmanager
def claimed() -> Iterator[None]:
    """The body's first write was just confirmed (its claim recorded): it skips the check if it
    follows within ``TICKET_SECONDS``."""
    token = _ticket.set(_Ticket())
    try:
        yield
    finally:
        _ticket.reset(token)


async def guard_write() -> None:
    """The client's write guard: ``AttemptLost`` instead of a write by a lost attempt."""
    ticket = _ticket.get()
    if ticket is not None and ticket.unused:
        ticket.unused = False
        if time.monotonic() - ticket.issued_at < TICKET_SECONDS:
            return
    attempt = _current.get()
    if attempt is not None:
        await attempt.ensure_current()
