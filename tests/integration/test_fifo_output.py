"""Issue 29, finding 1, re-run as a script: a FIFO named as a job's -o stopped scheduling
for everyone. `mkfifo ~/fifo; gbatch sbatch -o ~/fifo --wrap true` twice made the root
daemon's loop wait 30 s per job in the open of the FIFO (an opener child of the
dispatch step), so another user's job started a minute later; a 20-task array cost
ten minutes, and gbatchd.log said nothing.

Now `sbatch` refuses an existing FIFO at submit, and one that reaches the daemon (past
the CLI, through a pattern known only at start, over the HTTP API) is opened by the
job's own shim, without blocking, and refused there: the job runs on with its output
in `gbatch logs` only, its log's first line saying why, and no one else's job waits.
Real users (useradd), a real root daemon, its HTTP API.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import Head, require_root, shared_home
from test_http_api import serve_api

from gbatch.head.metrics import LOOP_BUCKETS
from gbatch.nodes.outfiles import OPEN_TIMEOUT
from gbatch.protocol import requests
from gbatch.protocol.client import Client

# The loop's pass interval (tick_seconds) of this head, and the longest a pass may take:
# the daemon's metrics count a pass past their largest finite bucket as an outage. A
# job queued behind the FIFO jobs must be running within one such pass and a tick;
# before the fix each FIFO held the loop for OPEN_TIMEOUT.
TICK = 0.2
ONE_PASS = LOOP_BUCKETS[-1]  # 10 s
ARRAY_TASKS = 20
CONFIG = f"tick_seconds: {TICK}\nreport_interval: 0.2\nkill_grace_seconds: 1\n"


@dataclass
class Lab:
    head: Head
    dir: Path  # the student's, where their FIFOs are
    student: User
    other: User

    def cli(self, user: User, *argv: str) -> dict[str, Any]:
        home, where = self.head.home, self.dir

        def in_dir() -> dict[str, Any]:
            os.chdir(where)
            return run_cli(home, *argv)

        result: dict[str, Any] = as_user(user, in_dir)
        return result

    def submit_raw(self, user: User, spec: dict[str, object], array: str | None = None) -> int:
        """A submit past the CLI's check, as any client of the socket may send it."""
        socket = self.head.home / "gbatchd.sock"

        def submit() -> int:
            with Client(socket) as client:
                return int(client.call(requests.Submit(spec=spec, array=array))["ids"][0])

        job_id: int = as_user(user, submit)
        return job_id

    def fifo(self, name: str) -> Path:
        path = self.dir / name
        os.mkfifo(path)
        os.chown(path, self.student.uid, self.student.gid)
        return path

    def log(self, job_id: int) -> list[str]:
        return (self.head.home / "logs" / f"{job_id}.log").read_text().splitlines()

    def daemon_log_size(self) -> int:
        return (self.head.home / "gbatchd.log").stat().st_size


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    require_root("to make users and run a root daemon for them")
    preload()
    with (
        temp_users("gbfifo", ["student", "other"]) as users,
        shared_home("gbatch-fifo-", CONFIG + "socket_mode: '666'\n") as head,
    ):
        student = users["student"]
        where = head.home.parent / "student"
        where.mkdir()
        os.chown(where, student.uid, student.gid)
        head.start()
        yield Lab(head, where, student, users["other"])


def refused_note(job_id: int, path: Path) -> str:
    return (
        f"[gbatch: the output file is not written ({path} is a FIFO; a job writes only to a "
        f"regular file or /dev/null); this attempt's output is in `gbatch logs {job_id}` only]"
    )


def all_passes_within(head: Head, bound: float) -> tuple[int, int]:
    """(passes at most `bound` long, all passes) since the daemon started."""
    with Client(head.home / "gbatchd.sock") as client:
        loop = client.call(requests.Metrics())["daemon"]["loop"]
    counts = {str(bound_): count for bound_, count in loop["buckets"]}
    return counts[str(bound)], counts["+Inf"]


def test_a_fifo_as_output_holds_up_no_other_users_job(lab: Lab) -> None:
    assert ONE_PASS + TICK < OPEN_TIMEOUT  # else this would pass on the unfixed daemon
    log_before = lab.daemon_log_size()
    fifo = lab.fifo("fifo")
    # Past sbatch's check (below): twice with nobody reading, once with a reader
    # holding the FIFO open (its open then succeeds at once, and is refused for what
    # the file is), and an array whose -o pattern names a FIFO per task (%a: known only
    # at start, so sbatch checks the directory alone).
    read_fifo = lab.fifo("read-fifo")
    reader = os.open(read_fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        spec = {"name": "fifo", "command": "echo to-the-log", "submit_dir": str(lab.dir)}
        fifo_jobs = [
            lab.submit_raw(lab.student, {**spec, "output": str(fifo)}),
            lab.submit_raw(lab.student, {**spec, "output": str(fifo)}),
            lab.submit_raw(lab.student, {**spec, "output": str(read_fifo)}),
        ]
        fifos = [fifo, fifo, read_fifo]
        for task in range(ARRAY_TASKS):
            lab.fifo(f"task-{task}")
        done = lab.cli(
            lab.student,
            "sbatch",
            "--parsable",
            "-a",
            f"0-{ARRAY_TASKS - 1}",
            "-o",
            "task-%a",
            "--wrap",
            "echo to-the-log",
        )
        assert done["rc"] == 0, done["err"]
        array = int(done["out"])
        fifo_jobs += [array + task for task in range(ARRAY_TASKS)]
        fifos += [lab.dir / f"task-{task}" for task in range(ARRAY_TASKS)]
        # Another user's job, queued behind all of them.
        began = time.monotonic()
        done = lab.cli(lab.other, "sbatch", "--parsable", "-D", "/tmp", "--wrap", "sleep 1")
        assert done["rc"] == 0, done["err"]
        victim = int(done["out"])
        lab.head.wait_state(victim, "RUNNING", "COMPLETED", timeout=ONE_PASS + TICK)
        waited = time.monotonic() - began
        for job_id, path in zip(fifo_jobs, fifos, strict=True):
            lab.head.wait_state(job_id, "COMPLETED")
            assert lab.log(job_id) == [refused_note(job_id, path), "to-the-log"]
        assert os.read(reader, 100) == b""  # nothing reached the FIFO's reader
    finally:
        os.close(reader)
    within, passes = all_passes_within(lab.head, ONE_PASS)
    assert within == passes, f"{passes - within} loop passes took over {ONE_PASS} s"
    # gbatchd.log: nothing unbounded (the refusals are the jobs' own, in their logs).
    grown = (lab.head.home / "gbatchd.log").read_bytes()[log_before:]
    assert len(grown) < 8192 and b"Traceback" not in grown, grown.decode(errors="replace")
    print(f"another user's job ran {waited:.2f} s after it was submitted")
    # sbatch itself looks (stat, never an open) and refuses it, queueing nothing.
    queued = lab.head.run("squeue", "-h", check=True).stdout
    done = lab.cli(lab.student, "sbatch", "-o", str(fifo), "--wrap", "true")
    assert (done["rc"], done["err"]) == (
        2,
        f"gbatch sbatch: error: -o/--output: {fifo} is a FIFO; a job writes only to a "
        "regular file or /dev/null\n",
    )
    assert lab.head.run("squeue", "-h", check=True).stdout == queued


def test_a_fifo_over_the_http_api_is_refused_at_start_and_a_relative_path_at_submit(
    lab: Lab,
) -> None:
    token = lab.cli(lab.student, "token", "--scope", "submit,read")
    assert token["rc"] == 0, token["err"]
    fifo = lab.fifo("api-fifo")
    with serve_api(lab.head) as url:

        def post(text: str) -> tuple[int, dict[str, Any]]:
            request = urllib.request.Request(
                f"{url}/jobs",
                data=text.encode(),
                method="POST",
                headers={
                    "Content-Type": "application/yaml",
                    "Authorization": f"Bearer {token['out'].strip()}",
                },
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as reply:
                    return reply.status, json.loads(reply.read())
            except urllib.error.HTTPError as err:
                return err.code, json.loads(err.read())

        status, reply = post(f"command: echo via-api\noutput: {fifo}\n")
        assert status == 201, reply
        job_id = int(reply["job_id"])
        lab.head.wait_state(job_id, "COMPLETED")
        assert lab.log(job_id) == [refused_note(job_id, fifo), "via-api"]
        # A relative path has no submit directory to start from: it was dropped
        # silently (StdOut=(null)); now it is refused, and nothing is queued.
        status, reply = post("command: echo lost\noutput: logs/%j.out\n")
        assert (status, reply["kind"]) == (400, "invalid")
        assert reply["error"] == (
            'output: "logs/%j.out" is a relative path, and a job submitted without a submit '
            "directory (as over the HTTP API) has nowhere to start it. Give an absolute path"
        )
