"""``make bench``: every benchmark against its plain baseline, in the same run; each run is
appended to bench/runs.json and bench/RESULTS.md generated from it (bench/report.py).

PostgreSQL: the machine's (PGHOST, PGPORT, PGUSER, PGPASSWORD; default postgres@127.0.0.1:5432),
a fresh database per benchmark; Redis: the machine's (REDIS_URL), an empty numbered database.
``--quick``: small sizes, a smoke test, recorded as quick.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import add_people, burst, demo_cold_start, report
from bench.common import BACKENDS, REPO, machine, use_bytecode_cache

BENCHMARKS = ("add_people", "token_contention", "streaming_reads", "demo_cold_start", "burst")
#: one repeat can move the marginal ratio by 0.05 either side of its target (docs/performance.md)
ADD_PEOPLE_REPEATS = 5


def _module(name: str, args: list[str], timeout: float) -> dict[str, Any]:
    """A benchmark run as its own process; the JSON lines it prints are its rows."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPLIANCE_")}
    started = time.perf_counter()
    command = [sys.executable, "-m", f"bench.{name}", *args]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    lines = [line.strip() for line in done.stdout.splitlines()]
    rows = [json.loads(line) for line in lines if line.startswith("{") and line.endswith("}")]
    return {
        "command": f"python -m bench.{name} {' '.join(args)}".strip(),
        "returncode": done.returncode,
        "rows": rows,
        "stderr": done.stderr[-3000:] if done.returncode else "",
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


def bench_add_people(quick: bool, repeats: int | None) -> dict[str, Any]:
    """The same benchmark with the Prefect server on each backend, one after the other."""
    sizes = [1_000, 10_000] if quick else [10_000, 100_000]
    backends: dict[str, Any] = {}
    for backend in BACKENDS:
        print(f"bench: add_people on {backend} ...", file=sys.stderr, flush=True)
        try:
            runs = repeats or (1 if quick else ADD_PEOPLE_REPEATS)
            backends[backend] = add_people.run(sizes, repeats=runs, backend=backend)
        except Exception:  # one backend's failure is a result; the other still runs
            backends[backend] = {"error": traceback.format_exc()}
    return {"backends": backends}


def bench_token_contention(quick: bool, repeats: int | None) -> dict[str, Any]:
    size = ["--processes", "3", "--runs", "2"] if quick else ["--processes", "8", "--runs", "5"]
    args = [*size, "--backends", *BACKENDS, "--stores", "local", "prefect"]
    return _module("token_contention", args, timeout=3600)


def bench_streaming_reads(quick: bool, repeats: int | None) -> dict[str, Any]:
    args = ["--small", "2", "--large", "20", "--repeats", "1"]
    if not quick:
        args = ["--small", "20", "--large", "200", "--huge", "2000"]
        args += ["--repeats", str(repeats)] if repeats else []
    return _module("streaming_reads", args, timeout=1800)


def bench_demo_cold_start(quick: bool, repeats: int | None) -> dict[str, Any]:
    return demo_cold_start.run(repeats=1 if quick else repeats or 1)


def bench_burst(quick: bool, repeats: int | None) -> dict[str, Any]:
    return burst.run(sizes=[min(burst.SIZES)] if quick else list(burst.SIZES))


#: per benchmark, ``bench_NAME(quick, repeats)``
RUNNERS: dict[str, Callable[[bool, int | None], dict[str, Any]]] = {
    name: globals()[f"bench_{name}"] for name in BENCHMARKS
}


def _commit() -> str | None:
    """The checked-out commit (the code measured, bar uncommitted changes)."""
    command = ["git", "rev-parse", "--short=12", "HEAD"]
    with contextlib.suppress(OSError):
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        return done.stdout.strip() or None
    return None


def _failed(result: dict[str, Any]) -> bool:
    sides = list((result.get("backends") or {}).values())
    return "error" in result or bool(result.get("returncode")) or any("error" in s for s in sides)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    repeats = f"repeats of add_people (default {ADD_PEOPLE_REPEATS}), streaming_reads and demo"
    parser.add_argument("--repeats", type=int, default=None, help=repeats)
    parser.add_argument("--runs", default=str(REPO / "bench" / "runs.json"), help="appended to")
    parser.add_argument("--output", default=str(REPO / "bench" / "RESULTS.md"))
    parser.add_argument("--render-only", action="store_true", help="only rewrite --output")
    args = parser.parse_args(argv)
    runs, output = Path(args.runs), Path(args.output)
    failed = []
    if not args.render_only:
        use_bytecode_cache()  # every child and server process: see bench.common
    for name in [] if args.render_only else args.only:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        before = machine()
        try:
            result = RUNNERS[name](args.quick, args.repeats)
        except Exception:
            result = {"error": traceback.format_exc()}
        entry = {"benchmark": name, "date": machine()["date"], "commit": _commit()}
        entry |= {"quick": args.quick, "machine": before, "result": result}
        entry["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        report.record(runs, entry)
        report.write(runs, output)
        failed += [name] if _failed(result) else []
    report.write(runs, output)
    print(f"bench: wrote {output}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
