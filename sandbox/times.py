"""Timestamps as the API writes them (ISO 8601, UTC, millisecond precision, ``Z``).

Stored times are integer milliseconds since the epoch and filter bounds are parsed to integer
microseconds, so the inclusive bounds of §4 are exact: passing back a timestamp the sandbox
printed always includes that item (no float rounding at the edges).

Two parsers: :func:`parse_iso_us` for the query filters the specification types as plain
"ISO 8601 strings" (naive means UTC), and :func:`parse_rfc3339_us` for request-body fields it
types as date-time (``dueDate``, ``effectiveDate``), which need an explicit UTC offset.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
DAY_MS = 86_400_000

# RFC 3339 §5.6 ``date-time``: full-date "T" full-time, where full-time needs the seconds and
# a time-offset (``Z`` or ``±hh:mm``); "T" and "Z" may be lower case.
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)
# The same without an offset (or with only a date, or a space for the "T"): local times.
_WITHOUT_OFFSET = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?", re.ASCII
)
RFC3339_FORM = "YYYY-MM-DDThh:mm:ss[.fff] followed by Z or ±hh:mm"


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


def parse_rfc3339_us(text: str) -> int:
    """Parse an RFC 3339 date-time (JSON Schema ``format: date-time``) to epoch microseconds.

    Stricter than :func:`parse_iso_us` on purpose: a body field the published schemas declare
    as ``date-time`` needs the "T", the seconds and a UTC offset, because a time without an
    offset means a different instant to every reader. ValueError says what is wrong.
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(_rfc3339_problem(text))
    year, month, day, hour, minute, second, fraction, offset = match.groups()
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    try:
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            micros,
            tzinfo=_offset(offset),
        )
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid date-time ({exc})") from None
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _offset(text: str) -> timezone:
    """``Z`` or ``±hh:mm`` as a timezone; ValueError for hours or minutes out of range."""
    if text in ("Z", "z"):
        return UTC
    hours, minutes = int(text[1:3]), int(text[4:6])
    if hours > 23 or minutes > 59:
        raise ValueError(f"UTC offset {text} is out of range")
    sign = -1 if text[0] == "-" else 1
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def _rfc3339_problem(text: str) -> str:
    if _WITHOUT_OFFSET.fullmatch(text):
        return f"{text!r} has no UTC offset; an RFC 3339 date-time needs one ({RFC3339_FORM})"
    return f"{text!r} is not an RFC 3339 date-time ({RFC3339_FORM})"
