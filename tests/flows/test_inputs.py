"""Reading and validating input files and parameters (no server needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compliance_api.errors import InputError
from flows.account_tags import read_account_items
from flows.add_people_to_groups import read_membership_items
from flows.document_links import read_link_items
from flows.promote_vendors import read_vendor_items
from flows.questionnaires import read_route_items


def write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def test_csv_with_bom_is_read_and_duplicates_are_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "v.csv", "\ufeffdiscovered_vendor_id\nv-1\nv-2\n\nv-1\n")
    parsed = read_vendor_items(None, path)
    assert [i.discovered_vendor_id for i in parsed.items] == ["v-1", "v-2"]
    assert parsed.duplicates == ["v-1"]


def test_inline_and_file_are_combined(tmp_path: Path) -> None:
    path = write(tmp_path, "v.json", '["v-2", {"discovered_vendor_id": "v-3"}]')
    parsed = read_vendor_items(["v-1", "v-2"], path)
    assert [i.discovered_vendor_id for i in parsed.items] == ["v-1", "v-2", "v-3"]
    assert parsed.duplicates == ["v-2"]


def test_bad_encoding_is_a_clear_error(tmp_path: Path) -> None:
    path = write(tmp_path, "v.csv", "discovered_vendor_id\nv-\xe9\n".encode("latin-1"))
    with pytest.raises(InputError, match="is not UTF-8 text"):
        read_vendor_items(None, path)


def test_missing_column_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "links.csv", "document_id,url\nd-1,https://x.test/a\n")
    with pytest.raises(InputError, match="has no column 'title'"):
        read_link_items(None, path)


def test_unknown_column_is_an_error_not_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, "v.csv", "discovered_vendor_id,colour\nv-1,red\n")
    with pytest.raises(InputError, match="unknown column.*'colour'"):
        read_vendor_items(None, path)


def test_error_names_item_field_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", "person_id,group_id\np-1,g-1\np 2,g-1\n")
    with pytest.raises(InputError) as caught:
        read_membership_items(None, None, path)
    error = caught.value
    assert error.item is not None and error.item.startswith("row 3")
    assert error.field == "person_id"
    assert error.value == "p 2"


def test_conflicting_duplicates_are_an_error() -> None:
    links = [
        {"document_id": "d-1", "url": "https://x.test/a", "title": "A"},
        {"document_id": "d-1", "url": "https://x.test/a", "title": "B"},
    ]
    with pytest.raises(InputError, match="appears twice with different values"):
        read_link_items(links, None)


def test_bad_url_and_missing_title_are_input_errors() -> None:
    with pytest.raises(InputError) as caught:
        read_link_items([{"document_id": "d-1", "url": "ftp://x.test/a", "title": "A"}], None)
    assert caught.value.field == "url" and caught.value.item == "links[0] (document_id=d-1)"
    with pytest.raises(InputError, match="title"):
        read_link_items([{"document_id": "d-1", "url": "https://x.test/a"}], None)


def test_nothing_given_is_an_error() -> None:
    with pytest.raises(InputError, match="no items"):
        read_vendor_items(None, None)
    with pytest.raises(InputError, match="group_ids"):
        read_membership_items(None, ["p-1"], None)


def test_people_file_without_group_needs_group_ids(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", "person_id\np-1\np-2\n")
    parsed = read_membership_items(["g-1", "g-2"], None, path)
    assert len(parsed.items) == 4
    with pytest.raises(InputError, match="group_id"):
        read_membership_items(None, None, path)


def test_account_rows_fold_per_account_and_need_explicit_clear(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "a.csv",
        "account_id,category_id,tag_ids,custom_field:Region\n"
        "a-1,c-1,t-1;t-2,EU\na-1,c-2,NONE,EU\na-1,c-1,t-1;t-2,EU\na-2,c-1,t-3,\n",
    )
    parsed = read_account_items(None, path)
    first, second = parsed.items
    assert first.tags == {"c-1": ["t-1", "t-2"], "c-2": []}
    assert first.custom_fields == {"Region": "EU"}
    assert second.tags == {"c-1": ["t-3"]}
    assert len(parsed.duplicates) == 1
    empty = write(tmp_path, "b.csv", "account_id,category_id,tag_ids\na-1,c-1,\n")
    with pytest.raises(InputError, match="write NONE"):
        read_account_items(None, empty)


def test_route_rejects_status_a_client_cannot_set() -> None:
    with pytest.raises(InputError) as caught:
        read_route_items(["q-1"], None, {"route": ["IN_REVIEW", "APPROVED"]})
    assert caught.value.field == "route"
    assert "approve step" in str(caught.value)


def test_route_file_rows_fall_back_to_run_parameters(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "q.csv",
        "questionnaire_id,route,approve\nq-1,,\nq-2,IN_PROGRESS;IN_REVIEW,false\n",
    )
    parsed = read_route_items(None, path, {"route": ["IN_REVIEW"], "approve": True})
    first, second = parsed.items
    assert first.route == ["IN_REVIEW"] and first.approve is True
    assert second.route == ["IN_PROGRESS", "IN_REVIEW"] and second.approve is False


@pytest.mark.parametrize(
    "text",
    [
        'person_id,group_id\n\n\np-1,g-1\n , \n"p-\n2",g-2\n',
        "person_id,group_id,person_id\np-1,g-1,p-9\np-2,,\np-3\n",
        " person_id ,person_id\np-1, \n",
    ],
)
def test_csv_rows_read_as_dict_reader_reads_them(text: str) -> None:
    """The fast CSV reader keeps csv.DictReader's row numbers and repeated-column rule."""
    import csv
    import io

    from write_engine.inputs import _csv_records, _Source

    reader = csv.DictReader(io.StringIO(text, newline=""))
    expected = []
    for row in reader:
        cells = {name.strip(): (value or "").strip() for name, value in row.items()}
        if given := {name: value for name, value in cells.items() if value}:
            expected.append((f"row {reader.line_num}", given))
    source = _Source("input_file", "people.csv", text, is_json=False)
    assert _csv_records(source)[1] == expected


def test_bulk_validation_still_names_the_first_bad_row(tmp_path: Path) -> None:
    rows = "\n".join(f"p-{i}" for i in range(500)) + "\nbad id\n" + "p-x\n"
    path = write(tmp_path, "p.csv", "person_id\n" + rows)
    with pytest.raises(InputError) as caught:
        read_membership_items(["g-1"], None, path)
    assert caught.value.item is not None and caught.value.item.startswith("row 502")
    assert caught.value.field == "person_id"


def test_brief_results_are_never_failures_and_the_table_shows_every_failure() -> None:
    from write_engine.outcomes import Done, ItemResult, Outcome
    from write_engine.reporting import MAX_OK_ROWS, result_rows

    with pytest.raises(ValueError, match="failed"):
        Done("g/p", Outcome.FAILED)
    done = [Done(f"g/p-{i}") for i in range(MAX_OK_ROWS + 5)]
    failed = ItemResult(item="g/x", outcome=Outcome.FAILED, reason="not found", rerun_input={})
    rows, hidden = result_rows([*done[:3], failed, *done[3:]])
    assert rows[0]["item"] == "g/x" and rows[1]["item"] == "g/p-0"
    assert len(rows) == MAX_OK_ROWS + 1 and hidden == 5


def test_a_questionnaire_tag_given_twice_is_sent_once() -> None:
    parsed = read_route_items(["q-1"], None, {"tags": ["c:t", "c:u", "c:t"]})
    (item,) = parsed.items
    assert item.tags == ["c:t", "c:u"]
    tags = item.assignment_update().tag_and_category_ids or []
    assert [(tag.category_id, tag.tag_id) for tag in tags] == [("c", "t"), ("c", "u")]


# --------------------------------------------------------------------------- pasted rows
PEOPLE_CSV = "person_id,group_id\np-1,g-1\np-2,\n\np-3,g-2\n"


@pytest.mark.parametrize(
    "pasted",
    [
        PEOPLE_CSV,
        "\ufeff" + PEOPLE_CSV.replace("\n", "\r\n") + "\n\n",  # a spreadsheet's copy
        '[{"person_id": "p-1", "group_id": "g-1"}, "p-2", {"person_id": "p-3", "group_id": "g-2"}]',
    ],
    ids=["csv", "csv-from-a-spreadsheet", "json"],
)
def test_pasted_rows_give_the_same_plan_as_the_same_file(tmp_path: Path, pasted: str) -> None:
    from flows.add_people_to_groups import GroupMembership
    from write_engine.approval import plan_counts, plan_digest

    from_file = read_membership_items(["g-9"], None, write(tmp_path, "p.csv", PEOPLE_CSV))
    from_paste = read_membership_items(["g-9"], None, None, pasted)
    assert from_paste == from_file
    assert plan_digest(from_paste.items) == plan_digest(from_file.items)
    job = GroupMembership()
    assert plan_counts(from_paste.items, job.plan_groups) == {
        "group g-1": 1,
        "group g-9": 1,
        "group g-2": 1,
    }


def test_pasted_rows_and_a_file_are_combined_and_deduplicated(tmp_path: Path) -> None:
    path = write(tmp_path, "v.csv", "discovered_vendor_id\nv-1\nv-2\n")
    parsed = read_vendor_items(["v-0"], path, pasted_rows="discovered_vendor_id\nv-2\nv-3\n")
    assert [i.discovered_vendor_id for i in parsed.items] == ["v-0", "v-1", "v-2", "v-3"]
    assert parsed.duplicates == ["v-2"]


def test_blank_pasted_rows_count_as_none() -> None:
    with pytest.raises(InputError, match="no items: give discovered_vendor_ids"):
        read_vendor_items(None, None, pasted_rows="  \n ")


def test_a_plan_digest_changes_with_any_field_not_only_the_key() -> None:
    from write_engine.approval import plan_digest

    first = read_link_items([{"document_id": "d-1", "url": "https://e.x/a", "title": "A"}], None)
    second = read_link_items([{"document_id": "d-1", "url": "https://e.x/a", "title": "B"}], None)
    assert first.items[0].key() == second.items[0].key()
    assert plan_digest(first.items) != plan_digest(second.items)


def test_account_tag_plans_count_per_tag_and_removal() -> None:
    from flows.account_tags import AccountTags
    from write_engine.approval import plan_counts

    parsed = read_account_items(
        [
            {"account_id": "a-1", "tags": {"c-1": ["t-1", "t-2"]}},
            {"account_id": "a-2", "tags": {"c-1": ["t-1"], "c-2": []}, "name": "Acme"},
        ],
        None,
    )
    assert plan_counts(parsed.items, AccountTags().plan_groups) == {
        "category c-1: tag t-1": 2,
        "category c-1: tag t-2": 1,
        "category c-2: remove all": 1,
        "name, email domain or custom fields": 1,
    }
