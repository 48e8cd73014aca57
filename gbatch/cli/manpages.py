"""gbatch's man pages, gbatch(1) and one per command (gbatch-sbatch(1), ...).

They are made from the parsers `--help` prints (gbatch/cli/commandtree.py) and the
exit statuses of gbatch/cli/exits.py.

The pages are committed under man/man1/ and installed with the package into
share/man/man1 (pyproject.toml), where `man` finds them beside the `gbatch` on PATH;
tests/unit/test_manpages.py fails when they differ from what this module writes now.
Write them again after changing a parser:

    python -m gbatch.cli.manpages man/man1
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from gbatch import __version__
from gbatch.cli.commandtree import Argument, Command, Option, program
from gbatch.cli.exits import MEANING

# The commands Slurm has a page of the same name for (see also).
SLURM_NAMESAKES = {"sbatch", "squeue", "scancel", "sinfo", "sacct", "sshare", "sprio"}
SLURM_NAMESAKES |= {"sreport", "scontrol"}


def pages() -> dict[str, str]:
    """Each page's file name (`gbatch-sbatch.1`) and roff text, gbatch.1 first."""
    top, commands = program()
    found = {"gbatch.1": _top_page(top, commands)}
    for command in commands:
        found[f"gbatch-{command.name}.1"] = _command_page(command)
    return found


def write(directory: Path) -> list[Path]:
    """Write every page into `directory` and return the paths written.

    The gbatch pages there that no command makes any more are deleted.
    """
    directory.mkdir(parents=True, exist_ok=True)
    made = pages()
    for stale in directory.glob("gbatch*.1"):
        if stale.name not in made:
            stale.unlink()
    written = []
    for name, text in made.items():
        path = directory / name
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gbatch.cli.manpages",
        description="Write gbatch's man pages (gbatch.1, gbatch-COMMAND.1), made from its "
        "command parsers, into DIRECTORY. In a checkout: python -m gbatch.cli.manpages "
        "man/man1 (tests/unit/test_manpages.py fails until the committed pages match).",
    )
    parser.add_argument("directory", type=Path, help="where to write them, e.g. man/man1")
    args = parser.parse_args(argv)
    for path in write(args.directory):
        print(path)
    return 0


# ---- roff ---------------------------------------------------------------------------


def _escape(text: str) -> str:
    """Text for a roff line: backslashes and hyphens as roff wants them (`\\-` stays an
    ASCII minus, so options can be copied and searched for), `code` in bold."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)


def _line(text: str) -> str:
    """One roff text line: a leading `.` or `'` would read as a request."""
    return "\\&" + text if text.startswith((".", "'")) else text


def _filled(text: str) -> list[str]:
    """A paragraph that roff fills to the reader's width."""
    return [_line(_escape(" ".join(text.split())))]


def _prose(text: str, raw: bool) -> list[str]:
    """Paragraphs of a description or epilog. Laid out by hand (raw, as --help prints
    it): a paragraph of several lines keeps its lines; else each is filled."""
    lines: list[str] = []
    paragraphs = re.split(r"\n\s*\n", text.strip()) if raw else [text]
    for number, paragraph in enumerate(paragraphs):
        if number:
            lines.append(".PP")
        if raw and "\n" in paragraph.strip("\n"):
            lines.append(".nf")
            lines += [_line(_escape(row)) for row in paragraph.strip("\n").splitlines()]
            lines.append(".fi")
        else:
            lines += _filled(paragraph)
    return lines


def _option_head(option: Option) -> str:
    """`-p, --partition NAME` in bold and italics."""
    value = f" \\fI{_escape(option.metavar)}\\fR" if option.metavar is not None else ""
    return ", ".join(f"\\fB{_escape(flag)}\\fR" for flag in option.flags) + value


def _argument_name(argument: Argument) -> str:
    if argument.choices:
        return "{" + "|".join(argument.choices) + "}"
    return argument.name


def _synopsis(command: Command, name: str) -> list[str]:
    words = ["[\\fIoptions\\fR]"] if command.options else []
    for argument in command.arguments:
        word = f"\\fI{_escape(_argument_name(argument))}\\fR"
        word += " ..." if argument.repeats else ""
        words.append(f"[{word}]" if argument.optional else word)
    return [".SH SYNOPSIS", f".B {_escape(name)}", " ".join(words)]


def _header(page: str, summary: str) -> list[str]:
    title = page.upper().replace("-", "\\-")
    return [
        ".\\\" Made by `python -m gbatch.cli.manpages` from gbatch's parsers: do not edit.",
        f'.TH {title} 1 "" "gbatch {__version__}" "gbatch manual"',
        ".nh",  # no hyphenation: options and ids stay whole
        ".ad l",
        ".SH NAME",
        f"{_escape(page)} \\- {_escape(summary)}",
    ]


def _options(options: tuple[Option, ...]) -> list[str]:
    lines = [".SH OPTIONS"]
    group = "options"
    for option in options:
        if option.group != group:
            group = option.group
            lines.append('.SS "' + _escape(" ".join(group.split())).replace('"', "\\(dq") + '"')
        lines += [".TP", _option_head(option)]
        lines += _filled(option.help) if option.help else []
    return lines


def _exit_status() -> list[str]:
    lines = [".SH EXIT STATUS"]
    for status, meaning in MEANING.items():
        lines += [".TP", f"\\fB{int(status)}\\fR", *_filled(meaning)]
    return lines


def _see_also(references: list[str]) -> list[str]:
    return [".SH SEE ALSO", ",\n".join(f".BR {_escape(name)} (1)" for name in references)]


def _command_page(command: Command) -> str:
    page = f"gbatch-{command.name}"
    lines = _header(page, command.summary)
    lines += _synopsis(command, f"gbatch {command.name}")
    lines += [".SH DESCRIPTION", *_prose(command.description, command.raw)]
    if command.arguments:
        lines.append(".SH ARGUMENTS")
        for argument in command.arguments:
            lines += [".TP", f"\\fI{_escape(_argument_name(argument))}\\fR"]
            lines += _filled(argument.help) if argument.help else []
    if command.options:
        lines += _options(command.options)
    if command.epilog:
        section = "EXAMPLES" if command.epilog.lower().startswith("example") else "NOTES"
        lines += [f".SH {section}", *_prose(command.epilog, True)]
    lines += _exit_status()
    references = ["gbatch"]
    references += [command.name] if command.name in SLURM_NAMESAKES else []
    lines += _see_also(references)
    return "\n".join(lines) + "\n"


def _top_page(top: Command, commands: tuple[Command, ...]) -> str:
    summary = top.summary.removesuffix(".")
    lines = _header("gbatch", summary[:1].lower() + summary[1:])
    lines += [".SH SYNOPSIS", ".B gbatch", "[\\fIoptions\\fR] \\fICOMMAND\\fR [\\fIargs\\fR ...]"]
    lines += [".SH DESCRIPTION", *_filled(top.summary)]
    lines += [".PP", *_filled("One program, Slurm's commands as its sub-commands:")]
    for command in commands:
        lines += [".TP", f"\\fBgbatch {command.name}\\fR", *_filled(command.summary + ".")]
        lines += [f"See \\fBgbatch\\-{command.name}\\fR(1)."]
    lines += _options(top.options)
    if top.epilog:
        lines += [".SH NOTES", *_prose(top.epilog, True)]
    lines += _exit_status()
    lines += _see_also([f"gbatch-{command.name}" for command in commands])
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
