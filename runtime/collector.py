"""How bulk runs (writes and long reads) keep Python's cyclic garbage collector out of their way.

Nothing a bulk run allocates depends on the cyclic collector to be freed in time: reference
counting frees almost everything, and the few cycles Prefect leaves behind are small. What the
collector does cost is scanning: a write run holds 100,000 validated items and their results for
its whole length, a long read allocates and frees a page of records per call, and with the
default thresholds the youngest generation is collected every 700 container allocations, which
a chunk's task run or a page passes many times; the full collections this leads to walk every
long-lived object (Prefect's modules) again, which cost the freshness report a fifth of its run.
Freezing what is alive at the start removes most of that cost; a write run also collects the
young generation far less often, while a read, which keeps only a page, collects at the usual
pace and keeps its memory flat (docs/performance.md; numbers in bench/RESULTS.md).

Thresholds and the frozen set are process-wide, and a process may run several flows at once (a
test session, a ``serve`` process with threads): both are reference-counted, so the first run to
enter applies a setting and the last to leave restores what was there before. Because they are
process-wide, a flow says so in its own body (``with collector.tuned_for_bulk_run(): ...``), where
its author and reader see it; the shared engines never change them behind a flow's back.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

#: container allocations between two collections of the youngest generation during a bulk run
#: (Python's default is 700; see docs/performance.md for how it was chosen)
BULK_RUN_THRESHOLD = 20_000

_lock = threading.Lock()
#: runs holding the freeze, and those of them holding the bulk threshold
_runs = 0
_tuned = 0
_saved_threshold: tuple[int, int, int] | None = None


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection at all while a bulk input is read.

    Reading 100,000 rows allocates a few objects per row, none of them in a cycle; every few
    hundred allocations the collector would rescan the whole heap (Prefect's included), which
    more than doubles the time to read the file.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def tuned_for_bulk_run() -> AbstractContextManager[None]:
    """Freeze what is alive now (the validated input, Prefect's modules) out of the collector's
    scans, and collect the youngest generation every :data:`BULK_RUN_THRESHOLD` allocations."""
    return _held(tune=True)


def frozen_for_long_read() -> AbstractContextManager[None]:
    """Freeze what is alive now out of the collector's scans, and nothing else: a read keeps a
    page or two alive at a time, so collecting them at the usual pace keeps memory flat."""
    return _held(tune=False)


@contextmanager
def _held(*, tune: bool) -> Iterator[None]:
    global _runs, _tuned, _saved_threshold
    with _lock:
        gc.freeze()
        _runs += 1
        if tune:
            if _tuned == 0:
                _saved_threshold = gc.get_threshold()
                gc.set_threshold(BULK_RUN_THRESHOLD, *_saved_threshold[1:])
            _tuned += 1
    try:
        yield
    finally:
        with _lock:
            if tune:
                _tuned -= 1
                if _tuned == 0 and _saved_threshold is not None:
                    gc.set_threshold(*_saved_threshold)
                    _saved_threshold = None
            _runs -= 1
            if _runs == 0:
                gc.unfreeze()
