"""The head's copy of each job's output: $GBATCH_HOME/logs/<job>.log, owner-only.

A bare process's output reaches it through its shim (gbatch.shim). A container's
output is copied in by a follower thread per attempt; a follower that starts again
(after a daemon restart) truncates back to where the attempt began and replays the
container's whole output, so the log is whole and nothing appears twice.

A log that cannot be written (its disk is full) never stops or fails the job: its
output is read on and dropped, and the log says so, with how much was lost, as soon
as a write succeeds again (see LogWriter). Slurm and pueue lose such output too.

A log stops growing at the head's `max_log_bytes`: the log says so in one line and
further output is read on and dropped, while the job keeps running (Slurm and pueue
do not stop a job for its output either).
This module stays light (no gbatch.site.config at run time): the shim imports it at the
start of every job.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from functools import partial
from pathlib import Path

from gbatch.core.crashpoints import crash_point
from gbatch.core.multinode import rank_label

# How often a wait for a follower looks whether it opens its output files.
OPENING_POLL_SECONDS = 0.05
# How long an ended run is reported running while its output is still being copied
# (LogFollowers.settled): long enough for a loaded machine, short enough that a copy
# that never ends (a hung file system) holds the job's end only a minute.
OUTPUT_DRAIN_SECONDS = 60.0

# Not typing's: importing typing (and logging) would slow the shim, which imports this
# module at every job start. mypy takes any TYPE_CHECKING as typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from contextlib import AbstractContextManager
    from typing import IO

    from gbatch.nodes.outfiles import OutputFiles
    from gbatch.site.config import Paths

    # Opens the container's output stream: a context manager yielding chunks.
    StreamOpener = Callable[[], AbstractContextManager[Iterator[bytes]]]
    # Opens the attempt's output file (gbatch.nodes.outfiles.open_or_say): None when
    # there is none or it cannot be opened, which it says through the callable given.
    FilesOpener = Callable[[Callable[[bytes], object]], OutputFiles | None]


def open_log(path: Path) -> IO[bytes]:
    """The job's log, opened to append, unbuffered; its directory made if missing.

    Unbuffered so that a write the disk refuses fails at once and leaves nothing behind
    in a buffer to be written later out of order.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    return os.fdopen(fd, "ab", buffering=0)


def mark_attempt_start(paths: Paths, job_id: int, attempt: int) -> None:
    """Remember where this attempt's output starts in the job's log."""
    log_path = paths.job_log(job_id)
    run_dir = paths.make_run_dir(job_id, attempt)
    (run_dir / "log_offset").write_text(str(log_path.stat().st_size if log_path.exists() else 0))


# The line a run's output ends with when the head stopped it for a reason of its own (a
# preemption: "gbatch: job 12 preempted by job 15 (QOS high); requeued"), written into
# the run's directory by the head before its signal; whoever copies the run's output (a
# bare run's shim, a container's follower) appends it once the output has ended.
ENDING_NOTE_FILE = "ending_note"


def write_ending_note(run_dir: Path, line: str) -> None:
    """Leave `line` for the run's output copier to append at its end (atomic, idempotent).

    FileNotFoundError when the run's directory is gone (the run is over)."""
    temporary = run_dir / f"{ENDING_NOTE_FILE}.tmp"
    temporary.write_text(line.rstrip("\n") + "\n")
    os.replace(temporary, run_dir / ENDING_NOTE_FILE)


def ending_note(run_dir: Path) -> bytes:
    """The line the head left for the run's output to end with, or b"" (none)."""
    try:
        return (run_dir / ENDING_NOTE_FILE).read_bytes()
    except OSError:
        return b""


def node_log(paths: Paths, job_id: int, attempt: int, index: int) -> Path:
    """The head's raw copy of the output of node `index`'s run of a job run on every node.

    Each node's follower copies its run's output here (and replays it whole after a
    restart); NodeJoin joins the parts' lines into the job's one log as they arrive."""
    return paths.run_dir(job_id, attempt) / f"node{index}.log"


# Where the attempt's lines start in the job's task log (`gbatch logs --label`).
TASKS_OFFSET_FILE = "tasks_offset"
# A line longer than this is joined in pieces (a node that never ends its line), as
# srun's fan-out passes one on (gbatch.head.stepfanout.LONGEST_LINE).
LONGEST_LINE = 64 * 1024
_READ_BYTES = 1 << 20
# The most the daemon's loop waits for a finished job's join (NodeJoins.finish).
FINISH_WAIT_SECONDS = 5.0


def node_label(index: int, nodes: int) -> bytes:
    """`gbatch logs --label`'s prefix of node `index`'s lines: its SLURM_NODEID, `0: `.

    The same as srun -l's prefix of a task's lines (core/multinode.rank_label)."""
    return rank_label(index, nodes)


class NodeJoin:
    """The one log of an attempt of a job run on every node, its nodes' lines joined.

    Its nodes' followers copy their output to their parts (node_log) and call pump;
    this appends the part's new whole lines to the job's log (and its -o file, once
    attached), and each prefixed with its node's rank to the task log that `gbatch
    logs --label` reads. Lines from different nodes never mix mid-line. The job's log
    and the task log each stop at `limit` (max_log_bytes) with LogWriter's one line,
    every node's share counted against the same limit.

    A join starts afresh (a daemon's first for the attempt): it cuts the job's log and
    the task log back to the attempt's start and joins every part from its beginning,
    while each part's follower replays its run's whole output: nothing is lost or
    appears twice. Thread-safe.
    """

    def __init__(self, paths: Paths, job_id: int, attempt: int, nodes: int, limit: int | None):
        self._paths = paths
        self._job_id = job_id
        self._attempt = attempt
        self._nodes = nodes
        self._limit = limit
        self._lock = threading.Lock()
        self._offsets = [0] * nodes  # bytes of each part joined so far
        self._files: OutputFiles | None = None
        self._file_writer: LogWriter | None = None
        self.finished = False
        run_dir = paths.make_run_dir(job_id, attempt)
        offset_file = run_dir / "log_offset"
        self._start = int(offset_file.read_text()) if offset_file.exists() else None
        self._log, self._writer = self._open(paths.job_log(job_id), self._start)
        tasks_path = paths.task_log(job_id)
        tasks_offset = run_dir / TASKS_OFFSET_FILE
        if not tasks_offset.exists():
            size = tasks_path.stat().st_size if tasks_path.exists() else 0
            tasks_offset.write_text(str(size))
        self._tasks, self._task_writer = self._open(tasks_path, int(tasks_offset.read_text()))

    def _open(self, path: Path, start: int | None) -> tuple[IO[bytes] | None, LogWriter]:
        try:
            handle = open_log(path)
            size = os.fstat(handle.fileno()).st_size
            if start is not None and size != start:
                handle.truncate(start)
                size = start
        except OSError as err:
            return None, LogWriter(_refuse(err))
        return handle, LogWriter(handle.write, self._limit, size)

    def pump(self, index: int, final: bool = False) -> None:
        """Join node `index`'s part's new whole lines (`final`: its last, unended, too)."""
        with self._lock:
            if self.finished:
                return
            part = node_log(self._paths, self._job_id, self._attempt, index)
            try:
                with open(part, "rb") as handle:
                    while True:
                        handle.seek(self._offsets[index])
                        data = handle.read(_READ_BYTES)
                        cut = _whole_lines(data, final and len(data) < _READ_BYTES)
                        if not cut:
                            return
                        self._offsets[index] += cut
                        lines = data[:cut]
                        self._put(index, lines if lines.endswith(b"\n") else lines + b"\n")
            except OSError:
                return  # a part not yet made (its follower starts), or gone

    def _put(self, index: int, lines: bytes) -> None:
        self._writer.write(lines)
        if self._file_writer is not None:
            self._file_writer.write(lines)
        prefix = node_label(index, self._nodes)
        self._task_writer.write(b"".join(prefix + line for line in lines.splitlines(True)))

    def attach(self, files: OutputFiles) -> None:
        """Write the lines joined so far, then every line joined after, to the -o file.

        `files`: the job's, opened for this attempt (cut back to its start). The join
        closes them."""
        with self._lock:
            if self.finished:
                files.close()
                return
            if self._files is not None:
                self._files.close()
            self._files = files
            self._file_writer = LogWriter(partial(os.write, files.out), self._limit, 0)
            if self._start is None:
                return
            try:
                with open(self._paths.job_log(self._job_id), "rb") as log:
                    log.seek(self._start)
                    while data := log.read(_READ_BYTES):
                        self._file_writer.write(data)
            except OSError:
                return

    def say(self, text: bytes) -> None:
        """A line of gbatch's own (the -o file could not be opened) in the job's log."""
        with self._lock:
            if not self.finished:
                self._writer.write(text)

    def finish(self) -> None:
        """The job has ended: join what is left of every part, ended; close all."""
        for index in range(self._nodes):
            self.pump(index, final=True)
        with self._lock:
            self.finished = True
            for writer in (self._writer, self._task_writer, self._file_writer):
                if writer is not None:
                    writer.finish()
            for handle in (self._log, self._tasks):
                if handle is not None:
                    handle.close()
            if self._files is not None:
                self._files.close()


def _whole_lines(data: bytes, last: bool) -> int:
    """How much of `data` to join: its whole lines; a line past LONGEST_LINE in pieces;
    all of it when it is the `last` of its node's output."""
    if last:
        return len(data)
    cut = data.rfind(b"\n") + 1
    if not cut and len(data) >= LONGEST_LINE:
        return LONGEST_LINE
    return cut


class NodeJoins:
    """This daemon's joins, one per attempt of a job run on every node while it runs."""

    def __init__(self, paths: Paths, limit: int | None) -> None:
        self._paths = paths
        self._limit = limit
        self._lock = threading.Lock()
        self._joins: dict[tuple[int, int], NodeJoin] = {}
        self._finished: set[tuple[int, int]] = set()

    def of(self, job_id: int, attempt: int, nodes: int) -> NodeJoin | None:
        """The attempt's join, started at the first call; None once it has finished.

        A follower still going after its job ended has nothing left to add."""
        key = (job_id, attempt)
        with self._lock:
            if key in self._finished:
                return None
            join = self._joins.get(key)
            if join is None:
                join = self._joins[key] = NodeJoin(self._paths, job_id, attempt, nodes, self._limit)
            return join

    def finish(
        self, job_id: int, attempt: int, nodes: int, timeout: float = FINISH_WAIT_SECONDS
    ) -> None:
        """The job has ended: join the rest of its nodes' output, then drop their parts.

        From the parts whole, should this daemon not have joined them yet. Waits at most
        `timeout` for that: a write to the job's -o file waits on the user's file system
        (a FUSE mount that does not answer), and the daemon's loop calls this. Past it,
        the join finishes on its own thread."""
        join = self.of(job_id, attempt, nodes)
        if join is None:
            return
        with self._lock:
            self._finished.add((job_id, attempt))
            self._joins.pop((job_id, attempt), None)
        thread = threading.Thread(
            target=self._finish, args=(join, job_id, attempt, nodes), name=f"join-{job_id}"
        )
        thread.daemon = True
        thread.start()
        thread.join(timeout)

    def _finish(self, join: NodeJoin, job_id: int, attempt: int, nodes: int) -> None:
        join.finish()
        for index in range(nodes):
            with contextlib.suppress(OSError):
                node_log(self._paths, job_id, attempt, index).unlink()


def loss_note(lost_bytes: int, error: str) -> str:
    """How a job's log and reason say that output was lost."""
    return f"{lost_bytes} bytes of output lost: log write failed: {error}"


# The shim learns the head's max_log_bytes from this variable (and keeps it from the job).
MAX_LOG_BYTES_ENV = "GBATCH_MAX_LOG_BYTES"


def size_text(count: int) -> str:
    """`count` bytes as people read sizes: 512 bytes, 1.0 MiB, 10.0 GiB."""
    if count < 1024:
        return f"{count} bytes"
    size = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit}"


def truncation_note(limit: int) -> str:
    """The line a job's log ends with once it reached max_log_bytes."""
    return (
        f"output truncated at {size_text(limit)} (max_log_bytes); the job keeps running and "
        "its further output is dropped. To keep more, an admin raises max_log_bytes in the "
        "head's config.yaml"
    )


class LogWriter:
    """Appends a job's output to its log, and never raises for a write the disk refuses.

    For such a write (ENOSPC, EDQUOT, EFBIG, EIO) that output is dropped and counted,
    the job carries on, and the next write that succeeds is preceded by a line saying
    how much was lost and why. Not thread-safe: one writer per log and thread.

    `write` writes some of the bytes it is given and returns how many (os.write, or an
    unbuffered file's write). With a `limit` (max_log_bytes), the log, `size` bytes
    long when the writer starts, takes output until it is `limit` bytes long; then one
    line says so (truncation_note) and the rest of the output is dropped, counted in
    `dropped_bytes`.
    """

    def __init__(
        self, write: Callable[[bytes], int | None], limit: int | None = None, size: int = 0
    ) -> None:
        self._write = write
        self.lost_bytes = 0
        self.error: str | None = None  # why the latest write failed
        self._unreported = 0  # bytes lost since the log last said so
        self._limit = limit
        self._room = None if limit is None else max(limit - size, 0)
        self.dropped_bytes = 0  # past the limit
        self._cut_said = False

    def write(self, data: bytes) -> None:
        if self._room is not None and len(data) > self._room:
            self.dropped_bytes += len(data) - self._room
            data = data[: self._room]
        if data:
            if self._unreported and not self._report_loss():
                self._lose(len(data))
            else:
                put = self._put(data)
                self._lose(len(data) - put)
                if self._room is not None:
                    self._room -= put
        if self.dropped_bytes and not self._cut_said:
            self._say_cut()

    def finish(self) -> None:
        """The output has ended: say what was lost, if the log takes it now."""
        if self._unreported:
            self._report_loss()
        if self.dropped_bytes and not self._cut_said:
            self._say_cut()

    def _say_cut(self) -> None:
        assert self._limit is not None
        if self._unreported and not self._report_loss():
            return
        marker = f"\n[gbatch: {truncation_note(self._limit)}]\n".encode()
        self._cut_said = self._put(marker) == len(marker)

    def note(self) -> str | None:
        """What was lost and why (for the job's record), or None when nothing was."""
        if not self.lost_bytes:
            return None
        return loss_note(self.lost_bytes, self.error or "unknown error")

    def _report_loss(self) -> bool:
        marker = f"\n[gbatch: {loss_note(self._unreported, self.error or '?')}]\n".encode()
        if self._put(marker) < len(marker):
            return False
        self._unreported = 0
        return True

    def _lose(self, count: int) -> None:
        if count > 0:
            self.lost_bytes += count
            self._unreported += count

    def _put(self, data: bytes) -> int:
        """Write as much of `data` as the disk takes; return how much that was."""
        done = 0
        while done < len(data):
            try:
                written = self._write(data[done:] if done else data)
            except OSError as err:
                self.error = err.strerror or str(err)
                return done
            if not written:
                self.error = "the log took no more bytes"
                return done
            done += written
        return done


class StreamCut(Exception):
    """Raised by a stream opener when its stream broke before the run's output ended.

    A local `docker logs -f` whose engine went away (stopped, crashed) ends like that:
    what it copied is incomplete, and may end with docker's own error line.
    """


class StderrChunk(bytes):
    """Output the job wrote on stderr, from a stream that tells the two apart.

    Such a stream is a local container's `docker logs`, when the job sends stderr to a
    file of its own.
    """


class LogFollowers:
    """At most one live follower per (job, attempt)."""

    def __init__(
        self,
        paths: Paths,
        on_done: Callable[[], None],
        max_log_bytes: int | None = None,
        joins: NodeJoins | None = None,
    ) -> None:
        self._paths = paths
        self._on_done = on_done
        self._max_log_bytes = max_log_bytes
        # The daemon's joins of jobs run on every node (all its nodes share them).
        self._joins = joins if joins is not None else NodeJoins(paths, max_log_bytes)
        self._lock = threading.Lock()
        self._threads: dict[tuple[int, int], threading.Thread] = {}
        # Followers opening their job's output files: a wait of the user's file system.
        self._opening: set[tuple[int, int]] = set()
        # Followers whose stream broke (StreamCut): their copy must be replayed whole.
        self._cut: set[tuple[int, int]] = set()
        # When settled() first found a run's follower still copying (monotonic time).
        self._draining: dict[tuple[int, int], float] = {}

    def follow(
        self,
        job_id: int,
        attempt: int,
        open_stream: StreamOpener,
        open_files: FilesOpener | None = None,
        *,
        part: tuple[int, int] | None = None,
    ) -> None:
        """Start copying the attempt's output to the log, unless a follower already does.

        With `open_files`, to the job's output files too: stderr to a file of its own
        when the stream marks it (StderrChunk), else with stdout. `part` (index, nodes):
        the run of node `index` of a job run on every one of its `nodes`, copied to its
        node_log and joined from there (NodeJoin; its -o file gets the joined lines).
        """
        key = (job_id, attempt)
        with self._lock:
            thread = self._threads.get(key)
            if thread is not None and thread.is_alive():
                return
            thread = threading.Thread(
                target=self._copy,
                args=(job_id, attempt, open_stream, open_files, part),
                name=f"logs-{job_id}.{attempt}",
                daemon=True,
            )
            self._threads[key] = thread
            self._cut.discard(key)  # this one copies the attempt's output from its start
        thread.start()

    def copying(self, job_id: int, attempt: int) -> bool:
        """Whether this daemon follows (or has followed, not yet waited on) the attempt."""
        with self._lock:
            return (job_id, attempt) in self._threads

    def ended(self, job_id: int, attempt: int) -> bool:
        """Whether this attempt's output stream has ended (its container likely exited)."""
        with self._lock:
            thread = self._threads.get((job_id, attempt))
        return thread is not None and not thread.is_alive()

    def forget(self, job_id: int, attempt: int) -> None:
        """Drop the attempt's follower, alive or not, so the next follow() replays it.

        For a stream known dead: a broken connection's."""
        with self._lock:
            self._threads.pop((job_id, attempt), None)
            self._cut.discard((job_id, attempt))
            self._draining.pop((job_id, attempt), None)

    def settled(self, job_id: int, attempt: int, grace: float = OUTPUT_DRAIN_SECONDS) -> bool:
        """Whether an ended run may be reported final: its log is whole, or waited for.

        False while its follower still copies (a loaded machine's `docker logs`, an
        output file opening on a slow file system), for at most `grace` seconds from
        the first ask: the run is then reported running a while longer, so that a job
        is never final with its output still on the way (`gbatch logs` right after
        COMPLETED shows it all). After `grace`, True: the copy goes on beside it.
        """
        key = (job_id, attempt)
        with self._lock:
            thread = self._threads.get(key)
            if thread is None or not thread.is_alive():
                self._draining.pop(key, None)
                return True
            first = self._draining.setdefault(key, time.monotonic())
        return time.monotonic() - first >= grace

    def wait(self, job_id: int, attempt: int, timeout: float = 5.0) -> bool:
        """Let the follower finish: the log is complete before the run is final.

        False when its stream broke (StreamCut): the caller replays the output whole
        with a new follow(). Not while it opens the job's output files: that open waits
        on the user's file system (a FUSE mount that does not answer, up to
        outfiles.OPEN_TIMEOUT), and the daemon's loop calls this. That job's log may
        then miss its output; no other job waits.
        """
        key = (job_id, attempt)
        with self._lock:
            thread = self._threads.get(key)
            if key in self._draining:
                # Already waited on, and reported running till it settles: a short look
                # each pass, not the whole wait again (the loop has other jobs).
                timeout = min(timeout, OPENING_POLL_SECONDS)
        if thread is None:
            return True
        deadline = time.monotonic() + timeout
        while thread.is_alive():
            remaining = deadline - time.monotonic()
            with self._lock:
                if remaining <= 0 or key in self._opening:
                    # Kept: a later follow() must not start a second copy beside this
                    # one (both would cut the log back and write), a later wait() waits.
                    return True
            thread.join(min(remaining, OPENING_POLL_SECONDS))
        with self._lock:
            if self._threads.get(key) is thread:
                del self._threads[key]
            self._draining.pop(key, None)
            if key in self._cut:
                self._cut.discard(key)
                return False
        return True

    def _copy(
        self,
        job_id: int,
        attempt: int,
        open_stream: StreamOpener,
        open_files: FilesOpener | None,
        part: tuple[int, int] | None = None,
    ) -> None:
        offset_file = self._paths.run_dir(job_id, attempt) / "log_offset"
        offset = int(offset_file.read_text()) if offset_file.exists() and not part else 0
        log_path = self._paths.job_log(job_id)
        join = None
        handle: IO[bytes] | None = None
        try:
            if part is not None:
                join = self._joins.of(job_id, attempt, part[1])
                if join is None:
                    raise _JoinFinished
                log_path = node_log(self._paths, job_id, attempt, part[0])
            handle = open_log(log_path)
            if os.fstat(handle.fileno()).st_size != offset:
                handle.truncate(offset)
            writer = LogWriter(handle.write, self._max_log_bytes, offset)
        except OSError as err:
            # Read the stream on all the same: a follower that died would be started
            # again at once, and the container's output would be replayed for nothing.
            writer = LogWriter(_refuse(err))
        except _JoinFinished:
            writer = LogWriter(len)  # its job has ended and its output is joined: dropped
        # The output file is cut back to the attempt's start the same way (outfiles).
        files = None
        if open_files is not None and part is not None:
            # A job run on every node: the join writes its -o file, every node's lines.
            if join is not None:
                opened = self._open_files(job_id, attempt, open_files, join.say)
                if opened is not None:
                    join.attach(opened)
            open_files = None
        if open_files is not None:
            files = self._open_files(job_id, attempt, open_files, writer.write)
        file_writer = err_writer = None
        if files is not None:
            file_writer = err_writer = LogWriter(
                partial(os.write, files.out), self._max_log_bytes, 0
            )
            if files.apart:
                err_writer = LogWriter(partial(os.write, files.err), self._max_log_bytes, 0)
        cut = False
        try:
            try:
                with open_stream() as chunks:
                    for chunk in chunks:
                        had_lost = writer.lost_bytes
                        writer.write(chunk)
                        if isinstance(chunk, StderrChunk) and err_writer is not None:
                            err_writer.write(chunk)
                        elif file_writer is not None:
                            file_writer.write(chunk)
                        if join is not None and part is not None:
                            join.pump(part[0])
                        crash_point("logs.mid_copy")
                        if writer.lost_bytes and not had_lost:
                            import logging  # deferred: see TYPE_CHECKING above

                            logging.getLogger("gbatchd").warning(
                                "job %d: %s", job_id, writer.note()
                            )
            except StreamCut:
                cut = True  # wait() says so: the run's status check replays it whole
            note = b"" if cut or part is not None else ending_note(offset_file.parent)
            if note:  # the head stopped it (a preemption): why, after its last output
                writer.write(note)
                if file_writer is not None:
                    file_writer.write(note)
            writer.finish()
            for each in {id(w): w for w in (file_writer, err_writer) if w is not None}.values():
                each.finish()
        finally:
            if handle is not None:
                handle.close()
            if files is not None:
                files.close()
            if cut:
                with self._lock:
                    self._cut.add((job_id, attempt))
            self._on_done()

    def _open_files(
        self, job_id: int, attempt: int, open_files: FilesOpener, say: Callable[[bytes], object]
    ) -> OutputFiles | None:
        key = (job_id, attempt)
        with self._lock:
            self._opening.add(key)
        try:
            return open_files(say)
        finally:
            with self._lock:
                self._opening.discard(key)


class _JoinFinished(Exception):
    """A follower of a run whose job's join has finished."""


def _refuse(err: OSError) -> Callable[[bytes], int | None]:
    def write(data: bytes) -> int | None:
        raise err

    return write
