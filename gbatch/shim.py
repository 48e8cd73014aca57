"""The supervisor of one bare-process run: `python -m gbatch.shim RUN_DIR -- ARGV...`.

The daemon starts the shim in a session of its own, so the run outlives the daemon
(a restart, a crash), with its stdout and stderr on the job's log. The shim starts
the job in a new process group, records that group in RUN_DIR/pids.json so the daemon
can signal the whole group, copies the job's output into the log, waits, and writes
RUN_DIR/exit.json atomically: the daemon learns the exit status from the file,
whether or not it is the shim's parent any more.

Output goes through the shim (a pipe), not straight to the file, so a log that cannot
be written (a full disk) never makes the job's own writes fail: the shim drops that
output and the log says so (gbatch.nodes.joblog.LogWriter). A process the job leaves behind
loses its output once the job has ended. A full disk also delays pids.json and
exit.json: the shim retries them until there is room, since the daemon cannot end
the job without exit.json. stdlib and gbatch.nodes.joblog only; it is on the start path of
every job.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, MutableMapping
from functools import partial
from pathlib import Path

from gbatch.nodes.joblog import MAX_LOG_BYTES_ENV, LogWriter

# Errors that free space ends; any other error in recording the run is final.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
RETRY_SECONDS = 1.0
# After the job exits: how long its output may still take to drain from the pipe. It
# drains at once unless a process the job left behind holds the pipe open.
OUTPUT_GRACE_SECONDS = 1.0


def write_atomically(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as handle:
            json.dump(data, handle)
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
) -> None:
    """write_atomically, retried every RETRY_SECONDS while the disk is full (the
    daemon needs this file to know the run). Other errors are raised."""
    complained = False
    while True:
        before_each()
        try:
            write_atomically(path, make_data())
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


def copy_output(source: int, writer: LogWriter) -> None:
    """Copy the job's output from the pipe `source` until every writer has closed it."""
    try:
        for chunk in iter(lambda: os.read(source, 65536), b""):
            writer.write(chunk)
        writer.finish()
    finally:
        os.close(source)


def log_writer(environ: MutableMapping[str, str]) -> LogWriter:
    """The writer of the job's output to the log on this process's stdout, capped at
    the head's max_log_bytes (MAX_LOG_BYTES_ENV, taken out of `environ` so that the job
    does not inherit it) counting what the log already holds (earlier attempts)."""
    limit = environ.pop(MAX_LOG_BYTES_ENV, None)
    out = sys.stdout.fileno()
    size = os.fstat(out).st_size
    return LogWriter(partial(os.write, out), int(limit) if limit else None, size)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m gbatch.shim RUN_DIR -- ARGV...", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    command = argv[2:]
    writer = log_writer(os.environ)
    output, job_output = os.pipe()
    try:
        child = subprocess.Popen(command, process_group=0, stdout=job_output, stderr=job_output)
    except OSError as err:
        os.close(output)
        os.close(job_output)
        # Goes to the job's log, which is this process's stdout/stderr.
        _say(f"gbatch: cannot start {command[0]!r}: {err.strerror}")
        code = 127 if isinstance(err, FileNotFoundError) else 126
        failed: dict[str, object] = {"exit_code": code, "signal": 0, "end_time": time.time()}
        write_when_possible(run_dir / "exit.json", lambda: failed)
        return code
    os.close(job_output)  # the job holds it now; EOF comes when the job's side closes
    # The daemon signals the job's group, not the shim; ignore stray terminal
    # signals so the shim always lives to record the exit status.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    copier = threading.Thread(target=copy_output, args=(output, writer), daemon=True)
    copier.start()
    pids: dict[str, object] = {"shim": os.getpid(), "pgid": child.pid}
    write_when_possible(run_dir / "pids.json", lambda: pids)
    returncode = child.wait()
    end_time = time.time()
    copier.join(OUTPUT_GRACE_SECONDS)
    exit_code, killed_by = (returncode, 0) if returncode >= 0 else (0, -returncode)

    def exit_record() -> dict[str, object]:
        record: dict[str, object] = {
            "exit_code": exit_code,
            "signal": killed_by,
            "end_time": end_time,
        }
        note = writer.note()
        if note is not None:
            record["output_lost"] = note
        return record

    # While exit.json waits for space, the log may get room first: say there what
    # was lost (once the copier is done with the writer).
    finish_log = writer.finish if not copier.is_alive() else (lambda: None)
    write_when_possible(run_dir / "exit.json", exit_record, before_each=finish_log)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
