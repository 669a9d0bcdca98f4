"""List endpoints: pagination, cursors and every filter with its exact semantics (§4.1-4.2)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

from sandbox.times import parse_iso_us
from tests.fixtures.sandbox_api import Api, Env

KB = "GET /v1/knowledge-base/resources"
ANSWERS = "GET /v1/knowledge-base/answer-library"
EVENTS = "GET /v1/event-logs"
LISTS = [KB, ANSWERS, EVENTS]


def _us(text: str) -> int:
    return parse_iso_us(text)


@pytest.mark.parametrize("route", LISTS)
def test_page_size_defaults_to_10(api: Api, route: str) -> None:
    page = api.ok(route)["results"]
    assert len(page["data"]) == 10
    assert page["pageInfo"]["hasNextPage"] is True
    assert page["pageInfo"]["hasPreviousPage"] is False


@pytest.mark.parametrize("route", LISTS)
@pytest.mark.parametrize("size, status", [(0, 400), (101, 400), ("ten", 400), (1, 200), (100, 200)])
def test_page_size_must_be_between_1_and_100(api: Api, route: str, size: Any, status: int) -> None:
    response = api.call(route, params={"pageSize": size})
    assert response.status_code == status
    if status == 200:
        assert len(response.json()["results"]["data"]) == size
    else:
        assert "pageSize" in response.json()["message"]


@pytest.mark.parametrize("route", LISTS)
def test_cursor_starts_after_the_marked_item_and_walks_every_item_once(
    api: Api, route: str
) -> None:
    first = api.ok(route, params={"pageSize": 5})["results"]
    second = api.ok(route, params={"pageSize": 5, "pageCursor": first["pageInfo"]["endCursor"]})[
        "results"
    ]
    both = api.ok(route, params={"pageSize": 10})["results"]["data"]
    assert first["data"] + second["data"] == both
    assert second["pageInfo"]["hasPreviousPage"] is True
    # startCursor marks the first item of its page: a page after it starts with the second.
    after_start = api.ok(
        route, params={"pageSize": 1, "pageCursor": second["pageInfo"]["startCursor"]}
    )["results"]["data"]
    assert after_start == [second["data"][1]]
    everything = api.all_pages(route)
    ids = [item["id"] for item in everything]
    assert len(ids) == len(set(ids)) > 100


@pytest.mark.parametrize("route", LISTS)
@pytest.mark.parametrize("cursor", ["garbage!", "ZXZlbnRzOjk5OTk5OTk", "a2I6LTE"])
def test_foreign_or_malformed_cursor_is_400(api: Api, route: str, cursor: str) -> None:
    response = api.call(route, params={"pageCursor": cursor})
    assert response.status_code == 400
    assert "pageCursor" in response.json()["message"]


def test_last_page_has_no_next_page_and_cursors(api: Api) -> None:
    everything = api.all_pages(KB)
    tail = api.ok(
        KB, params={"pageSize": 100, "pageCursor": _cursor_of(api, KB, len(everything) - 1)}
    )
    info = tail["results"]["pageInfo"]
    assert tail["results"]["data"] == []
    assert info == {
        "startCursor": None,
        "endCursor": None,
        "hasNextPage": False,
        "hasPreviousPage": True,
    }


def _cursor_of(api: Api, route: str, position: int) -> str:
    params: dict[str, Any] = {"pageSize": 1}
    for _ in range(position // 100):
        page = api.ok(route, params={**params, "pageSize": 100})["results"]
        params["pageCursor"] = page["pageInfo"]["endCursor"]
    remainder = position % 100
    page = api.ok(route, params={**params, "pageSize": remainder + 1})["results"]
    return str(page["pageInfo"]["endCursor"])


def test_kb_full_text_search_matches_every_word_in_titles(api: Api) -> None:
    everything = api.all_pages(KB)
    found = api.all_pages(KB, {"q": "soc 2 REPORT"})
    expected = [
        item["id"]
        for item in everything
        if all(word in item["title"].lower() for word in ("soc", "2", "report"))
    ]
    assert [item["id"] for item in found] == expected
    assert expected
    assert api.all_pages(KB, {"q": "zzz-no-such-words"}) == []


def test_kb_type_filter_allows_one_or_both_types(api: Api) -> None:
    files = api.all_pages(KB, {"typeMatchesAny": "FILE"})
    urls = api.all_pages(KB, {"typeMatchesAny": "URL"})
    both = api.all_pages(KB, {"typeMatchesAny": ["FILE", "URL"]})
    assert files and urls
    assert {i["type"] for i in files} == {"FILE"} and {i["type"] for i in urls} == {"URL"}
    assert len(both) == len(files) + len(urls) == len(api.all_pages(KB))
    assert all("fileUrl" in i and "url" not in i for i in files)
    bad = api.call(KB, params={"typeMatchesAny": "PDF"})
    assert bad.status_code == 400 and "typeMatchesAny" in bad.json()["message"]


@pytest.mark.parametrize("route", [KB, ANSWERS])
def test_last_updated_bounds_are_inclusive(api: Api, route: str) -> None:
    everything = api.all_pages(route)
    stamps = sorted(item["lastUpdated"] for item in everything)
    low, high = stamps[len(stamps) // 4], stamps[len(stamps) // 2]
    found = api.all_pages(route, {"lastUpdatedAfter": low, "lastUpdatedBefore": high})
    expected = [i["id"] for i in everything if _us(low) <= _us(i["lastUpdated"]) <= _us(high)]
    assert [i["id"] for i in found] == expected
    exact = api.all_pages(route, {"lastUpdatedAfter": low, "lastUpdatedBefore": low})
    assert {i["lastUpdated"] for i in exact} == {low}


@pytest.mark.parametrize("route", [KB, ANSWERS])
def test_expiry_bounds_are_inclusive_and_skip_items_without_expiry(api: Api, route: str) -> None:
    everything = api.all_pages(route)
    stamps = sorted(i["expirationDate"] for i in everything if i["expirationDate"])
    low, high = stamps[3], stamps[-4]
    found = api.all_pages(route, {"expiresAfter": low, "expiresBefore": high})
    expected = [
        i["id"]
        for i in everything
        if i["expirationDate"] and _us(low) <= _us(i["expirationDate"]) <= _us(high)
    ]
    assert [i["id"] for i in found] == expected
    assert low in {i["expirationDate"] for i in found} and high in {
        i["expirationDate"] for i in found
    }


@pytest.mark.parametrize("route", [KB, ANSWERS])
@pytest.mark.parametrize(
    "name", ["lastUpdatedAfter", "lastUpdatedBefore", "expiresAfter", "expiresBefore"]
)
def test_malformed_timestamp_filter_is_400_naming_it(api: Api, route: str, name: str) -> None:
    response = api.call(route, params={name: "last tuesday"})
    assert response.status_code == 400
    assert name in response.json()["message"]


def test_expiration_status_is_derived_from_the_expiration_date(env: Env, api: Api) -> None:
    items = api.all_pages(KB)
    now = _us(env.control.clock()["now"])
    for item in items:
        expired = item["expirationDate"] is not None and _us(item["expirationDate"]) <= now
        assert item["expirationStatus"] == ("EXPIRED" if expired else "CURRENT")
    assert {"EXPIRED", "CURRENT"} <= {i["expirationStatus"] for i in items}


def _tag_pairs(items: list[dict[str, Any]]) -> dict[str, set[tuple[str, str]]]:
    return {i["id"]: {(t["categoryId"], t["tagId"]) for t in i["tags"]} for i in items}


def _pick_tags(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Two tags of one category and one of another, all in use."""
    used: dict[str, set[str]] = defaultdict(set)
    for item in items:
        for tag in item["tags"]:
            used[tag["categoryId"]].add(tag["tagId"])
    categories = sorted(used, key=lambda c: -len(used[c]))
    first, second = categories[0], categories[1]
    a, b = sorted(used[first])[:2]
    return [(first, a), (first, b), (second, sorted(used[second])[0])]


def test_kb_tags_or_within_a_category_and_across_categories(api: Api) -> None:
    everything = api.all_pages(KB)
    chosen = _pick_tags(everything)
    query = json.dumps([{"categoryId": c, "tagId": t} for c, t in chosen])
    found = [i["id"] for i in api.all_pages(KB, {"matchesTags": query})]
    tags = _tag_pairs(everything)
    expected = [
        i["id"]
        for i in everything
        if tags[i["id"]] & set(chosen[:2]) and chosen[2] in tags[i["id"]]
    ]
    assert found == expected and expected
    only_or = [
        i["id"]
        for i in api.all_pages(
            KB, {"matchesTags": json.dumps([{"categoryId": c, "tagId": t} for c, t in chosen[:2]])}
        )
    ]
    assert len(only_or) > len(found)


def test_answer_library_tags_are_ored(api: Api) -> None:
    everything = api.all_pages(ANSWERS)
    chosen = _pick_tags(everything)
    query = json.dumps([{"categoryId": c, "tagId": t} for c, t in chosen])
    found = [i["id"] for i in api.all_pages(ANSWERS, {"matchesTags": query})]
    tags = _tag_pairs(everything)
    assert found == [i["id"] for i in everything if tags[i["id"]] & set(chosen)]


def test_answer_library_search_covers_question_and_answer(api: Api) -> None:
    in_answer = api.all_pages(ANSWERS, {"q": "AES-256"})
    assert in_answer and all("aes-256" in i["answer"].lower() for i in in_answer)
    in_question = api.all_pages(ANSWERS, {"q": "penetration tests"})
    assert in_question and all("penetration tests" in i["question"].lower() for i in in_question)


@pytest.mark.parametrize("route", [KB, ANSWERS])
@pytest.mark.parametrize("raw", ["not json", '{"categoryId": "x"}', '[{"categoryId": "x"}]'])
def test_malformed_matches_tags_is_400(api: Api, route: str, raw: str) -> None:
    response = api.call(route, params={"matchesTags": raw})
    assert response.status_code == 400
    assert "matchesTags" in response.json()["message"]


def test_tag_categories_and_their_tags(env: Env, api: Api) -> None:
    categories = api.ok("GET /v1/customer-trust/tag-categories")["results"]
    assert [c["id"] for c in categories] == env.seed["tag_categories"]
    detail = api.ok(
        "GET /v1/customer-trust/tag-categories/{tagCategoryId}",
        {"tagCategoryId": categories[0]["id"]},
    )
    assert detail["category"] == categories[0]
    assert detail["tags"] and {t["category"] for t in detail["tags"]} == {categories[0]["id"]}
    missing = api.call(
        "GET /v1/customer-trust/tag-categories/{tagCategoryId}", {"tagCategoryId": "nope"}
    )
    assert missing.status_code == 404


TAG_CATEGORIES = "GET /v1/customer-trust/tag-categories"


@pytest.mark.parametrize(
    "contexts, names",
    [
        (["DOCUMENT_SHARING"], ["Framework", "Region"]),
        (["CONTROL_SHARING"], ["Framework", "Product"]),
        (["DOCUMENT_SHARING", "CONTROL_SHARING"], ["Framework", "Region", "Product"]),
        (["QUESTIONNAIRE"], ["Framework", "Region", "Product", "Customer tier"]),
    ],
)
def test_tag_categories_filter_by_any_of_the_product_contexts(
    api: Api, contexts: list[str], names: list[str]
) -> None:
    found = api.ok(TAG_CATEGORIES, params={"productContextIdsMatchesAny": contexts})["results"]
    assert [c["displayName"] for c in found] == names  # in the unfiltered list's order
    everything = api.ok(TAG_CATEGORIES)["results"]
    assert [c for c in everything if c["displayName"] in names] == found


@pytest.mark.parametrize(
    "value", ["TRUST_CENTER", "questionnaire", "", "QUESTIONNAIRE,CONTROL_SHARING"]
)
def test_unknown_product_context_is_400_naming_the_parameter(api: Api, value: str) -> None:
    params = [
        ("productContextIdsMatchesAny", "QUESTIONNAIRE"),
        ("productContextIdsMatchesAny", value),
    ]
    response = api.call(TAG_CATEGORIES, params=params)
    assert response.status_code == 400
    message = response.json()["message"]
    assert "productContextIdsMatchesAny" in message and repr(value) in message


def test_event_log_is_oldest_first_and_start_date_is_inclusive(api: Api) -> None:
    everything = api.all_pages(EVENTS)
    stamps = [_us(e["date"]) for e in everything]
    assert stamps == sorted(stamps)
    pivot = everything[len(everything) // 2]["date"]
    found = api.all_pages(EVENTS, {"startDate": pivot})
    assert [e["id"] for e in found] == [e["id"] for e in everything if _us(e["date"]) >= _us(pivot)]
    assert found[0]["date"] == pivot
    bad = api.call(EVENTS, params={"startDate": "yesterday"})
    assert bad.status_code == 400 and "startDate" in bad.json()["message"]


def test_event_log_cursor_survives_appends_for_incremental_readers(env: Env, api: Api) -> None:
    everything = api.all_pages(EVENTS)
    last = _cursor_of(api, EVENTS, len(everything) - 1)
    assert api.ok(EVENTS, params={"pageCursor": last})["results"]["data"] == []
    injected = env.control.inject("vendor_discovered", name="Brand New Vendor")
    page = api.ok(EVENTS, params={"pageCursor": last})["results"]
    assert [e["id"] for e in page["data"]] == [injected["event_log_id"]]
    assert page["pageInfo"]["hasNextPage"] is False


def test_default_data_set_is_big_enough(env: Env, api: Api) -> None:
    seed = env.seed
    assert len(seed["people"]) >= 500 and len(seed["groups"]) >= 5
    assert len(seed["discovered_vendors"]) >= 50 and len(seed["questionnaires"]) >= 50
    assert len(seed["accounts"]) >= 20 and len(seed["documents"]) >= 20
    assert seed["knowledge_base_resources"] >= 300 and seed["answer_library_entries"] >= 200
    assert seed["tag_categories"] and all(seed["tags"][c] for c in seed["tag_categories"])
    assert seed["package_vulnerability_resources"] and seed["user_security_training_resources"]
    assert len(api.all_pages(EVENTS)) == seed["event_logs"] >= 500
