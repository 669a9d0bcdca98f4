"""What each attempt of a write run may have sent, kept on the Prefect server for the next one.

Per attempt, write-once versions of one record (``compliance_sent_<run>_<attempt>__<version>``,
``runtime/variables.py``): units claimed a window ahead before they are sent, and how each was
answered. Design and rules: docs/write-flows.md#when-a-run-is-started-again-lost-attempts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from runtime.attempts import Attempt
from runtime.variables import create_once, delete_all, variables_starting, version_of, versioned
from write_engine.inputs import ItemInput
from write_engine.outcomes import AnyResult, Outcome

RECORD_PREFIX = "compliance_sent_"
#: the Prefect Variable size limit, with room for the fields around the ranges
MAX_RECORD_CHARS = 4_800
#: answers not yet on the server are written at least this often (a claim writes them sooner)
ANSWERS_EVERY_SECONDS = 2.0


class EarlierAttemptMismatch(RuntimeError):
    """An earlier attempt of this run sent units of a different list: nothing is matched."""


class RecordFull(RuntimeError):
    """The record would exceed a Prefect Variable: the unit is not sent (fails retryable)."""


class IndexRanges(set[int]):
    """A set of unit numbers, read from and written as sorted, disjoint half-open ranges
    ``[start, end)`` (``ranges()``), which keep a record small."""

    def __init__(self, ranges: Iterable[Sequence[int]] = ()) -> None:
        super().__init__(index for start, end in ranges for index in range(start, end))

    def ranges(self) -> list[list[int]]:
        ranges: list[list[int]] = []
        for index in sorted(self):
            if ranges and ranges[-1][1] == index:
                ranges[-1][1] = index + 1
            else:
                ranges.append([index, index + 1])
        return ranges


class SendRecordValue(BaseModel):
    """The JSON of one attempt's record (cumulative: it carries what earlier attempts knew)."""

    version: int = 1
    attempt: int
    units: int
    digest: str
    #: when the run's first attempt started sending (where the job looks in the audit log)
    started_at: datetime
    sent: list[list[int]] = Field(default_factory=list)
    #: answered, every item done (succeeded or skipped)
    done: list[list[int]] = Field(default_factory=list)
    #: answered with failures: nothing unknown, safe to send again
    refused: list[list[int]] = Field(default_factory=list)


def units_digest(units: Sequence[Sequence[ItemInput]]) -> str:
    """The identity of a unit list: its items' keys, in order."""
    hasher = hashlib.sha256()
    for unit in units:
        hasher.update("\x1f".join(item.key() for item in unit).encode())
        hasher.update(b"\x1e")
    return hasher.hexdigest()


def record_name(attempt: Attempt, number: int) -> str:
    """The record of attempt ``number`` of the run (its versions add ``__<version>``)."""
    return f"{run_prefix(attempt)}{number}"


def run_prefix(attempt: Attempt) -> str:
    return f"{RECORD_PREFIX}{attempt.flow_run_id.hex}_"


async def stored_records(attempt: Attempt) -> dict[int, tuple[int, SendRecordValue]]:
    """Attempt number -> (highest version, its value) of every record the run's attempts left."""
    latest: dict[int, tuple[int, SendRecordValue]] = {}
    for name, value in await variables_starting(run_prefix(attempt)):
        number = name.removeprefix(run_prefix(attempt)).split("__", 1)[0]
        if not number.isdigit():
            continue
        version = version_of(name, record_name(attempt, int(number)))
        if version is not None and version >= latest.get(int(number), (-1, None))[0]:
            latest[int(number)] = (version, SendRecordValue.model_validate(value))
    return latest


class SendRecord:
    """This attempt's record, started from what earlier attempts of the run recorded."""

    def __init__(
        self,
        attempt: Attempt,
        units: Sequence[Sequence[ItemInput]],
        window: int = 32,
        max_window: int = 32,
    ) -> None:
        self.attempt = attempt
        self.units = len(units)
        self.digest = units_digest(units)
        self.started_at = datetime.now(UTC)
        #: units claimed ahead; doubled (up to ``max_window``) whenever a claim had to wait
        self.window = window
        self.max_window = max(window, max_window)
        self.sent = IndexRanges()
        self.done = IndexRanges()
        self.refused = IndexRanges()
        #: attempts whose records were read (their numbers)
        self.earlier: list[int] = []
        #: the units this attempt sends, in order; the first ``_claimed`` are claimed
        self._order: list[int] = []
        self._position: dict[int, int] = {}
        self._claimed = 0
        self._claimed_saved = 0
        self._changes = 0
        self._saved = 0
        #: the version the last write created (each write creates the next)
        self._version = 0
        self._stale: set[asyncio.Task[None]] = set()
        #: when the last write was started (monotonic)
        self._last_save = float("-inf")
        self._saving = asyncio.Lock()
        self._ahead: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(
        cls,
        attempt: Attempt,
        units: Sequence[Sequence[ItemInput]],
        window: int = 32,
        max_window: int = 32,
    ) -> SendRecord:
        record = cls(attempt, units, window, max_window)
        for number, (_, value) in sorted((await stored_records(attempt)).items()):
            if number < attempt.run_count:
                record._merge(number, value, units)
        return record

    def _merge(
        self, number: int, value: SendRecordValue, units: Sequence[Sequence[ItemInput]]
    ) -> None:
        if value.units > len(units) or units_digest(units[: value.units]) != value.digest:
            raise EarlierAttemptMismatch(
                f"attempt {number} of this run sent items from a different list (the input "
                "file or the ids changed since); to send nothing twice, this attempt sends "
                "nothing: check that attempt's log, then start a new run"
            )
        self.earlier.append(number)
        self.started_at = min(self.started_at, value.started_at)
        self.sent.update(IndexRanges(value.sent))
        self.done.update(IndexRanges(value.done))
        self.refused.update(IndexRanges(value.refused))

    def settled(self, index: int) -> bool:
        """Answered by an earlier attempt with every item done."""
        return index in self.done

    def unknown(self, index: int) -> bool:
        """Claimed by an earlier attempt that never learned the answer (sent or not)."""
        return index in self.sent and index not in self.done and index not in self.refused

    def confirmed(self, index: int) -> None:
        """The service shows the unit of unknown fate as applied."""
        self.done.add(index)
        self._changes += 1

    def answered(self, index: int, results: Sequence[AnyResult]) -> None:
        """This attempt got the unit's answer (recorded with the next write)."""
        outcomes = [result.outcome for result in results]
        if Outcome.NEEDS_REVIEW in outcomes:
            return  # fate unknown: stays "sent"
        target = self.refused if any(outcome.is_failure for outcome in outcomes) else self.done
        target.add(index)
        self._changes += 1

    def plan(self, order: Sequence[int]) -> None:
        """The units this attempt will send, in the order it starts them."""
        self._order = list(order)
        self._position = {index: position for position, index in enumerate(self._order)}

    async def claim(self, index: int) -> None:
        """Return once the unit is claimed on the server (``AttemptLost`` if the run is no longer
        this process's); the next window is written in the background when half is used."""
        await self.attempt.ready()
        position = self._position[index]
        extended = False
        if position + self.window // 2 >= self._claimed:
            extended = self._claim_through(position + 1 + self.window)
        if extended or self._answers_due():
            ahead = asyncio.ensure_future(self._save_through(self._changes))
            self._ahead.add(ahead)
            ahead.add_done_callback(self._ahead_done)
        if self._claimed_saved <= position:  # the window ran out before its write landed
            self.window = min(self.max_window, 2 * self.window)
        while self._claimed_saved <= position:
            await self._save_through(self._changes)

    def _claim_through(self, end: int) -> bool:
        """Claim the units up to position ``end``; False when they all were already."""
        end = min(end, len(self._order))
        if end <= self._claimed:
            return False
        for position in range(self._claimed, end):
            self.sent.add(self._order[position])
        self._claimed = end
        self._changes += 1
        return True

    def _answers_due(self) -> bool:
        """Answers wait for the next claim's write, but not longer than ``ANSWERS_EVERY_SECONDS``
        (once the whole list is claimed, no claim writes): one write per interval, not per unit."""
        unsaved = self._changes > self._saved and not self._saving.locked()
        return unsaved and time.monotonic() - self._last_save >= ANSWERS_EVERY_SECONDS

    def _ahead_done(self, task: asyncio.Task[None]) -> None:
        self._ahead.discard(task)
        if not task.cancelled():
            task.exception()  # seen by the claim that waits for it; not logged twice

    async def flush(self) -> None:
        await self._save_through(self._changes)

    async def _save_through(self, change: int) -> None:
        async with self._saving:  # concurrent claims share the write that covers them
            if self._saved >= change:
                return
            await self.attempt.ready()
            self._last_save = time.monotonic()
            covered, claimed = self._changes, self._claimed
            value = self._value()
            if len(size := value.model_dump_json()) > MAX_RECORD_CHARS:
                raise RecordFull(f"the send record of this run is full ({len(size)} characters)")
            base = record_name(self.attempt, self.attempt.run_count)
            await create_once(versioned(base, self._version + 1), value.model_dump(mode="json"))
            self._version += 1
            self._saved, self._claimed_saved = covered, claimed
            if self._version > 1:  # off the claims' path; what is left, forget() removes
                stale = asyncio.ensure_future(self._remove(versioned(base, self._version - 1)))
                self._stale.add(stale)
                stale.add_done_callback(self._stale.discard)

    @staticmethod
    async def _remove(name: str) -> None:
        with contextlib.suppress(Exception):
            await delete_all([name])

    def _value(self) -> SendRecordValue:
        return SendRecordValue(
            attempt=self.attempt.run_count,
            units=self.units,
            digest=self.digest,
            started_at=self.started_at,
            sent=self.sent.ranges(),
            done=self.done.ranges(),
            refused=self.refused.ranges(),
        )

    async def forget(self) -> None:
        """Delete every attempt's record: the run has reported every item itself."""
        for task in list(self._stale):  # a busy server may still be retrying: listed below
            task.cancel()
        await delete_all(name for name, _ in await variables_starting(run_prefix(self.attempt)))
