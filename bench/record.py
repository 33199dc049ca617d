"""How every benchmark reports: one JSON line on stdout, its figures in `bench/results/`.

A benchmark builds a `Report` (its name, the command that ran it, headline figures with their
targets, the detailed figures, a markdown body, optionally a matplotlib figure) and calls
`publish`, which writes

- `bench/results/<name>.json`: everything, with the conditions of the run (when, how long, the
  load average at its start and end, the cores, quick or full);
- `bench/results/<name>.md`: a title, the command, the conditions, the headline table and the
  body;
- `bench/results/<name>.png`, when a distribution says more than a number;

and prints the one JSON line (`{"bench": ..., "figures": {...}, "met": {...}, ...}`) that
`python -m bench` collects. Human progress goes to stderr.

`BENCH_QUICK=1` (`make bench-quick`) asks every benchmark for a small scale, a smoke check whose
results go to `bench/results/quick/` (not kept in git) so they never replace real figures;
`BENCH_RESULTS` names another folder (the tests use a temporary one).

Figures measured on the project's shared 2-core machines are noisy: what a benchmark compares is
measured in the same run, and the load average says how busy the machine was.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def quick() -> bool:
    """True under `BENCH_QUICK=1`: run at a small scale, as a smoke check."""
    return os.environ.get("BENCH_QUICK", "") not in ("", "0")


def scale(full: int, small: int) -> int:
    """`full` normally, `small` in quick mode."""
    return small if quick() else full


def results_dir() -> Path:
    if os.environ.get("BENCH_RESULTS"):
        return Path(os.environ["BENCH_RESULTS"])
    return RESULTS / "quick" if quick() else RESULTS


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [float(part) for part in Path("/proc/loadavg").read_text().split()[:3]]


def distribution(seconds: list[float]) -> dict[str, float | int]:
    """Samples in seconds as n, min, p50, p90, p99 and max in milliseconds (nearest rank)."""
    if not seconds:
        return {"n": 0}
    ordered = sorted(seconds)

    def rank(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000, 1)

    return {
        "n": len(ordered),
        "min_ms": round(ordered[0] * 1000, 1),
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p90_ms": rank(0.9),
        "p99_ms": rank(0.99),
        "max_ms": round(ordered[-1] * 1000, 1),
    }


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass
class Headline:
    """One figure the summary shows: its value, and the target it is held to (if any)."""

    key: str
    label: str
    value: float | int | str | None
    unit: str = ""
    target: str = ""
    """The aim, in words (`>= 0.5`, `< 1000 ms`); empty when the figure is only reported."""
    met: bool | None = None

    def shown(self) -> str:
        if self.value is None:
            return "-"
        if isinstance(self.value, float):
            text = f"{self.value:,.3g}" if abs(self.value) < 100 else f"{self.value:,.0f}"
        else:
            text = f"{self.value:,}" if isinstance(self.value, int) else str(self.value)
        return f"{text} {self.unit}".strip()


@dataclass
class Report:
    """What one run of one benchmark found (see the module docstring)."""

    name: str
    title: str
    command: str
    headlines: list[Headline] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    started: float = field(default_factory=time.monotonic)
    started_at: datetime = field(default_factory=lambda: datetime.now().astimezone())
    load_at_start: list[float] = field(default_factory=load_average)

    def add(self, *headlines: Headline) -> None:
        self.headlines.extend(headlines)


def _conditions(report: Report, seconds: float, load_at_end: list[float]) -> dict[str, Any]:
    return {
        "measured_at": report.started_at.isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "load_average": {"start": report.load_at_start, "end": load_at_end},
        "cores": os.cpu_count(),
        "quick": quick(),
    }


def conditions_line(data: dict[str, Any]) -> str:
    """The conditions of a run as one markdown line."""
    load = data["load_average"]
    return (
        f"Measured {data['measured_at']} in {data['seconds']:.0f} s on {data['cores']} cores, "
        f"load average {' '.join(f'{x:.2f}' for x in load['start'])} at the start and "
        f"{' '.join(f'{x:.2f}' for x in load['end'])} at the end"
        + (" (**quick mode**: a smoke check, not a measurement)" if data["quick"] else "")
        + "."
    )


def headline_table(headlines: list[dict[str, Any]]) -> str:
    rows = ["| figure | value | target | met |", "|---|---|---|---|"]
    for item in headlines:
        met = {True: "yes", False: "**no**", None: ""}[item["met"]]
        rows.append(f"| {item['label']} | {item['shown']} | {item['target']} | {met} |")
    return "\n".join(rows)


def publish(report: Report, figure: Any = None) -> dict[str, Any]:
    """Write the report's files and print its JSON line (see the module docstring)."""
    folder = results_dir()
    folder.mkdir(parents=True, exist_ok=True)
    seconds = time.monotonic() - report.started
    headlines = [{**vars(h), "shown": h.shown()} for h in report.headlines]
    data = {
        "name": report.name,
        "title": report.title,
        "command": report.command,
        **_conditions(report, seconds, load_average()),
        "headlines": headlines,
        "figures": report.figures,
    }
    (folder / f"{report.name}.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    markdown = [
        f"# {report.title}",
        "",
        f"`{report.command}`",
        "",
        conditions_line(data),
        "",
        headline_table(headlines),
        "",
        report.body.strip(),
        "",
    ]
    if figure is not None:
        figure.savefig(folder / f"{report.name}.png", dpi=100, bbox_inches="tight")
        markdown += [f"![{report.title}]({report.name}.png)", ""]
    (folder / f"{report.name}.md").write_text("\n".join(markdown))
    line = {
        "bench": report.name,
        "figures": {h["key"]: h["value"] for h in headlines},
        "met": {h["key"]: h["met"] for h in headlines if h["met"] is not None},
        "seconds": data["seconds"],
        "load_average": data["load_average"],
        "results": str(folder / f"{report.name}.json"),
    }
    print(json.dumps(line, default=str), flush=True)
    return data


def pyplot() -> Any:
    """matplotlib's pyplot without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
