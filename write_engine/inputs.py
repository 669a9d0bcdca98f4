"""Reading and checking a write run's items (inline, pasted, or a CSV/JSON file) before any call.

Every problem is an ``InputError`` naming the item (``row 4``, ``links[2]``), field and value.
"""

from __future__ import annotations

import csv
import functools
import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, StringConstraints, TypeAdapter, ValidationError

from compliance_api.errors import InputError

#: an identifier that is safe in a URL path: no blanks, no whitespace, no ``/?#``
Identifier = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=256, pattern=r"^[^\s/?#]+$"),
]

#: what a flow says of an id the audit log names that no URL path can carry
UNUSABLE_ID = (
    "the audit log names this id, which cannot be sent in a URL path (empty, blanks, '/', '?', "
    "'#' or over 256 characters); handle it by hand"
)


def split_identifiers(values: Iterable[str]) -> tuple[list[str], list[str]]:
    """Ids read from the service: those a URL path can carry, and the rest (failed rows, so one
    odd id cannot stop the run)."""
    adapter = TypeAdapter(Identifier)
    usable: list[str] = []
    unusable: list[str] = []
    for value in values:
        try:
            usable.append(adapter.validate_python(value))
        except ValidationError:
            unusable.append(value)
    return usable, unusable


#: separates several values in one CSV cell (``IN_REVIEW;READY_FOR_REVIEW``)
LIST_SEPARATOR = ";"

Record = dict[str, Any]


class ItemInput(BaseModel):
    """One item of a write run: strict, so a typo in a field name is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, frozen=True)

    def key(self) -> str:
        """What makes two items "the same item" (duplicates share it)."""
        raise NotImplementedError

    def label(self) -> str:
        """How the item is named in tables, logs and errors."""
        return self.key()

    def as_input(self) -> dict[str, Any]:
        """The JSON form that parses back into this item (stored for reruns)."""
        return self.model_dump(mode="json", exclude_defaults=True)


ItemT = TypeVar("ItemT", bound=ItemInput)


@dataclass(frozen=True)
class ParsedItems(Generic[ItemT]):
    """Unique items in input order, and what was dropped as a duplicate."""

    items: list[ItemT]
    duplicates: list[str] = field(default_factory=list)


def split_list(value: Any) -> Any:
    """Let a CSV cell (or a UI text box) carry a list: ``"a; b"`` -> ``["a", "b"]``."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(LIST_SEPARATOR) if part.strip()]
    return value


def parse_item(model: type[ItemT], data: Mapping[str, Any], where: str) -> ItemT:
    """Validate one record; the error names the item, the field and the offending value."""
    if not isinstance(data, Mapping):
        raise InputError(where, data, f"must be an object with the fields of {model.__name__}")
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise _first_problem(exc, model, data, where) from None
    except InputError as exc:
        raise InputError(exc.field, exc.value, exc.problem, item=exc.item or where) from None


def _first_problem(
    exc: ValidationError, model: type[BaseModel], data: Mapping[str, Any], where: str
) -> InputError:
    errors = exc.errors(include_url=False)
    first = errors[0]
    name = ".".join(str(part) for part in first["loc"]) or model.__name__
    problem = str(first["msg"]).removeprefix("Value error, ")
    value = first.get("input")
    if first["type"] == "missing":
        problem, value = "is required", None
    elif first["type"] == "extra_forbidden":
        expected = ", ".join(model.model_fields)
        problem = f"is not a field of this input (expected: {expected})"
    if len(errors) > 1:
        problem += f" (and {len(errors) - 1} more problem(s) in this item)"
    # ``row 4 (person_id=p-9)``: the position plus the ids an operator searches for
    ids = [
        f"{key}={data[key]}"
        for key in model.model_fields
        if key.endswith("_id") and data.get(key) not in (None, "")
    ]
    return InputError(name, value, problem, item=f"{where} ({', '.join(ids)})" if ids else where)


def parse_items(
    model: type[ItemT], records: Iterable[tuple[str, Mapping[str, Any]]]
) -> list[ItemT]:
    """Validate every record in one pydantic-core pass (bulk files); only if it fails, one by one,
    so the first bad record raises the error :func:`parse_item` names."""
    records = list(records)
    datas = [data for _, data in records]
    if all(type(data) is dict for data in datas):
        try:
            return _list_adapter(model).validate_python(datas)
        except (ValidationError, InputError):
            pass  # found below, with the item's position
    return [parse_item(model, data, where) for where, data in records]


@functools.cache
def _list_adapter(model: type[ItemT]) -> TypeAdapter[list[ItemT]]:
    return TypeAdapter(list[model])  # type: ignore[valid-type]


def dedupe(items: Sequence[ItemT]) -> ParsedItems[ItemT]:
    """Drop exact repeats (reported); the same key with different content is an input error
    (sending both would race, picking one would lose the other)."""
    kept: dict[str, ItemT] = {}
    duplicates: list[str] = []
    for item in items:
        key = item.key()
        earlier = kept.get(key)
        if earlier is None:
            kept[key] = item
        elif earlier == item:
            duplicates.append(item.label())
        else:
            raise InputError(
                "input",
                item.key(),
                f"appears twice with different values ({earlier.as_input()} and "
                f"{item.as_input()}); keep one",
                item=item.label(),
            )
    return ParsedItems(list(kept.values()), duplicates)


@dataclass(frozen=True)
class _Source:
    """The text of a file or of pasted rows, and how its errors name it."""

    field: str
    shown: str
    text: str
    is_json: bool

    @classmethod
    def file(cls, input_file: str | Path) -> _Source:
        """A CSV file (with a header) or a JSON file (a list)."""
        path = Path(input_file).expanduser()
        if not path.is_file():
            raise InputError("input_file", str(path), "does not exist or is not a file")
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8-sig")  # tolerate the BOM spreadsheet programs write
        except UnicodeDecodeError as exc:
            raise InputError(
                "input_file",
                str(path),
                f"is not UTF-8 text (byte {exc.start} is {raw[exc.start : exc.start + 1]!r}); "
                "save it as UTF-8 (in a spreadsheet: 'CSV UTF-8')",
            ) from None
        suffix = path.suffix.lower()
        if suffix not in (".csv", ".json"):
            raise InputError("input_file", str(path), "must be a .csv or .json file")
        return cls("input_file", str(path), text, is_json=suffix == ".json")

    @classmethod
    def pasted(cls, text: str) -> _Source:
        """Rows pasted into the run form: JSON if they start with ``[``, else CSV."""
        text = text.strip().removeprefix("\ufeff")
        lines = text.count("\n") + 1 if text else 0
        shown = f"pasted text ({lines} line(s))"
        return cls("pasted_rows", shown, text, is_json=text.startswith("["))

    @property
    def prefix(self) -> str:
        """How a record's position starts: ``row 4`` in a file, ``pasted row 4`` if pasted."""
        return "pasted " if self.field == "pasted_rows" else ""

    def records(
        self,
        columns: Sequence[str],
        required: Sequence[str],
        column_prefixes: Sequence[str],
        scalar_field: str | None,
    ) -> list[tuple[str, Record]]:
        """The records, each named by its position; a column name or JSON key that is not one of
        ``columns`` (or starts with one of ``column_prefixes``) is an error, not ignored."""

        def known(name: str) -> bool:
            return name in columns or name.startswith(tuple(column_prefixes))

        if self.is_json:
            records = _json_records(self, scalar_field)
            for where, record in records:
                _check_keys(where, record, known, columns)
        else:
            header, records = _csv_records(self)
            self._check_header(header, known, columns, required)
        if not records:
            raise InputError(self.field, self.shown, "has no items")
        return records

    def _check_header(
        self,
        header: list[str],
        known: Callable[[str], bool],
        columns: Sequence[str],
        required: Sequence[str],
    ) -> None:
        for column in required:
            if column not in header:
                found = ", ".join(header)
                problem = f"has no column {column!r} (columns found: {found})"
                raise InputError(self.field, self.shown, problem)
        unknown = [name for name in header if not known(name)]
        if unknown:
            raise InputError(
                self.field,
                self.shown,
                f"has unknown column(s) {', '.join(map(repr, unknown))}; "
                f"expected: {', '.join(columns)}",
            )


def _check_keys(
    where: str, record: Record, known: Callable[[str], bool], columns: Sequence[str]
) -> None:
    """A JSON key that is not a known field is an error, not ignored (a typo must show)."""
    for name, value in record.items():
        if not known(name):
            problem = f"is not a known field; expected: {', '.join(columns)}"
            raise InputError(name, value, problem, item=where)


def _json_records(source: _Source, scalar_field: str | None) -> list[tuple[str, Record]]:
    try:
        data = json.loads(source.text)
    except json.JSONDecodeError as exc:
        raise InputError(
            source.field, source.shown, f"is not valid JSON (line {exc.lineno}: {exc.msg})"
        ) from None
    if not isinstance(data, list):
        raise InputError(source.field, source.shown, "must hold a JSON list of items")
    records = []
    for index, value in enumerate(data, start=1):
        where = f"{source.prefix}item {index}"
        records.append((where, _record(value, scalar_field, where)))
    return records


def _record(value: Any, scalar_field: str | None, where: str) -> Record:
    if isinstance(value, dict):
        return value
    if scalar_field is not None and isinstance(value, str):
        return {scalar_field: value}
    expected = f"an object or a {scalar_field} string" if scalar_field else "an object"
    raise InputError(where, value, f"must be {expected}")


def _csv_records(source: _Source) -> tuple[list[str], list[tuple[str, Record]]]:
    """Rows as records of their non-empty stripped cells, numbered by their last line; a fast
    ``csv.reader`` that reads as ``csv.DictReader`` would (a repeated column: later wins)."""
    reader = csv.reader(io.StringIO(source.text, newline=""))
    try:
        names = next(reader, None) or []
        if not names:
            raise InputError(source.field, source.shown, "is empty (CSV needs a header row)")
        header = [name.strip() for name in names]
        width = len(header)
        unique = len(set(names)) == len(set(header)) == width
        records: list[tuple[str, Record]] = []
        for row in reader:
            if not row:  # a blank line is not an item
                continue
            where = f"{source.prefix}row {reader.line_num}"
            if len(row) > width:
                raise InputError(where, row[width:], "has more cells than the header has columns")
            given = _cells(header, row) if unique else _cells_of_repeated_columns(names, row)
            if given:  # a row of empty cells is not an item
                records.append((where, given))
    except csv.Error as exc:
        raise InputError(source.field, source.shown, f"is not valid CSV: {exc}") from None
    return header, records


def _cells(header: list[str], row: list[str]) -> Record:
    """The non-empty cells of a row, stripped (a short row's missing cells are empty)."""
    return {name: value for name, cell in zip(header, row, strict=False) if (value := cell.strip())}


def _cells_of_repeated_columns(names: list[str], row: list[str]) -> Record:
    """csv.DictReader's reading of a row under a header that repeats a name."""
    raw = dict(zip(names, row, strict=False))
    raw.update((name, "") for name in names[len(row) :])
    cells = {name.strip(): value.strip() for name, value in raw.items()}
    return {name: value for name, value in cells.items() if value}


def collect_records(
    inline: Iterable[tuple[str, Record]] | None,
    input_file: str | Path | None,
    *,
    what: str,
    columns: Sequence[str],
    required: Sequence[str],
    column_prefixes: Sequence[str] = (),
    scalar_field: str | None = None,
    allow_empty: bool = False,
    pasted_rows: str | None = None,
) -> list[tuple[str, Record]]:
    """Records from the parameters, the file and/or the pasted rows (any may be given), each with
    its position; none is an error unless ``allow_empty`` (items also come from the audit log).

    ``columns`` (or names with one of ``column_prefixes``) are allowed, ``required`` must be in a
    CSV header; a plain JSON string stands for ``{scalar_field: value}``; empty cells are not given.
    """
    records = list(inline or [])
    rules = (columns, required, column_prefixes, scalar_field)
    if input_file:
        records.extend(_Source.file(input_file).records(*rules))
    if pasted_rows and pasted_rows.strip():
        records.extend(_Source.pasted(pasted_rows).records(*rules))
    if not records and not allow_empty:
        raise InputError("input", None, f"no items: give {what}")
    return records
