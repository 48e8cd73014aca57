"""The agent, run as the head runs it (a subprocess), against the head's parser."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pynvml
import pytest

from gbatch.nodes.report import (
    ContainerReport,
    NodeReport,
    gbatch_container_ids,
    parse_report,
    parse_report_line,
)

AGENT = Path(__file__).resolve().parents[2] / "agent" / "gbatch_agent.py"
SAMPLE = AGENT.parent / "sample_report.json"
NO_DRIVER = not Path("/proc/driver/nvidia").exists()


def write_atomically(path: Path, data: object) -> None:
    # The agent may read at any moment: never let it see a half-written file.
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data) if not isinstance(data, str) else data)
    os.replace(partial, path)


def run_agent_raw(*args: str, python_flags: tuple[str, ...] = ()) -> str:
    result = subprocess.run(
        [sys.executable, *python_flags, str(AGENT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return lines[0]


def run_agent(*args: str, python_flags: tuple[str, ...] = ()) -> NodeReport:
    return parse_report_line(run_agent_raw(*args, python_flags=python_flags))


@pytest.fixture
def simulation(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.json"
    write_atomically(
        path,
        {
            "gpus": [
                {
                    "name": "Simulated GPU",
                    "memory_total_mib": 81920,
                    "memory_used_mib": 1000,
                    "utilization_pct": 5,
                    "processes": [{"pid": 4242, "used_memory_mib": 1000}],
                },
                {"name": "Simulated GPU", "memory_total_mib": 40960, "uuid": "GPU-fixed"},
            ]
        },
    )
    return path


@pytest.fixture
def watcher(simulation: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, str(AGENT), "watch", "--interval", "0.2", "--simulation-file", simulation],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


def next_report(stdout: IO[str] | None) -> NodeReport:
    assert stdout is not None
    line = stdout.readline()
    assert line, "the agent stopped printing reports"
    return parse_report_line(line)


def first_report_where(
    stdout: IO[str] | None, predicate: Callable[[NodeReport], bool], limit: int = 100
) -> NodeReport:
    # Reports printed before an edit may still sit in the pipe; the edit shows after them.
    for _ in range(limit):
        report = next_report(stdout)
        if predicate(report):
            return report
    raise AssertionError(f"no report matched within {limit} reports")


def test_probe_reports_the_simulated_gpus(simulation: Path) -> None:
    report = run_agent("probe", "--simulation-file", str(simulation))

    assert report.source == "simulation"
    assert report.note == ""
    assert [g.index for g in report.gpus] == [0, 1]
    first, second = report.gpus
    assert first.uuid == f"GPU-sim-{report.host}-0"
    assert (first.memory_total_mib, first.memory_used_mib, first.utilization_pct) == (
        81920,
        1000,
        5,
    )
    assert [(p.pid, p.used_memory_mib) for p in first.processes] == [(4242, 1000)]
    assert second.uuid == "GPU-fixed"
    assert second.processes == ()
    assert all(g.simulated for g in report.gpus)
    assert isinstance(report.disk_free_bytes, int)


def test_simulated_process_that_exists_locally_gets_its_session_from_proc(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gpus.json"
    write_atomically(path, {"gpus": [{"processes": [{"pid": os.getpid()}]}]})

    report = run_agent("probe", "--simulation-file", str(path))

    (process,) = report.gpus[0].processes
    assert process.sid == os.getsid(os.getpid())
    assert process.used_memory_mib is None


def test_simulated_process_may_name_its_session_and_container(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    container = "ab" * 32
    write_atomically(
        path, {"gpus": [{"processes": [{"pid": 999999999, "sid": 7, "container": container}]}]}
    )

    report = run_agent("probe", "--simulation-file", str(path))

    (process,) = report.gpus[0].processes
    assert (process.sid, process.container) == (7, container)


def test_broken_simulation_file_gives_a_note_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    write_atomically(path, '{"gpus": [')

    report = run_agent("probe", "--simulation-file", str(path))

    assert report.source == "simulation"
    assert report.gpus == ()
    assert str(path) in report.note


def test_simulation_file_with_a_wrong_type_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    write_atomically(path, {"gpus": [{"memory_total_mib": "80G"}]})

    report = run_agent("probe", "--simulation-file", str(path))

    assert report.gpus == ()
    assert "gpus[0].memory_total_mib" in report.note


def test_missing_simulation_file_gives_a_note(tmp_path: Path) -> None:
    report = run_agent("probe", "--simulation-file", str(tmp_path / "absent.json"))

    assert report.gpus == ()
    assert "absent.json" in report.note


@pytest.mark.skipif(not NO_DRIVER, reason="this host has an NVIDIA driver")
def test_without_driver_or_simulation_the_report_has_no_gpus_and_says_why() -> None:
    report = run_agent("probe")

    assert report.source == "none"
    assert report.gpus == ()
    assert report.note.startswith("NVML unavailable: ")


def test_without_pynvml_the_report_says_it_is_not_installed() -> None:
    # -S skips site-packages, which is where pynvml lives.
    report = run_agent("probe", python_flags=("-S",))

    assert report.source == "none"
    assert "pynvml is not installed" in report.note


def test_disk_free_is_measured_for_the_log_dir(tmp_path: Path, simulation: Path) -> None:
    report = run_agent("probe", "--simulation-file", str(simulation), "--log-dir", str(tmp_path))

    assert report.disk_free_bytes is not None
    assert report.disk_free_bytes > 0


def test_watch_prints_reports_until_stdin_is_closed(watcher: subprocess.Popen[str]) -> None:
    reports = [next_report(watcher.stdout) for _ in range(3)]
    assert watcher.stdin is not None
    watcher.stdin.close()

    assert watcher.wait(timeout=10) == 0
    assert all(len(r.gpus) == 2 for r in reports)
    assert reports[0].time < reports[1].time < reports[2].time


def test_watch_rereads_the_simulation_file_for_each_report(
    watcher: subprocess.Popen[str], simulation: Path
) -> None:
    assert len(next_report(watcher.stdout).gpus) == 2

    write_atomically(simulation, {"gpus": [{"memory_used_mib": 777}]})
    changed = first_report_where(watcher.stdout, lambda r: len(r.gpus) == 1)

    assert changed.gpus[0].memory_used_mib == 777
    assert next_report(watcher.stdout).gpus[0].memory_used_mib == 777


def test_watch_survives_a_simulation_file_broken_while_it_runs(
    watcher: subprocess.Popen[str], simulation: Path
) -> None:
    next_report(watcher.stdout)
    write_atomically(simulation, "not json")
    broken = first_report_where(watcher.stdout, lambda r: r.note != "")
    write_atomically(simulation, {"gpus": [{}]})
    mended = first_report_where(watcher.stdout, lambda r: r.note == "")

    assert broken.gpus == ()
    assert "simulation file" in broken.note
    assert len(mended.gpus) == 1
    assert mended.note == ""


def test_watch_exits_cleanly_on_sigterm(watcher: subprocess.Popen[str]) -> None:
    next_report(watcher.stdout)
    watcher.terminate()

    assert watcher.wait(timeout=10) == 0


def test_version_names_the_report_schema() -> None:
    result = subprocess.run(
        [sys.executable, str(AGENT), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert "report schema 1" in result.stdout


def test_checked_in_sample_report_parses() -> None:
    report = parse_report(json.loads(SAMPLE.read_text()))

    assert report.source == "nvml"
    assert len(report.gpus) == 2
    assert not any(g.simulated for g in report.gpus)
    # Keys added since: a card in MIG mode lists its MIG devices (the first card none).
    assert [g.mig_enabled for g in report.gpus] == [False, True]
    assert [(d.profile, len(d.processes)) for d in report.gpus[1].mig] == [
        ("3g.40gb", 1),
        ("1g.10gb", 0),
    ]
    assert [(c.state, c.exit_code) for c in report.containers] == [
        ("running", None),
        ("exited", 137),
    ]
    # Keys added since schema 1 began are optional: the second container lacks `node`.
    assert [c.node for c in report.containers] == ["gpu01", None]
    assert (report.seq, report.lease_remaining) == (7, 299.2)


def load_agent_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gbatch_agent_under_test", AGENT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def raising(error: BaseException) -> Any:
    def call(*args: object) -> object:
        raise error

    return call


@pytest.mark.parametrize(
    "code", [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND]
)
def test_nvml_query_turns_not_supported_into_na(code: int) -> None:
    agent = load_agent_module()

    assert agent.nvml_query(raising(pynvml.NVMLError(code)), "handle") is agent.NA


def test_nvml_query_passes_other_nvml_errors_on() -> None:
    agent = load_agent_module()

    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        agent.nvml_query(raising(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)))


def test_nvml_query_returns_the_value_and_passes_arguments() -> None:
    agent = load_agent_module()

    assert agent.nvml_query(lambda a, b: a + b, 2, 3) == 5


def test_container_id_is_read_from_cgroup_v1_and_v2(tmp_path: Path) -> None:
    agent = load_agent_module()
    container = "0123456789abcdef" * 4
    (tmp_path / "10").mkdir()
    (tmp_path / "10" / "cgroup").write_text(f"12:devices:/docker/{container}\n1:name=systemd:/\n")
    (tmp_path / "20").mkdir()
    (tmp_path / "20" / "cgroup").write_text(f"0::/system.slice/docker-{container}.scope\n")
    (tmp_path / "30").mkdir()
    (tmp_path / "30" / "cgroup").write_text("0::/user.slice/user-1000.slice/session-3.scope\n")

    assert agent.process_container(10, proc_root=str(tmp_path)) == container
    assert agent.process_container(20, proc_root=str(tmp_path)) == container
    assert agent.process_container(30, proc_root=str(tmp_path)) is None
    assert agent.process_container(40, proc_root=str(tmp_path)) is None


def test_docker_times_parse_with_nanoseconds_offsets_and_the_zero_time() -> None:
    agent = load_agent_module()

    assert agent.parse_docker_time("2026-01-01T00:00:00Z") == 1767225600.0
    assert agent.parse_docker_time("2026-01-01T00:00:00.125000000Z") == 1767225600.125
    assert agent.parse_docker_time("2026-01-01T00:00:00.5Z") == 1767225600.5
    assert agent.parse_docker_time("2026-01-01T02:00:00+02:00") == 1767225600.0
    assert agent.parse_docker_time("2025-12-31T23:30:00-00:30") == 1767225600.0
    assert agent.parse_docker_time("0001-01-01T00:00:00Z") is None


@pytest.mark.parametrize(
    "text", ["", "yesterday", "2026-01-01 00:00:00Z", "2026-13-01T00:00:00Z", "2026-01-01T00:00:00"]
)
def test_malformed_docker_time_is_an_error(text: str) -> None:
    agent = load_agent_module()

    with pytest.raises(ValueError):
        agent.parse_docker_time(text)


FULL_ID_A = "a1" * 32
FULL_ID_B = "b2" * 32


def inspected(
    container_id: str,
    name: str,
    status: str,
    exit_code: int,
    *,
    labels: dict[str, str] | None = None,
    started: str = "2026-01-01T00:00:00.25Z",
    finished: str = "0001-01-01T00:00:00Z",
    oom_killed: bool = False,
) -> dict[str, Any]:
    """What `docker inspect` prints for one container, reduced to what the agent reads."""
    return {
        "Id": container_id,
        "Name": "/" + name,
        "State": {
            "Status": status,
            "ExitCode": exit_code,
            "OOMKilled": oom_killed,
            "StartedAt": started,
            "FinishedAt": finished,
        },
        "Config": {
            "Labels": labels
            if labels is not None
            else {"gbatch.job": "7", "gbatch.attempt": "2", "gbatch.user": "alice"}
        },
    }


FAKE_DOCKER = """import json, sys, time
from pathlib import Path
here = Path(sys.argv[0]).parent
with open(here / "calls.log", "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
plan = json.loads((here / "plan.json").read_text())[sys.argv[1]]
time.sleep(plan.get("sleep", 0))
sys.stdout.write(plan.get("stdout", ""))
sys.stderr.write(plan.get("stderr", ""))
sys.exit(plan.get("rc", 0))
"""


class FakeDocker:
    """A docker client stand-in: answers `ps` and `inspect` as planned, logs each call."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "docker.py").write_text(FAKE_DOCKER)
        self.plan(ps="")

    @property
    def command(self) -> str:
        return shlex.join([sys.executable, str(self.directory / "docker.py")])

    def plan(
        self,
        *,
        ps: str,
        inspect: list[dict[str, Any]] | None = None,
        ps_also: dict[str, Any] | None = None,
        inspect_also: dict[str, Any] | None = None,
    ) -> None:
        """What each command prints; `*_also` overrides stdout or adds rc, stderr, sleep."""
        plan = {
            "ps": {"stdout": ps, **(ps_also or {})},
            "inspect": {"stdout": json.dumps(inspect or []), **(inspect_also or {})},
        }
        (self.directory / "plan.json").write_text(json.dumps(plan))

    def calls(self) -> list[list[str]]:
        log = self.directory / "calls.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture
def docker(tmp_path: Path) -> FakeDocker:
    directory = tmp_path / "fake-docker"
    directory.mkdir()
    return FakeDocker(directory)


def test_without_docker_option_no_containers_and_no_docker_note(simulation: Path) -> None:
    line = run_agent_raw("probe", "--simulation-file", str(simulation))

    assert json.loads(line)["containers"] == []
    assert "docker_note" not in json.loads(line)
    assert parse_report_line(line).docker_note == ""


def test_docker_containers_are_listed_with_one_ps_and_one_inspect(
    docker: FakeDocker, simulation: Path
) -> None:
    docker.plan(
        ps=f"{FULL_ID_A}\n{FULL_ID_B}\n",
        inspect=[
            inspected(
                FULL_ID_A,
                "gbatch-7-2",
                "exited",
                137,
                finished="2026-01-01T01:00:00.5Z",
                oom_killed=True,
            ),
            inspected(
                FULL_ID_B,
                "gbatch-8-1",
                "running",
                0,
                labels={"gbatch.job": "8", "gbatch.attempt": "1", "gbatch.user": "bob"},
            ),
        ],
    )

    report = run_agent("probe", "--simulation-file", str(simulation), "--docker", docker.command)

    assert report.docker_note == ""
    assert report.containers == (
        ContainerReport(
            id=FULL_ID_A,
            name="gbatch-7-2",
            job=7,
            attempt=2,
            user="alice",
            state="exited",
            exit_code=137,
            oom_killed=True,
            started_at=1767225600.25,
            finished_at=1767229200.5,
        ),
        ContainerReport(
            id=FULL_ID_B,
            name="gbatch-8-1",
            job=8,
            attempt=1,
            user="bob",
            state="running",
            exit_code=None,  # docker's 0 for a running container is not a success
            oom_killed=False,
            started_at=1767225600.25,
            finished_at=None,
        ),
    )
    assert docker.calls() == [
        ["ps", "-a", "--no-trunc", "--filter", "label=gbatch.job", "--format", "{{.ID}}"],
        ["inspect", FULL_ID_A, FULL_ID_B],
    ]
    assert gbatch_container_ids(report) == {FULL_ID_A, FULL_ID_B}


def test_no_gbatch_containers_means_no_inspect(docker: FakeDocker, simulation: Path) -> None:
    docker.plan(ps="\n")

    report = run_agent("probe", "--simulation-file", str(simulation), "--docker", docker.command)

    assert (report.containers, report.docker_note) == ((), "")
    assert [call[0] for call in docker.calls()] == ["ps"]


def test_failing_docker_gives_a_note_naming_its_error(docker: FakeDocker, simulation: Path) -> None:
    docker.plan(ps="", ps_also={"rc": 1, "stderr": "Cannot connect to the Docker daemon\n"})

    report = run_agent("probe", "--simulation-file", str(simulation), "--docker", docker.command)

    assert report.containers == ()
    assert report.docker_note == "docker ps failed (exit 1): Cannot connect to the Docker daemon"


def test_missing_docker_client_gives_a_note(tmp_path: Path, simulation: Path) -> None:
    absent = tmp_path / "no-docker"

    report = run_agent("probe", "--simulation-file", str(simulation), "--docker", str(absent))

    assert report.containers == ()
    assert report.docker_note.startswith(f"docker ps: cannot run {absent}: ")


def test_container_gone_before_inspect_is_left_out_without_a_note(
    docker: FakeDocker, simulation: Path
) -> None:
    docker.plan(
        ps=f"{FULL_ID_A}\n{FULL_ID_B}\n",
        inspect=[inspected(FULL_ID_B, "gbatch-7-2", "running", 0)],
        inspect_also={"rc": 1, "stderr": f"Error: No such object: {FULL_ID_A}\n"},
    )

    report = run_agent("probe", "--simulation-file", str(simulation), "--docker", docker.command)

    assert [c.id for c in report.containers] == [FULL_ID_B]
    assert report.docker_note == ""


def test_container_with_a_malformed_label_is_named_in_the_note(
    docker: FakeDocker, simulation: Path
) -> None:
    bad = {"gbatch.job": "seven", "gbatch.attempt": "1", "gbatch.user": "eve"}
    docker.plan(
        ps=f"{FULL_ID_A}\n{FULL_ID_B}\n",
        inspect=[
            inspected(FULL_ID_A, "odd-one", "exited", 0, labels=bad),
            inspected(FULL_ID_B, "gbatch-7-2", "created", 0, started="0001-01-01T00:00:00Z"),
        ],
    )

    report = run_agent("probe", "--simulation-file", str(simulation), "--docker", docker.command)

    (listed,) = report.containers
    assert (listed.id, listed.state, listed.exit_code, listed.started_at) == (
        FULL_ID_B,
        "created",
        None,
        None,
    )
    assert report.docker_note == (
        "container odd-one: label gbatch.job: expected a decimal integer, got 'seven'"
    )


def test_unreadable_inspect_output_gives_a_note(docker: FakeDocker, simulation: Path) -> None:
    docker.plan(ps=f"{FULL_ID_A}\n", inspect_also={"stdout": "[{"})

    report = run_agent("probe", "--simulation-file", str(simulation), "--docker", docker.command)

    assert report.containers == ()
    assert report.docker_note.startswith("docker inspect: unreadable output: ")


def test_docker_that_does_not_answer_in_time_gives_a_note(
    docker: FakeDocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = load_agent_module()
    monkeypatch.setattr(agent, "_DOCKER_TIMEOUT_S", 0.5)  # the real 10 s only slows the test
    docker.plan(ps="", ps_also={"sleep": 30})

    containers, note = agent.read_docker_containers(shlex.split(docker.command))

    assert containers == []
    assert note == "docker ps: no answer within 0.5 s"


def test_watch_keeps_reporting_while_docker_is_missing(simulation: Path, tmp_path: Path) -> None:
    options = ["--simulation-file", str(simulation), "--docker", str(tmp_path / "no-docker")]
    process = subprocess.Popen(
        [sys.executable, str(AGENT), "watch", "--interval", "0.2", *options],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        reports = [next_report(process.stdout) for _ in range(3)]
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    assert all("cannot run" in r.docker_note and r.containers == () for r in reports)


def test_empty_docker_command_is_a_usage_error() -> None:
    result = subprocess.run(
        [sys.executable, str(AGENT), "probe", "--docker", ""],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 2
    assert "--docker: must name a command" in result.stderr
