"""The supervisor of one bare-process run: starts the job, copies its output, records its exit.

Run as `python -m gbatch.shim RUN_DIR [--as UID GID GROUPS WORKDIR] -- ARGV...`.

The daemon starts the shim in a session of its own, so the run outlives the daemon
(a restart, a crash), with its stdout and stderr on the job's log. The shim starts
the job in a new process group, records that group in RUN_DIR/pids.json so the daemon
can signal the whole group, copies the job's output into the log, waits, and writes
RUN_DIR/exit.json atomically: the daemon learns the exit status from the file,
whether or not it is the shim's parent any more.

With `--as`, the shim (run by a root daemon) starts the job as its submitter: their
uid, primary gid and groups (GROUPS: comma-separated, may be empty), umask 022, and
WORKDIR entered with their rights. The shim itself stays the daemon's user, so the job
cannot touch RUN_DIR, its exit record or the shim, and the daemon can still signal the
job's whole group.

When the daemon names the job's own output files (sbatch -o/-e: outfiles.OUT_FILES_ENV),
the shim opens them as the submitter (gbatch.nodes.outfiles) and copies the output
there too, stderr through a pipe of its own when it goes to a file of its own.

Output goes through the shim (a pipe), not straight to the file, so a log that cannot
be written (a full disk) never makes the job's own writes fail: the shim drops that
output and the log says so (gbatch.nodes.joblog.LogWriter). A process the job leaves behind
loses its output once the job has ended. A full disk also delays pids.json and
exit.json: the shim retries them until there is room, since the daemon cannot end
the job without exit.json.

Where the daemon made the run a cgroup (gbatch.nodes.cgroups: CGROUP_ENV), the shim
moves itself into it for the fork of the job and back out at once, so the job and all
it starts are held there from their first instruction; the job's memory is then the
cgroup's to hold, not RLIMIT_DATA's, and exit.json says "oom" when the kernel killed
one of its processes for memory. Where it cannot enter, the job runs under Limits
alone, and its log says so.

stdlib, gbatch.nodes.cgroups, gbatch.nodes.joblog and gbatch.nodes.outfiles only; it
is on the start path of every job.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

from gbatch.nodes import outfiles
from gbatch.nodes.cgroups import JobCgroup
from gbatch.nodes.joblog import MAX_LOG_BYTES_ENV, LogWriter, ending_note

# Neither typing nor dataclasses at run time: with inspect, which dataclasses brings,
# they slow every job start. mypy takes any TYPE_CHECKING as typing's.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, MutableMapping
    from typing import Any

# Errors that free space ends; any other error in recording the run is final.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
RETRY_SECONDS = 1.0
# After the job exits: how long its output may still take to drain from the pipe. It
# drains at once unless a process the job left behind holds the pipe open.
OUTPUT_GRACE_SECONDS = 1.0
# A job started for another user gets a login's usual umask, not the daemon's.
JOB_UMASK = 0o022
# The job's CPU and memory limits, from the daemon, for the shim alone (taken out of the
# environment, so the job does not inherit them): the CPUs to pin it to ("0,1,2"), and
# its memory in MiB, the cap of its data size (RLIMIT_DATA).
CPUS_ENV = "GBATCH_SHIM_CPUS"
MEM_MB_ENV = "GBATCH_SHIM_MEM_MB"
# The file (JSON, 0600, in RUN_DIR) that holds the job's environment when the shim
# itself is started with the daemon's: a root shim started for another user must not
# run with what the user put in their environment (PYTHONPATH, LD_PRELOAD, ...). The
# shim reads it, removes it and takes it as its environment, which the job inherits.
JOB_ENV_FILE_ENV = "GBATCH_SHIM_JOB_ENV"


def write_atomically(path: Path, data: dict[str, object], durable: bool = True) -> None:
    """Write `data` as JSON to `path` whole or not at all.

    `durable`: on disk before it replaces the old file (an fsync, slow on a busy disk).
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as handle:
            json.dump(data, handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()  # a partial file holds space the next try needs
        raise


def write_when_possible(
    path: Path,
    make_data: Callable[[], dict[str, object]],
    *,
    before_each: Callable[[], None] = lambda: None,
    sleep: Callable[[float], None] = time.sleep,
    durable: bool = True,
) -> None:
    """write_atomically, retried every RETRY_SECONDS while the disk is full.

    The daemon needs this file to know the run. Other errors are raised.
    """
    complained = False
    while True:
        before_each()
        try:
            write_atomically(path, make_data(), durable)
            return
        except OSError as err:
            if err.errno not in DISK_FULL_ERRNOS:
                raise
            if not complained:
                complained = True
                _say(f"gbatch: cannot write {path.name} ({err.strerror}); retrying until it fits")
        sleep(RETRY_SECONDS)


def _say(message: str) -> None:
    """A line to the job's log (the shim's own stderr), if the log takes it."""
    with contextlib.suppress(OSError, ValueError):
        print(message, file=sys.stderr, flush=True)


def copy_outputs(sources: dict[int, list[LogWriter]]) -> None:
    """Copy each pipe of `sources` to its writers until every pipe ends; then finish them.

    A pipe ends when every writer of it has closed it. One thread: a LogWriter is not
    thread-safe, and the head's log takes both pipes.
    """
    import selectors  # deferred: only here, on the copier's thread

    open_pipes = dict(sources)
    try:
        with selectors.DefaultSelector() as selector:
            for fd in open_pipes:
                selector.register(fd, selectors.EVENT_READ)
            while open_pipes:
                for key, _ in selector.select():
                    fd = int(key.fd)
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        selector.unregister(fd)
                        os.close(fd)
                        del open_pipes[fd]
                        continue
                    for writer in open_pipes[fd]:
                        writer.write(chunk)
        for writer in {id(w): w for ws in sources.values() for w in ws}.values():
            writer.finish()
    finally:
        for fd in open_pipes:
            with contextlib.suppress(OSError):
                os.close(fd)


def file_writers(
    environ: MutableMapping[str, str], run_dir: Path, identity: Identity | None, limit: int | None
) -> tuple[LogWriter | None, LogWriter | None]:
    """Writers to the job's own output files (sbatch -o/-e): (stdout's, stderr's when apart).

    The daemon named them (outfiles.OUT_FILES_ENV, taken out of `environ`); the shim
    opens them here, as the job's user, off the daemon's loop: an open that waits (a
    file system that does not answer) holds up this job alone. (None, None) when there
    are none, or when they cannot be opened: the log then says why in its first line.
    Each takes at most `limit` bytes of this attempt; a write the file refuses never
    fails the job (LogWriter).
    """
    wanted = environ.pop(outfiles.OUT_FILES_ENV, None)
    if not wanted:
        return None, None
    plan = json.loads(wanted)
    as_user = (
        None
        if identity is None
        else outfiles.Submitter(identity.uid, identity.gid, identity.groups)
    )
    try:
        files = outfiles.open_planned(plan, run_dir, as_user)
    except outfiles.OpenError as err:
        with contextlib.suppress(OSError):
            os.write(2, outfiles.not_written_note(int(plan["job"]), str(err)).encode())
        return None, None

    def writer(fd: int) -> LogWriter:
        return LogWriter(partial(os.write, fd), limit, 0)

    return writer(files.out), (writer(files.err) if files.apart else None)


class _Record:
    """A few named fields, compared as a tuple: what a frozen dataclass gives, without
    importing dataclasses."""

    __slots__: tuple[str, ...] = ()

    def _fields(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"{type(self).__name__}({fields})"


class Identity(_Record):
    """Whom the job runs as when the shim (root) starts it for its submitter."""

    __slots__ = ("gid", "groups", "uid", "workdir")

    def __init__(self, uid: int, gid: int, groups: tuple[int, ...], workdir: str) -> None:
        self.uid = uid
        self.gid = gid
        self.groups = groups
        self.workdir = workdir

    def popen_options(self) -> dict[str, Any]:
        """subprocess.Popen's options that start the job as this user.

        They switch groups, gid, uid, then (as them) enter the workdir. A login's umask,
        not the daemon's.
        """
        return {
            "user": self.uid,
            "group": self.gid,
            "extra_groups": sorted({self.gid, *self.groups}),
            "umask": JOB_UMASK,
            "preexec_fn": partial(_enter_workdir, self.workdir),
        }


def _enter_workdir(workdir: str) -> None:
    """In the job's process, after it became its user: the workdir is entered with the
    user's rights, not root's. A failure ends it (126), said on its log. No workdir
    (""): the user's HOME, or / when they have none to enter."""
    if not workdir:
        try:
            os.chdir(os.environ.get("HOME") or "/")
        except OSError:
            os.chdir("/")
        return
    try:
        os.chdir(workdir)
    except OSError as err:
        os.write(2, f"gbatch: cannot enter the workdir {workdir}: {err.strerror}\n".encode())
        os._exit(126)


class Limits(_Record):
    """What a bare job is held to in its own process: the CPUs it may run on, a memory cap.

    The CPUs it may run on (empty: any) and the most memory its data segment and private
    mappings may take (None: no cap). RLIMIT_DATA, not RLIMIT_AS: address space that
    CUDA and JIT runtimes reserve without using it does not count, memory that is
    written does; the kernel refuses more (a failed malloc, MemoryError in Python)
    instead of killing the job. The cap is for a job outside a cgroup holding its
    memory (without_memory).
    """

    __slots__ = ("cpus", "mem_mb")

    def __init__(self, cpus: tuple[int, ...] = (), mem_mb: int | None = None) -> None:
        self.cpus = cpus
        self.mem_mb = mem_mb

    @classmethod
    def take_from(cls, environ: MutableMapping[str, str]) -> Limits:
        cpus = environ.pop(CPUS_ENV, "")
        mem = environ.pop(MEM_MB_ENV, "")
        return cls(tuple(int(c) for c in cpus.split(",") if c), int(mem) if mem else None)

    def without_memory(self) -> Limits:
        """These limits less the memory cap: a cgroup holds the job's memory."""
        return Limits(self.cpus)

    def apply(self) -> None:
        """Apply the limits, in the job's process before it execs.

        After it became its user: lowering a limit and one's own affinity need no
        privilege.
        """
        if self.cpus:
            with contextlib.suppress(OSError):  # CPUs gone offline: run unpinned
                os.sched_setaffinity(0, self.cpus)
        if self.mem_mb is not None:
            size = self.mem_mb << 20
            resource.setrlimit(resource.RLIMIT_DATA, (size, size))


def _prepare_child(limits: Limits, workdir: str | None) -> None:
    limits.apply()
    if workdir is not None:
        _enter_workdir(workdir)


@contextlib.contextmanager
def run_cgroup_entered(
    cgroup: JobCgroup | None, limits: Limits
) -> Iterator[tuple[JobCgroup | None, Limits]]:
    """This process in the run's cgroup for the block (a child forked there starts in it).

    Yields the cgroup entered (None: none, or it could not enter, which the log says)
    and the limits the job's own process still needs.
    """
    if cgroup is None:
        yield None, limits
        return
    with cgroup.entered() as problem:
        if problem is None:
            yield cgroup, limits.without_memory() if cgroup.holds_memory else limits
            return
        _say(f"gbatch: {problem}: its CPUs and memory are held by affinity and RLIMIT_DATA")
        yield None, limits


def parse_args(argv: list[str]) -> tuple[Path, Identity | None, list[str]] | None:
    """(RUN_DIR, Identity or None, ARGV) of the shim's arguments; None when they do not fit.

    They are `RUN_DIR [--as UID GID GROUPS WORKDIR] -- ARGV...`. An empty WORKDIR: the
    user's HOME.
    """
    if len(argv) >= 8 and argv[1] == "--as" and argv[6] == "--":
        uid, gid, groups, workdir = argv[2:6]
        identity = Identity(
            int(uid), int(gid), tuple(int(g) for g in groups.split(",") if g), workdir
        )
        return Path(argv[0]), identity, argv[7:]
    if len(argv) >= 3 and argv[1] == "--":
        return Path(argv[0]), None, argv[2:]
    return None


def log_writer(environ: MutableMapping[str, str]) -> LogWriter:
    """The writer of the job's output to the log on this process's stdout, capped.

    Capped at the head's max_log_bytes (MAX_LOG_BYTES_ENV; main takes it out of the
    environment so that the job does not inherit it), counting what the log already
    holds (earlier attempts).
    """
    out = sys.stdout.fileno()
    size = os.fstat(out).st_size
    return LogWriter(partial(os.write, out), log_limit(environ), size)


def log_limit(environ: MutableMapping[str, str]) -> int | None:
    limit = environ.get(MAX_LOG_BYTES_ENV)
    return int(limit) if limit else None


def coerce_c_locale(environ: MutableMapping[str, str]) -> None:
    """Set LC_CTYPE in `environ` where a fresh interpreter started with it would (PEP 538).

    As CPython's _Py_CoerceLegacyLocale does, and as a plain shim's job always
    inherited: when PYTHONCOERCECLOCALE is not 0, LC_ALL is empty, and the
    environment's LC_CTYPE locale is C (or cannot be set).
    """
    import locale  # deferred: only a shim that takes its job's environment late

    if environ.get("PYTHONCOERCECLOCALE") == "0" or environ.get("LC_ALL"):
        return
    try:
        current = locale.setlocale(locale.LC_CTYPE, "")
    except locale.Error:
        current = locale.setlocale(locale.LC_CTYPE, None)
    if current != "C":
        return
    for name in ("C.UTF-8", "C.utf8", "UTF-8"):
        try:
            locale.setlocale(locale.LC_CTYPE, name)
        except locale.Error:
            continue
        environ["LC_CTYPE"] = name
        return


def take_job_env(environ: MutableMapping[str, str]) -> None:
    """Replace `environ` with the job environment file it names (JOB_ENV_FILE_ENV), if any.

    The file is removed once read; ValueError when it holds no environment. LC_CTYPE is
    then set as a fresh interpreter would set it (coerce_c_locale).
    """
    path = environ.get(JOB_ENV_FILE_ENV)
    if path is None:
        return
    with open(path) as handle:
        loaded = json.load(handle)
    os.unlink(path)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} holds no environment")
    environ.clear()
    environ.update({str(k): str(v) for k, v in loaded.items()})
    coerce_c_locale(environ)


def fresh_signals() -> None:
    """The signal dispositions and mask of a fresh `python -m`, whatever its starter's were.

    What a job or step inherits from its shim: never a SIGHUP or SIGTERM ignored by the
    daemon's own starter (`nohup gbatch daemon start`), which would keep a step's hang-up
    and a cancel's SIGTERM from reaching it. The shim server's forks and the plain shim
    start their jobs alike."""
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    # What a fresh interpreter sets: KeyboardInterrupt on SIGINT, SIGPIPE ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def main(argv: list[str]) -> int:
    fresh_signals()
    parsed = parse_args(argv)
    if parsed is None:
        print(
            "usage: python -m gbatch.shim RUN_DIR [--as UID GID GROUPS WORKDIR] -- ARGV...",
            file=sys.stderr,
        )
        return 2
    run_dir, identity, command = parsed
    try:
        take_job_env(os.environ)
    except (OSError, ValueError) as err:
        _say(f"gbatch: cannot read the job's environment: {err}")
        failed_env: dict[str, object] = {"exit_code": 126, "signal": 0, "end_time": time.time()}
        write_when_possible(run_dir / "exit.json", lambda: failed_env)
        return 126
    switch = identity.popen_options() if identity is not None else {}
    limits = Limits.take_from(os.environ)
    run_cgroup = JobCgroup.take_from(os.environ)
    # First: a note that the files cannot be opened goes first in the log.
    out_file, err_file = file_writers(os.environ, run_dir, identity, log_limit(os.environ))
    writer = log_writer(os.environ)
    os.environ.pop(MAX_LOG_BYTES_ENV, None)
    output, job_output = os.pipe()
    errors, job_errors = os.pipe() if err_file is not None else (output, job_output)
    try:
        with run_cgroup_entered(run_cgroup, limits) as (run_cgroup, limits):
            if limits != Limits():
                workdir = identity.workdir if identity is not None else None
                switch["preexec_fn"] = partial(_prepare_child, limits, workdir)
            child = subprocess.Popen(
                command, process_group=0, stdout=job_output, stderr=job_errors, **switch
            )
    except OSError as err:
        for fd in {output, job_output, errors, job_errors}:
            os.close(fd)
        # Goes to the job's log, which is this process's stdout/stderr.
        _say(f"gbatch: cannot start {command[0]!r}: {err.strerror}")
        code = 127 if isinstance(err, FileNotFoundError) else 126
        failed: dict[str, object] = {"exit_code": code, "signal": 0, "end_time": time.time()}
        write_when_possible(run_dir / "exit.json", lambda: failed)
        return code
    for fd in {job_output, job_errors}:
        os.close(fd)  # the job holds it now; EOF comes when the job's side closes
    sources: dict[int, list[LogWriter]] = {output: [writer]}
    if out_file is not None:
        sources[output].append(out_file)
    if err_file is not None:
        sources[errors] = [writer, err_file]
    # The daemon signals the job's group, not the shim; ignore stray terminal
    # signals so the shim always lives to record the exit status.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    copier = threading.Thread(target=copy_outputs, args=(sources,), daemon=True)
    copier.start()
    pids: dict[str, object] = {"shim": os.getpid(), "pgid": child.pid}
    # Not fsynced: the pids matter only while this process lives, and what would lose
    # the unsynced file (the machine going down) ends the process too. exit.json is
    # fsynced: a restarted machine's daemon still learns how the run ended.
    write_when_possible(run_dir / "pids.json", lambda: pids, durable=False)
    returncode = child.wait()
    end_time = time.time()
    copier.join(OUTPUT_GRACE_SECONDS)
    if not copier.is_alive():
        # The head stopped it for a reason of its own (a preemption): say why, last.
        note = ending_note(run_dir)
        if note:
            writer.write(note)
            if out_file is not None:
                out_file.write(note)
    exit_code, killed_by = (returncode, 0) if returncode >= 0 else (0, -returncode)
    oom = run_cgroup is not None and run_cgroup.oom_killed(killed_by)

    def exit_record() -> dict[str, object]:
        record: dict[str, object] = {
            "exit_code": exit_code,
            "signal": killed_by,
            "end_time": end_time,
        }
        note = writer.note()
        if note is not None:
            record["output_lost"] = note
        if oom:
            record["oom"] = True
        return record

    # While exit.json waits for space, the log may get room first: say there what
    # was lost (once the copier is done with the writer).
    finish_log = writer.finish if not copier.is_alive() else (lambda: None)
    write_when_possible(run_dir / "exit.json", exit_record, before_each=finish_log)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
