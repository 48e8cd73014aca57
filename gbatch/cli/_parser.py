"""gbatch's argparse parser: the program and the one command that runs (build_parser).

gbatch.cli._main imports this module only for a command line that the everyday forms
(gbatch/cli/everyday.py) do not take: argparse, with the re, enum and gettext it loads,
is a large share of a start (bench/bench_startup.py).
"""

from __future__ import annotations

import argparse
import os
import sys

from gbatch import __version__
from gbatch.cli.commandlist import COMMANDS

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any, NoReturn


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
        # the first imports shutil (with bz2 and lzma: slow to import) for the terminal's
        # width.
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]

    def error(self, message: str) -> NoReturn:
        from gbatch.cli.exits import Exit  # here: `gbatch --help` needs no enum class

        self.exit(Exit.USAGE, f"{self.prog}: error: {message}. See `{self.prog} --help`\n")

    def _parse_optional(self, arg_string: str) -> Any:
        # An option whose Slurm value comes only after '=' (jobspec/sbatchopts.IgnoredFlag,
        # `--no-kill=off`): the option alone, its value meaning nothing here. Marked on the
        # action, so that `gbatch --help` imports no job option.
        name, equals, _ = arg_string.partition("=")
        if equals and getattr(self._option_string_actions.get(name), "value_after_equals", False):
            arg_string = name
        return super()._parse_optional(arg_string)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # A mistyped sub-command (`gbatch squeu`): name the nearest, not all fourteen.
        choices = action.choices
        if choices is not None and value not in choices:
            from gbatch.core.suggest import did_you_mean

            hint = did_you_mean(str(value), [str(c) for c in choices])
            if hint:
                raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint}")
        super()._check_value(action, value)


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """argparse's RawDescriptionHelpFormatter, but a help line is wrapped without
    textwrap where it surely wraps alike (its import and its regular expressions are a
    visible share of `gbatch --help`: bench/bench_startup.py): split_help_lines."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        text = self._whitespace_matcher.sub(" ", text).strip()
        lines = split_help_lines(text, width)
        return super()._split_lines(text, width) if lines is None else lines


def split_help_lines(text: str, width: int) -> list[str] | None:
    """textwrap.wrap(text, width) of a help line, filled word by word; None where unsure.

    A help line has its words between single spaces, as HelpFormatter leaves it. None
    (textwrap's to wrap) where the two might differ: a word longer than `width` (textwrap
    breaks it), or one with a `-` that starts a line (textwrap may break after a hyphen,
    `full-` / `screen`); also for a `width` under 1. tests/unit/test_cli_parser.py holds
    it to textwrap.
    """
    if width < 1:
        return None
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        if len(word) > width:
            return None
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line += " " + word
        elif "-" in word:
            return None
        else:
            lines.append(line)
            line = word
    if line:
        lines.append(line)
    return lines


class _Commands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The sub-commands, where each one that does not run stands in by name and help
    alone: a parser each would cost two gettext look-ups at every start."""

    def add_stand_in(self, name: str, help_line: str) -> None:
        """List `name` in `gbatch --help` and take it as a choice, with no parser.

        The one command that runs gets its own (build_parser).
        """
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


def build_parser(command: str | None, every: bool = False) -> argparse.ArgumentParser:
    """gbatch's parser: `command`'s own sub-parser, and a stand-in for every other command.

    `command`'s module is imported; a stand-in carries a command's name and help only.
    None: stand-ins alone (`gbatch --help`, or a word that names no command). every:
    each command's own sub-parser, every module imported (what the man pages and
    completion are made from).
    """
    parser = _Parser(
        prog="gbatch",
        description="Queue GPU jobs on a lab's servers, Slurm style.",
        epilog=EPILOG,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gbatch {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    # An explicit prog spares argparse a HelpFormatter (and shutil) at every start.
    commands: _Commands = parser.add_subparsers(  # type: ignore[assignment]
        action=_Commands, dest="command", metavar="COMMAND", prog="gbatch"
    )
    commands.required = True
    for name, help_line in COMMANDS.items():
        if every or name == command:
            command_module(name).add_parser(commands)
        else:
            commands.add_stand_in(name, help_line)
    return parser


def command_module(name: str) -> Any:
    """gbatch.cli.<name>, imported now: the one command that runs (`-` is `_` there)."""
    import importlib

    return importlib.import_module(f"gbatch.cli.{name.replace('-', '_')}")


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The sub-command's own parser (whose options a typo is compared with)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: argparse.ArgumentParser = action.choices[command]
            return found
    return parser
