"""Bulk add-people: the Prefect flow vs a plain asyncio + httpx script on the same CSV of person
ids, 100 per call, 8 in flight, one token; fresh alternating child processes against one sandbox
(100 ms latency) and one Prefect server (``python -m bench --only add_people``).
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common

CHUNK = 100
CONCURRENCY = 8
LATENCY_MS = 100.0
ADD_PEOPLE_ROUTE = "POST /v1/groups/{groupId}/add-people"
#: the marginal cost ratio each backend must stay under (PostgreSQL: the scale-out issue's)
MARGINAL_TARGETS = {"sqlite": 1.15, "postgresql": 1.10}
BENCH_TOKEN_LIMIT = "bench-token-endpoint"


def read_people(path: str) -> list[str]:
    with open(path, newline="", encoding="utf-8-sig") as handle:
        return [row["person_id"].strip() for row in csv.DictReader(handle)]


async def plain_add_people(
    base_url: str, group: str, path: str, concurrency: int
) -> dict[str, Any]:
    """What a competent engineer writes without Prefect: one client, a semaphore, 100 per call."""
    import httpx

    people = read_people(path)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as http:
        grant = await http.post("/oauth/token", json=common.TOKEN_REQUEST)
        grant.raise_for_status()
        headers = {"Authorization": f"Bearer {grant.json()['access_token']}"}
        gate = asyncio.Semaphore(concurrency)
        outcomes = {"SUCCESS": 0, "ERROR": 0}

        async def send(chunk: list[str]) -> None:
            async with gate:
                response = await http.post(
                    f"/v1/groups/{group}/add-people",
                    json={"updates": [{"id": person} for person in chunk]},
                    headers=headers,
                )
            response.raise_for_status()
            for item in response.json()["results"]:
                outcomes["SUCCESS" if item["status"] == "SUCCESS" else "ERROR"] += 1

        chunks = [people[i : i + CHUNK] for i in range(0, len(people), CHUNK)]
        await asyncio.gather(*(send(chunk) for chunk in chunks))
    return {"succeeded": outcomes["SUCCESS"], "failed": outcomes["ERROR"]}


async def flow_add_people(group: str, path: str, concurrency: int) -> dict[str, Any]:
    from flows.add_people_to_groups import add_people_to_groups
    from write_engine.outcomes import ItemsFailed, Outcome

    state = await add_people_to_groups(
        group_ids=[group], input_file=path, concurrency=concurrency, return_state=True
    )
    summary = await state.result(raise_on_failure=False)
    if isinstance(summary, ItemsFailed):
        summary = summary.summary
    return {
        "state": state.type.value,
        "succeeded": summary.counts.get(Outcome.SUCCEEDED, 0),
        "failed": summary.failed,
    }


def child_main(mode: str, group: str, path: str, base_url: str) -> None:
    started = time.perf_counter()
    if mode == "plain":
        coro = plain_add_people(base_url, group, path, CONCURRENCY)
    else:
        coro = flow_add_people(group, path, CONCURRENCY)
    outcome = asyncio.run(coro)
    outcome.update(peak_rss_mb=common.peak_rss_mb(), inside_seconds=time.perf_counter() - started)
    common.emit_result(outcome)


def write_people_file(directory: Path, people: list[str]) -> str:
    path = directory / f"people-{len(people)}.csv"
    path.write_text("person_id\n" + "\n".join(people) + "\n", encoding="utf-8")
    return str(path)


def _measure(
    mode: str, size: int, people_file: str, group: str, sandbox: Any, api: str, cold: bool = False
) -> dict[str, Any]:
    """One timed child; ``cold``: without a bytecode cache (every module compiled)."""
    idle_wait = common.wait_for_prefect_idle(api)
    sandbox.control.reset()
    state_dir = tempfile.mkdtemp(prefix=f"bench-{mode}-")
    env = common.child_env(sandbox.url, api if mode == "flow" else None, state_dir)
    env["COMPLIANCE_TOKEN_RATE_LIMIT_NAME"] = BENCH_TOKEN_LIMIT
    if cold:  # an empty cache that is never written
        env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="bench-no-pycache-")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [sys.executable, "-m", "bench.add_people", "child", mode, group, people_file]
    command.append(sandbox.url)
    run = common.run_child(command, env, control=sandbox.control, data_route=ADD_PEOPLE_ROUTE)
    stats = sandbox.control.stats()
    adds = stats["group_add_counts"].get(group, {})
    if run.returncode != 0 or not run.result:
        raise RuntimeError(f"{mode} child failed ({run.returncode}):\n{run.stderr_tail}")
    first = [run.first_request_seconds, run.first_data_call_seconds]
    first_request, first_call = (None if s is None else round(s, 3) for s in first)
    return {
        "mode": mode,
        "size": size,
        "wall_seconds": round(run.wall_seconds, 3),
        "first_request_seconds": first_request,
        "first_call_seconds": first_call,
        "api_calls": stats["route_counts"].get(ADD_PEOPLE_ROUTE, 0),
        "expected_calls": math.ceil(size / CHUNK),
        "token_mints": stats["token_mints"].get(common.DEMO_MANAGE.client_id, 0),
        "people_added_once": sum(1 for n in adds.values() if n == 1),
        "people_added_twice_or_more": sum(1 for n in adds.values() if n > 1),
        "succeeded": run.result.get("succeeded"),
        "failed": run.result.get("failed"),
        "peak_rss_mb": run.result.get("peak_rss_mb"),
        "other_status": {k: v for k, v in stats["status_counts"].items() if k != "200"},
        "waited_for_prefect_idle_seconds": idle_wait,
    }


def summarize(runs: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Medians per (mode, size), the marginal ratio and the start-up costs."""

    def median(values: list[float]) -> float:
        return statistics.median(values) if values else 0.0

    def wall(mode: str, size: int, after_first_call: bool = False) -> float:
        """The median wall time; after the first call: the (noisy) start-up left out."""
        chosen = [r for r in runs if (r["mode"], r["size"]) == (mode, size) and r["wall_seconds"]]
        if after_first_call:
            chosen = [r for r in chosen if r["first_call_seconds"] is not None]
        start = "first_call_seconds" if after_first_call else None
        return median([r["wall_seconds"] - (r[start] if start else 0) for r in chosen])

    def startup(mode: str, key: str) -> float:
        return round(median([r[key] for r in runs if r["mode"] == mode and r[key] is not None]), 3)

    small, big = min(sizes), max(sizes)
    flow_delta, plain_delta = (wall(m, big) - wall(m, small) for m in ("flow", "plain"))
    calls_deltas = [wall(m, big, True) - wall(m, small, True) for m in ("flow", "plain")]
    fixed = {
        mode: {key: startup(mode, key) for key in ("first_request_seconds", "first_call_seconds")}
        for mode in ("plain", "flow")
    }
    extra = fixed["flow"]["first_call_seconds"] - fixed["plain"]["first_call_seconds"]
    return {
        "marginal_ratio": common.ratio(flow_delta, plain_delta),
        "marginal_ratio_after_first_call": common.ratio(*calls_deltas),
        "flow_marginal_seconds": round(flow_delta, 3),
        "plain_marginal_seconds": round(plain_delta, 3),
        "fixed_startup": fixed,
        "startup_extra_seconds": round(extra, 3),
    }


def run(sizes: list[int], *, repeats: int = 1, backend: str = "sqlite") -> dict[str, Any]:
    scale = max(1, math.ceil(max(sizes) / 500))
    workdir = Path(tempfile.mkdtemp(prefix="bench-add-people-"))
    runs: list[dict[str, Any]] = []
    common.use_bytecode_cache()
    with (
        common.sandbox_process(scale=scale, latency_ms=LATENCY_MS) as sandbox,
        common.prefect_server(backend) as server,
    ):
        api = server.api_url
        # the sandbox (and its token budget) is reset between runs: consecutive runs must not
        # wait out the production bucket's 15 s slot
        common.upsert_limit(BENCH_TOKEN_LIMIT, limit=5, per_second=5 / 60)
        seed = sandbox.control.seed()
        group, people = seed["groups"][0], seed["people"]
        if len(people) < max(sizes):
            raise RuntimeError(f"the sandbox has {len(people)} people; need {max(sizes)}")
        files = {size: write_people_file(workdir, people[:size]) for size in sizes}
        warm = write_people_file(workdir, people[:CHUNK])
        for mode in ("plain", "flow"):  # fills the bytecode cache and warms the server
            _measure(mode, CHUNK, warm, group, sandbox, api)
        cold = _measure("flow", CHUNK, warm, group, sandbox, api, cold=True)
        with common.ForeignCpu(common.database_name(server.options.database_url)) as foreign:
            for repeat in range(repeats):
                order = ("plain", "flow") if repeat % 2 == 0 else ("flow", "plain")
                for size in sizes:
                    for mode in order:
                        result = _measure(mode, size, files[size], group, sandbox, api)
                        print(json.dumps(result), file=sys.stderr, flush=True)
                        runs.append(result)
    config = {"sizes": sizes, "concurrency": CONCURRENCY, "latency_ms": LATENCY_MS}
    config |= {"repeats": repeats, "sandbox_scale": scale, "backend": backend}
    return {
        "config": config | {"marginal_target": MARGINAL_TARGETS[backend]},
        "runs": runs,
        "summary": summarize(runs, sizes),
        "foreign_cpu": foreign.report(),
        "no_bytecode_cache_flow_run": cold,
    }


if __name__ == "__main__":
    if sys.argv[1:2] != ["child"]:
        sys.exit("the benchmark: python -m bench --only add_people")
    child_main(*sys.argv[2:])
