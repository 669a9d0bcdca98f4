"""SQLite vs PostgreSQL in RESULTS.md (bench/compare.py) and the burst's own bookkeeping and
targets (bench/burst.py): a target is met only on numbers that show it, never on a missing one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.__main__ import render
from bench.burst import (
    counts_since,
    log_counts,
    summarize_burst,
    target_checks,
    targets_met,
    targets_missed,
    traceback_errors,
)
from bench.compare import MET, MISSED, UNKNOWN, comparison_md, comparison_rows

HEADER = {
    "date": "2026-01-01 00:00 UTC",
    "cpus": 2,
    "ram_gb": 8.0,
    "python": "3.11",
    "platform": "Linux",
    "prefect": "3.8",
    "httpx": "0.28",
    "load_average": [0.1, 0.1, 0.1],
    "bytecode_disabled_by_env": False,
}


def burst_run(size: int = 400, wall: float | None = 30.0, **changes: Any) -> dict[str, Any]:
    """One burst as bench/burst.py records it: by default every target of a burst of 400 met."""
    return {
        "size": size,
        "wall_seconds": wall,
        "timed_out": False,
        "promote_runs": 2,
        "promote_states": {"COMPLETED": 2},
        "runs_not_completed": 0,
        "vendors_managed_twice": 0,
        "vendors_not_managed": 0,
        "runs_started_again": 0,
        "database_is_locked": 0,
        "tracebacks": 0,
        "mints": 1,
        "401s": 0,
        "bridge_state": "COMPLETED",
        "recovery_runs": 0,
        "milestones_seconds": {"first_promote_run_created": 3.0},
        "poll": {"read_timeouts": 0, "read_503s": 0, "slowest_read_seconds": 0.2},
        "foreign_cpu": {"seconds": 0.1, "share_of_cores": 0.001, "ours_seconds": 50.0},
        "runs": [],
    } | changes


def burst_side(*runs: dict[str, Any], workers: int = 1) -> dict[str, Any]:
    return {"workers": workers, "stack_startup_seconds": 60.0, "bursts": list(runs)}


def burst(sqlite: dict[str, Any], postgresql: dict[str, Any]) -> dict[str, Any]:
    return {
        "config": {
            "sizes": [40, 400],
            "workers": {"sqlite": 1, "postgresql": 3},
            "timeout_seconds": 600,
            "settle_seconds": 20,
            "backends": ["sqlite", "postgresql"],
        },
        "backends": {"sqlite": sqlite, "postgresql": postgresql},
    }


def token_row(
    backend: str | None, store: str | None, p99: float, lost: int = 0, task_call_p99: float = 0.0
) -> dict[str, Any]:
    """A row of bench/token_contention.py: ``p99`` is the token wait (inside the broker)."""
    return {
        "mode": "shared" if backend else "naive",
        "backend": backend,
        "store": store,
        "runs": 40,
        "lost": lost,
        "wall_seconds": 30.0,
        "mints": 1,
        "token_calls": 1,
        "401s": 0,
        "429s": 0,
        "max_token_calls_per_60s": 1,
        "failed_calls": 0,
        "wait_p50_ms": 10.0,
        "wait_p99_ms": p99,
        "wait_max_ms": p99,
        "waits_over_1s": 0,
        "task_call_p50_ms": 50.0,
        "task_call_p99_ms": task_call_p99 or p99 + 100.0,
        "task_call_max_ms": task_call_p99 or p99 + 100.0,
        "task_calls_over_1s": 0,
        "lost_reasons": [],
    }


def tokens(*rows: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": "python -m bench.token_contention",
        "returncode": 0,
        "rows": list(rows),
        "stdout": "8 processes x 5 concurrent runs x 3 calls\n",
        "stderr": "",
        "wall_seconds": 100.0,
    }


def verdicts(results: dict[str, Any]) -> dict[str, str]:
    return {row["measure"]: row["verdict"] for row in comparison_rows(results) if row["verdict"]}


def find(rows: dict[str, str], start: str) -> str:
    return next(verdict for measure, verdict in rows.items() if measure.startswith(start))


def test_each_target_is_met_or_missed_on_its_numbers() -> None:
    results = {
        "burst": burst(
            burst_side(burst_run(40, 10.0), burst_run(400, 55.0)),
            burst_side(burst_run(40, 8.0), burst_run(400, 40.0), workers=3),
        ),
        "token_contention": tokens(
            token_row("sqlite", "local", 65000.0),
            token_row("postgresql", "local", 800.0),
            token_row(None, None, 300.0),
        ),
    }
    rows = verdicts(results)
    assert find(rows, "burst of 400: wall time") == MET  # 55 <= 60 on SQLite, 40 <= 45 on PG
    assert find(rows, "burst of 400: promotion runs") == MET
    assert find(rows, "burst of 400: vendors managed twice") == MET
    assert find(rows, 'burst of 400: "database is locked"') == MET
    assert find(rows, "burst of 400: token mints") == MET
    assert find(rows, "token contention (local store): token-wait p99") == MET
    assert find(rows, "token contention (local store): lost") == MET
    assert find(rows, "add-people") == UNKNOWN  # not measured: never "met"

    # 45 s is SQLite's target met but PostgreSQL's missed; a locked database on either misses
    slower = {
        "burst": burst(
            burst_side(burst_run(400, 45.0, database_is_locked=3)),
            burst_side(burst_run(400, 46.0), workers=3),
        )
    }
    rows = verdicts(slower)
    assert find(rows, "burst of 400: wall time") == MISSED
    assert find(rows, 'burst of 400: "database is locked"') == MISSED
    assert find(rows, "burst of 400: promotion runs") == MET


def test_a_burst_is_held_to_the_targets_of_its_backend_and_size_only() -> None:
    assert target_checks("sqlite", burst_run(40, 500.0, promote_runs=9)) is None
    met = target_checks("sqlite", burst_run(400, 60.0))
    assert met is not None and targets_met(met) is True
    assert targets_met(target_checks("postgresql", burst_run(400, 60.0))) is False
    # the token minted before the burst still valid: no mint at all is fine, two are not
    assert targets_met(target_checks("sqlite", burst_run(400, mints=0))) is True
    two = target_checks("sqlite", burst_run(400, mints=2))
    assert targets_missed("sqlite", two) == ["at most 1 mint"]
    many = target_checks(
        "sqlite", burst_run(400, promote_runs=4, vendors_managed_twice=1, tracebacks=2)
    )
    assert targets_missed("sqlite", many) == [
        "each vendor managed exactly once",
        "at most 3 promotion runs",
        "0 tracebacks",
    ]


def test_a_failed_or_unfinished_burst_is_not_taken_for_a_number() -> None:
    failed = {
        "burst": burst(
            {"backend": "sqlite", "error": "Traceback"},
            burst_side(burst_run(400, 40.0), workers=3),
        )
    }
    rows = verdicts(failed)
    assert find(rows, "burst of 400: wall time") == UNKNOWN
    assert find(rows, "burst of 400: promotion runs") == UNKNOWN
    failed_run = burst_side({"size": 400, "error": "Traceback: boom"})
    checks = target_checks("sqlite", failed_run["bursts"][0])
    assert checks is not None and targets_met(checks) is None  # not measured, not met

    # vendors never all managed (timed out, or nothing left to manage them): no wall time, and
    # the wall target is missed, not skipped
    unmanaged = burst_run(400, None, timed_out=True, vendors_not_managed=7)
    rows = verdicts({"burst": burst(burst_side(unmanaged), burst_side(burst_run(400), workers=3))})
    assert find(rows, "burst of 400: wall time") == MISSED
    assert find(rows, "burst of 400: vendors managed twice") == MISSED
    row = next(r for r in comparison_rows({"burst": burst(burst_side(unmanaged), {})}))
    assert (row["sqlite"], row["postgresql"]) == ("timed out", None)


def test_token_wait_target_is_judged_per_store_on_postgresql() -> None:
    results = {
        "token_contention": tokens(
            token_row("sqlite", "local", 500.0),
            token_row("postgresql", "local", 900.0),
            token_row("sqlite", "prefect", 500.0),
            token_row("postgresql", "prefect", 1500.0, lost=1),
        )
    }
    rows = verdicts(results)
    assert find(rows, "token contention (local store): token-wait p99") == MET
    assert find(rows, "token contention (prefect store): token-wait p99") == MISSED
    assert find(rows, "token contention (prefect store): lost") == MISSED


def test_token_wait_target_is_judged_on_the_broker_wait_and_the_task_call_is_shown() -> None:
    results = {
        "token_contention": tokens(
            token_row("sqlite", "local", 400.0, task_call_p99=2500.0),
            token_row("postgresql", "local", 600.0, task_call_p99=1800.0),
        )
    }
    rows = {row["measure"]: row for row in comparison_rows(results)}
    wait = rows["token contention (local store): token-wait p99 (ms, inside the broker)"]
    assert (wait["postgresql"], wait["verdict"]) == (600.0, MET)
    call = next(row for measure, row in rows.items() if "task call p99" in measure)
    assert (call["sqlite"], call["postgresql"], call["verdict"]) == (2500.0, 1800.0, "")
    text = render(results, HEADER, quick=False)
    assert "token task call p99 ms" in text and "| 600.0 |" in text and "| 1800.0 |" in text


def test_a_row_from_before_the_broker_wait_was_measured_is_not_judged_on_it() -> None:
    old = token_row("postgresql", "local", 800.0)
    for key in ("task_call_p50_ms", "task_call_p99_ms", "task_call_max_ms", "task_calls_over_1s"):
        del old[key]  # its wait_* timed the whole task call
    results = {"token_contention": tokens(token_row("sqlite", "local", 300.0), old)}
    rows = {row["measure"]: row for row in comparison_rows(results)}
    wait = rows["token contention (local store): token-wait p99 (ms, inside the broker)"]
    assert (wait["postgresql"], wait["verdict"]) == (None, UNKNOWN)
    call = next(row for measure, row in rows.items() if "task call p99" in measure)
    assert call["postgresql"] == 800.0  # shown for what it measured


def test_add_people_ratio_target_on_postgresql() -> None:
    def side(ratio: float) -> dict[str, Any]:
        return {"summary": {"marginal_ratio": ratio}}

    met = {"add_people": {"backends": {"sqlite": side(1.2), "postgresql": side(1.08)}}}
    missed = {"add_people": {"backends": {"sqlite": side(1.0), "postgresql": side(1.12)}}}
    assert find(verdicts(met), "add-people") == MET
    assert find(verdicts(missed), "add-people") == MISSED


def test_results_md_opens_with_the_comparison_and_keeps_every_section() -> None:
    results = {
        "token_contention": tokens(
            token_row("sqlite", "local", 65000.0),
            token_row("postgresql", "local", 800.0),
            token_row(None, None, 300.0),
        ),
        "burst": burst(
            burst_side(burst_run(40, 12.0)), {"backend": "postgresql", "error": "Traceback: boom"}
        ),
    }
    text = render(results, HEADER, quick=False)
    assert text.index("SQLite vs PostgreSQL") < text.index("## 2. Token contention")
    assert "## 5. Bursts" in text and "Traceback: boom" in text
    assert "| shared | PostgreSQL | local | 40 | 0 |" in text
    summary = comparison_md(results, 0.05)
    assert any("Targets:" in line for line in summary)


def test_results_md_has_a_burst_row_per_backend_and_size_next_to_its_targets() -> None:
    crashed = {"name": "brave-fox", "state": "CRASHED", "message": "killed", "run_count": 2}
    results = {
        "burst": burst(
            burst_side(
                burst_run(40, 12.0, promote_runs=1, promote_states={"COMPLETED": 1}),
                burst_run(400, 75.5, database_is_locked=2, tracebacks=1),
            ),
            burst_side(
                burst_run(40, 9.0),
                burst_run(400, 31.0, runs=[crashed], runs_started_again=1),
                workers=3,
            ),
        )
    }
    text = render(results, HEADER, quick=False)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| Prefect server | workers"))
    assert header.split(" | ")[3:11] == [
        "wall s",
        "promotion runs",
        "managed twice",
        "not managed",
        "db locked",
        "tracebacks",
        "mints",
        "401s",
    ]
    rows = [line for line in lines if line.startswith(("| SQLite |", "| PostgreSQL |"))]
    assert len(rows) == 4
    assert rows[0].startswith("| SQLite | 1 | 40 | 12.0 | 1 (COMPLETED 1) | 0 | 0 | 0 | 0 | 1 | 0")
    assert rows[0].endswith("| – |")  # no target for 40 vendors
    assert rows[1].startswith("| SQLite | 1 | 400 | 75.5 | 2 (COMPLETED 2) | 0 | 0 | 2 | 1 |")
    assert (
        '**MISSED**: every vendor managed within 60 s; 0 "database is locked"; 0 tracebacks'
        in rows[1]
    )
    assert rows[3].startswith("| PostgreSQL | 3 | 400 | 31.0 |") and rows[3].endswith("| met |")
    assert "run brave-fox ended CRASHED (runs: 2): killed" in text
    assert "redeliver" not in text.lower()


def test_burst_counts_runs_vendors_managed_twice_or_not_at_all_and_the_logs() -> None:
    vendors = ["v1", "v2", "v3"]
    runs = [
        {"state": {"type": "COMPLETED"}, "parameters": {"from_audit_log": True}},
        {"state": {"type": "CRASHED"}, "parameters": {"from_audit_log": True}, "run_count": 2},
    ]
    result = summarize_burst(
        3,
        vendors,
        runs,
        {"v1": 1, "v2": 2, "someone-else": 1},
        wall_seconds=12.34,
        timed_out=False,
        mints=1,
        unauthorized=0,
        logs={"database_is_locked_errors": 4, "tracebacks": 1},
    )
    assert result["promote_runs"] == 2
    assert result["promote_states"] == {"COMPLETED": 1, "CRASHED": 1}
    assert result["runs_not_completed"] == 1
    assert result["vendors_managed_twice"] == 1  # v2
    assert result["vendors_not_managed"] == 1  # v3
    assert result["runs_started_again"] == 1
    assert (result["database_is_locked"], result["tracebacks"]) == (4, 1)
    assert (result["mints"], result["401s"]) == (1, 0)
    assert result["wall_seconds"] == 12.3


def test_the_logs_count_only_what_the_stack_wrote_during_the_burst(tmp_path: Path) -> None:
    locked = "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked\n"
    trace = "Traceback (most recent call last):\n"
    (tmp_path / "prefect-server.log").write_text(locked + trace)
    (tmp_path / "not-a-log.txt").write_text(locked * 5)
    before = log_counts(tmp_path)
    assert before == {"database_is_locked_errors": 1, "tracebacks": 1}
    with (tmp_path / "prefect-server.log").open("a") as log:
        log.write(locked * 2)
    (tmp_path / "local-worker.log").write_text(trace)
    assert counts_since(before, log_counts(tmp_path)) == {
        "database_is_locked_errors": 2,
        "tracebacks": 1,
    }


def test_each_traceback_is_named_by_the_error_it_ended_with(tmp_path: Path) -> None:
    scheduler = (
        "ERROR | prefect.server.services.scheduler - Error scheduling deployment\n"
        "Traceback (most recent call last):\n"
        '  File "schedules.py", line 677, in _get_dates_whenever\n'
        "    start_instant = _whenever_zdt_from_py(start)\n"
        "ValueError: tzinfo must be of type ZoneInfo (exactly)\n"
    )
    (tmp_path / "prefect-server.log").write_text(scheduler * 2)
    (tmp_path / "local-worker.log").write_text(
        "Traceback (most recent call last):\n  File 'x'\n\nhttpx.ReadTimeout: timed out\n"
    )
    assert traceback_errors(tmp_path) == {
        "ValueError: tzinfo must be of type ZoneInfo (exactly)": 2,
        "httpx.ReadTimeout: timed out": 1,
    }
    results = {
        "burst": burst(
            burst_side(burst_run(40, tracebacks=2, traceback_errors={"ValueError: tz": 2})), {}
        )
    }
    assert "SQLite, 40 vendors: 2 traceback(s) ending `ValueError: tz`" in render(
        results, HEADER, quick=False
    )


def test_token_rows_count_lost_runs_and_the_waits_of_the_runs_that_got_a_token() -> None:
    from bench.token_contention import summarize

    stats = {
        "token_mints": {"demo-manage": 1},
        "token_requests": {"demo-manage": 1},
        "unauthorized": 0,
        "status_counts": {"200": 10},
    }
    reports = [
        {"waits": [0.01, 0.02], "task_calls": [0.1, 0.3], "failures": 0, "runs": 2, "lost": 0},
        {
            "waits": [1.5],
            "task_calls": [1.7],
            "failures": 0,
            "runs": 2,
            "lost": 1,
            "lost_reasons": ["CRASHED: x"],
        },
    ]
    row = summarize("shared", reports, stats, 1, wall_seconds=3.21, backend="sqlite", store="local")
    assert (row["runs"], row["lost"], row["waits_over_1s"]) == (4, 1, 1)
    assert row["wait_p50_ms"] == 20.0 and row["wait_max_ms"] == 1500.0
    assert row["task_call_p50_ms"] == 300.0 and row["task_call_p99_ms"] == 1700.0
    assert row["task_calls_over_1s"] == 1
    naive = summarize("naive", [{"waits": [0.2], "failures": 0, "runs": 1}], stats, 1)
    assert naive["wait_p99_ms"] == 200.0 and naive["task_call_p99_ms"] is None
    assert row["lost_reasons"] == ["CRASHED: x"]
    assert row["wall_seconds"] == 3.2
