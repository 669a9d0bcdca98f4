"""Time and memory of the read flows (``export``: the event-log export; ``freshness``: the
knowledge-base freshness report) against a plain httpx loop over the same pages (``httpx-events``,
``httpx-kb``), a fresh child process per case, each flow right after its baseline; a JSON line per
run. ``--huge``: the export and its baseline once over 1,000,000 entries (a 4 GB sandbox).

    uv run --no-sync python -m bench.streaming_reads [--small 20 --large 200 --huge 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench import common

BENCH_TOKEN_LIMIT = "bench-streaming-token-endpoint"
CASES = ("httpx-events", "export", "httpx-kb", "freshness")
#: the cases run over the huge sandbox (the export is the one read that covers a whole log)
HUGE_CASES = ("httpx-events", "export")
#: the targets: each flow within this multiple of its baseline at the large size, and the
#: export at the huge size with at most this much more peak RSS growth and this time ratio
RATIO_TARGET = 2.0
HUGE_RSS_GROWTH_MB = 30.0
HUGE_TIME_RATIO = 11.0


def rss_growth_mb(run: Callable[[], int]) -> tuple[int, float]:
    """``run()`` and the growth of this process's peak RSS meanwhile, sampled every 5 ms."""
    process, stop = psutil.Process(), threading.Event()
    gc.collect()
    start = peak = process.memory_info().rss

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, process.memory_info().rss)
            time.sleep(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        result = run()
    finally:
        stop.set()
        thread.join()
    return result, (max(peak, process.memory_info().rss) - start) / 2**20


async def _httpx_pages(base_url: str, path: str, limit_pages: int | None) -> int:
    """The baseline: follow endCursor with a bearer token, count items, keep nothing."""
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        grant = common.TOKEN_REQUEST | {"scope": "service-api.all:read"}
        token = (await http.post("/oauth/token", json=grant)).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        cursor: str | None = None
        items = pages = 0
        while limit_pages is None or pages < limit_pages:
            params = {"pageSize": 100} | ({"pageCursor": cursor} if cursor else {})
            response = await http.get(path, params=params, headers=headers)
            results = response.raise_for_status().json()["results"]
            items += len(results["data"])
            pages += 1
            cursor = results["pageInfo"]["endCursor"]
            if not results["pageInfo"]["hasNextPage"]:
                break
        return items


async def _run_case(case: str, base_url: str, size: int, workdir: Path) -> int:
    pages = size // 100
    if case == "httpx-events":
        return await _httpx_pages(base_url, "/v1/event-logs", pages)
    if case == "httpx-kb":
        resources = await _httpx_pages(base_url, "/v1/knowledge-base/resources", None)
        return resources + await _httpx_pages(base_url, "/v1/knowledge-base/answer-library", None)
    if case == "export":
        from flows.event_log_export import export_event_log

        out = str(workdir / "export")
        result = await export_event_log(output_dir=out, max_pages=pages)
        return result.written
    if case == "freshness":
        from flows.knowledge_base import knowledge_base_freshness

        report = await knowledge_base_freshness(emit_events=False)
        return sum(report.scanned.values())
    raise ValueError(case)


def child(case: str, base_url: str, size: int) -> None:
    """One measurement in this fresh process; prints a JSON line."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-streaming-"))
    if case in ("export", "freshness"):
        from flows.event_log_export import export_event_log

        # warm-up: imports, Prefect client, token, one small page of everything
        asyncio.run(export_event_log(output_dir=str(workdir / "warm"), max_pages=1, page_size=5))
    else:
        asyncio.run(_httpx_pages(base_url, "/v1/event-logs", 1))
    started = time.perf_counter()
    items, growth = rss_growth_mb(lambda: asyncio.run(_run_case(case, base_url, size, workdir)))
    elapsed = time.perf_counter() - started
    print(json.dumps({"items": items, "seconds": elapsed, "rss_growth_mb": growth}))


def _measure(case: str, sandbox: Any, size: int, env: dict[str, str]) -> dict[str, Any]:
    sandbox.control.reset()
    before = sandbox.control.stats()["route_counts"]
    command = [sys.executable, "-m", "bench.streaming_reads", "child", case, sandbox.url, str(size)]
    env = env | {"COMPLIANCE_BASE_URL": sandbox.url}
    output = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if output.returncode != 0:
        raise RuntimeError(f"{case} {size} failed:\n{output.stderr[-3000:]}")
    result = json.loads(output.stdout.strip().splitlines()[-1])
    after = sandbox.control.stats()["route_counts"]
    calls = sum(n - before.get(r, 0) for r, n in after.items() if r.startswith("GET /v1/"))
    return {"case": case, "size": size, **result, "api_calls": calls}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # --small, --large, --huge: sandbox scales (x 500 items; 0: none); --repeats: but huge once
    for name, default in (("--small", 20), ("--large", 200), ("--huge", 0), ("--repeats", 5)):
        parser.add_argument(name, type=int, default=default)
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    with common.prefect_server() as server:
        state = tempfile.mkdtemp(prefix="bench-streaming-state-")
        env = common.child_env("", server.api_url, state)  # the sandbox's URL: set per case
        env["COMPLIANCE_TOKEN_RATE_LIMIT_NAME"] = BENCH_TOKEN_LIMIT
        common.upsert_limit(BENCH_TOKEN_LIMIT, limit=100, per_second=10.0)
        sizes = ((args.small, CASES, args.repeats), (args.large, CASES, args.repeats))
        for scale, cases, repeats in (*sizes, (args.huge, HUGE_CASES, 1)):
            if not scale:
                continue
            # one sandbox at a time: the huge one is big
            with common.sandbox_process(scale=scale) as sandbox:
                for _ in range(repeats):  # each flow right after its baseline: same conditions
                    for case in cases:
                        rows.append(_measure(case, sandbox, scale * 500, env))
                        print(json.dumps(rows[-1]), flush=True)
    from bench.report import aggregate, markdown, streaming_rows

    print("\n".join(markdown(aggregate([streaming_rows({"rows": rows})]))))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
