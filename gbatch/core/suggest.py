""" "Did you mean ...?" for a mistyped sub-command or option: the nearest known word.

argparse's own prefix matching is off on every gbatch parser (allow_abbrev=False):
`--gpu 1` silently read as `--gpus 1` hides typos; the nearest option is named instead.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable


def nearest(word: str, known: Iterable[str]) -> str | None:
    """The known words `word` may have meant, as text, or None when none is close.

    One word reads `--gpus`; a prefix of several known words names up to three of them,
    `--gpus or --gpus-per-node`.
    """
    import difflib  # deferred: only a mistake needs it

    name = word.partition("=")[0]  # --gpu=1: the option's name alone
    words = sorted(set(known))
    # A prefix of known options (what argparse used to complete) names them all.
    longer = [w for w in words if w.startswith(name) and len(name) > 2]
    found = longer[:3] or difflib.get_close_matches(name, words, n=1, cutoff=0.6)
    if not found:
        return None
    return found[0] if len(found) == 1 else f"{', '.join(found[:-1])} or {found[-1]}"


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string `parser` takes (its long and short names)."""
    return [name for action in parser._actions for name in action.option_strings]


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """` (did you mean --gpus?)`, or "" when nothing is close."""
    close = nearest(word, known)
    return "" if close is None else f" (did you mean {close}?)"
