"""Keeping Python's cyclic garbage collector out of bulk runs' way (docs/performance.md).

Bulk runs allocate almost nothing that needs the cyclic collector, but its scans of every
long-lived object (Prefect's modules, a run's validated input) cost a large share of the run.
Thresholds and the frozen set are process-wide, so they are reference-counted (the last run to
leave restores them) and each flow enters them in its own body, where its reader sees them.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

#: allocations between young-generation collections in a bulk run (Python's default: 700)
BULK_RUN_THRESHOLD = 20_000

_lock = threading.Lock()
#: runs holding the freeze, and those of them holding the bulk threshold
_runs = 0
_tuned = 0
_saved_threshold: tuple[int, int, int] | None = None


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection while a bulk input is read (its rows form no cycles; the rescans
    would more than double the read)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def tuned_for_bulk_run() -> AbstractContextManager[None]:
    """Freeze what is alive now out of the collector's scans, and collect the young
    generation every :data:`BULK_RUN_THRESHOLD` allocations."""
    return _held(tune=True)


def frozen_for_long_read() -> AbstractContextManager[None]:
    """Only the freeze: a read keeps a page or two alive, so the usual pace keeps memory flat."""
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
