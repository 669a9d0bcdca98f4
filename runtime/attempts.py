"""Is this process still the one running its flow run? The fence a cut-off process stops at.

The attempt's identity is the Running state the engine entered: while the server's current state
is that state, no other attempt has started (Prefect still accepts a stale process's proposals,
PrefectHQ/prefect#16429). A background task confirms it every ``CONFIRM_EVERY_SECONDS`` (and sends
a deployment run's heartbeat over HTTP); a Compliance API write is handed to the socket only
within ``WRITE_DEADLINE_SECONDS`` of the last confirmation, else it waits. Unconfirmed is not
lost: the attempt is lost when the server says the run moved on, or when a run crash recovery
could start again went unconfirmed for longer than crash detection's grace
(docs/write-flows.md#when-a-run-is-started-again-lost-attempts).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar
from uuid import UUID

from prefect.client.orchestration import PrefectClient, get_client
from prefect.context import FlowRunContext
from prefect.events import Event
from prefect.exceptions import Abort
from prefect.logging import get_run_logger
from prefect.settings import get_current_settings

from compliance_api.write_fence import SendHeld
from runtime.events import EventSink

#: a write leaves only this long after the check that last confirmed the attempt was asked
WRITE_DEADLINE_SECONDS = 10.0
#: how often the background task confirms the attempt
CONFIRM_EVERY_SECONDS = 2.0
#: one check's time limit (a slower answer is no answer; the next check follows at once)
CHECK_TIMEOUT_SECONDS = 8.0
#: a write waits for a confirmation younger than this, so it still leaves in time
FRESH_SECONDS = WRITE_DEADLINE_SECONDS / 2
#: beyond the deadline: time for a write an earlier attempt handed to its socket to arrive
STALE_WRITE_MARGIN_SECONDS = 5.0
#: a run that waits for confirmation says so this often
WAIT_NOTICE_SECONDS = 30.0

P = ParamSpec("P")
R = TypeVar("R")
_log = logging.getLogger(__name__)


class AttemptLost(Exception):
    """This process no longer runs its flow run: it must not write or report anything more."""


@dataclass(eq=False)
class Attempt:
    """This process's attempt at a flow run: the run's id and the Running state it entered."""

    flow_run_id: UUID
    state_id: UUID
    run_count: int
    #: seconds unconfirmed after which someone may have started the run again (crash detection's
    #: grace, for a deployment's run); None: no one can, so the attempt waits as long as it takes
    restart_after: float | None = None
    #: send the run's heartbeat event this often (a deployment run with heartbeats on)
    heartbeat_every: float | None = None
    #: when the check that last confirmed the attempt was asked (monotonic; -inf: never)
    confirmed_at: float = float("-inf")
    #: when the attempt began (monotonic): unconfirmed time counts from here before the first check
    began_at: float = field(default_factory=time.monotonic)
    #: why the attempt is lost (None while it is current)
    lost: str | None = None
    #: the oldest confirmation a write was handed to the socket with (seconds)
    longest_send_age: float = 0.0
    _news: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _prompt: asyncio.Event = field(default_factory=asyncio.Event, repr=False)
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def age(self) -> float:
        """Seconds since the check that last confirmed the attempt was asked."""
        return time.monotonic() - self.confirmed_at

    async def ready(self) -> None:
        """Return once the attempt was confirmed within ``FRESH_SECONDS``: waits while the server
        cannot confirm it; ``AttemptLost`` once it is lost."""
        while True:
            if self.lost is not None:
                raise AttemptLost(self.lost)
            if self.age() < FRESH_SECONDS:
                return
            await self._next_news()

    async def confirm_now(self) -> None:
        """Ask the server now (waiting while it cannot answer); ``AttemptLost`` if the run moved
        on. For what outlives the run: the results, events, checkpoints, the final state."""
        asked = time.monotonic()
        while self.lost is None and self.confirmed_at < asked:
            self._prompt.set()
            await self._next_news()
        if self.lost is not None:
            raise AttemptLost(self.lost)

    async def outlast_stale_writes(self) -> None:
        """Return once a write an earlier attempt may still have sent has reached the service:
        that attempt's last confirmation preceded this one, and its writes leave within
        ``WRITE_DEADLINE_SECONDS`` of it (plus ``STALE_WRITE_MARGIN_SECONDS`` on the wire)."""
        end = self.began_at + WRITE_DEADLINE_SECONDS + STALE_WRITE_MARGIN_SECONDS
        await asyncio.sleep(max(0.0, end - time.monotonic()))

    def check_send(self) -> None:
        """At the moment a write is handed to the socket: ``SendHeld`` unless the attempt was
        confirmed within ``WRITE_DEADLINE_SECONDS``."""
        age = self.age()
        if self.lost is not None or age > WRITE_DEADLINE_SECONDS:
            raise SendHeld(f"flow run {self.flow_run_id} not confirmed for {age:.1f} s")
        self.longest_send_age = max(self.longest_send_age, age)

    async def _next_news(self) -> None:
        self.start()
        news = self._news
        await news.wait()

    def _publish(self) -> None:
        news, self._news = self._news, asyncio.Event()
        news.set()

    def start(self) -> None:
        """Start the background confirmation (once; ``stop()`` ends it)."""
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._confirm_until_lost())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None

    async def _confirm_until_lost(self) -> None:
        heartbeat_due = time.monotonic()
        notice_due = time.monotonic() + WAIT_NOTICE_SECONDS
        async with get_client() as client, EventSink() as events:
            while self.lost is None:
                error = await self._check(client)
                now = time.monotonic()
                if error is not None and now >= notice_due:
                    notice_due = now + WAIT_NOTICE_SECONDS
                    self.say(
                        "The Prefect server has not confirmed flow run %s for %.0f s (%s): no "
                        "write is sent until it does",
                        self.flow_run_id,
                        now - max(self.confirmed_at, self.began_at),
                        error,
                    )
                self._publish()
                if self.lost is not None:
                    return
                beat = self.heartbeat_every
                if beat is not None and now >= heartbeat_due and await self._heartbeat(events):
                    heartbeat_due = now + beat
                if error is None:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(CONFIRM_EVERY_SECONDS):
                            await self._prompt.wait()
                self._prompt.clear()

    async def _check(self, client: PrefectClient) -> str | None:
        """One check; what kept it from confirming the attempt (None: confirmed or lost)."""
        asked = time.monotonic()
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
                run = await client.read_flow_run(self.flow_run_id)
        except Exception as error:  # unreachable or busy: unknown, not lost
            unconfirmed = time.monotonic() - max(self.confirmed_at, self.began_at)
            if self.restart_after is not None and unconfirmed > self.restart_after:
                self._lose(
                    f"the Prefect server could not confirm this run for {unconfirmed:.0f} s, "
                    f"longer than crash detection's {self.restart_after:.0f} s "
                    f"({type(error).__name__}); it may have been started again elsewhere"
                )
                return None
            await asyncio.sleep(min(1.0, CONFIRM_EVERY_SECONDS))
            return f"{type(error).__name__}: {error}".rstrip(": ")
        state = run.state
        if state is not None and state.id == self.state_id:
            self.confirmed_at = max(self.confirmed_at, asked)
            return None
        now = f"{state.name} (state {state.id})" if state is not None else "without a state"
        self._lose(
            f"the run is {now}, run count {run.run_count}; this process started attempt "
            f"{self.run_count} (state {self.state_id})"
        )
        return None

    async def _heartbeat(self, events: EventSink) -> bool:
        """The run's heartbeat over HTTP (Prefect's own goes over a websocket that drops events
        when the server is busy): crash detection hears a live run as long as it can confirm."""
        event = Event(
            event="prefect.flow-run.heartbeat",
            resource={"prefect.resource.id": f"prefect.flow-run.{self.flow_run_id}"},
        )
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
                await events.send([event])
        except Exception:
            _log.debug("Heartbeat of flow run %s not sent", self.flow_run_id, exc_info=True)
            return False
        return True

    def _lose(self, reason: str) -> None:
        self.lost = f"Flow run {self.flow_run_id} is no longer this process's: {reason}"
        self.say("%s. Stopping without writing anything more.", self.lost)

    @staticmethod
    def say(message: str, *args: Any, level: int = logging.WARNING) -> None:
        """Log on the run (and so on the console, which a worker's log keeps when the server
        cannot be reached); this module's logger outside a run."""
        try:
            get_run_logger().log(level, message, *args)
        except Exception:  # no run logger outside a run
            _log.log(level, message, *args)


_current: ContextVar[Attempt | None] = ContextVar("compliance_attempt", default=None)


async def this_attempt() -> Attempt | None:
    """The attempt of the flow run this code runs in (None outside a flow run)."""
    context = FlowRunContext.get()
    run = context.flow_run if context is not None else None
    if run is None or run.state is None:
        return None
    attempt = _current.get()
    if attempt is not None and attempt.flow_run_id == run.id and attempt.state_id == run.state.id:
        return attempt
    attempt = Attempt(flow_run_id=run.id, state_id=run.state.id, run_count=run.run_count)
    if run.deployment_id is not None:  # crash detection and recovery may start it again
        attempt.restart_after = await crash_detection_grace()
        heartbeat = get_current_settings().flows.heartbeat_frequency
        attempt.heartbeat_every = float(heartbeat) if heartbeat else None
    return attempt


#: the grace assumed when the server's automations cannot be read
DEFAULT_RESTART_AFTER_SECONDS = 90.0


#: the grace read from the server, and when (monotonic): read again after ``GRACE_KEPT_SECONDS``
_grace: tuple[float | None, float] | None = None
GRACE_KEPT_SECONDS = 300.0


async def crash_detection_grace() -> float | None:
    """The shortest ``within`` of the server's automations that mark flow runs Crashed: how long
    a run can go unheard before it may be started again. None: no such automation."""
    global _grace
    if _grace is not None and time.monotonic() - _grace[1] < GRACE_KEPT_SECONDS:
        return _grace[0]
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS), get_client() as client:
            automations = await client.read_automations()
    except Exception:  # busy: assume the project's default now, read again next time
        _log.debug("Automations not read; crash detection's grace assumed", exc_info=True)
        return DEFAULT_RESTART_AFTER_SECONDS
    grace = _shortest_crash_grace(automations)
    _grace = (grace, time.monotonic())
    return grace


def _shortest_crash_grace(automations: Any) -> float | None:
    graces = [
        within.total_seconds()
        for automation in automations
        if any(_marks_crashed(action) for action in automation.actions)
        and (within := getattr(automation.trigger, "within", None)) is not None
    ]
    return min(graces, default=None)


def _marks_crashed(action: Any) -> bool:
    state = getattr(action, "state", None)
    return (
        getattr(action, "type", None) == "change-flow-run-state"
        and str(getattr(state, "value", state)).upper() == "CRASHED"
    )


@asynccontextmanager
async def fenced() -> AsyncIterator[Attempt | None]:
    """Confirm this attempt in the background while the body runs; every Compliance API write
    made in it waits for a recent confirmation (``WRITE_FENCE``)."""
    attempt = await this_attempt()
    token = _current.set(attempt)
    if attempt is not None:
        attempt.start()
    try:
        yield attempt
    finally:
        _current.reset(token)
        if attempt is not None:
            await attempt.stop()
            if attempt.longest_send_age:  # a lost attempt's bound is what its successor relies on
                attempt.say(
                    "Writes left at most %.2f s after the check that confirmed this attempt "
                    "(deadline %.0f s)",
                    attempt.longest_send_age,
                    WRITE_DEADLINE_SECONDS,
                    level=logging.INFO if attempt.lost is None else logging.WARNING,
                )


def restartable() -> bool:
    """True in a deployment's flow run: crash recovery may start it again elsewhere."""
    context = FlowRunContext.get()
    return (
        context is not None
        and context.flow_run is not None
        and (context.flow_run.deployment_id is not None)
    )


def abort_when_lost(function: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """``function``; where it raises ``AttemptLost`` in a deployment's run, ``Abort`` instead (the
    flow-run process ends and proposes no state). Elsewhere (a direct call) ``AttemptLost`` stays
    an ordinary exception for the caller; the server keeps the state that replaced ours."""

    @functools.wraps(function)
    async def aborting(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await function(*args, **kwargs)
        except AttemptLost as lost:
            if restartable():
                raise Abort(str(lost)) from None
            raise

    return aborting


async def confirm_attempt() -> None:
    """``AttemptLost`` if the run is no longer ours (asks the server now); call it before
    anything that outlives the run (results, events, a checkpoint, the final state)."""
    attempt = _current.get() or await this_attempt()
    if attempt is None:
        return
    try:
        await attempt.confirm_now()
    finally:
        if _current.get() is not attempt:
            await attempt.stop()


@abort_when_lost
async def abort_if_lost() -> None:
    """:func:`confirm_attempt`, ending a deployment's lost attempt with ``Abort`` (no state)."""
    await confirm_attempt()


class _CurrentAttemptFence:
    """The client's write fence (``compliance_api.write_fence``) for the current attempt: writes
    wait for a recent confirmation and leave within the deadline; no attempt, no fence."""

    send_timeout = FRESH_SECONDS

    async def ready(self) -> None:
        attempt = _current.get()
        if attempt is not None:
            await attempt.ready()

    def check_send(self) -> None:
        attempt = _current.get()
        if attempt is not None:
            attempt.check_send()


WRITE_FENCE = _CurrentAttemptFence()
