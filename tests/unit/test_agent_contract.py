"""The agent, run as the head runs it (a subprocess), against the head's parser."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import IO, Any

import pynvml
import pytest

from gbatch.protocol import NodeReport, parse_report, parse_report_line

AGENT = Path(__file__).resolve().parents[2] / "agent" / "gbatch_agent.py"
SAMPLE = AGENT.parent / "sample_report.json"
NO_DRIVER = not Path("/proc/driver/nvidia").exists()


def write_atomically(path: Path, data: object) -> None:
    # The agent may read at any moment: never let it see a half-written file.
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(data) if not isinstance(data, str) else data)
    os.replace(partial, path)


def run_agent(*args: str, python_flags: tuple[str, ...] = ()) -> NodeReport:
    result = subprocess.run(
        [sys.executable, *python_flags, str(AGENT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return parse_report_line(lines[0])


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
