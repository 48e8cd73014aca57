"""Keystroke echo through `gbatch srun --pty`, beside a plain local pseudo-terminal's.

Run: `.venv/bin/python bench/bench_pty.py [--keys N] [--quick]`.

One daemon (2 simulated GPUs) in a temp GBATCH_HOME. `gbatch srun --pty cat` runs on a
pseudo-terminal of this process (as a user's terminal); each keystroke is one byte
written to it, timed until its echo is read back. The echo is made by the step's own
terminal on the node: the byte goes srun -> socket -> step shim -> the step's terminal,
and its echo back the same way. Beside it, in the same run, the same keystrokes to a
plain `cat` on a local pseudo-terminal (the floor: a terminal's own echo).

Goal (issue 31): median and p99 <= 20 ms on the local node. Prints median, p90, p99.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pty
import select
import signal
import sys
import time

from common import (
    GBATCH,
    machine_note,
    median,
    percentile,
    python_env,
    quick_help,
    running_daemon,
)

GOAL_MS = 20.0


def echo_times(argv: list[str], env: dict[str, str], keys: int, ready: bytes) -> list[float]:
    """Seconds from each of `keys` bytes written to a terminal running `argv` until its
    echo came back; `ready`: what the terminal shows once it takes keys."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env)
    try:
        _read_until(fd, ready, 60.0)
        samples = []
        for i in range(keys):
            key = b"abcdefghijklmnopqrstuvwxyz"[i % 26 : i % 26 + 1]
            began = time.perf_counter()
            os.write(fd, key)
            _read_until(fd, key, 10.0)
            samples.append(time.perf_counter() - began)
            if i % 60 == 59:  # a line now and then: cat's line buffer stays short
                os.write(fd, b"\r")
                _read_until(fd, b"\n", 10.0)
        os.write(fd, b"\r\x04")  # EOF at a line's start: cat ends, and srun with it
        return samples
    finally:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        os.close(fd)


def _read_until(fd: int, wanted: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no {wanted!r} on the terminal within {timeout:g} s: {seen!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            seen += os.read(fd, 4096)
    return seen


def report(what: str, samples: list[float]) -> None:
    ms = [s * 1000 for s in samples]
    verdict = "met" if median(ms) <= GOAL_MS and percentile(ms, 0.99) <= GOAL_MS else "MISSED"
    print(
        f"{what}: median {median(ms):.2f} ms, p90 {percentile(ms, 0.9):.2f} ms, "
        f"p99 {percentile(ms, 0.99):.2f} ms (goal <= {GOAL_MS:g} ms: {verdict}; "
        f"{len(ms)} keystrokes)",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000, help="keystrokes per terminal")
    parser.add_argument("--quick", action="store_true", help=quick_help("20 keystrokes"))
    args = parser.parse_args()
    if args.quick:
        args.keys = 20
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print(machine_note())
    plain = echo_times(["cat"], dict(os.environ), args.keys, b"")
    with running_daemon() as home:
        env = python_env(home)
        # The step's terminal says it is ready with what stty prints before cat starts.
        argv = [str(GBATCH), "srun", "--pty", "sh", "-c", "echo ready; exec cat"]
        through = echo_times(argv, env, args.keys, b"ready")
    report("plain local pty: write a byte, read its echo", plain)
    report("gbatch srun --pty (local node): write a byte, read its echo", through)
    return 0


if __name__ == "__main__":
    sys.exit(main())
