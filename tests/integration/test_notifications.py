"""Notifications delivered for real: a real gbatchd mails a real SMTP server (aiosmtpd)
and posts to a real HTTP server, both on 127.0.0.1; the outbox survives a daemon that
is stopped while the mail server is down, and one killed between sending and marking
a mail sent (at least once, the same event id)."""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import socket
import sqlite3
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email import policy as email_policy
from email.message import Message
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from conftest import FAST_CONFIG, Head, is_gone, kill_leftover_jobs, make_head, wait_for

SECRET = "hook-secret"


class Inbox:
    """aiosmtpd's handler: every message it was given."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: object, session: object, envelope: object) -> str:
        self.messages.append(message_from_bytes(envelope.content, policy=email_policy.default))  # type: ignore[attr-defined]
        return "250 OK"


class LocalSMTP(Controller):
    """aiosmtpd on 127.0.0.1 at a port the OS picks (or the one given)."""

    def _trigger_server(self) -> None:
        self.port = self.server.sockets[0].getsockname()[1]
        super()._trigger_server()


def smtp_server(port: int = 0) -> tuple[LocalSMTP, Inbox]:
    inbox = Inbox()
    server = LocalSMTP(inbox, hostname="127.0.0.1", port=port)
    server.start()
    return server, inbox


class Hooks(http.server.BaseHTTPRequestHandler):
    received: list[tuple[dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((dict(self.headers), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook_server() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    received: list[tuple[dict[str, str], bytes]] = []
    handler = type("Recorder", (Hooks,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()
    server.server_close()


def notify_config(smtp_port: int, hook_url: str | None = None) -> str:
    config = (
        FAST_CONFIG
        + f"smtp_host: 127.0.0.1\nsmtp_port: {smtp_port}\nmail_from: gbatch@lab.test\n"
        + "notify_retry_seconds: 0.2\n"
    )
    if hook_url:
        config += (
            f"webhooks: [{{name: ops, url: '{hook_url}', secret: {SECRET},"
            " events: [BEGIN, END, FAIL]}]\n"
        )
    return config


def outbox(head: Head) -> list[sqlite3.Row]:
    with sqlite3.connect(f"file:{head.home / 'gbatch.db'}?mode=ro", uri=True) as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM outbox ORDER BY id").fetchall()


@pytest.fixture
def stopped_heads() -> Iterator[list[Head]]:
    heads: list[Head] = []
    yield heads
    for head in heads:
        head.stop()
        kill_leftover_jobs(head.home)


def test_begin_and_end_mail_and_a_signed_webhook_reach_real_servers(
    tmp_path: Path,
    hook_server: tuple[str, list[tuple[dict[str, str], bytes]]],
    stopped_heads: list[Head],
) -> None:
    url, received = hook_server
    smtp, inbox = smtp_server()
    try:
        head = make_head(tmp_path / "home", config=notify_config(smtp.port, url))
        stopped_heads.append(head)
        head.start()
        job_id = head.sbatch(
            "-J", "train", "--mail-type=ALL", "--mail-user=ada@lab.test", "--wrap", "true"
        )
        head.wait_state(job_id, "COMPLETED")
        wait_for(lambda: len(inbox.messages) == 2, what="BEGIN and END mail")
        begin, end = sorted(inbox.messages, key=lambda m: "Ended" in str(m["Subject"]))
    finally:
        smtp.stop()
    assert str(begin["Subject"]).startswith(f"Slurm Job_id={job_id} Name=train Began")
    assert str(end["Subject"]).startswith(f"Slurm Job_id={job_id} Name=train Ended, Run time")
    assert str(end["Subject"]).endswith(", COMPLETED, ExitCode 0")
    assert end["To"] == "ada@lab.test" and end["From"] == "gbatch@lab.test"

    wait_for(lambda: len(received) == 2, what="BEGIN and END webhooks")
    for headers, body in received:
        mac = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert headers["X-Gbatch-Signature"] == f"sha256={mac}"
        event = json.loads(body)
        assert headers["X-Gbatch-Event-Id"] == event["event_id"]
        assert event["job"]["id"] == job_id
    assert sorted(json.loads(body)["kind"] for _, body in received) == ["BEGIN", "END"]
    # A mail and a webhook of the same event carry the same id.
    end_ids = {json.loads(b)["event_id"] for _, b in received if json.loads(b)["kind"] == "END"}
    assert end_ids == {end["X-Gbatch-Event-Id"]}


def test_mail_owed_while_the_server_was_down_arrives_once_after_a_restart(
    tmp_path: Path, stopped_heads: list[Head]
) -> None:
    # The port is held by a bound socket that does not listen: connections are refused
    # until the SMTP server takes the port over.
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    port = held.getsockname()[1]
    head = make_head(tmp_path / "home", config=notify_config(port))
    stopped_heads.append(head)
    head.start()
    job_id = head.sbatch("--mail-type=END", "--mail-user=ada@lab.test", "--wrap", "exit 3")
    head.wait_state(job_id, "FAILED")
    wait_for(lambda: [r["attempts"] for r in outbox(head)] >= [2], what="failed tries")
    head.stop()
    (row,) = outbox(head)
    assert row["delivered"] is None and "SMTP" in row["last_error"]

    held.close()
    smtp, inbox = smtp_server(port)
    try:
        head.start()
        wait_for(lambda: outbox(head)[0]["delivered"] is not None, what="the mail delivered")
        head.stop()
    finally:
        smtp.stop()
    (mail,) = inbox.messages
    assert mail["X-Gbatch-Event-Id"] == row["event_id"]
    # Failed without FAIL asked for: slurmctld's END mail.
    assert f"Job_id={job_id} Name=wrap Ended" in str(mail["Subject"])
    assert str(mail["Subject"]).endswith("FAILED, ExitCode 3")


def test_a_daemon_killed_after_sending_sends_again_with_the_same_event_id(
    tmp_path: Path, stopped_heads: list[Head]
) -> None:
    smtp, inbox = smtp_server()
    try:
        head = make_head(tmp_path / "home", config=notify_config(smtp.port))
        stopped_heads.append(head)
        head.env["GBATCH_CRASH_AT"] = "notify.after_send"
        head.start()
        pid = head.daemon_pid()
        job_id = head.sbatch("--mail-type=BEGIN", "--mail-user=ada@lab.test", "--wrap", "true")
        wait_for(lambda: is_gone(pid), what="the daemon to die after sending")
        del head.env["GBATCH_CRASH_AT"]
        head.start()
        head.wait_state(job_id, "COMPLETED")
        wait_for(lambda: outbox(head)[0]["delivered"] is not None, what="the mail delivered")
    finally:
        smtp.stop()
    first, again = inbox.messages
    assert first["X-Gbatch-Event-Id"] == again["X-Gbatch-Event-Id"] == outbox(head)[0]["event_id"]
    assert first["Message-ID"] == again["Message-ID"]


def test_a_jobs_own_webhook_gets_its_end_and_one_off_the_allowed_prefixes_is_refused(
    tmp_path: Path,
    hook_server: tuple[str, list[tuple[dict[str, str], bytes]]],
    stopped_heads: list[Head],
) -> None:
    url, received = hook_server
    allowed = url + "/"  # http://127.0.0.1:PORT/hook/
    head = make_head(
        tmp_path / "home",
        config=FAST_CONFIG + f"webhook_prefixes_allowed: ['{allowed}']\n",
    )
    stopped_heads.append(head)
    head.start()
    good = head.home / "good.yaml"
    good.write_text(
        f"command: 'true'\nname: train\nnotify: [{{url: '{allowed}ada', events: [END]}}]\n"
    )
    job_id = head.sbatch(str(good))
    head.wait_state(job_id, "COMPLETED")
    wait_for(lambda: received, what="the job's END webhook")
    ((headers, body),) = received
    event = json.loads(body)
    assert (event["kind"], event["job"]["id"], event["job"]["state"]) == (
        "END",
        job_id,
        "COMPLETED",
    )
    assert event["text"].startswith(f"Slurm Job_id={job_id} Name=train Ended")
    assert headers["X-Gbatch-Event-Id"] == event["event_id"]
    assert "X-Gbatch-Signature" not in headers  # a job's webhook is not signed

    # The head itself, somewhere the admin did not allow: refused, nothing queued.
    port = url.split(":")[2].split("/")[0]
    bad = head.home / "bad.yaml"
    bad.write_text(f"command: 'true'\nnotify: ['http://127.0.0.1:{port}/admin/drop']\n")
    refused = head.run("sbatch", str(bad))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("gbatch sbatch: error: notify: http://127.0.0.1:")
    assert f"Use a URL starting with {allowed}" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    squeue = head.run("squeue", "--all", "--noheader", "-t", "all", check=True).stdout
    assert [line.split()[0] for line in squeue.splitlines()] == [str(job_id)]
    assert all(row["job_id"] == job_id for row in outbox(head))


def test_a_jobs_webhook_that_hangs_does_not_hold_up_anothers_mail(
    tmp_path: Path, stopped_heads: list[Head]
) -> None:
    # The hanging receiver is held until the mail arrives: delivered one at a time, the
    # mail would wait for the POST's timeout and find the webhook's try already failed.
    release = threading.Event()
    hung: list[str] = []

    class Hangs(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hung.append(self.path)
            release.wait(60)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hangs)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    allowed = f"http://127.0.0.1:{server.server_address[1]}/"
    seen_at_mail: list[int] = []

    class Watching(Inbox):
        async def handle_DATA(self, server: object, session: object, envelope: object) -> str:
            (hook,) = [r for r in outbox(head) if r["channel"] == "user_webhook/json"]
            seen_at_mail.append(hook["attempts"])
            release.set()
            return await super().handle_DATA(server, session, envelope)

    inbox = Watching()
    smtp = LocalSMTP(inbox, hostname="127.0.0.1", port=0)
    smtp.start()
    try:
        config = notify_config(smtp.port) + f"webhook_prefixes_allowed: ['{allowed}']\n"
        head = make_head(tmp_path / "home", config=config)
        stopped_heads.append(head)
        head.start()
        slow = head.home / "slow.yaml"
        slow.write_text(f"command: 'true'\nnotify: [{{url: '{allowed}ada', events: [END]}}]\n")
        first = head.sbatch(str(slow))
        head.wait_state(first, "COMPLETED")
        wait_for(lambda: hung, what="the webhook's POST to hang")
        second = head.sbatch("--mail-type=END", "--mail-user=bob@lab.test", "--wrap", "true")
        head.wait_state(second, "COMPLETED")
        wait_for(lambda: inbox.messages, what="the mail, while the webhook hangs")
        wait_for(
            lambda: all(r["delivered"] is not None for r in outbox(head)), what="both delivered"
        )
    finally:
        release.set()
        smtp.stop()
        server.shutdown()
        server.server_close()
    assert seen_at_mail == [0]  # the webhook's first try had not ended
    assert hung == ["/ada"]  # tried once, taken once released
