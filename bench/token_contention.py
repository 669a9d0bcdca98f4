"""Token contention: P processes x R concurrent flow runs asking for the token at once, per
backend the shared broker once per token store, then once a naive client (a mint per process and
per 401, no Prefect); a JSON line per row. ``spawn`` and ``child_env`` serve tests/runtime too.

    uv run --no-sync python -m bench.token_contention --processes 8 --runs 5
        [--backends sqlite postgresql] [--stores local prefect]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

import httpx

from sandbox.apps import DEMO_MANAGE

DATA_ROUTE = "/v1/knowledge-base/resources"
CALLS_PER_RUN = 3


#: while a probe run calls the token task: the durations of its broker ``get_token`` calls
_broker_calls = contextvars.ContextVar[list[float] | None]("bench_broker_calls", default=None)


def _time_broker_calls() -> None:
    """Make ``TokenBroker.get_token`` record how long it took in this child process, for the
    calls made while ``_broker_calls`` holds a list (inside the probe's token task)."""
    from compliance_api.auth import AccessToken
    from compliance_api.tokens import TokenBroker

    original = TokenBroker.get_token

    async def get_token(self: TokenBroker) -> AccessToken:
        calls = _broker_calls.get()
        if calls is None:
            return await original(self)
        started = time.perf_counter()
        try:
            return await original(self)
        finally:
            calls.append(time.perf_counter() - started)

    TokenBroker.get_token = get_token  # type: ignore[method-assign]


async def _shared_child(runs: int) -> dict[str, Any]:
    from prefect import flow

    from compliance_api.models import KnowledgeBaseResource
    from runtime.connection import compliance_client
    from tasks.token import get_shared_access_token

    _time_broker_calls()
    waits: list[float] = []  # per run: time inside the broker's get_token (the token wait)
    task_calls: list[float] = []  # per run: the whole token task call, Prefect's part included
    fingerprints: set[str] = set()

    @flow(name="Token contention probe")
    async def probe() -> str:
        calls: list[float] = []
        reset = _broker_calls.set(calls)
        try:
            started = time.perf_counter()
            info = await get_shared_access_token()
            task_calls.append(time.perf_counter() - started)
        finally:
            _broker_calls.reset(reset)
        if calls:
            waits.append(sum(calls))  # a retried task asks again: its run waited for both
        fingerprints.add(info.fingerprint)
        async with compliance_client() as client:
            for _ in range(CALLS_PER_RUN):
                await client.list_page(KnowledgeBaseResource, page_size=1)
        return info.fingerprint

    async def one() -> str | None:
        """None when the run ended Completed, else why not (a lost run)."""
        try:
            state = await probe(return_state=True)
        except Exception as error:  # the engine itself gave up (e.g. the server refused)
            return f"{type(error).__name__}: {error}"[:300]
        return None if state.is_completed() else f"{state.type.value}: {state.message}"[:300]

    started = time.perf_counter()
    outcomes = await asyncio.gather(*(one() for _ in range(runs)))
    lost = [outcome for outcome in outcomes if outcome is not None]
    report = {"fingerprints": sorted(fingerprints), "waits": waits, "task_calls": task_calls}
    report |= {"failures": 0, "runs": runs, "lost": len(lost), "lost_reasons": lost[:5]}
    return report | {"elapsed_seconds": time.perf_counter() - started}


async def _naive_child(runs: int) -> dict[str, Any]:
    """Mint per process, re-mint on every 401, give up on 429: the common public client."""
    from bench.common import TOKEN_REQUEST

    base = os.environ["COMPLIANCE_BASE_URL"]
    waits: list[float] = []
    failures = 0
    token: dict[str, str] = {}
    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:

        async def mint() -> None:
            started = time.perf_counter()
            response = await http.post("/oauth/token", json=TOKEN_REQUEST)
            if response.status_code == 200:  # a 429 is treated as fatal, as such clients do
                token["value"] = response.json()["access_token"]
            waits.append(time.perf_counter() - started)

        async def run() -> None:
            nonlocal failures
            if "value" not in token:
                await mint()
            for _ in range(CALLS_PER_RUN):
                for _attempt in range(3):
                    headers = {"Authorization": f"Bearer {token.get('value', 'none')}"}
                    response = await http.get(DATA_ROUTE, params={"pageSize": 1}, headers=headers)
                    if response.status_code != 401:
                        break
                    await mint()
                else:
                    failures += 1

        await mint()
        await asyncio.gather(*(run() for _ in range(runs)))
    report = {"fingerprints": [], "waits": waits, "failures": failures, "runs": runs, "lost": 0}
    return report | {"elapsed_seconds": time.perf_counter() - started}


def launch(mode: str, processes: int, runs: int) -> None:
    """Import once (what a worker's flow-run process has imported before its flow starts), then
    fork ``processes`` children, each with its own broker and event loop."""
    if mode == "shared":
        import prefect.flow_engine  # noqa: F401 - warm the imports for the children
        import prefect.task_engine  # noqa: F401
        import prefect.utilities.visualization  # noqa: F401
        import pydantic.v1  # noqa: F401

        import runtime.connection  # noqa: F401
        import tasks.token  # noqa: F401
    assert threading.active_count() == 1, "fork only from a single-threaded process"
    readers = []
    for _ in range(processes):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            code = 0
            try:
                child = _shared_child(runs) if mode == "shared" else _naive_child(runs)
                report: dict[str, Any] = asyncio.run(child)
            except BaseException as exc:  # reported to the launcher, which fails loudly
                report, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
            with os.fdopen(write_end, "w") as out:
                out.write(json.dumps(report))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        os.close(write_end)
        readers.append((pid, read_end))
    reports = []
    for pid, read_end in readers:
        with os.fdopen(read_end) as pipe:
            reports.append(json.loads(pipe.read() or '{"error": "no report"}'))
        os.waitpid(pid, 0)
    print(json.dumps(reports))


def spawn(
    mode: str, processes: int, runs: int, env: dict[str, str], *, tolerate_errors: bool = False
) -> list[dict[str, Any]]:
    """Run ``processes`` children at once; their reports with the captured output. A failed
    child raises, unless ``tolerate_errors``: then all its runs count as lost."""
    command = [sys.executable, "-m", "bench.token_contention", "launch", mode, str(processes)]
    command.append(str(runs))
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0 and not tolerate_errors:
        failure = f"{mode} launcher failed ({result.returncode})"
        raise RuntimeError(f"{failure}:\n{result.stderr[-3000:]}")
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"{mode} launcher printed no report:\n{result.stderr[-3000:]}")
    reports: list[dict[str, Any]] = json.loads(lines[-1])
    errors = [report["error"] for report in reports if "error" in report]
    if errors and not tolerate_errors:
        raise RuntimeError(f"{mode} children failed: {errors}\n{result.stderr[-3000:]}")
    for report in reports:
        if "error" in report:  # all its runs lost
            report |= {"fingerprints": [], "waits": [], "task_calls": [], "failures": 0}
            report |= {"runs": runs, "lost": runs, "lost_reasons": [report["error"]]}
        report["stdout"], report["stderr"] = result.stdout, result.stderr
    return reports


@contextlib.contextmanager
def token_calls_sampled(stats: Any) -> Iterator[list[tuple[float, int]]]:
    """(time, token requests so far) from the sandbox every 0.25 s while the block runs."""
    samples: list[tuple[float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            count = stats()["token_requests"].get(DEMO_MANAGE.client_id, 0)
            samples.append((time.monotonic(), int(count)))
            stop.wait(0.25)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join()


def busiest_window(samples: list[tuple[float, int]], seconds: float = 60.0) -> int:
    """The most token requests in any ``seconds`` of ``samples``."""
    best = 0
    for start, base in samples:
        inside = [count for moment, count in samples if 0 <= moment - start <= seconds]
        best = max(best, max(inside) - base)
    return best if len(samples) > 1 else 0


def summarize(
    mode: str,
    reports: list[dict[str, Any]],
    stats: dict[str, Any],
    window: int,
    *,
    wall_seconds: float | None = None,
    backend: str | None = None,
    store: str | None = None,
) -> dict[str, Any]:
    waits = [wait for report in reports for wait in report["waits"]]
    task_calls = [call for report in reports for call in report.get("task_calls") or []]
    runs = sum(report.get("runs", 0) for report in reports)
    reasons = [reason for report in reports for reason in report.get("lost_reasons", [])]
    return {
        "mode": mode,
        "backend": backend,
        "store": store,
        "runs": runs,
        "lost": sum(report.get("lost", 0) for report in reports),
        "wall_seconds": None if wall_seconds is None else round(wall_seconds, 1),
        "mints": stats["token_mints"].get(DEMO_MANAGE.client_id, 0),
        "token_calls": stats["token_requests"].get(DEMO_MANAGE.client_id, 0),
        "401s": stats["unauthorized"],
        "429s": stats["status_counts"].get("429", 0),
        "max_token_calls_per_60s": window,
        "failed_calls": sum(report["failures"] for report in reports),
        # the token wait: inside the broker's get_token (see the module's docstring)
        **_times("wait", waits),
        "waits_over_1s": sum(1 for wait in waits if wait > 1.0),
        # the whole token task call: the token wait plus Prefect's task-run machinery
        **_times("task_call", task_calls),
        "task_calls_over_1s": sum(1 for call in task_calls if call > 1.0),
        "lost_reasons": reasons[:5],
    }


def _times(name: str, seconds: list[float]) -> dict[str, float | None]:
    """``{name}_p50_ms``, ``{name}_p99_ms`` and ``{name}_max_ms`` (None without values)."""
    ordered = sorted(seconds)
    if not ordered:
        return dict.fromkeys((f"{name}_p50_ms", f"{name}_p99_ms", f"{name}_max_ms"))
    p99 = ordered[round(0.99 * (len(ordered) - 1))]  # nearest rank
    values = {"p50": statistics.median(ordered), "p99": p99, "max": ordered[-1]}
    return {f"{name}_{stat}_ms": round(value * 1000, 1) for stat, value in values.items()}


def child_env(sandbox_url: str, state_dir: str, fernet_key: str) -> dict[str, str]:
    from bench.common import prefect_client_env
    from sandbox.launch import demo_environment

    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPLIANCE_")}
    env |= prefect_client_env()  # PREFECT_API_URL and the server's auth string
    return env | demo_environment(sandbox_url, state_dir=state_dir, encryption_key=fernet_key)


def measure(
    mode: str, processes: int, runs: int, sandbox: Any, backend: str | None, store: str | None
) -> dict[str, Any]:
    """One row: the sandbox reset, ``processes`` children with ``runs`` flow runs each."""
    from cryptography.fernet import Fernet

    control = sandbox.control
    control.reset()
    state_dir = tempfile.mkdtemp(prefix="bench-token-")
    env = child_env(sandbox.url, state_dir, Fernet.generate_key().decode())
    env["PREFECT_HOME"] = os.path.join(state_dir, "prefect-home")
    if store is not None:
        env["COMPLIANCE_TOKEN_STORE"] = store
    if mode == "shared":
        # the production bucket (1 slot, 1 more every 15 s), new for each row: a row never
        # waits for the slot the row before it took (the sandbox is reset, so each row mints)
        import uuid

        from deployments.bootstrap import ensure_token_rate_limit

        limit = f"bench-token-endpoint-{uuid.uuid4().hex[:8]}"
        asyncio.run(ensure_token_rate_limit(limit))
        env["COMPLIANCE_TOKEN_RATE_LIMIT_NAME"] = limit
    with token_calls_sampled(control.stats) as samples:
        started = time.perf_counter()
        reports = spawn(mode, processes, runs, env, tolerate_errors=True)
        wall = time.perf_counter() - started
    window = busiest_window(samples)
    return summarize(
        mode, reports, control.stats(), window, wall_seconds=wall, backend=backend, store=store
    )


def main(argv: list[str] | None = None) -> None:
    from bench.common import BACKENDS, prefect_server, use_bytecode_cache
    from sandbox.runner import run_sandbox_in_thread

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    stores = ("local", "prefect")  # COMPLIANCE_TOKEN_STORE of the shared runs
    parser.add_argument("--stores", nargs="+", choices=stores, default=["local"])
    args = parser.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    use_bytecode_cache()  # as `make bench` does: no process compiles Prefect from source
    total = args.processes * args.runs
    print(f"{args.processes} processes x {args.runs} concurrent runs x {CALLS_PER_RUN} calls")
    with run_sandbox_in_thread() as sandbox:
        for backend in args.backends:
            done: list[str] = []
            try:
                with prefect_server(backend):
                    for store in args.stores:
                        row = measure("shared", args.processes, args.runs, sandbox, backend, store)
                        print(json.dumps(row), flush=True)
                        done.append(store)
            except Exception:  # this backend's failure is a result; the other still runs
                failure = {"mode": "shared", "backend": backend, "runs": total, "lost": total}
                failure["error"] = traceback.format_exc()[-1500:]
                for store in (store for store in args.stores if store not in done):
                    print(json.dumps(failure | {"store": store}), flush=True)
        # the naive client never talks to Prefect: once, whatever the backends
        naive = measure("naive", args.processes, args.runs, sandbox, None, None)
        print(json.dumps(naive), flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "launch":
        launch(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
