"""Preemption on the local node (issue 33, item 3): a scavenger job holding both GPUs
gets its signal when a normal job arrives, is requeued at the end of its grace time, the
normal job starts, and the scavenger runs again later, its events and sacct saying why;
a job that may not preempt waits; a --no-requeue victim ends PREEMPTED; a victim in its
grace when the daemon is killed is still stopped and requeued after the restart."""

from __future__ import annotations

import http.server
import json
import os
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, is_gone, kill_leftover_jobs, make_head, wait_for
from dockerenv import ensure_test_image, require_docker

from gbatch.nodes.docker import container_name

GRACE = 3
CONFIG = FAST_CONFIG + (
    "qos:\n"
    "  normal: {preempt: [scavenger]}\n"
    f"  scavenger: {{priority: -100, grace_time: {GRACE}, users: ALL}}\n"
    "  patient: {priority: -50, users: ALL}\n"
)
# Traps the preemption's signal, says so in its output, and carries on until killed.
TRAPPING = "trap 'echo got USR1 at $(date +%s)' USR1; echo run $SLURM_RESTART_COUNT; " + (
    "while :; do sleep 0.2; done"
)


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home", config=CONFIG)
    made.start()
    yield made
    made.stop()
    kill_leftover_jobs(made.home)


def events(head: Head, job_id: int) -> str:
    return head.run("scontrol", "show", "job", str(job_id), check=True).stdout


def test_a_normal_job_preempts_a_scavenger_which_is_requeued_and_runs_again(
    head: Head, tmp_path: Path
) -> None:
    out = tmp_path / "scav.out"
    scav = head.sbatch(
        "-q", "scavenger", "--gpus", "2", "--signal", "USR1@5", "-o", str(out), "--wrap", TRAPPING
    )
    head.wait_state(scav, "RUNNING")
    # A QOS that may preempt no one waits, whatever its GPUs.
    patient = head.sbatch("-q", "patient", "--gpus", "1", "--wrap", "sleep 300")
    wait_for(lambda: head.job(patient)["reason"] == "Resources", 30, "patient to wait")
    assert head.state(scav) == "RUNNING"
    urgent = head.sbatch("--gpus", "2", "--wrap", "sleep 300")
    wait_for(lambda: head.job(urgent)["reason"] == "Preemption", 30, "the preemptor's reason")
    wait_for(lambda: "got USR1" in out.read_text(), 30, "the scavenger's signal")
    # Requeued at the end of its grace, then the normal job starts on its GPUs.
    head.wait_state(urgent, "RUNNING", timeout=GRACE + 30)
    assert head.state(scav) == "PENDING"
    story = events(head, scav)
    assert f"COMPLETING   Preempted by {urgent} (QOS normal)" in story
    assert f"PREEMPTED    Preempted by {urgent} (QOS normal)" in story
    assert f"PENDING      Preempted by {urgent} (QOS normal)" in story
    sacct = head.run("sacct", "-n", "-P", "-X", "-o", "JobID,State,QOS", "-j", str(scav))
    assert sacct.stdout.split() == [f"{scav}|PENDING|scavenger"]
    # Once the normal job ends, the scavenger runs again, as its second run.
    head.run("scancel", str(urgent), str(patient), check=True)
    head.wait_state(scav, "RUNNING", timeout=60)
    wait_for(lambda: "run 1" in out.read_text(), 30, "the second run's output")
    text = out.read_text()
    # Its output says why its first run ended, after that run's last line.
    why = f"gbatch: job {scav} preempted by job {urgent} (QOS normal); requeued\n"
    assert text.index("run 0") < text.index("got USR1") < text.index(why) < text.index("run 1")
    assert text.count(why) == 1
    logged = head.run("logs", str(scav), check=True).stdout
    assert logged.index("got USR1") < logged.index(why) < logged.index("run 1")
    head.run("scancel", str(scav), check=True)


def test_a_no_requeue_victim_ends_preempted(head: Head) -> None:
    scav = head.sbatch("-q", "scavenger", "--gpus", "2", "--no-requeue", "--wrap", "sleep 300")
    head.wait_state(scav, "RUNNING")
    urgent = head.sbatch("--gpus", "1", "--wrap", "sleep 300")
    ended = head.wait_state(scav, "PREEMPTED", timeout=GRACE + 30)
    assert ended["reason"] == f"Preempted by {urgent} (QOS normal)"
    head.wait_state(urgent, "RUNNING")
    sacct = head.run("sacct", "-n", "-P", "-X", "-o", "State,Reason", "-j", str(scav))
    assert sacct.stdout.strip() == f"PREEMPTED|Preempted by {urgent} (QOS normal)"
    shown = head.run("squeue", "-h", "-t", "all", "-j", str(scav), "-o", "%t %R", check=True)
    assert shown.stdout == f"PR (Preempted by {urgent} (QOS normal))\n"
    head.run("scancel", str(urgent), check=True)


def test_a_victim_in_its_grace_is_requeued_after_a_daemon_kill_and_restart(
    tmp_path: Path,
) -> None:
    head = make_head(
        tmp_path / "home", config=CONFIG.replace(f"grace_time: {GRACE}", "grace_time: 8")
    )
    head.start()
    try:
        # Its signal is USR1, which it traps: it lives until the kill at its grace's end.
        scav = head.sbatch(
            "-q", "scavenger", "--gpus", "2", "--signal", "USR1@5", "--wrap", TRAPPING
        )
        head.wait_state(scav, "RUNNING")
        urgent = head.sbatch("--gpus", "2", "--wrap", "sleep 300")
        wait_for(lambda: head.job(urgent)["reason"] == "Preemption", 30, "the preemption")
        assert head.state(scav) == "COMPLETING"
        pid = head.daemon_pid()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: is_gone(pid), 30, "the daemon to die")
        assert head.run("daemon", "start").returncode == 0
        head.wait_state(urgent, "RUNNING", timeout=60)
        assert head.state(scav) == "PENDING"
        assert f"Preempted by {urgent} (QOS normal)" in events(head, scav)
        head.run("scancel", str(urgent), str(scav), check=True)
    finally:
        head.stop()
        kill_leftover_jobs(head.home)


class Hooks(http.server.BaseHTTPRequestHandler):
    received: list[dict[str, object]]

    def do_POST(self) -> None:
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hooked(tmp_path: Path) -> Iterator[tuple[Head, list[dict[str, object]]]]:
    received: list[dict[str, object]] = []
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), type("Recorder", (Hooks,), {"received": received})
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    config = CONFIG + f"webhooks: [{{name: ops, url: '{url}', events: [REQUEUE, END]}}]\n"
    made = make_head(tmp_path / "home", config=config)
    made.start()
    yield made, received
    made.stop()
    kill_leftover_jobs(made.home)
    server.shutdown()
    server.server_close()


def test_webhooks_say_a_victim_was_preempted_requeued_or_ended(
    hooked: tuple[Head, list[dict[str, object]]],
) -> None:
    head, received = hooked
    requeued = head.sbatch("-q", "scavenger", "--gpus", "1", "--wrap", "sleep 300")
    ended = head.sbatch("-q", "scavenger", "--gpus", "1", "--no-requeue", "--wrap", "sleep 300")
    head.wait_state(requeued, "RUNNING")
    head.wait_state(ended, "RUNNING")
    urgent = head.sbatch("--gpus", "2", "--wrap", "sleep 300")
    head.wait_state(urgent, "RUNNING", timeout=GRACE + 30)
    why = f"Preempted by {urgent} (QOS normal)"

    def said(job_id: int, kind: str) -> dict[str, object] | None:
        for each in received:
            job = each["job"]
            assert isinstance(job, dict)
            if job["id"] == job_id and each["kind"] == kind:
                return each
        return None

    wait_for(lambda: said(requeued, "REQUEUE") and said(ended, "END"), 30, "both webhooks")
    hook = said(requeued, "REQUEUE")
    assert hook is not None and hook["job"]["reason"] == why  # type: ignore[index]
    assert ", PREEMPTED, " in str(hook["text"])
    hook = said(ended, "END")
    assert hook is not None and hook["job"]["reason"] == why  # type: ignore[index]
    assert hook["job"]["state"] == "PREEMPTED"  # type: ignore[index]
    # Fair share counts what the two runs ran (one GPU each, start to end), no more.
    ran = 0.0
    for job_id in (requeued, ended):
        job = head.job(job_id)
        ran += float(job["end_time"]) - float(job["start_time"])  # type: ignore[arg-type]
    with sqlite3.connect(f"file:{head.home / 'gbatch.db'}?mode=ro", uri=True) as db:
        ((charged,),) = db.execute("SELECT gpu_seconds FROM usage").fetchall()
    assert ran > 0 and abs(charged - ran) < 0.01 * ran
    head.run("scancel", str(urgent), str(requeued), check=True)


@pytest.mark.docker
def test_a_preempted_container_jobs_output_says_why_and_it_runs_again(
    head: Head, tmp_path: Path
) -> None:
    """The line goes to a container job's -o file and log too (its log follower's)."""
    require_docker()
    image = ensure_test_image()
    out = tmp_path / "box.out"
    scav = head.sbatch(
        "-q", "scavenger", "--image", image, "--gpus", "2", "-o", str(out), "--wrap", TRAPPING
    )
    try:
        head.wait_state(scav, "RUNNING", timeout=60)
        wait_for(lambda: out.exists() and "run 0" in out.read_text(), 30, "its first run")
        urgent = head.sbatch("--gpus", "2", "--wrap", "sleep 300")
        head.wait_state(urgent, "RUNNING", timeout=GRACE + 30)
        why = f"gbatch: job {scav} preempted by job {urgent} (QOS normal); requeued\n"
        wait_for(lambda: why in out.read_text(), 30, "the line saying why")
        head.run("scancel", str(urgent), check=True)
        head.wait_state(scav, "RUNNING", timeout=60)
        wait_for(lambda: "run 1" in out.read_text(), 30, "the second run's output")
        text = out.read_text()
        assert text.index("run 0") < text.index(why) < text.index("run 1")
        assert text.count(why) == 1
        logged = head.run("logs", str(scav), check=True).stdout
        assert logged.index("run 0") < logged.index(why) < logged.index("run 1")
        head.run("scancel", str(scav), check=True)
        head.wait_state(scav, "CANCELLED", timeout=60)
    finally:
        for attempt in (1, 2, 3):
            subprocess.run(
                ["docker", "rm", "-f", container_name(scav, attempt)], capture_output=True
            )


def test_shares_and_whole_nodes_are_preempted_and_preempt(tmp_path: Path) -> None:
    """Preemption beyond whole GPUs (q-pre2): two scavengers sharing one GPU (--gpu-mem)
    both go for a job of both GPUs; an --exclusive job preempts the job on its node."""
    head = make_head(tmp_path / "home", config=CONFIG + "share_gpus: true\n")
    head.start()
    try:
        shares = [
            head.sbatch("-q", "scavenger", "--gpu-mem=20G", "--wrap", "sleep 300") for _ in range(2)
        ]
        for each in shares:
            head.wait_state(each, "RUNNING")
        assert head.job(shares[0])["gpus"] == head.job(shares[1])["gpus"]  # one card
        urgent = head.sbatch("--gpus", "2", "--wrap", "sleep 300")
        head.wait_state(urgent, "RUNNING", timeout=GRACE + 30)
        for each in shares:
            assert head.state(each) == "PENDING"
            assert f"PENDING      Preempted by {urgent} (QOS normal)" in events(head, each)
        head.run("scancel", str(urgent), *map(str, shares), check=True)
        scav = head.sbatch("-q", "scavenger", "--gpus", "1", "--wrap", "sleep 300")
        head.wait_state(scav, "RUNNING")
        whole = head.sbatch("--exclusive", "--wrap", "sleep 300")
        head.wait_state(whole, "RUNNING", timeout=GRACE + 30)
        assert head.state(scav) == "PENDING"
        assert head.job(whole)["gpus"] == [0, 1]
        head.run("scancel", str(whole), str(scav), check=True)
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
