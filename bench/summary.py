"""`bench/results/README.md`: the latest figures of every benchmark, gathered from their JSON.

Written by `python -m bench` after a run (and alone by `python -m bench --summary`) from each
`bench/results/<name>.json` that `bench.record.publish` wrote: per benchmark its headline figures
with their targets, the command, the conditions (when, the load average) and a link to its own
markdown and plot. A benchmark that failed in the last run is listed with its error.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.record import conditions_line, headline_table

INTRO = """# Colony's benchmarks: the latest figures

`make bench` runs every benchmark below (about an hour on a 2-core machine busy with other
work) and writes this file; `make bench-quick` runs each at a small scale as a smoke check (results in `quick/`,
not kept). One benchmark alone: its command below (each prints one JSON line and writes
`<name>.json`, `<name>.md` and, where a distribution says more than a number, `<name>.png` here).
How they work and what they compare: `docs/benchmarks.md`.

The machines these ran on are shared 2-core machines, busy with other work (the load average is
given with each): absolute figures are noisy, ratios measured within one run are what to compare.
Where a target is missed, `docs/benchmarks.md` says, with the benchmark's profile, what stands
between the figure and the target; `<name>-before.md` files keep the figures from before a change.
"""


def _section(data: dict[str, Any]) -> list[str]:
    lines = [
        f"## {data['title']}",
        "",
        f"`{data['command']}` ([details]({data['name']}.md))",
        "",
        conditions_line(data),
        "",
        headline_table(data["headlines"]),
        "",
    ]
    return lines


def _met(data: dict[str, Any]) -> str:
    verdicts = [h["met"] for h in data["headlines"] if h["met"] is not None]
    if not verdicts:
        return "reported"
    missed = verdicts.count(False)
    return "all met" if not missed else f"**{missed} missed**"


def write(folder: Path, order: list[str], failures: dict[str, str] | None = None) -> Path:
    """Write `<folder>/README.md` for the benchmarks in `order` (others found there follow);
    `failures` by name, else those of the last run (`run.json`)."""
    if failures is None and (folder / "run.json").exists():
        failures = json.loads((folder / "run.json").read_text()).get("failures") or {}
    found = {p.stem: p for p in folder.glob("*.json") if p.stem not in ("run",)}
    names = [n for n in order if n in found] + sorted(set(found) - set(order))
    results = []
    for name in names:
        data = json.loads(found[name].read_text())
        # A benchmark's latest report; not an older file of another shape, nor one kept under
        # another name for comparison (`throughput-before.json`).
        if "headlines" in data and data.get("name") == name:
            results.append(data)
    lines = [
        INTRO,
        "| benchmark | targets | measured | load average (1 min) |",
        "|---|---|---|---|",
    ]
    for data in results:
        lines.append(
            f"| [{data['title']}](#{_anchor(data['title'])}) | {_met(data)} | "
            f"{data['measured_at'][:16].replace('T', ' ')} | "
            f"{data['load_average']['start'][0]:.1f} |"
        )
    for name, error in sorted((failures or {}).items()):
        lines.append(f"| {name} | **failed in the last run**: {error} | | |")
    lines.append("")
    for data in results:
        lines += _section(data)
    path = folder / "README.md"
    path.write_text("\n".join(lines))
    return path


def _anchor(title: str) -> str:
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -")
    return kept.replace(" ", "-")
