"""Where the audit-log readers resume, and the run lock that keeps two runs from racing.

A checkpoint is the position after the last durable page: its ``endCursor``, the last entry's id
and date, and the ids at that timestamp (skipped if ``startDate`` must replace the cursor).
Design: docs/read-flows.md#checkpoint-and-exactly-once-design.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from prefect.variables import Variable
from pydantic import BaseModel, Field

from runtime.locks import hold_lock
from runtime.variables import create_once, delete_all, variables_starting

#: ids remembered at the last timestamp; the Variable value must stay under 5,000 characters
MAX_BOUNDARY_IDS = 64
#: where the bridge deployment keeps its checkpoint (bootstrap records the bridge's start there)
BRIDGE_CHECKPOINT_VARIABLE = "compliance_event_bridge_checkpoint"
#: where the event-triggered write flows keep theirs (``audit_log/targets.py``)
PROMOTE_CHECKPOINT_VARIABLE = "compliance_promote_vendors_checkpoint"
ROUTE_CHECKPOINT_VARIABLE = "compliance_route_questionnaires_checkpoint"
#: every reader's checkpoint that bootstrap starts at the same point
READER_CHECKPOINT_VARIABLES = (
    BRIDGE_CHECKPOINT_VARIABLE,
    PROMOTE_CHECKPOINT_VARIABLE,
    ROUTE_CHECKPOINT_VARIABLE,
)
#: where a reader without a checkpoint starts, before "now": covers a service clock a little behind
START_MARGIN = timedelta(minutes=5)
#: the run lock ``name`` is the lock ``RUN_LOCK_PREFIX + name`` (``runtime/locks.py``)
RUN_LOCK_PREFIX = "run-"


class Logged(Protocol):
    """What a checkpoint reads of an audit entry (``EventLogEntry`` and ``LoggedEvent`` alike)."""

    @property
    def id(self) -> str: ...

    @property
    def date(self) -> datetime: ...


L = TypeVar("L", bound=Logged)


class EventLogCheckpoint(BaseModel):
    """How far an audit-log reader got. JSON-serializable, small, versioned."""

    version: int = 1
    start_date: datetime | None = None
    cursor: str | None = None
    #: the ``startDate`` of the query that issued ``cursor`` (a cursor belongs to its query)
    cursor_start_date: datetime | None = None
    last_event_id: str | None = None
    last_event_date: datetime | None = None
    boundary_ids: list[str] = Field(default_factory=list)
    entries_total: int = 0
    pages_total: int = 0

    def unhandled(self, entries: Sequence[L], *, by_cursor: bool) -> list[L]:
        """The entries of a page this checkpoint does not cover, each id once (replays are safe).

        After a cursor every entry is new by position, even a late-written older one, so only the
        boundary ids are skipped; after a bare ``startDate`` older entries are skipped too.
        """
        last = self.last_event_date
        seen = set(self.boundary_ids) if last is not None else set()
        fresh: list[L] = []
        for entry in entries:
            if entry.id in seen or (last is not None and not by_cursor and entry.date < last):
                continue
            seen.add(entry.id)
            fresh.append(entry)
        return fresh

    def after_page(
        self, entries: Sequence[Logged], end_cursor: str | None, handled: int
    ) -> EventLogCheckpoint:
        """The checkpoint once a page is durable; its date only moves forward (late entries)."""
        if not entries:
            return self
        newest = max(entry.date for entry in entries)
        if self.last_event_date is not None and self.last_event_date >= newest:
            newest = self.last_event_date
        boundary = list(self.boundary_ids) if newest == self.last_event_date else []
        for entry in entries:
            if entry.date == newest and entry.id not in boundary:
                boundary.append(entry.id)
        return self.model_copy(
            update={
                "cursor": end_cursor or self.cursor,
                "last_event_id": entries[-1].id,
                "last_event_date": newest,
                "boundary_ids": boundary[-MAX_BOUNDARY_IDS:],
                "entries_total": self.entries_total + handled,
                "pages_total": self.pages_total + 1,
            }
        )

    def behind(self, other: EventLogCheckpoint) -> bool:
        """True if ``other`` got further (by date, then counts) than this checkpoint; a
        checkpoint never replaces one that got further."""
        mine = (self.resume_date(), self.entries_total, self.pages_total)
        theirs = (other.resume_date(), other.entries_total, other.pages_total)
        if mine[0] is None or theirs[0] is None:
            return mine[0] is None and theirs[0] is not None
        return mine < theirs

    def resume_date(self) -> datetime | None:
        """``startDate`` for the next request: the last entry's date (inclusive) or the start."""
        return self.last_event_date or self.start_date


class VariableCheckpointStore:
    """A checkpoint in Prefect Variables, shared by every worker, that only moves forward.

    Prefect Variables have no compare-and-set (``Variable.aset`` reads, then writes: a slower
    saver moves a faster one's checkpoint back). So each save creates a Variable of its own,
    ``<name>__<position>``, whose suffix orders checkpoints as :meth:`EventLogCheckpoint.behind`
    does; creating is atomic, the furthest one is the checkpoint, and a saver removes only those
    behind its own, so however savers interleave the furthest stays.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.prefix = f"{name}__"

    async def load(self) -> EventLogCheckpoint | None:
        stored = await self._stored()
        return stored[-1][1] if stored else None

    async def save(self, checkpoint: EventLogCheckpoint, *, forward_only: bool = True) -> bool:
        """Store ``checkpoint`` unless a stored one got further (then False: catches a late lost
        attempt). ``forward_only=False`` is for a deliberate reset."""
        if forward_only:
            stored = await self.load()
            if stored is not None and checkpoint.behind(stored):
                return False
        else:
            await self.clear()
        # a checkpoint at this very position may be stored already: the same one
        value = checkpoint.model_dump(mode="json")
        await create_once(self.prefix + position_key(checkpoint), value)
        mine_order = _order(checkpoint)
        await self._remove(name for name, cp in await self._stored() if _order(cp) < mine_order)
        return True

    async def clear(self) -> None:
        await self._remove(name for name, _ in await self._stored())
        await Variable.aunset(self.name)  # a checkpoint kept in one Variable, before versions

    async def _stored(self) -> list[tuple[str, EventLogCheckpoint]]:
        """Every stored version, the furthest last (one saved before versions counts too)."""
        stored = [
            (name, EventLogCheckpoint.model_validate(value))
            for name, value in await variables_starting(self.name)
            if name.startswith(self.prefix) or name == self.name
        ]
        return sorted(stored, key=lambda pair: _order(pair[1]))

    async def _remove(self, names: Iterable[str]) -> None:
        await delete_all(names)


def position_key(checkpoint: EventLogCheckpoint) -> str:
    """Digits that sort as checkpoints move forward: resume date (microseconds), entries, pages."""
    date, entries, pages = _order(checkpoint)
    return f"{date:020d}_{entries:015d}_{pages:012d}"


def _order(checkpoint: EventLogCheckpoint) -> tuple[int, int, int]:
    resume = checkpoint.resume_date()
    date = 0 if resume is None else int(resume.timestamp() * 1_000_000)
    return date, checkpoint.entries_total, checkpoint.pages_total


def exclusive_run(name: str, wait_seconds: float) -> AbstractAsyncContextManager[None]:
    """Hold the run lock ``name``; ``LockTimeoutError`` (a ``TimeoutError``) after
    ``wait_seconds``."""
    what = f"the run lock {name!r}"
    return hold_lock(RUN_LOCK_PREFIX + name, wait_seconds=wait_seconds, what=what)
