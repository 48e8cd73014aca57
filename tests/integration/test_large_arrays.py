"""A Slurm array larger than the rows the store makes for it up front, through the real
CLI and daemon on the embedded local node: every task runs once, with its own index,
under the array's %MAX, and survives a daemon restart while it waits in the tail."""

from __future__ import annotations

import subprocess

from conftest import GBATCH, Head, wait_for

from gbatch.core.arrays import ARRAY_ROWS

TASKS = ARRAY_ROWS + 8  # the last 8 start out in the array's tail


def sbatch(head: Head, *args: str) -> int:
    result = subprocess.run(
        [*GBATCH, "sbatch", "--parsable", *args],
        env=head.env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=head.home,
    )
    assert result.returncode == 0, result.stderr
    return int(result.stdout.strip())


def squeue(head: Head, *args: str) -> list[str]:
    return head.run("squeue", "-h", *args, check=True).stdout.splitlines()


def test_every_task_of_a_large_array_runs_once_under_its_max(head: Head) -> None:
    ledger = head.home / "ledger"
    array = sbatch(
        head,
        f"--array=0-{TASKS - 1}%2",
        "--hold",
        "--wrap",
        f"echo $SLURM_ARRAY_TASK_ID $(date +%s.%N) start >> {ledger}; sleep 0.2; "
        f"echo $SLURM_ARRAY_TASK_ID $(date +%s.%N) end >> {ledger}",
    )
    assert squeue(head, "-o", "%i %T") == [f"{array}_[0-{TASKS - 1}%2] PENDING"]
    # One task of the tail cancelled alone; the rest wait through a daemon restart.
    head.run("scancel", f"{array}_{TASKS - 3}", check=True)
    head.stop()
    head.start()
    assert squeue(head, "-o", "%i %T") == [
        f"{array}_[0-{TASKS - 4},{TASKS - 2}-{TASKS - 1}%2] PENDING"
    ]
    head.run("scontrol", "release", str(array), check=True)
    last = array + TASKS - 1
    head.wait_state(last, "COMPLETED", timeout=180)
    wait_for(lambda: squeue(head) == [], what="the array to end")
    runs: dict[int, dict[str, float]] = {}
    for line in ledger.read_text().splitlines():
        task, stamp, what = line.split()
        assert what not in runs.setdefault(int(task), {}), f"task {task} ran twice"
        runs[int(task)][what] = float(stamp)
    assert sorted(runs) == [k for k in range(TASKS) if k != TASKS - 3]
    # %2: never three tasks between their start and end at once.
    events = sorted(
        (t, 1 if what == "start" else -1) for run in runs.values() for what, t in run.items()
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    assert peak <= 2
    sacct = head.run("sacct", "-X", "-n", "-P", "-o", "JobID,State", "-j", str(array), check=True)
    states = dict(line.split("|") for line in sacct.stdout.splitlines())
    assert states[f"{array}_{TASKS - 3}"] == "CANCELLED"
    assert states[f"{array}_{TASKS - 1}"] == "COMPLETED" and len(states) == TASKS


def test_cancelling_a_100000_task_array_is_one_record(head: Head) -> None:
    (head.home / "config.yaml").write_text(
        (head.home / "config.yaml").read_text()
        + "limits: {max_pending_jobs: 200000, max_array_size: 100000}\n"
    )
    head.stop()
    head.start()
    array = sbatch(head, "--array=0-99999", "--hold", "--wrap", "true")
    assert squeue(head, "-o", "%i %T %r") == [f"{array}_[0-99999] PENDING JobHeldUser"]
    head.run("scancel", str(array), check=True)  # bench/bench_arrays.py times it
    assert squeue(head) == []
    sacct = head.run("sacct", "-n", "-P", "-o", "JobID,State", "-j", str(array), check=True)
    assert sacct.stdout.splitlines()[-1] == f"{array}_[{ARRAY_ROWS}-99999]|CANCELLED"


def test_a_task_requeued_runs_again_also_from_a_cancelled_arrays_record(head: Head) -> None:
    ledger = head.home / "ledger"
    blocker = head.sbatch("--gpus", "2", "--wrap", "sleep 600")  # the array waits behind it
    head.wait_state(blocker, "RUNNING")
    show = f"echo $SLURM_ARRAY_TASK_ID >> {ledger}"
    array = sbatch(head, f"--array=0-{TASKS - 1}", "--gpus", "1", "--wrap", show)
    head.run("scancel", str(array), check=True)  # its rows and its tail's record
    tail_task, row_task = TASKS - 1, 3
    for task in (tail_task, row_task):
        head.wait_state(array + task, "CANCELLED")
        head.run("scontrol", "requeue", f"{array}_{task}", check=True)
    head.run("scancel", str(blocker), check=True)
    for task in (tail_task, row_task):
        head.wait_state(array + task, "COMPLETED", timeout=60)
    assert sorted(ledger.read_text().split()) == sorted([str(tail_task), str(row_task)])
    sacct = head.run("sacct", "-n", "-P", "-o", "JobID,State", "-j", str(array), check=True)
    states = dict(line.split("|") for line in sacct.stdout.splitlines())
    assert states[f"{array}_{tail_task}"] == "COMPLETED"
    assert states[f"{array}_[{ARRAY_ROWS}-{TASKS - 2}]"] == "CANCELLED"
