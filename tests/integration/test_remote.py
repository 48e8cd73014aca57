"""gbatch.nodes.ssh against a real OpenSSH server started per test (tests/integration/sshd.py)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import paramiko
import pytest
from sshd import Sshd, descendants, free_port, start_sshd

from gbatch.nodes.backoff import Backoff
from gbatch.nodes.ssh import (
    HostKeyError,
    RemoteError,
    RemoteTimeout,
    SshConnection,
    SshTarget,
    fetch_host_key,
    fingerprint,
    trust_host_key,
)

# Generous bounds: these tests check behaviour, not speed.
T = 30.0


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[Sshd]:
    server = start_sshd(tmp_path)
    yield server
    server.stop()


def target_for(server: Sshd, **changes: object) -> SshTarget:
    target = SshTarget(
        name="gpu1",
        host="127.0.0.1",
        port=server.port,
        user=server.user,
        identity_file=server.client_key,
        known_hosts=server.known_hosts,
    )
    return replace(target, **changes)  # type: ignore[arg-type]


@pytest.fixture
def conn(sshd: Sshd) -> Iterator[SshConnection]:
    connection = SshConnection(target_for(sshd))
    connection.connect()
    yield connection
    connection.close()


def keygen_fingerprint(pub: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)],
        capture_output=True,
        text=True,
        check=True,
        timeout=T,
    ).stdout
    return out.split()[1]


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + T
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# --- run ---------------------------------------------------------------------------------


def test_run_returns_exit_status_stdout_and_stderr(conn: SshConnection) -> None:
    result = conn.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=T)
    assert result.exit_status == 3
    assert result.stdout == b"out\n"
    assert result.stderr == b"err\n"


def test_each_channel_opened_measures_the_round_trip_for_metrics(conn: SshConnection) -> None:
    assert conn.round_trip is None  # connected, no channel yet
    before = time.monotonic()
    conn.run(["true"], timeout=10)
    assert conn.round_trip is not None
    seconds, measured = conn.round_trip
    assert 0 < seconds < 5 and before <= measured <= time.monotonic()


def test_shell_syntax_in_argv_arrives_as_inert_arguments(
    conn: SshConnection, tmp_path: Path
) -> None:
    canary = tmp_path / "canary"
    args = [
        "two words",
        "it's",
        '"double"',
        f"$(touch {canary})",
        f"`touch {canary}`",
        ";",
        f"; touch {canary}",
        "&& true",
        "*",
        "",
    ]
    result = conn.run(["printf", "%s\\n", *args], timeout=T)
    assert result.exit_status == 0
    assert result.stdout.decode().split("\n")[:-1] == args
    assert not canary.exists()


def test_stdin_is_passed_to_the_command(conn: SshConnection) -> None:
    data = b"line one\n\x00binary\xff" * 10_000  # larger than one SSH packet
    result = conn.run(["cat"], timeout=T, stdin=data)
    assert result.exit_status == 0
    assert result.stdout == data


def test_command_without_stdin_reads_end_of_input(conn: SshConnection) -> None:
    result = conn.run(["cat"], timeout=T)
    assert (result.exit_status, result.stdout) == (0, b"")


def test_run_past_its_timeout_raises_and_leaves_the_connection_usable(
    conn: SshConnection,
) -> None:
    started = time.monotonic()
    # Runs until its stdout goes away: the remote process ends once the channel closes.
    endless = ["sh", "-c", "while echo .; do sleep 0.2; done"]
    with pytest.raises(RemoteTimeout, match=r"did not finish within 0\.5 s"):
        conn.run(endless, timeout=0.5)
    assert time.monotonic() - started < T  # bounded by the timeout, not by the command
    assert conn.run(["true"], timeout=T).exit_status == 0


def test_run_on_a_closed_connection_raises_remote_error(conn: SshConnection) -> None:
    conn.close()
    assert not conn.connected
    with pytest.raises(RemoteError, match="not connected"):
        conn.run(["true"], timeout=T)


# --- stream ------------------------------------------------------------------------------


def test_stream_yields_lines_as_they_come_then_the_exit_status(conn: SshConnection) -> None:
    script = "for i in 1 2 3; do echo $i; sleep 0.1; done; exit 4"
    with conn.stream(["sh", "-c", script]) as stream:
        assert list(stream.lines(idle_timeout=T)) == [b"1\n", b"2\n", b"3\n"]
        assert stream.readline(T) == b""
        # The status may come just after the output's end.
        wait_until(lambda: stream.exit_status is not None, "the exit status")
        assert stream.exit_status == 4


def test_stream_readline_returns_none_when_no_line_arrives_in_time(
    conn: SshConnection,
) -> None:
    with conn.stream(["sh", "-c", "sleep 1; echo late"]) as stream:
        assert stream.readline(0.2) is None
        assert stream.exit_status is None


def test_lines_written_to_a_stream_reach_the_command_at_once(conn: SshConnection) -> None:
    # As the head answers the agent: a renewal, then a poke (an empty line).
    with conn.stream(["cat"]) as stream:
        stream.write(b"renew 1\n")
        assert stream.readline(T) == b"renew 1\n"
        stream.write(b"\n")
        assert stream.readline(T) == b"\n"


def test_stream_drops_stderr_unless_combined(conn: SshConnection) -> None:
    script = "echo out; echo err >&2"
    with conn.stream(["sh", "-c", script]) as apart:
        assert list(apart.lines(T)) == [b"out\n"]
    with conn.stream(["sh", "-c", script], combine_stderr=True) as combined:
        assert sorted(combined.lines(T)) == [b"err\n", b"out\n"]


# --- files -------------------------------------------------------------------------------


def test_put_bytes_creates_parents_and_sets_the_mode(conn: SshConnection, tmp_path: Path) -> None:
    destination = tmp_path / "a" / "b" / "secret.env"
    conn.put_bytes(b"TOKEN=1\n", str(destination), 0o600)
    assert destination.read_bytes() == b"TOKEN=1\n"
    assert destination.stat().st_mode & 0o777 == 0o600


def test_put_file_replaces_atomically_and_leaves_no_temporary(
    conn: SshConnection, tmp_path: Path
) -> None:
    destination = tmp_path / "remote" / "agent.py"
    destination.parent.mkdir()
    destination.write_text("old")
    old_inode = destination.stat().st_ino
    reader = destination.open()  # holds the old file open across the replace
    local = tmp_path / "agent_src.py"
    local.write_text("print('new')\n")

    conn.put_file(local, str(destination), 0o600)

    assert reader.read() == "old"  # a reader of the old file saw it whole
    reader.close()
    assert destination.read_text() == "print('new')\n"
    assert destination.stat().st_ino != old_inode  # renamed in, not rewritten in place
    assert destination.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in destination.parent.iterdir()) == ["agent.py"]


# --- host keys ---------------------------------------------------------------------------


def test_unknown_host_key_is_refused_with_its_fingerprint_and_not_recorded(
    sshd: Sshd, tmp_path: Path
) -> None:
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    connection = SshConnection(target_for(sshd, known_hosts=empty))
    offered = keygen_fingerprint(sshd.host_key_pub)

    with pytest.raises(HostKeyError) as caught:
        connection.connect()

    assert caught.value.kind == "unknown"
    assert caught.value.offered_fingerprint == offered
    message = str(caught.value)
    assert "unknown" in message
    assert offered in message
    assert "run `gbatch node trust gpu1` after checking the fingerprint" in message
    assert empty.read_text() == ""
    assert not connection.connected


def test_missing_known_hosts_file_refuses_and_creates_nothing(sshd: Sshd, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "known_hosts"
    with pytest.raises(HostKeyError, match="unknown"):
        SshConnection(target_for(sshd, known_hosts=missing)).connect()
    assert not missing.parent.exists()


def test_changed_host_key_is_refused_naming_both_fingerprints(sshd: Sshd, tmp_path: Path) -> None:
    impostor = paramiko.Ed25519Key.from_private_key_file(str(sshd.client_key))
    known_hosts = tmp_path / "known_hosts"
    trust_host_key(known_hosts, "127.0.0.1", sshd.port, impostor)
    before = known_hosts.read_bytes()

    with pytest.raises(HostKeyError) as caught:
        SshConnection(target_for(sshd, known_hosts=known_hosts)).connect()

    assert caught.value.kind == "changed"
    assert caught.value.expected_fingerprint == fingerprint(impostor)
    assert caught.value.offered_fingerprint == keygen_fingerprint(sshd.host_key_pub)
    assert "CHANGED" in str(caught.value)
    assert known_hosts.read_bytes() == before


def test_fetched_key_trusted_then_connect_succeeds(sshd: Sshd, tmp_path: Path) -> None:
    known_hosts = tmp_path / "admin" / "known_hosts"
    key = fetch_host_key("127.0.0.1", sshd.port, timeout=T)
    assert fingerprint(key) == keygen_fingerprint(sshd.host_key_pub)

    trust_host_key(known_hosts, "127.0.0.1", sshd.port, key)

    line = known_hosts.read_text()
    assert line == f"[127.0.0.1]:{sshd.port} ssh-ed25519 {key.get_base64()}\n"
    assert known_hosts.stat().st_mode & 0o777 == 0o600
    with SshConnection(target_for(sshd, known_hosts=known_hosts)) as connection:
        connection.connect()
        assert connection.run(["echo", "ok"], timeout=T).stdout == b"ok\n"


def test_trust_host_key_writes_a_bare_host_on_port_22_and_appends_on_a_new_line(
    tmp_path: Path, sshd: Sshd
) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("other.example ssh-ed25519 AAAA")  # no final newline
    key = paramiko.Ed25519Key.from_private_key_file(str(sshd.client_key))
    trust_host_key(known_hosts, "gpu1.example", 22, key)
    assert known_hosts.read_text().splitlines() == [
        "other.example ssh-ed25519 AAAA",
        f"gpu1.example ssh-ed25519 {key.get_base64()}",
    ]


def test_fingerprint_matches_ssh_keygen(sshd: Sshd) -> None:
    key = paramiko.Ed25519Key.from_private_key_file(str(sshd.client_key))
    assert fingerprint(key) == keygen_fingerprint(sshd.client_key.with_suffix(".pub"))


# --- connection --------------------------------------------------------------------------


def test_connection_refused_is_a_remote_error_saying_so(tmp_path: Path) -> None:
    target = SshTarget(
        name="gpu9",
        host="127.0.0.1",
        port=free_port(),
        user="root",
        identity_file=None,
        known_hosts=tmp_path / "known_hosts",
        connect_timeout=5,
    )
    with pytest.raises(RemoteError, match=r"cannot reach node gpu9 .*connection refused"):
        SshConnection(target).connect()


def test_wrong_client_key_is_an_authentication_error(sshd: Sshd, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)],
        check=True,
        timeout=T,
    )
    with pytest.raises(RemoteError, match="cannot log in"):
        SshConnection(target_for(sshd, identity_file=stranger)).connect()


def test_connection_sets_keepalive_and_tcp_nodelay(conn: SshConnection) -> None:
    transport = conn.transport
    # paramiko keeps the interval only in the packetizer's private state.
    assert transport.packetizer._Packetizer__keepalive_interval == 15
    assert transport.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_reconnect_works_after_sshd_restarts(sshd: Sshd, conn: SshConnection) -> None:
    assert conn.run(["true"], timeout=T).exit_status == 0

    sshd.restart()

    wait_until(lambda: not conn.connected, "the old connection to drop")
    with pytest.raises(RemoteError):
        conn.run(["true"], timeout=T)
    conn.connect()
    assert conn.connected
    assert conn.run(["echo", "back"], timeout=T).stdout == b"back\n"


def test_connection_lost_under_a_running_command_is_a_remote_error(
    sshd: Sshd, conn: SshConnection
) -> None:
    outcome: list[object] = []

    def run_long() -> None:
        try:
            outcome.append(conn.run(["sleep", "60"], timeout=T))
        except RemoteError as e:
            outcome.append(e)

    runner = threading.Thread(target=run_long)
    runner.start()
    wait_until(lambda: bool(_descendants_named(sshd, "sleep")), "the remote sleep to start")
    sshd.stop()
    runner.join(T)

    assert len(outcome) == 1
    assert type(outcome[0]) is RemoteError
    assert "connection is probably lost" in str(outcome[0])


def _descendants_named(server: Sshd, name: str) -> list[int]:
    found = []
    for pid in descendants(server.process.pid):
        with contextlib.suppress(OSError):  # it may end while we look
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                found.append(pid)
    return found


# --- backoff -----------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_maximum_and_resets() -> None:
    backoff = Backoff(initial=0.5, factor=2, maximum=3)
    assert [backoff.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_backoff_jitter_draws_between_half_and_the_whole_delay() -> None:
    draws = iter([0.0, 0.5, 0.999])
    backoff = Backoff(initial=2, factor=2, maximum=30, random=lambda: next(draws))
    assert backoff.next_delay() == 1.0  # 2 * (1/2 + 0/2)
    assert backoff.next_delay() == 3.0  # 4 * (1/2 + 0.5/2)
    assert 7.9 < backoff.next_delay() < 8.0


def test_backoff_rejects_a_shrinking_factor() -> None:
    with pytest.raises(ValueError):
        Backoff(factor=0.5)
