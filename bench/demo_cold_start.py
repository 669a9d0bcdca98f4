"""Demo cold start: ``make demo`` from a fresh interpreter next to a plain httpx script that starts
the same sandbox and makes the demo's writes, and its start-up phases timed on their own."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from bench import common


async def _plain_calls(url: str, seed: dict[str, Any]) -> int:
    """Roughly the demo's writes: 4 promotions, 251 people x 2 groups, 3 account patches,
    3 questionnaires routed (2 patches each) and 2 approved, 3 document links."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        grant = await http.post("/oauth/token", json=common.TOKEN_REQUEST)
        headers = {"Authorization": f"Bearer {grant.json()['access_token']}"}
        requests: list[tuple[str, str, Any]] = []
        for vendor in seed["discovered_vendors"][:4]:
            requests.append(("POST", f"/v1/discovered-vendors/{vendor}/add-to-managed", None))
        people = seed["people"][:251]
        for group in seed["groups"][:2]:
            for start in range(0, len(people), 100):
                body = {"updates": [{"id": p} for p in people[start : start + 100]]}
                requests.append(("POST", f"/v1/groups/{group}/add-people", body))
        category = next(iter(seed["tags"]))
        tags = {"tagsByCategory": [{"categoryId": category, "tagIds": seed["tags"][category][:2]}]}
        for account in seed["accounts"][:3]:
            requests.append(("PATCH", f"/v1/customer-trust/accounts/{account}", tags))
        for questionnaire in seed["questionnaires"][:3]:
            for status in ("IN_REVIEW", "READY_FOR_REVIEW"):
                path = f"/v1/customer-trust/questionnaires/{questionnaire}"
                requests.append(("PATCH", path, {"status": status}))
        for questionnaire in seed["questionnaires"][:2]:
            path = f"/v1/customer-trust/questionnaires/{questionnaire}/approve"
            requests.append(("POST", path, {}))
        for index, document in enumerate(seed["documents"][:3]):
            body = {"url": f"https://evidence.example/soc2/{index}", "title": f"SOC 2 {index}"}
            requests.append(("POST", f"/v1/documents/{document}/links", body))
        for method, path, body in requests:
            await http.request(method, path, json=body, headers=headers)
    return len(requests)


def plain_child() -> None:
    from sandbox.runner import run_sandbox_in_thread

    with run_sandbox_in_thread(seed=42) as sandbox:
        calls = asyncio.run(_plain_calls(sandbox.url, sandbox.control.seed()))
    common.emit_result({"calls": calls, "peak_rss_mb": common.peak_rss_mb()})


def phases_child() -> None:
    """Each start-up phase of the demo, timed on its own, in the demo's order."""
    timings: dict[str, float] = {}
    started = time.perf_counter()
    import prefect  # noqa: F401
    from prefect.testing.utilities import prefect_test_harness

    import flows.account_tags  # noqa: F401
    import flows.add_people_to_groups  # noqa: F401
    import flows.document_links  # noqa: F401
    import flows.promote_vendors  # noqa: F401
    import flows.questionnaires  # noqa: F401
    import flows.rerun  # noqa: F401
    from deployments.server_settings import apply_server_settings

    timings["import_prefect_and_flows"] = time.perf_counter() - started
    mark = time.perf_counter()
    from sandbox.runner import run_sandbox_in_thread

    with run_sandbox_in_thread(seed=42):
        timings["sandbox_start"] = time.perf_counter() - mark
        mark = time.perf_counter()
        apply_server_settings()  # as make demo's server
        with prefect_test_harness(server_startup_timeout=120):
            timings["prefect_server_start"] = time.perf_counter() - mark
            mark = time.perf_counter()
        timings["prefect_server_stop"] = time.perf_counter() - mark
    common.emit_result({key: round(value, 3) for key, value in timings.items()})


def _env() -> dict[str, str]:
    from deployments.auth import generate_auth_string

    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPLIANCE_", "PREFECT_"))}
    auth_string = generate_auth_string()  # as make demo's server: basic auth on
    env.update(PREFECT_SERVER_API_AUTH_STRING=auth_string, PREFECT_API_AUTH_STRING=auth_string)
    env.update(PREFECT_HOME=tempfile.mkdtemp(prefix="bench-demo-"), PYTHONPATH=str(common.REPO))
    env.update(PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_CLI_PROMPT="false")
    common.use_bytecode_cache(env)
    return env


def _child(name: str) -> common.ChildRun:
    child = common.run_child([sys.executable, "-m", "bench.demo_cold_start", name], _env())
    if child.returncode:
        raise RuntimeError(f"{name} child failed:\n{child.stderr_tail}")
    return child


def run(repeats: int = 1) -> dict[str, Any]:
    demo_walls, plain_walls, phases = [], [], []
    demo_ok = True
    for _ in range(repeats):
        demo = common.run_child([sys.executable, "-m", "deployments.demo"], _env(), timeout=900)
        demo_ok = demo_ok and demo.returncode == 0
        demo_walls.append(demo.wall_seconds)
        plain_walls.append(_child("plain").wall_seconds)
        phases.append(_child("phases").result)
    demo_wall = statistics.median(demo_walls)
    plain_wall = statistics.median(plain_walls)
    phase_medians = {key: round(statistics.median(p[key] for p in phases), 2) for key in phases[0]}
    start = ("import_prefect_and_flows", "sandbox_start", "prefect_server_start")
    start_up = sum(phase_medians[key] for key in start)
    return {
        "repeats": repeats,
        "demo_exit_ok": demo_ok,
        "demo_wall_seconds": round(demo_wall, 2),
        "plain_wall_seconds": round(plain_wall, 2),
        "demo_to_plain_ratio": common.ratio(demo_wall, plain_wall),
        "phases_seconds": phase_medians,
        "startup_share_of_demo": common.ratio(start_up, demo_wall),
    }


if __name__ == "__main__":
    children = {"plain": plain_child, "phases": phases_child}
    if sys.argv[1:2] not in (["plain"], ["phases"]):
        sys.exit("the benchmark: python -m bench --only demo_cold_start")
    children[sys.argv[1]]()
