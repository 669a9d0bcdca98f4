"""One-off: the raw results block of the old bench/RESULTS.md as entries of bench/runs.json.

    uv run --no-sync python -m bench.convert_results

Each benchmark's latest run becomes one entry. The machine comes from the page's header (its
date and load average belong to the last ``make bench`` invocation only, so they are dropped);
``recorded_in`` names the commit that first held the run in RESULTS.md (the code measured is
not known exactly: a run may have measured uncommitted work).
"""

from __future__ import annotations

import json
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RECORDED_IN = {
    "add_people": "ae862cc",
    "token_contention": "ae862cc",
    "streaming_reads": "9fbf236",
    "demo_cold_start": "ae862cc",
    "burst": "b4e29ab",
}


def main() -> None:
    text = (BENCH / "RESULTS.md").read_text()
    header = json.loads(text[text.find("<!-- machine ") + 13 : text.find(" -->")])
    machine = {k: v for k, v in header.items() if k not in ("date", "load_average")}
    start, end = text.find("```json"), text.rfind("```")
    raw = json.loads(text[start + len("```json") : end])
    entries = []
    for name, result in raw.items():
        date = result.pop("measured_at")
        after = result.pop("load_average_after")
        result.pop("stdout", None)  # the module's output verbatim: its rows are kept
        if name == "burst":
            result.pop("summary", None)  # derived from the backends' bursts
        entries.append(
            {
                "benchmark": name,
                "date": date,
                "commit": None,
                "recorded_in": RECORDED_IN[name],
                "quick": False,
                "machine": machine,
                "load_average_after": after,
                "result": result,
            }
        )
    entries.sort(key=lambda entry: entry["date"])
    (BENCH / "runs.json").write_text(json.dumps(entries, indent=1) + "\n")


if __name__ == "__main__":
    main()
