"""The project's copy of the published schemas is whole and agrees with the status table."""

from __future__ import annotations

import json

from tests.fixtures import spec


def test_every_operation_has_its_document_and_its_expected_status() -> None:
    routes = {spec.route_of(document) for document in spec.schema_files().values()}
    assert routes == set(spec.EXPECTED_STATUS)


def test_the_status_table_matches_the_published_documents() -> None:
    for document in spec.schema_files().values():
        assert spec.EXPECTED_STATUS[spec.route_of(document)] == document["response_status"]


def test_the_specification_corrections_apply_to_the_loaded_copy_not_the_files() -> None:
    for stem, optional in spec.SPEC_CORRECTIONS:
        published = json.loads((spec.SCHEMA_DIR / f"{stem}.json").read_text(encoding="utf-8"))
        assert optional in published["response"]["required"]
        loaded = spec.schema_files()[stem]["response"]
        assert optional not in loaded["required"] and optional in loaded["properties"]


def test_the_copy_lives_inside_the_checkout() -> None:
    root = spec.SCHEMA_DIR.parents[2]
    assert (root / "pyproject.toml").is_file() and spec.SCHEMA_DIR.is_relative_to(root / "tests")
