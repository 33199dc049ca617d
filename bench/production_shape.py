"""What the production shape changes: four benchmarks on the dev server and on `make stack`'s
Temporal (PostgreSQL, and frontend, history, matching and worker as four processes), one after
the other in one run, their figures side by side.

- `throughput`: Colony's workspaces per second against the ceiling, trivial workflows with as
  many activity calls, each measured on the same Temporal in the same run;
- `scale_out`: two workers and two API replicas against one of each;
- `api_load`: reads through the HTTP API against the same reads through the Temporal client;
- `workspace_admission --depth 1000`: a GPU release to the next admission with 1,000 waiting.

Each runs as its own process (`python -m bench.<name> ... --temporal dev|cluster`) and writes its
own results (`<name>.json` for the dev server, `<name>-cluster.json` for the production shape);
this one reads them back and writes `production_shape.json` and `.md`: the table, with each
run's conditions (the load average moves between runs on a shared machine: compare the ratios
each run measured within itself first).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.command import Command, Option
from bench.record import Headline, progress, publish, quick, results_dir, scale

COMMAND = Command(
    "production_shape",
    __doc__,
    Option("--workspaces", type=int, default=scale(200, 6), help="throughput and scale_out"),
    Option("--depth", type=int, default=scale(1000, 2), help="workspaces waiting in line"),
    Option("--releases", type=int, default=scale(10, 3), help="releases at that depth"),
    Option("--seconds", type=float, default=scale(8, 1), help="api_load, per measurement"),
    Option("--only", default="", help="comma-separated: some of the four", recorded=False),
)
SHAPES = ("dev", "cluster")
SHAPE_NAMES = {"dev": "dev server", "cluster": "production shape"}
MINUTES = 60
"""One benchmark's limit on one shape."""


@dataclass(frozen=True)
class Figure:
    """One row of the table: a benchmark's figure by its headline key (or a path into its
    figures)."""

    label: str
    read: Callable[[dict[str, Any]], float | None]
    unit: str = ""


def headline(key: str) -> Callable[[dict[str, Any]], float | None]:
    def read(data: dict[str, Any]) -> float | None:
        for item in data["headlines"]:
            if item["key"] == key:
                value = item["value"]
                return float(value) if isinstance(value, int | float) else None
        return None

    return read


def figure(*path: str) -> Callable[[dict[str, Any]], float | None]:
    def read(data: dict[str, Any]) -> float | None:
        node: Any = data["figures"]
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return float(node) if isinstance(node, int | float) else None

    return read


@dataclass(frozen=True)
class Benchmark:
    name: str
    args: Callable[[Any], list[str]]
    figures: tuple[Figure, ...]


BENCHMARKS = (
    Benchmark(
        "throughput",
        lambda a: ["--workspaces", str(a.workspaces), "--nodes", str(scale(10, 1))],
        (
            Figure(
                "Colony: workspaces deployed and deleted", headline("workspaces_per_second"), "/s"
            ),
            Figure(
                "ceiling: trivial workflows, as many calls", headline("ceiling_per_second"), "/s"
            ),
            Figure("ratio Colony / ceiling (same Temporal, same run)", headline("ratio")),
            Figure("history events per workspace", headline("events_per_workspace")),
        ),
    ),
    Benchmark(
        "scale_out",
        lambda a: ["--workspaces", str(a.workspaces), "--nodes", str(scale(10, 1))],
        (
            Figure("one worker, one API: workspaces", headline("one_by_one_per_second"), "/s"),
            Figure("two workers, two APIs: workspaces", headline("two_by_two_per_second"), "/s"),
            Figure("ratio two / one", headline("ratio")),
        ),
    ),
    Benchmark(
        "api_load",
        lambda a: ["--seconds", f"{a.seconds:g}", "--concurrency", "8"],
        (
            Figure("cluster reads through the API", headline("api_reads_per_second"), "/s"),
            Figure(
                "the same reads through the Temporal client",
                headline("direct_reads_per_second"),
                "/s",
            ),
            Figure("reads: API / Temporal client", headline("read_ratio")),
            Figure("create+delete pairs through the API", headline("api_pairs_per_second"), "/s"),
        ),
    ),
    Benchmark(
        "workspace_admission",
        lambda a: [
            "--releases",
            str(a.releases),
            "--depth",
            str(a.depth),
            "--watcher",
            "with",
        ],
        (
            Figure("release -> admitted, p50", headline("watcher_p50_ms"), "ms"),
            Figure("release -> admitted, p99", headline("watcher_p99_ms"), "ms"),
            Figure("release -> admitted, max", headline("watcher_max_ms"), "ms"),
            Figure("ledger events per release", headline("ledger_events_per_release")),
        ),
    ),
)


def run(benchmark: Benchmark, args: Any, shape: str) -> dict[str, Any] | str:
    """One benchmark on one shape: its results (what it wrote), or why it failed."""
    argv = [sys.executable, "-m", f"bench.{benchmark.name}", *benchmark.args(args)]
    argv += ["--temporal", shape]
    progress(f"=== {' '.join(argv[1:])}")
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=MINUTES * 60)
    except subprocess.TimeoutExpired:
        return f"did not finish within {MINUTES} minutes"
    name = benchmark.name if shape == "dev" else f"{benchmark.name}-cluster"
    written = results_dir() / f"{name}.json"
    if done.returncode != 0 or not written.exists():
        return f"exit {done.returncode}"
    data: dict[str, Any] = json.loads(written.read_text())
    return data


def cell(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    text = f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def table(found: dict[str, dict[str, dict[str, Any] | str]]) -> list[str]:
    """The side-by-side table of every figure (markdown lines)."""
    rows = [
        "| benchmark | figure | dev server | production shape | production / dev |",
        "|---|---|---|---|---|",
    ]
    for benchmark in BENCHMARKS:
        runs = found.get(benchmark.name)
        if runs is None:
            continue
        for item in benchmark.figures:
            values = {
                shape: item.read(data) if isinstance(data, dict) else None
                for shape, data in runs.items()
            }
            dev, cluster = values.get("dev"), values.get("cluster")
            ratio = f"{cluster / dev:.2f}" if dev and cluster is not None else "-"
            rows.append(
                f"| `{benchmark.name}` | {item.label} | {cell(dev, item.unit)} | "
                f"{cell(cluster, item.unit)} | {ratio} |"
            )
    return rows


def conditions(found: dict[str, dict[str, dict[str, Any] | str]]) -> list[str]:
    rows = ["| run | measured | seconds | load average (1 min) start / end |", "|---|---|---|---|"]
    for name, runs in found.items():
        for shape, data in runs.items():
            if isinstance(data, str):
                rows.append(f"| `{name}` on the {SHAPE_NAMES[shape]} | **failed**: {data} | | |")
                continue
            load = data["load_average"]
            rows.append(
                f"| [`{data['name']}`]({data['name']}.md) | {data['measured_at']} | "
                f"{data['seconds']:.0f} | {load['start'][0]:.1f} / {load['end'][0]:.1f} |"
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    args = COMMAND.parse(argv)
    record = COMMAND.report("The production shape beside the dev server", args)
    chosen = [b for b in BENCHMARKS if not args.only or b.name in args.only.split(",")]
    found: dict[str, dict[str, dict[str, Any] | str]] = {}
    for benchmark in chosen:
        found[benchmark.name] = {shape: run(benchmark, args, shape) for shape in SHAPES}
    failed = [
        f"{name} on the {SHAPE_NAMES[shape]}"
        for name, runs in found.items()
        for shape, data in runs.items()
        if isinstance(data, str)
    ]

    def both(name: str, read: Callable[[dict[str, Any]], float | None]) -> float | None:
        data = found.get(name, {}).get("cluster")
        return read(data) if isinstance(data, dict) else None

    record.add(
        Headline("throughput_ratio", "production shape: Colony / ceiling",
                 both("throughput", headline("ratio")), "", ">= 0.5"),
        Headline("scale_out_ratio", "production shape: two workers and APIs / one",
                 both("scale_out", headline("ratio"))),
        Headline("read_ratio", "production shape: API reads / Temporal client reads",
                 both("api_load", headline("read_ratio"))),
        Headline("admission_p99_ms", f"production shape: release -> admitted p99, {args.depth} waiting",
                 both("workspace_admission", headline("watcher_p99_ms")), "ms", "< 1000 ms"),
    )  # fmt: skip
    for item in record.headlines:
        if item.target and isinstance(item.value, int | float):
            item.met = item.value >= 0.5 if item.key == "throughput_ratio" else item.value < 1000
    record.figures = {
        name: {
            shape: data if isinstance(data, str) else data["figures"]
            for shape, data in runs.items()
        }
        for name, runs in found.items()
    }
    record.body = "\n".join(
        [
            "Each benchmark ran twice in this run, first on the dev server (one process, SQLite), "
            "then on the production shape (`make stack`'s Temporal: PostgreSQL "
            "and four processes of the pinned server), with the same sim, the same Colony "
            "processes and the same arguments. Details of each run in its own file.",
            "",
            *table(found),
            "",
            *conditions(found),
            "",
            f"**Failed**: {', '.join(failed)}." if failed else "",
        ]
    )
    publish(record)
    return 1 if failed and not quick() else 0


if __name__ == "__main__":
    sys.exit(main())
