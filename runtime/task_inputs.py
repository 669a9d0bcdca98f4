"""Handing large values to tasks without Prefect walking them.

Prefect walks every argument of a task (twice: to resolve futures and to record inputs) before
the task starts; for a page of 100 models that walk cost as much as the API call. Its ``quote``
annotation skips the walk; ``unwalked`` applies it while keeping the value's type for mypy.
"""

from __future__ import annotations

from typing import TypeVar, cast

from prefect.utilities.annotations import quote

T = TypeVar("T")


def unwalked(value: T) -> T:
    """``value`` wrapped in ``quote``: the task receives the value itself, unwalked."""
    return cast(T, quote(value))
