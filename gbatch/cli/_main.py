"""`gbatch`: one program, Slurm's commands as sub-commands.

main() maps every error to an exit status and a one-line message; the commands do
the work and handle none. Only the command that runs is imported, and only its parser
is built: the others stand in as names with their one-line help (commandlist.COMMANDS),
which is all `gbatch --help` and a mistyped command's suggestion need. Start-up is a
feature (README, Performance): this module imports nothing at start but sys; `gbatch
--help` adds argparse (gbatch/cli/_parser.py), and the everyday lines of squeue and
sbatch and scancel (gbatch/cli/everyday.py) not even that.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable

    from gbatch.cli.exits import Exit
    from gbatch.protocol.requests import ErrorKind


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    lean = None
    if _command_word(words) in ("squeue", "sbatch", "scancel"):
        from gbatch.cli.everyday import everyday

        lean = everyday(words)
    if lean is not None:  # `squeue`, `sbatch --wrap CMD`, `scancel N`: read without argparse
        prog, debug, run = lean
        status = _guarded(prog, debug, run)
        if status is not None:
            return status
    return _full(words)  # anything else, and what the everyday path declined


def _full(argv: list[str]) -> int:
    """The command line read by argparse (gbatch/cli/_parser.py), and run."""
    from gbatch.cli._parser import build_parser, command_parser
    from gbatch.cli.commandlist import COMMANDS

    words = _command_words(argv)
    command = _command_word(words)
    parser = build_parser(command if command in COMMANDS else None)
    args, unknown = parser.parse_known_args(words)
    prog = f"gbatch {args.command}"
    if unknown:  # named after the command they were given to, not plain `gbatch`
        from gbatch.cli.exits import Exit  # here: `gbatch --help` needs neither
        from gbatch.core.suggest import did_you_mean, option_strings

        hint = did_you_mean(unknown[0], option_strings(command_parser(parser, args.command)))
        message = f"unrecognized arguments: {' '.join(unknown)}{hint}. See `{prog} --help`"
        return _fail(prog, message, Exit.USAGE)

    def run() -> int:
        from gbatch.cli.context import Context

        status: int = args.run(args, Context())
        return status

    status = _guarded(prog, args.debug, run)
    assert status is not None  # a command's run() always returns its status
    return status


def _guarded(prog: str, debug: bool, run: Callable[[], int | None]) -> int | None:
    """run()'s status, or the exit status of its error after saying what it was (a
    traceback with `debug`, for a bug). None: run() declined (the everyday path)."""
    try:
        return run()
    except KeyboardInterrupt:
        from gbatch.cli.exits import Exit  # here: an error's path may import enum

        return Exit.INTERRUPTED
    except BrokenPipeError:
        from gbatch.cli.exits import Exit

        sys.stderr.close()  # `gbatch squeue | head`: the reader left, say nothing
        return Exit.OK
    except Exception as err:  # the entry point: a bug, unless the daemon's answer
        from gbatch.cli.exits import CliError, Exit

        if isinstance(err, CliError):
            return _fail(prog, err.message, err.status)
        known = _daemon_failure(prog, err)
        if known is not None:
            return known
        if debug:
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
    """The message and exit status of a failure to reach the daemon or of its refusal.

    The one-line message is gbatch.protocol.failures', which the MCP server's tools
    answer with too. None for any other error. (Imported here, not at start: `--help`
    never needs them.)
    """
    from gbatch.cli.exits import Exit
    from gbatch.protocol.client import DaemonUnavailable, RequestFailed
    from gbatch.protocol.failures import failure_line

    line = failure_line(err)
    if line is None:
        return None
    if isinstance(err, DaemonUnavailable):
        return line, Exit.NO_DAEMON
    if isinstance(err, RequestFailed):
        return line, exit_status(err.kind)
    return line, Exit.UNAVAILABLE  # the reply timed out


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


def _fail(prog: str, message: str, status: int) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return status


def exit_status(kind: ErrorKind) -> Exit:
    """The exit status of a request the daemon refused, by the kind of refusal.

    There is one for every kind (mypy checks that none is left out).
    """
    from gbatch.cli.exits import Exit

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
