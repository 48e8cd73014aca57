"""Job dependencies (sbatch -d/--dependency, issue 14) through the real CLI and daemon:
bare --wrap jobs on the local node. A first job waits for a file the test creates, so
each test decides when it ends and waits on states, never on time."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

from conftest import FAST_CONFIG, GBATCH, Head, kill_leftover_jobs, make_head, wait_for


def until(flag: Path, then: str = "true") -> str:
    """A command that waits for `flag` to exist, then runs `then`."""
    return f"while [ ! -e {flag} ]; do sleep 0.05; done; {then}"


def wait_reason(head: Head, job_id: int, reason: str) -> dict[str, object]:
    wait_for(
        lambda: head.job(job_id)["reason"] == reason,
        what=f"job {job_id} to wait with reason {reason} (now {head.job(job_id)['reason']})",
    )
    return head.job(job_id)


def show(head: Head, job_id: int) -> str:
    return head.run("scontrol", "show", "job", str(job_id), check=True).stdout


def test_an_afterok_chain_runs_in_order(head: Head, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    first = head.sbatch("--wrap", until(flag))
    second = head.sbatch("-d", f"afterok:{first}", "--wrap", "true")
    third = head.sbatch(f"--dependency=afterok:{second}", "--wrap", "true")
    head.wait_state(first, "RUNNING")
    wait_reason(head, second, "Dependency")
    wait_reason(head, third, "Dependency")
    assert f"Dependency=afterok:{first}(unfulfilled)" in show(head, second)
    squeue = head.run("squeue", check=True).stdout
    assert "(Dependency)" in squeue
    flag.touch()
    done = [head.wait_state(job, "COMPLETED") for job in (first, second, third)]
    for before, after in itertools.pairwise(done):
        assert after["start_time"] >= before["end_time"]  # type: ignore[operator]
    assert "Dependency=(null)" in show(head, third)


def test_afternotok_on_a_job_that_succeeds_is_never_satisfied(head: Head) -> None:
    first = head.sbatch("--wrap", "true")
    cleanup = head.sbatch("-d", f"afternotok:{first}", "--wrap", "true")
    head.wait_state(first, "COMPLETED")
    wait_reason(head, cleanup, "DependencyNeverSatisfied")
    assert head.state(cleanup) == "PENDING"
    assert f"Dependency=afternotok:{first}(failed)" in show(head, cleanup)
    # afternotok on one that fails runs.
    failing = head.sbatch("--wrap", "exit 3")
    rescue = head.sbatch("-d", f"afternotok:{failing}", "--wrap", "true")
    head.wait_state(rescue, "COMPLETED")
    assert head.state(failing) == "FAILED"


def test_kill_invalid_depend_cancels_a_job_that_can_never_run(tmp_path: Path) -> None:
    head = make_head(tmp_path / "home", config=FAST_CONFIG + "kill_invalid_depend: true\n")
    head.start()
    try:
        first = head.sbatch("--wrap", "exit 1")
        dependent = head.sbatch("-d", f"afterok:{first}", "--wrap", "true")
        job = head.wait_state(dependent, "CANCELLED")
        assert job["start_time"] is None
        assert "kill_invalid_depend" in show(head, dependent)
    finally:
        head.stop()
        kill_leftover_jobs(head.home)


def test_singleton_runs_one_job_of_a_name_at_a_time(head: Head, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    first = head.sbatch("-J", "solo", "-d", "singleton", "--wrap", until(flag))
    second = head.sbatch("-J", "solo", "-d", "singleton", "--wrap", "true")
    other = head.sbatch("-J", "other", "-d", "singleton", "--wrap", "true")
    head.wait_state(first, "RUNNING")
    head.wait_state(other, "COMPLETED")  # another name is not held back
    wait_reason(head, second, "Dependency")
    flag.touch()
    done = head.wait_state(second, "COMPLETED")
    assert done["start_time"] >= head.job(first)["end_time"]  # type: ignore[operator]


def test_a_script_directive_names_the_job_it_waits_for(head: Head, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    first = head.sbatch("--wrap", until(flag))
    script = tmp_path / "next.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH --dependency=afterok:{first}\necho next\n")
    dependent = head.sbatch(str(script))
    wait_reason(head, dependent, "Dependency")
    flag.touch()
    head.wait_state(dependent, "COMPLETED")
    assert head.run("logs", str(dependent), check=True).stdout.splitlines() == ["next"]


def test_a_pending_dependent_keeps_waiting_across_a_daemon_restart(
    head: Head, tmp_path: Path
) -> None:
    flag = tmp_path / "go"
    first = head.sbatch("--wrap", until(flag))
    dependent = head.sbatch("-d", f"afterany:{first}", "--wrap", "true")
    head.wait_state(first, "RUNNING")
    wait_reason(head, dependent, "Dependency")
    head.stop()
    head.start()
    head.wait_state(first, "RUNNING")
    wait_reason(head, dependent, "Dependency")
    assert head.state(dependent) == "PENDING"
    flag.touch()
    head.wait_state(dependent, "COMPLETED")


def test_an_unknown_job_id_is_refused_at_submit(head: Head) -> None:
    result = head.run("sbatch", "-d", "afterok:999", "--wrap", "true")
    assert result.returncode == 2
    assert result.stderr.startswith("gbatch sbatch: error: dependency: job 999 does not exist")
    assert len(result.stderr.splitlines()) == 1
    bad = head.run("sbatch", "-d", "afterok:1,afterany:2?afterok:3", "--wrap", "true")
    assert bad.returncode == 2
    assert bad.stderr.startswith("gbatch sbatch: error: -d/--dependency: both , and ? are used")
    assert head.run("squeue", "--noheader", check=True).stdout.strip() == ""


def test_a_dependency_on_an_array_waits_for_all_its_tasks(head: Head, tmp_path: Path) -> None:
    flag = tmp_path / "go"
    out = head.run("sbatch", "--parsable", "--array", "2", "--wrap", until(flag), check=True)
    first = int(out.stdout.strip())
    dependent = head.sbatch("-d", f"afterok:{first}", "--wrap", "true")
    wait_reason(head, dependent, "Dependency")
    assert f"Dependency=afterok:{first}_*(unfulfilled)" in show(head, dependent)
    flag.touch()
    done = head.wait_state(dependent, "COMPLETED")
    assert done["start_time"] >= head.job(first + 1)["end_time"]  # type: ignore[operator]


def test_sbatch_help_documents_dependency() -> None:
    out = subprocess.run([*GBATCH, "sbatch", "--help"], capture_output=True, text=True).stdout
    assert "--dependency" in out and "afternotok" in out
