"""The agent's lease: the head renews it by answering reports; once it runs out, the
host's fence kills that node's gbatch containers (and only that node's)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pytest

from gbatch.nodes.report import NodeReport, parse_report_line

AGENT = Path(__file__).resolve().parents[2] / "agent" / "gbatch_agent.py"

# Answers `ps -q ... --filter label=gbatch.node=<node> --filter status=running` with the
# ids listed in running/<node>, `ps -a` (the report's listing) with nothing, and
# `kill ID...` by removing those ids; logs every call.
FAKE_DOCKER = """import json, sys
from pathlib import Path
here = Path(sys.argv[0]).parent
args = sys.argv[1:]
with open(here / "calls.log", "a") as log:
    log.write(json.dumps(args) + "\\n")
running = here / "running"
if args[0] == "ps" and "status=running" in args:
    node = [a for a in args if a.startswith("label=gbatch.node=")][0].split("=", 2)[2]
    path = running / node
    print(path.read_text() if path.exists() else "", end="")
elif args[0] == "kill":
    for path in running.iterdir():
        left = [i for i in path.read_text().split() if i not in args[1:]]
        path.write_text("".join(i + "\\n" for i in left))
"""


class FakeDocker:
    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        (directory / "running").mkdir()
        (directory / "docker.py").write_text(FAKE_DOCKER)
        self.directory = directory

    @property
    def command(self) -> str:
        return shlex.join([sys.executable, str(self.directory / "docker.py")])

    def run(self, node: str, *ids: str) -> None:
        (self.directory / "running" / node).write_text("".join(f"{i}\n" for i in ids))

    def running(self, node: str) -> list[str]:
        return (self.directory / "running" / node).read_text().split()

    def kills(self) -> list[list[str]]:
        log = self.directory / "calls.log"
        calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        return [call[1:] for call in calls if call[0] == "kill"]


@pytest.fixture
def docker(tmp_path: Path) -> FakeDocker:
    return FakeDocker(tmp_path / "fake-docker")


def load_agent() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gbatch_agent_lease_test", AGENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    path = tmp_path / "agent"
    path.mkdir()
    (path / "gpus.json").write_text(json.dumps({"gpus": [{"memory_total_mib": 1024}]}))
    return path


@pytest.fixture
def fences() -> Iterator[list[Path]]:
    """Lease files whose fence processes must be gone after the test."""
    leases: list[Path] = []
    yield leases
    agent = load_agent()
    for lease in leases:
        lease.unlink(missing_ok=True)  # a fence with nothing to guard exits
        deadline = time.monotonic() + 5
        while agent.fence_running(str(lease)) and time.monotonic() < deadline:
            time.sleep(0.05)


def start_watch(
    agent_dir: Path,
    docker: FakeDocker,
    lease: float,
    *,
    log_dir: str | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[str]:
    argv = [sys.executable, str(AGENT), "watch", "--interval", "30"]
    argv += ["--simulation-file", str(agent_dir / "gpus.json")]
    argv += ["--log-dir", str(agent_dir) if log_dir is None else log_dir]
    argv += ["--docker", docker.command, "--lease", str(lease), "--node", "n1"]
    return subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=agent_dir
    )


def next_report(stdout: IO[str] | None) -> NodeReport:
    assert stdout is not None
    line = stdout.readline()
    assert line, "the agent stopped printing reports"
    return parse_report_line(line)


def send(watch: subprocess.Popen[str], text: str) -> None:
    assert watch.stdin is not None
    watch.stdin.write(text)
    watch.stdin.flush()


def stop(watch: subprocess.Popen[str]) -> None:
    if watch.poll() is None:
        watch.kill()
    watch.wait(timeout=10)


def wait_until(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_reports_are_numbered_and_a_renewal_grants_the_lease_from_that_report(
    agent_dir: Path, docker: FakeDocker, fences: list[Path]
) -> None:
    fences.append(agent_dir / "lease.json")
    watch = start_watch(agent_dir, docker, lease=60)
    try:
        first = next_report(watch.stdout)
        assert (first.seq, first.lease_remaining) == (1, None)
        time.sleep(0.5)
        send(watch, "renew 1\n\n")  # a renewal, then a poke for a report now
        second = next_report(watch.stdout)
        assert second.seq == 2
        # Granted from when report 1 was emitted, not from when the renewal arrived.
        assert second.lease_remaining is not None
        assert 58.0 < second.lease_remaining <= 59.6
        lease = json.loads((agent_dir / "lease.json").read_text())
        assert (lease["node"], lease["seconds"]) == ("n1", 60.0)
    finally:
        stop(watch)


def test_a_log_dir_under_the_home_is_the_logins_home_not_a_dir_named_tilde(
    tmp_path: Path, agent_dir: Path, docker: FakeDocker, fences: list[Path]
) -> None:
    # An argv quoted for the remote shell keeps `~` literal: the agent expands it.
    fences.append(agent_dir / "lease.json")
    env = {**os.environ, "HOME": str(tmp_path)}
    watch = start_watch(agent_dir, docker, lease=60, log_dir="~/agent", env=env)
    try:
        first = next_report(watch.stdout)
        assert first.disk_free_bytes is not None
        send(watch, "renew 1\n\n")
        second = next_report(watch.stdout)
        assert second.lease_problem == ""
        assert second.lease_remaining is not None
        assert (agent_dir / "lease.json").is_file()
        assert not (agent_dir / "~").exists()
    finally:
        stop(watch)


def test_a_renewal_of_an_unknown_or_older_report_changes_nothing(
    agent_dir: Path, docker: FakeDocker, fences: list[Path]
) -> None:
    fences.append(agent_dir / "lease.json")
    watch = start_watch(agent_dir, docker, lease=60)
    try:
        next_report(watch.stdout)
        send(watch, "renew 99\nrenew x\nbogus\n\n")
        assert next_report(watch.stdout).lease_remaining is None
        assert not (agent_dir / "lease.json").exists()
    finally:
        stop(watch)


def test_the_fence_kills_only_its_nodes_containers_once_the_lease_runs_out(
    agent_dir: Path, docker: FakeDocker, fences: list[Path]
) -> None:
    fences.append(agent_dir / "lease.json")
    docker.run("n1", "c1", "c2")
    docker.run("n2", "other")
    watch = start_watch(agent_dir, docker, lease=1.5)
    try:
        next_report(watch.stdout)
        send(watch, "renew 1\n")
        wait_until(lambda: (agent_dir / "lease.json").exists(), 5, "the lease file")
        time.sleep(0.8)
        assert docker.running("n1") == ["c1", "c2"], "killed before the lease ran out"
        # The head goes silent: no more renewals.
        wait_until(lambda: docker.running("n1") == [], 5, "the fence to kill n1's runs")
        wait_until(lambda: (agent_dir / "fence.log").exists(), 5, "the fence's log line")
        assert docker.running("n2") == ["other"]
        assert docker.kills() == [["c1", "c2"]]
        assert "lease expired: killed 2 container(s)" in (agent_dir / "fence.log").read_text()
    finally:
        stop(watch)
    agent = load_agent()
    wait_until(
        lambda: not agent.fence_running(str(agent_dir / "lease.json")),
        5,
        "the fence to exit with nothing left to guard",
    )


def test_a_watch_started_after_the_lease_ran_out_fences_before_its_first_report(
    agent_dir: Path, docker: FakeDocker, fences: list[Path]
) -> None:
    agent = load_agent()
    lease_file = agent_dir / "lease.json"
    fences.append(lease_file)
    expired = {"boot": agent.boot_id(), "expires": time.monotonic() - 1, "seconds": 5}
    lease_file.write_text(json.dumps({**expired, "node": "n1", "docker": []}))
    docker.run("n1", "c1")
    watch = start_watch(agent_dir, docker, lease=5)
    try:
        next_report(watch.stdout)
        assert docker.kills() == [["c1"]]
    finally:
        stop(watch)


def test_a_lease_file_of_another_boot_is_ignored(tmp_path: Path) -> None:
    agent = load_agent()
    lease_file = tmp_path / "lease.json"
    lease_file.write_text(json.dumps({"boot": "another-boot", "expires": 0.0}))
    assert agent.read_lease(str(lease_file)) == {}
    assert not agent.lease_expired(str(lease_file), time.monotonic())


def test_on_a_full_disk_the_lease_is_renewed_in_place_or_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = load_agent()
    lease_file = tmp_path / "lease.json"
    monkeypatch.setattr(agent, "ensure_fence", lambda *args: None)
    lease = agent.Lease(str(lease_file), 60.0, "n1", ["docker"])
    lease.renew(time.monotonic())
    first = agent.read_lease(str(lease_file))["expires"]

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(agent.os, "replace", full)  # no room for a new file
    lease.renew(time.monotonic() + 5)
    assert agent.read_lease(str(lease_file))["expires"] == pytest.approx(first + 5, abs=0.5)
    monkeypatch.setattr(agent.os, "pwrite", full)  # not even in place
    lease.renew(time.monotonic() + 10)
    assert "No space left on device" in lease.state()["problem"]
