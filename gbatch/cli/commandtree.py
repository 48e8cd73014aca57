"""gbatch's command line as values, read off the argparse parsers that `--help` prints.

The man pages (gbatch/cli/manpages.py) and the shell completion
(gbatch/cli/completion.py) are made from it, so neither can say other than `--help`.

Imported by those two alone: reading the tree imports every command's module.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from gbatch.cli._parser import build_parser
from gbatch.cli.commandlist import COMMANDS

# What a value names, for completion: job, partition, node, user, file, dir, choice (one
# of a fixed set) or "" (free text). Found by the option's or argument's place
# (command, dest), else its dest, else its metavar's first word ("ID[,ID]" -> ID).
_BY_PLACE = {
    ("node", "name"): "node",
    # scontrol's words after its action: `show job|node|partition [NAME]`, or job ids.
    ("scontrol", "args"): "scontrol",
    ("sbatch", "file"): "file",
    ("sbatch", "script_args"): "file",
}
_BY_DEST = {"partition": "partition", "nodelist": "node"}
_BY_METAVAR = {"JOBID": "job", "ID": "job", "PART": "partition", "PARTITION": "partition"}
_BY_METAVAR |= {"NODE": "node", "USER": "user", "FILE": "file", "DIR": "dir"}


@dataclass(frozen=True)
class Option:
    """One option of a command, as its parser declares it.

    Its flags (`-p`, `--partition`), its value's metavar (None: a flag that takes none),
    its help, what its value names (kind) and its choices.
    """

    flags: tuple[str, ...]
    metavar: str | None
    help: str
    kind: str
    choices: tuple[str, ...]
    group: str  # the argparse group's title ("options", or one the command named)
    repeats: bool  # may be given again (append, count)

    @property
    def is_list(self) -> bool:
        """Its value is a comma list (`-p a,b`): each item completes alike."""
        return "," in (self.metavar or "")


@dataclass(frozen=True)
class Argument:
    """One positional argument of a command, as its parser declares it.

    Its name as usage shows it, its help, kind, choices, whether it may be left out or
    repeated, and whether it takes the rest of the line (sbatch's script arguments:
    options there are the script's).
    """

    name: str
    help: str
    kind: str
    choices: tuple[str, ...]
    optional: bool
    repeats: bool
    rest: bool


@dataclass(frozen=True)
class Command:
    """gbatch itself (name "") or one of its commands, as its parser defines it."""

    name: str
    prog: str
    summary: str  # the one line `gbatch --help` shows (gbatch's own: its description)
    description: str
    epilog: str
    raw: bool  # description and epilog laid out by hand (RawDescriptionHelpFormatter)
    options: tuple[Option, ...]
    arguments: tuple[Argument, ...]

    def option(self, flag: str) -> Option | None:
        return next((o for o in self.options if flag in o.flags), None)


def program() -> tuple[Command, tuple[Command, ...]]:
    """gbatch itself and each of its commands, in `gbatch --help`'s order."""
    parser = build_parser(None, every=True)
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    top = _command("", parser)
    top = Command(
        name="",
        prog=top.prog,
        summary=parser.description or "",
        description=top.description,
        epilog=top.epilog,
        raw=top.raw,
        options=top.options,
        arguments=(),  # the command word: the commands themselves
    )
    commands = tuple(_command(name, subparsers.choices[name], COMMANDS[name]) for name in COMMANDS)
    return top, commands


def _command(name: str, parser: argparse.ArgumentParser, summary: str = "") -> Command:
    formatter = argparse.HelpFormatter(parser.prog)
    options: list[Option] = []
    arguments: list[Argument] = []
    for group in parser._action_groups:
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            help_text = formatter._expand_help(action) if action.help else ""
            choices = tuple(str(c) for c in action.choices or ())
            kind = "choice" if choices else _kind(name, action)
            if action.option_strings:
                takes = action.nargs not in (0, "?")
                kind = kind if takes else ""
                repeats = isinstance(action, argparse._AppendAction | argparse._CountAction)
                metavar = _metavar(action, choices) if takes else None
                group_title = group.title or "options"
                if group_title in ("optional arguments", "options"):
                    group_title = "options"
                flags = tuple(action.option_strings)
                options.append(
                    Option(flags, metavar, help_text, kind, choices, group_title, repeats)
                )
            else:
                arguments.append(
                    Argument(
                        name=str(action.metavar or action.dest),
                        help=help_text,
                        kind=kind,
                        choices=choices,
                        optional=action.nargs in ("?", "*", argparse.REMAINDER),
                        repeats=action.nargs in ("*", "+", argparse.REMAINDER),
                        rest=action.nargs == argparse.REMAINDER,
                    )
                )
    layout = parser.formatter_class
    raw = isinstance(layout, type) and issubclass(layout, argparse.RawDescriptionHelpFormatter)
    return Command(
        name=name,
        prog=parser.prog,
        summary=summary,
        description=parser.description or "",
        epilog=parser.epilog or "",
        raw=raw,
        options=tuple(options),
        arguments=tuple(arguments),
    )


def _metavar(action: argparse.Action, choices: tuple[str, ...]) -> str:
    """The word --help shows for an option's value."""
    if isinstance(action.metavar, str):
        return action.metavar
    return "{" + ",".join(choices) + "}" if choices else action.dest.upper()


def _kind(command: str, action: argparse.Action) -> str:
    if (command, action.dest) in _BY_PLACE:
        return _BY_PLACE[(command, action.dest)]
    if action.dest in _BY_DEST:
        return _BY_DEST[action.dest]
    metavar = str(action.metavar or action.dest.upper())
    return _BY_METAVAR.get(metavar.split("[")[0], "")
