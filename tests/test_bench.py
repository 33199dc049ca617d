"""The benchmarks cannot rot: each one's command line answers `--help`, the cheap ones run in quick
mode through `python -m bench` and write their results, and the summary gathers them.

The benchmarks themselves (`make bench`, `make bench-quick`) start whole stacks and run for
minutes: not here. What runs here is what would break first when the code they drive changes:
their imports and arguments, and the reporting every one of them shares.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as runner
from bench import summary
from bench.command import Command, Option
from bench.profile import hot_spots
from bench.record import Headline, Report, distribution, publish

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", [pytest.param(b.name, id=b.name) for b in runner.BENCHMARKS])
def test_every_benchmark_answers_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(f"bench.{name}")
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    assert exited.value.code == 0
    assert f"python -m bench.{name}" in capsys.readouterr().out


def test_the_recorded_command_is_restated_from_the_parsed_options() -> None:
    command = Command(
        "demo",
        "A demonstration.",
        Option("--calls", type=int, default=1000),
        Option("--seconds", type=float, default=3.0, help="per measurement"),
        Option("--parallelism", default="2,10"),
        Option("--existing", action="store_true", recorded=False),
        Option("--profile", action="store_true"),
    )
    assert command.line(command.parse([])) == (
        "python -m bench.demo --calls 1000 --seconds 3 --parallelism 2,10"
    )
    args = command.parse(
        ["--profile", "--seconds", "0.25", "--existing", "--parallelism", "5", "--calls", "7"]
    )
    recorded = command.report("A demonstration", args)
    assert (recorded.name, recorded.title) == ("demo", "A demonstration")
    assert recorded.command == (
        "python -m bench.demo --calls 7 --seconds 0.25 --parallelism 5 --profile"
    )


@pytest.mark.parametrize("bench", [pytest.param(b, id=b.name) for b in runner.BENCHMARKS])
def test_every_benchmark_records_a_command_that_runs_it_again(bench: runner.Bench) -> None:
    """What a full run records (`python -m bench`'s arguments for it), given back to the
    benchmark's parser, is read as the same run."""
    command: Command = importlib.import_module(f"bench.{bench.name}").COMMAND
    assert command.name == bench.name
    recorded = command.line(command.parse(bench.args))
    assert recorded.startswith(f"python -m bench.{bench.name} ")
    again = recorded.removeprefix(command.program).split()
    given = dict(zip(bench.args[::2], bench.args[1::2], strict=True))
    assert given.items() <= dict(zip(again[::2], again[1::2], strict=True)).items()
    assert command.line(command.parse(again)) == recorded


def test_the_runner_refuses_an_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        runner.main(["--only", "throughput,no_such_bench"])
    assert exited.value.code == 2
    assert "no_such_bench" in capsys.readouterr().err


def test_a_report_is_one_json_line_and_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BENCH_RESULTS", str(tmp_path))
    monkeypatch.delenv("BENCH_QUICK", raising=False)
    report = Report("demo", "A demonstration", "python -m bench.demo")
    report.add(
        Headline("rate", "things per second", 3.25, "/s"),
        Headline("ratio", "ratio", 0.4, "", ">= 0.5", False),
    )
    report.figures = {"samples": distribution([0.1, 0.2, 0.3])}
    report.body = "Some words."
    publish(report)
    line = json.loads(capsys.readouterr().out.strip())
    assert line["bench"] == "demo"
    assert line["figures"] == {"rate": 3.25, "ratio": 0.4}
    assert line["met"] == {"ratio": False}
    saved = json.loads((tmp_path / "demo.json").read_text())
    assert saved["figures"]["samples"]["p50_ms"] == 200.0
    assert set(saved["load_average"]) == {"start", "end"}
    markdown = (tmp_path / "demo.md").read_text()
    assert "| ratio | 0.4 | >= 0.5 | **no** |" in markdown
    assert "Some words." in markdown

    written = summary.write(tmp_path, ["demo"], {"other": "exit 1: boom"})
    gathered = written.read_text()
    assert "[A demonstration](#a-demonstration)" in gathered
    assert "**1 missed**" in gathered
    assert "| other | **failed in the last run**: exit 1: boom | | |" in gathered


def test_the_cheap_benchmarks_run_in_quick_mode(tmp_path: Path) -> None:
    env = {**os.environ, "BENCH_QUICK": "1", "BENCH_RESULTS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "sim_apiserver,cli_startup"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["bench"] for line in lines] == ["sim_apiserver", "cli_startup"]
    for name in ("sim_apiserver", "cli_startup"):
        assert json.loads((tmp_path / f"{name}.json").read_text())["quick"] is True
        assert (tmp_path / f"{name}.md").exists()
    gathered = (tmp_path / "README.md").read_text()
    assert "colonyctl start-up" in gathered
    assert "Kubernetes API emulator" in gathered


def test_a_profile_is_read_back_without_the_plumbing(tmp_path: Path) -> None:
    raw = tmp_path / "worker.pyspy"
    raw.write_text(
        "thread (0x1) 3\n"  # a thread sampled with no frame of its own: not counted
        "thread (0x1);main (ceiling.py:10);run (runners.py:1);_run_once (base_events.py:2);"
        "_deploy (workspace.py:5) 4\n"
        "thread (0x2);_worker (thread.py:3);_call_blocking (kube.py:9) 2\n"
    )
    found = hot_spots(raw, seconds=1.0)
    assert found["samples"] == 6
    assert found["self"] == {"_deploy (workspace.py)": 0.667, "_call_blocking (kube.py)": 0.333}
    assert "run (runners.py)" not in found["inclusive"]
    assert found["stacks"] == {"_deploy (workspace.py)": 0.667, "_call_blocking (kube.py)": 0.333}


def test_the_ledger_benchmark_builds_the_carried_state_the_ledger_takes() -> None:
    """`bench.ledger_depth` starts each ledger from a carried line it builds itself: that state
    must be the one `CapacityLedgerWorkflow` carries (it broke silently once when it changed)."""
    from bench.ledger_depth import HOLDERS, carried_line, waiter_id
    from models.capacity import CapacityLedger

    carried = carried_line("bench-c", 5, real={HOLDERS, HOLDERS + 4})
    assert carried.state is not None
    assert carried.state.inventory_loaded
    waiting = carried.state.ledger.waiting
    assert len(waiting) == 5
    assert CapacityLedger(carried.state.ledger).waiting_count() == 5
    assert waiting[0].reply_to == waiter_id("bench-c", HOLDERS)


def test_the_api_benchmarks_client_takes_any_token(tmp_path: Path) -> None:
    """One token in 64 starts with "-", which a command line would read as an option: the client
    process of `bench.sim_apiserver` gets its token in its environment (here, always such a one)."""
    forced_dash = (
        "import secrets, sys\n"
        "real = secrets.token_urlsafe\n"
        "secrets.token_urlsafe = lambda n=32: '-' + real(n)[1:]\n"
        "from bench import sim_apiserver\n"
        "sys.exit(sim_apiserver.main(['--requests', '20', '--seconds', '0.2', '--watchers', '1',"
        " '--events', '2', '--clusters', '1', '--nodes', '2', '--pods', '10']))\n"
    )
    env = {**os.environ, "BENCH_QUICK": "1", "BENCH_RESULTS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", forced_dash],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.e2e
@pytest.mark.slow
def test_the_tenant_flood_benchmark_runs_in_quick_mode(tmp_path: Path) -> None:
    """`bench.tenant_flood` at its small scale: a private stack, the API with its default limits,
    acme's reads idle and under evil's flood from another process, one JSON line and its report
    (figures are what it is for, not what this holds it to)."""
    env = {**os.environ, "BENCH_QUICK": "1", "BENCH_RESULTS": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "bench.tenant_flood", "--flooders", "4"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["bench"] == "tenant_flood"
    assert line["figures"]["idle_p99_ms"] > 0
    assert line["figures"]["evil_answered_per_second"] > 0
    report = (tmp_path / "tenant_flood.md").read_text()
    assert "p99 flood / idle" in report


def test_a_run_on_the_production_shape_is_written_beside_the_dev_servers() -> None:
    """`--temporal cluster` names the results `<name>-cluster`: the dev server's stay."""
    command: Command = importlib.import_module("bench.throughput").COMMAND
    dev = command.report("Throughput", command.parse([]))
    cluster = command.report("Throughput", command.parse(["--temporal", "cluster"]))
    assert (dev.name, cluster.name) == ("throughput", "throughput-cluster")
    assert cluster.command.endswith("--temporal cluster")
    assert "production shape" in cluster.title


def test_the_production_shape_comparison_answers_help(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import production_shape

    with pytest.raises(SystemExit) as exited:
        production_shape.main(["--help"])
    assert exited.value.code == 0
    assert "python -m bench.production_shape" in capsys.readouterr().out


def test_the_production_shape_comparison_sets_figures_side_by_side() -> None:
    from bench import production_shape

    def ran(**values: float) -> dict[str, object]:
        return {"headlines": [{"key": k, "value": v} for k, v in values.items()], "figures": {}}

    rows = production_shape.table(
        {
            "throughput": {
                "dev": ran(workspaces_per_second=2.0, ceiling_per_second=4.0, ratio=0.5),
                "cluster": ran(workspaces_per_second=3.0, ceiling_per_second=4.0, ratio=0.75),
            },
            "api_load": {"dev": ran(read_ratio=0.5), "cluster": "exit 1"},
        }
    )
    assert (
        "| `throughput` | ratio Colony / ceiling (same Temporal, same run) | 0.5 | 0.75 | 1.50 |"
        in rows
    )
    assert "| `throughput` | Colony: workspaces deployed and deleted | 2 /s | 3 /s | 1.50 |" in rows
    assert "| `api_load` | reads: API / Temporal client | 0.5 | - | - |" in rows
