"""How bulk runs keep Python's cyclic garbage collector out of their way.

Nothing a write run allocates depends on the cyclic collector to be freed in time: reference
counting frees almost everything, and the few cycles Prefect leaves behind are small. What the
collector does cost is scanning: a bulk run holds 100,000 validated items and their results for
its whole length, and with the default thresholds the youngest generation is collected every
700 container allocations, which a chunk's task run (states, events, contexts) passes many times.
Collecting the young generation far less often, with the input frozen, removes most of that cost
(docs/performance.md; numbers in bench/RESULTS.md).

Thresholds and the frozen set are process-wide, and a process may run several flows at once (a
test session, a ``serve`` process with threads): the settings are reference-counted, so the
first run to enter applies them and the last to leave restores what was there before.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: container allocations between two collections of the youngest generation during a bulk run
#: (Python's default is 700; see docs/performance.md for how it was chosen)
BULK_RUN_THRESHOLD = 20_000

_lock = threading.Lock()
_runs = 0
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


@contextmanager
def tuned_for_bulk_run() -> Iterator[None]:
    """Freeze what is alive now (the validated input, Prefect's modules) out of the collector's
    scans, and collect the youngest generation every :data:`BULK_RUN_THRESHOLD` allocations."""
    _enter()
    try:
        yield
    finally:
        _leave()


def _enter() -> None:
    global _runs, _saved_threshold
    with _lock:
        gc.freeze()
        if _runs == 0:
            _saved_threshold = gc.get_threshold()
            gc.set_threshold(BULK_RUN_THRESHOLD, *_saved_threshold[1:])
        _runs += 1


def _leave() -> None:
    global _runs, _saved_threshold
    with _lock:
        _runs -= 1
        if _runs == 0:
            if _saved_threshold is not None:
                gc.set_threshold(*_saved_threshold)
            _saved_threshold = None
            gc.unfreeze()
