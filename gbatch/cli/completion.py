"""gbatch completion SHELL: a completion script for bash, zsh or fish.

The script is made now from the parsers `--help` prints (gbatch/cli/commandtree.py),
so it cannot fall behind them.

Each script is a fixed part, the shell's own code in gbatch/cli/shells/, and tables
written here: the commands, each command's options, what each option's value and each
argument names. Partitions, nodes and the user's job ids are asked of gbatch itself
when a value is completed (`gbatch sinfo -h -o %R`, `gbatch squeue --me -h -o '%A %i'`),
quietly: with no daemon there are no candidates and nothing is printed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.context import Context
from gbatch.cli.exits import Exit

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from typing import Any

    from gbatch.cli.commandtree import Argument, Command, Option

HELP = COMMANDS["completion"]
SHELLS = ("bash", "zsh", "fish")
SHELL_DIR = Path(__file__).with_name("shells")

EPILOG = """\
Commands, options, option values with a fixed set, files where a file is asked for,
users, and from the daemon: partitions, nodes and your own queued and running job ids
(none, quietly, when no daemon answers). Load it in the shell's start-up file:

  bash (~/.bashrc):                   source <(gbatch completion bash)
  zsh (~/.zshrc, after compinit):     source <(gbatch completion zsh)
  fish (~/.config/fish/config.fish):  gbatch completion fish | source

or write it once where the shell looks for completions, loaded on first use:

  gbatch completion bash > ~/.local/share/bash-completion/completions/gbatch
  gbatch completion zsh > ~/.zfunc/_gbatch    # with fpath+=(~/.zfunc) before compinit
  gbatch completion fish > ~/.config/fish/completions/gbatch.fish

A written file is this gbatch's commands: write it again after an upgrade.
See docs/shell.md."""


def add_parser(commands: Any) -> None:
    p = commands.add_parser(
        "completion",
        help=HELP,
        description=HELP + ", made from its parsers: what `--help` lists is what completes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to print the script for")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    sys.stdout.write(script(args.shell))
    return Exit.OK


def script(shell: str) -> str:
    """The completion script for `shell` (one of SHELLS), from the parsers as they are."""
    from gbatch import __version__
    from gbatch.cli.commandtree import program

    top, commands = program()
    tables = {"bash": _bash_tables, "zsh": _zsh_tables, "fish": _fish_tables}[shell]
    template = (SHELL_DIR / f"gbatch.{shell}").read_text()
    text = template.replace("@VERSION@", f"gbatch {__version__}")
    return text.replace("@TABLES@", tables(top, commands).rstrip("\n"))


# ---- what each shell is told -------------------------------------------------------


def _kind(kind: str, choices: tuple[str, ...], is_list: bool) -> str:
    named = "choice:" + " ".join(choices) if choices else kind or "text"
    return named + ("," if is_list else "")


def value_kind(option: Option) -> str:
    """What completes an option's value, in the scripts' words.

    `choice:A B`, a kind (`job`, `partition`, `node`, `user`, `file`, `dir`) or `text`
    (nothing to offer); a trailing `,`: a comma list.
    """
    return _kind(option.kind, option.choices, option.is_list)


def argument_kind(argument: Argument) -> str:
    """What completes an argument, in value_kind's words.

    Job ids that may repeat are a comma list too, as scancel reads them. `rest:` before
    it: from there on, the words (options too) are that argument's.
    """
    kind = _kind(argument.kind, argument.choices, argument.kind == "job" and argument.repeats)
    return ("rest:" if argument.rest else "") + kind


def _argument_cases(command: Command) -> list[tuple[str, str]]:
    """(pattern, kind) for each place of command's arguments: `0`, `1`, ..., and `*`
    for those past the last, when it repeats."""
    cases = [(str(i), argument_kind(a)) for i, a in enumerate(command.arguments)]
    if command.arguments and command.arguments[-1].repeats:
        cases[-1] = ("*", cases[-1][1])
    return cases


def _sh_quote(text: str) -> str:
    """`text` in single quotes for sh, bash and zsh, always (shellcheck wants a word
    such as `file` quoted where it is a value, not a command)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _bash_tables(top: Command, commands: tuple[Command, ...]) -> str:
    q = _sh_quote
    lines = [f"_gbatch_commands={q(' '.join(c.name for c in commands))}", ""]
    lines += [
        "# _gbatch_options COMMAND: its options (gbatch's own for '').",
        "_gbatch_options() {",
        "    case $1 in",
    ]
    for command in (top, *commands):
        flags = " ".join(flag for option in command.options for flag in option.flags)
        lines.append(f"    {q(command.name)}) REPLY={q(flags)} ;;")
    lines += ["    *) REPLY='' ;;", "    esac", "}", ""]
    lines += [
        "# _gbatch_value COMMAND OPTION: what OPTION's value is; '' when it takes none.",
        "_gbatch_value() {",
        "    REPLY=''",
        "    case $1 in",
    ]
    for command in commands:
        valued = [o for o in command.options if o.metavar is not None]
        if not valued:
            continue
        lines.append(f"    {command.name})")
        lines.append("        case $2 in")
        for option in valued:
            lines.append(f"        {' | '.join(option.flags)}) REPLY={q(value_kind(option))} ;;")
        lines += ["        esac", "        ;;"]
    lines += ["    esac", "}", ""]
    lines += [
        "# _gbatch_argument COMMAND N: what COMMAND's argument N (from 0) is.",
        "_gbatch_argument() {",
        "    REPLY=''",
        "    case $1 in",
    ]
    for command in commands:
        cases = _argument_cases(command)
        if not cases:
            continue
        lines.append(f"    {command.name})")
        lines.append("        case $2 in")
        lines += [f"        {pattern}) REPLY={q(kind)} ;;" for pattern, kind in cases]
        lines += ["        esac", "        ;;"]
    lines += ["    esac", "}"]
    return "\n".join(lines) + "\n"


def short_help(text: str, width: int = 72) -> str:
    """A help text's first sentence on one line, cut after a word with `...` past `width`.

    What zsh and fish show beside a candidate.
    """
    # A sentence ends at `. ` before a capital, not after `e.g.` or `i.e.`.
    line = re.split(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z`])", " ".join(text.split()))[0]
    line = line.removesuffix(".")
    if len(line) <= width:
        return line
    return line[: width - 3].rsplit(" ", 1)[0].rstrip(",;:") + "..."


# What zsh completes a value of each kind with.
_ZSH_ACTIONS = {
    "job": "_gbatch_jobs",
    "partition": "_gbatch_partitions",
    "node": "_gbatch_nodes",
    "user": "_users",
    "file": "_files",
    "dir": "_files -/",
    "scontrol": "_gbatch_scontrol",
}


def _zsh_escape(text: str) -> str:
    """`text` safe inside an _arguments spec's description or message."""
    for char in "\\[]:":
        text = text.replace(char, "\\" + char)
    return text


def _zsh_action(kind: str, choices: tuple[str, ...], is_list: bool) -> str:
    if choices:
        action = "(" + " ".join(choices) + ")"
        return f"_sequence compadd - {' '.join(choices)}" if is_list else action
    action = _ZSH_ACTIONS.get(kind, " ")
    return f"_sequence {action}" if is_list and action != " " else action


def _zsh_option_specs(option: Option) -> list[str]:
    """_arguments' specs of one option: one per flag, exclusive of each other unless
    the option may be given again."""
    described = "[" + _zsh_escape(short_help(option.help)) + "]" if option.help else ""
    if option.repeats:
        exclusion = "*"
    elif len(option.flags) > 1:
        exclusion = "(" + " ".join(option.flags) + ")"
    else:
        exclusion = ""
    value = ""
    if option.metavar is not None:
        action = _zsh_action(option.kind, option.choices, option.is_list)
        value = f":{_zsh_escape(option.metavar)}:{action}"
    specs = []
    for flag in option.flags:
        suffix = ""
        if option.metavar is not None:
            suffix = "=" if flag.startswith("--") else "+"
        specs.append(exclusion + flag + suffix + described + value)
    return specs


def _zsh_argument_specs(command: Command) -> list[str]:
    specs = []
    for place, argument in enumerate(command.arguments, 1):
        action = _zsh_action(argument.kind, argument.choices, argument.kind == "job")
        message = _zsh_escape(argument.name)
        if argument.repeats:
            position = "*:" if not argument.rest else "*::"
        else:
            position = f"{place}:" + (":" if argument.optional else "")
        specs.append(f"{position}{message}:{action}")
    return specs


def _zsh_tables(top: Command, commands: tuple[Command, ...]) -> str:
    q = _sh_quote
    lines = ["_gbatch_commands=("]
    lines += [f"    {q(c.name + ':' + short_help(c.summary))}" for c in commands]
    lines += [")", "_gbatch_options=("]
    lines += [f"    {q(s)}" for o in top.options for s in _zsh_option_specs(o)]
    lines += [")"]
    for command in commands:
        # sbatch: no options of its own after the script (its words are the script's).
        flags = "-s -S" + (" -A '-*'" if any(a.rest for a in command.arguments) else "")
        specs = [s for o in command.options for s in _zsh_option_specs(o)]
        specs += _zsh_argument_specs(command)
        lines += ["", f"_gbatch_command_{command.name}() {{", f"    _arguments {flags} : \\"]
        lines += [f"        {q(spec)} \\" for spec in specs[:-1]]
        lines += [f"        {q(specs[-1])}", "}"]
    return "\n".join(lines) + "\n"


def _fish_quote(text: str) -> str:
    """`text` as one fish word, in single quotes."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fish_complete(condition: str, option: Option) -> str:
    """The `complete` line of one option of the command `condition` names."""
    words = ["complete -c gbatch", f"-n {_fish_quote(condition)}"]
    for flag in option.flags:
        if flag.startswith("--"):
            words.append(f"-l {flag[2:]}")
        elif len(flag) == 2:
            words.append(f"-s {flag[1]}")
        else:
            words.append(f"-o {flag[1:]}")
    if option.metavar is not None:
        if option.kind == "file" and not option.choices:
            words.append("-r -F")
        elif option.kind == "dir" and not option.choices:
            words.append("-x -a '(__fish_complete_directories)'")
        elif option.kind or option.choices:
            words.append(f"-x -a {_fish_quote('(__gbatch_values ' + value_kind(option) + ')')}")
        else:
            words.append("-x")
    if option.help:
        words.append(f"-d {_fish_quote(short_help(option.help))}")
    return " ".join(words)


def _fish_tables(top: Command, commands: tuple[Command, ...]) -> str:
    q = _fish_quote
    lines = ["# __gbatch_value COMMAND OPTION: what OPTION's value is; nothing when it takes none."]
    lines += ["function __gbatch_value", "    switch $argv[1]"]
    for command in commands:
        valued = [o for o in command.options if o.metavar is not None]
        if not valued:
            continue
        lines += [f"        case {command.name}", "            switch $argv[2]"]
        for option in valued:
            lines.append(f"                case {' '.join(option.flags)}")
            lines.append(f"                    echo {q(value_kind(option))}")
        lines.append("            end")
    lines += ["    end", "end", ""]
    lines += ["# __gbatch_argument COMMAND N: what COMMAND's argument N (from 0) is."]
    lines += ["function __gbatch_argument", "    switch $argv[1]"]
    for command in commands:
        cases = _argument_cases(command)
        if not cases:
            continue
        lines += [f"        case {command.name}", "            switch $argv[2]"]
        for pattern, kind in cases:
            lines += [f"                case {q(pattern)}", f"                    echo {q(kind)}"]
        lines.append("            end")
    lines += ["    end", "end", ""]
    lines += ["complete -c gbatch -f  # no file names, but where a file is asked for"]
    for command in commands:
        lines.append(
            f"complete -c gbatch -n __gbatch_needs_command -a {command.name} "
            f"-d {q(short_help(command.summary, 80))}"
        )
    lines += [_fish_complete("__gbatch_needs_command", o) for o in top.options]
    for command in commands:
        condition = f"__gbatch_command_is {command.name}"
        lines += [_fish_complete(condition, o) for o in command.options]
    lines.append("complete -c gbatch -n __gbatch_argument_is_file -F")
    lines.append("complete -c gbatch -a '(__gbatch_argument_values)'")
    return "\n".join(lines) + "\n"
