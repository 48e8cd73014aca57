"""The supervisor of one bare-process run: `python -m gbatch.shim RUN_DIR -- ARGV...`.

The daemon starts the shim in a session of its own, so the run outlives the daemon
(a restart, a crash). The shim starts the job in a new process group, records that
group in RUN_DIR/pids.json so the daemon can signal the whole group, waits, and
writes RUN_DIR/exit.json atomically: the daemon learns the exit status from the file,
whether or not it is the shim's parent any more. stdlib only; it is on the start path
of every job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def write_atomically(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(data, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m gbatch.shim RUN_DIR -- ARGV...", file=sys.stderr)
        return 2
    run_dir = Path(argv[0])
    command = argv[2:]
    try:
        child = subprocess.Popen(command, process_group=0)
    except OSError as err:
        # Goes to the job's log, which is this process's stdout/stderr.
        print(f"gbatch: cannot start {command[0]!r}: {err.strerror}", file=sys.stderr, flush=True)
        code = 127 if isinstance(err, FileNotFoundError) else 126
        write_atomically(
            run_dir / "exit.json", {"exit_code": code, "signal": 0, "end_time": time.time()}
        )
        return code
    write_atomically(run_dir / "pids.json", {"shim": os.getpid(), "pgid": child.pid})
    # The daemon signals the job's group, not the shim; ignore stray terminal
    # signals so the shim always lives to record the exit status.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    returncode = child.wait()
    exit_code, killed_by = (returncode, 0) if returncode >= 0 else (0, -returncode)
    write_atomically(
        run_dir / "exit.json",
        {"exit_code": exit_code, "signal": killed_by, "end_time": time.time()},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
