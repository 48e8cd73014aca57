"""The outbox workers: daemon threads that deliver what the store's outbox owes, off the loop.

They deliver mail over SMTP and webhook POSTs, never the loop's business: a slow SMTP server
or a webhook that hangs never delays a job.

Deliveries run at once, up to WORKERS of them, with at most one in flight per
destination (a mail address, a webhook) and PER_OWNER for one user's events (a node's
events are nobody's: the admins' share one cap): a receiver that hangs holds one
worker until SEND_TIMEOUT, and one user's hanging webhooks at most PER_OWNER, so the
others' mail and webhooks go on. One destination's rows go in the order they fall due,
one at a time, as before; a failed one waits its backoff while the later ones go.

At least once: a row is marked delivered only after its server took it, so a daemon
killed in between delivers it again after its restart, with the same event id (the
mail's Message-ID and X-Gbatch-Event-Id, the webhook's X-Gbatch-Event-Id). A failed
try waits notify_retry_seconds, doubling (gbatch/head/notify.py), and is given up after
MAX_ATTEMPTS; a refusal that no retry can change (an address the server rejects, a 4xx)
is given up at once.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from gbatch.core.crashpoints import crash_point
from gbatch.core.loglines import InternalErrors, loggable
from gbatch.head import notify
from gbatch.head.store import Store, StoreError, StoreFull
from gbatch.site.config import STORE_FULL_EVENT, Config, ConfigError, Webhook

if TYPE_CHECKING:
    import urllib.request

log = logging.getLogger("gbatchd.outbox")
BATCH = 50  # rows read per pass; the pass ends early when the daemon stops
SEND_TIMEOUT = 10.0  # seconds for one SMTP conversation or one POST
WORKERS = 8  # deliveries in flight at once
PER_OWNER = 2  # of them carrying one user's events
PRUNE_EVERY = 3600.0  # seconds between two deletions of old delivered rows


class DeliveryError(Exception):
    """A try failed; `final` when trying again cannot help."""

    def __init__(self, message: str, *, final: bool = False) -> None:
        super().__init__(message)
        self.final = final


class Slots:
    """Which deliveries may start now: at most `size` in flight, one per destination.

    No more than `per_owner` per owner either (notify.owner). Shared by the dispatcher,
    which takes, and the workers, which release.
    """

    def __init__(self, size: int, per_owner: int) -> None:
        self.size = size
        self.per_owner = per_owner
        self._lock = threading.Lock()
        self._targets: set[str] = set()
        self._owners: Counter[str] = Counter()

    def busy(self) -> tuple[frozenset[str], frozenset[str]]:
        """The destinations in flight and the owners at their cap.

        Rows of neither may start, so a pass need not read them.
        """
        with self._lock:
            full = frozenset(o for o, n in self._owners.items() if n >= self.per_owner)
            return frozenset(self._targets), full

    @property
    def free(self) -> int:
        with self._lock:
            return self.size - len(self._targets)

    def take(self, note: notify.Notification) -> bool:
        owner = notify.owner(note.payload)
        with self._lock:
            if (
                len(self._targets) >= self.size
                or note.target in self._targets
                or self._owners[owner] >= self.per_owner
            ):
                return False
            self._targets.add(note.target)
            self._owners[owner] += 1
            return True

    def release(self, note: notify.Notification) -> None:
        owner = notify.owner(note.payload)
        with self._lock:
            self._targets.discard(note.target)
            self._owners[owner] -= 1
            if self._owners[owner] <= 0:
                del self._owners[owner]


class Outbox:
    def __init__(
        self,
        store: Store,
        config: Config,
        clock: Callable[[], float] = time.time,
        bugs: InternalErrors | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        # A delivery's bug is logged within the daemon's budget: a job's own webhook is
        # its submitter's text, and a bug it hits would otherwise log a traceback a row.
        self.bugs = bugs or InternalErrors(log)
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._hooks = {hook.name: hook for hook in config.webhooks}
        self._pruned: float | None = None  # when prune_due last deleted
        self.slots = Slots(WORKERS, PER_OWNER)
        self._work: queue.SimpleQueue[notify.Notification | None] = queue.SimpleQueue()
        self._wake = threading.Event()  # a worker is free again: read the due rows

    def start(self) -> None:
        if not notify.Policy.from_config(self.config).active:
            return  # nothing can be owed: no thread
        self._threads = [threading.Thread(target=self._run, name="outbox", daemon=True)]
        self._threads += [
            threading.Thread(target=self._worker, name=f"outbox-{n}", daemon=True)
            for n in range(self.slots.size)
        ]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()
        for _ in range(self.slots.size):
            self._work.put(None)
        deadline = time.monotonic() + SEND_TIMEOUT + 5
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.dispatch_due(self.clock())
                self.prune_due(self.clock())
            except StoreError as err:
                # A full disk: what was not marked delivered is tried again later.
                log.error("outbox: %s; trying again", err)
            self._wake.wait(self.config.tick_seconds)
            self._wake.clear()

    def dispatch_due(self, now: float) -> int:
        """Hand the workers every row due at `now` that may start (Slots); return how many.

        The rows of a destination in flight, or of an owner at their cap, are not read at
        all, so however many a hanging receiver has due, the others' rows are reached.
        """
        handed = 0
        while self.slots.free > 0 and not self.stopping.is_set():
            targets, owners = self.slots.busy()
            started = 0
            notes = self.store.due_notifications(now, BATCH, targets, owners)
            for note in notes:
                if self.slots.take(note):
                    self._work.put(note)
                    started += 1
            handed += started
            if not started or len(notes) < BATCH:
                break  # every due row that may start has
        return handed

    def _worker(self) -> None:
        while (note := self._work.get()) is not None:
            try:
                self.deliver_one(note)
            except StoreError as err:
                log.error("outbox: %s; trying again", err)
            except Exception as err:
                # A worker's entry point: a bug in one delivery must not shrink the pool.
                self.bugs.report(err, f"outbox: delivering {loggable(note.kind)}")
            finally:
                self.slots.release(note)
                self._wake.set()

    def deliver_one(self, note: notify.Notification) -> bool:
        """Try `note` once; record that it was delivered (True) or when to try again."""
        try:
            self.deliver(note)
        except DeliveryError as err:
            self._failed(note, err)
            return False
        crash_point("notify.after_send")
        self.store.notification_delivered(note.id, self.clock())
        return True

    def prune_due(self, now: float) -> int:
        """Delete rows delivered over notify_retention_days before `now`; return how many.

        At most once per PRUNE_EVERY (the first call prunes).
        """
        if self._pruned is not None and now - self._pruned < PRUNE_EVERY:
            return 0
        deleted = self.store.prune_notifications(now - self.config.notify_retention_days * 86400)
        self._pruned = now
        if deleted:
            log.info(
                "outbox: deleted %d rows delivered over %g days ago",
                deleted,
                self.config.notify_retention_days,
            )
        return deleted

    def tell_store_full(self, err: StoreFull) -> None:
        """Post STORE_FULL at once to the admins' webhooks that ask for it.

        In a thread of its own, not through the outbox: that lives on the full disk. Best
        effort: one try each, a failure only logged. Store.on_full calls it once per spell.
        """
        hooks = [hook for hook in self.config.webhooks if STORE_FULL_EVENT in hook.events]
        if not hooks:
            return
        event_id = uuid.uuid4().hex
        payload = notify.head_payload(
            socket.gethostname(), STORE_FULL_EVENT, str(err), event_id, self.clock()
        )
        note = notify.Notification(0, event_id, STORE_FULL_EVENT, notify.WEBHOOK, "", payload, 0)

        def post_each() -> None:
            for hook in hooks:
                try:
                    post_webhook(hook, note._replace(target=hook.name))
                except DeliveryError as failed:
                    log.warning(
                        "outbox: could not tell %s of the full store: %s", hook.name, failed
                    )

        threading.Thread(target=post_each, name="store-full", daemon=True).start()

    def _failed(self, note: notify.Notification, err: DeliveryError) -> None:
        attempts = note.attempts + 1
        what = f"{note.kind} {note.channel} to {note.target} (event {note.event_id})"
        now = self.clock()
        if err.final or attempts >= notify.MAX_ATTEMPTS:
            log.error("outbox: giving up on %s after %d tries: %s", what, attempts, err)
            self.store.notification_failed(note.id, str(err), now, None)
            return
        delay = notify.retry_delay(attempts, self.config.notify_retry_seconds)
        log.warning("outbox: %s failed (%s); trying again in %.0f s", what, err, delay)
        self.store.notification_failed(note.id, str(err), now, now + delay)

    def deliver(self, note: notify.Notification) -> None:
        """Send one row; DeliveryError when it was not taken."""
        if note.channel == notify.MAIL:
            self.send_mail(note)
        elif note.channel == notify.WEBHOOK:
            hook = self._hooks.get(note.target)
            if hook is None:
                raise DeliveryError(f"no webhook {note.target} in the config now", final=True)
            post_webhook(hook, note)
        elif note.channel.startswith(f"{notify.USER_WEBHOOK}/"):
            if not notify.url_allowed(note.target, self.config.webhook_prefixes_allowed):
                raise DeliveryError(
                    f"{note.target} is no longer under webhook_prefixes_allowed", final=True
                )
            form = note.channel.partition("/")[2]
            post_webhook(Webhook("job", note.target, form=form), note)
        else:
            raise DeliveryError(f"unknown channel {note.channel}", final=True)

    def send_mail(self, note: notify.Notification) -> None:
        # Deferred: smtplib and email cost start-up, and only a head that mails needs them.
        import smtplib
        from email import policy
        from email.message import EmailMessage

        host = self.config.smtp_host
        if host is None:
            raise DeliveryError("smtp_host is no longer set", final=True)
        # Slurm's subjects run past 78 characters: unfolded (998 is SMTP's line limit),
        # or a reader sees them start with the fold's space.
        message = EmailMessage(policy.SMTP.clone(max_line_length=998))
        message["From"] = self.config.mail_from or f"gbatch@{socket.getfqdn()}"
        message["To"] = note.target
        message["Subject"] = notify.summary(note.payload)
        # The same on every try: a receiver can drop a duplicate.
        message["Message-ID"] = f"<{note.event_id}.{note.id}@gbatch>"
        message["X-Gbatch-Event-Id"] = note.event_id
        message.set_content(notify.mail_body(note.payload))
        port, tls, user = self.config.smtp_port, self.config.smtp_tls, self.config.smtp_user
        try:
            password = smtp_password(self.config)
        except ConfigError as err:
            raise DeliveryError(str(err)) from err  # fixed meanwhile, the next try works
        try:
            context = None
            if tls is not None:
                import ssl  # deferred, as smtplib

                ca_file = self.config.smtp_ca_file
                context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
            smtp: smtplib.SMTP
            if tls == "implicit":
                smtp = smtplib.SMTP_SSL(host, port, timeout=SEND_TIMEOUT, context=context)
            else:
                smtp = smtplib.SMTP(host, port, timeout=SEND_TIMEOUT)
            with smtp:
                if tls == "starttls":
                    # A server that offers no STARTTLS fails the try: never sent in clear.
                    smtp.starttls(context=context)
                if user is not None and password is not None:
                    smtp.login(user, password)
                smtp.send_message(message)
        except smtplib.SMTPRecipientsRefused as err:
            raise DeliveryError(f"{host} refused {note.target}: {err}", final=True) from err
        except smtplib.SMTPAuthenticationError as err:
            # The server's reply only: the password is never in a message.
            raise DeliveryError(
                f"SMTP {host}:{port}: {user} was refused ({err.smtp_code}). Check "
                "smtp_user and the password in smtp_password_file"
            ) from err
        except (smtplib.SMTPException, OSError) as err:
            raise DeliveryError(f"SMTP {host}:{port}: {err}") from err


def smtp_password(config: Config) -> str | None:
    """The password of smtp_user: smtp_password_file's first line, or None without one.

    ConfigError, naming the key and the fix, when the file cannot be read, is empty, or may
    be read by anyone but its owner. Checked when gbatchd starts, read again at each mail (a
    changed password needs no restart).
    """
    path = config.smtp_password_file
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            text = file.read(4096)
    except OSError as err:
        raise ConfigError(
            f"smtp_password_file: cannot read {path} ({err.strerror or err}). Make it a "
            "file (not a link) that gbatchd's user can read, mode 0600"
        ) from err
    if mode & 0o077:
        raise ConfigError(
            f"smtp_password_file: {path} may be read by others (mode {mode & 0o777:o}). "
            f"Run chmod 600 {path}"
        )
    password = text.decode(errors="replace").partition("\n")[0].rstrip("\r")
    if not password:
        raise ConfigError(f"smtp_password_file: {path} holds no password. Write it there")
    return password


def _opener() -> urllib.request.OpenerDirector:
    """An opener that follows no redirect: urllib would (turning the POST into a GET),
    and a webhook must not lead the head anywhere its admin did not name."""
    import urllib.request

    class NoRedirects(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    return urllib.request.build_opener(NoRedirects())


def post_webhook(hook: Webhook, note: notify.Notification) -> None:
    """POST the event to `hook`, signed; DeliveryError unless it answers 2xx."""
    # Deferred, as smtplib: only a head with webhooks needs urllib's HTTP stack.
    import urllib.error
    import urllib.request

    body = notify.webhook_body(note.payload, hook.form)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "gbatch",
        "X-Gbatch-Event": note.kind,
        "X-Gbatch-Event-Id": note.event_id,
    }
    if hook.secret:
        headers["X-Gbatch-Signature"] = notify.signature(hook.secret, body)
    request = urllib.request.Request(hook.url, data=body, headers=headers, method="POST")
    try:
        with _opener().open(request, timeout=SEND_TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as err:
        status = err.code
    except (urllib.error.URLError, OSError) as err:
        raise DeliveryError(f"webhook {hook.name}: {err}") from err
    if not 200 <= status < 300:
        # A redirect, or 4xx but a timeout or too many requests: refused for good.
        final = 300 <= status < 500 and status not in (408, 429)
        raise DeliveryError(f"webhook {hook.name} answered HTTP {status}", final=final)
