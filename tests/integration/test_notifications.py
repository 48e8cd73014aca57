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
import ssl
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email import policy as email_policy
from email.message import Message
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from conftest import FAST_CONFIG, Head, is_gone, kill_leftover_jobs, make_head, wait_for
from oracles import deliver_due
from oracles import outbox as store_outbox

from gbatch.core.model import JobSpec, JobState
from gbatch.head.notify import Policy
from gbatch.head.outbox import Outbox
from gbatch.head.store import Store
from gbatch.jobspec.spec import build_spec
from gbatch.protocol import requests
from gbatch.protocol.client import Client, RequestFailed
from gbatch.site.config import Config

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
    # Under the allowed prefix as written, out of it once the server resolves `..`.
    for escape in (f"{allowed}../admin/drop", f"{allowed}ada/%2e%2e/%2E%2E/admin/drop"):
        dotted = head.run("sbatch", "--notify", escape, "--wrap", "true")
        assert dotted.returncode == 2, dotted.stderr
        assert dotted.stderr == (
            f'gbatch sbatch: error: --notify: "{escape}" has a `.` or `..` segment in its path '
            "(or %2e for one): give the address to post to as the server will read it, "
            "without them\n"
        )
    # A raw request past sbatch's check: the head refuses it the same.
    spec = build_spec({"command": "true", "notify": [allowed]}, {}, default_name="j").to_dict()
    spec["notify"][0]["url"] = f"{allowed}../admin/drop"
    with Client(head.home / "gbatchd.sock") as client, pytest.raises(RequestFailed) as raw:
        client.call(requests.Submit(spec=spec))
    assert raw.value.kind == "invalid" and "has a `.` or `..` segment" in raw.value.message
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


# -- SMTP over TLS, with AUTH ---------------------------------------------------------------

PASSWORD = "correct horse battery"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key: (cert, key) PEM files. The
    head trusts it as smtp_ca_file."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gbatch test mail")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "mail-cert.pem", directory / "mail-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


class Logins:
    """aiosmtpd's authenticator: gbatch with PASSWORD only; every try recorded."""

    def __init__(self) -> None:
        self.tries: list[tuple[str, bool]] = []  # (user, over TLS)

    def __call__(
        self, server: object, session: object, envelope: object, mechanism: str, data: object
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        self.tries.append((data.login.decode(), session.ssl is not None))  # type: ignore[attr-defined]
        ok = data.login == b"gbatch" and data.password == PASSWORD.encode()
        return AuthResult(success=ok, handled=False)  # a refusal: 535


def tls_server(tmp_path: Path, *, implicit: bool) -> tuple[LocalSMTP, Inbox, Logins, Path]:
    """aiosmtpd requiring AUTH, over STARTTLS (required) or TLS from the start."""
    cert, key = self_signed(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    inbox, logins = Inbox(), Logins()
    tls: dict[str, object] = (
        # aiosmtpd cannot tell that an implicit TLS connection is one (its issue 281):
        # auth_require_tls would refuse AUTH there.
        {"ssl_context": context, "auth_require_tls": False}
        if implicit
        else {"tls_context": context, "require_starttls": True}
    )
    server = LocalSMTP(
        inbox,
        hostname="127.0.0.1",
        port=0,
        authenticator=logins,
        auth_required=True,
        **tls,  # type: ignore[arg-type]
    )
    server.start()
    return server, inbox, logins, cert


def password_file(directory: Path, password: str = PASSWORD) -> Path:
    path = directory / "smtp-password"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return path


def test_mail_goes_over_starttls_with_auth_and_the_password_is_never_logged(
    tmp_path: Path, stopped_heads: list[Head]
) -> None:
    smtp, inbox, logins, cert = tls_server(tmp_path, implicit=False)
    secret = password_file(tmp_path)
    try:
        config = notify_config(smtp.port) + (
            f"smtp_tls: starttls\nsmtp_ca_file: {cert}\nsmtp_user: gbatch\n"
            f"smtp_password_file: {secret}\n"
        )
        head = make_head(tmp_path / "home", config=config)
        stopped_heads.append(head)
        head.start()
        job_id = head.sbatch(
            "-J", "train", "--mail-type=END", "--mail-user=ada@lab.test", "--wrap", "true"
        )
        head.wait_state(job_id, "COMPLETED")
        wait_for(lambda: inbox.messages, what="the END mail over STARTTLS")
        head.stop()
    finally:
        smtp.stop()
    (mail,) = inbox.messages
    assert f"Job_id={job_id} Name=train Ended" in str(mail["Subject"])
    assert logins.tries == [("gbatch", True)]  # logged in once, over TLS
    for path in head.home.rglob("*"):
        if path.is_file():
            assert PASSWORD.encode() not in path.read_bytes(), path


@pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS")
def test_implicit_tls_with_a_wrong_password_fails_without_saying_it_then_delivers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    smtp, inbox, logins, cert = tls_server(tmp_path, implicit=True)
    secret = password_file(tmp_path, "wrong password")
    config = Config(
        smtp_host="127.0.0.1",
        smtp_port=smtp.port,
        smtp_tls="implicit",
        smtp_ca_file=cert,
        smtp_user="gbatch",
        smtp_password_file=secret,
        mail_from="gbatch@lab.test",
        notify_retry_seconds=1,
    )
    store = Store(tmp_path / "gbatch.db", Policy.from_config(config))
    try:
        store.queue_job_event(submitted_running(store), "BEGIN", 0.0)
        outbox_ = Outbox(store, config, lambda: 0.0)
        assert deliver_due(outbox_, 0.0) == 0
        (row,) = store_outbox(store)
        assert "gbatch was refused (535)" in str(row["last_error"])
        assert "wrong password" not in caplog.text + str(row["last_error"])
        secret.write_text(PASSWORD)  # the admin fixes the file: no restart needed
        assert deliver_due(outbox_, 1.0) == 1
    finally:
        store.close()
        smtp.stop()
    assert len(inbox.messages) == 1
    # smtplib tries PLAIN then LOGIN; the server speaks TLS only, so every try was over it.
    assert {user for user, _ in logins.tries} == {"gbatch"}


def submitted_running(store: Store) -> int:
    """A job with BEGIN mail, running: queue_job_event owes its BEGIN."""
    spec = JobSpec(name="train", command=("true",), mail_type="BEGIN", mail_user="ada@lab.test")
    (job_id,) = store.submit([spec], 1000, "ada", 0.0)
    store.set_state(job_id, JobState.CONFIGURING, "", 0.0, attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", 0.0, start_time=0.0)
    return job_id


def test_starttls_is_required_not_hoped_for(tmp_path: Path) -> None:
    smtp, inbox = smtp_server()  # offers no STARTTLS
    config = Config(
        smtp_host="127.0.0.1", smtp_port=smtp.port, smtp_tls="starttls", mail_from="g@lab.test"
    )
    store = Store(tmp_path / "gbatch.db", Policy.from_config(config))
    try:
        store.queue_job_event(submitted_running(store), "BEGIN", 0.0)
        assert deliver_due(Outbox(store, config, lambda: 0.0), 0.0) == 0
        (row,) = store_outbox(store)
    finally:
        store.close()
        smtp.stop()
    assert inbox.messages == [] and "STARTTLS" in str(row["last_error"])


def test_a_password_file_others_may_read_stops_the_daemon_in_one_line(tmp_path: Path) -> None:
    secret = password_file(tmp_path)
    secret.chmod(0o644)
    config = FAST_CONFIG + (
        "smtp_host: 127.0.0.1\nsmtp_port: 587\nsmtp_tls: starttls\nsmtp_user: gbatch\n"
        f"smtp_password_file: {secret}\n"
    )
    head = make_head(tmp_path / "home", config=config)
    result = head.run("daemon", "run")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().endswith(
        f"smtp_password_file: {secret} may be read by others (mode 644). Run chmod 600 {secret}"
    )
    assert PASSWORD not in result.stderr
