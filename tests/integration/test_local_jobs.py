"""End to end on the embedded local node: real daemon process, real CLI, real jobs."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

from conftest import Head, make_head, wait_for

LEDGER_JOB = (
    'echo "$GBATCH_JOB_ID start $(date +%s.%N) $CUDA_VISIBLE_DEVICES" >> {ledger}; '
    "sleep 1; "
    'echo "$GBATCH_JOB_ID end $(date +%s.%N) $CUDA_VISIBLE_DEVICES" >> {ledger}; '
    'echo "visible=$CUDA_VISIBLE_DEVICES"'
)


def read_ledger(path: Path) -> dict[int, dict[str, object]]:
    runs: dict[int, dict[str, object]] = {}
    for line in path.read_text().splitlines():
        job, what, stamp, gpus = line.split()
        runs.setdefault(int(job), {})[what] = float(stamp)
        runs[int(job)]["gpus"] = gpus
    return runs


def test_four_one_gpu_jobs_on_two_gpus_never_overlap_and_see_only_their_gpu(
    head: Head, workdir: Path
) -> None:
    ledger = workdir / "ledger"
    ids = [
        head.sbatch("--gpus", "1", "-J", f"j{i}", "--wrap", LEDGER_JOB.format(ledger=ledger))
        for i in range(4)
    ]
    for job_id in ids:
        head.wait_state(job_id, "COMPLETED")
    runs = read_ledger(ledger)
    assert sorted(runs) == ids
    for job_id, run in runs.items():
        assert run["gpus"] in ("0", "1"), f"job {job_id} saw GPUs {run['gpus']!r}"
        log = head.run("logs", str(job_id), check=True).stdout
        assert log.strip() == f"visible={run['gpus']}"
        record = head.job(job_id)
        assert record["gpus"] == [int(str(run["gpus"]))]
        # Recorded by UUID too, as the node reported it.
        assert record["gpu_uuids"] == [f"GPU-sim-{socket.gethostname()}-{run['gpus']}"]
    for a in runs:
        for b in runs:
            if a < b and runs[a]["gpus"] == runs[b]["gpus"]:
                overlap = min(runs[a]["end"], runs[b]["end"]) - max(  # type: ignore[type-var]
                    runs[a]["start"], runs[b]["start"]
                )  # type: ignore[type-var]
                assert overlap <= 0, f"jobs {a} and {b} shared GPU {runs[a]['gpus']}"
    # Two GPUs, four one-second jobs: at most two at a time.
    events = sorted(
        (t, +1 if w == "start" else -1)
        for r in runs.values()
        for w, t in r.items()
        if w in ("start", "end")
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    assert peak <= 2


def test_time_limit_stops_the_job_and_marks_it_timeout(head: Head) -> None:
    job_id = head.sbatch("-t", "0:02", "--wrap", "sleep 60")
    job = head.wait_state(job_id, "TIMEOUT", timeout=20)
    assert job["exit_signal"] == signal.SIGTERM
    assert job["reason"] == "TimeLimit"  # Slurm's
    assert "time limit reached" in [e["reason"] for e in job["events"]]  # type: ignore[union-attr]


def test_a_job_ignoring_sigterm_is_killed_after_the_grace_period(head: Head) -> None:
    job_id = head.sbatch("-t", "0:01", "--wrap", "trap '' TERM; sleep 60 & wait; sleep 60")
    job = head.wait_state(job_id, "TIMEOUT", timeout=20)
    assert job["exit_signal"] == signal.SIGKILL
    sacct = head.run("sacct", "-X", "-j", str(job_id), "-P", "-n", "-o", "State,ExitCode").stdout
    assert sacct.strip() == "TIMEOUT|0:9"


def test_a_failing_job_is_retried_then_completes(head: Head, workdir: Path) -> None:
    marker = workdir / "tried"
    job_id = head.sbatch(
        "--retries",
        "2",
        "--wrap",
        f"if [ -e {marker} ]; then echo second; else touch {marker}; exit 3; fi",
    )
    job = head.wait_state(job_id, "COMPLETED")
    assert job["attempt"] == 2
    states = [e["state"] for e in job["events"]]  # type: ignore[union-attr]
    assert states == [
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETED",
    ]
    assert "retry 1/2 after exit code 3" in [e["reason"] for e in job["events"]]  # type: ignore[union-attr]


def test_a_job_failing_every_attempt_ends_failed_with_its_exit_code(head: Head) -> None:
    job_id = head.sbatch("--retries", "1", "--wrap", "exit 7")
    job = head.wait_state(job_id, "FAILED")
    assert job["attempt"] == 2
    assert (job["exit_code"], job["exit_signal"]) == (7, 0)
    sacct = head.run("sacct", "-X", "-j", str(job_id), "-P", "-n", "-o", "State,ExitCode").stdout
    assert sacct.strip() == "FAILED|7:0"


def test_cancel_of_a_pending_job(head: Head) -> None:
    job_id = head.sbatch("--hold", "--wrap", "true")
    assert head.run("scancel", str(job_id)).returncode == 0
    job = head.wait_state(job_id, "CANCELLED")
    assert job["attempt"] == 0


def test_cancel_of_a_running_job_stops_its_whole_process_group(head: Head, workdir: Path) -> None:
    pidfile = workdir / "child.pid"
    job_id = head.sbatch("--wrap", f"sleep 300 & echo $! > {pidfile}; wait")
    head.wait_state(job_id, "RUNNING")
    wait_for(pidfile.exists, what="the job's child to start")
    child = int(pidfile.read_text())
    assert head.run("scancel", str(job_id)).returncode == 0
    job = head.wait_state(job_id, "CANCELLED")
    assert job["exit_signal"] == signal.SIGTERM
    wait_for(lambda: not Path(f"/proc/{child}").exists(), 5, "the child to be gone")


def test_cancel_reports_each_failure_and_exits_1(head: Head) -> None:
    job_id = head.sbatch("--hold", "--wrap", "true")
    result = head.run("scancel", str(job_id), "99999")
    assert result.returncode == 1
    assert "Kill job error on job id 99999" in result.stderr
    head.wait_state(job_id, "CANCELLED")


def test_held_job_waits_until_released(head: Head) -> None:
    job_id = head.sbatch("--hold", "--wrap", "true")
    head.wait_planned(job_id)
    squeue = head.run("squeue", "-h", "-j", str(job_id), "-o", "%t %r", check=True).stdout
    assert squeue.split() == ["PD", "JobHeldUser"]
    head.run("scontrol", "release", str(job_id), check=True)
    head.wait_state(job_id, "COMPLETED")


def test_logs_follow_streams_until_the_job_ends(head: Head) -> None:
    job_id = head.sbatch("--wrap", "for i in 1 2 3; do echo line $i; sleep 0.3; done; echo err >&2")
    head.wait_state(job_id, "RUNNING")
    out = head.run("logs", "-f", str(job_id), check=True).stdout
    assert out.splitlines() == ["line 1", "line 2", "line 3", "err"]
    assert head.state(job_id) == "COMPLETED"
    log = head.home / "logs" / f"{job_id}.log"
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_squeue_shows_slurm_columns_reasons_and_filters(head: Head) -> None:
    running = head.sbatch("--gpus", "2", "-J", "big", "--wrap", "sleep 30")
    head.wait_state(running, "RUNNING")
    waiting = head.sbatch("--gpus", "1", "-J", "small", "--wrap", "true")
    head.wait_planned(waiting)
    lines = head.run("squeue", check=True).stdout.splitlines()
    assert lines[0].split() == [
        "JOBID",
        "PARTITION",
        "NAME",
        "USER",
        "ST",
        "TIME",
        "NODES",
        "NODELIST(REASON)",
    ]
    rows = {int(line.split()[0]): line.split() for line in lines[1:]}
    assert rows[running][4] == "R" and rows[running][-1] == "local"
    assert rows[waiting][4] == "PD" and rows[waiting][-1] == "(Resources)"
    only_pending = head.run("squeue", "-h", "-t", "PD", "-o", "%i", check=True).stdout.split()
    assert only_pending == [str(waiting)]
    data = json.loads(head.run("squeue", "--json", check=True).stdout)
    assert {j["job_id"] for j in data["jobs"]} == {running, waiting}
    assert head.run("squeue", "--me", "-h", check=True).stdout.count("\n") == 2
    assert head.run("squeue", "-u", "nobody", "-h", check=True).stdout == ""
    head.run("scancel", str(running), str(waiting), check=True)


def test_sinfo_counts_gpus_and_marks_them_simulated(head: Head) -> None:
    job_id = head.sbatch("--gpus", "1", "--wrap", "sleep 30")
    head.wait_state(job_id, "RUNNING")
    # Slurm's layout: PARTITION AVAIL TIMELIMIT NODES STATE NODELIST.
    assert head.run("sinfo", "-h", check=True).stdout.split() == [
        "gpu*", "up", "infinite", "1", "mix", "local"
    ]  # fmt: skip
    lines = head.run("sinfo", "--gpus", check=True).stdout.splitlines()
    fields = lines[1].split()
    assert fields[0] == "local" and fields[2:6] == ["mixed", "2", "1", "1"]
    assert "(simulated)" in lines[1]
    detail = json.loads(head.run("sinfo", "--json", check=True).stdout)
    gpus = detail["nodes"][0]["gpus"]
    assert [g["simulated"] for g in gpus] == [True, True]
    head.run("scancel", str(job_id), check=True)


def test_scontrol_show_job_tells_the_story(head: Head) -> None:
    job_id = head.sbatch("-J", "story", "--wrap", "exit 0")
    head.wait_state(job_id, "COMPLETED")
    out = head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert out.startswith(f"JobId={job_id} JobName=story")
    assert "JobState=COMPLETED" in out and "ExitCode=0:0" in out
    for state in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETED"):
        assert f"  {state}" in out


def test_sbatch_from_a_file_with_overrides(head: Head, workdir: Path) -> None:
    job_file = workdir / "train.yaml"
    job_file.write_text(
        "name: train\ngpus: 1\ntime_limit: 5\ncommand: [sh, -c, 'echo $A']\nenv: {A: from-file}\n"
    )
    out = head.run("sbatch", str(job_file), "-J", "renamed", "-t", "0:30", check=True).stdout
    assert out.startswith("Submitted batch job ")
    job_id = int(out.split()[-1])
    job = head.wait_state(job_id, "COMPLETED")
    assert job["name"] == "renamed" and job["time_limit"] == 30
    assert head.run("logs", str(job_id), check=True).stdout == "from-file\n"


def test_array_submission_queues_one_job_per_index(head: Head) -> None:
    out = head.run("sbatch", "--array", "0-2", "--hold", "--wrap", "true", check=True).stdout
    assert out.startswith("Submitted batch job ")  # the array's id, as Slurm prints it
    first = int(out.split()[-1])
    assert [head.job(first + k)["state"] for k in range(3)] == ["PENDING"] * 3
    head.run("scancel", "--me", check=True)


def test_an_array_is_held_and_cancelled_by_its_id_and_by_a_range(head: Head) -> None:
    out = head.run("sbatch", "--array", "4", "--gpus", "2", "--wrap", "sleep 30", check=True)
    first = int(out.stdout.split()[-1])
    last = first + 3
    span = f"{first}-{last}"
    head.wait_state(first, "RUNNING")
    held = head.run("scontrol", "hold", str(first))  # an array's id: all its tasks
    assert held.returncode == 1
    assert held.stderr == (
        f"gbatch scontrol: error: job {first}: Job is no longer pending execution: "
        f"job {first} is RUNNING\n"
    )
    reasons = head.run("squeue", "-h", "-t", "PD", "-o", "%i %r", check=True).stdout
    assert reasons == f"{first}_[1-3] JobHeldUser\n"  # pending tasks folded, as Slurm
    expanded = head.run("squeue", "-r", "-h", "-t", "PD", "-o", "%i %r", check=True).stdout
    assert expanded.split("\n")[:-1] == [f"{first}_{k} JobHeldUser" for k in (1, 2, 3)]
    cancelled = head.run("scancel", span)
    assert (cancelled.returncode, cancelled.stdout, cancelled.stderr) == (0, "", "")
    head.wait_state(first, "CANCELLED")
    assert head.run("squeue", "-h", check=True).stdout == ""
    bad = head.run("scancel", f"{last}-{first}")
    assert bad.returncode == 2
    assert bad.stderr == (
        f"gbatch scancel: error: JOBID: '{last}-{first}' runs backwards. Write {first}-{last}\n"
    )


def test_no_daemon_says_so_and_how_to_start_one(tmp_path: Path) -> None:
    idle = make_head(tmp_path / "nobody-home")
    result = idle.run("squeue")
    assert result.returncode == 3
    assert result.stderr.startswith("gbatch squeue: error: no gbatch daemon answers at ")
    assert "gbatch daemon start" in result.stderr
    assert "Traceback" not in result.stderr


def test_daemon_status_and_double_start(head: Head) -> None:
    status = head.run("daemon", "status", check=True).stdout
    assert "running, pid" in status and "node local: idle, 2 GPUs" in status
    again = head.run("daemon", "start", check=True).stdout
    assert "already running" in again
    assert os.path.exists(head.home / "gbatchd.sock")


def test_a_drained_node_takes_no_new_jobs_until_resumed(head: Head) -> None:
    running = head.sbatch("--gpus", "1", "--wrap", "sleep 30")
    head.wait_state(running, "RUNNING")
    head.run("node", "drain", "local", "--reason", "fan noise", check=True)
    line = head.run("sinfo", "--gpus", "-h", check=True).stdout
    assert line.split()[2] == "drained" and "fan noise [root]" in line
    # Slurm's view: draining while its job runs; -R names the reason, who and when.
    assert head.run("sinfo", "-h", check=True).stdout.split()[4] == "drng"
    reasons = head.run("sinfo", "-R", "-h", check=True).stdout.split()
    assert reasons[:3] == ["fan", "noise", "root"] and reasons[-1] == "local", reasons
    waiting = head.sbatch("--gpus", "1", "--wrap", "true")
    assert head.wait_planned(waiting)["state"] == "PENDING"
    assert head.state(running) == "RUNNING"  # a drain never stops what runs
    head.run("node", "resume", "local", check=True)
    head.wait_state(waiting, "COMPLETED")
    again = head.run("node", "resume", "local")
    assert again.returncode == 2 and "not drained" in again.stderr
    unknown = head.run("node", "drain", "gpu99", "--reason", "x")
    assert unknown.returncode == 1 and 'no node "gpu99" in the fleet' in unknown.stderr
    no_reason = head.run("node", "drain", "local")
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    head.run("scancel", str(running), check=True)


def test_node_install_all_without_remote_nodes_says_there_are_none(head: Head) -> None:
    done = head.run("node", "install", "--all")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no remote nodes to install: ") and done.stdout.count("\n") == 1
    assert done.stderr == ""
    named = head.run("node", "install", "local")  # named, it is refused as before
    assert named.returncode == 1 and "local: the local node needs no install" in named.stderr


def test_a_crashed_agent_is_restarted_and_the_node_comes_back(head: Head) -> None:
    def agent_pids() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"watch" in cmdline and str(head.home / "logs").encode() in cmdline:
                    found.append(int(entry.name))
        return found

    (first,) = agent_pids()
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: (pids := agent_pids()) and first not in pids, 20, "a new agent")
    wait_for(lambda: head.run("sinfo", "-h").stdout.split()[4] == "idle", 20, "node back")
    job_id = head.sbatch("--gpus", "1", "--wrap", "true")
    head.wait_state(job_id, "COMPLETED")


def test_scontrol_requeue_stops_a_running_job_first_and_reruns_a_finished_one(
    head: Head, tmp_path: Path
) -> None:
    ledger = tmp_path / "ledger"
    running = head.sbatch("--wrap", f'echo "start $GBATCH_ATTEMPT" >> {ledger}; exec sleep 60')
    head.wait_state(running, "RUNNING")
    wait_for(lambda: ledger.exists() and "start 1" in ledger.read_text(), 10, "the first run")
    head.run("scontrol", "requeue", str(running), check=True)
    record = head.wait_state(running, "RUNNING", timeout=30)
    assert record["attempt"] == 2
    wait_for(lambda: "start 2" in ledger.read_text(), 10, "the second run")
    reasons = [e["reason"] for e in record["events"]]  # type: ignore[attr-defined]
    assert "requeue requested by root" in reasons and "requeued on request" in reasons
    # The first run was stopped before the second began: its shell is gone.
    head.run("scancel", str(running), check=True)
    head.wait_state(running, "CANCELLED")

    done = head.sbatch("--wrap", "true")
    head.wait_state(done, "COMPLETED")
    head.run("scontrol", "requeue", str(done), check=True)
    assert head.wait_state(done, "COMPLETED")["attempt"] == 2

    pinned = head.sbatch("--no-requeue", "--wrap", "true")
    head.wait_state(pinned, "COMPLETED")
    refused = head.run("scontrol", "requeue", str(pinned))
    assert refused.returncode == 1
    assert "has requeue: false" in refused.stderr
    held = head.sbatch("-H", "--wrap", "true")
    refused = head.run("scontrol", "requeue", str(held))
    assert refused.returncode == 1 and "has not run yet" in refused.stderr
