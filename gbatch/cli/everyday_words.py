"""A command line's words as argparse reads them, for the everyday lines' options.

gbatch/cli/everyday.py's squeue and scancel, and gbatch/cli/everyday_sbatch.py's sbatch
(here, so that neither imports the other).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def read_options(
    words: list[str],
    flags: Mapping[str, str],
    with_value: Mapping[str, str],
    positional: str | None = None,
) -> dict[str, Any] | None:
    """`words` as argparse reads them for these options; None for any word it may read otherwise.

    {dest: True} for a flag given, {dest: [value, ...]} for an option. `positional`: the
    dest of a `nargs="*"` argument, {positional: [word, ...]} for the words that are not
    options, in one run (argparse refuses a second run after an option).
    """
    found: dict[str, Any] = {}
    run = 0  # positional words: 0 none yet, 1 in their run, 2 their run has ended
    at = 0
    while at < len(words):
        word = words[at]
        at += 1
        if positional is not None and word[:1] not in ("", "-"):
            if run == 2:
                return None
            run = 1
            found.setdefault(positional, []).append(word)
            continue
        if run == 1:
            run = 2
        if word in flags:
            found[flags[word]] = True
            continue
        option, equals, value = word.partition("=")
        if equals and option in with_value:  # `--user=VALUE`, `-u=VALUE`
            pass
        elif word in with_value:  # `-u VALUE`
            if at == len(words):
                return None
            option, value = word, words[at]
            at += 1
        elif word[:2] in with_value and not equals:  # `-uVALUE`: a short option's
            option, value = word[:2], word[2:]
        else:
            return None
        # A value that is empty or begins with '-' (an option, a negative number, `--`,
        # which argparse drops even after '=') follows argparse's own rules: its to read.
        if value[:1] in ("", "-"):
            return None
        found.setdefault(with_value[option], []).append(value)
    return found
