"""gbatch port-forward against a real daemon: a job's port reached at a local one (issue 31).

A `python3 -m http.server` inside a bare job on the local node is reached at
127.0.0.1:LOCAL through `gbatch port-forward` (urllib's GET reads its listing); the same
through the HTTP API's WebSocket tunnel with a token; a container job's server without a
port published on the host; a job on a fleet host's container through the host's SSH
connection; another user refused; the forward ends when the job does. Every wait is on
a state or a port, never a sleep.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asuser import as_user, preload, run_cli, temp_users
from conftest import (
    FAST_CONFIG,
    GBATCH,
    Head,
    container_head,
    kill_leftover_jobs,
    make_head,
    require_root,
    service_config,
    shared_home,
    wait_for,
)
from dockerenv import ensure_test_image, require_docker
from fleet import build_fleet, teardown_fleet
from test_http_api import http, serve_api, token_user

from gbatch.core.paths import resolve_paths
from gbatch.protocol import requests
from gbatch.protocol.client import Client, RequestFailed

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
    job = head.sbatch("--wrap", f"cd {served} && exec {PY} -m http.server {port} --bind 127.0.0.1")
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
        assert (
            fwd.stderr.read() == f"port-forward: job {job} ended (CANCELLED); forwarding stopped\n"
        )
        assert not answers(local)
    finally:
        fwd.kill()
        fwd.wait()


def test_a_port_nothing_listens_on_is_refused_per_connection_and_the_forward_goes_on(
    head: Head, tmp_path: Path
) -> None:
    remote, local, idle = free_port(), free_port(), free_port()
    job = serve_files(head, tmp_path, remote)
    fwd = forward(head, str(job), f"{local}:{idle}")
    try:
        assert fwd.stdout is not None and fwd.stderr is not None
        fwd.stdout.readline()
        with socket.create_connection(("127.0.0.1", local), timeout=20) as conn:
            assert conn.recv(10) == b""  # closed: nothing to reach
        assert fwd.stderr.readline() == (
            f"port-forward: error: nothing in job {job} listens on port {idle} (connection "
            f"refused). Start the server there first, listening on 127.0.0.1:{idle} (or "
            "0.0.0.0 in a container)\n"
        )
        assert fwd.poll() is None
    finally:
        fwd.kill()
        fwd.wait()
        head.run("scancel", str(job))


def test_a_job_not_running_is_refused_in_one_line(head: Head) -> None:
    job = head.sbatch("--hold", "--wrap", "true")
    done = head.run("port-forward", str(job), "8888")
    assert done.returncode == 2
    assert done.stderr == (
        f"gbatch port-forward: error: job {job} is not running yet (PENDING); a step runs in "
        f"a running job. Wait for it (gbatch squeue -j {job})\n"
    )
    bad = head.run("port-forward", str(job), "88x88")
    assert bad.returncode == 2 and "is not LOCAL[:REMOTE]" in bad.stderr


# -- the HTTP API -------------------------------------------------------------------------


def test_the_http_api_tunnel_reaches_the_tokens_users_job_and_needs_the_ports_scope(
    tmp_path: Path,
) -> None:
    made = make_head(tmp_path / "home", gpus=1, config=FAST_CONFIG + service_config())
    # Where the token's account (not root) can read it.
    served = Path(tempfile.mkdtemp(prefix="gbatch-forward-", dir="/tmp"))
    made.start()
    try:
        with serve_api(made) as api:
            remote, local = free_port(), free_port()
            served.chmod(0o755)
            (served / "hello-through-the-api.txt").write_text("hi\n")
            token = made.run(
                "token", "--user", token_user(), "--scope", "submit,read,ports", check=True
            ).stdout.strip()
            script = (
                f"#!/bin/sh\ncd {served} && exec python3 -m http.server {remote} --bind 127.0.0.1\n"
            )
            status, reply, _ = http(f"{api}/jobs", "POST", token, script)
            assert status == 201, reply
            job = int(reply["job_id"])  # type: ignore[call-overload]
            made.wait_state(job, "RUNNING")
            wait_for(lambda: answers(remote), what="the job's server")
            fwd = forward(
                made,
                "--api",
                api.removesuffix("/api/v1"),
                "--token",
                token,
                str(job),
                f"{local}:{remote}",
            )
            try:
                assert fwd.stdout is not None and fwd.stderr is not None
                assert (
                    fwd.stdout.readline()
                    == f"Forwarding from 127.0.0.1:{local} -> job {job}:{remote}\n"
                )
                assert "hello-through-the-api.txt" in get(local)
                made.run("scancel", str(job), check=True)
                assert fwd.wait(timeout=30) == 0, fwd.stderr.read()
                assert f"job {job} ended (CANCELLED)" in fwd.stderr.read()
            finally:
                fwd.kill()
                fwd.wait()
            narrow = made.run(
                "token", "--user", token_user(), "--scope", "read", check=True
            ).stdout.strip()
            refused = made.run("port-forward", "--api", api, "--token", narrow, str(job), "8888")
            assert refused.returncode == 4, refused.stderr
            assert "the token does not allow ports" in refused.stderr
    finally:
        made.stop()
        kill_leftover_jobs(made.home)
        shutil.rmtree(served, ignore_errors=True)


# -- containers ---------------------------------------------------------------------------


@pytest.mark.docker
def test_a_container_jobs_server_is_reached_without_a_published_port(tmp_path: Path) -> None:
    require_docker()
    image = ensure_test_image()
    with container_head(tmp_path / "home", gpus=1) as head:
        serve = (
            "mkdir -p /tmp/www && echo hello-from-the-container > /tmp/www/index.html && "
            "exec httpd -f -p 8000 -h /tmp/www"
        )
        job = head.sbatch("--image", image, "--wrap", serve)
        head.wait_state(job, "RUNNING")
        name = f"gbatch-{job}-1"
        ports = subprocess.run(
            ["docker", "inspect", "-f", "{{json .NetworkSettings.Ports}}", name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "HostPort" not in ports  # nothing published on the host's interfaces
        local = free_port()
        fwd = forward(head, str(job), f"{local}:8000")
        try:
            assert fwd.stdout is not None and fwd.stderr is not None
            assert fwd.stdout.readline() == f"Forwarding from 127.0.0.1:{local} -> job {job}:8000\n"

            def served() -> bool:
                try:
                    return "hello-from-the-container" in get(local)
                except OSError:  # httpd not listening yet: the connection is refused
                    return False

            wait_for(served, what="the container's httpd through the forward")
            head.run("scancel", str(job), check=True)
            assert fwd.wait(timeout=60) == 0
        finally:
            fwd.kill()
            fwd.wait()


@pytest.mark.docker
def test_a_job_on_a_fleet_host_is_reached_through_the_hosts_ssh_connection(
    tmp_path: Path,
) -> None:
    fleet = build_fleet(tmp_path, {"gpu07": 1})
    try:
        head = fleet.head
        serve = (
            "mkdir -p /tmp/www && echo hello-from-gpu07 > /tmp/www/index.html && "
            "exec httpd -f -p 8000 -h /tmp/www"
        )
        job = head.sbatch("--image", fleet.image, "--wrap", serve)
        head.wait_state(job, "RUNNING", timeout=60)
        local = free_port()
        fwd = forward(head, str(job), f"{local}:8000")
        try:
            assert fwd.stdout is not None and fwd.stderr is not None
            assert fwd.stdout.readline() == f"Forwarding from 127.0.0.1:{local} -> job {job}:8000\n"

            def served() -> bool:
                try:
                    return "hello-from-gpu07" in get(local)
                except OSError:  # httpd not listening yet: the connection is refused
                    return False

            wait_for(served, what="the host's container through the forward")
            head.run("scancel", str(job), check=True)
            assert fwd.wait(timeout=60) == 0
            assert f"job {job} ended (CANCELLED)" in fwd.stderr.read()
        finally:
            fwd.kill()
            fwd.wait()
    finally:
        teardown_fleet(fleet)


# -- other users --------------------------------------------------------------------------


def test_another_user_is_refused_and_cannot_reach_a_port_that_is_not_their_jobs() -> None:
    require_root("to make users and run a root daemon for them")
    preload()
    preload(("gbatch.cli.port_forward", "gbatch.cli.stepclient"))
    config = FAST_CONFIG + "socket_mode: '666'\n"
    with (
        temp_users("gbpf", ["student"]) as users,
        shared_home("gbatch-forward-", config=config) as head,
        socket.socket() as roots_server,  # root's: a system service, another user's job
    ):
        head.start()
        roots_server.bind(("127.0.0.1", 0))
        roots_server.listen()
        roots_port = roots_server.getsockname()[1]
        student = users["student"]
        roots = head.sbatch("--wrap", "sleep 120")
        head.wait_state(roots, "RUNNING")
        try:

            def refused() -> dict[str, Any]:
                os.chdir("/tmp")
                return run_cli(head.home, "port-forward", str(roots), "8888")

            done = as_user(student, refused)
            assert done["rc"] == 4, done
            assert done["err"] == (
                f"gbatch port-forward: error: Access/permission denied: job {roots} is root's, "
                "and only its owner forwards ports to it\n"
            )
            log = (head.home / "gbatchd.log").read_text()
            assert f"op=port_forward job={roots} owner=root -> refused: not the owner" in log

            def through_own_job() -> dict[str, Any]:
                os.chdir("/tmp")
                own = run_cli(head.home, "sbatch", "--parsable", "--wrap", "sleep 120")
                job = int(own["out"].strip())
                client = Client(resolve_paths(os.environ).socket)
                for _ in range(300):  # its run, as the daemon records it
                    state = client.call(requests.ShowJob(id=job))["job"]["state"]
                    if state == "RUNNING":
                        break
                    time.sleep(0.1)  # a child of its own: conftest's wait_for is not here
                try:
                    client.call(requests.OpenForward(job=job, ports=(roots_port,)))
                except RequestFailed as err:
                    return {"kind": err.kind, "message": err.message, "job": job}
                finally:  # on a connection of its own: a forward's ends with it
                    Client(resolve_paths(os.environ).socket).call(requests.Cancel(ids=(job,)))
                return {"kind": None}

            reply = as_user(student, through_own_job)
            assert reply["kind"] == "not_found", reply
            assert reply["message"] == (
                f"nothing of job {reply['job']} listens on port {roots_port}: the socket on its "
                f"host's 127.0.0.1:{roots_port} is another user's"
            )
        finally:
            head.run("scancel", str(roots))
