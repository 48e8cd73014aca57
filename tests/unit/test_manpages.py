"""The man pages under man/man1 are the ones gbatch.cli.manpages makes from the parsers
now: a parser changed without `python -m gbatch.cli.manpages man/man1` fails here.
tests/integration/test_shell_help.py reads them with `man` from a fresh install."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from gbatch.cli import manpages
from gbatch.cli._parser import build_parser
from gbatch.cli.commandlist import COMMANDS
from gbatch.cli.exits import MEANING, Exit

ROOT = Path(__file__).resolve().parents[2]
MAN1 = ROOT / "man" / "man1"
REGENERATE = "write them again: python -m gbatch.cli.manpages man/man1"


def _roff(text: str) -> str:
    return text.replace("-", "\\-")


def test_the_committed_pages_are_the_ones_the_parsers_make_now() -> None:
    made = manpages.pages()
    committed = {path.name: path.read_text() for path in MAN1.glob("*.1")}
    missing = sorted(set(made) - set(committed))
    stale = sorted(set(committed) - set(made))
    changed = sorted(name for name in made if name in committed and committed[name] != made[name])
    assert (missing, stale, changed) == ([], [], []), REGENERATE


def test_each_command_has_a_page_naming_every_option_and_argument_of_its_parser() -> None:
    made = manpages.pages()
    parser = build_parser(None, every=True)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) == set(COMMANDS)
    for name, command in commands.choices.items():
        page = made[f"gbatch-{name}.1"]
        assert f".TH GBATCH\\-{_roff(name.upper())} 1" in page
        for action in command._actions:
            if action.help == argparse.SUPPRESS:  # hidden from --help (--exclusive=user)
                continue
            for flag in action.option_strings:
                assert f"\\fB{_roff(flag)}\\fR" in page, f"{name}: {flag}"
            if not action.option_strings and action.help:
                help_text = manpages._escape(" ".join(action.help.split()))
                assert help_text in page, f"{name}: {action.dest}"
    for name in COMMANDS:
        assert f"\\fBgbatch\\-{name}\\fR(1)" in made["gbatch.1"]


def test_every_exit_status_is_explained_on_every_page() -> None:
    assert set(MEANING) == set(Exit)
    for name, page in manpages.pages().items():
        section = page[page.index(".SH EXIT STATUS") :]
        for status in Exit:
            assert f"\\fB{int(status)}\\fR" in section, f"{name}: {status!r}"


def test_the_pages_are_installed_with_the_package_where_man_looks() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["setuptools"]["data-files"]["share/man/man1"] == ["man/man1/*.1"]


def test_writing_replaces_the_pages_and_drops_those_of_commands_gone(tmp_path: Path) -> None:
    (tmp_path / "gbatch-gone.1").write_text("old")
    (tmp_path / "other.1").write_text("not ours")
    (tmp_path / "gbatch-sbatch.1").write_text("old")
    assert manpages.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*manpages.pages(), "other.1"])
    assert (tmp_path / "gbatch-sbatch.1").read_text() == manpages.pages()["gbatch-sbatch.1"]


def test_roff_requests_and_escapes_never_come_from_help_text() -> None:
    """Help texts are text: a line of theirs never starts a roff request, and a
    backslash of theirs is printed, not read as an escape."""
    assert manpages._line(".hidden") == "\\&.hidden"
    assert manpages._line("'quoted") == "\\&'quoted"
    assert manpages._escape("a\\b `-x` c-d") == "a\\eb \\fB\\-x\\fR c\\-d"
    for page in manpages.pages().values():
        for line in page.splitlines():
            assert line.startswith(("\\&", ".")) or not line.startswith("'"), line
