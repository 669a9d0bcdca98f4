"""Bad-input catalogue: every bad input stops its flow with an error naming the problem, and
the sandbox sees no API call at all (no token request, no data call).

Where a parameter's type says the rule (a range, a choice), Prefect's parameter validation
answers: its message names the field and the limit but not the value (a deployment run is refused
earlier by the server, whose message has the value: test_parameter_schemas.py).

Each case runs the real flow against the session Prefect server and the sandbox, with otherwise
valid input: had validation let the bad value through, the flow would have called the service
and the counters would show it. The one case that must read before it can judge (an unknown
tag id needs the tag list) may read but must not write.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from flows.account_tags import update_account_tags
from flows.add_people_to_groups import add_people_to_groups
from flows.connector_resources import package_vulnerability_digest, security_training_report
from flows.document_links import attach_document_links
from flows.event_bridge import bridge_event_log
from flows.event_log_export import export_event_log
from flows.knowledge_base import knowledge_base_freshness
from flows.promote_vendors import promote_discovered_vendors
from flows.questionnaires import route_questionnaires
from flows.rerun import rerun_failed_items
from sandbox.runner import SandboxHandle

TAG_CATEGORY_READS = {"GET /v1/customer-trust/tag-categories"}

Seed = dict[str, Any]
Params = Callable[[Seed, Path], dict[str, Any]]


@dataclass(frozen=True)
class Case:
    id: str
    flow: Any
    params: Params
    expect: tuple[str, ...]
    env: dict[str, str | None] = field(default_factory=dict)
    reads_allowed: frozenset[str] = frozenset()


def _file(tmp: Path, name: str, content: str | bytes) -> str:
    path = tmp / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def _people(seed: Seed, **extra: Any) -> dict[str, Any]:
    """Valid add-people parameters (two people, one group), overridden by ``extra``."""
    return {"group_ids": seed["groups"][:1], "person_ids": seed["people"][:2], **extra}


def _link(seed: Seed, **fields: Any) -> dict[str, Any]:
    row = {"document_id": seed["documents"][0], "url": "https://evidence.example/a", "title": "A"}
    row.update(fields)
    return {"links": [{k: v for k, v in row.items() if v is not None}]}


CASES = [
    # ---- identifiers and lists ----------------------------------------------------------
    Case(
        "person-id-with-space",
        add_people_to_groups,
        lambda s, t: _people(s, person_ids=[s["people"][0], "p 1"]),
        ("person_ids[1]", "person_id", "'p 1'"),
    ),
    Case(
        "person-id-blank",
        add_people_to_groups,
        lambda s, t: _people(s, person_ids=[s["people"][0], "  "]),
        ("person_ids[1]", "person_id"),
    ),
    Case(
        "person-id-oversized",
        add_people_to_groups,
        lambda s, t: _people(s, person_ids=["a" * 300]),
        ("person_ids[0]", "person_id", "at most 256"),
    ),
    Case(
        "vendor-id-with-slash",
        promote_discovered_vendors,
        lambda s, t: {"discovered_vendor_ids": [s["discovered_vendors"][0], "../admin"]},
        ("discovered_vendor_ids[1]", "discovered_vendor_id", "'../admin'"),
    ),
    Case(
        "vendor-ids-empty-list",
        promote_discovered_vendors,
        lambda s, t: {"discovered_vendor_ids": []},
        ("no items", "discovered_vendor_ids"),
    ),
    Case(
        "people-without-groups",
        add_people_to_groups,
        lambda s, t: {"person_ids": s["people"][:2]},
        ("group_ids", "is required"),
    ),
    Case(
        "group-id-malformed",
        add_people_to_groups,
        lambda s, t: _people(s, group_ids=["grp?x=1"]),
        ("group_id", "'grp?x=1'"),
    ),
    Case(
        "concurrency-oversized",
        add_people_to_groups,
        lambda s, t: _people(s, concurrency=500),
        ("concurrency", "less than or equal to 32"),  # Prefect's check: omits the value
    ),
    # ---- files -------------------------------------------------------------------------
    Case(
        "file-not-utf8",
        add_people_to_groups,
        lambda s, t: _people(
            s, person_ids=None, input_file=_file(t, "p.csv", b"person_id\ncaf\xe9\n")
        ),
        ("input_file", "not UTF-8", "byte 13"),
    ),
    Case(
        "file-utf16-bom",
        add_people_to_groups,
        lambda s, t: _people(
            s, person_ids=None, input_file=_file(t, "p.csv", "person_id\nabc\n".encode("utf-16"))
        ),
        ("input_file", "not UTF-8", "byte 0"),
    ),
    Case(
        "file-bom-and-missing-column",  # the BOM is tolerated; the column name must be clean
        add_people_to_groups,
        lambda s, t: _people(
            s, person_ids=None, input_file=_file(t, "p.csv", "\ufeffid\nabc\n".encode())
        ),
        ("input_file", "has no column 'person_id'", "columns found: id"),
    ),
    Case(
        "file-unknown-column",
        add_people_to_groups,
        lambda s, t: _people(
            s, person_ids=None, input_file=_file(t, "p.csv", "person_id,grop_id\nabc,x\n")
        ),
        ("input_file", "unknown column", "'grop_id'"),
    ),
    Case(
        "file-header-only",
        add_people_to_groups,
        lambda s, t: _people(s, person_ids=None, input_file=_file(t, "p.csv", "person_id\n")),
        ("input_file", "has no items"),
    ),
    Case(
        "file-missing",
        promote_discovered_vendors,
        lambda s, t: {"input_file": str(t / "nope.csv")},
        ("input_file", "nope.csv", "does not exist"),
    ),
    Case(
        "file-wrong-suffix",
        promote_discovered_vendors,
        lambda s, t: {"input_file": _file(t, "ids.txt", "discovered_vendor_id\nabc\n")},
        ("input_file", "ids.txt", "must be a .csv or .json file"),
    ),
    Case(
        "file-json-malformed",
        promote_discovered_vendors,
        lambda s, t: {"input_file": _file(t, "ids.json", '["abc", ')},
        ("input_file", "not valid JSON", "line 1"),
    ),
    Case(
        "file-json-not-a-list",
        promote_discovered_vendors,
        lambda s, t: {"input_file": _file(t, "ids.json", '{"discovered_vendor_id": "abc"}')},
        ("input_file", "JSON list"),
    ),
    Case(
        "duplicate-rows-that-conflict",
        attach_document_links,
        lambda s, t: {
            "input_file": _file(
                t,
                "manifest.csv",
                "document_id,url,title\n"
                f"{s['documents'][0]},https://evidence.example/a,First\n"
                f"{s['documents'][0]},https://evidence.example/a,Second\n",
            )
        },
        ("appears twice with different values", "keep one", "https://evidence.example/a"),
    ),
    # ---- field values ------------------------------------------------------------------
    Case(
        "link-url-not-http",
        attach_document_links,
        lambda s, t: _link(s, url="ftp://evidence.example/a"),
        ("links[0]", "url", "ftp://evidence.example/a"),
    ),
    Case(
        "link-url-not-a-url",
        attach_document_links,
        lambda s, t: _link(s, url="evidence folder"),
        ("links[0]", "url", "evidence folder"),
    ),
    Case(
        "link-title-missing",
        attach_document_links,
        lambda s, t: _link(s, title=None),
        ("links[0]", "title", "is required"),
    ),
    Case(
        "link-effective-date-bad",
        attach_document_links,
        lambda s, t: _link(s, effective_date="last tuesday"),
        ("links[0]", "effective_date", "last tuesday"),
    ),
    Case(
        "link-unknown-field",
        attach_document_links,
        lambda s, t: _link(s, titel="typo"),
        ("links[0]", "titel", "not a field"),
    ),
    Case(
        "questionnaire-status-not-settable",
        route_questionnaires,
        lambda s, t: {"questionnaire_ids": s["questionnaires"][:1], "route": ["APPROVED"]},
        ("route", "'APPROVED' cannot be set", "separate approve step"),
    ),
    Case(
        "questionnaire-status-unknown",
        route_questionnaires,
        lambda s, t: {"questionnaire_ids": s["questionnaires"][:1], "route": ["FINISHED"]},
        ("route", "'FINISHED'", "settable"),
    ),
    Case(
        "questionnaire-due-date-bad",
        route_questionnaires,
        lambda s, t: {"questionnaire_ids": s["questionnaires"][:1], "due_date": "2025-13-45"},
        ("due_date", "month value is outside"),  # Prefect's check: omits the value
    ),
    Case(
        "questionnaire-owner-type-unknown",
        route_questionnaires,
        lambda s, t: {
            "questionnaire_ids": s["questionnaires"][:1],
            "owner_id": s["people"][0],
            "owner_type": "Robot",
        },
        ("owner_type", "'User' or 'Team'"),  # Prefect's check: omits the value
    ),
    Case(
        "questionnaire-tag-malformed",
        route_questionnaires,
        lambda s, t: {"questionnaire_ids": s["questionnaires"][:1], "tags": ["no-colon"]},
        ("tags", "no-colon", "category_id:tag_id"),
    ),
    Case(
        "account-unknown-field",
        update_account_tags,
        lambda s, t: {"accounts": [{"account_id": s["accounts"][0], "tagz": {}}]},
        ("tagz", "not a field"),
    ),
    Case(
        "account-email-domain-bad",
        update_account_tags,
        lambda s, t: {"accounts": [{"account_id": s["accounts"][0], "email_domain": "@@"}]},
        ("email_domain", "@@"),
    ),
    Case(
        "account-unknown-tag",
        update_account_tags,
        lambda s, t: {
            "accounts": [
                {"account_id": s["accounts"][0], "tags": {next(iter(s["tags"])): ["no-such-tag"]}}
            ]
        },
        ("no-such-tag",),
        reads_allowed=frozenset(TAG_CATEGORY_READS | {"GET /v1/customer-trust/tag-categories/*"}),
    ),
    Case(
        "rerun-id-not-a-uuid",
        rerun_failed_items,
        lambda s, t: {"flow_run_id": "yesterday's run"},
        ("flow_run_id", "valid UUID"),  # Prefect's check: omits the value
    ),
    # ---- read-flow parameters ----------------------------------------------------------
    Case(
        "kb-date-impossible",
        knowledge_base_freshness,
        lambda s, t: {"last_updated_after": "2025-02-30"},
        ("last_updated_after", "2025-02-30", "ISO 8601"),
    ),
    Case(
        "kb-type-unknown",
        knowledge_base_freshness,
        lambda s, t: {"types": ["PDF"]},
        ("types.0", "'FILE' or 'URL'"),  # Prefect's check: omits the value
    ),
    Case(
        "kb-tag-malformed",
        knowledge_base_freshness,
        lambda s, t: {"tags": ["security"]},
        ("tags", "security", "malformed tag"),
    ),
    Case(
        "kb-page-size-oversized",
        knowledge_base_freshness,
        lambda s, t: {"page_size": 1000},
        ("page_size", "less than or equal to 100"),  # Prefect's check: omits the value
    ),
    Case(
        "kb-source-unknown",
        knowledge_base_freshness,
        lambda s, t: {"sources": ["wiki"]},
        ("sources.0", "'resources' or 'answer_library'"),  # Prefect's check: omits the value
    ),
    Case(
        "export-start-date-bad",
        export_event_log,
        lambda s, t: {"output_dir": str(t / "out"), "start_date": "tomorrow"},
        ("start_date", "tomorrow", "ISO 8601"),
    ),
    Case(
        "export-output-dir-is-a-file",
        export_event_log,
        lambda s, t: {"output_dir": _file(t, "out.txt", "x")},
        ("output_dir", "out.txt", "not a directory"),
    ),
    Case(
        "bridge-max-pages-zero",
        bridge_event_log,
        lambda s, t: {"max_pages": 0},
        ("max_pages", "greater than or equal to 1"),  # Prefect's check: omits the value
    ),
    Case(
        "connector-resource-id-blank",
        package_vulnerability_digest,
        lambda s, t: {"resource_id": "   "},
        ("resource_id", "at least 1 character"),  # Prefect's check: omits the value
    ),
    Case(
        "connector-severity-out-of-range",
        package_vulnerability_digest,
        lambda s, t: {"resource_id": s["package_vulnerability_resources"][0], "min_severity": 11},
        ("min_severity", "less than or equal to 10"),  # Prefect's check: omits the value
    ),
    Case(
        "training-as-of-bad",
        security_training_report,
        lambda s, t: {"resource_id": s["user_security_training_resources"][0], "as_of": "soon"},
        ("as_of", "soon"),
    ),
    # ---- settings (a valid add-people run that must not start) --------------------------
    Case(
        "settings-missing-client-id",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_CLIENT_ID", "required"),
        env={"COMPLIANCE_CLIENT_ID": None},
    ),
    Case(
        "settings-missing-client-secret",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_CLIENT_SECRET", "required"),
        env={"COMPLIANCE_CLIENT_SECRET": None},
    ),
    Case(
        "settings-scope-wrong-for-app-type",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_SCOPES", "auditor-api.audit:read", "not allowed", "manage"),
        env={"COMPLIANCE_SCOPES": "service-api.all:write auditor-api.audit:read"},
    ),
    Case(
        "settings-base-url-not-http",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_BASE_URL", "not an http(s) URL"),
        env={"COMPLIANCE_BASE_URL": "ftp://127.0.0.1:1"},
    ),
    Case(
        "settings-encryption-key-bad",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_TOKEN_ENCRYPTION_KEY", "not a Fernet key"),
        env={"COMPLIANCE_TOKEN_ENCRYPTION_KEY": "hunter2"},
    ),
    Case(
        "settings-encryption-key-missing",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_TOKEN_ENCRYPTION_KEY", "not set"),
        env={"COMPLIANCE_TOKEN_ENCRYPTION_KEY": None},
    ),
    # ---- pasted rows and approval -------------------------------------------------------
    Case(
        "pasted-rows-unknown-column",
        add_people_to_groups,
        lambda s, t: {"group_ids": s["groups"][:1], "pasted_rows": "person,group\np-1,g-1\n"},
        ("pasted_rows", "pasted text (2 line(s))", "has no column 'person_id'"),
    ),
    Case(
        "pasted-rows-bad-id",
        add_people_to_groups,
        lambda s, t: {
            "group_ids": s["groups"][:1],
            "pasted_rows": f"person_id\n{s['people'][0]}\nbad id\n",
        },
        ("pasted row 3", "person_id", "'bad id'"),
    ),
    Case(
        "pasted-rows-bad-json",
        promote_discovered_vendors,
        lambda s, t: {"pasted_rows": '["dv-1", '},
        ("pasted_rows", "is not valid JSON"),
    ),
    Case(
        "approval-outside-a-deployment",
        add_people_to_groups,
        lambda s, t: _people(s, require_approval=True),
        ("require_approval=True", "needs a run of a deployment"),
    ),
    Case(
        "approval-deadline-zero",
        update_account_tags,
        lambda s, t: {
            "accounts": [{"account_id": "acc-1", "tags": {"c": ["t"]}}],
            "require_approval": True,
            "approval_deadline_hours": 0,
        },
        ("approval_deadline_hours", "greater than 0"),
    ),
    Case(
        "settings-gov-without-url",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_USE_GOV", "COMPLIANCE_GOV_BASE_URL"),
        env={"COMPLIANCE_USE_GOV": "true", "COMPLIANCE_GOV_BASE_URL": None},
    ),
    Case(
        "settings-application-type-unknown",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_APPLICATION_TYPE",),
        env={"COMPLIANCE_APPLICATION_TYPE": "superuser"},
    ),
    Case(
        "settings-public-app-without-source-id",
        add_people_to_groups,
        lambda s, t: _people(s),
        ("COMPLIANCE_SOURCE_ID", "integration_public"),
        env={"COMPLIANCE_APPLICATION_TYPE": "integration_public", "COMPLIANCE_SOURCE_ID": None},
    ),
]


def test_catalogue_is_large_and_named_uniquely() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)


@pytest.fixture(scope="module")
def seed(sandbox: SandboxHandle) -> Seed:
    return sandbox.control.seed()


@pytest.fixture
def env(flow_env: SandboxHandle) -> SandboxHandle:
    return flow_env


async def _error_of(flow: Any, parameters: dict[str, Any]) -> str:
    """The text of the error the run ended with (also when Prefect rejected the parameters).

    The flow is called without ``return_state``: Prefect raises the run's own exception, where
    the returned state could be the server's copy, which carries no result."""
    try:
        result = await flow(**parameters)
    except Exception as error:  # the run failed (or parameter validation raised before it)
        return f"{type(error).__name__}: {error}"
    raise AssertionError(f"expected a failed run, got {result!r}")


def _calls(stats: dict[str, Any]) -> dict[str, int]:
    return {route: n for route, n in stats["route_counts"].items() if n}


def _template(route: str) -> str:
    """``GET /v1/customer-trust/tag-categories/{tagCategoryId}`` -> ``.../*``"""
    head, _, tail = route.rpartition("/")
    return f"{head}/*" if tail.startswith("{") else route


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_bad_input_is_named_and_nothing_is_sent(
    case: Case,
    env: SandboxHandle,
    seed: Seed,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in case.env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    message = await _error_of(case.flow, case.params(seed, tmp_path))
    for expected in case.expect:
        assert expected in message, f"{expected!r} not in the error: {message}"
    stats = env.control.stats()
    calls = _calls(stats)
    writes = {r: n for r, n in calls.items() if not r.startswith(("GET ", "POST /oauth"))}
    assert writes == {}, f"writes were sent: {writes}"
    if case.reads_allowed:  # it had to read (and so to get a token) to judge the input
        allowed = case.reads_allowed | {"POST /oauth/token"}
        assert {_template(route) for route in calls} <= allowed, f"unexpected calls: {calls}"
    else:
        assert calls == {}, f"API calls were made: {calls}"
        assert stats["token_requests"] == {} and stats["requests_total"] == 0
