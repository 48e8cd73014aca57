"""A real OpenSSH server per test: fresh keys in tmp_path, a free 127.0.0.1 port.

Plain functions, no fixtures: nothing starts unless called. Locally a missing sshd skips
the test; in CI (env CI == "true") it fails it, since a missing component there is a
broken pipeline, not a reason to test less. Install one with `.ci/setup-sshd.sh` (root).

The server runs as the current user and lets in only the client key made here.
stop() ends the per-connection sshd processes too, as a host that goes down would.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

SSHD = Path("/usr/sbin/sshd")
_BANNER_WAIT_S = 10.0


@dataclass
class Sshd:
    """One running sshd and the files a client needs to reach it."""

    port: int
    user: str
    host_key_pub: Path
    client_key: Path
    known_hosts: Path
    config: Path
    log: Path
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Terminate the server, its connections and their commands; wait for it to exit."""
        # Each connection's sshd calls setsid(), so killing the group would miss it.
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self) -> None:
        """stop(), then the same server again: same port, keys and configuration."""
        self.stop()
        self.process = _launch(self.config, self.port, self.log)

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def sshd_available() -> bool:
    return SSHD.is_file() and os.access(SSHD, os.X_OK)


def require_sshd() -> None:
    """Skip the calling test without an sshd; fail it instead when CI == "true"."""
    if sshd_available():
        return
    message = f"{SSHD} is missing; run .ci/setup-sshd.sh as root"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


# Under pytest-xdist each worker hands out ports from a range of its own, below the
# kernel's ephemeral range (32768-60999): between the probe and the server's own bind,
# neither another worker's server nor an outgoing connection can take the port.
_PORT_BASE = 20000
_PORTS_PER_WORKER = 500
_port_turn = itertools.count()


def free_port() -> int:
    """A 127.0.0.1 port nothing listens on right now, for a server that cannot pick its
    own (sshd, prometheus). Without xdist, the kernel's choice (another process could
    take it before use)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...
    if not worker.removeprefix("gw").isdigit():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port: int = probe.getsockname()[1]
            return port
    first = _PORT_BASE + int(worker.removeprefix("gw")) * _PORTS_PER_WORKER
    for _ in range(_PORTS_PER_WORKER):
        candidate = first + next(_port_turn) % _PORTS_PER_WORKER
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", candidate))
            except OSError:
                continue  # in use, or in TIME_WAIT from an earlier test
            return candidate
    raise RuntimeError(f"no free port in {worker}'s range from {first}")


def keygen(path: Path, comment: str) -> None:
    """A fresh passphrase-less ed25519 key pair at path and path.pub."""
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        timeout=30,
    )


def start_sshd(tmp_path: Path, extra_config: str = "") -> Sshd:
    """Generate keys and a configuration under tmp_path/sshd and start sshd on a free port.

    `extra_config`: sshd_config lines appended. Returns once the server has sent its
    "SSH-2.0" banner. Calls require_sshd() first.
    """
    require_sshd()
    base = tmp_path / "sshd"
    base.mkdir()
    host_key = base / "host_ed25519"
    client_key = base / "client_ed25519"
    keygen(host_key, "gbatch-test-host")
    keygen(client_key, "gbatch-test-client")
    authorized_keys = base / "authorized_keys"
    authorized_keys.write_bytes(client_key.with_suffix(".pub").read_bytes())
    authorized_keys.chmod(0o600)
    if os.getuid() == 0:
        # The privilege-separation directory sshd refuses to start without (as root).
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)

    port = free_port()
    config = base / "sshd_config"
    config.write_text(
        f"""\
ListenAddress 127.0.0.1
Port {port}
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
StrictModes no
UsePAM no
PidFile none
Subsystem sftp internal-sftp
{extra_config}"""
    )
    known_hosts = base / "known_hosts"
    host_pub = host_key.with_suffix(".pub")
    key_type, key_b64 = host_pub.read_text().split()[:2]
    known_hosts.write_text(f"[127.0.0.1]:{port} {key_type} {key_b64}\n")
    known_hosts.chmod(0o600)

    log = base / "sshd.log"
    process = _launch(config, port, log)
    return Sshd(
        port=port,
        user=pwd.getpwuid(os.getuid()).pw_name,
        host_key_pub=host_pub,
        client_key=client_key,
        known_hosts=known_hosts,
        config=config,
        log=log,
        process=process,
    )


def _launch(config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as log_file:
        process = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,  # a Ctrl-C in the test run is the tests' to handle
        )
    try:
        _wait_for_banner(port, process, log)
    except BaseException:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        raise
    return process


def descendants(root: int) -> list[int]:
    """Every live process below `root`, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it ended while we looked
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    todo = [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def _wait_for_banner(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _BANNER_WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"sshd exited with status {process.returncode} before listening; "
                f"its log:\n{log.read_text(errors='replace')}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
                if conn.recv(64).startswith(b"SSH-2.0"):
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"sshd sent no SSH-2.0 banner on port {port} within {_BANNER_WAIT_S} s")
