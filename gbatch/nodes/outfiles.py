"""A job's output files (sbatch -o/-e), opened with its submitter's rights, never blocking.

The daemon may be root; the files are the user's, in the user's directories. So when
the opener is not the submitter, a short-lived child process that is the submitter
(uid, gid, groups, umask 022) opens them and hands the open descriptors back over a
socketpair (SCM_RIGHTS): every check the kernel makes on the path (directories,
symlinks, an existing file's mode) is made against the user. When the opener is the
submitter, it opens them itself.

Only a regular file or /dev/null is taken. Each is opened with O_NONBLOCK (cleared
once it is known to be one): a FIFO's open would otherwise wait for a reader, a
terminal's for its line, and writes to either would wait on whoever reads. Anything
else is refused with a reason (OpenError), and the job runs on with its output in the
head's log only (open_or_say).

Who opens them is never the daemon's loop: a bare job's shim opens its own
(`planned` is what the daemon hands it, OUT_FILES_ENV), a container's log follower
its. A file system that keeps an open waiting (a user's FUSE mount that does not
answer) holds up only that job.

Each attempt records in its run directory how long its files were when it began
(`out_offset`), so that a container's output replayed after a daemon restart is cut
back to there first, as the head's log is (gbatch.nodes.joblog), and never doubled.

Imported by the shim at every bare job's start: stdlib only at run time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from gbatch.core import outputs

# Not typing's: see gbatch.nodes.joblog.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from gbatch.core.model import Job

OPEN_TIMEOUT = 30.0  # seconds for the opener child (off the loop: a job's shim, a follower)
OFFSETS_FILE = "out_offset"
FILE_MODE = 0o666  # less the umask: 0644, as Slurm's files
# What the daemon tells a bare job's shim to open (`planned`, JSON); the shim takes it
# out of the environment, so the job does not inherit it.
OUT_FILES_ENV = "GBATCH_OUT_FILES"
# No open waits (O_NONBLOCK) and no terminal becomes the opener's (O_NOCTTY: a shim is
# a session leader). Close-on-exec: another thread of the daemon may be starting a job.
_OPEN_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC

# Started as root and switched to the submitter in its own code, after its imports: the
# interpreter and its library may live where the submitter cannot read (/root). Each
# path's answer: null (opened), {"error": strerror}, or {"mode": st_mode} when the
# open said ENXIO (a FIFO without a reader, a socket, a device with none behind it).
_OPENER_SOURCE = """
import array, errno, json, os, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
uid, gid = int(sys.argv[2]), int(sys.argv[3])
groups = [int(g) for g in sys.argv[4].split(",") if g]
flags = int(sys.argv[5])
os.setgroups(sorted({gid, *groups}))
os.setgid(gid)
os.setuid(uid)
os.umask(0o022)
fds, answers = [], []
for path in sys.argv[6:]:
    try:
        fds.append(os.open(path, flags, 0o666))
        answers.append(None)
    except OSError as err:
        answer = {"error": err.strerror or str(err)}
        if err.errno == errno.ENXIO:
            try:
                answer = {"mode": os.stat(path).st_mode}
            except OSError:
                pass
        answers.append(answer)
sock.sendmsg(
    [json.dumps(answers).encode()],
    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))],
)
"""


class OpenError(Exception):
    """The output file could not be opened as the submitter; the message says why."""


class Submitter:
    """Whom the files are opened as: uid, primary gid and the other groups."""

    __slots__ = ("gid", "groups", "uid")

    def __init__(self, uid: int, gid: int, groups: Sequence[int] = ()) -> None:
        self.uid = uid
        self.gid = gid
        self.groups = tuple(groups)


class OutputFiles:
    """The open files of one attempt: `out` takes stdout, `err` stderr.

    They are the same descriptor when stderr goes with stdout. The caller closes them
    (close()).
    """

    __slots__ = ("err", "err_path", "out", "out_path")

    def __init__(self, out: int, err: int, out_path: str, err_path: str) -> None:
        self.out = out
        self.err = err
        self.out_path = out_path
        self.err_path = err_path

    @property
    def apart(self) -> bool:
        return self.err != self.out

    def close(self) -> None:
        for fd in {self.out, self.err}:
            with contextlib.suppress(OSError):
                os.close(fd)


def planned(job: Job, attempt: int, node: str) -> dict[str, object] | None:
    """What open_planned opens for this attempt of `job` on `node`: None when it has no file.

    {"job": id, "paths": [stdout's, stderr's when apart], "truncate": whether this
    attempt starts them afresh (outputs.appends)}: JSON, for a shim in another process.
    """
    paths = outputs.output_paths(job, node)
    if paths is None:
        return None
    out_path, err_path = paths
    return {
        "job": job.id,
        "paths": [out_path] if err_path == out_path else [out_path, err_path],
        "truncate": not outputs.appends(job, attempt),
    }


def open_planned(
    plan: Mapping[str, object], run_dir: Path, as_user: Submitter | None
) -> OutputFiles:
    """Open what `plan` (planned's) names, as `as_user` (None: as this process's user).

    The first open of an attempt truncates them (unless the plan says not to) and
    records where the attempt starts in each; a later open (a follower started again)
    appends and cuts each file back to that start. Raises OpenError.
    """
    paths = [str(p) for p in plan["paths"]]  # type: ignore[attr-defined]
    offsets_file = run_dir / OFFSETS_FILE
    recorded = _read_offsets(offsets_file)
    flags = _OPEN_FLAGS
    if recorded is None and plan.get("truncate"):
        flags |= os.O_TRUNC
    fds = _open_as(as_user, paths, flags)
    files = OutputFiles(fds[0], fds[-1], paths[0], paths[-1])
    try:
        if recorded is None:
            sizes = [_size(fd) for fd in fds]
            offsets_file.write_text(json.dumps(sizes))
        else:
            for fd, offset in zip(fds, recorded, strict=False):
                if _size(fd) > offset:
                    with contextlib.suppress(OSError):  # /dev/null
                        os.ftruncate(fd, offset)
    except OSError as err:
        files.close()
        raise OpenError(f"cannot record where the output starts: {err.strerror}") from err
    return files


def open_outputs(job: Job, attempt: int, node: str, run_dir: Path) -> OutputFiles | None:
    """The attempt's output files, opened by the daemon as its submitter; None if none.

    The daemon's opener is a container's log follower, never its loop. Raises
    OpenError (see open_planned).
    """
    plan = planned(job, attempt, node)
    if plan is None:
        return None
    return open_planned(plan, run_dir, _daemons_identity_for(job.uid))


def open_or_say(
    job: Job, attempt: int, node: str, run_dir: Path, say: Callable[[bytes], object]
) -> OutputFiles | None:
    """open_outputs, or None when that fails and the job's output goes to the head's log only.

    The job then runs on, and `say` (a write to that log) tells why, once (Slurm loses
    such output silently).
    """
    try:
        return open_outputs(job, attempt, node, run_dir)
    except OpenError as err:
        with contextlib.suppress(OSError):
            say(not_written_note(job.id, str(err)).encode())
        return None


def not_written_note(job_id: int, why: str) -> str:
    return (
        f"[gbatch: the output file is not written ({why}); this attempt's output is in "
        f"`gbatch logs {job_id}` only]\n"
    )


def _refusal(path: str, info: os.stat_result) -> str | None:
    is_devnull = info.st_rdev == os.stat(os.devnull).st_rdev
    return outputs.refusal(path, info.st_mode, is_devnull)


def _size(fd: int) -> int:
    return os.fstat(fd).st_size


def _read_offsets(path: Path) -> list[int] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return [int(n) for n in data] if isinstance(data, list) else None


def _daemons_identity_for(uid: int) -> Submitter | None:
    """None when this process is the user `uid`, else whom to become. OpenError when
    it cannot: a daemon that is not root, or a uid unknown here."""
    if uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise OpenError(f"cannot open it as uid {uid}: only a root daemon acts as other users")
    from gbatch.site.policy import submitter_identity  # deferred: the daemon's alone

    try:
        run_as = submitter_identity(uid)
    except ValueError as err:
        raise OpenError(str(err)) from err
    return Submitter(run_as.uid, run_as.gid, run_as.groups)


def _open_as(as_user: Submitter | None, paths: Sequence[str], flags: int) -> list[int]:
    """`paths` opened with `flags` by this process (`as_user` None) or, as root, by a
    child that becomes `as_user`; each checked to take output, then made blocking.
    Raises OpenError, every descriptor closed."""
    if as_user is None:
        fds: list[int] = []
        try:
            for path in paths:
                try:
                    fds.append(os.open(path, flags, FILE_MODE))
                except OSError as err:
                    refused = _refusal_after_enxio(err, path)
                    if refused is not None:
                        raise OpenError(refused) from None
                    raise OpenError(f"cannot open {path}: {err.strerror}") from err
            return _made_blocking(fds, paths)
        except OpenError:
            _close_all(fds)
            raise
    return _made_blocking(_open_in_child(as_user, paths, flags), paths)


def _refusal_after_enxio(err: OSError, path: str) -> str | None:
    """Why `path` was refused, when its open said ENXIO: a FIFO without a reader, a
    socket, a device with nothing behind it."""
    if err.errno != errno.ENXIO:
        return None
    try:
        return _refusal(path, os.stat(path))
    except OSError:
        return None


def _made_blocking(fds: list[int], paths: Sequence[str]) -> list[int]:
    """`fds` once each is a regular file or /dev/null, O_NONBLOCK cleared; OpenError
    (all closed) for the first that is not."""
    try:
        for fd, path in zip(fds, paths, strict=True):
            refused = _refusal(path, os.fstat(fd))
            if refused is not None:
                raise OpenError(refused)
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except OpenError:
        _close_all(fds)
        raise
    except OSError as err:
        _close_all(fds)
        raise OpenError(f"cannot open {paths[0]}: {err.strerror}") from err
    return fds


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _open_in_child(as_user: Submitter, paths: Sequence[str], flags: int) -> list[int]:
    import socket  # deferred: its import costs a plain shim's start more than the rest

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with ours:
        try:
            with theirs:
                child = subprocess.Popen(
                    [
                        sys.executable,
                        "-I",
                        "-S",
                        "-c",
                        _OPENER_SOURCE,
                        str(theirs.fileno()),
                        str(as_user.uid),
                        str(as_user.gid),
                        ",".join(str(g) for g in as_user.groups),
                        str(flags & ~os.O_CLOEXEC),
                        *paths,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    pass_fds=(theirs.fileno(),),
                    cwd="/",
                )
        except OSError as err:
            raise OpenError(f"cannot start the opener: {err.strerror}") from err
        try:
            _, stderr = child.communicate(timeout=OPEN_TIMEOUT)
        except subprocess.TimeoutExpired as err:
            child.kill()
            child.wait()
            raise OpenError(
                f"opening it as the submitter did not finish in {OPEN_TIMEOUT:g} s"
            ) from err
        ours.setblocking(False)
        try:
            # Close-on-exec from the start: another thread may be starting a job.
            data, fds, _, _ = socket.recv_fds(ours, 65536, len(paths), socket.MSG_CMSG_CLOEXEC)
        except BlockingIOError:
            problem = stderr.decode(errors="replace").strip().splitlines()
            raise OpenError(
                f"cannot open {paths[0]} as the submitter" + (f": {problem[-1]}" if problem else "")
            ) from None
    answers = json.loads(data)
    failed = [(path, why) for path, why in zip(paths, answers, strict=True) if why is not None]
    if failed:
        _close_all(fds)
        path, why = failed[0]
        if "mode" in why:
            refused = outputs.refusal(path, int(why["mode"]), is_devnull=False)
            raise OpenError(refused or f"cannot open {path}: not a regular file")
        raise OpenError(f"cannot open {path}: {why['error']}")
    return list(fds)
