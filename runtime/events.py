"""Sending Prefect events so that "sent" means "the server has it".

Unlike ``emit_event`` (a background queue), a batch is POSTed to ``/events``, which answers only
after publishing, so a checkpoint saved afterwards never runs ahead of the events. Ids are
deterministic, so the server dedupes a batch re-sent after a crash (docs/read-flows.md).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from typing import Any, Self

from prefect.client.orchestration import PrefectClient, get_client
from prefect.events import Event, RelatedResource
from prefect.events.related import related_resources_from_run_context
from prefect.logging import get_run_logger
from prefect.settings import get_current_settings
from tenacity import AsyncRetrying, stop_after_attempt, wait_exponential

#: namespace of every event id this project derives (never change it: ids must stay stable)
EVENT_ID_NAMESPACE = uuid.UUID("5d0c6f7e-2b1a-4c55-9a51-6f1f8e7a9c11")

#: events per POST; keeps request bodies small however big a page is
POST_BATCH = 100
#: tries of :func:`deliver` (each with the Prefect client's own retries of a busy server)
DELIVERY_TRIES = 4


def deterministic_event_id(*parts: str) -> uuid.UUID:
    """The same facts always give the same event id, so the server dedupes replays."""
    return uuid.uuid5(EVENT_ID_NAMESPACE, "\x1f".join(parts))


class EventSink:
    """Sends batches of events to the Prefect API; attaches the run context as related
    resources (as ``emit_event`` would), looked up once per sink."""

    def __init__(self) -> None:
        self._client: PrefectClient | None = None
        self._context: list[RelatedResource] | None = None

    async def __aenter__(self) -> Self:
        self._client = get_client()
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        assert self._client is not None
        await self._client.__aexit__(*exc_info)
        self._client = None

    async def send(self, events: Sequence[Event]) -> None:
        """Deliver ``events``; returns only after the server accepted every one of them."""
        if not events:
            return
        assert self._client is not None, "use EventSink as an async context manager"
        if self._context is None:
            self._context = await related_resources_from_run_context(client=self._client)
        for start in range(0, len(events), POST_BATCH):
            batch = events[start : start + POST_BATCH]
            body = [_with_context(event, self._context) for event in batch]
            response = await self._client.request("POST", "/events", json=body)
            response.raise_for_status()


def _with_context(event: Event, context: list[RelatedResource]) -> dict[str, Any]:
    present = {resource.id for resource in event.involved_resources}
    extra = [resource for resource in context if resource.id not in present]
    maximum = get_current_settings().server.events.maximum_related_resources
    related = (list(event.related) + extra)[:maximum]
    return event.model_copy(update={"related": related}).model_dump(mode="json")


async def deliver(events: Sequence[Event], what: str, *, required: bool = False) -> bool:
    """Send ``events`` (the Prefect client retries a busy server; then up to ``DELIVERY_TRIES``
    tries in all); False, with an error on the run naming ``what`` was lost, if they could not
    be (``required``: the last error is raised after that line). For events automations or an
    audit act on, which ``emit_event`` would drop when its socket fails."""
    try:
        async for attempt in AsyncRetrying(
            stop=stop_after_attempt(DELIVERY_TRIES),
            wait=wait_exponential(multiplier=1, max=15),
            reraise=True,
        ):
            with attempt:
                async with EventSink() as sink:
                    await sink.send(events)
    except Exception as error:
        message = "The Prefect server did not take %s after %d tries (%s: %s)"
        args = (what, DELIVERY_TRIES, type(error).__name__, error)
        try:
            get_run_logger().error(message, *args)
        except Exception:  # no run logger outside a run
            logging.getLogger(__name__).error(message, *args)
        if required:
            raise
        return False
    return True
