"""Sending Prefect events as a task, so each batch shows in the run and retries on its own."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE
from prefect.events import Event

from runtime.events import EventSink


@task(name="Send events", cache_policy=NONE, retries=2, retry_delay_seconds=2)
async def send_events(sink: EventSink, events: list[Event]) -> int:
    """Retrying is safe: event ids are deterministic and the server keeps each id once. Callers
    pass ``unwalked(events)`` (``runtime/task_inputs.py``) so Prefect does not walk them."""
    await sink.send(events)
    return len(events)
