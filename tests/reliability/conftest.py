"""The reliability suite's session: one private stack for every scenario, the seed, the figures.

- **Sizes.** Each scenario runs in two sizes: `full` (marked `reliability`: `make reliability`,
  i.e. `pytest --reliability -m reliability tests/reliability`) and `fast` (part of `make test`,
  about two minutes in all). Without `--reliability` the full ones are deselected; with it, the
  fast ones.
- **The seed.** `--seed N`, or a new one per session. Every scenario draws from its own
  `random.Random(f"{seed}/{scenario}")` (kill moments, fault rates' generator, pods refused), so
  its choices do not depend on which scenarios ran before it; the seed is printed in the summary
  and in every failure, with the command that repeats the run.
- **The stacks**: the dev server's (`stack.py`) and the production shape's (`cluster.py`: `make
  stack`'s processes), each started once, on first use, in the session's temporary directory
  (its processes' logs under `logs/`), stopped after the package's last test.
- **Figures.** Each scenario reports what it did and what it checked; they are printed at the end
  of the session and written to `.colony/reliability/figures.json`.
- **The secrets scan** (`test_secrets.py`) runs last of the package: it reads every history the
  others left.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.cluster import ClusterStack, running_cluster
from tests.reliability.scenario import FIGURES, Planted, Scenario, Size
from tests.reliability.stack import Stack, running_stack

SIM_TIME_SCALE = 0.2
"""Simulated steps at a fifth of the sim's default pace: a cluster in about a second, a pod's
30 s grace period in 0.2 s; slow enough that kills and restarts land inside real waits."""
FIGURES_FILE = Path(__file__).resolve().parents[2] / ".colony" / "reliability" / "figures.json"
_SESSION_SEED: dict[str, int] = {}


def session_seed(config: pytest.Config) -> int:
    if "seed" not in _SESSION_SEED:
        given = config.getoption("--seed")
        _SESSION_SEED["seed"] = (
            given if given is not None else random.SystemRandom().randrange(1, 10**6)
        )
    return _SESSION_SEED["seed"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    full = bool(config.getoption("--reliability"))
    kept, dropped = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        size = callspec.params.get("size") if callspec is not None else None
        wanted = size is not Size.FAST if full else item.get_closest_marker("reliability") is None
        (kept if wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    # The secrets scan reads what every other scenario left: after them, still in this package
    # (the stack is the package's: it stops once the package's last test ran).
    scans = [item for item in kept if item.nodeid.startswith(SECRETS_SCAN)]
    others = [item for item in kept if not item.nodeid.startswith(SECRETS_SCAN)]
    ours = [index for index, item in enumerate(others) if item.nodeid.startswith(PACKAGE)]
    at = ours[-1] + 1 if ours else len(others)
    items[:] = [*others[:at], *scans, *others[at:]]


PACKAGE = "tests/reliability/"
SECRETS_SCAN = f"{PACKAGE}test_secrets.py"


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if not FIGURES:
        return
    seed = session_seed(config)
    terminalreporter.section(f"reliability figures (seed {seed})")
    for figures in FIGURES:
        terminalreporter.write_line(json.dumps(figures, sort_keys=False))
    FIGURES_FILE.parent.mkdir(parents=True, exist_ok=True)
    FIGURES_FILE.write_text(
        json.dumps({"seed": seed, "finishedAt": time.time(), "scenarios": FIGURES}, indent=2) + "\n"
    )
    terminalreporter.write_line(f"figures written to {FIGURES_FILE}")


@pytest.fixture(scope="package")
def planted() -> Planted:
    """Every secret value the scenarios plant or come across, for the final scan."""
    return Planted()


@pytest.fixture(scope="package")
async def stack(tmp_path_factory: pytest.TempPathFactory, planted: Planted) -> AsyncIterator[Stack]:
    async with running_stack(
        tmp_path_factory.mktemp("reliability"), sim_time_scale=SIM_TIME_SCALE
    ) as running:
        planted.add_stack(running)
        await planted.add_catalog_control(running)
        yield running


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[OUTCOME] = report.outcome
    return report


OUTCOME = pytest.StashKey[str]()


@pytest.fixture(scope="package")
async def cluster(
    tmp_path_factory: pytest.TempPathFactory, planted: Planted
) -> AsyncIterator[ClusterStack]:
    """The production shape (`tests/reliability/cluster.py`), started on first use."""
    async with running_cluster(
        tmp_path_factory.mktemp("cluster"), sim_time_scale=SIM_TIME_SCALE
    ) as running:
        planted.add_stack(running)
        await planted.add_catalog_control(running)
        yield running


@pytest.fixture
def scenario(request: pytest.FixtureRequest, stack: Stack, planted: Planted) -> Iterator[Scenario]:
    """The scenario of the running test: its seed, its random generator, its report (added to
    the session's figures when it ends, with its outcome)."""
    yield from _scenario(request, stack, planted)


@pytest.fixture
def cluster_scenario(
    request: pytest.FixtureRequest, cluster: ClusterStack, planted: Planted
) -> Iterator[Scenario]:
    """A scenario on the production shape (`cluster`), reported as `scenario` reports."""
    yield from _scenario(request, cluster, planted)


def _scenario(request: pytest.FixtureRequest, stack: Stack, planted: Planted) -> Iterator[Scenario]:
    seed = session_seed(request.config)
    size = request.node.callspec.params.get("size", Size.FAST)
    name = f"{request.node.originalname}[{size.value}]"
    running = Scenario(
        name=name, nodeid=request.node.nodeid, seed=seed, size=size, stack=stack, planted=planted
    )
    yield running
    FIGURES.append(running.summary(request.node.stash.get(OUTCOME, "error")))
