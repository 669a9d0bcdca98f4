"""Timestamps as the API writes them (ISO 8601, UTC, millisecond precision, ``Z``).

Stored times are integer milliseconds since the epoch and filter bounds are parsed to integer
microseconds, so the inclusive bounds of §4 are exact: passing back a timestamp the sandbox
printed always includes that item (no float rounding at the edges).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAY_MS = 86_400_000


def to_ms(seconds: float) -> int:
    return int(seconds * 1000)


_DAYS: dict[int, str] = {}
_CLOCK_FACES = [f"{h:02d}:{m:02d}:{s:02d}" for h in range(24) for m in range(60) for s in range(60)]


def iso(ms: int) -> str:
    """Format epoch milliseconds the way the service does: ``2025-01-31T12:00:00.000Z``.

    Hand-rolled (dates cached per day) because seeding 100,000 audit entries calls it a lot.
    """
    day, rest = divmod(ms, DAY_MS)
    date = _DAYS.get(day)
    if date is None:
        date = _DAYS[day] = (_EPOCH + timedelta(days=day)).strftime("%Y-%m-%d")
    seconds, millis = divmod(rest, 1000)
    return f"{date}T{_CLOCK_FACES[seconds]}.{millis:03d}Z"


def parse_iso_us(text: str) -> int:
    """Parse an ISO 8601 timestamp (``Z``, offset, or naive meaning UTC) to epoch microseconds.

    Raises ValueError with a message naming the value, so callers can put it in a 400.
    """
    try:
        moment = datetime.fromisoformat(text.strip())
    except (ValueError, AttributeError, TypeError):
        raise ValueError(f"{text!r} is not an ISO 8601 timestamp") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)
