"""`gbatch`: one program, Slurm's commands as sub-commands.

main() maps every error to an exit status and a one-line message; the commands do
the work and handle none. Only the command that runs is imported beyond its parser,
so `gbatch squeue` never pays for yaml, textual or paramiko.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, NoReturn, assert_never

from gbatch import __version__
from gbatch.cli import (
    daemon,
    logs,
    node,
    sacct,
    sbatch,
    scancel,
    scontrol,
    seff,
    sinfo,
    sprio,
    squeue,
    sreport,
    sshare,
    tui,
)
from gbatch.cli.context import Context
from gbatch.cli.exits import CliError, Exit
from gbatch.cli.suggest import did_you_mean, option_strings
from gbatch.client import DaemonUnavailable, ReplyTimeout, RequestFailed
from gbatch.config import SYSTEM_SOCKET

if TYPE_CHECKING:
    from gbatch.wire import ErrorKind

COMMANDS = (
    sbatch,
    squeue,
    scancel,
    sinfo,
    sacct,
    sshare,
    sprio,
    seff,
    sreport,
    scontrol,
    logs,
    tui,
    node,
    daemon,
)


EPILOG = """\
exit status: 0 ok, 1 failed (e.g. unknown job), 2 bad input (nothing queued),
3 no daemon, 4 permission denied, 5 a needed component is missing, 70 internal error.
Files live under $GBATCH_HOME (default: the user's data dir)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (what is wrong, and where the help is)
    instead of the usage block and the message under it. Sub-command parsers are made
    of this class too (add_subparsers uses the parent's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # No prefix matching: `--gpu 1` read as `--gpus 1` hid typos (suggested instead).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(Exit.USAGE, f"{self.prog}: error: {message}. See `{self.prog} --help`\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # A mistyped sub-command (`gbatch squeu`): name the nearest, not all fourteen.
        choices = action.choices
        if choices is not None and value not in choices:
            hint = did_you_mean(str(value), [str(c) for c in choices])
            if hint:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint}")
        super()._check_value(action, value)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="gbatch",
        description="Queue GPU jobs on a lab's servers, Slurm style.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gbatch {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    # An explicit prog spares argparse a HelpFormatter (and shutil) at every start.
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", prog="gbatch")
    commands.required = True
    for module in COMMANDS:
        module.add_parser(commands)
    return parser


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The sub-command's own parser (whose options a typo is compared with)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    words = _command_words(sys.argv[1:] if argv is None else argv)
    args, unknown = parser.parse_known_args(words)
    prog = f"gbatch {args.command}"
    if unknown:  # named after the command they were given to, not plain `gbatch`
        hint = did_you_mean(unknown[0], option_strings(_command_parser(parser, args.command)))
        message = f"unrecognized arguments: {' '.join(unknown)}{hint}. See `{prog} --help`"
        return _fail(prog, message, Exit.USAGE)
    try:
        status: int = args.run(args, Context())
        return status
    except CliError as err:
        return _fail(prog, err.message, err.status)
    except DaemonUnavailable as err:
        # The lab's system daemon is the admins' to start (systemd), not the user's.
        system = str(err.socket_path) == str(SYSTEM_SOCKET)
        hint = "Ask an admin to start gbatchd" if system else "Start one with `gbatch daemon start`"
        return _fail(prog, f"{err}. {hint}", Exit.NO_DAEMON)
    except RequestFailed as err:
        return _fail(prog, err.message, exit_status(err.kind))
    except ReplyTimeout as err:
        return _fail(prog, str(err), Exit.UNAVAILABLE)
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:
        sys.stderr.close()  # `gbatch squeue | head`: the reader left, say nothing
        return Exit.OK
    except Exception as err:  # the entry point: a bug, not the user's mistake
        if args.debug:
            raise
        return _fail(
            prog, f"internal error: {err!r}. Rerun with --debug and report it", Exit.INTERNAL
        )


def _command_words(argv: list[str]) -> list[str]:
    """argv with squeue's getopt-style values joined (squeue.join_option_values); the
    command is the first word that is not an option of gbatch itself."""
    for index, word in enumerate(argv):
        if not word.startswith("-"):
            if word == "squeue":
                return [*argv[: index + 1], *squeue.join_option_values(argv[index + 1 :])]
            return argv
    return argv


def _fail(prog: str, message: str, status: Exit) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def exit_status(kind: ErrorKind) -> Exit:
    """The exit status of a request the daemon refused: one for every kind (mypy
    checks that none is left out)."""
    match kind:
        case "invalid":  # bad input, or a request of the wrong shape
            return Exit.USAGE
        case "not_found":
            return Exit.FAILED
        case "permission":
            return Exit.PERMISSION
        case "unavailable":
            return Exit.UNAVAILABLE
        case "internal":
            return Exit.INTERNAL
        case _:
            assert_never(kind)


if __name__ == "__main__":
    sys.exit(main())
