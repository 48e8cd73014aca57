"""Simulated GPU hosts as containers: one sshd per host, reached on 127.0.0.1 only.

Each host is a container of gbatch-host:latest (tests/images/build-host-image.sh,
built on first use) started with testcontainers. Root logs in with a client key made
per host in tmp_path; the host key is fresh too. The host runs the gbatch agent with
python3 and the docker CLI of this machine, bind-mounted with the engine's socket, so
its job containers are real containers on this machine's engine (siblings of the
host, not children: removing a host leaves its jobs to the test's teardown).

`share` is a directory of tmp_path mounted at the same absolute path in the host:
put the agent and its simulation file there, and paths mean the same on both sides,
for the test, the agent, and the engine that mounts job files.

Plain functions, no fixtures: nothing starts unless called. Locally a missing engine
or image builder skips the test; in CI (env CI == "true") it fails it. Ryuk, the
testcontainers reaper, is off (its image cannot be pulled here): stop() is the only
clean-up, and every host carries the label `gbatch.test-host` to find leftovers.
"""

from __future__ import annotations

import os

# Before the import: testcontainers reads it when it first starts a container.
os.environ["TESTCONTAINERS_RYUK_DISABLED"] = "true"

import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dockerenv import REPO_ROOT, require_docker
from sshd import keygen
from testcontainers.core.container import DockerContainer

HOST_IMAGE = "gbatch-host:latest"
BUILD_SCRIPT = REPO_ROOT / "tests" / "images" / "build-host-image.sh"
HOST_LABEL = "gbatch.test-host"  # its value is the host's name
HOST_START_LABEL = "gbatch.test-host-start"  # a token of one start_host call
CLIENT_IN_HOST = "/usr/local/bin/docker"  # first on root's PATH in an SSH session
SSH_PORT = "22/tcp"
_BANNER_WAIT_S = 20.0
_BUILD_TIMEOUT_S = 600


@dataclass
class Host:
    """One running host container and the files a client needs to reach it."""

    name: str
    port: int
    user: str
    client_key: Path
    known_hosts: Path  # one line: `[127.0.0.1]:<port> <host key>`
    host_key_pub: Path
    share: Path  # the same path on this machine and in the host
    agent_python: str
    container: DockerContainer

    def stop(self) -> None:
        """Remove the container at once (SIGKILL): its sshd, sessions and agent end,
        as on a host that loses power. Job containers it started stay."""
        self.container.stop(force=True)

    def logs(self) -> str:
        return _logs(self.container)

    def run_as_root(self, *argv: str) -> str:
        """`argv` run in the host as root, not over SSH (a test's own look at it): stdout."""
        return subprocess.run(
            ["docker", "exec", self.container.get_container_id(), *argv],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout


def docker_client_binary() -> Path:
    """The docker CLI mounted into each host: GBATCH_HOST_DOCKER_CLIENT, else the
    `docker` on PATH. It must run inside bookworm; the image build checks that it does."""
    chosen = os.environ.get("GBATCH_HOST_DOCKER_CLIENT") or shutil.which("docker")
    if not chosen:
        raise RuntimeError(
            "no docker client to mount into the hosts; set GBATCH_HOST_DOCKER_CLIENT"
        )
    return Path(chosen).resolve()


def engine_socket() -> Path:
    """The engine's unix socket on this machine (DOCKER_HOST=unix://..., else the default)."""
    docker_host = os.environ.get("DOCKER_HOST", "")
    if docker_host.startswith("unix://"):
        return Path(docker_host.removeprefix("unix://"))
    return Path("/var/run/docker.sock")


def _skip_or_fail(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def ensure_host_image(image: str = HOST_IMAGE, build_script: Path = BUILD_SCRIPT) -> str:
    """Build the host image when it is missing (offline, no pull); return its name.

    Call require_docker() first. Without mmdebstrap the test is skipped (failed in CI);
    a build that fails fails the test.
    """
    present = subprocess.run(
        ["docker", "image", "inspect", image], capture_output=True, timeout=20, check=False
    )
    if present.returncode == 0:
        return image
    if shutil.which("mmdebstrap") is None:
        _skip_or_fail(
            f"{image} is missing and mmdebstrap is not installed to build it; "
            "run .ci/setup-docker.sh as root"
        )
    built = subprocess.run(
        [str(build_script)], capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S, check=False
    )
    if built.returncode != 0:
        pytest.fail(f"building {image} failed:\n{built.stdout}{built.stderr}")
    return image


def start_host(tmp_path: Path, name: str, image: str | None = None, user: str = "root") -> Host:
    """Start host `name` from files under tmp_path/<name>; return once its sshd has sent
    its "SSH-2.0" banner on the published port.

    Creates tmp_path/<name>/ssh (keys, known_hosts) and tmp_path/<name>/share (mounted
    at the same path). `image`: another image than gbatch-host's (built by the caller),
    whose login is `user` (the key is root's authorized key; the image passes it on).
    Skips or fails the test like require_docker() when the engine or the image is
    missing.
    """
    require_docker()
    image = image or ensure_host_image()
    base = tmp_path / name
    keys = base / "ssh"
    share = base / "share"
    keys.mkdir(parents=True)
    share.mkdir()
    host_key = keys / "host_ed25519"
    client_key = keys / "client_ed25519"
    keygen(host_key, f"gbatch-test-host-{name}")
    keygen(client_key, "gbatch-test-client")
    authorized_keys = keys / "authorized_keys"
    authorized_keys.write_bytes(client_key.with_suffix(".pub").read_bytes())
    authorized_keys.chmod(0o600)

    # A label of this start alone: a start the engine refuses leaves a created container
    # that testcontainers never hands back, found and removed by this label.
    token = secrets.token_hex(8)
    labels = {HOST_LABEL: name, HOST_START_LABEL: token}
    container = DockerContainer(image, hostname=name, labels=labels)
    # docker-py takes (interface, port) to publish on one interface; port None picks a
    # free one. testcontainers' annotation knows only a port, hence the Any view.
    ports: dict[str, Any] = container.ports
    ports[SSH_PORT] = ("127.0.0.1", None)
    container.with_volume_mapping(host_key, "/etc/ssh/ssh_host_ed25519_key", "ro")
    container.with_volume_mapping(authorized_keys, "/root/.ssh/authorized_keys", "ro")
    container.with_volume_mapping(engine_socket(), "/var/run/docker.sock", "rw")
    container.with_volume_mapping(docker_client_binary(), CLIENT_IN_HOST, "ro")
    container.with_volume_mapping(share, str(share), "rw")
    try:
        container.start()
        port = _published_port(container)
        _wait_for_banner(port, container)
    except BaseException:
        left = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label={HOST_START_LABEL}={token}"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        if left:
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True, timeout=60)
        raise

    known_hosts = keys / "known_hosts"
    host_pub = host_key.with_suffix(".pub")
    key_type, key_b64 = host_pub.read_text().split()[:2]
    known_hosts.write_text(f"[127.0.0.1]:{port} {key_type} {key_b64}\n")
    known_hosts.chmod(0o600)
    return Host(
        name=name,
        port=port,
        user=user,
        client_key=client_key,
        known_hosts=known_hosts,
        host_key_pub=host_pub,
        share=share,
        agent_python="python3",
        container=container,
    )


def _published_port(container: DockerContainer) -> int:
    """The 127.0.0.1 port docker chose for sshd; refuses a binding on any other address."""
    api = container.get_docker_client().client.api
    bindings: list[dict[str, str]] = api.port(container.get_container_id(), 22) or []
    if not bindings:
        raise RuntimeError(f"docker published no port for sshd:\n{_logs(container)}")
    for binding in bindings:
        if binding["HostIp"] != "127.0.0.1":
            raise RuntimeError(f"sshd is published on {binding['HostIp']}, not only 127.0.0.1")
    return int(bindings[0]["HostPort"])


def _logs(container: DockerContainer) -> str:
    out, err = container.get_logs()
    return (out + err).decode(errors="replace")


def _wait_for_banner(port: int, container: DockerContainer) -> None:
    # docker's proxy accepts connections before sshd listens, and closes them: only the
    # banner proves sshd is up.
    deadline = time.monotonic() + _BANNER_WAIT_S
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
                if conn.recv(64).startswith(b"SSH-2.0"):
                    return
        except OSError:
            pass
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        if wrapped.status != "running":
            raise RuntimeError(f"the host stopped ({wrapped.status}); its log:\n{_logs(container)}")
        time.sleep(0.05)
    raise RuntimeError(
        f"the host sent no SSH-2.0 banner on port {port} within {_BANNER_WAIT_S} s; "
        f"its log:\n{_logs(container)}"
    )
