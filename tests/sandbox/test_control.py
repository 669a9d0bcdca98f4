"""The /_sandbox/ control API: faults, outages, revocation, clock, events, stats and reset."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from deployments.stack import free_port
from sandbox.apps import (
    DEMO_GOV_MANAGE,
    DEMO_MANAGE,
    DEMO_MANAGE_BASIC,
    DEMO_PUBLIC,
    DEMO_PUBLIC_REDIRECT_URI,
)
from sandbox.control import SandboxControlError
from sandbox.data import Dataset
from sandbox.launch import HEALTH_PATH, sandbox_command
from sandbox.runner import run_sandbox_in_thread
from tests.fixtures.sandbox_api import MANAGE, Api, Env

EVENTS = "GET /v1/event-logs"
ADD_PEOPLE = "POST /v1/groups/{groupId}/add-people"
KB = "GET /v1/knowledge-base/resources"


def _add(api: Api, env: Env, person: str) -> int:
    group = {"groupId": env.seed["groups"][0]}
    return api.call(ADD_PEOPLE, group, json={"updates": [{"id": person}]}).status_code


def test_fault_with_count_fails_exactly_the_next_calls_of_that_route(env: Env, api: Api) -> None:
    env.control.set_fault(ADD_PEOPLE, status=503, count=2)
    person = env.seed["people"][0]
    assert [_add(api, env, person) for _ in range(3)] == [503, 503, 200]
    assert api.call(EVENTS).status_code == 200  # other routes unaffected
    stats = env.stats()
    assert stats["group_add_counts"] == {env.seed["groups"][0]: {person: 1}}
    assert stats["faults_injected"] == 2
    assert stats["status_counts"]["503"] == 2


def test_error_rate_applies_to_every_data_route_with_star(env: Env, api: Api) -> None:
    env.control.set_fault("*", error_rate=1.0, status=500)
    failed = api.call(EVENTS)
    assert failed.status_code == 500 and failed.json()["error"] == "service_unavailable"
    api.token = env.oauth.token()  # the token endpoint is not a data route
    env.control.clear_faults()
    assert api.call(EVENTS).status_code == 200


def test_partial_error_rate_fails_some_calls(env: Env, api: Api) -> None:
    env.control.set_fault(EVENTS, error_rate=0.5, status=502)
    statuses = [api.call(EVENTS).status_code for _ in range(40)]
    assert 0 < statuses.count(502) < 40 and statuses.count(200) + statuses.count(502) == 40


def test_latency_fault_is_recorded_and_calls_still_succeed(env: Env, api: Api) -> None:
    rule = env.control.set_fault(KB, latency_ms=5, jitter_ms=5)
    assert rule["latency_ms"] == 5 and rule["jitter_ms"] == 5
    assert api.call(KB).status_code == 200
    assert env.control.faults()["rules"][0]["route"] == KB


@pytest.mark.parametrize(
    "rule",
    [
        {"route": "GET /v1/nothing"},
        {"route": "*", "error_rate": 2},
        {"route": "*", "status": 200},
        {"route": "*", "bogus": 1},
    ],
)
def test_invalid_fault_rules_are_rejected(env: Env, rule: dict[str, object]) -> None:
    response = env.http.post("/_sandbox/faults", json=rule)
    assert response.status_code == 400


def test_token_outage_by_count_and_by_seconds(env: Env) -> None:
    env.control.token_outage(status=503, count=2)
    statuses = [env.oauth.client_credentials().status_code for _ in range(3)]
    assert statuses == [503, 503, 200]
    env.control.token_outage(status=502, seconds=10)
    outage = env.oauth.client_credentials()
    assert outage.status_code == 502 and outage.json()["error"] == "temporarily_unavailable"
    env.control.advance_clock(10)
    assert env.oauth.client_credentials().status_code == 200
    # Outage failures happen before the limiter: 5 requests, but only 2 took budget.
    assert env.stats()["token_requests"][DEMO_MANAGE.client_id] == 5
    assert env.stats()["token_mints"][DEMO_MANAGE.client_id] == 2
    for _ in range(3):
        assert env.oauth.client_credentials().status_code == 200


def test_forced_revocation_acts_like_another_process_minting(env: Env, api: Api) -> None:
    assert api.call(EVENTS).status_code == 200
    assert env.control.revoke(MANAGE[0]) is True
    revoked = api.call(EVENTS)
    assert revoked.status_code == 401 and "superseded" in revoked.json()["message"]
    assert env.control.revoke(MANAGE[0]) is False
    with pytest.raises(SandboxControlError):
        env.control.revoke("no-such-app")


def test_clock_advance_moves_sandbox_time_forward_only(env: Env) -> None:
    before = env.control.clock()
    after = env.control.advance_clock(3600)
    assert after["offset_seconds"] == before["offset_seconds"] + 3600
    assert env.http.post("/_sandbox/clock/advance", json={"seconds": -1}).status_code == 400


def test_injected_domain_events_land_in_the_event_log(env: Env, api: Api) -> None:
    start = env.control.clock()["now"]
    vendor = env.control.inject("vendor_discovered", name="Shadow IT Co")
    ready = env.control.inject("questionnaire_ready_for_review")
    existing = env.control.inject(
        "questionnaire_ready_for_review", questionnaire_id=env.seed["questionnaires"][2]
    )
    person = env.control.inject(
        "person_joined", display_name="Nova Lee", group_id=env.seed["groups"][0]
    )
    expiring = env.control.inject("kb_item_expiring", days=3)
    events = api.all_pages(EVENTS, {"startDate": start})
    assert [(e["action"], e["targets"][0]["id"], e["id"]) for e in events] == [
        ("VENDOR_DISCOVERED", vendor["id"], vendor["event_log_id"]),
        ("QUESTIONNAIRE_READY_FOR_REVIEW", ready["id"], ready["event_log_id"]),
        ("QUESTIONNAIRE_READY_FOR_REVIEW", existing["id"], existing["event_log_id"]),
        ("PERSON_JOINED", person["id"], person["event_log_id"]),
        ("KB_ITEM_EXPIRING", expiring["id"], expiring["event_log_id"]),
    ]
    # The injected things are real: promote, add to a group, review, filter by expiry.
    assert (
        api.ok(
            "POST /v1/discovered-vendors/{discoveredVendorId}/add-to-managed",
            {"discoveredVendorId": vendor["id"]},
        )["name"]
        == "Shadow IT Co"
    )
    assert _add(api, env, person["id"]) == 200
    approved = api.ok(
        "POST /v1/customer-trust/questionnaires/{questionnaireId}/approve",
        {"questionnaireId": ready["id"]},
        json={},
    )
    assert [e["status"] for e in approved["statusLog"]] == ["APPROVED", "READY_FOR_REVIEW"]
    soon = api.all_pages(KB, {"expiresBefore": expiring["expirationDate"], "expiresAfter": start})
    assert expiring["id"] in [item["id"] for item in soon]


def test_unknown_event_kind_is_rejected(env: Env) -> None:
    assert env.http.post("/_sandbox/events", json={"kind": "meteor_strike"}).status_code == 400


def test_stats_count_requests_by_route_template_and_status(env: Env, api: Api) -> None:
    group = env.seed["groups"][0]
    person = env.seed["people"][0]
    for _ in range(3):
        _add(api, env, person)
    api.call(EVENTS)
    api.call(EVENTS, token="bad")
    stats = env.stats()
    assert stats["route_counts"] == {
        "POST /oauth/token": 1,
        f"{ADD_PEOPLE}": 3,
        EVENTS: 2,
    }
    assert stats["status_counts"] == {"200": 5, "401": 1}
    assert stats["token_requests"] == {DEMO_MANAGE.client_id: 1}
    assert stats["token_mints"] == {DEMO_MANAGE.client_id: 1}
    assert stats["group_add_counts"] == {group: {person: 3}}
    assert stats["unauthorized"] == 1
    assert set(stats["write_counts"]) == {
        "add_to_managed",
        "document_link",
        "questionnaire_patch",
        "questionnaire_approve",
        "account_patch",
    }


def test_reset_restores_the_seeded_state(env: Env, api: Api) -> None:
    seed_before = env.control.seed()
    kb_before = api.all_pages(KB)
    env.control.inject("person_joined")
    env.control.inject("kb_item_expiring", resource_id=kb_before[0]["id"], days=1)
    _add(api, env, env.seed["people"][-1])
    env.control.set_fault("*", error_rate=1.0)
    env.control.rotate_secret(MANAGE[0])
    env.control.advance_clock(7200)
    env.control.reset()
    assert env.stats()["route_counts"] == {} and env.control.faults()["rules"] == []
    assert env.control.clock()["offset_seconds"] == 0
    assert api.call(EVENTS).status_code == 401  # tokens are gone
    api.token = env.oauth.token()  # the original secret works again and the budget is fresh
    assert env.control.seed() == seed_before
    assert api.all_pages(KB) == kb_before


def test_apps_lists_the_demo_applications_with_fake_credentials(env: Env) -> None:
    apps = {app["client_id"]: app for app in env.control.apps()}
    assert {app["type"] for app in apps.values()} == {
        "manage",
        "integration_private",
        "integration_public",
        "auditor",
    }
    assert apps[DEMO_MANAGE.client_id]["entitlements"] == ["QuestionnaireAutomationAdvanced"]
    assert apps[DEMO_MANAGE_BASIC.client_id]["entitlements"] == []
    assert apps[DEMO_GOV_MANAGE.client_id]["tier"] == "gov"
    assert apps[DEMO_PUBLIC.client_id]["redirect_uris"] == [DEMO_PUBLIC_REDIRECT_URI]
    assert all(app["client_secret"].endswith("-not-real") for app in apps.values())


def test_data_is_deterministic_per_seed_and_scales() -> None:
    first, again, other = Dataset(7, 1, 1.7e9), Dataset(7, 1, 1.7e9), Dataset(8, 1, 1.7e9)
    assert [p["id"] for p in first.people] == [p["id"] for p in again.people]
    assert [e["id"] for e in first.events] == [e["id"] for e in again.events]
    assert first.people[0]["id"] != other.people[0]["id"]
    big = Dataset(7, 200, 1.7e9)
    assert len(big.people) >= 100_000 and len(big.events) >= 100_000


def test_applications_file_replaces_the_demo_set(tmp_path: Path) -> None:
    apps = [
        {"client_id": "acme-manage", "client_secret": "s3", "type": "manage", "entitlements": []},
        {"client_id": "acme-gov", "client_secret": "s4", "type": "manage", "tier": "gov"},
    ]
    path = tmp_path / "apps.json"
    path.write_text(json.dumps(apps))
    with run_sandbox_in_thread(apps_file=path, token_ttl_seconds=60) as handle:
        grant = httpx.post(
            f"{handle.url}/oauth/token",
            json={
                "client_id": "acme-manage",
                "client_secret": "s3",
                "grant_type": "client_credentials",
                "scope": "service-api.all:read",
            },
        )
        assert grant.status_code == 200 and grant.json()["expires_in"] == 60
        assert [a["client_id"] for a in handle.control.apps()] == ["acme-manage", "acme-gov"]


def test_console_script_serves_both_tiers_and_stops_on_sigint() -> None:
    port, gov_port = free_port(), free_port()
    process = subprocess.Popen(
        [*sandbox_command(port, gov_port), "--seed", "3"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                tiers = [
                    httpx.get(f"http://127.0.0.1:{p}{HEALTH_PATH}").json()["tier"]
                    for p in (port, gov_port)
                ]
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.1)
        assert tiers == ["commercial", "gov"]
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_start_options_set_faults_that_reset_keeps() -> None:
    with run_sandbox_in_thread(
        error_rate=1.0, error_status=502, latency_ms=1, jitter_ms=1
    ) as handle:
        token = httpx.post(
            f"{handle.url}/oauth/token",
            json={
                "client_id": MANAGE[0],
                "client_secret": MANAGE[1],
                "grant_type": "client_credentials",
                "scope": "service-api.all:read",
            },
        ).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{handle.url}/v1/event-logs", headers=headers).status_code == 502
        handle.control.clear_faults()
        assert httpx.get(f"{handle.url}/v1/event-logs", headers=headers).status_code == 200
        handle.control.reset()
        [rule] = handle.control.faults()["rules"]
        assert rule == {
            "route": "*",
            "error_rate": 1.0,
            "status": 502,
            "count": None,
            "latency_ms": 1,
            "jitter_ms": 1,
        }
