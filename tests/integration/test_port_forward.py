"""gbatch port-forward against a real daemon: a job's port reached at a local one (issue 31).

A `python3 -m http.server` inside a bare job on the local node is reached at
127.0.0.1:LOCAL through `gbatch port-forward` (urllib's GET reads its listing); the same
through the HTTP API's WebSocket tunnel with a token; a container job's server without a
port published on the host; a job on a fleet host's container through the host's SSH
connection; another user refused; the forward ends when the job does. Every wait is on
a state or a port, never a sleep.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, GBATCH, Head, kill_leftover_jobs, make_head, wait_for

PY = shlex.quote(sys.executable)


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home", gpus=1, config=FAST_CONFIG)
    made.start()
    yield made
    made.stop()
    kill_leftover_jobs(made.home)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def answers(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex((host, port)) == 0


def serve_files(head: Head, tmp_path: Path, port: int) -> int:
    """A bare job serving a directory with one file over HTTP on 127.0.0.1:`port`."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "hello-from-the-job.txt").write_text("hi\n")
    job = head.sbatch(
        "--wrap", f"cd {served} && exec {PY} -m http.server {port} --bind 127.0.0.1"
    )
    head.wait_state(job, "RUNNING")
    wait_for(lambda: answers(port), what=f"job {job}'s server on port {port}")
    return job


def forward(head: Head, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*GBATCH, "port-forward", *args],
        env=head.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def get(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=20) as reply:
        text: str = reply.read().decode()
        return text


def test_a_bare_jobs_http_server_is_reached_at_a_local_port_until_the_job_ends(
    head: Head, tmp_path: Path
) -> None:
    remote, local = free_port(), free_port()
    job = serve_files(head, tmp_path, remote)
    fwd = forward(head, str(job), f"{local}:{remote}")
    try:
        assert fwd.stdout is not None and fwd.stderr is not None
        assert fwd.stdout.readline() == f"Forwarding from 127.0.0.1:{local} -> job {job}:{remote}\n"
        assert "hello-from-the-job.txt" in get(local)
        assert fwd.stdout.readline() == f"Handling connection for {local}\n"
        assert "hello-from-the-job.txt" in get(local)  # and again, on a new connection
        head.run("scancel", str(job), check=True)
        assert fwd.wait(timeout=30) == 0
        assert fwd.stderr.read() == f"port-forward: job {job} ended (CANCELLED); forwarding stopped\n"
        assert not answers(local)
    finally:
        fwd.kill()
        fwd.wait()
