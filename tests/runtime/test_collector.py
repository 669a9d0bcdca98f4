"""The garbage-collector settings of bulk runs: applied inside, restored after, safe to overlap."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from runtime import collector


@pytest.fixture(autouse=True)
def _restore_collector() -> Iterator[None]:
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_a_bulk_run_collects_the_young_generation_less_often_and_freezes_the_input() -> None:
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    validated_input = [{"person_id": "p-1"}]
    with collector.tuned_for_bulk_run():
        assert gc.get_threshold() == (collector.BULK_RUN_THRESHOLD, 10, 10)
        scanned = {id(obj) for obj in gc.get_objects()}
        assert id(validated_input) not in scanned
        assert id(validated_input[0]) not in scanned
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_settings_are_restored_when_the_run_raises() -> None:
    gc.set_threshold(500, 5, 5)
    with pytest.raises(RuntimeError), collector.tuned_for_bulk_run():
        raise RuntimeError("the run failed")
    assert gc.get_threshold() == (500, 5, 5)
    assert gc.get_freeze_count() == 0


def test_overlapping_runs_restore_the_original_settings_when_the_last_one_ends() -> None:
    """Two flows in one process: the first to finish must not undo the other's settings, and
    the last must not leave the bulk settings behind."""
    gc.set_threshold(700, 10, 10)
    first, second = collector.tuned_for_bulk_run(), collector.tuned_for_bulk_run()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == collector.BULK_RUN_THRESHOLD
    assert gc.get_freeze_count() > 0
    second.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


@pytest.mark.parametrize("enabled_before", [True, False])
def test_reading_pauses_the_collector_and_then_leaves_it_as_it_was(enabled_before: bool) -> None:
    if enabled_before:
        gc.enable()
    else:
        gc.disable()
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled_before


def test_a_long_read_freezes_but_keeps_the_usual_collection_pace() -> None:
    gc.set_threshold(700, 10, 10)
    alive_before = [{"module": "prefect"}]
    with collector.frozen_for_long_read():
        assert gc.get_threshold() == (700, 10, 10)  # a page at a time: memory stays flat
        assert id(alive_before) not in {id(obj) for obj in gc.get_objects()}
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1  # what the read makes is still collected
    assert gc.get_freeze_count() == 0


def test_a_read_and_a_write_overlapping_each_keep_their_settings() -> None:
    gc.set_threshold(700, 10, 10)
    read, write = collector.frozen_for_long_read(), collector.tuned_for_bulk_run()
    read.__enter__()
    write.__enter__()
    assert gc.get_threshold()[0] == collector.BULK_RUN_THRESHOLD
    write.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)  # the write's threshold leaves with it
    assert gc.get_freeze_count() > 0  # the read still holds the freeze
    read.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0
