"""Steps in jobs on a GPU host reached over SSH (issue 31): srun, salloc, shell, scancel.

One host container with its own sshd (tests/integration/hosts.py); the head relays each
step's frames over an SSH channel to `docker exec` in the job's container there. The
terminal test's job runs in the host image (it has bash and python3; the fleet's
busybox test image has neither).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asuser import as_user, preload, run_cli, temp_users
from conftest import FAST_CONFIG, GBATCH, require_root, wait_for
from fleet import Fleet, build_fleet, teardown_fleet
from hosts import HOST_IMAGE
from test_interactive import STEP_MODULES, free_gpus, gbatch_in_background, newest_job, steps
from tmuxterm import Terminal, private_terminal

pytestmark = pytest.mark.docker

CONFIG = FAST_CONFIG + "interactive_grace_seconds: 2\n"


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(tmp_path, {"gpu01": 2}, config=CONFIG)
    yield built
    teardown_fleet(built)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    with private_terminal() as term:
        yield term


def running_in_containers(pattern: str) -> bool:
    """Whether a process whose command line matches `pattern` runs (containers' included:
    they share this machine's kernel)."""
    return subprocess.run(["pgrep", "-f", pattern], capture_output=True).returncode == 0


def wait_for_hosts(fleet: Fleet) -> None:
    wait_for(lambda: free_gpus(fleet.head) == 2, 60, "the host to report its GPUs")


def test_srun_pty_bash_on_a_host_in_a_real_terminal(fleet: Fleet, terminal: Terminal) -> None:
    head = fleet.head
    wait_for_hosts(fleet)
    exit_file = terminal.socket.parent / "exit-status"
    srun = shlex.join(
        [*GBATCH, "srun", "--gpus", "1", "--image", HOST_IMAGE, "--pty", "bash", "--norc"]
    )
    terminal.start(f"{srun}; echo $? > {shlex.quote(str(exit_file))}", head.env, head.home)
    terminal.until(lambda s: s.rstrip().endswith(("#", "$")), "the step's prompt", timeout=90)
    job_id = newest_job(head)
    assert head.job(job_id)["node"] == "gpu01"

    # A container job is given its GPUs by docker's --gpus, and the ids in SLURM_JOB_GPUS;
    # CUDA_VISIBLE_DEVICES is a bare job's (docs/job-files.md), and on hosts jobs are
    # containers.
    terminal.type("echo gpus=$SLURM_JOB_GPUS job=$SLURM_JOB_ID; tty")
    screen = terminal.until(lambda s: re.search(r"/dev/pts/\d+", s), "tty's answer")
    (gpu,) = head.job(job_id)["gpus"]  # type: ignore[misc]
    assert f"gpus={gpu} job={job_id}" in screen, screen

    terminal.resize(90, 25)
    terminal.type("stty size")
    terminal.until(lambda s: "25 90" in s, "the new size inside the step")

    terminal.type("sleep 302; echo wo''ke")  # prints "woke" only if sleep ended by itself
    wait_for(lambda: running_in_containers("^sleep 302$"), what="sleep to start")
    terminal.keys("C-c")
    terminal.type("echo still-here")
    screen = terminal.until(lambda s: "\nstill-here" in s, "the shell after Ctrl-C")
    assert "woke" not in screen

    terminal.type("exit 3")
    terminal.until_gone()
    assert exit_file.read_text().strip() == "3"
    ended = head.wait_state(job_id, "FAILED", timeout=60)
    assert ended["exit_code"] == 3
    wait_for(lambda: free_gpus(head) == 2, 60, "the GPU free again")


def test_srun_on_pipes_on_a_host_prints_and_exits_with_its_status(fleet: Fleet) -> None:
    head = fleet.head
    wait_for_hosts(fleet)
    done = head.run("srun", "--image", HOST_IMAGE, "python3", "-c", "print(1)", input="")
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    failed = head.run(
        "srun", "--image", fleet.image, "sh", "-c", "tr a-z A-Z; echo err >&2; exit 4",
        input="hello\n",
    )  # fmt: skip
    assert (failed.returncode, failed.stdout) == (4, "HELLO\n"), failed.stderr
    assert "err\n" in failed.stderr
    job_id = newest_job(head)
    head.wait_state(job_id, "FAILED", timeout=60)
    assert [(s["step"], s["state"], s["exit_code"]) for s in steps(head, job_id)] == [
        (0, "FAILED", 4)
    ]


def test_shell_and_scancel_signals_reach_a_batch_job_on_a_host(fleet: Fleet) -> None:
    """gbatch shell N sees the job's own files; scancel -s USR1 N.M reaches that step."""
    head = fleet.head
    script = "echo up > /tmp/only-in-here; while :; do sleep 0.1; done"
    job_id = head.sbatch("--image", fleet.image, "--wrap", script)
    head.wait_state(job_id, "RUNNING", timeout=60)
    wait_for(
        lambda: head.run("shell", str(job_id), "cat", "/tmp/only-in-here").stdout == "up\n",
        60,
        "the job's own file, read through gbatch shell",
    )
    # The step's words are docker exec's argv, quoted once for the host's shell: they
    # reach the container as words, and nothing runs in the host's shell (root there).
    marker = "/tmp/gbatch-host-injected"
    said = head.run("shell", str(job_id), "echo", f"x; touch {marker}", check=True).stdout
    assert said == f"x; touch {marker}\n"
    host = fleet.hosts["gpu01"].container.get_wrapped_container()
    assert host.exec_run(["test", "-e", marker]).exit_code == 1
    step = gbatch_in_background(
        head,
        "srun",
        "--jobid",
        str(job_id),
        "sh",
        "-c",
        "trap 'echo got-usr1; exit 6' USR1; echo ready; while :; do sleep 0.1; done",
    )
    try:
        assert step.stdout is not None
        assert step.stdout.readline() == "ready\n"
        last = max(int(s["step"]) for s in steps(head, job_id))
        head.run("scancel", "-s", "USR1", f"{job_id}.{last}", check=True)
        out, err = step.communicate(timeout=60)
        assert (step.returncode, out) == (6, "got-usr1\n"), err
    finally:
        if step.poll() is None:
            step.kill()
    assert head.state(job_id) == "RUNNING"
    head.run("scancel", str(job_id), check=True)
    head.wait_state(job_id, "CANCELLED", timeout=60)


def test_a_dropped_client_ends_its_allocation_on_a_host(fleet: Fleet) -> None:
    head = fleet.head
    wait_for_hosts(fleet)
    srun = gbatch_in_background(head, "srun", "-G", "2", "--image", fleet.image, "sleep", "303")
    job_id = int(wait_for(lambda: (j := newest_job(head)) and steps(head, j) and j, 60))
    wait_for(lambda: running_in_containers("^sleep 303$"), 60, "the step to run")
    srun.kill()  # no goodbye: its connection simply closes
    srun.wait()
    ended = head.wait_state(job_id, "CANCELLED", timeout=60)
    assert ended["reason"] == "its client went away"
    (step,) = steps(head, job_id)
    assert (step["state"], step["reason"]) == ("CANCELLED", "its client went away")
    wait_for(lambda: free_gpus(head) == 2, 60, "the GPUs free again")


def test_a_dropped_shell_is_hung_up_and_the_job_runs_on(fleet: Fleet) -> None:
    head = fleet.head
    job_id = head.sbatch("--image", fleet.image, "--wrap", "sleep 300")
    head.wait_state(job_id, "RUNNING", timeout=60)
    shell = gbatch_in_background(head, "shell", str(job_id), "sleep", "304")
    wait_for(lambda: running_in_containers("^sleep 304$"), 60, "the shell's command to run")
    shell.kill()
    shell.wait()
    wait_for(lambda: steps(head, job_id)[0]["state"] == "CANCELLED", 60, "the step's end")
    wait_for(lambda: not running_in_containers("^sleep 304$"), 60, "the step's process to end")
    assert head.state(job_id) == "RUNNING"
    head.run("scancel", str(job_id), check=True)


def test_a_gbatchd_restart_ends_a_hosts_step_and_hangs_it_up(fleet: Fleet) -> None:
    head = fleet.head
    job_id = head.sbatch("--image", fleet.image, "--wrap", "sleep 300")
    head.wait_state(job_id, "RUNNING", timeout=60)
    shell = gbatch_in_background(head, "shell", str(job_id), "sh", "-c", "echo up; sleep 305")
    assert shell.stdout is not None
    first = shell.stdout.readline()
    if first != "up\n":  # say why the shell did not start
        shell.kill()
        raise AssertionError(f"{first!r}; stderr: {shell.communicate(timeout=10)[1]!r}")
    head.stop()
    _, err = shell.communicate(timeout=60)
    assert shell.returncode == 255
    assert "relay to gpu01 ended" in err, err
    head.start()
    wait_for(lambda: steps(head, job_id)[0]["state"] == "CANCELLED", 60, "the step's end")
    (step,) = steps(head, job_id)
    assert "ended with an earlier gbatchd" in step["reason"], step
    wait_for(lambda: not running_in_containers("^sleep 305$"), 60, "the step's process to end")
    assert head.state(job_id) == "RUNNING"
    head.run("scancel", str(job_id), check=True)


def test_another_user_is_refused_steps_in_a_job_on_a_host() -> None:
    require_root("to make users and run a root daemon for them")
    preload()
    preload(STEP_MODULES)
    # A head other users reach (as shared_home makes one): pytest's tmp_path is private.
    base = Path(tempfile.mkdtemp(prefix="gbatch-fleet-steps-", dir="/tmp"))
    base.chmod(0o755)
    fleet = build_fleet(base, {"gpu01": 1}, config=CONFIG + "socket_mode: '666'\n")
    try:
        head = fleet.head
        head.home.chmod(0o711)
        with temp_users("gbfs", ["student"]) as users:
            student = users["student"]
            job_id = head.sbatch("--image", fleet.image, "--wrap", "sleep 120")
            head.wait_state(job_id, "RUNNING", timeout=60)
            for argv in (
                ["srun", "--jobid", str(job_id), "id"],
                ["shell", str(job_id), "id"],
                ["sattach", str(job_id), "id"],
            ):

                def refused(argv: list[str] = argv) -> dict[str, Any]:
                    os.chdir("/tmp")
                    return run_cli(head.home, *argv)

                done = as_user(student, refused)
                assert done["rc"] == 4, done
                assert done["err"].startswith(f"gbatch {argv[0]}: error: Access/permission denied")
            log = (head.home / "gbatchd.log").read_text()
            assert f"op=step job={job_id} owner=root -> refused: not the owner" in log
            assert steps(head, job_id) == []
            head.run("scancel", str(job_id), check=True)
    finally:
        teardown_fleet(fleet)
        shutil.rmtree(base, ignore_errors=True)
