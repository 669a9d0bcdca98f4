"""How the flows' parameters look in the Prefect UI's run form (Deployments → Run → Custom run).

Prefect builds the form from the parameter schema of the flow
(``prefect.utilities.callables.parameter_schema``): a field's help text is the parameter's entry
in the ``Args:`` section of the flow's docstring, a ``Literal`` becomes a select, and the label is
the parameter's name. The helpers below go into the signatures as ``Annotated`` metadata.

The constrained types are the parameters' checks: the form shows their limits, the Prefect server
refuses a deployment run whose value is out of range before it creates the run (its message names
the field and the value), and a direct call fails Prefect's parameter validation, naming the
field and the limit, before the flow's first line runs.
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
NonBlank = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

#: how ``Maybe`` writes "empty" (None) in the schema; see ``_OpensOnValue``
EMPTY: JsonSchemaValue = {"enum": [None], "title": "None"}


def title(text: str) -> FieldInfo:
    """The field's label. Prefect sets every field's title to the parameter's name and a
    ``Field(title=...)`` loses to that, but an extra ``title`` key is applied after it."""
    field: FieldInfo = Field(json_schema_extra={"title": text})
    return field


def one_of(*values: str) -> WithJsonSchema:
    """A string the form offers as a select of ``values``. Unlike a ``Literal``, validation is
    left to the flow, so a wrong value gets the flow's message (and its spelling rules)."""
    return WithJsonSchema({"type": "string", "enum": list(values)})


class _OpensOnValue:
    """For ``X | None = None``: the form opens on X's input, not on a "None" tab.

    Both Prefect UIs pick the branch of ``anyOf`` whose type matches the field's value, and
    the default None matches ``{"type": "null"}``: the field opened on 'Property is type "None"'
    and an operator had to find the tab to type a value. Written as ``{"enum": [null]}`` (the
    same set of values), None matches no typed branch and the form opens on the first, X.
    Left empty, the field keeps None, which the schema still allows.
    """

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        branches = schema.get("anyOf")
        if isinstance(branches, list):
            schema["anyOf"] = [
                dict(EMPTY) if branch == {"type": "null"} else branch for branch in branches
            ]
        return schema


#: ``T | None`` whose form field opens on T's input (left empty: None)
Maybe = Annotated[T | None, _OpensOnValue()]
