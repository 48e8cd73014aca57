"""srun's tasks inside a job (issue 32, Slurm's form): `srun -n 3` in a one-node allocation.

The fan-out of a step into tasks on the local node: each task its own shim and ranks,
its output carried back in whole lines (labelled with -l), the step ending when every
task has, failing (the others stopped) when one fails. The same code drives tasks on
fleet hosts (test_fleet_step_tasks.py).
"""

from __future__ import annotations

import re
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, wait_for
from test_interactive import gbatch_in_background, kill_leftover_steps, sacct_lines

PY = shlex.quote(sys.executable)


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home", gpus=2, config=FAST_CONFIG + "kill_grace_seconds: 2\n")
    made.start()
    yield made
    made.stop()
    kill_leftover_steps(made.home)
    kill_leftover_jobs(made.home)


def running_job(head: Head) -> int:
    job_id = head.sbatch("-G", "1", "--wrap", "sleep 300")
    head.wait_state(job_id, "RUNNING", timeout=60)
    return job_id


def test_srun_n3_in_a_one_node_job_starts_three_ranked_tasks_as_one_step(head: Head) -> None:
    gbatch = f"{PY} -m gbatch"
    show = (
        "echo rank $SLURM_PROCID of $SLURM_NTASKS local $SLURM_LOCALID world $WORLD_SIZE "
        "node $SLURM_NODEID step $SLURM_STEP_ID master $MASTER_ADDR:$MASTER_PORT"
    )
    script = f"{gbatch} srun -n 3 sh -c {shlex.quote(show)}"
    job_id = head.sbatch("-G", "1", "--wrap", script)
    head.wait_state(job_id, "COMPLETED", timeout=60)
    # The job's log as the script wrote it (no -l); `gbatch logs --label` has the ranks.
    plain = sorted(head.run("logs", str(job_id), check=True).stdout.splitlines())
    assert [line.split(" ")[:2] for line in plain] == [["rank", "0"], ["rank", "1"], ["rank", "2"]]
    lines = sorted(head.run("logs", "--label", str(job_id), check=True).stdout.splitlines())
    assert len(lines) == 3, lines
    ports = set()
    for rank, line in enumerate(lines):
        match = re.fullmatch(
            rf"{rank}: rank {rank} of 3 local {rank} world 3 node 0 step 0 master "
            r"127\.0\.0\.1:(\d+)",
            line,
        )
        assert match, line
        ports.add(match.group(1))
    assert len(ports) == 1  # one rendezvous for the step
    assert sacct_lines(head, job_id) == [
        f"{job_id}|wrap|COMPLETED|0:0",
        f"{job_id}.batch|batch|COMPLETED|0:0",
        f"{job_id}.0|sh|COMPLETED|0:0",
    ]


def test_slurm_labelio_labels_every_sruns_lines_as_l_does(head: Head) -> None:
    gbatch = f"{PY} -m gbatch"
    script = f"export SLURM_LABELIO=1; {gbatch} srun -n 2 sh -c 'echo hi $SLURM_PROCID'"
    job_id = head.sbatch("-G", "1", "--wrap", script)
    head.wait_state(job_id, "COMPLETED", timeout=60)
    log = head.run("logs", str(job_id), check=True).stdout
    assert sorted(log.splitlines()) == ["0: hi 0", "1: hi 1"]


def test_tasks_output_arrives_in_whole_lines_never_cut_by_another_task(head: Head) -> None:
    job_id = running_job(head)
    # Each task writes half a line, waits, then ends it: interleaved bytes would mix ranks.
    code = (
        "import os, sys, time\n"
        "r = os.environ['SLURM_PROCID']\n"
        "for i in range(15):\n"
        "    sys.stdout.write(f'<{r}'); sys.stdout.flush(); time.sleep(0.02)\n"
        "    sys.stdout.write(f'-{r}>\\n'); sys.stdout.flush()\n"
    )
    done = head.run("srun", "--jobid", str(job_id), "-n", "3", PY.strip("'"), "-c", code, input="")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 45
    assert all(re.fullmatch(r"<(\d)-\1>", line) for line in lines), lines
    assert sorted({line[1] for line in lines}) == ["0", "1", "2"]


def test_a_failing_task_stops_the_others_and_srun_says_which_in_slurms_words(
    head: Head,
) -> None:
    job_id = running_job(head)
    task = "if [ $SLURM_PROCID = 1 ]; then exit 3; fi; sleep 300; echo survived"
    done = head.run("srun", "--jobid", str(job_id), "-n", "3", "sh", "-c", task, input="")
    assert done.returncode == 3, done.stderr
    assert "survived" not in done.stdout
    assert done.stderr.splitlines()[0] == "srun: error: local: task 1: Exited with exit code 3"
    assert f"srun: Terminating StepId={job_id}.0" in done.stderr
    assert "srun: error: local: task 0: Terminated" in done.stderr
    wait_for(lambda: f"{job_id}.0|sh|FAILED|3:0" in sacct_lines(head, job_id), 30)
    # -K0: the others run on; srun still exits with the failing task's code.
    task = "if [ $SLURM_PROCID = 1 ]; then exit 4; fi; sleep 0.5; echo survived $SLURM_PROCID"
    done = head.run("srun", "--jobid", str(job_id), "-K0", "-n", "3", "sh", "-c", task, input="")
    assert done.returncode == 4, done.stderr
    assert sorted(done.stdout.splitlines()) == ["survived 0", "survived 2"]
    assert "Terminating" not in done.stderr
    assert head.state(job_id) == "RUNNING"
    # A command that is not there: each task says so, named, and srun exits 127.
    done = head.run("srun", "--jobid", str(job_id), "-n", "2", "/no/such-command", input="")
    assert done.returncode == 127, done.stderr
    for rank in (0, 1):
        assert f"srun: error: local: task {rank}: cannot start '/no/such-command'" in done.stderr


def test_signals_and_scancel_of_the_step_reach_every_task(head: Head) -> None:
    job_id = running_job(head)
    marks = head.home / "marks"
    marks.mkdir()
    task = (
        f"trap 'touch {marks}/int.$SLURM_PROCID; exit 0' INT; touch {marks}/up.$SLURM_PROCID;"
        " while :; do sleep 0.1; done"
    )
    srun = gbatch_in_background(head, "srun", "--jobid", str(job_id), "-n", "2", "sh", "-c", task)
    try:
        wait_for(lambda: len(list(marks.glob("up.*"))) == 2, 30, "both tasks up")
        srun.send_signal(signal.SIGINT)
        assert srun.wait(30) == 0
        assert sorted(p.name for p in marks.glob("int.*")) == ["int.0", "int.1"]
    finally:
        srun.kill()
    # scancel N.M: every task of the step ends, the step is CANCELLED, the job runs on.
    srun = gbatch_in_background(
        head,
        "srun",
        "--jobid",
        str(job_id),
        "-n",
        "2",
        "sh",
        "-c",
        "touch $0.$SLURM_PROCID; sleep 300",
        f"{marks}/b",
    )
    try:
        wait_for(lambda: len(list(marks.glob("b.*"))) == 2, 30, "both tasks up")
        head.run("scancel", f"{job_id}.1", check=True)
        assert srun.wait(30) != 0
    finally:
        srun.kill()
    wait_for(lambda: f"{job_id}.1|sh|CANCELLED|0:9" in sacct_lines(head, job_id), 30)
    assert head.state(job_id) == "RUNNING"


def test_a_step_larger_than_the_allocation_is_refused_in_one_line(head: Head) -> None:
    job_id = running_job(head)
    done = head.run("srun", "--jobid", str(job_id), "-N", "2", "true", input="")
    assert done.returncode != 0
    assert done.stderr == (
        f"gbatch srun: error: Unable to create step for job {job_id}: -N/--nodes 2: the job's "
        "allocation has 1 node(s) (local). Ask for at most 1\n"
    )
    done = head.run("srun", "--jobid", str(job_id), "-w", "gpu07", "true", input="")
    assert done.returncode != 0 and "-w/--nodelist: gpu07 is not a node" in done.stderr
    done = head.run("srun", "--jobid", str(job_id), "-n", "2", "--pty", "bash", input="")
    assert done.returncode != 0 and "--pty runs one task" in done.stderr
    assert [line.split("|")[0] for line in sacct_lines(head, job_id)] == [
        str(job_id),
        f"{job_id}.batch",
    ]


def test_a_step_of_several_tasks_is_warned_before_its_allocations_time_limit(
    head: Head,
) -> None:
    gbatch = f"{PY} -m gbatch"
    # 20 s: warned a tenth of it ahead (stepnotices.warning_lead), through task 0.
    salloc = gbatch_in_background(
        head, "salloc", "-t", "0:20", "sh", "-c", f"{gbatch} srun -n 2 sleep 100"
    )
    try:
        _, err = salloc.communicate(timeout=90)
    finally:
        salloc.kill()
    assert re.search(r"srun: Job \d+ will be cancelled in \d+ seconds? \(time limit\)", err), err
