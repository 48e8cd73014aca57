"""Time gbatch.nodes.ssh against a local OpenSSH server (tests/integration/sshd.py).

Run from the repository root: `.venv/bin/python bench/bench_ssh.py [--runs N] [--quick]`. Needs
/usr/sbin/sshd (`.ci/setup-sshd.sh`). Prints one line per figure:
- `run(["true"])` on an open connection: one exec channel per command, what each
  dispatcher step pays per remote call (goal <= 5 ms). Measured twice: as the login
  shell really starts here, and with the shell's rc file skipped. sshd runs every
  command through the user's login shell, and bash sources ~/.bashrc when started by
  sshd; an rc file that runs programs (`eval "$(pyenv init -)"`) then costs every
  command its run time. The second figure (sshd `SetEnv SHLVL=1`, which makes bash skip
  that file) is the cost of gbatch, paramiko and sshd themselves;
- `connect()`: TCP, key exchange, host-key check and public-key authentication;
- `put_bytes` of 64 KiB (mkdir -p, SFTP write, rename), for scale.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import machine_note, quick_help, report_ms

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration"))

from sshd import start_sshd

from gbatch.nodes.ssh import SshConnection, SshTarget

RUN_GOAL_MS = 5.0
TIMEOUT_S = 30.0
SKIP_SHELL_RC = "SetEnv SHLVL=1\n"  # bash sources ~/.bashrc under sshd only at level 1


def time_runs(
    tmp: Path, extra_config: str, runs: int, connects: int, puts: int = 20
) -> dict[str, list[float]]:
    """Samples per figure against one fresh sshd."""
    tmp.mkdir()
    server = start_sshd(tmp, extra_config)
    try:
        target = SshTarget(
            name="bench",
            host="127.0.0.1",
            port=server.port,
            user=server.user,
            identity_file=server.client_key,
            known_hosts=server.known_hosts,
        )
        samples: dict[str, list[float]] = {"connect": [], "run": [], "put": []}
        for _ in range(connects):
            connection = SshConnection(target)
            start = time.perf_counter()
            connection.connect()
            samples["connect"].append(time.perf_counter() - start)
            connection.close()

        with SshConnection(target) as connection:
            connection.connect()
            for _ in range(5):  # warm-up: the first channel pays for sshd's session set-up
                connection.run(["true"], timeout=TIMEOUT_S)
            for _ in range(runs):
                start = time.perf_counter()
                result = connection.run(["true"], timeout=TIMEOUT_S)
                samples["run"].append(time.perf_counter() - start)
                if result.exit_status != 0:
                    raise RuntimeError(f"`true` exited {result.exit_status}")
            destination = str(tmp / "put" / "payload")
            for _ in range(puts):
                start = time.perf_counter()
                connection.put_bytes(b"x" * 65536, destination, 0o600, timeout=TIMEOUT_S)
                samples["put"].append(time.perf_counter() - start)
        return samples
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="commands to time (default 200)")
    parser.add_argument("--connects", type=int, default=20, help="connects to time (default 20)")
    parser.add_argument(
        "--quick", action="store_true", help=quick_help("3 commands, 2 connects, 2 puts")
    )
    args = parser.parse_args()
    puts = 20
    if args.quick:
        args.runs, args.connects, puts = 3, 2, 2

    print(machine_note())
    with tempfile.TemporaryDirectory(prefix="gbatch-bench-ssh-") as tmp:
        plain = time_runs(Path(tmp) / "plain", "", args.runs, args.connects, puts)
        bare = time_runs(Path(tmp) / "bare", SKIP_SHELL_RC, args.runs, 0, puts)

    report_ms('run(["true"]), open connection, shell rc skipped', bare["run"], RUN_GOAL_MS)
    report_ms('run(["true"]), open connection, login shell as is', plain["run"], RUN_GOAL_MS)
    report_ms("connect() (handshake + host key + auth)", plain["connect"])
    report_ms("put_bytes 64 KiB (mkdir -p + SFTP + rename), shell rc skipped", bare["put"])
    report_ms("put_bytes 64 KiB (mkdir -p + SFTP + rename), login shell as is", plain["put"])


if __name__ == "__main__":
    main()
