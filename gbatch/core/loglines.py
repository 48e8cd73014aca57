"""How a log stays readable and bounded under a flood: the one throttle of gbatch's logs.

Three pieces, shared by the daemon (gbatchd.log) and the HTTP API (its stderr):

- `loggable`: a user's string made safe for one line, escaped and cut.
- `LineBudget`: of a flood of like lines (one key: a user's refusals of one operation,
  a bug at one place), at most `lines` in a window of `seconds` opened by the first;
  the rest are counted, and once the window has ended one line says how many. 50
  refused requests with 4 MB names once grew gbatchd.log by 200 MB within seconds, and
  a loop of requests that hit a bug wrote 69 MB of tracebacks in 20 s.
- `InternalErrors`: a bug (an exception nobody expected) logged once per kind (its type
  and the place it was raised) per window, the repeats counted:

      internal error: request 'cancel' failed: OverflowError at
      gbatch/head/store/reads.py:202 in briefs_between: Python int too large ...
      Traceback (most recent call last): ...
      internal error: OverflowError at gbatch/head/store/reads.py:202 -> and 4,812 more
      in 10 s, not logged one by one (at most one line per kind of error per 10 s)

  The traceback itself is written once per kind per TRACEBACK_SECONDS; the lines of a
  later window name the kind and the error alone.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import traceback
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

LINES = 10
WINDOW_SECONDS = 10.0
# A bug's traceback, once written, is not written again for this long (its kind's later
# lines name it and count it).
TRACEBACK_SECONDS = 3600.0
# The most frames of a traceback written, innermost last: a deep recursion is a few
# dozen lines, not thousands.
MAX_FRAMES = 40
# Chained exceptions ("During handling of the above exception ...") written at most.
MAX_CHAINED = 3

# The most characters of a user's string a log line takes: a 4 MB node name refused
# fifty times must not add 200 MB to the log.
LOGGED_CHARS = 200
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_PACKAGE = Path(__file__).resolve().parent.parent  # gbatch/


def loggable(value: object, limit: int = LOGGED_CHARS) -> str:
    """`value` made safe for one log line: control characters escaped, cut to `limit`.

    A newline would forge the next line, an ESC drive the reader's terminal; a cut value
    says how many more characters there were."""
    text = str(value)
    cut = len(text) - limit
    if cut > 0:
        text = text[:limit]
    text = _UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
    return f"{text}...[{cut} more characters]" if cut > 0 else text


K = TypeVar("K", bound=Hashable)


@dataclass
class _Window:
    opened: float
    logged: int = 0
    unlogged: int = 0


class LineBudget(Generic[K]):
    """Decides which of a flood of like lines (one `key`) are written; counts the others.

    `summarize(key, unlogged)` is called, outside the lock, for each window that ended
    with lines not written. With `max_keys`, keys a sender may make up at will (client
    addresses) open at most that many windows at once; past them, a new key's lines go
    to the window of `overflow(key)`, shared. Thread-safe.

    Someone must call `close_ended` now and then for the count of a flood that stopped
    to be written (the daemon's loop does, each tick); with `timer`, a process without
    such a loop (the HTTP API), the budget does it itself, on a timer thread started
    when a window first holds a line back.
    """

    def __init__(
        self,
        monotonic: Callable[[], float],
        summarize: Callable[[K, int], None],
        lines: int = LINES,
        window: float = WINDOW_SECONDS,
        *,
        max_keys: int | None = None,
        overflow: Callable[[K], K] | None = None,
        timer: bool = False,
    ) -> None:
        self._monotonic = monotonic
        self._summarize = summarize
        self.lines = lines
        self.window = window
        self._max_keys = max_keys
        self._overflow = overflow
        self._timer = timer
        self._timed = False  # a timer is set to close the ended windows
        self._lock = threading.Lock()
        self._windows: dict[K, _Window] = {}  # while open

    def admit(self, key: K) -> bool:
        """Whether this line of `key` is written; if not, it is counted.

        The first line after a window has ended writes that window's count first.
        """
        now = self._monotonic()
        with self._lock:
            ended = self._pop_if_ended(key, now)
            if (
                ended is None
                and self._overflow is not None
                and self._max_keys is not None
                and key not in self._windows
                and len(self._windows) >= self._max_keys
            ):
                key = self._overflow(key)
                ended = self._pop_if_ended(key, now)
            window = self._windows.setdefault(key, _Window(now))
            admitted = window.logged < self.lines
            if admitted:
                window.logged += 1
            else:
                window.unlogged += 1
                if self._timer and not self._timed:
                    self._set_timer(window.opened + self.window - now)
        if ended is not None and ended.unlogged:
            self._summarize(key, ended.unlogged)
        return admitted

    def close_ended(self) -> None:
        """Write the count of every window that has ended.

        The daemon's loop calls this each tick, so a flood that stopped is still counted
        in the log.
        """
        now = self._monotonic()
        with self._lock:
            ended = [(key, w) for key in list(self._windows) if (w := self._pop_if_ended(key, now))]
        for key, window in ended:
            if window.unlogged:
                self._summarize(key, window.unlogged)

    def _set_timer(self, delay: float) -> None:
        """Close the ended windows in `delay` seconds (under the lock)."""
        self._timed = True
        timer = threading.Timer(max(delay, 0.0) + 0.01, self._on_timer)
        timer.daemon = True
        timer.start()

    def _on_timer(self) -> None:
        with self._lock:
            self._timed = False
        self.close_ended()
        now = self._monotonic()
        with self._lock:
            holding = [w.opened for w in self._windows.values() if w.unlogged]
            if holding and not self._timed:
                self._set_timer(min(holding) + self.window - now)

    def _pop_if_ended(self, key: K, now: float) -> _Window | None:
        window = self._windows.get(key)
        if window is None or now - window.opened < self.window:
            return None
        return self._windows.pop(key)


# A kind of bug: its exception's type and the place (file, line) it was raised.
BugKind = tuple[str, str, int]


def bug_kind(err: BaseException) -> BugKind:
    """`err`'s type name and the innermost frame of its traceback (where it was raised)."""
    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return (type(err).__qualname__, "?", 0)
    last = frames[-1]
    return (type(err).__qualname__, last.filename, last.lineno or 0)


def shown_place(filename: str, line: int) -> str:
    """A frame's file and line as a log line shows it: `gbatch/head/x.py:12`."""
    path = Path(filename)
    try:
        shown = str(path.resolve().relative_to(_PACKAGE.parent))
    except (OSError, ValueError):
        shown = "/".join(path.parts[-2:])
    return f"{shown}:{line}"


def bug_traceback(err: BaseException) -> str:
    """`err`'s traceback, as Python writes it, with each exception's text escaped and cut.

    The frames are the code's; an exception's text may be a user's (a 4 MB name in a
    KeyError), so it gets `loggable`, and the frames of each exception are at most
    MAX_FRAMES, the innermost ones."""
    chain: list[tuple[BaseException, str]] = []
    seen: set[int] = set()
    current: BaseException | None = err
    link = ""
    while current is not None and id(current) not in seen and len(chain) <= MAX_CHAINED:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, "The above exception was the direct cause"
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, "During handling of the above exception"
        else:
            current = None
    parts: list[str] = []
    for exc, link_to_next in reversed(chain):
        frames = traceback.extract_tb(exc.__traceback__)
        lines = ["Traceback (most recent call last):"]
        if len(frames) > MAX_FRAMES:
            lines.append(f"  ... {len(frames) - MAX_FRAMES} frames not shown")
        for frame in frames[-MAX_FRAMES:]:
            lines.append(f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}')
            if frame.line:
                lines.append(f"    {frame.line}")
        lines.append(loggable(_exception_line(exc), 1000))
        parts.append("\n".join(lines))
        if link_to_next:
            parts.append(f"{link_to_next}, another exception occurred:")
    return "\n\n".join(parts)


def _exception_line(err: BaseException) -> str:
    text = _text(err)
    return f"{type(err).__qualname__}: {text}" if text else type(err).__qualname__


def _text(err: BaseException) -> str:
    try:
        return str(err)
    except Exception:  # a broken __str__ must not break the report of the bug
        return "<unprintable>"


class InternalErrors:
    """Logs bugs to `logger`: each kind once per window with its traceback, repeats counted.

    Thread-safe: a server's threads report, its loop calls `close_ended` (or, with
    `timer`, the budget's own timer does: LineBudget).
    """

    def __init__(
        self,
        logger: logging.Logger,
        monotonic: Callable[[], float] = time.monotonic,
        window: float = WINDOW_SECONDS,
        traceback_every: float = TRACEBACK_SECONDS,
        *,
        timer: bool = False,
    ) -> None:
        self._log = logger
        self._monotonic = monotonic
        self._traceback_every = traceback_every
        self._lock = threading.Lock()
        self._tracebacks: dict[BugKind, float] = {}  # kind -> when its traceback was written
        self.budget: LineBudget[BugKind] = LineBudget(
            monotonic, self._summarize, 1, window, timer=timer
        )

    def report(self, err: BaseException, what: str) -> None:
        """Log that `what` ("request 'cancel'") failed with the bug `err`, within the budget.

        `what` is the caller's words, loggable already.
        """
        kind = bug_kind(err)
        if not self.budget.admit(kind):
            return
        now = self._monotonic()
        with self._lock:
            written = self._tracebacks.get(kind)
            again = written is not None and now - written < self._traceback_every
            if not again:
                self._tracebacks[kind] = now
        head = f"internal error: {what} failed: {_kind_text(kind)}: {loggable(_text(err))}"
        if again:
            ago = now - written if written is not None else 0.0
            self._log.error("%s (traceback logged %.0f s ago)", head, ago)
        else:
            self._log.error("%s\n%s", head, bug_traceback(err))

    def close_ended(self) -> None:
        """Write the count of each kind whose window has ended."""
        self.budget.close_ended()

    def _summarize(self, kind: BugKind, unlogged: int) -> None:
        self._log.error(
            "internal error: %s -> and %s more in %g s, not logged one by one (at most one "
            "line per kind of error per %g s)",
            _kind_text(kind),
            f"{unlogged:,}",
            self.budget.window,
            self.budget.window,
        )


def _kind_text(kind: BugKind) -> str:
    name, filename, line = kind
    return f"{name} at {shown_place(filename, line)}"


class LikeLines(logging.Filter):
    """A logging filter: of the records of one logger, level and message, `lines` a window.

    For the loggers of libraries a sender drives (uvicorn's `Invalid HTTP request
    received.` for each bad request an outsider sends): the records past the budget are
    dropped and counted, and one record says how many once the window has ended. The
    message's template is the key (a library's are fixed texts); at most MAX_LIKE_KEYS of
    them have windows at once, the others share one.
    """

    def __init__(
        self,
        monotonic: Callable[[], float] = time.monotonic,
        lines: int = LINES,
        window: float = WINDOW_SECONDS,
    ) -> None:
        super().__init__()
        self.budget: LineBudget[tuple[str, int, str]] = LineBudget(
            monotonic,
            self._summarize,
            lines,
            window,
            max_keys=MAX_LIKE_KEYS,
            overflow=lambda key: (key[0], key[1], "(other messages)"),
            timer=True,
        )

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "gbatch_count", False):
            return True  # a count this filter wrote
        return self.budget.admit((record.name, record.levelno, loggable(record.msg)))

    def _summarize(self, key: tuple[str, int, str], unlogged: int) -> None:
        name, level, message = key
        logging.getLogger(name).log(
            level,
            "%s -> and %s more like it in %g s, not logged one by one (at most %d per %g s)",
            message,
            f"{unlogged:,}",
            self.budget.window,
            self.budget.lines,
            self.budget.window,
            extra={"gbatch_count": True},
        )


MAX_LIKE_KEYS = 64
