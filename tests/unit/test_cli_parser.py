"""gbatch's argparse parser (gbatch/cli/_parser.py): its help lines wrapped as textwrap
wraps them, so that `gbatch --help` reads the same at every width without importing
textwrap where it need not."""

from __future__ import annotations

import argparse
import contextlib
import io
import textwrap

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gbatch.cli import _parser
from gbatch.cli._main import main

# Help lines as HelpFormatter leaves them (words between single spaces), the words
# made of what textwrap splits apart: hyphens, dashes, punctuation, digits, non-ASCII.
_WORD = st.text(alphabet="ab-Z9_.,'(`é", min_size=1, max_size=12)
_LINE = st.lists(_WORD, max_size=14).map(" ".join)


@settings(max_examples=1000, deadline=None)
@given(_LINE, st.integers(1, 40))
@example("full-screen live view of jobs", 12)
@example("a --b c", 3)
@example("", 10)
def test_help_lines_wrap_as_textwrap_wraps_them(text: str, width: int) -> None:
    lines = _parser.split_help_lines(text, width)
    if lines is not None:
        assert lines == textwrap.wrap(text, width)


def test_a_hyphenated_word_at_a_break_is_left_to_textwrap() -> None:
    assert _parser.split_help_lines("show the full-screen view", 12) is None
    assert textwrap.wrap("show the full-screen view", 12) == ["show the", "full-screen", "view"]
    assert _parser.split_help_lines("show queued and running jobs", 12) == [
        "show queued",
        "and running",
        "jobs",
    ]


def _help(monkeypatch: pytest.MonkeyPatch, columns: int) -> str:
    monkeypatch.setenv("COLUMNS", str(columns))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["--help"])
    return out.getvalue()


@pytest.mark.parametrize("columns", [20, 40, 60, 80, 100, 132, 200])
def test_gbatch_help_reads_as_argparses_own_formatter_writes_it(
    columns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = _help(monkeypatch, columns)
    monkeypatch.setattr(_parser, "_HelpFormatter", argparse.RawDescriptionHelpFormatter)
    assert ours == _help(monkeypatch, columns)
    assert "sbatch" in ours and "exit status:" in ours
