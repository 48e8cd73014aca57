"""Slurm's host lists: `gpu[01-03],cpu7` <-> gpu01, gpu02, gpu03, cpu7.

`compress` writes one (squeue's NODELIST, SLURM_JOB_NODELIST); `expand` reads one (a
job's -w/--nodelist and -x/--exclude, `scontrol show hostnames`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_TRAILING_NUMBER = re.compile(r"^(.*?)([0-9]+)$", re.DOTALL)


def compress(names: Iterable[str]) -> str:
    """Slurm's ranged host list: `gpu01,gpu02,gpu03,cpu7` -> `gpu[01-03],cpu7`.

    Names sharing everything before a trailing number join one bracket, numbers sorted
    and consecutive ones written as ranges; a zero-padded number continues a range only
    with numbers of its own width (`n09,n10` -> `n[09-10]`, `n9,n010` -> `n[9,010]`).
    Prefixes print in order of their first name; a name without a trailing number, or
    alone with its prefix, prints as is. Duplicates print once."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for name in names:
        match = _TRAILING_NUMBER.match(name)
        if match is None or len(match.group(2)) > 18:  # no number, or none int() keeps small
            groups.setdefault(name, [])
            continue
        entries = groups.setdefault(match.group(1), [])
        if (int(match.group(2)), match.group(2)) not in entries:
            entries.append((int(match.group(2)), match.group(2)))
    out = []
    for prefix, entries in groups.items():
        if len(entries) <= 1:
            out.append(prefix + (entries[0][1] if entries else ""))
        else:
            out.append(f"{prefix}[{','.join(_ranges(sorted(entries)))}]")
    return ",".join(out)


def _padded(digits: str) -> bool:
    return len(digits) > 1 and digits.startswith("0")


def _continues(last: tuple[int, str], entry: tuple[int, str]) -> bool:
    same_width = len(entry[1]) == len(last[1]) or not (_padded(entry[1]) or _padded(last[1]))
    return entry[0] == last[0] + 1 and same_width


def _ranges(numbers: Sequence[tuple[int, str]]) -> list[str]:
    ranges = []
    first = last = numbers[0]
    for entry in numbers[1:]:
        if _continues(last, entry):
            last = entry
            continue
        ranges.append(first[1] if first == last else f"{first[1]}-{last[1]}")
        first = last = entry
    ranges.append(first[1] if first == last else f"{first[1]}-{last[1]}")
    return ranges


# Past this many names one bracket is refused: a typo like n[1-99999999] must not build
# a list the size of memory.
MAX_EXPANDED = 10_000
_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def expand(text: str) -> list[str]:
    """The names of host list `text`, in its order, each once: `n[1-3,7]` -> n1 n2 n3 n7.

    A range keeps its numbers' width (`n[08-10]`: n08 n09 n10). ValueError, with what
    is wrong, for an empty name, an unclosed bracket, a range that runs backwards or
    a list past MAX_EXPANDED names.
    """
    names: list[str] = []
    for item in _split_top(text):
        if not item:
            raise ValueError(f"an empty name in {text!r}")
        for name in _expand_one(item):
            if name not in names:
                names.append(name)
            if len(names) > MAX_EXPANDED:
                raise ValueError(f"{text!r} names more than {MAX_EXPANDED} hosts")
    return names


def names_of(text: str) -> list[str]:
    """The names of host list `text` (expand's), or `text` whole where expand refuses it.

    For a list another scheduler printed: shown as it was given, never refused."""
    try:
        return expand(text)
    except ValueError:
        return [text]


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for at, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"a bracket inside a bracket in {text!r}")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"a ']' without its '[' in {text!r}")
        elif char == "," and depth == 0:
            items.append(text[start:at].strip())
            start = at + 1
    if depth:
        raise ValueError(f"an unclosed '[' in {text!r}")
    items.append(text[start:].strip())
    return items


def _expand_one(item: str) -> list[str]:
    match = _BRACKET.search(item)
    if match is None:
        return [item]
    head, tail = item[: match.start()], item[match.end() :]
    numbers: list[str] = []
    for part in match.group(1).split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ValueError(f"{part!r} in {item!r} is not a number or a range A-B")
        if not dash:
            numbers.append(first)
            continue
        if int(last) < int(first):
            raise ValueError(f"the range {part!r} in {item!r} runs backwards")
        if int(last) - int(first) > MAX_EXPANDED:
            raise ValueError(f"{item!r} names more than {MAX_EXPANDED} hosts")
        width = len(first) if first.startswith("0") and len(first) > 1 else 0
        numbers.extend(str(n).zfill(width) for n in range(int(first), int(last) + 1))
    return [f"{head}{number}{rest}" for number in numbers for rest in _expand_one(tail)]
