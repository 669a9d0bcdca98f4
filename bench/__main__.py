"""``make bench``: every benchmark against its plain-httpx baseline; writes bench/RESULTS.md.

    uv run --no-sync python -m bench [--quick] [--only add_people token_contention ...]
        [--repeats N] [--profile] [--output bench/RESULTS.md]

1. add_people: the add-people flow vs a plain asyncio-httpx script (10,000 and 100,000 ids,
   100 ms sandbox latency, concurrency 8): marginal cost ratio, start-up cost, calls, mints, RSS;
   with the Prefect server on SQLite and on PostgreSQL.
2. token_contention: the shared token broker vs per-process minting (bench/token_contention.py),
   the shared broker on SQLite and on PostgreSQL, with the local and the Prefect token store.
3. streaming_reads: time and peak RSS growth of the read flows at 10,000 and 100,000 items, and
   of the export at 1,000,000, against a plain httpx loop (bench/streaming_reads.py).
4. demo_cold_start: ``make demo`` from a fresh interpreter vs a plain script doing its calls.
5. burst: bursts of 40 and 400 discovered vendors through the whole stack, on SQLite (1 worker),
   on PostgreSQL (3 workers) and on PostgreSQL + Redis as 2 API replicas and a services process
   (3 workers): one promotion run per burst, not per vendor (bench/burst.py).

RESULTS.md opens with SQLite vs PostgreSQL side by side (bench/compare.py): ratios and whether
each scale-out target is met. PostgreSQL: the machine's (PGHOST, PGPORT, PGUSER, PGPASSWORD;
default postgres@127.0.0.1:5432); each benchmark creates a fresh database and drops it after.
Redis (the replicas' burst): the machine's (REDIS_URL; default redis://127.0.0.1:6379), an empty
numbered database emptied after.

``--quick`` runs small sizes (a smoke test of the runner, minutes not tens of minutes: 1,000 and
10,000 ids once, 3 x 2 token runs, one burst of 40); its numbers are not the ones to quote. A full
run takes about half an hour on 2 cores. Ratios and counts only: absolute times depend on the
machine and on what else runs on it (the load average is recorded next to every result).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import BACKEND_LABELS, BACKENDS, REPO, machine, use_bytecode_cache
from bench.compare import comparison_md, measures_broker_wait, task_call_ms, token_wait_ms

BENCHMARKS = ("add_people", "token_contention", "streaming_reads", "demo_cold_start", "burst")


def _json_lines(text: str) -> list[dict[str, Any]]:
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _module(name: str, args: list[str], timeout: float) -> dict[str, Any]:
    """Another engineer's benchmark, run as its own process; its output kept verbatim."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPLIANCE_")}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return {
        "command": f"python -m bench.{name} {' '.join(args)}".strip(),
        "returncode": done.returncode,
        "rows": _json_lines(done.stdout),
        "stdout": _tail_lines(done.stdout, 6000),
        "stderr": done.stderr[-3000:] if done.returncode else "",
        "wall_seconds": round(time.perf_counter() - started, 1),
    }


def _tail_lines(text: str, limit: int) -> str:
    """The last ``limit`` characters of ``text``, from the start of a line."""
    if len(text) <= limit:
        return text
    return text[-limit:].split("\n", 1)[-1]


#: the marginal ratio is a difference of medians of wall times that vary by +-0.5 s from run to
#: run on a shared 2-core machine: a single repeat can move it by 0.05 either side of a 1.15 target
ADD_PEOPLE_REPEATS = 5


def bench_add_people(quick: bool, repeats: int | None, profile: bool) -> dict[str, Any]:
    """The same benchmark with the Prefect server on each backend, one after the other."""
    from bench import add_people

    sizes = [1_000, 10_000] if quick else [10_000, 100_000]
    repeats = repeats or (1 if quick else ADD_PEOPLE_REPEATS)
    backends: dict[str, Any] = {}
    for backend in BACKENDS:
        print(f"bench: add_people on {backend} ...", file=sys.stderr, flush=True)  # noqa: T201
        try:
            backends[backend] = add_people.run(
                sizes,
                concurrency=8,
                latency_ms=100.0,
                repeats=repeats,
                profile=profile,
                backend=backend,
            )
        except Exception:  # one backend's failure is a result; the other still runs
            backends[backend] = {"error": traceback.format_exc()}
    return {"backends": backends}


def bench_token_contention(quick: bool, repeats: int | None, profile: bool) -> dict[str, Any]:
    size = ["--processes", "3", "--runs", "2"] if quick else ["--processes", "8", "--runs", "5"]
    args = [*size, "--backends", *BACKENDS, "--stores", "local", "prefect"]
    return _module("token_contention", args, timeout=3600)


def bench_burst(quick: bool, repeats: int | None, profile: bool) -> dict[str, Any]:
    from bench import burst

    sizes = [min(burst.SIZES)] if quick else list(burst.SIZES)
    return burst.run(sizes=sizes, backends=list(burst.STACKS))


def bench_streaming_reads(quick: bool, repeats: int | None, profile: bool) -> dict[str, Any]:
    args = ["--small", "2", "--large", "20", "--repeats", "1"]
    if not quick:
        args = ["--small", "20", "--large", "200", "--huge", "2000"]
        if repeats:
            args += ["--repeats", str(repeats)]
    return _module("streaming_reads", args, timeout=1800)


def bench_demo_cold_start(quick: bool, repeats: int | None, profile: bool) -> dict[str, Any]:
    from bench import demo_cold_start

    return demo_cold_start.run(repeats=1 if quick else repeats or 1)


RUNNERS: dict[str, Callable[[bool, int | None, bool], dict[str, Any]]] = {
    "add_people": bench_add_people,
    "token_contention": bench_token_contention,
    "streaming_reads": bench_streaming_reads,
    "demo_cold_start": bench_demo_cold_start,
    "burst": bench_burst,
}


# --------------------------------------------------------------------------- RESULTS.md
def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return lines


#: above this share of the cores used by other processes, a run is not comparable with others
BUSY_MACHINE_SHARE = 0.05


def _foreign_cpu_md(foreign: dict[str, Any] | None) -> list[str]:
    """Whether the machine was the benchmark's own: the flow pays for a busy one, the script not."""
    if not foreign:
        return []
    share = foreign["share_of_cores"]
    line = (
        f"* Other processes used {foreign['seconds']} s of CPU during the timed runs "
        f"({share:.1%} of the cores; the benchmark's own processes: {foreign['ours_seconds']} s"
        + (
            f", and PostgreSQL serving its database {foreign['database_seconds']} s"
            if "database_seconds" in foreign
            else ""
        )
        + ")."
    )
    if share > BUSY_MACHINE_SHARE:
        line += (
            " **The machine was busy: the flow slows far more than the plain script under load, "
            "so this ratio is inflated** (docs/performance.md); run it again on an idle machine."
        )
    return [line]


def _add_people_md(result: dict[str, Any]) -> list[str]:
    """One subsection per backend of the Prefect server (a result from before backends: one)."""
    if "backends" not in result:
        return _add_people_backend_md(result)
    lines: list[str] = []
    for backend, side in result["backends"].items():
        lines += [f"### Prefect server on {BACKEND_LABELS.get(backend, backend)}", ""]
        if "error" in side:
            lines += ["FAILED:", "", "```", side["error"][-3000:], "```"]
        else:
            lines += _add_people_backend_md(side)
        lines.append("")
    return lines[:-1]


def _add_people_backend_md(result: dict[str, Any]) -> list[str]:
    summary, config = result["summary"], result["config"]
    small, big = summary["sizes"]
    target = summary["marginal_target"]
    verdict = "meets" if (summary["marginal_ratio"] or 99) <= target else "MISSES"
    lines = [
        f"Sandbox latency {config['latency_ms']:.0f} ms, concurrency {config['concurrency']}, "
        f"chunks of 100, one group; {config['repeats']} repeat(s), medians. Each run is a fresh "
        "process; plain and flow runs alternate.",
        "",
        f"* **Marginal cost ratio** (T_flow({big}) - T_flow({small})) / "
        f"(T_plain({big}) - T_plain({small})) = **{summary['marginal_ratio']}** "
        f"({verdict} the target <= {target}). The same ratio on the wall time after the first "
        f"call (start-up noise left out): {summary.get('marginal_ratio_after_first_call')}.",
        f"* **Fixed start-up cost** (process launch to the first add-people call, median of all "
        "runs): flow "
        f"{summary['fixed_startup']['flow']['first_call_seconds']} s vs plain "
        f"{summary['fixed_startup']['plain']['first_call_seconds']} s "
        f"(+{summary['startup_extra_seconds']} s; this machine, this load).",
        "* Checks: "
        + ", ".join(f"{name} = {'yes' if ok else 'NO'}" for name, ok in summary["checks"].items()),
    ]
    lines += _foreign_cpu_md(result.get("foreign_cpu"))
    waits = [
        r["waited_for_prefect_idle_seconds"]
        for r in result["runs"]
        if "waited_for_prefect_idle_seconds" in r
    ]
    if waits:
        lines.append(
            "* Before each run the bench waits until the Prefect server has recorded the previous "
            f"run's task runs (longest wait {max(waits)} s), so no run is timed with another's "
            "bill"
            + (
                ": while the server records thousands of task runs, its SQLite database refuses "
                "other writes and the next run's first Prefect call waits out the client's retries."
                if config.get("backend", "sqlite") == "sqlite"
                else " (the same wait as on SQLite, where it matters: there the database refuses "
                "other writes while the server records thousands of task runs)."
            )
        )
    lines.append("")
    rows = [
        [
            r["mode"],
            r["size"],
            r["wall_seconds"],
            r["first_call_seconds"],
            f"{r['api_calls']} / {r['expected_calls']}",
            r["token_mints"],
            f"{r['people_added_once']} / {r['people_added_twice_or_more']}",
            r["peak_rss_mb"],
        ]
        for r in result["runs"]
    ]
    lines += _table(
        [
            "side",
            "ids",
            "wall s",
            "first call s",
            "calls / ceil(N/100)",
            "mints",
            "added once / twice+",
            "peak RSS MB",
        ],
        rows,
    )
    cold = result.get("no_bytecode_cache_flow_run")
    if cold:
        lines += [
            "",
            f"Without a bytecode cache (this environment sets PYTHONDONTWRITEBYTECODE=1, so every "
            f"process compiles Prefect from source) a 100-id flow run reaches its first call after "
            f"{cold['first_call_seconds']} s; the runs above use a private bytecode cache "
            "(PYTHONPYCACHEPREFIX), as any installed deployment has compiled bytecode.",
        ]
    if result.get("profile"):
        lines += ["", "<details><summary>cProfile of a big flow run</summary>", "", "```"]
        lines += result["profile"].splitlines()[:120] + ["```", "</details>"]
    return lines


def _module_md(result: dict[str, Any]) -> list[str]:
    lines = [f"`{result['command']}` (exit {result['returncode']}, {result['wall_seconds']} s)", ""]
    table = [line for line in result["stdout"].splitlines() if line.startswith("|")]
    if table:
        lines += table
    elif result["rows"]:
        keys = list(dict.fromkeys(k for row in result["rows"] for k in row))
        lines += _table(keys, [[row.get(k) for k in keys] for row in result["rows"]])
    other = [
        line
        for line in result["stdout"].splitlines()
        if line.strip() and not line.startswith(("|", "{"))
    ]
    if other:
        lines += ["", *[f"> {line}" for line in other[:20]]]
    if result["returncode"]:
        lines += ["", "```", result["stderr"], "```"]
    return lines


def _token_md(result: dict[str, Any]) -> list[str]:
    """One row per (mode, backend, token store); a result from before backends: as it was."""
    rows = result.get("rows") or []
    if not any("backend" in row for row in rows):
        return _module_md(result)
    lines = [f"`{result['command']}` (exit {result['returncode']}, {result['wall_seconds']} s)", ""]
    header = [
        "mode",
        "Prefect server",
        "token store",
        "runs",
        "lost",
        "wall s",
        "mints",
        "token calls",
        "401s",
        "429s",
        "max token calls / 60 s",
        "failed calls",
        "token wait p50 ms",
        "token wait p99 ms",
        "token wait max ms",
        "waits > 1 s",
        "token task call p50 ms",
        "token task call p99 ms",
    ]
    table = []
    for row in rows:
        backend = row.get("backend")
        label = BACKEND_LABELS.get(backend, backend) if backend else "– (no Prefect)"
        if "error" in row:
            table.append([row["mode"], label, row.get("store"), row.get("runs"), row.get("lost")])
            table[-1] += ["FAILED"] + [None] * (len(header) - 6)
            continue
        table.append(
            [
                row["mode"],
                label,
                row.get("store") or "–",
                row.get("runs"),
                row.get("lost"),
                row.get("wall_seconds"),
                row.get("mints"),
                row.get("token_calls"),
                row.get("401s"),
                row.get("429s"),
                row.get("max_token_calls_per_60s"),
                row.get("failed_calls"),
                token_wait_ms(row, "p50"),
                token_wait_ms(row, "p99"),
                token_wait_ms(row, "max"),
                row.get("waits_over_1s") if measures_broker_wait(row) else None,
                task_call_ms(row, "p50"),
                task_call_ms(row, "p99"),
            ]
        )
    lines += _table(header, table)
    other = [
        line
        for line in result["stdout"].splitlines()
        if line.strip() and not line.startswith(("|", "{"))
    ]
    lines += ["", *[f"> {line}" for line in other[:5]]]
    lines += [
        "",
        "Shared: every process runs its flow runs at once, each asks for the token and makes "
        "3 calls. Token wait: the time the run's `get_shared_access_token` task spent in the "
        "broker's `get_token` (reading the store, the locks, the one mint); token task call: "
        "the whole task call, that wait plus Prefect's task-run bookkeeping under all the "
        "simultaneous starts (the time the run took to start is in neither, only in wall s). "
        "A process reads the store before it asks for the token lock, and while it waits for "
        "the lock, so only the minting process needs it; lost = flow runs that did not end "
        "Completed. Rows measured before the token wait was told apart from the task call "
        "show their one number as the task call. Local store: the processes "
        "share one machine's encrypted token file and lock; Prefect store: a Prefect Variable "
        "and a lock on the server, as workers on several machines do. Naive: no Prefect, one "
        "mint per process and one more per 401.",
    ]
    for row in rows:
        for reason in row.get("lost_reasons") or []:
            where = f"{row['mode']} / {row.get('backend')} / {row.get('store')}"
            lines.append(f"* lost ({where}): `{reason[:300]}`")
        if "error" in row:
            lines += ["", "```", row["error"][-1500:], "```"]
    if result["returncode"]:
        lines += ["", "```", result["stderr"], "```"]
    return lines


def _burst_md(result: dict[str, Any]) -> list[str]:
    """One row per (backend, size), each next to the issue's targets for a burst of 400."""
    from bench import burst

    config = result["config"]
    sides = result["backends"]
    walls = ", ".join(
        f"{seconds:g} s on {BACKEND_LABELS.get(backend, backend)}"
        for backend, seconds in burst.WALL_TARGET_SECONDS.items()
    )  # "60 s on SQLite, 45 s on PostgreSQL"
    walls += f", {burst.REPLICA_WALL_RATIO:g}x the PostgreSQL burst's on the API replicas"
    lines = [
        "Per backend one stack (`deployments.stack.LocalStack`, as `make serve`; workers: "
        + ", ".join(
            f"{BACKEND_LABELS.get(b, b)} {n}" for b, n in (config.get("workers") or {}).items()
        )
        + "), its bursts one after the other. A burst: the sandbox discovers N vendors at once, "
        "one `bridge-event-log` run turns their audit entries into events, and the promote "
        "deployment's debounced trigger starts runs that each promote every vendor logged since "
        "the flow's checkpoint. The bridge's schedule and the promote deployment's `catch-up` "
        "schedule are off: the trigger path is what is measured. Wall time: from the bridge "
        "run's creation until the sandbox has managed every vendor (timeout "
        f"{config['timeout_seconds']:g} s); the counts once every run is final and no crash "
        f"recovery runs (held {config['settle_seconds']:g} s). Logs: what the stack logged "
        "during the burst.",
        "",
        f"Targets (a burst of {burst.TARGET_SIZE}): every vendor managed exactly once, within "
        f"{walls} (counted from the bridge run's start); at most "
        f"{burst.MAX_PROMOTION_RUNS} promotion runs, "
        f'0 "database is locked", 0 tracebacks, at most {burst.MAX_MINTS} mint (0: the token '
        "minted before the burst was still valid), 0 x 401.",
        "",
    ]
    header = [
        "Prefect server",
        "workers",
        "vendors",
        "wall s",
        "promotion runs",
        "managed twice",
        "not managed",
        "db locked",
        "tracebacks",
        "mints",
        "401s",
        "runs started again",
        "bridge",
        "targets",
    ]
    table = []
    for backend, side in sides.items():
        label = BACKEND_LABELS.get(backend, backend)
        if "error" in side:
            table.append([label, side.get("workers"), None, "FAILED"] + [None] * 10)
            continue
        for row in side.get("bursts") or []:
            table.append(_burst_row(backend, label, side.get("workers"), row, config))
    lines += _table(header, table)
    lines += _burst_notes(sides)
    return lines


def _burst_row(
    backend: str, label: str, workers: Any, row: dict[str, Any], config: dict[str, Any]
) -> list[Any]:
    """A burst's row of the table: its numbers and its verdict on the targets."""
    from bench import burst

    verdict = _burst_verdict(backend, row.get("targets", burst.target_checks(backend, row)))
    if "error" in row:
        return [label, workers, row.get("size"), "FAILED"] + [None] * 9 + [verdict]
    wall = row["wall_seconds"]
    if row.get("timed_out"):
        wall = f"> {config['timeout_seconds']:g} (timed out)"
    elif wall is None:
        wall = "never (nothing left running)"
    states = ", ".join(f"{k} {v}" for k, v in row["promote_states"].items())
    return [
        label,
        workers,
        row["size"],
        wall,
        f"{row['promote_runs']} ({states or 'none'})",
        row["vendors_managed_twice"],
        row["vendors_not_managed"],
        row["database_is_locked"],
        row["tracebacks"],
        row["mints"],
        row["401s"],
        row["runs_started_again"],
        row.get("bridge_state"),
        verdict,
    ]


def _burst_verdict(backend: str, checks: dict[str, bool | None] | None) -> str:
    """'met', the targets missed, or why it could not be judged ('–': no target here)."""
    from bench import burst

    met = burst.targets_met(checks)
    if checks is None:
        return "–"
    if met is False:
        return "**MISSED**: " + "; ".join(burst.targets_missed(backend, checks))
    return "met" if met else "not judged"


def _burst_notes(sides: dict[str, Any]) -> list[str]:
    """Below the table: the stack, the bench's own reads, other processes, runs that did not
    complete, failures."""
    lines = [""]
    for backend, side in sides.items():
        label = BACKEND_LABELS.get(backend, backend)
        if not side:
            continue
        if "error" in side:
            lines += [f"{label} failed:", "", "```", side["error"][-3000:], "```", ""]
            continue
        lines.append(
            f"* {label}: the stack ({side.get('workers')} worker(s)) started in "
            f"{side.get('stack_startup_seconds')} s."
        )
        for row in side.get("bursts") or []:
            where = f"{label}, {row.get('size')} vendors"
            if "error" in row:
                lines += ["", f"{where} failed:", "", "```", row["error"][-3000:], "```", ""]
                continue
            poll, foreign = row.get("poll") or {}, row.get("foreign_cpu") or {}
            milestones = row.get("milestones_seconds") or {}
            lines.append(
                f"* {where}: first promotion run created after "
                f"{milestones.get('first_promote_run_created')} s, first vendor managed after "
                f"{milestones.get('first_vendor_managed')} s; the bench's reads of the Prefect "
                f"API: slowest {poll.get('slowest_read_seconds')} s, {poll.get('read_timeouts')} "
                f"timed out, {poll.get('read_503s')} answered 503; other processes used "
                f"{foreign.get('share_of_cores', 0):.1%} of the cores."
            )
            if row.get("wall_vs_postgresql") is not None:
                lines.append(
                    f"* {where}: wall time {row['wall_vs_postgresql']}x the single-server "
                    "PostgreSQL burst's"
                )
            for error, count in (row.get("traceback_errors") or {}).items():
                lines.append(f"* {where}: {count} traceback(s) ending `{error}`")
            for run in row.get("runs") or []:
                if run["state"] != "COMPLETED":
                    lines.append(
                        f"* {where}: run {run['name']} ended {run['state']} "
                        f"(runs: {run['run_count']}): {run['message'][:200]}"
                    )
    return lines[:-1] if lines[-1] == "" else lines


def _demo_md(result: dict[str, Any]) -> list[str]:
    phases = result["phases_seconds"]
    lines = [
        f"* `make demo` wall time / plain script (same sandbox, same writes, no Prefect): "
        f"**{result['demo_to_plain_ratio']}** ({result['demo_wall_seconds']} s vs "
        f"{result['plain_wall_seconds']} s); demo exit ok: {result['demo_exit_ok']}.",
        f"* Start-up phases (share of the demo's wall time: {result['startup_share_of_demo']}):",
        "",
    ]
    lines += _table(["phase", "seconds"], [[k, v] for k, v in phases.items()])
    return lines


FORMATTERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "add_people": _add_people_md,
    "token_contention": _token_md,
    "streaming_reads": _module_md,
    "demo_cold_start": _demo_md,
    "burst": _burst_md,
}

TITLES = {
    "add_people": "1. Bulk add-people: flow vs plain asyncio-httpx",
    "token_contention": "2. Token contention: shared broker vs per-process minting",
    "streaming_reads": "3. Streaming reads: time and memory at 10,000, 100,000 and 1,000,000 items",
    "demo_cold_start": "4. Demo cold start",
    "burst": "5. Bursts of discovered vendors through the stack",
}


#: the benchmarks RESULTS.md compares SQLite vs PostgreSQL on (bench/compare.py)
COMPARED = ("burst", "token_contention", "add_people")


def _without_profiles(result: dict[str, Any]) -> dict[str, Any]:
    """The raw result minus cProfile dumps (shown in their section, too long for the JSON)."""
    raw = {k: v for k, v in result.items() if k != "profile"}
    if isinstance(raw.get("backends"), dict):
        raw["backends"] = {
            backend: {k: v for k, v in side.items() if k != "profile"}
            for backend, side in raw["backends"].items()
        }
    return raw


def render(results: dict[str, dict[str, Any]], header: dict[str, Any], quick: bool) -> str:
    lines = [
        "# Benchmark results",
        f"<!-- machine {json.dumps(header)} -->",
        "Written by `make bench` (`python -m bench`"
        + (" --quick: small sizes, a smoke test, not numbers to quote" if quick else "")
        + "). Ratios and counts; times are of this machine under its load at the time.",
        "",
        f"* Date: {header['date']}; machine: {header['cpus']} cores, {header['ram_gb']} GB RAM, "
        f"{header['platform']}",
        f"* Python {header['python']}, prefect {header['prefect']}, httpx {header['httpx']}",
        f"* Load average (1/5/15 min) at start: {header['load_average']}; bytecode caching "
        f"disabled by the environment: {header['bytecode_disabled_by_env']}",
        "",
    ]
    compared = [name for name in COMPARED if name in results]
    if compared:
        lines += ["## SQLite vs PostgreSQL: the scale-out targets", ""]
        lines += comparison_md(results, BUSY_MACHINE_SHARE)
        when = "; ".join(f"{n} {results[n].get('measured_at', header['date'])}" for n in compared)
        lines += ["", f"Measured: {when}.", ""]
    for name, result in results.items():
        lines += [f"## {TITLES[name]}", ""]
        if "error" in result:
            lines += ["FAILED:", "", "```", result["error"][-3000:], "```"]
        else:
            lines += FORMATTERS[name](result)
        lines += [
            "",
            f"Measured {result.get('measured_at', header['date'])}; load average after: "
            f"{result.get('load_average_after')}",
            "",
        ]
    lines += ["<details><summary>Raw results (JSON)</summary>", "", "```json"]
    raw = {name: _without_profiles(r) for name, r in results.items()}
    lines += [json.dumps(raw, indent=1, default=str), "```", "</details>", ""]
    return "\n".join(lines)


def previous_results(path: Path) -> dict[str, dict[str, Any]]:
    """The raw results block of an earlier RESULTS.md (empty if there is none)."""
    if not path.exists():
        return {}
    text = path.read_text()
    start, end = text.find("```json"), text.rfind("```")
    try:
        raw = json.loads(text[start + len("```json") : end]) if start >= 0 else {}
    except json.JSONDecodeError:
        return {}
    return {name: result for name, result in raw.items() if name in BENCHMARKS}


def rerender(path: Path) -> int:
    """Recompute the summaries from the raw runs kept in RESULTS.md and write it again."""
    from bench import add_people

    text = path.read_text()
    results = previous_results(path)
    entry = results.get("add_people") or {}
    sides = entry["backends"].values() if "backends" in entry else [entry]
    for side in sides:
        if "runs" in side:
            target = side["config"].get("marginal_target", add_people.MARGINAL_TARGETS["sqlite"])
            side["summary"] = add_people.summarize(side["runs"], side["config"]["sizes"], target)
    header = json.loads(text[text.find("<!-- machine ") + 13 : text.find(" -->")])
    path.write_text(render(results, header, quick="--quick" in text.splitlines()[2]))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"repeats of add_people (default {ADD_PEOPLE_REPEATS}) and demo (default 1)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile a big flow run")
    parser.add_argument("--output", default=str(REPO / "bench" / "RESULTS.md"))
    parser.add_argument(
        "--render-only", action="store_true", help="rewrite RESULTS.md from its raw results"
    )
    args = parser.parse_args(argv)
    if args.render_only:
        return rerender(Path(args.output))
    use_bytecode_cache()  # every child and server process: see bench.common
    header = machine()
    output = Path(args.output)
    # benchmarks not run this time keep their earlier results (each says when it was measured)
    results = {k: v for k, v in previous_results(output).items() if k not in args.only}
    for name in args.only:
        print(f"bench: {name} ...", file=sys.stderr, flush=True)  # noqa: T201
        try:
            results[name] = RUNNERS[name](args.quick, args.repeats, args.profile)
        except Exception:
            results[name] = {"error": traceback.format_exc()}
        results[name]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        results[name]["measured_at"] = machine()["date"]
        ordered = {k: results[k] for k in BENCHMARKS if k in results}
        output.write_text(render(ordered, header, args.quick))
    print(f"bench: wrote {args.output}", file=sys.stderr)  # noqa: T201
    failed = [n for n, r in results.items() if _failed(r)]
    return 1 if failed else 0


def _failed(result: dict[str, Any]) -> bool:
    sides = list((result.get("backends") or {}).values())
    return "error" in result or bool(result.get("returncode")) or any("error" in s for s in sides)


if __name__ == "__main__":
    sys.exit(main())
