"""`gbatch node trust NAME`: a host whose key is unknown or changed is refused until an
admin checks the fingerprint the daemon shows and pins it. Real hosts (containers with
sshd, tests/integration/hosts.py) and a real daemon; the CLI as a subprocess, with a
pseudo-terminal where a person would answer the prompt. The known_hosts primitives
(gbatch/nodes/ssh.py) are checked against a plain sshd (tests/integration/sshd.py).
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest
from asuser import as_user, preload, run_cli, temp_users
from conftest import GBATCH, Head, wait_for
from fleet import Fleet, build_fleet, teardown_fleet
from sshd import keygen, start_sshd

from gbatch.nodes.ssh import (
    SshTarget,
    fingerprint,
    offered_host_key,
    replace_host_key,
    trust_host_key,
)
from gbatch.protocol import wire
from gbatch.protocol.client import Client, RequestFailed


def host_fingerprint(pub: Path) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
    ).stdout
    return out.split()[1]


def node_row(head: Head, name: str) -> dict[str, object]:
    nodes = json.loads(head.run("sinfo", "--json", check=True).stdout)["nodes"]
    row: dict[str, object] = next(n for n in nodes if n["name"] == name)
    return row


def wait_node(head: Head, name: str, state: str, timeout: float = 30) -> dict[str, object]:
    found = wait_for(
        lambda: (row := node_row(head, name))["state"] == state and row,
        timeout,
        f"node {name} to be {state}",
    )
    assert isinstance(found, dict)
    return found


def trust_on_a_terminal(head: Head, *args: str, answer: str) -> tuple[int, str]:
    """`gbatch node trust ARGS` with a pseudo-terminal as stdin, answering the prompt."""
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen(
            [*GBATCH, "node", "trust", *args],
            env=head.env,
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        os.write(primary, answer.encode() + b"\n")
        out, _ = process.communicate(timeout=60)
    finally:
        os.close(primary)
        os.close(secondary)
    return process.returncode, out


@pytest.fixture
def untrusted(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(tmp_path, {"gpu11": 1}, trusted=False)
    yield built
    teardown_fleet(built)


@pytest.mark.docker
def test_an_unknown_host_is_refused_until_an_admin_trusts_its_fingerprint(
    untrusted: Fleet, tmp_path: Path
) -> None:
    head, host = untrusted.head, untrusted.hosts["gpu11"]
    known_hosts = tmp_path / "known_hosts"
    offered = host_fingerprint(host.host_key_pub)
    row = wait_node(head, "gpu11", "down")
    assert "run `gbatch node trust gpu11` after checking the fingerprint" in str(row["reason"])
    assert offered in str(row["reason"])

    # A mistyped (or intercepted) fingerprint: refused, nothing written.
    wrong = "SHA256:" + "A" * 43
    refused = head.run("node", "trust", "gpu11", "--fingerprint", wrong)
    assert refused.returncode == 2
    assert f"offers ssh-ed25519 key {offered}" in refused.stdout
    assert refused.stderr.startswith("gbatch node: error: --fingerprint: host gpu11 offers")
    assert len(refused.stderr.splitlines()) == 1 and "nothing was trusted" in refused.stderr
    # No terminal and no --fingerprint: nobody confirmed anything.
    blind = head.run("node", "trust", "gpu11", input="y\n")
    assert blind.returncode == 2
    assert "stdin is not a terminal" in blind.stderr and "--fingerprint" in blind.stderr
    # A person who answers no.
    status, out = trust_on_a_terminal(head, "gpu11", answer="n")
    assert status == 1 and "Trust it? [y/N]" in out and "not trusted" in out
    # The daemon itself refuses a fingerprint that is not the offered one.
    with Client(head.home / "gbatchd.sock") as client, pytest.raises(RequestFailed) as caught:
        client.call(wire.TrustHostKey(name="gpu11", fingerprint=wrong))
    assert caught.value.kind == "invalid" and "changed while you looked" in caught.value.message
    assert known_hosts.read_text() == ""
    assert node_row(head, "gpu11")["state"] == "down"

    trusted = head.run("node", "trust", "gpu11", "--fingerprint", offered, check=True)
    assert trusted.stdout.splitlines()[0] == (
        f"host gpu11 (127.0.0.1:{host.port}) offers ssh-ed25519 key {offered}"
    )
    key_type, key_b64 = host.host_key_pub.read_text().split()[:2]
    assert known_hosts.read_text() == f"[127.0.0.1]:{host.port} {key_type} {key_b64}\n"
    assert known_hosts.stat().st_mode & 0o777 == 0o600
    # The daemon reconnects at once, not after its backoff, and the node runs jobs.
    wait_node(head, "gpu11", "idle", timeout=15)
    job_id = head.sbatch("--image", untrusted.image, "--gpus", "1", "--wrap", "echo trusted")
    head.wait_state(job_id, "COMPLETED", timeout=60)
    assert head.run("logs", str(job_id), check=True).stdout == "trusted\n"
    again = head.run("node", "trust", "gpu11", check=True)
    assert "already trusted" in again.stdout
    log = (head.home / "gbatchd.log").read_text()
    assert f"op=node_trust target=node_gpu11 -> allowed: pinned {offered}" in log
    assert "op=node_trust target=node_gpu11 -> refused: host offers" in log


@pytest.mark.docker
def test_a_changed_host_key_is_refused_until_trusted_with_replace(tmp_path: Path) -> None:
    fleet = build_fleet(tmp_path, {"gpu12": 1}, trusted=False)
    try:
        head, host = fleet.head, fleet.hosts["gpu12"]
        known_hosts = tmp_path / "known_hosts"
        impostor = paramiko.Ed25519Key.from_private_key_file(str(host.client_key))
        old = f"[127.0.0.1]:{host.port} ssh-ed25519 {impostor.get_base64()}"
        other = "gpu99.example ssh-ed25519 " + impostor.get_base64()
        known_hosts.write_text(f"{other}\n{old}\n")
        offered = host_fingerprint(host.host_key_pub)
        old_fp = host_fingerprint(host.client_key.with_suffix(".pub"))
        row = wait_node(head, "gpu12", "down")
        wait_for(lambda: "CHANGED" in str(node_row(head, "gpu12")["reason"]), 30, "CHANGED")

        refused = head.run("node", "trust", "gpu12", "--fingerprint", offered)
        assert refused.returncode == 2, refused.stderr
        assert f"offers ssh-ed25519 key {offered}" in refused.stdout
        assert f"holds ssh-ed25519 key {old_fp}" in refused.stdout
        assert "WARNING: the host key has CHANGED" in refused.stderr
        assert "gbatch node: error: --replace:" in refused.stderr
        assert known_hosts.read_text() == f"{other}\n{old}\n"
        with Client(head.home / "gbatchd.sock") as client, pytest.raises(RequestFailed) as caught:
            client.call(wire.TrustHostKey(name="gpu12", fingerprint=offered))
        assert "DIFFERENT key" in caught.value.message and row["state"] == "down"

        status, out = trust_on_a_terminal(head, "gpu12", "--replace", answer="y")
        assert status == 0, out
        assert "Trust it? [y/N]" in out and f"trusted gpu12's ssh-ed25519 key {offered}" in out
        key_b64 = host.host_key_pub.read_text().split()[1]
        # The old key for this host is gone; other hosts' lines stay as they were.
        assert known_hosts.read_text() == (
            f"{other}\n[127.0.0.1]:{host.port} ssh-ed25519 {key_b64}\n"
        )
        wait_node(head, "gpu12", "idle", timeout=15)
    finally:
        teardown_fleet(fleet)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as another user")
def test_a_user_who_is_not_an_admin_may_neither_see_nor_trust_host_keys(
    shared_head: Head,
) -> None:
    socket = shared_head.home / "gbatchd.sock"
    preload()

    def attempt() -> dict[str, object]:
        outcome: dict[str, object] = {}
        with Client(socket) as client:
            requests = (
                wire.GetHostKey(name="local"),
                wire.TrustHostKey(name="local", fingerprint="SHA256:x"),
            )
            for request in requests:
                op = request.op
                try:
                    client.call(request)
                    outcome[op] = "allowed"
                except RequestFailed as err:
                    outcome[op] = [err.kind, err.message]
        os.environ["GBATCH_SOCKET"] = str(socket)
        outcome["cli"] = run_cli(shared_head.home, "node", "trust", "local")
        return outcome

    with temp_users("gbto", ["carol"]) as users:
        outcome = as_user(users["carol"], attempt)
    for op in ("node_hostkey", "node_trust"):
        assert outcome[op] == [
            "permission",
            "only root, the daemon's user or an admin may trust host keys",
        ]
    cli = outcome["cli"]
    assert isinstance(cli, dict) and cli["rc"] == 4
    assert cli["err"] == (
        "gbatch node: error: only root, the daemon's user or an admin may trust host keys\n"
    )
    log = (shared_head.home / "gbatchd.log").read_text()
    assert f"user={users['carol'].name}" in log
    assert "op=node_trust target=node_local -> refused: not an admin" in log
    # An admin asking about the local node learns there is no key to trust.
    local = shared_head.run("node", "trust", "local")
    assert local.returncode == 2 and "reached without SSH" in local.stderr


# -- the known_hosts primitives behind it (gbatch/nodes/ssh.py), on a real sshd -----------


def test_offered_host_key_compares_with_the_file_as_a_connection_would(tmp_path: Path) -> None:
    server = start_sshd(tmp_path)
    try:
        known_hosts = tmp_path / "admin_known_hosts"
        target = SshTarget("gpu1", "127.0.0.1", server.port, server.user, None, known_hosts)
        expected = host_fingerprint(server.host_key_pub)

        unknown = offered_host_key(target)
        assert (unknown.pinned, unknown.fingerprint, unknown.key_type) == (
            "none",
            expected,
            "ssh-ed25519",
        )
        assert not known_hosts.exists()  # asking writes nothing
        trust_host_key(known_hosts, "127.0.0.1", server.port, unknown.key)
        same = offered_host_key(target)
        assert same.pinned == "same" and [fingerprint(k) for k in same.pinned_keys] == [expected]

        impostor = paramiko.Ed25519Key.from_private_key_file(str(server.client_key))
        replace_host_key(known_hosts, "127.0.0.1", server.port, impostor)
        changed = offered_host_key(target)
        assert changed.pinned == "different" and changed.fingerprint == expected
        assert [fingerprint(k) for k in changed.pinned_keys] == [fingerprint(impostor)]
    finally:
        server.stop()


def test_replace_host_key_drops_only_that_hosts_names_hashed_or_not(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.mkdir()
    for name in ("old", "new", "other"):
        keygen(keys / name, name)
    old = paramiko.Ed25519Key.from_private_key_file(str(keys / "old"))
    new = paramiko.Ed25519Key.from_private_key_file(str(keys / "new"))
    other = paramiko.Ed25519Key.from_private_key_file(str(keys / "other"))
    hashed = paramiko.HostKeys.hash_host("[10.0.0.5]:2222")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(
        "# the lab's hosts\n"
        f"gpu7,[10.0.0.5]:2222 ssh-ed25519 {old.get_base64()}\n"
        f"{hashed} ssh-ed25519 {old.get_base64()}\n"
        f"gpu8 ssh-ed25519 {other.get_base64()}\n"
        f"[10.0.0.5]:22 ssh-ed25519 {other.get_base64()}\n"
    )
    replace_host_key(known_hosts, "10.0.0.5", 2222, new)
    assert known_hosts.read_text() == (
        "# the lab's hosts\n"
        f"gpu7 ssh-ed25519 {old.get_base64()}\n"
        f"gpu8 ssh-ed25519 {other.get_base64()}\n"
        f"[10.0.0.5]:22 ssh-ed25519 {other.get_base64()}\n"
        f"[10.0.0.5]:2222 ssh-ed25519 {new.get_base64()}\n"
    )
    assert known_hosts.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
