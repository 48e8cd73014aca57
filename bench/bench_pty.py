"""Keystroke echo through `gbatch srun --pty`, beside a plain local pseudo-terminal's.

Run: `.venv/bin/python bench/bench_pty.py [--keys N] [--fleet]`.

One daemon (2 simulated GPUs) in a temp GBATCH_HOME. `gbatch srun --pty cat` runs on a
pseudo-terminal of this process (as a user's terminal); each keystroke is one byte
written to it, timed until its echo is read back. The echo is made by the step's own
terminal on the node: the byte goes srun -> socket -> step shim -> the step's terminal,
and its echo back the same way. Beside it, in the same run, the same keystrokes to a
plain `cat` on a local pseudo-terminal (the floor: a terminal's own echo).

With --fleet, also through a GPU host reached over SSH: one host container of the test
fleet (tests/integration/hosts.py: its own sshd, the agent, the machine's docker engine),
a daemon whose inventory holds it, and `gbatch srun --pty` into a job's container there
(srun -> socket -> gbatchd's relay -> SSH channel with a pty -> docker exec -t -> the
step's terminal); beside it, in the same run, `ssh -t` to the same host running `cat`
(OpenSSH's own round trip, the floor for anything over SSH). Needs docker and the
gbatch-host and gbatch-test images.

Goals (issue 31): median and p99 <= 20 ms on the local node, <= 50 ms through a fleet
host. Prints median, p90, p99.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml
from common import GBATCH, REPO, machine_note, median, percentile, python_env, running_daemon

GOAL_MS = 20.0
FLEET_GOAL_MS = 50.0


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


def report(what: str, samples: list[float], goal: float | None = GOAL_MS) -> None:
    ms = [s * 1000 for s in samples]
    verdict = ""
    if goal is not None:
        met = median(ms) <= goal and percentile(ms, 0.99) <= goal
        verdict = f"goal <= {goal:g} ms: {'met' if met else 'MISSED'}; "
    print(
        f"{what}: median {median(ms):.2f} ms, p90 {percentile(ms, 0.9):.2f} ms, "
        f"p99 {percentile(ms, 0.99):.2f} ms ({verdict}{len(ms)} keystrokes)",
        flush=True,
    )


@contextlib.contextmanager
def fleet_daemon() -> Iterator[tuple[dict[str, str], object]]:
    """A daemon whose only node is one host container (the test fleet's); yields the
    CLI's environment and the host (tests/integration/hosts.py's Host)."""
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    from hosts import start_host  # deferred: testcontainers, only for --fleet

    base = Path(tempfile.mkdtemp(prefix="gb-pty-", dir="/tmp"))
    host = start_host(base, "gpu01")
    try:
        agent_dir = host.share / "agent"
        agent_dir.mkdir()
        shutil.copy(REPO / "agent" / "gbatch_agent.py", agent_dir / "gbatch_agent.py")
        simulation = host.share / "gpus.json"
        simulation.write_text(json.dumps({"gpus": [{}, {}]}))
        node = {
            "name": "gpu01",
            "host": "127.0.0.1",
            "port": host.port,
            "user": host.user,
            "identity_file": str(host.client_key),
            "agent_dir": str(agent_dir),
            "agent_python": host.agent_python,
            "simulation_file": str(simulation),
        }
        inventory = base / "inventory.yaml"
        inventory.write_text(
            yaml.safe_dump({"known_hosts": str(host.known_hosts), "nodes": [node]})
        )
        home = base / "home"
        home.mkdir(mode=0o700)
        env = python_env(home)
        env["GBATCH_INVENTORY"] = str(inventory)
        subprocess.run(
            [str(GBATCH), "daemon", "start"], env=env, check=True, stdout=subprocess.DEVNULL
        )
        try:
            _wait_for_gpus(env)
            yield env, host
        finally:
            subprocess.run([str(GBATCH), "daemon", "stop"], env=env, stdout=subprocess.DEVNULL)
    finally:
        host.stop()
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=gbatch.node=gpu01"],
            capture_output=True,
            text=True,
        ).stdout.split()
        if listed:
            subprocess.run(["docker", "rm", "-f", *listed], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def _wait_for_gpus(env: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(
            [str(GBATCH), "sinfo", "--json"], env=env, capture_output=True, text=True
        ).stdout
        with contextlib.suppress(ValueError, KeyError):
            if any(n["gpus"] and n["state"] == "idle" for n in json.loads(out)["nodes"]):
                return
        time.sleep(0.2)
    raise TimeoutError("the host did not report its GPUs within 60 s")


def ssh_argv(host: object) -> list[str]:
    """`ssh -t` to the host as gbatch reaches it: its key, its known_hosts, no config."""
    return [
        "ssh", "-t", "-F", "/dev/null", "-p", str(host.port),  # type: ignore[attr-defined]
        "-i", str(host.client_key),  # type: ignore[attr-defined]
        "-o", f"UserKnownHostsFile={host.known_hosts}",  # type: ignore[attr-defined]
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
        f"{host.user}@127.0.0.1",  # type: ignore[attr-defined]
    ]  # fmt: skip


def fleet(keys: int) -> None:
    """Keystrokes through a fleet host: gbatch srun --pty there, and ssh -t cat beside it."""
    with fleet_daemon() as (env, host):
        argv = [
            str(GBATCH), "srun", "--image", "gbatch-test:latest", "--pty",
            "sh", "-c", "echo ready; exec cat",
        ]  # fmt: skip
        through = echo_times(argv, env, keys, b"ready")
        plain_ssh = echo_times(
            [*ssh_argv(host), "echo ready; exec cat"], dict(os.environ), keys, b"ready"
        )
    report(
        "ssh -t host cat (the same host, same run): write a byte, read its echo", plain_ssh, None
    )
    report(
        "gbatch srun --pty through a fleet host: write a byte, read its echo",
        through,
        FLEET_GOAL_MS,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1000, help="keystrokes per terminal")
    parser.add_argument(
        "--fleet", action="store_true", help="also through a host container over SSH (docker)"
    )
    args = parser.parse_args()
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
    if args.fleet:
        fleet(args.keys)
    return 0


if __name__ == "__main__":
    sys.exit(main())
