"""SshConnection's channel opening against a fake paramiko transport: sshd refuses a
channel while it still counts sessions just closed against MaxSessions (seconds on a
loaded host), so a refusal is asked again until the call's deadline, and one that
lasts says that nothing was started (the daemon requeues without using a retry)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import paramiko
import pytest

from gbatch.nodes import ssh
from gbatch.nodes.ssh import RemoteError, SshConnection, SshTarget


class FakeTransport:
    def __init__(self, refusals: int) -> None:
        self.refusals = refusals
        self.asked = 0

    def is_active(self) -> bool:
        return True

    def open_session(self, timeout: float) -> Any:
        self.asked += 1
        if self.asked <= self.refusals:
            raise paramiko.ChannelException(1, "Administratively prohibited")
        return "channel"


class FakeClient:
    def __init__(self, transport: FakeTransport) -> None:
        self.transport = transport

    def get_transport(self) -> FakeTransport:
        return self.transport

    def close(self) -> None: ...


def connection(tmp_path: Path, transport: FakeTransport) -> SshConnection:
    conn = SshConnection(SshTarget("gpu01", "127.0.0.1", 22, "root", None, tmp_path / "kh"))
    conn._client = FakeClient(transport)  # type: ignore[assignment]
    return conn


def test_a_refused_channel_is_asked_for_again_past_a_few_refusals(tmp_path: Path) -> None:
    transport = FakeTransport(refusals=4)  # 0.1 + 0.3 + 1 + 1 s of asking
    assert connection(tmp_path, transport)._open_session(10.0, "`docker run`") == "channel"
    assert transport.asked == 5


def test_a_channel_refused_past_the_patience_started_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ssh, "CHANNEL_PATIENCE", 1.5)
    transport = FakeTransport(refusals=1000)
    started = time.monotonic()
    with pytest.raises(RemoteError) as refused:
        connection(tmp_path, transport)._open_session(30.0, "`docker run`")
    assert time.monotonic() - started < 3  # not the call's whole timeout
    assert refused.value.busy and not refused.value.answer_lost
    assert "sshd refused a channel for `docker run` for 1.5 s" in str(refused.value)


def test_no_connection_started_nothing(tmp_path: Path) -> None:
    conn = SshConnection(SshTarget("gpu01", "127.0.0.1", 22, "root", None, tmp_path / "kh"))
    with pytest.raises(RemoteError) as down:
        conn.run(["docker", "run"], timeout=1.0)
    assert down.value.busy and not down.value.answer_lost
