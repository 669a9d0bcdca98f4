"""bench/RESULTS.md from the raw runs in bench/runs.json: per benchmark one table, a row per
measure, a column per side; a target judged on each run, never on a missing number."""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import burst as B
from bench.add_people import MARGINAL_TARGETS
from bench.streaming_reads import CASES, HUGE_RSS_GROWTH_MB, HUGE_TIME_RATIO, RATIO_TARGET

RECENT_RUNS = 5
#: above this share of the cores used by other processes, a run is not comparable with others
BUSY_MACHINE_SHARE = 0.05
BUSY_MACHINE = (
    " **The machine was busy: the flow slows far more than the plain script under load, so this "
    "ratio is inflated** (docs/performance.md); run it again on an idle machine."
)
TOKEN_WAIT_P99_TARGET_MS = 1000.0
ADD_PEOPLE_RATIO_TARGET = MARGINAL_TARGETS["postgresql"]
MET, MISSED, UNKNOWN = "met", "**MISSED**", "not judged"
FIXED = ("measure", "target", "verdict")
BACKEND_LABELS = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}
BACKEND_LABELS["replicas"] = "PostgreSQL + Redis, 2 API replicas"
HEADERS = BACKEND_LABELS | {"naive": "naive (no Prefect)", "ratio": "SQLite / PostgreSQL"}
HEADERS["value"] = "median (range)"
Row = dict[Any, Any]
Result = dict[str, Any]
#: a dotted path into a result, or a tuple of them (read as a tuple: an "a / b" cell)
Read = str | tuple[str, ...]


def load(path: Path) -> list[Result]:
    return list(json.loads(path.read_text())) if path.exists() else []


def record(path: Path, entry: Result) -> None:
    """Append a run: ``benchmark``, ``date``, ``commit``, ``quick``, ``machine``, ``result``."""
    path.write_text(json.dumps([*load(path), entry], indent=1, default=str) + "\n")


def recent(entries: list[Result], benchmark: str) -> list[Result]:
    """The benchmark's last ``RECENT_RUNS`` full runs (--quick ones if none), latest first."""
    runs = [e for e in entries if e["benchmark"] == benchmark]
    return ([e for e in runs if not e.get("quick")] or runs)[-RECENT_RUNS:][::-1]


def _number(value: Any) -> Any:
    """``value`` if it is a number, else None ("failed", "timed out", not measured)."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _fmt(value: Any) -> str:
    return str(round(value, 3)) if isinstance(value, float) else str(value)


def cell(values: list[Any]) -> str:
    """One measure on one side over the runs: the median with the range, and what stood in for
    a number ("failed"); a tuple part by part, a list's items pooled; "–" if nothing."""
    width = max((len(v) for v in values if isinstance(v, tuple)), default=0)
    if width:
        parts = [v if isinstance(v, tuple) else (v,) * width for v in values]
        return " / ".join(cell(list(part)) for part in zip(*parts, strict=True))
    flat = [x for v in values for x in (v if isinstance(v, list) else [v]) if x is not None]
    numbers = [x for x in flat if _number(x) is not None]
    texts = []
    if numbers:
        low, mid, high = min(numbers), statistics.median(numbers), max(numbers)
        texts.append(_fmt(mid) if low == high else f"{_fmt(mid)} ({_fmt(low)}–{_fmt(high)})")
    words = Counter(str(x) for x in flat if _number(x) is None)
    texts += [word if n == len(flat) else f"{n}x {word}" for word, n in words.items()]
    return "; ".join(texts) or "–"


def overall(verdicts: list[str]) -> str:
    """A row's verdicts over the runs: one as it is; else missed if a run missed, not judged if
    one was not, met if every run met."""
    judged = [v for v in verdicts if v]
    if len(judged) <= 1:
        return judged[0] if judged else ""
    counts = Counter(v if v in (MET, MISSED) else UNKNOWN for v in judged)
    verdict = next(v for v in (MISSED, UNKNOWN, MET) if counts[v])
    return f"{verdict} in {counts[verdict]} of {len(judged)} runs"


def aggregate(runs: list[list[Row]]) -> list[Row]:
    """The rows of several runs (latest first) as one table: a cell per measure and side."""
    measures: dict[str, list[Row]] = {}
    for row in (row for rows in runs for row in rows):
        measures.setdefault(row["measure"], []).append(row)
    table = []
    for measure, rows in measures.items():
        sides = dict.fromkeys(k for row in rows for k in row if k not in FIXED)
        table.append({"measure": measure, **{s: cell([r.get(s) for r in rows]) for s in sides}})
        table[-1]["target"] = next((r["target"] for r in rows if r.get("target")), "")
        table[-1]["verdict"] = overall([r.get("verdict", "") for r in rows])
    return table


def markdown(table: list[Row]) -> list[str]:
    """``aggregate``'s rows as a Markdown table; a column with nothing in it is left out."""
    keys = ("measure", *dict.fromkeys(k for r in table for k in r if k not in FIXED), *FIXED[1:])
    columns = [c for c in keys if any(r.get(c) not in (None, "", "–") for r in table)]
    header = [HEADERS.get(c) or (f"{c:,} items" if isinstance(c, int) else c) for c in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(columns)]
    for row in table:
        cells = (str(row.get(c) or ("" if c in FIXED else "–")) for c in columns)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _row(measure: str, sides: Row, target: str = "", verdict: str = "") -> Row:
    return {"measure": measure, **sides, "target": target, "verdict": verdict}


def _ratio(numerator: Any, denominator: Any) -> float | None:
    numerator, denominator = _number(numerator), _number(denominator)
    return None if numerator is None or not denominator else round(numerator / denominator, 2)


def _verdict(value: Any, good: Callable[[Any], bool]) -> str:
    return UNKNOWN if _number(value) is None else MET if good(value) else MISSED


def _zeros(*values: Any) -> str:
    """Met if every value (a count, or a tuple of counts) is 0; not judged if one is missing."""
    parts = [x for v in values for x in (v if isinstance(v, tuple) else (v,))]
    if any(not isinstance(x, int) or isinstance(x, bool) for x in parts):
        return UNKNOWN
    return MISSED if any(parts) else MET


def _dig(value: Any, path: Read) -> Any:
    """``value`` at the dotted ``path`` (a tuple of paths: a tuple), None where one is missing."""
    if isinstance(path, tuple):
        return tuple(_dig(value, part) for part in path)
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _side(found: Result | None, read: Read | Callable[[Result], Any]) -> Any:
    """A side's value: ``read`` (a function, or a path for ``_dig``); "failed", or None."""
    if not found:
        return None
    return "failed" if "error" in found else read(found) if callable(read) else _dig(found, read)


def _last_line(text: Any) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1][:300] if lines else "?"


def foreign_cpu_note(foreign: Result | None) -> str:
    """Whether the machine was the benchmark's own: the flow pays for a busy one, the script not."""
    if not foreign:
        return ""
    share, database = foreign["share_of_cores"], foreign.get("database_seconds")
    serving = "" if database is None else f", and PostgreSQL serving its database {database} s"
    return (
        f"Other processes used {foreign['seconds']} s of CPU during the timed runs ({share:.1%} "
        f"of the cores; the benchmark's own processes: {foreign['ours_seconds']} s{serving})."
    ) + (BUSY_MACHINE if share > BUSY_MACHINE_SHARE else "")


def _misses(side: Result) -> tuple[int, int, int] | None:
    """Runs whose calls were not ceil(N/100), whose mints not 1, a person not added once."""
    runs = side.get("runs") or []
    once = [r["people_added_once"] != r["size"] or r["people_added_twice_or_more"] for r in runs]
    calls = sum(r["api_calls"] != r["expected_calls"] for r in runs)
    return (calls, sum(r["token_mints"] != 1 for r in runs), sum(once)) if runs else None


def _peak_rss(side: Result) -> tuple[Any, ...] | None:
    runs = side.get("runs") or []
    big = max((r["size"] for r in runs), default=None)
    rss = [[r["peak_rss_mb"] for r in runs if (r["mode"], r["size"]) == (m, big)] for m in MODES]
    return tuple(statistics.median(v) if v else None for v in rss) if runs else None


MODES = ("flow", "plain")
#: (measure, read from a backend's result): the add-people table's rows after the ratio
ADD_PEOPLE: list[tuple[str, Read | Callable[[Result], Any]]] = [
    ("the same ratio after the first call", "summary.marginal_ratio_after_first_call"),
    (
        "process launch -> first add-people call, flow / plain (s)",
        tuple(f"summary.fixed_startup.{mode}.first_call_seconds" for mode in MODES),
    ),
    ("runs whose calls != ceil(N/100) / mints != 1 / a person added not once", _misses),
    ("peak RSS at the larger size, flow / plain (MB)", _peak_rss),
    ("first call without a bytecode cache (s)", "no_bytecode_cache_flow_run.first_call_seconds"),
    ("other processes' share of the cores", "foreign_cpu.share_of_cores"),
]


def add_people_rows(result: Result | None) -> list[Row]:
    backends = (result or {}).get("backends") or {}

    def sides(read: Read | Callable[[Result], Any]) -> Row:
        return {b: _side(backends.get(b), read) for b in ("sqlite", "postgresql")}

    ratio = sides("summary.marginal_ratio")
    pg = _verdict(ratio["postgresql"], lambda v: v <= ADD_PEOPLE_RATIO_TARGET)
    target = f"<= {ADD_PEOPLE_RATIO_TARGET:.2f} on PostgreSQL"
    rows = [_row("add-people: marginal cost ratio flow / plain", ratio, target, pg)]
    for measure, read in ADD_PEOPLE:
        rows.append(_row(f"add-people: {measure}", sides(read)))
        if read is _misses:
            verdict = _zeros(rows[-1]["sqlite"], rows[-1]["postgresql"])
            rows[-1] |= {"target": "0 / 0 / 0 on both", "verdict": verdict}
    return rows


def add_people_notes(result: Result) -> list[str]:
    notes = []
    for backend, side in (result.get("backends") or {}).items():
        label = BACKEND_LABELS.get(backend, backend)
        if "error" in side:
            notes.append(f"* {label} failed: `{_last_line(side['error'])}`")
            continue
        target, ratio = MARGINAL_TARGETS[backend], _dig(side, "summary.marginal_ratio")
        verdict = _verdict(ratio, lambda v, t=target: v <= t)
        note = f"{verdict}. {foreign_cpu_note(side.get('foreign_cpu'))}"
        notes.append(f"* {label}: ratio {ratio}, this backend's target <= {target:g}: {note}")
    return notes


#: (measure, read from a row, with the ratio SQLite / PostgreSQL)
TOKEN: list[tuple[str, Read, bool]] = [
    ("flow runs", "runs", False),
    ("wall time (s)", "wall_seconds", True),
    ("lost runs (not Completed)", "lost", False),
    ("token-wait p50 (ms, inside the broker)", "wait_p50_ms", True),
    ("token-wait p99 (ms, inside the broker)", "wait_p99_ms", True),
    ("token task call p99 (ms, the wait + Prefect's task run)", "task_call_p99_ms", True),
    ("mints", "mints", False),
    ("token-endpoint calls / 401s / 429s", ("token_calls", "401s", "429s"), False),
    ("most token-endpoint calls in 60 s", "max_token_calls_per_60s", False),
    ("data calls failed after retries", "failed_calls", False),
    ("token waits over 1 s", "waits_over_1s", False),
]


def token_rows(result: Result | None) -> list[Row]:
    """Per token store, the shared broker on each backend next to the naive client."""
    rows = (result or {}).get("rows") or []
    shared = {(r["backend"], r["store"]): r for r in rows if r.get("mode") == "shared"}
    naive = next((r for r in rows if r.get("mode") == "naive"), None)
    table = []
    for store in list(dict.fromkeys(store for _, store in shared)) or ["local"]:
        found = {b: shared.get((b, store)) for b in ("sqlite", "postgresql")} | {"naive": naive}
        for measure, read, with_ratio in TOKEN:
            sides = {side: _side(row, read) for side, row in found.items()}
            sqlite, pg = sides["sqlite"], sides["postgresql"]
            sides["ratio"] = _ratio(sqlite, pg) if with_ratio else None
            table.append(_row(f"token contention ({store} store): {measure}", sides))
            if measure.startswith("lost"):
                table[-1] |= {"target": "0 on both", "verdict": _zeros(sqlite, pg)}
            if measure.startswith("token-wait p99"):
                table[-1]["target"] = f"< {TOKEN_WAIT_P99_TARGET_MS:g} ms on PostgreSQL"
                table[-1]["verdict"] = _verdict(pg, lambda v: v < TOKEN_WAIT_P99_TARGET_MS)
    return table


def token_notes(result: Result) -> list[str]:
    notes = []
    for row in result.get("rows") or []:
        where = " / ".join(str(row.get(key)) for key in ("mode", "backend", "store"))
        notes += [f"* lost ({where}): `{reason[:300]}`" for reason in row.get("lost_reasons") or []]
        notes += [f"* {where} failed: `{_last_line(row['error'])}`"] if "error" in row else []
    return notes


def streaming_rows(result: Result | None) -> list[Row]:
    """The repeats pooled; each flow against its baseline, the export from large to huge."""
    runs: dict[tuple[str, int], list[Result]] = defaultdict(list)
    for row in (result or {}).get("rows") or []:
        if "case" in row:
            runs[(row["case"], row["size"])].append(row)
    sizes = sorted({size for _, size in runs})

    def pooled(case: str, key: str) -> Row:
        return {size: [r[key] for r in runs.get((case, size), [])] for size in sizes}

    def seconds(case: str, size: int) -> Any:
        found = runs.get((case, size))
        return statistics.median(r["seconds"] for r in found) if found else None

    def growth(size: int) -> Any:
        return max((r["rss_growth_mb"] for r in runs.get(("export", size), [])), default=None)

    rows = [_row(f"{case}: seconds", pooled(case, "seconds")) for case in CASES]
    for ours, base in (("export", "httpx-events"), ("freshness", "httpx-kb")):
        ratios = {size: _ratio(seconds(ours, size), seconds(base, size)) for size in sizes}
        rows.append(_row(f"{ours} time / {base} time", ratios))
        if len(sizes) > 1:
            rows[-1]["target"] = f"<= {RATIO_TARGET:g} at {sizes[1]:,} items"
            rows[-1]["verdict"] = _verdict(ratios[sizes[1]], lambda v: v <= RATIO_TARGET)
    rows += [_row(f"{case}: peak RSS growth (MB)", pooled(case, "rss_growth_mb")) for case in CASES]
    rows += [_row(f"{case}: API calls", pooled(case, "api_calls")) for case in CASES]
    if len(sizes) > 2:
        large, huge = sizes[1:3]
        more = None if None in (growth(huge), growth(large)) else growth(huge) - growth(large)
        more = None if more is None else round(more, 1)
        slower = _ratio(seconds("export", huge), seconds("export", large))
        measure = f"export: peak RSS growth at {huge:,} minus at {large:,} (MB)"
        verdict = _verdict(more, lambda v: v <= HUGE_RSS_GROWTH_MB)
        rows.append(_row(measure, {huge: more}, f"<= {HUGE_RSS_GROWTH_MB:g} MB", verdict))
        measure = f"export: time at {huge:,} / at {large:,} ({huge // large}x the items)"
        verdict = _verdict(slower, lambda v: v <= HUGE_TIME_RATIO)
        rows.append(_row(measure, {huge: slower}, f"<= {HUGE_TIME_RATIO:g}", verdict))
    return rows


def demo_rows(result: Result | None) -> list[Row]:
    result, ok = result or {}, (result or {}).get("demo_exit_ok")
    walls = (result.get("demo_wall_seconds"), result.get("plain_wall_seconds"))
    rows = [
        ("make demo / plain script, wall time", result.get("demo_to_plain_ratio")),
        ("wall time, make demo / plain script (s)", walls),
        ("make demo exited 0", None if ok is None else "yes" if ok else "no"),
        ("share of the demo's wall time in start-up", result.get("startup_share_of_demo")),
        *((f"start-up phase: {k} (s)", v) for k, v in (result.get("phases_seconds") or {}).items()),
    ]
    table = [_row(measure, {"value": value}) for measure, value in rows]
    table[2] |= {"target": "yes", "verdict": UNKNOWN if ok is None else MET if ok else MISSED}
    return table


#: (measure, read from a burst, ``burst.target_checks`` keys that judge it at ``TARGET_SIZE``)
BURST: list[tuple[str, Read, tuple[str, ...]]] = [
    ("wall time, bridge run created -> every vendor managed (s)", "wall_seconds", ("wall",)),
    ("promotion runs", "promote_runs", ("runs",)),
    ("promotion runs not Completed", "runs_not_completed", ()),
    (
        "vendors managed twice / not managed",
        ("vendors_managed_twice", "vendors_not_managed"),
        ("once",),
    ),
    (
        '"database is locked" / tracebacks in the logs',
        ("database_is_locked", "tracebacks"),
        ("database_is_locked", "tracebacks"),
    ),
    ("token mints / 401s", ("mints", "401s"), ("mints", "401s")),
    ("runs started again after a crash", "runs_started_again", ()),
    ("bridge run", "bridge_state", ()),
]


def _burst_of(side: Result | None, size: int) -> Result | None:
    """The backend's burst of ``size`` vendors (None: not measured, or the side failed)."""
    if not side or "error" in side:
        return None
    return next((b for b in side.get("bursts") or [] if b.get("size") == size), None)


def _burst_value(side: Result | None, run: Result | None, read: Read) -> Any:
    if run is None:
        return "failed" if "error" in (side or {}) else None
    if "error" in run:
        return "failed"
    if read == "wall_seconds" and run.get("wall_seconds") is None:
        return "timed out" if run.get("timed_out") else "never"
    return _dig(run, read)


def _all_met(checks: dict[str, Any], keys: tuple[str, ...]) -> str:
    """Missed if a stack missed one of ``keys``; met only if every stack met every one."""
    values = [(found or {}).get(key) for found in checks.values() for key in keys]
    if any(ok is False for ok in values):
        return MISSED
    return MET if all(ok is True for ok in values) else UNKNOWN


def burst_rows(result: Result | None) -> list[Row]:
    """Each measure per size (the targets' first) and stack; the targets at ``TARGET_SIZE``."""
    sides = (result or {}).get("backends") or {}
    stacks = ["sqlite", "postgresql", *(["replicas"] if "replicas" in sides else [])]
    sizes = set(_dig(result, "config.sizes") or []) - {B.TARGET_SIZE}
    walls = B.WALL_TARGET_SECONDS
    replicas = f", <= {B.REPLICA_WALL_RATIO:g}x PostgreSQL's on the replicas"
    targets = {
        "wall": f"<= {walls['sqlite']:g} s on SQLite, <= {walls['postgresql']:g} s on PostgreSQL"
        + (replicas if len(stacks) > 2 else ""),
        "runs": f"<= {B.MAX_PROMOTION_RUNS} on each",
        "once": "0 / 0 on each",
        "database_is_locked": "0 / 0 on each",
        "mints": f"<= {B.MAX_MINTS} / 0 on each",
    }
    rows = []
    for size in [B.TARGET_SIZE, *sorted(sizes)]:
        bursts = {b: _burst_of(sides.get(b), size) for b in stacks}
        reference = (bursts["postgresql"] or {}).get("wall_seconds")
        checks = {b: run and B.target_checks(b, run, reference) for b, run in bursts.items()}
        for measure, read, judged in BURST:
            values = {b: _burst_value(sides.get(b), bursts[b], read) for b in stacks}
            wall = judged == ("wall",)
            values["ratio"] = _ratio(values["sqlite"], values["postgresql"]) if wall else None
            rows.append(_row(f"burst of {size}: {measure}", values))
            if judged and size == B.TARGET_SIZE:
                rows[-1] |= {"target": targets[judged[0]], "verdict": _all_met(checks, judged)}
    for measure, key in (("workers", "workers"), ("stack start-up (s)", "stack_startup_seconds")):
        rows.append(_row(measure, {b: _dig(sides, f"{b}.{key}") for b in stacks}))
    return rows


def burst_notes(result: Result) -> list[str]:
    """Missed targets, failures, busy machines, the tracebacks' errors, runs not completed."""
    notes = []
    sides = result.get("backends") or {}
    reference = (_burst_of(sides.get("postgresql"), B.TARGET_SIZE) or {}).get("wall_seconds")
    for backend, side in sides.items():
        label = BACKEND_LABELS.get(backend, backend)
        notes += [f"* {label} failed: `{_last_line(side['error'])}`"] if "error" in side else []
        for run in side.get("bursts") or []:
            where = f"{label}, {run.get('size')} vendors"
            if "error" in run:
                notes.append(f"* {where} failed: `{_last_line(run['error'])}`")
                continue
            missed = B.targets_missed(backend, B.target_checks(backend, run, reference))
            notes += [f"* {where}: {MISSED}: " + "; ".join(missed)] if missed else []
            if run.get("wall_vs_postgresql") is not None:
                notes.append(f"* {where}: wall time {run['wall_vs_postgresql']}x PostgreSQL's")
            share = _dig(run, "foreign_cpu.share_of_cores") or 0
            if share > BUSY_MACHINE_SHARE:
                notes.append(f"* {where}: **other processes used {share:.0%} of the cores**")
            errors = (run.get("traceback_errors") or {}).items()
            notes += [f"* {where}: {n} traceback(s) ending `{error}`" for error, n in errors]
            notes += [
                f"* {where}: run {r['name']} ended {r['state']} (runs: {r['run_count']}): "
                + r["message"][:200]
                for r in run.get("runs") or []
                if r["state"] != "COMPLETED"
            ]
    return notes


#: per benchmark: its title, what it measures, its table's rows for one run, notes on a run
SECTIONS: dict[str, tuple[str, str, Callable[..., list[Row]], Callable[[Result], list[str]]]] = {
    "add_people": (
        "1. Bulk add-people: flow vs plain asyncio-httpx",
        "The add-people flow vs a plain asyncio + httpx script on the same 10,000 and 100,000 ids "
        "(100 ms sandbox latency, 5 alternating repeats). Marginal cost ratio = "
        "(T_flow(big) - T_flow(small)) / (T_plain(big) - T_plain(small)).",
        add_people_rows,
        add_people_notes,
    ),
    "token_contention": (
        "2. Token contention: shared broker vs per-process minting",
        "8 processes x 5 flow runs ask for the token at once: the shared broker with the local "
        "and the Prefect store against a naive client (a mint per process and per 401).",
        token_rows,
        token_notes,
    ),
    "streaming_reads": (
        "3. Streaming reads: time and memory at 10,000, 100,000 and 1,000,000 items",
        "The event-log export and the freshness report against a plain httpx loop over the same "
        "pages (httpx-events, httpx-kb), 5 repeats (1 at 1,000,000); peak RSS growth.",
        streaming_rows,
        lambda result: [],
    ),
    "demo_cold_start": (
        "4. Demo cold start",
        "`make demo` (sandbox, temporary Prefect server, the demo job) from a fresh interpreter "
        "against a plain httpx script that starts the same sandbox and makes the same writes.",
        demo_rows,
        lambda result: [],
    ),
    "burst": (
        "5. Bursts of discovered vendors through the stack",
        "N vendors discovered at once on the `make serve` stack (1 worker on SQLite, 3 on "
        "PostgreSQL and on the replicas), carried by the promote deployment's trigger.",
        burst_rows,
        burst_notes,
    ),
}
#: the benchmarks whose tables hold the SQLite vs PostgreSQL targets
COMPARED = ("burst", "token_contention", "add_people")


def comparison_rows(results: dict[str, Result]) -> list[Row]:
    """The rows of the compared benchmarks' tables, for one run of each."""
    return [row for name in COMPARED for row in SECTIONS[name][2](results.get(name))]


def render(entries: list[Result]) -> str:
    runs = {name: recent(entries, name) for name in SECTIONS}
    tables = {n: aggregate([SECTIONS[n][2](e["result"]) for e in runs[n]]) for n in SECTIONS}
    judged = [row for name in COMPARED for row in tables[name] if row["verdict"]]
    counts = Counter(row["verdict"].split(" in ")[0] for row in judged)
    missed = "; ".join(row["measure"] for row in judged if row["verdict"].startswith(MISSED))
    lines = [
        "# Benchmark results",
        "",
        "Generated by `python -m bench` from [runs.json](runs.json): do not edit. Each cell: the "
        f"median over the last {RECENT_RUNS} runs, with the range (min–max); a / b cells part by "
        "part. A target is judged on each run, never on a missing number; the verdict counts the "
        "runs. Ratios and counts are the claims (docs/performance.md says what they mean). "
        "Rerun: `make bench` (half an hour on 2 cores; give it an idle machine); `uv run "
        "--no-sync python -m bench --only NAME` runs one (`--quick`: a smoke test; "
        "`--render-only`: only rewrite this page).",
        "",
        "## SQLite vs PostgreSQL: the scale-out targets",
        "",
        "The same server (for the burst the same stack) on SQLite and on PostgreSQL in one run; "
        "tables 1, 2 and 5 show them side by side; ratio = SQLite / PostgreSQL (above 1: "
        "PostgreSQL is faster).",
        "",
        f"**Targets: {counts[MET]} met, {counts[MISSED]} missed, {counts[UNKNOWN]} not judged.**"
        + (f" Missed: {missed}." if missed else ""),
        "",
    ]
    for name, (title, about, _, notes) in SECTIONS.items():
        if not runs[name]:
            continue
        latest, machine = runs[name][0], runs[name][0].get("machine") or {}
        dates = ", ".join(entry["date"] for entry in runs[name])
        lines += [f"## {title}", "", about, "", *markdown(tables[name]), ""]
        lines.append(
            f"Runs, latest first: {dates}{' (--quick)' if latest.get('quick') else ''}; "
            f"{machine.get('cpus')} cores, {machine.get('ram_gb')} GB RAM, prefect "
            f"{machine.get('prefect')}."
        )
        result = latest["result"]
        extra = [f"* Failed: `{_last_line(result['error'])}`"] if "error" in result else []
        if result.get("returncode"):
            extra.append(f"* Exit {result['returncode']}: `{_last_line(result.get('stderr'))}`")
        extra += notes(result)
        lines += ["", f"The latest run ({latest['date']}):", "", *extra, ""] if extra else [""]
    return "\n".join(lines)


def write(runs: Path, output: Path) -> None:
    output.write_text(render(load(runs)))
