"""Handing large values to tasks without Prefect walking them (a walk of a page of models cost
as much as the API call; docs/performance.md).
"""

from __future__ import annotations

from typing import TypeVar, cast

from prefect.utilities.annotations import quote

T = TypeVar("T")


def unwalked(value: T) -> T:
    """``value`` in Prefect's ``quote``, typed as itself: the task receives it unwalked."""
    return cast(T, quote(value))
