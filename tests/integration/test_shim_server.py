"""Bare jobs through the shim server (gbatch.nodes.shimserver): forked by it, they
survive the daemon's SIGKILL and restart, and the server's death, and each runs once."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from conftest import Head, is_gone, wait_for

SERVER = b"gbatch.nodes.shimserver"


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def shim_server_of(daemon: int) -> int:
    """The pid of the daemon's shim server (a child of the daemon)."""
    children = [
        int(pid)
        for task in Path(f"/proc/{daemon}/task").iterdir()
        for pid in (task / "children").read_text().split()
    ]
    servers = [pid for pid in children if SERVER in cmdline(pid)]
    assert len(servers) == 1, children
    return servers[0]


def shim_of(head: Head, job_id: int) -> int:
    run_dir = head.home / "run" / f"{job_id}.1"
    wait_for(lambda: (run_dir / "pids.json").exists(), 30, "the run's pids.json")
    return int(json.loads((run_dir / "pids.json").read_text())["shim"])


def test_a_bare_job_is_forked_by_the_shim_server_and_completes(head: Head) -> None:
    job_id = head.sbatch("--wrap", "sleep 3; echo done")  # alive while its shim is looked at
    head.wait_state(job_id, "RUNNING")
    shim = shim_of(head, job_id)
    assert SERVER in cmdline(shim)  # forked, not a fresh `python -m gbatch.shim`
    assert os.getsid(shim) == shim
    head.wait_state(job_id, "COMPLETED")
    assert "done" in head.run("logs", str(job_id), check=True).stdout


def test_a_forked_job_survives_the_daemons_sigkill_and_runs_once(head: Head, workdir: Path) -> None:
    ledger, go = workdir / "ledger", workdir / "go"
    job_id = head.sbatch(
        "--wrap",
        f'echo "$GBATCH_JOB_ID $GBATCH_ATTEMPT" >> {ledger}; '
        f"while [ ! -e {go} ]; do sleep 0.05; done",
    )
    head.wait_state(job_id, "RUNNING")
    daemon = head.daemon_pid()
    server = shim_server_of(daemon)
    shim = shim_of(head, job_id)
    os.kill(daemon, signal.SIGKILL)
    # The server sees its daemon gone and exits; the job does not.
    wait_for(lambda: is_gone(server), 30, "the old shim server to exit")
    assert not is_gone(shim)
    head.start()
    assert head.state(job_id) == "RUNNING"
    assert shim_server_of(head.daemon_pid()) != server
    go.touch()
    head.wait_state(job_id, "COMPLETED")
    assert ledger.read_text() == f"{job_id} 1\n"


def test_jobs_outlive_the_shim_server_and_later_jobs_still_start(head: Head, workdir: Path) -> None:
    go = workdir / "go"
    first = head.sbatch("--wrap", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 4")
    head.wait_state(first, "RUNNING")
    shim_of(head, first)
    os.kill(shim_server_of(head.daemon_pid()), signal.SIGKILL)
    second = head.sbatch("--wrap", "echo second")
    # The plain shim starts it (the server is not restarted at once).
    head.wait_state(second, "COMPLETED")
    assert "second" in head.run("logs", str(second), check=True).stdout
    assert head.state(first) == "RUNNING"
    go.touch()
    assert head.wait_state(first, "FAILED")["exit_code"] == 4


def test_scancel_stops_a_forked_jobs_whole_process_group(head: Head, workdir: Path) -> None:
    marker = workdir / "child-alive"
    job_id = head.sbatch("--wrap", f"(sleep 30; touch {marker}) & sleep 30")
    head.wait_state(job_id, "RUNNING")
    pgid = json.loads((head.home / "run" / f"{job_id}.1" / "pids.json").read_text())["pgid"]
    head.run("scancel", str(job_id), check=True)
    head.wait_state(job_id, "CANCELLED")
    wait_for(lambda: not _group_alive(pgid), 30, "the job's process group to end")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
