"""How the flows' parameters look in the Prefect UI's run form (``Annotated`` metadata).

Help text comes from the flow docstring's ``Args:``, or from ``form_field`` for a parameter
several flows share. The constrained types are the parameters' checks: the form shows the
limits, the server refuses an out-of-range deployment run, and a direct call fails Prefect's
parameter validation before the flow's first line.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from pydantic import Field, GetJsonSchemaHandler, StringConstraints, WithJsonSchema
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

T = TypeVar("T")

#: a count of things listed or read: 1 or more
AtLeastOne = Annotated[int, Field(ge=1)]
#: a number of days or seconds: 0 or more
NonNegative = Annotated[int, Field(ge=0)]
Seconds = Annotated[float, Field(ge=0)]
#: items per API page (spec §4, pagination: 1 to 100)
PageSize = Annotated[int, Field(ge=1, le=100)]
#: a CVSS-style severity
Severity = Annotated[float, Field(ge=0, le=10)]
#: an id or name typed by hand: surrounding blanks are dropped, nothing left is refused
#: (``pattern`` puts it in the JSON schema too: the server checks the Resume form against it,
#: and an answer of only spaces would be stored, then fail the run each time it is read)
NonBlank = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, pattern=r"\S")]


def title(text: str) -> FieldInfo:
    """The field's label (an extra ``title`` key: Prefect overrides ``Field(title=...)``)."""
    field: FieldInfo = Field(json_schema_extra={"title": text})
    return field


def form_field(label: str, help_text: str) -> FieldInfo:
    """Label and help of a parameter several flows share, declared once: an extra
    ``description`` key wins over the flow docstring's ``Args:`` entry."""
    field: FieldInfo = Field(json_schema_extra={"title": label, "description": help_text})
    return field


def one_of(*values: str) -> WithJsonSchema:
    """A string offered as a select of ``values``; unlike a ``Literal``, the flow validates it
    (its own message and spelling rules)."""
    return WithJsonSchema({"type": "string", "enum": list(values)})


class _OpensOnValue:
    """For ``X | None = None``: the form opens on X's input, not on a "None" tab.

    The UIs open the ``anyOf`` branch whose type matches the value; ``{"enum": [null]}`` (same
    values as ``{"type": "null"}``) matches no typed branch, so the form opens on X."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        branches = schema.get("anyOf")
        if isinstance(branches, list):
            schema["anyOf"] = [
                {"enum": [None], "title": "None"} if branch == {"type": "null"} else branch
                for branch in branches
            ]
        return schema


#: ``T | None`` whose form field opens on T's input (left empty: None)
Maybe = Annotated[T | None, _OpensOnValue()]
