"""gbatch daemon start|stop|status|run: the head daemon's life cycle."""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
import time

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit
from gbatch.protocol.client import Client, DaemonUnavailable

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

HELP = COMMANDS["daemon"]
START_TIMEOUT = 20.0


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "daemon", help=HELP, description=HELP + ". Jobs keep running while it is stopped."
    )
    p.add_argument(
        "action",
        choices=("start", "stop", "status", "run"),
        help="start: in the background, returns once it answers; run: in the foreground "
        "(systemd's way). Either way its log and audit lines are in $GBATCH_HOME/gbatchd.log; "
        "under run, on stderr too",
    )
    p.set_defaults(run=run)


def _ping(ctx: Context) -> dict[str, Any] | None:
    from gbatch.protocol import requests

    try:
        with Client(ctx.paths.socket, timeout=5) as client:
            return client.call(requests.Ping())
    except DaemonUnavailable:
        return None


def run(args: argparse.Namespace, ctx: Context) -> int:
    action: str = args.action
    if action == "run":
        return _run_foreground(ctx)
    if action == "start":
        return _start(ctx)
    if action == "stop":
        return _stop(ctx)
    status = _ping(ctx)
    if status is None:
        raise CliError(
            f"not running (no answer at {ctx.paths.socket}). Start it with `gbatch daemon start`",
            Exit.NO_DAEMON,
        )
    active = ", ".join(f"{n} {s}" for s, n in sorted(status["active"].items())) or "no jobs"
    print(f"gbatchd {status['version']} running, pid {status['pid']}, home {status['home']}")
    print(f"active jobs: {active}")
    for node in status["nodes"]:
        print(
            f"node {node['name']}: {node['state']}, {len(node['gpus'])} GPUs"
            + (f" ({node['reason']})" if node["reason"] else "")
        )
    return Exit.OK


def _run_foreground(ctx: Context) -> int:
    from gbatch.head.server import AlreadyRunning, LogUnwritable, log_to_file_and_stderr, serve
    from gbatch.nodes.inventory import InventoryError, find_inventory, load_inventory
    from gbatch.site.config import ConfigError, check_private_home, load_config

    try:
        check_private_home(ctx.paths.home)  # before the log is made in it
        ctx.paths.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_to_file_and_stderr(ctx.paths.daemon_log, os.environ)
        # A fatal signal (SIGSEGV, SIGBUS: a C library's fault) ends the daemon with
        # no line of its own: its threads' stacks go to stderr, which `daemon start`
        # points at gbatchd.log (the journal under systemd), so the death has a cause.
        faulthandler.enable()
        config = load_config(ctx.paths, os.environ)
        found = find_inventory(ctx.paths.home, os.environ)
        inventory = load_inventory(found, home=ctx.paths.home) if found else None
        serve(ctx.paths, config, inventory)
    except (ConfigError, InventoryError) as err:
        raise CliError(str(err), Exit.USAGE) from err
    except AlreadyRunning as err:
        raise CliError(f"{err}. Stop it with `gbatch daemon stop`", Exit.FAILED) from err
    except LogUnwritable as err:
        raise CliError(str(err), Exit.FAILED) from err
    return Exit.OK


def _start(ctx: Context) -> int:
    import subprocess  # deferred: the other commands never spawn processes

    # deferred: config brings policy, limits and spec (slow imports); status and stop
    # need none
    from gbatch.site.config import ConfigError, check_private_home, make_private

    status = _ping(ctx)
    if status is not None:
        print(f"gbatchd already running (pid {status['pid']}), socket {ctx.paths.socket}")
        return Exit.OK
    try:
        check_private_home(ctx.paths.home)
    except ConfigError as err:
        raise CliError(str(err), Exit.USAGE) from err
    ctx.paths.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    make_private(ctx.paths.daemon_log)  # audit lines name users and jobs
    with open(ctx.paths.daemon_log, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "gbatch", "daemon", "run"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        status = _ping(ctx)
        if status is not None:
            print(f"gbatchd started (pid {status['pid']}), socket {ctx.paths.socket}")
            return Exit.OK
        if process.poll() is not None:
            tail = ctx.paths.daemon_log.read_text(errors="replace").strip().splitlines()[-1:]
            raise CliError(
                f"gbatchd exited at start: {' '.join(tail) or 'no output'}. "
                f"See {ctx.paths.daemon_log}",
                Exit.FAILED,
            )
        time.sleep(0.05)
    raise CliError(
        f"gbatchd did not answer within {START_TIMEOUT:.0f} s. See {ctx.paths.daemon_log}",
        Exit.FAILED,
    )


def _stop(ctx: Context) -> int:
    from gbatch.protocol import requests

    try:
        with Client(ctx.paths.socket, timeout=5) as client:
            pid = client.call(requests.Shutdown())["pid"]
    except DaemonUnavailable:
        print("gbatchd is not running")
        return Exit.OK
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if not ctx.paths.socket.exists() and not _alive(pid):
            print(f"gbatchd stopped (pid {pid}); running jobs carry on")
            return Exit.OK
        time.sleep(0.05)
    raise CliError(f"gbatchd (pid {pid}) did not stop within {START_TIMEOUT:.0f} s", Exit.FAILED)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
