"""How the tiers share a run under pytest-xdist (./test.sh runs `-n N --dist loadgroup`).

Most tests own everything they touch (a daemon in their own temp home, a port the kernel
or the worker's range hands out) and run on any worker. Three kinds may not:

- Tests that run containers on the machine's one docker engine (marked `docker`): every
  head numbers its jobs from 1 and names their containers `gbatch-<job>-<attempt>`, so
  two at once would fight over the names, and their clean-ups remove every gbatch
  container on the engine. They run one after another, in the group "docker-engine".
  A module marked `private_engine` runs its containers on an engine of its own
  (tests/integration/private_engine.py) and is exempt.
- The tests of a module that share a module-scoped fixture (a daemon, a run of the
  whole corpus) stay on one worker, or each worker would build the fixture again. They
  join "docker-engine" when any of them is marked `docker`.
- The modules that submit to the machine's one Slurm form the group "slurm".

Without xdist, none of this matters: the marks are only read by its scheduler.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# A run started in the background by a non-interactive shell (`./test.sh &`, a CI
# runner's script) ignores SIGINT and SIGQUIT, and every process it starts inherits
# that: a test that presses Ctrl-C on a child (squeue -i, srun, logs -f) would wait for
# ever, as a user's terminal never does. The tests run as from a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)

DOCKER_ENGINE = "docker-engine"
SLURM = "slurm"
# Modules that submit to the real Slurm that .ci/setup-slurm.sh starts.
SLURM_MODULES = {"test_slurm_differential.py", "test_slurm_output_formats.py"}
UNIT_TIER = Path(__file__).resolve().parent / "unit"


def _needs_the_engine(item: pytest.Item) -> bool:
    return (
        item.get_closest_marker("docker") is not None
        and item.get_closest_marker("private_engine") is None
    )


def _has_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(definitions[-1].scope == "module" for definitions in info.name2fixturedefs.values())


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    for module, members in by_module.items():
        name = module.rsplit("/", 1)[-1]
        sharing = [item for item in members if _has_module_fixture(item)]
        shared_group = DOCKER_ENGINE if any(map(_needs_the_engine, sharing)) else module
        for item in members:
            if name in SLURM_MODULES:
                group: str | None = SLURM
            elif item in sharing:
                group = shared_group
            else:
                group = DOCKER_ENGINE if _needs_the_engine(item) else None
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))


# The unit tier is CPU-bound; the other tiers mostly wait on daemons they started, and
# many of those waits have deadlines. On a worker, a unit test runs niced (its children
# too), so on a 2-core machine the daemons of the tests beside it get the CPU first.
# Lowering the niceness again needs root; elsewhere nothing is reniced.
UNIT_NICENESS = 10


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ or os.geteuid() != 0:
        return
    unit = item.path.is_relative_to(UNIT_TIER)
    os.setpriority(os.PRIO_PROCESS, 0, UNIT_NICENESS if unit else 0)


# Every job a test submits records the submitter's cwd as its workdir, and a real user's
# job enters it with the user's rights. A module that leaves the worker in pytest's own
# temp dir (0700, root's) fails every later real-user job on that worker with exit 126,
# far from the cause: so a module must leave the cwd where it found it, or fail here.
WORKER_CWD = os.getcwd()


@pytest.hookimpl(trylast=True)  # after the module's own fixtures were torn down
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if nextitem is not None and nextitem.path == item.path:
        return
    try:
        now: str | None = os.getcwd()
    except FileNotFoundError:  # a removed temp dir
        now = None
    if now != WORKER_CWD:
        os.chdir(WORKER_CWD)
        raise AssertionError(
            f"{item.path.name} left the worker's cwd in {now} (was {WORKER_CWD}): later "
            "tests' jobs would start there; restore it (monkeypatch.chdir)"
        )
