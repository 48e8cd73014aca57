"""scancel as Slurm's, now that jobs have steps (issue 31, item 8), against a real daemon.

`scancel -s USR1 N` reaches the job's steps and not its batch shell, and the job runs on;
`-b` reaches the batch shell alone, `--full` both; `scancel N.M` ends step M alone and
the job completes; `-n`, `-p` and `-w` cancel only the jobs they select; another user is
refused. Waits are on states and files, never sleeps.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asuser import as_user, preload, run_cli, temp_users
from conftest import (
    FAST_CONFIG,
    Head,
    kill_leftover_jobs,
    make_head,
    require_root,
    shared_home,
    wait_for,
)
from test_interactive import kill_leftover_steps, steps

PY = shlex.quote(sys.executable)
SRUN = f"{PY} -m gbatch srun"


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home", gpus=2)
    made.start()
    yield made
    made.stop()
    kill_leftover_steps(made.home)
    kill_leftover_jobs(made.home)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def trapping_job(head: Head, out: Path) -> int:
    """A running job whose batch shell and step 0 each note USR1 in a file of `out`."""
    d = shlex.quote(str(out))
    step = f"trap 'echo usr1 >> {d}/step' USR1; echo up > {d}/step-up; while :; do sleep 0.1; done"
    script = (
        f"trap 'echo usr1 >> {d}/batch' USR1\n"
        f"{SRUN} sh -c {shlex.quote(step)} &\n"
        f"echo up > {d}/batch-up\n"
        "while :; do sleep 0.1; done\n"
    )
    job_id = head.sbatch("-J", "trapper", "--wrap", script)
    head.wait_state(job_id, "RUNNING")
    wait_for(lambda: (out / "step-up").exists() and (out / "batch-up").exists(), 60, "traps")
    return job_id


def test_signal_reaches_the_steps_by_default_the_shell_with_b_and_both_with_full(
    head: Head, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    job_id = trapping_job(head, out)
    head.run("scancel", "-s", "USR1", str(job_id), check=True)
    wait_for(lambda: lines(out / "step") == ["usr1"], what="USR1 in the step")
    head.run("scancel", "--batch", "--signal=SIGUSR1", str(job_id), check=True)
    wait_for(lambda: lines(out / "batch") == ["usr1"], what="USR1 in the batch shell")
    # The step had it once: the default reached no batch shell, and -b no step.
    assert lines(out / "step") == ["usr1"]
    head.run("scancel", "--full", "-s", "10", str(job_id), check=True)
    wait_for(lambda: len(lines(out / "batch")) == 2, what="USR1 in the batch shell again")
    wait_for(lambda: len(lines(out / "step")) >= 2, what="USR1 in the step again")
    assert head.state(job_id) == "RUNNING"
    assert [s["state"] for s in steps(head, job_id)] == ["RUNNING"]
    log = (head.home / "gbatchd.log").read_text()
    assert f"op=signal job={job_id}" in log and "allowed: SIGUSR1 to every step" in log
    head.run("scancel", str(job_id), check=True)
    head.wait_state(job_id, "CANCELLED")


def test_scancel_of_a_step_ends_that_step_alone_and_the_job_completes(
    head: Head, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    d = shlex.quote(str(out))
    script = f"{SRUN} sh -c 'echo up > {d}/up; sleep 300'\necho after=$? > {d}/after\n"
    job_id = head.sbatch("--wrap", script)
    wait_for(lambda: (out / "up").exists(), 60, "step 0")
    bad = head.run("scancel", f"{job_id}.x")
    assert (bad.returncode, bad.stderr) == (
        2,
        f"gbatch scancel: error: JOBID: '{job_id}.x' is not a step id. Give N.M (step M of "
        "job N), N_K.M, N.batch or N.interactive, e.g. 12.0\n",
    )
    unknown = head.run("scancel", f"{job_id}.7")
    assert (unknown.returncode, unknown.stderr) == (
        1,
        f"gbatch scancel: error: Kill job error on job step id {job_id}.7: Invalid job id "
        "specified\n",
    )
    head.run("scancel", f"{job_id}.0", check=True)
    head.wait_state(job_id, "COMPLETED")
    assert (out / "after").read_text().startswith("after=")
    (step,) = steps(head, job_id)
    assert (step["step"], step["state"]) == (0, "CANCELLED")
    gone = head.run("scancel", f"{job_id}.0")
    assert gone.returncode == 1 and "Job/step already completing or completed" in gone.stderr


def test_a_bad_signal_or_option_is_one_line_exit_2_and_a_pending_job_is_not_signalled(
    head: Head,
) -> None:
    held = head.sbatch("-H", "--wrap", "true")
    bad = head.run("scancel", "-s", "USR9", str(held))
    assert (bad.returncode, bad.stderr) == (
        2,
        "gbatch scancel: error: -s/--signal: 'USR9' is not a signal. Give a signal name or "
        "number, e.g. USR1, SIGUSR1, TERM or 10\n",
    )
    both = head.run("scancel", "-b", "--full", "-s", "USR1", str(held))
    assert (both.returncode, both.stderr) == (
        2,
        "gbatch scancel: error: -b/--batch and --full: give one of them\n",
    )
    pending = head.run("scancel", "-s", "USR1", str(held))
    assert (pending.returncode, pending.stderr) == (
        1,
        f"gbatch scancel: error: Kill job error on job id {held}: Job can not be altered "
        "now, try again later\n",
    )
    assert head.state(held) == "PENDING"
    # An array named by its id: its pending tasks are passed over, as its ended ones.
    array = head.sbatch("-H", "--array", "1-3", "--wrap", "true")
    quiet = head.run("scancel", "-s", "USR1", str(array))
    assert (quiet.returncode, quiet.stderr) == (0, "")


def test_name_and_nodelist_filters_cancel_only_the_jobs_they_select(head: Head) -> None:
    a1 = head.sbatch("-H", "-J", "alpha", "--wrap", "true")
    b1 = head.sbatch("-H", "-J", "beta", "--wrap", "true")
    a2 = head.sbatch("-H", "-J", "alpha", "--wrap", "true")
    running = head.sbatch("-J", "alpha", "--wrap", "sleep 300")
    head.wait_state(running, "RUNNING")
    # With ids, a filter narrows the jobs named: beta is named, but not an alpha.
    head.run("scancel", "-n", "alpha", str(b1), str(a1), check=True)
    assert [head.state(j) for j in (a1, b1, a2)] == ["CANCELLED", "PENDING", "PENDING"]
    # AND between filters: alpha jobs on node local are the running one alone.
    head.run("scancel", "--name=alpha", "-w", "local", check=True)
    head.wait_state(running, "CANCELLED")
    assert [head.state(j) for j in (b1, a2)] == ["PENDING", "PENDING"]
    head.run("scancel", "-w", "nosuchnode", check=True)
    head.run("scancel", "-n", "alpha,gamma", "-t", "PD", check=True)
    assert [head.state(j) for j in (b1, a2)] == ["PENDING", "CANCELLED"]


INVENTORY = """\
nodes:
  # Nothing listens on port 1: the nodes stay down, and jobs wait for them.
  - {name: fast1, host: 127.0.0.1, port: 1, connect_timeout: 1}
partitions:
  - {name: short, nodes: [fast1], default: true}
  - {name: long, nodes: [fast1]}
"""


def test_partition_filter_cancels_only_that_partitions_jobs(tmp_path: Path) -> None:
    head = make_head(tmp_path / "home")
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    head.env["GBATCH_INVENTORY"] = str(tmp_path / "inventory.yaml")
    head.start()
    try:
        short = head.sbatch("-p", "short", "--image", "alpine", "--wrap", "true")
        long1 = head.sbatch("-p", "long", "-J", "x", "--image", "alpine", "--wrap", "true")
        long2 = head.sbatch("-p", "long", "-J", "y", "--image", "alpine", "--wrap", "true")
        head.run("scancel", "-p", "long", "-n", "x", check=True)
        assert [head.state(j) for j in (short, long1, long2)] == [
            "PENDING",
            "CANCELLED",
            "PENDING",
        ]
        head.run("scancel", "--partition=long,other", check=True)
        assert [head.state(j) for j in (short, long2)] == ["PENDING", "CANCELLED"]
    finally:
        head.stop()


def test_another_user_may_not_signal_nor_cancel_a_step_of_a_job_not_theirs() -> None:
    require_root("to make users and run a root daemon for them")
    preload()
    with (
        temp_users("gbsc", ["student"]) as users,
        shared_home("gbatch-scancel-", config=FAST_CONFIG + "socket_mode: '666'\n") as head,
    ):
        head.start()
        student = users["student"]
        out = Path(tempfile.mkdtemp(prefix="gbatch-scancel-out-", dir="/tmp"))
        try:
            job_id = trapping_job(head, out)

            def refused() -> list[dict[str, Any]]:
                os.chdir("/tmp")
                return [
                    run_cli(head.home, "scancel", "-s", "USR1", "--full", str(job_id)),
                    run_cli(head.home, "scancel", f"{job_id}.0"),
                ]

            signal_, step = as_user(student, refused)
            assert (signal_["rc"], signal_["err"]) == (
                1,
                f"gbatch scancel: error: Kill job error on job id {job_id}: "
                f"Access/permission denied for job {job_id}\n",
            )
            assert (step["rc"], step["err"]) == (
                1,
                f"gbatch scancel: error: Kill job error on job step id {job_id}.0: "
                f"Access/permission denied for {job_id}.0\n",
            )
            log = (head.home / "gbatchd.log").read_text()
            assert f"op=signal job={job_id} owner=root -> refused: not the owner" in log
            assert f"op=cancel job={job_id} owner=root -> refused: not the owner" in log
            assert not (out / "batch").exists() and not (out / "step").exists()
            assert head.state(job_id) == "RUNNING"
            assert [s["state"] for s in steps(head, job_id)] == ["RUNNING"]
        finally:
            head.run("scancel", str(job_id))
            kill_leftover_steps(head.home)
            subprocess.run(["rm", "-rf", str(out)], check=False)
