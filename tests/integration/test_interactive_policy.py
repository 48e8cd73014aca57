"""Interactive jobs as policy sees them, against a real daemon on the local node (issue 31).

An admin's cap on interactive time (config.yaml's max_interactive_time for the embedded
partition, an inventory partition's own key); a warning on the attached terminal before
the time limit and Slurm's lines when it ends the job; the idle-GPU policy ending an
idle `srun --pty` session and telling its terminal; squeue naming interactive jobs after
their command; interactive jobs counted against limits and fair share as batch ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_CONFIG, GBATCH, Head, kill_leftover_jobs, make_head, wait_for
from tmuxterm import Terminal, private_terminal

from gbatch.core.model import IMPLICIT_PARTITION
from gbatch.core.paths import resolve_paths
from gbatch.protocol import requests
from gbatch.protocol.client import Client

CONFIG = FAST_CONFIG + "interactive_grace_seconds: 2\n"


def kill_leftover_steps(home: Path) -> None:
    """Steps are sessions of their own: a test must not leave any behind either."""
    for pids in (home / "run").glob("*.*/step.*/pids.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            os.killpg(int(json.loads(pids.read_text())["session"]), signal.SIGKILL)


@pytest.fixture
def terminal() -> Iterator[Terminal]:
    with private_terminal() as term:
        yield term


def started(home: Path, config: str = CONFIG, gpus: int = 2) -> Head:
    head = make_head(home, gpus=gpus, config=config)
    head.start()
    return head


def stopped(head: Head) -> None:
    head.stop()
    kill_leftover_steps(head.home)
    kill_leftover_jobs(head.home)


def ask(head: Head, request: requests.Request) -> dict[str, Any]:
    with Client(resolve_paths(head.env).socket) as client:
        return client.call(request)


def newest_job(head: Head) -> int:
    jobs = ask(head, requests.ListJobs(history=True, brief=True))["jobs"]
    return max((int(job["id"]) for job in jobs), default=0)


def background(head: Head, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*GBATCH, *argv],
        env=head.env,
        cwd=head.home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def step_open(head: Head, job_id: int) -> bool:
    found = ask(head, requests.ListSteps(ids=(job_id,)))["steps"]
    return any(step["state"] == "RUNNING" for step in found)


# -- item 1: the interactive time cap ------------------------------------------------------


def test_config_caps_interactive_time_on_the_embedded_partition(tmp_path: Path) -> None:
    head = started(tmp_path / "home", CONFIG + "max_interactive_time: 10\n")
    try:
        over = head.run("srun", "-t", "20", "true", input="")
        assert over.returncode == 2
        assert over.stderr == (
            f"gbatch srun: error: -t/--time: 20:00 is over partition {IMPLICIT_PARTITION}'s "
            "max_interactive_time (10:00), the longest an srun allocation may run. Ask for at "
            "most that (-t), or queue the work with gbatch sbatch\n"
        )
        salloc = head.run("salloc", "-t", "1:00:00", "true", input="")
        assert salloc.returncode == 2 and "the longest an salloc allocation" in salloc.stderr
        assert head.run("squeue", "-h", "-t", "all", check=True).stdout == ""
        # Asking none, the cap is its limit; asking less is kept; batch jobs are not capped.
        done = head.run("srun", "true", input="")
        assert done.returncode == 0, done.stderr
        assert head.job(newest_job(head))["time_limit"] == 600
        assert head.run("srun", "-t", "5", "true", input="").returncode == 0
        assert head.job(newest_job(head))["time_limit"] == 300
        batch = head.sbatch("-t", "20", "--wrap", "true")
        assert head.job(batch)["time_limit"] == 1200
        shown = head.run("scontrol", "show", "partition", check=True).stdout
        assert "MaxTime=UNLIMITED MaxInteractiveTime=10:00" in shown
        sinfo = head.run("sinfo", "-h", "-O", "Partition:10,MaxInteractiveTime:10", check=True)
        assert sinfo.stdout.split() == [f"{IMPLICIT_PARTITION}*", "10:00"]
    finally:
        stopped(head)


INVENTORY = """\
nodes:
  # Nothing listens on port 1: the node stays down, and jobs wait for it.
  - {name: fast1, host: 127.0.0.1, port: 1, connect_timeout: 1}
partitions:
  - {name: dev, nodes: [fast1], default: true, max_time: "4:00:00",
     max_interactive_time: "1:00:00"}
  - {name: long, nodes: [fast1]}
"""


def test_an_inventory_partition_caps_interactive_time(tmp_path: Path) -> None:
    head = make_head(tmp_path / "home", config=CONFIG)
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    head.env["GBATCH_INVENTORY"] = str(tmp_path / "inventory.yaml")
    head.start()
    try:
        over = head.run("salloc", "-t", "2:00:00", "--image", "alpine", "true", input="")
        assert over.returncode == 2
        assert over.stderr == (
            "gbatch salloc: error: -t/--time: 2:00:00 is over partition dev's "
            "max_interactive_time (1:00:00), the longest an salloc allocation may run. Ask "
            "for at most that (-t), or queue the work with gbatch sbatch\n"
        )
        # Another partition without a cap takes it; sbatch is held to max_time alone.
        batch = head.run("sbatch", "-t", "2:00:00", "--image", "alpine", "--wrap", "true")
        assert batch.returncode == 0, batch.stderr
        gave_up = head.run("srun", "-I", "-p", "dev", "--image", "alpine", "true", input="")
        assert gave_up.returncode == 1  # its node is down: -I gives up, cancelling it
        assert head.job(newest_job(head))["time_limit"] == 3600
        shown = head.run("scontrol", "show", "partition", "dev", check=True).stdout
        assert "MaxTime=4:00:00 MaxInteractiveTime=1:00:00" in shown
        sinfo = head.run("sinfo", "-h", "-O", "Partition:8,Time:10,MaxInteractiveTime:10")
        assert sinfo.stdout.split() == [
            *("dev*", "4:00:00", "1:00:00"),
            *("long", "infinite", "infinite"),
        ]
    finally:
        head.stop()


# -- item 2: the time limit on the terminal ---------------------------------------------------


def test_srun_pty_is_warned_before_its_time_limit_and_told_when_it_ends(
    tmp_path: Path, terminal: Terminal
) -> None:
    head = started(tmp_path / "home")
    try:
        srun = shlex.join([*GBATCH, "srun", "-t", "0:20", "--pty", "bash", "--norc", "--noprofile"])
        env = {**head.env, "PS1": "step$ "}
        terminal.start(f"{srun}; echo srun-exit=$?; sleep 600", env, head.home)
        terminal.until(lambda s: "step$" in s, "the step's prompt")
        job_id = newest_job(head)
        # 20 s: warned a tenth of it ahead (stepnotices.warning_lead), on its own line.
        screen = terminal.until(
            lambda s: "srun-exit=" in s, "the end of the session at its limit", timeout=60
        )
        lines = [line.rstrip() for line in screen.splitlines()]
        # About 2 s left when the loop's pass sees it (less on a loaded machine).
        warned = rf"srun: Job {job_id} will be cancelled in [12] seconds? \(time limit\)"
        warnings = [line for line in lines if re.fullmatch(warned, line)]
        assert len(warnings) == 1, screen
        warning = warnings[0]
        aborted = "srun: Job step aborted: Waiting up to 1 seconds for job step to finish."
        assert aborted in lines, screen
        assert any(
            re.fullmatch(
                rf"slurmstepd: error: \*\*\* STEP {job_id}\.0 ON local CANCELLED AT "
                r"\S+ DUE TO TIME LIMIT \*\*\*",
                line,
            )
            for line in lines
        ), screen
        assert lines.index(warning) < lines.index(aborted)
        assert head.wait_state(job_id, "TIMEOUT")["state"] == "TIMEOUT"
    finally:
        stopped(head)


def test_salloc_and_a_step_in_it_are_told_of_the_time_limit(
    tmp_path: Path, terminal: Terminal
) -> None:
    head = started(tmp_path / "home")
    try:
        # 40 s: the step inside has opened well before the warning, 4 s ahead.
        salloc = shlex.join([*GBATCH, "salloc", "-t", "0:40", "bash", "--norc", "--noprofile"])
        env = {**head.env, "PS1": "alloc$ "}
        terminal.start(f"{salloc}; echo salloc-exit=$?; sleep 600", env, head.home)
        terminal.until(lambda s: "alloc$" in s, "salloc's shell")
        job_id = newest_job(head)
        terminal.type(f"{shlex.join(GBATCH)} srun sleep 100")
        wait_for(lambda: len(ask(head, requests.ListSteps(ids=(job_id,)))["steps"]) == 2)
        screen = terminal.until(lambda s: "salloc-exit=" in s, "the end at its limit", timeout=60)
        # The shell's prompt comes back when the step ends and may land in front of
        # salloc's own last words on the same line: a race between two writers, not ours.
        lines = [line.rstrip().removeprefix("alloc$ ") for line in screen.splitlines()]
        for tool in ("salloc", "srun"):
            warned = rf"{tool}: Job {job_id} will be cancelled in [1-4] seconds? \(time limit\)"
            assert any(re.fullmatch(warned, line) for line in lines), screen
        for line in (
            f"salloc: Job {job_id} has exceeded its time limit and its allocation has been "
            "revoked.",
            f"salloc: Relinquishing job allocation {job_id}",
        ):
            assert line in lines, screen
        head.wait_state(job_id, "TIMEOUT")
    finally:
        stopped(head)


# -- item 3: the idle-GPU policy -----------------------------------------------------------

IDLE_CONFIG = CONFIG + "idle_gpu: {after_minutes: 0.02, cancel_after_minutes: 0.15}\n"


def test_an_idle_srun_pty_session_is_flagged_then_ended_and_its_terminal_told(
    tmp_path: Path, terminal: Terminal
) -> None:
    home = tmp_path / "home"
    head = make_head(home, config=IDLE_CONFIG)
    idle = {"name": "Simulated GPU", "memory_total_mib": 81920, "utilization_pct": 0}
    (home / "simulated-gpus.json").write_text(json.dumps({"gpus": [idle] * 2}))
    head.start()
    try:
        srun = shlex.join([*GBATCH, "srun", "-G", "1", "--pty", "bash", "--norc", "--noprofile"])
        env = {**head.env, "PS1": "step$ "}
        terminal.start(f"{srun}; echo srun-exit=$?; sleep 600", env, head.home)
        terminal.until(lambda s: "step$" in s, "the step's prompt")
        job_id = newest_job(head)

        def reason() -> str:
            out = head.run("squeue", "-h", "-j", str(job_id), "-o", "%r", check=True).stdout
            return out.strip()

        wait_for(lambda: reason().startswith("IdleGPU: all GPUs under 5% since "), 30, "the flag")
        screen = terminal.until(lambda s: "srun-exit=" in s, "the session ended", timeout=60)
        ended = head.wait_state(job_id, "CANCELLED")
        assert str(ended["reason"]).endswith(" s (idle_gpu policy)")
        lines = [line.rstrip() for line in screen.splitlines()]
        assert f"srun: error: Job {job_id} is ending: {ended['reason']}" in lines, screen
        assert any(
            re.fullmatch(
                rf"slurmstepd: error: \*\*\* STEP {job_id}\.0 ON local CANCELLED AT \S+ \*\*\*",
                line,
            )
            for line in lines
        ), screen
        (node,) = ask(head, requests.ListNodes())["nodes"]
        wait_for(lambda: len(ask(head, requests.ListNodes())["nodes"][0]["free_gpus"]) == 2)
        assert node["name"] == "local"
    finally:
        stopped(head)


# -- item 4: squeue, limits and fair share -----------------------------------------------------


def test_interactive_jobs_show_in_squeue_and_count_against_limits_as_batch_ones(
    tmp_path: Path,
) -> None:
    limits = "limits: {max_running_jobs: 2, max_gpus: 1}\n"
    head = started(tmp_path / "home", CONFIG + limits)
    sruns: list[subprocess.Popen[str]] = []
    try:
        sruns.append(background(head, "srun", "-G", "1", "sleep", "300"))
        wait_for(lambda: newest_job(head) and step_open(head, newest_job(head)), what="srun")
        srun_job = newest_job(head)
        sruns.append(background(head, "salloc", "-G", "0", "sleep", "300"))
        wait_for(lambda: newest_job(head) > srun_job and step_open(head, newest_job(head)))
        salloc_job = newest_job(head)
        queue = head.run("squeue", "-h", "-o", "%i %j %t", check=True).stdout.splitlines()
        assert queue == [f"{srun_job} sleep R", f"{salloc_job} sleep R"]
        # The srun's GPU is the user's one GPU; the two allocations their two jobs.
        gpu_job = head.sbatch("-G", "1", "--wrap", "true")
        cpu_job = head.sbatch("-G", "0", "--wrap", "true")
        wait_for(lambda: head.job(cpu_job)["reason"] == "QOSMaxJobsPerUserLimit", 30, "cpu job")
        wait_for(
            lambda: head.job(gpu_job)["reason"] in ("QOSMaxGRESPerUser", "QOSMaxJobsPerUserLimit"),
            30,
            "gpu job",
        )
        sruns[1].terminate()  # salloc's allocation ends: one running job left, the srun's
        head.wait_state(salloc_job, "CANCELLED", "COMPLETED", "FAILED")
        head.wait_state(cpu_job, "COMPLETED")
        wait_for(lambda: head.job(gpu_job)["reason"] == "QOSMaxGRESPerUser", 30, "the GPU limit")
        refused = head.run("srun", "-I", "5", "-G", "1", "true", input="")
        assert refused.returncode == 1
        assert "Requested nodes are busy" in refused.stderr
        assert "QOSMaxGRESPerUser" in refused.stderr
        sruns[0].terminate()
        head.wait_state(gpu_job, "COMPLETED")
    finally:
        for srun in sruns:
            srun.kill()
            srun.wait()
        stopped(head)


def test_an_interactive_jobs_gpu_time_counts_in_fair_share(tmp_path: Path) -> None:
    head = started(tmp_path / "home")
    try:
        before = head.run("sshare", "-P", "-n", check=True).stdout.split("|")
        assert (before[1], before[3]) == ("0", "1.000000")
        done = head.run("srun", "-G", "2", "sleep", "2", input="")
        assert done.returncode == 0, done.stderr
        after = head.run("sshare", "-P", "-n", check=True).stdout.split("|")
        assert float(after[1]) >= 3.5  # about 2 GPUs x 2 s, decayed a little
        assert float(after[3]) < 1.0
    finally:
        stopped(head)


# -- sacct: N.batch for every batch job ------------------------------------------------------


def test_sacct_shows_a_batch_line_for_every_batch_job_that_ran(tmp_path: Path) -> None:
    head = started(tmp_path / "home")
    try:
        done = head.sbatch("--wrap", "true")
        late = head.sbatch("-t", "0:02", "--wrap", "sleep 60")
        held = head.sbatch("-H", "--wrap", "true")
        head.wait_state(done, "COMPLETED")
        head.wait_state(late, "TIMEOUT", timeout=60)
        head.run("scancel", str(held), check=True)
        out = head.run("sacct", "-n", "-P", "-o", "JobID,JobName,State", check=True).stdout
        assert out.splitlines() == [
            f"{done}|wrap|COMPLETED",
            f"{done}.batch|batch|COMPLETED",
            f"{late}|wrap|TIMEOUT",
            f"{late}.batch|batch|CANCELLED",  # as Slurm's: the script was killed
            f"{held}|wrap|CANCELLED",  # never ran: no batch step
        ]
        jobs_only = head.run("sacct", "-X", "-n", "-P", "-o", "JobID", check=True).stdout
        assert jobs_only.split() == [str(done), str(late), str(held)]
    finally:
        stopped(head)
