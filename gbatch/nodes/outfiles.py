"""A job's output files (sbatch -o/-e), opened with its submitter's rights.

The daemon may be root; the files are the user's, in the user's directories. So when
the daemon is not the submitter, a short-lived child process that is the submitter
(uid, gid, groups, umask 022) opens them and hands the open descriptors back over a
socketpair (SCM_RIGHTS): every check the kernel makes on the path (directories,
symlinks, an existing file's mode) is made against the user. When the daemon is the
submitter, it opens them itself.

Each attempt records in its run directory how long its files were when it began
(`out_offset`), so that a container's output replayed after a daemon restart is cut
back to there first, as the head's log is (gbatch.nodes.joblog), and never doubled.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gbatch.core import outputs
from gbatch.core.model import Job
from gbatch.site.policy import RunAs, submitter_identity

OPEN_TIMEOUT = 30.0  # seconds for the opener child
OFFSETS_FILE = "out_offset"
FILE_MODE = 0o666  # less the umask: 0644, as Slurm's files

# Started as root and switched to the submitter in its own code, after its imports: the
# interpreter and its library may live where the submitter cannot read (/root).
_OPENER_SOURCE = """
import array, json, os, socket, sys
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
        answers.append(err.strerror or str(err))
sock.sendmsg(
    [json.dumps(answers).encode()],
    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))],
)
"""


class OpenError(Exception):
    """The output file could not be opened as the submitter; the message says why."""


@dataclass
class OutputFiles:
    """The open files of one attempt: `out` takes stdout, `err` stderr.

    They are the same descriptor when stderr goes with stdout. The caller closes them
    (close()).
    """

    out: int
    err: int
    out_path: str
    err_path: str

    @property
    def apart(self) -> bool:
        return self.err != self.out

    def close(self) -> None:
        for fd in {self.out, self.err}:
            with contextlib.suppress(OSError):
                os.close(fd)


def open_outputs(job: Job, attempt: int, node: str, run_dir: Path) -> OutputFiles | None:
    """Open the attempt's output files, as its submitter: None when the job has none.

    The first open of an attempt truncates them (unless they append: outputs.appends)
    and records where the attempt starts in each; a later open (a daemon that started
    again) appends and cuts each file back to that start. Raises OpenError."""
    paths = outputs.output_paths(job, node)
    if paths is None:
        return None
    out_path, err_path = paths
    offsets_file = run_dir / OFFSETS_FILE
    recorded = _read_offsets(offsets_file)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    if recorded is None and not outputs.appends(job, attempt):
        flags |= os.O_TRUNC
    wanted = [out_path] if err_path == out_path else [out_path, err_path]
    fds = _open_as(job.uid, wanted, flags)
    files = OutputFiles(fds[0], fds[-1], out_path, err_path)
    try:
        if recorded is None:
            sizes = [_size(fd) for fd in fds]
            offsets_file.write_text(json.dumps(sizes))
        else:
            for fd, offset in zip(fds, recorded, strict=False):
                if _size(fd) > offset:
                    with contextlib.suppress(OSError):  # /dev/null, a pipe
                        os.ftruncate(fd, offset)
    except OSError as err:
        files.close()
        raise OpenError(f"cannot record where the output starts: {err.strerror}") from err
    return files


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


def _size(fd: int) -> int:
    return os.fstat(fd).st_size


def _read_offsets(path: Path) -> list[int] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return [int(n) for n in data] if isinstance(data, list) else None


def _open_as(uid: int, paths: list[str], flags: int) -> list[int]:
    """`paths` opened with `flags` by the user `uid`: in this process when it is that
    user, else (as root) in a child that becomes them. Raises OpenError."""
    if uid == os.geteuid():
        fds: list[int] = []
        for path in paths:
            try:
                fds.append(os.open(path, flags, FILE_MODE))
            except OSError as err:
                for fd in fds:
                    os.close(fd)
                raise OpenError(f"cannot open {path}: {err.strerror}") from err
        return fds
    if os.geteuid() != 0:
        raise OpenError(
            f"cannot open {paths[0]} as uid {uid}: only a root daemon acts as other users"
        )
    try:
        run_as = submitter_identity(uid)
    except ValueError as err:
        raise OpenError(str(err)) from err
    return _open_in_child(run_as, paths, flags)


def _open_in_child(run_as: RunAs, paths: list[str], flags: int) -> list[int]:
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
                        str(run_as.uid),
                        str(run_as.gid),
                        ",".join(str(g) for g in run_as.groups),
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
            raise OpenError("opening it as the submitter did not finish in time") from err
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
        for fd in fds:
            os.close(fd)
        path, why = failed[0]
        raise OpenError(f"cannot open {path}: {why}")
    return list(fds)
