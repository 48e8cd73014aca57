"""`gbatch`: one program, Slurm's commands as sub-commands.

main() maps every error to an exit status and a one-line message; the commands do
the work and handle none. Only the command that runs is imported, and only its parser
is built: the others stand in as names with their one-line help (COMMANDS), which is
all `gbatch --help` and a mistyped command's suggestion need. Start-up is a feature
(README, Performance): `gbatch --help` imports argparse and this module alone.
"""

from __future__ import annotations

import argparse
import os
import sys

from gbatch import __version__
from gbatch.cli.exits import CliError, Exit
from gbatch.cli.suggest import did_you_mean, option_strings

TYPE_CHECKING = False  # typing's, without importing typing: 2 ms of every start-up
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from gbatch.wire import ErrorKind

# Each command's module, gbatch.cli.<name>, and its one-line help (the module's HELP,
# spelled here so that listing them imports none; a unit test keeps the two equal).
# The order is `gbatch --help`'s.
COMMANDS: dict[str, str] = {
    "sbatch": "queue a job (a job file, a batch script, options, or --wrap)",
    "squeue": "show queued and running jobs",
    "scancel": "cancel jobs",
    "sinfo": "show partitions and their nodes, grouped by state, as Slurm's sinfo does",
    "sacct": "show accounting data for jobs, finished ones included",
    "sshare": "show fair-share usage, what your jobs hold, and your limits",
    "sprio": "show pending jobs' priority and the factors that order them",
    "seff": "show a job's efficiency: wall-clock time against its limit, GPUs",
    "sreport": "report GPU-hours per user (or Unix group) over a period",
    "scontrol": "show a job, node or partition; hold, release, requeue or update jobs",
    "logs": "print a job's output; -f follows it until the job ends",
    "tui": "full-screen live view of jobs, nodes and logs (cancel, hold, release)",
    "node": "list nodes; install the agent; trust a host's SSH key; drain or resume a node "
    "(admins)",
    "daemon": "start, stop or inspect the head daemon (gbatchd)",
    "api": "serve the HTTP API (tokens from `gbatch token`); print its OpenAPI document",
    "token": "print an API token for the HTTP API; list, revoke, rotate the signing key",
    "mcp": "serve gbatch's tools to a coding agent (Model Context Protocol over stdio)",
}


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

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for every add_argument (to check its metavar), and
        # the first imports shutil (with bz2 and lzma: 1.5 ms) for the terminal's width.
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]

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


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The sub-commands, where each one that does not run stands in by name and help
    alone: a parser each would cost two gettext look-ups (~0.4 ms) at every start."""

    def add_stand_in(self, name: str, help_line: str) -> None:
        """List `name` in `gbatch --help` and take it as a choice, with no parser: the
        one command that runs gets its own (build_parser)."""
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help_line))
        self._name_parser_map[name] = None

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        if self._name_parser_map.get(values[0]) is None:
            raise AssertionError(f"{values[0]}: build_parser() was not given this command")
        super().__call__(parser, namespace, values, option_string)


def _help_width() -> int:
    """The width argparse gives help, shutil.get_terminal_size().columns - 2, found as
    shutil finds it: $COLUMNS, else the terminal on stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


def build_parser(command: str | None) -> argparse.ArgumentParser:
    """gbatch's parser with `command`'s own sub-parser (its module imported); every other
    command is a stand-in that carries its name and help only. None: stand-ins alone
    (`gbatch --help`, or a word that names no command)."""
    parser = _Parser(
        prog="gbatch",
        description="Queue GPU jobs on a lab's servers, Slurm style.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gbatch {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    # An explicit prog spares argparse a HelpFormatter (and shutil) at every start.
    commands: _Commands = parser.add_subparsers(  # type: ignore[assignment]
        action=_Commands, dest="command", metavar="COMMAND", prog="gbatch"
    )
    commands.required = True
    for name, help_line in COMMANDS.items():
        if name == command:
            command_module(name).add_parser(commands)
        else:
            commands.add_stand_in(name, help_line)
    return parser


def command_module(name: str) -> Any:
    """gbatch.cli.<name>, imported now: the one command that runs."""
    import importlib

    return importlib.import_module(f"gbatch.cli.{name}")


def _command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The sub-command's own parser (whose options a typo is compared with)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser


def main(argv: list[str] | None = None) -> int:
    words = _command_words(sys.argv[1:] if argv is None else argv)
    command = _command_word(words)
    parser = build_parser(command if command in COMMANDS else None)
    args, unknown = parser.parse_known_args(words)
    prog = f"gbatch {args.command}"
    if unknown:  # named after the command they were given to, not plain `gbatch`
        hint = did_you_mean(unknown[0], option_strings(_command_parser(parser, args.command)))
        message = f"unrecognized arguments: {' '.join(unknown)}{hint}. See `{prog} --help`"
        return _fail(prog, message, Exit.USAGE)
    try:
        from gbatch.cli.context import Context

        status: int = args.run(args, Context())
        return status
    except CliError as err:
        return _fail(prog, err.message, err.status)
    except KeyboardInterrupt:
        return Exit.INTERRUPTED
    except BrokenPipeError:
        sys.stderr.close()  # `gbatch squeue | head`: the reader left, say nothing
        return Exit.OK
    except Exception as err:  # the entry point: a bug, unless the daemon's answer
        known = _daemon_failure(prog, err)
        if known is not None:
            return known
        if args.debug:
            raise
        return _fail(
            prog, f"internal error: {err!r}. Rerun with --debug and report it", Exit.INTERNAL
        )


def _daemon_failure(prog: str, err: Exception) -> int | None:
    """The exit status of a failure to reach the daemon or of its refusal, after saying
    so; None for any other error."""
    known = daemon_failure(err)
    if known is None:
        return None
    return _fail(prog, *known)


def daemon_failure(err: Exception) -> tuple[str, Exit] | None:
    """The one-line message and exit status of a failure to reach the daemon or of its
    refusal; None for any other error. (gbatch.client is imported here, not at start:
    the commands that talk to the daemon have loaded it already, `--help` never needs
    it.) The MCP server's tools answer with the same line."""
    from gbatch.client import DaemonUnavailable, ReplyTimeout, RequestFailed

    if isinstance(err, DaemonUnavailable):
        from gbatch.paths import SYSTEM_SOCKET

        # The lab's system daemon is the admins' to start (systemd), not the user's.
        system = str(err.socket_path) == str(SYSTEM_SOCKET)
        hint = "Ask an admin to start gbatchd" if system else "Start one with `gbatch daemon start`"
        return f"{err}. {hint}", Exit.NO_DAEMON
    if isinstance(err, RequestFailed):
        return err.message, exit_status(err.kind)
    if isinstance(err, ReplyTimeout):
        return str(err), Exit.UNAVAILABLE
    return None


def _command_words(argv: list[str]) -> list[str]:
    """argv with squeue's getopt-style values joined (squeue.join_option_values)."""
    command = _command_word(argv)
    if command == "squeue":
        from gbatch.cli.squeue import join_option_values

        index = argv.index(command)
        return [*argv[: index + 1], *join_option_values(argv[index + 1 :])]
    return argv


def _command_word(argv: list[str]) -> str | None:
    """The command: the first word that is not an option of gbatch itself (none of
    which takes a value), as argparse reads it."""
    return next((word for word in argv if not word.startswith("-")), None)


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
        case "permission" | "unauthenticated":
            return Exit.PERMISSION
        case "unavailable":
            return Exit.UNAVAILABLE
        case "internal":
            return Exit.INTERNAL
        case _:
            from typing import assert_never

            assert_never(kind)


if __name__ == "__main__":
    sys.exit(main())
