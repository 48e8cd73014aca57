"""A step's own share of its job, as Slurm's srun gives it, against a real daemon (issue 31).

`gbatch srun -G 1 CMD` inside a 2-GPU job gets one of the job's GPUs (its
CUDA_VISIBLE_DEVICES and SLURM_STEP_GPUS); concurrent steps asking GPUs get disjoint
ones unless --overlap; a step whose GPUs are held by the others waits, as Slurm's srun
does; asking more than the job has is refused in one line; -c and --mem hold the step
to a part of the job's CPUs and memory; sacct's AllocTRES on step lines is the step's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FAST_CONFIG, GBATCH, Head, kill_leftover_jobs, make_head, wait_for

from gbatch.core.paths import resolve_paths
from gbatch.protocol import requests
from gbatch.protocol.client import Client


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home", gpus=2, config=FAST_CONFIG)
    made.start()
    yield made
    made.stop()
    for pids in (made.home / "run").glob("*.*/step.*/pids.json"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            os.killpg(int(json.loads(pids.read_text())["session"]), signal.SIGKILL)
    kill_leftover_jobs(made.home)


def steps(head: Head, job_id: int) -> list[dict[str, Any]]:
    with Client(resolve_paths(head.env).socket) as client:
        found: list[dict[str, Any]] = client.call(requests.ListSteps(ids=(job_id,)))["steps"]
    return found


def srun(head: Head, job_id: int, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*GBATCH, "srun", "--jobid", str(job_id), *argv],
        env=head.env,
        cwd=head.home,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


GPU_ECHO = ("sh", "-c", "echo $CUDA_VISIBLE_DEVICES/$SLURM_STEP_GPUS")


def test_steps_asking_gpus_get_their_own_of_the_jobs_and_wait_for_busy_ones(head: Head) -> None:
    job_id = head.sbatch("-G", "2", "--wrap", "sleep 300")
    head.wait_state(job_id, "RUNNING")
    first = srun(head, job_id, "-G", "1", "sleep", "300")
    wait_for(lambda: [s["gpus"] for s in steps(head, job_id)] == [[0]], what="step 0 on GPU 0")
    second = head.run("srun", "--jobid", str(job_id), "-G", "1", *GPU_ECHO, input="")
    assert (second.returncode, second.stdout) == (0, "1/1\n"), second.stderr
    # --overlap shares the GPU step 0 holds; a step asking none sees the whole job.
    shared = head.run("srun", "--jobid", str(job_id), "--overlap", "-G", "2", *GPU_ECHO, input="")
    assert (shared.returncode, shared.stdout) == (0, "1,0/1,0\n"), shared.stderr
    whole = head.run("srun", "--jobid", str(job_id), *GPU_ECHO, input="")
    assert whole.stdout == "0,1/0,1\n", whole.stderr

    # Both GPUs held: a step asking 2 waits, as Slurm's srun, until step 0 ends.
    blocker = srun(head, job_id, "-G", "1", "sleep", "300")
    wait_for(lambda: sum(s["state"] == "RUNNING" for s in steps(head, job_id)) == 2)
    waiting = srun(head, job_id, "-G", "2", *GPU_ECHO)
    assert waiting.stderr is not None
    line = waiting.stderr.readline()
    assert line.startswith(
        f"srun: Job {job_id} step creation temporarily disabled, retrying (Requested nodes are busy"
    ), line
    head.run("scancel", f"{job_id}.0", check=True)
    head.run("scancel", f"{job_id}.4", check=True)
    out, err = waiting.communicate(timeout=60)
    assert (waiting.returncode, out) == (0, "0,1/0,1\n"), err
    assert f"srun: Step created for StepId={job_id}.5\n" in err
    for proc in (first, blocker):
        proc.wait(timeout=30)

    # sacct's step lines: each step's own GPUs.
    acct = head.run("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,AllocGPUS,AllocTRES")
    lines = acct.stdout.splitlines()
    assert lines[0] == f"{job_id}|2|billing=1,cpu=1,gres/gpu=2,node=1"
    assert lines[1] == f"{job_id}.batch|2|billing=1,cpu=1,gres/gpu=2,node=1"
    assert lines[2] == f"{job_id}.0|1|billing=1,cpu=1,gres/gpu=1,node=1"
    assert lines[5] == f"{job_id}.3|2|billing=1,cpu=1,gres/gpu=2,node=1"
    head.run("scancel", str(job_id), check=True)


def test_a_step_asking_more_than_its_job_is_refused_in_one_line(head: Head) -> None:
    job_id = head.sbatch("-G", "1", "-c", "1", "--mem", "200M", "--wrap", "sleep 300")
    head.wait_state(job_id, "RUNNING")
    for ask, said in (
        (["-G", "2"], "Invalid generic resource (gres) specification: -G/--gpus 2, and the job"),
        (["-c", "2"], "More processors requested than permitted: -c/--cpus-per-task 2"),
        (["--mem", "1G"], "Memory required by task is not available: --mem 1024M"),
    ):
        done = head.run("srun", "--jobid", str(job_id), *ask, "true", input="")
        assert done.returncode == 2, done
        assert done.stderr.startswith(
            f"gbatch srun: error: Unable to create step for job {job_id}: {said}"
        ), done.stderr
        assert done.stderr.count("\n") == 1
    assert steps(head, job_id) == []
    head.run("scancel", str(job_id), check=True)


def test_a_steps_cpus_and_memory_are_a_part_of_its_jobs(head: Head) -> None:
    job_id = head.sbatch("-G", "0", "-c", "2", "--mem", "500M", "--wrap", "sleep 300")
    head.wait_state(job_id, "RUNNING")
    probe = (
        "import os, resource; "
        "print(len(os.sched_getaffinity(0)), resource.getrlimit(resource.RLIMIT_DATA)[0] >> 20, "
        "os.environ['SLURM_CPUS_PER_TASK'])"
    )
    done = head.run(
        "srun", "--jobid", str(job_id), "-c", "1", "--mem", "100M", sys.executable, "-c", probe,
        input="",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "1 100 1\n"), done.stderr
    acct = head.run("sacct", "-j", f"{job_id}", "-n", "-P", "-o", "JobID,AllocTRES", check=True)
    assert acct.stdout.splitlines()[-1] == f"{job_id}.0|billing=1,cpu=1,mem=100M,node=1"
    head.run("scancel", str(job_id), check=True)
