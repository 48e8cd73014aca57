"""A full disk on the head or on a host: no crash, no corruption, clear messages.

Each test mounts a small tmpfs (root only: locally a test without root or without
mount skips, in CI it fails) and fills it to the last byte with a filler file:
- the head's whole GBATCH_HOME (store, daemon log, job logs, run files);
- the head's job log directory alone;
- a host's agent_dir, where the head puts each job's env-file over SFTP.
The tmpfs is always unmounted in teardown (lazily if something still holds it).
"""

from __future__ import annotations

import errno
import http.server
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import (
    FAST_CONFIG,
    TMP_MOUNTS_CONFIG,
    Head,
    kill_leftover_jobs,
    make_head,
    wait_for,
)
from dockerenv import ensure_test_image, require_docker

NO_SPACE = os.strerror(errno.ENOSPC)


def _skip_or_fail(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted on `path` (created), unmounted on the way out."""
    if os.geteuid() != 0:
        _skip_or_fail("mounting a small tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    if mounted.returncode != 0:
        _skip_or_fail(f"cannot mount a tmpfs on {path}: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        done = subprocess.run(["umount", str(path)], capture_output=True, timeout=20)
        if done.returncode != 0:  # still held (a process that has not quite ended)
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=20)


def fill(directory: Path) -> Path:
    """Write a filler file in `directory` until its disk has not one byte left, then
    again a moment later: a file replaced as the first fill ended (the agent's lease)
    may have given a page back."""
    filler = directory / "filler"
    for settle in (0.5, 0.0):
        _fill_up(filler)
        time.sleep(settle)
    assert shutil.disk_usage(directory).free == 0
    return filler


def _fill_up(filler: Path) -> None:
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            block = b"\0" * size
            while True:
                try:
                    if os.write(fd, block) < size:
                        break
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)


def log_of(head: Head, job_id: int) -> str:
    return head.run("logs", str(job_id), check=True).stdout


def events_of(head: Head, job_id: int) -> list[dict[str, object]]:
    events: list[dict[str, object]] = head.job(job_id)["events"]  # type: ignore[assignment]
    return events


@pytest.fixture
def full_home(tmp_path: Path) -> Iterator[Head]:
    """A head whose whole GBATCH_HOME is a 16 MiB tmpfs."""
    with small_disk(tmp_path / "home", "16m") as home:
        head = make_head(home)
        head.start()
        try:
            yield head
        finally:
            head.stop()
            kill_leftover_jobs(head.home)


def test_a_full_store_disk_refuses_submits_clearly_and_loses_nothing(full_home: Head) -> None:
    head = full_home
    pid = head.daemon_pid()
    gate = head.home.parent / "go"  # off the full disk: the job ends when it appears
    ends_while_full = head.sbatch(
        "--wrap", f"while [ ! -e {gate} ]; do sleep 0.1; done; echo finished"
    )
    held = head.sbatch("--hold", "--wrap", "true")
    done = head.sbatch("--wrap", "echo early")
    head.wait_state(ends_while_full, "RUNNING")
    head.wait_state(done, "COMPLETED")
    acknowledged = [ends_while_full, held, done]
    filler = fill(head.home)

    refused = head.run("sbatch", "--wrap", "true")
    assert refused.returncode == 5  # Exit.UNAVAILABLE
    assert refused.stderr == (
        f"gbatch sbatch: error: the job store cannot write: disk full ({head.home}); "
        "nothing was queued. Free space there and resubmit\n"
    )
    assert refused.stdout == ""
    cancel = head.run("scancel", str(held))
    assert cancel.returncode == 1
    assert cancel.stderr == (
        f"gbatch scancel: error: Kill job error on job id {held}: the job store cannot "
        f"write: disk full ({head.home}); nothing was changed. Free space there and try again\n"
    )
    # The daemon lives and answers; a run that ends while the store cannot record it
    # stays RUNNING (its shim waits to write exit.json), never requeued nor lost.
    squeue = head.run("squeue", "-h", "-o", "%i %T", check=True).stdout.split()
    assert squeue == [str(held), "PENDING", str(ends_while_full), "RUNNING"]  # Slurm's order
    gate.touch()
    time.sleep(3)
    assert head.state(ends_while_full) == "RUNNING"
    assert head.daemon_pid() == pid

    filler.unlink()
    ended = head.wait_state(ends_while_full, "COMPLETED", "FAILED", "PENDING")
    assert (ended["state"], ended["exit_code"]) == ("COMPLETED", 0)
    assert [e["state"] for e in events_of(head, ends_while_full)] == [
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETED",
    ]
    # "finished" was written while the disk was full: lost, and the log says so.
    assert log_of(head, ends_while_full) == (
        f"\n[gbatch: 9 bytes of output lost: log write failed: {NO_SPACE}]\n"
    )
    after = head.sbatch("--wrap", "echo after")
    head.wait_state(after, "COMPLETED")
    assert log_of(head, after) == "after\n"
    assert head.state(held) == "PENDING" and head.daemon_pid() == pid
    history = head.run("sacct", "-X", "-n", "-o", "JobID", check=True).stdout.split()
    assert history == [str(i) for i in [*acknowledged, after]]
    head.stop()
    with sqlite3.connect(head.home / "gbatch.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        ids = [row[0] for row in db.execute("SELECT id FROM jobs ORDER BY id")]
    assert ids == [*acknowledged, after]


def test_the_gpu_history_on_a_full_disk_drops_samples_and_the_daemon_lives(
    tmp_path: Path,
) -> None:
    """A ring made before the disk filled keeps every sample (its space was had whole);
    one made after drops them, said once. A mapped sparse ring took the daemon down
    with SIGBUS instead (1 full-store run in ~15 under load). In a child, so that such
    a death is this test's failure, not the worker's."""
    with small_disk(tmp_path / "disk", "1m") as disk:
        code = f"""
import logging, sys
from pathlib import Path
from types import SimpleNamespace
from gbatch.head.gpuhistory import GpuHistory
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
def gpus(util):
    return [SimpleNamespace(index=0, memory_used_mib=1, utilization_pct=util)]
history = GpuHistory(Path({str(disk / "h")!r}))
history.record("n", gpus(2), 0)
with open({str(disk / "filler")!r}, "ab", buffering=0) as filler:
    try:
        while filler.write(bytes(1 << 16)):
            pass
    except OSError:
        pass
for second in range(1, 3600, 7):  # a page of slots every 455 s
    history.record("n", gpus(3), second)
    history.record("m", gpus(4), second)  # a GPU first seen now
print(len(history.series("n", 0, 0, 3600, 3600)), len(history.series("m", 0, 0, 3600, 3600)))
history.close()
"""
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        lines[0]
        == f"GPU history: cannot write ([Errno 28] {NO_SPACE}); samples dropped till it can"
    )
    assert lines[1:] == ["515 0"]


def end_all_jobs(head: Head) -> None:
    """Cancel what still runs and let the daemon remove its containers."""
    head.run("scancel", "--me")
    wait_for(
        lambda: head.run("squeue", "-h", check=True).stdout.strip() == "", 60, "no active jobs"
    )


def gated_job(head: Head, gate: Path, image: str | None, script: str) -> int:
    """Submit `script` (sh) with `gate`, a directory off the full disk, at the same path
    for a bare process and (mounted read-only) for a container."""
    job: dict[str, object] = {"name": "gated", "command": script}
    if image is not None:
        job.update(image=image, mounts=[f"{gate}:{gate}:ro"])
    job_file = gate.parent / f"job-{len(list(gate.parent.glob('job-*')))}.yaml"
    job_file.write_text(json.dumps(job))  # JSON is YAML
    return head.sbatch(str(job_file))


@pytest.mark.parametrize("kind", ["bare", pytest.param("container", marks=pytest.mark.docker)])
def test_a_full_log_disk_loses_output_but_no_job_and_says_so(tmp_path: Path, kind: str) -> None:
    image = None
    if kind == "container":
        require_docker()
        image = ensure_test_image()
    head = make_head(tmp_path / "home", config=FAST_CONFIG + TMP_MOUNTS_CONFIG)
    gate = tmp_path / "gate"
    gate.mkdir()
    with small_disk(head.home / "logs", "1m") as logs:
        head.start()
        try:
            filler = fill(logs)
            pid = head.daemon_pid()
            # Each echo fails the job if its output could not be written.
            slow = gated_job(
                head,
                gate,
                image,
                f"i=0; while [ ! -e {gate}/go ]; do i=$((i+1)); echo line$i || exit 3; "
                "sleep 0.2; done; echo last || exit 3",
            )
            quick = [gated_job(head, gate, image, "echo quick || exit 3") for _ in range(3)]
            for job_id in quick:  # other jobs keep being scheduled, and end well
                assert head.wait_state(job_id, "COMPLETED", "FAILED")["exit_code"] == 0
                assert log_of(head, job_id) == ""  # lost while the disk stayed full
            assert head.state(slow) == "RUNNING"
            filler.unlink()
            time.sleep(1)  # some output lands now
            (gate / "go").touch()
            record = head.wait_state(slow, "COMPLETED", "FAILED")
            assert (record["state"], record["exit_code"]) == ("COMPLETED", 0)
            lines = log_of(head, slow).splitlines()
            assert lines[-1] == "last"
            marker = [line for line in lines if line.startswith("[gbatch: ")]
            assert len(marker) == 1 and marker[0].endswith(
                f" bytes of output lost: log write failed: {NO_SPACE}]"
            ), lines
            assert lines.index(marker[0]) < lines.index("last") - 1  # more output after it
            assert head.daemon_pid() == pid
        finally:
            end_all_jobs(head)
            head.stop()
            kill_leftover_jobs(head.home)


@pytest.mark.docker
def test_a_host_whose_agent_dir_disk_is_full_fails_the_launch_with_the_reason(
    tmp_path: Path,
) -> None:
    from fleet import build_fleet, teardown_fleet

    # The host's files (its share dir, and so its agent_dir) live on this tmpfs,
    # mounted before the host container bind-mounts them.
    with small_disk(tmp_path / "gpu01", "4m") as host_disk:
        fleet = build_fleet(tmp_path, {"gpu01": 1})
        try:
            head = fleet.head
            wait_for(lambda: "idle" in head.run("sinfo", "-h", check=True).stdout, 30, "gpu01 up")
            filler = fill(host_disk)
            job = head.sbatch("--image", fleet.image, "--retries", "1", "--wrap", "true")
            record = head.wait_state(job, "FAILED", "COMPLETED", timeout=60)
            assert record["state"] == "FAILED"
            reason = str(record["reason"])
            assert reason.startswith("launch failed: ") and NO_SPACE in reason, reason
            states = [(e["state"], e["reason"]) for e in events_of(head, job)]
            # Retried once (--retries 1), then failed: both with the reason.
            failures = [r for s, r in states if str(r).startswith("launch failed: ")]
            assert [s for s, _ in states] == [
                "PENDING",
                "CONFIGURING",
                "PENDING",
                "CONFIGURING",
                "FAILED",
            ] and len(failures) == 2
            assert head.run("squeue", check=True).returncode == 0
            filler.unlink()
            after = head.sbatch("--image", fleet.image, "--wrap", "echo fine")
            head.wait_state(after, "COMPLETED", timeout=60)
            assert log_of(head, after) == "fine\n"
        finally:
            teardown_fleet(fleet)
    print(json.dumps({"reason": reason}))


def test_a_full_store_disk_is_posted_to_the_admins_webhook_directly(tmp_path: Path) -> None:
    received: list[dict[str, object]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/ops"
    config = FAST_CONFIG + f"webhooks: [{{name: ops, url: '{url}', events: [STORE_FULL]}}]\n"
    try:
        with small_disk(tmp_path / "home", "16m") as home:
            head = make_head(home, config=config)
            head.start()
            try:
                head.wait_state(head.sbatch("--wrap", "true"), "COMPLETED")  # made its key
                fill(home)
                assert head.run("sbatch", "--wrap", "true").returncode == 5
                wait_for(lambda: received, what="STORE_FULL at the admins' webhook")
            finally:
                head.stop()
                kill_leftover_jobs(head.home)
    finally:
        server.shutdown()
        server.server_close()
    event = received[0]
    assert event["kind"] == "STORE_FULL"
    assert event["head"] == {  # type: ignore[comparison-overlap]
        "name": socket.gethostname(),
        "reason": f"the job store cannot write: disk full ({home})",
    }
