"""srun, salloc and steps against a real daemon on the local node (issue 31).

`gbatch srun --gpus 1 --pty bash` in a real terminal (tmux): a prompt where the job's GPU
and id and its own terminal answer, a window resize reaching `stty size`, Ctrl-C
interrupting a `sleep` without ending the shell, `exit 3` making srun exit 3 and freeing
the GPU. `srun python3 -c 'print(1)'` on pipes; steps inside a batch job; salloc and
`srun hostname` inside it; another real user refused; a client that drops ends its
allocation; an attached srun outlives a gbatchd restart.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
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
    GBATCH,
    Head,
    kill_leftover_jobs,
    make_head,
    require_root,
    shared_home,
    wait_for,
)
from tmuxterm import Terminal, private_terminal

from gbatch.core.paths import resolve_paths
from gbatch.protocol import requests
from gbatch.protocol.client import Client

CONFIG = FAST_CONFIG + "interactive_grace_seconds: 2\n"
PY = shlex.quote(sys.executable)


def kill_leftover_steps(home: Path) -> None:
    """Steps are sessions of their own: a test must not leave any behind either."""
    for pids in (home / "run").glob("*.*/step.*/pids.json"):
        try:
            session = int(json.loads(pids.read_text())["session"])
            os.killpg(session, signal.SIGKILL)
        except (OSError, ValueError, KeyError):
            pass


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home", gpus=2, config=CONFIG)
    made.start()
    yield made
    made.stop()
    kill_leftover_steps(made.home)
    kill_leftover_jobs(made.home)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    with private_terminal() as term:
        yield term


def ask(head: Head, request: requests.Request) -> dict[str, Any]:
    with Client(resolve_paths(head.env).socket) as client:
        return client.call(request)


def free_gpus(head: Head) -> int:
    (node,) = ask(head, requests.ListNodes())["nodes"]
    return len(node["free_gpus"])


def steps(head: Head, job_id: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = ask(head, requests.ListSteps(ids=(job_id,)))["steps"]
    return found


def srun_in_background(head: Head, *argv: str) -> subprocess.Popen[str]:
    return gbatch_in_background(head, "srun", *argv)


def gbatch_in_background(head: Head, *argv: str) -> subprocess.Popen[str]:
    """`gbatch ARGV` started in the head's home, its output piped, no stdin."""
    return subprocess.Popen(
        [*GBATCH, *argv],
        env=head.env,
        cwd=head.home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def newest_job(head: Head) -> int:
    """The latest job's id (0: none yet)."""
    jobs = ask(head, requests.ListJobs(history=True, brief=True))["jobs"]
    return max((int(job["id"]) for job in jobs), default=0)


def sacct_lines(head: Head, job_id: int) -> list[str]:
    out = head.run("sacct", "-j", str(job_id), "-P", "-n", "-o", "JobID,JobName,State,ExitCode")
    return out.stdout.splitlines()


# -- pipes ------------------------------------------------------------------------------


def test_srun_prints_the_commands_output_and_exits_with_its_status(head: Head) -> None:
    done = head.run("srun", "python3", "-c", "print(1)", input="")
    assert (done.returncode, done.stdout) == (0, "1\n"), done.stderr
    failed = head.run("srun", "sh", "-c", "echo out; echo err >&2; exit 3", input="")
    assert (failed.returncode, failed.stdout) == (3, "out\n")
    assert "err\n" in failed.stderr
    job_id = newest_job(head)
    head.wait_state(job_id, "FAILED")
    assert sacct_lines(head, job_id) == [f"{job_id}|sh|FAILED|3:0", f"{job_id}.0|sh|FAILED|3:0"]
    wait_for(lambda: free_gpus(head) == 2, what="the GPUs free again")


def test_srun_feeds_its_stdin_to_the_step(head: Head) -> None:
    done = head.run("srun", "sh", "-c", "tr a-z A-Z", input="hello\n")
    assert (done.returncode, done.stdout) == (0, "HELLO\n"), done.stderr


def test_srun_inside_a_batch_job_runs_steps_of_it_on_its_gpu(head: Head) -> None:
    gbatch = f"{PY} -m gbatch"
    script = (
        f"{gbatch} srun sh -c 'echo step $SLURM_STEP_ID of $SLURM_JOB_ID on "
        f"$CUDA_VISIBLE_DEVICES'; {gbatch} srun false; echo rc=$?"
    )
    job_id = head.sbatch("-G", "1", "--wrap", script)
    head.wait_state(job_id, "COMPLETED", timeout=60)
    log = head.run("logs", str(job_id), check=True).stdout
    assert f"step 0 of {job_id} on 0" in log
    assert "rc=1" in log
    assert sacct_lines(head, job_id) == [
        f"{job_id}|wrap|COMPLETED|0:0",
        f"{job_id}.batch|batch|COMPLETED|0:0",
        f"{job_id}.0|sh|COMPLETED|0:0",
        f"{job_id}.1|false|FAILED|1:0",
    ]


def test_srun_into_a_job_not_running_is_refused_in_one_line(head: Head) -> None:
    held = head.sbatch("-H", "--wrap", "true")
    done = head.run("srun", "--jobid", str(held), "true", input="")
    assert done.returncode == 2
    assert done.stderr == (
        f"gbatch srun: error: job {held} is not running yet (PENDING); a step runs in a "
        f"running job. Wait for it (gbatch squeue -j {held})\n"
    )
    bad = head.run("srun", "--array", "1-3", "true", input="")
    assert bad.returncode == 2 and "--array is an option of sbatch, not of srun" in bad.stderr


# -- a real terminal -----------------------------------------------------------------


def test_srun_pty_bash_in_a_real_terminal(head: Head, terminal: Terminal) -> None:
    exit_file = terminal.socket.parent / "exit-status"
    srun = shlex.join([*GBATCH, "srun", "--gpus", "1", "--pty", "bash", "--norc", "--noprofile"])
    env = {**head.env, "PS1": "step$ "}
    terminal.start(f"{srun}; echo $? > {shlex.quote(str(exit_file))}", env, head.home)
    terminal.until(lambda s: "step$" in s, "the step's prompt")
    job_id = newest_job(head)

    terminal.type("echo gpus=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_ID; tty")
    screen = terminal.until(lambda s: re.search(r"/dev/pts/\d+", s), "tty's answer")
    assert f"gpus=0 job={job_id}" in screen

    terminal.resize(90, 25)
    terminal.type("stty size")
    terminal.until(lambda s: "25 90" in s, "the new size inside the step")

    terminal.type("sleep 300; echo wo''ke")  # prints "woke" only if sleep ended by itself
    wait_for(
        lambda: subprocess.run(["pgrep", "-f", "^sleep 300$"], capture_output=True).returncode == 0,
        what="sleep to start",
    )
    terminal.keys("C-c")
    terminal.type("echo still-here")
    screen = terminal.until(lambda s: "\nstill-here" in s, "the shell after Ctrl-C")
    assert "woke" not in screen

    terminal.type("exit 3")
    terminal.until_gone()
    assert exit_file.read_text().strip() == "3"
    ended = head.wait_state(job_id, "FAILED")
    assert ended["exit_code"] == 3
    wait_for(lambda: free_gpus(head) == 2, what="the GPU free again")


def test_shell_opens_beside_a_running_batch_job_and_leaves_it_running(
    head: Head, terminal: Terminal, tmp_path: Path
) -> None:
    """gbatch shell N: a login shell in the job's directory with its GPU; exit ends it alone."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    job_id = head.sbatch("-G", "1", "-D", str(workdir), "--wrap", "echo x > marker.txt; sleep 300")
    head.wait_state(job_id, "RUNNING")
    wait_for(lambda: (workdir / "marker.txt").exists(), what="the job's file")
    exit_file = terminal.socket.parent / "exit-status"
    shell = shlex.join([*GBATCH, "shell", str(job_id)])
    terminal.start(f"{shell}; echo $? > {shlex.quote(str(exit_file))}", head.env, head.home)
    # Its prompt, whatever the login shell's rc files make of it: keys typed earlier would
    # reach this terminal before srun's raw mode, which discards them.
    terminal.until(lambda s: s.rstrip().endswith(("#", "$")), "the shell's prompt")
    terminal.type("echo file=$(cat marker.txt) gpus=$CUDA_VISIBLE_DEVICES job=$SLURM_JOB_ID; tty")
    screen = terminal.until(lambda s: re.search(r"/dev/pts/\d+", s), "the shell's answer")
    assert f"file=x gpus=0 job={job_id}" in screen, screen
    terminal.type("exit 5")
    terminal.until_gone()
    assert exit_file.read_text().strip() == "5"
    assert head.state(job_id) == "RUNNING"
    assert sacct_lines(head, job_id)[-1] == f"{job_id}.0|sh|FAILED|5:0"
    head.run("scancel", str(job_id), check=True)


def test_shell_and_srun_take_an_array_task_and_sattach_refuses_a_step(head: Head) -> None:
    array = head.sbatch("--array", "1-2", "--wrap", "sleep 300")
    head.wait_state(array + 1, "RUNNING")
    done = head.run("shell", f"{array}_2", "sh", "-c", "echo task=$SLURM_ARRAY_TASK_ID", input="")
    assert (done.returncode, done.stdout) == (0, "task=2\n"), done.stderr
    done = head.run("srun", "--jobid", f"{array}_1", "sh", "-c", "echo $SLURM_JOB_ID", input="")
    assert (done.returncode, done.stdout) == (0, f"{array}\n"), done.stderr
    done = head.run("sattach", f"{array}_2", "true", input="")
    assert done.returncode == 0, done.stderr
    step = head.run("sattach", f"{array}.0", input="")
    assert step.returncode == 2
    assert step.stderr == (
        f"gbatch sattach: error: {array}.0: gbatch sattach opens a new shell in a job, and "
        f"cannot attach to step 0's input and output. Run gbatch sattach {array} for a shell "
        f"in it, or gbatch logs -f {array} for its output\n"
    )
    bad = head.run("shell", f"{array}_x", input="")
    assert bad.returncode == 2 and bad.stderr.startswith("gbatch shell: error: shell: N: "), bad
    assert [head.state(array), head.state(array + 1)] == ["RUNNING", "RUNNING"]
    head.run("scancel", str(array), check=True)


def test_salloc_then_srun_inside_it(head: Head, terminal: Terminal) -> None:
    exit_file = terminal.socket.parent / "exit-status"
    salloc = shlex.join([*GBATCH, "salloc", "-G", "1", "bash", "--norc", "--noprofile"])
    env = {**head.env, "PS1": "alloc$ "}
    terminal.start(f"{salloc}; echo $? > {shlex.quote(str(exit_file))}", env, head.home)
    screen = terminal.until(lambda s: "alloc$" in s, "salloc's shell")
    job_id = newest_job(head)
    assert f"salloc: Granted job allocation {job_id}" in screen
    terminal.type(f"{PY} -m gbatch srun hostname; echo rc=$? job=$SLURM_JOB_ID")
    screen = terminal.until(lambda s: re.search(r"rc=\d+ job=\d", s), "srun hostname inside")
    assert f"{os.uname().nodename}\n" in screen
    assert f"rc=0 job={job_id}" in screen
    terminal.type("exit")
    terminal.until_gone()
    assert exit_file.read_text().strip() == "0"
    head.wait_state(job_id, "COMPLETED")
    assert sacct_lines(head, job_id) == [
        f"{job_id}|bash|COMPLETED|0:0",
        f"{job_id}.interactive|interactive|COMPLETED|0:0",
        f"{job_id}.0|hostname|COMPLETED|0:0",
    ]


# -- clients that go away, a daemon that restarts --------------------------------------


def test_a_dropped_client_ends_its_allocation_and_frees_the_gpus(head: Head) -> None:
    srun = srun_in_background(head, "-G", "2", "sleep", "300")
    job_id = int(wait_for(lambda: (j := newest_job(head)) and steps(head, j) and j))
    step_pids = head.home / "run" / f"{job_id}.1" / "step.0" / "pids.json"
    wait_for(step_pids.exists, what="the step's shim to hold it")
    srun.kill()  # no goodbye: its connection simply closes
    srun.wait()
    ended = head.wait_state(job_id, "CANCELLED", timeout=30)
    assert ended["reason"] == "its client went away"
    (step,) = steps(head, job_id)
    assert (step["state"], step["reason"]) == ("CANCELLED", "its client went away")
    wait_for(lambda: free_gpus(head) == 2, what="the GPUs free again")


def test_a_client_gone_while_waiting_has_its_allocation_cancelled(head: Head) -> None:
    blocker = head.sbatch("-G", "2", "--wrap", "sleep 300")
    head.wait_state(blocker, "RUNNING")
    srun = srun_in_background(head, "-G", "1", "true")
    assert srun.stderr is not None
    line = srun.stderr.readline()
    match = re.fullmatch(r"srun: job (\d+) queued and waiting for resources\n", line)
    assert match, line
    job_id = int(match.group(1))
    srun.kill()
    srun.wait()
    ended = head.wait_state(job_id, "CANCELLED", timeout=30)
    assert "client went away" in str(ended["reason"])
    head.run("scancel", str(blocker), check=True)


def test_srun_immediate_gives_up_when_the_gpus_are_busy(head: Head) -> None:
    blocker = head.sbatch("-G", "2", "--wrap", "sleep 300")
    head.wait_state(blocker, "RUNNING")
    done = head.run("srun", "-I", "-G", "1", "true", input="")
    assert done.returncode == 1
    assert "Unable to allocate resources: Requested nodes are busy" in done.stderr
    assert head.state(newest_job(head)) == "CANCELLED"
    head.run("scancel", str(blocker), check=True)


def test_an_attached_srun_outlives_a_daemon_restart(head: Head) -> None:
    srun = srun_in_background(head, "sh", "-c", "echo begun; sleep 4; echo done")
    assert srun.stdout is not None
    assert srun.stdout.readline() == "begun\n"
    job_id = newest_job(head)
    head.stop()
    head.start()
    out, err = srun.communicate(timeout=60)
    assert (srun.returncode, out) == (0, "done\n"), err
    head.wait_state(job_id, "COMPLETED", timeout=30)
    assert [s["state"] for s in steps(head, job_id)] == ["COMPLETED"]


# -- who may ------------------------------------------------------------------------------


STEP_MODULES = (
    "gbatch.cli.srun",
    "gbatch.cli.stepclient",
    "gbatch.core.steps",
    "gbatch.core.stepframes",
    "gbatch.core.submitenv",
    "gbatch.jobspec.sbatchopts",
    "gbatch.jobspec.slurmopts",
    "gbatch.cli.context",
    "gbatch.cli.exits",
    "gbatch.protocol.failures",
    "gbatch.core.suggest",
    "termios",
    "tty",
    "selectors",
)


def test_another_user_is_refused_a_step_and_their_own_runs_as_them() -> None:
    require_root("to make users and run a root daemon for them")
    preload()
    preload(STEP_MODULES)
    with (
        temp_users("gbst", ["student"]) as users,
        shared_home("gbatch-steps-", config=CONFIG + "socket_mode: '666'\n") as head,
    ):
        head.start()
        student = users["student"]
        roots = head.sbatch("--wrap", "sleep 120")
        head.wait_state(roots, "RUNNING")
        out = Path(tempfile.mkdtemp(prefix="gbatch-steps-out-", dir="/tmp"))
        out.chmod(0o777)
        try:

            def refused() -> dict[str, Any]:
                os.chdir("/tmp")
                return run_cli(head.home, "srun", "--jobid", str(roots), "id")

            done = as_user(student, refused)
            assert done["rc"] == 4, done
            assert done["err"] == (
                f"gbatch srun: error: Access/permission denied: job {roots} is root's, and "
                "only its owner runs steps in it\n"
            )
            shell = as_user(student, lambda: run_cli(head.home, "shell", str(roots), "id"))
            assert shell["rc"] == 4 and shell["err"].startswith(
                "gbatch shell: error: Access/permission denied"
            ), shell
            log = (head.home / "gbatchd.log").read_text()
            assert f"user={student.name} uid={student.uid}" in log
            assert f"op=step job={roots} owner=root -> refused: not the owner" in log

            def own() -> dict[str, Any]:
                os.chdir("/tmp")
                return run_cli(head.home, "srun", "sh", "-c", f"id -u > {out}/uid")

            assert as_user(student, own)["rc"] == 0
            assert (out / "uid").read_text().strip() == str(student.uid)
            assert f"user={student.name}" in (head.home / "gbatchd.log").read_text()
        finally:
            head.run("scancel", str(roots))
            kill_leftover_steps(head.home)
            subprocess.run(["rm", "-rf", str(out)], check=False)
