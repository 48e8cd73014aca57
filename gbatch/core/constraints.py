"""Node features and a job's constraint over them (sbatch's -C/--constraint). Pure.

Slurm's grammar, as far as one node goes: feature names joined by `&` (all) and `|`
(any), `[a|b]` (Slurm's matching OR: on one node, any of them) and `(...)` to group;
`&` binds tighter than `|`. A node's features are its inventory `features:` and the
types of its GPUs (`a100`, `rtx4090`). Names are matched in any case.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from functools import lru_cache

FEATURE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,62}", re.ASCII)
MAX_TEXT = 1024
USAGE = "Use feature names joined by & (all) and | (any), [a|b] or (a|b)&c, e.g. a100|h100"

# A parsed constraint: a feature name, or (op, parts) with op "&" or "|".
Expr = str | tuple[str, tuple["Expr", ...]]


class ConstraintError(ValueError):
    """A constraint that is not the grammar; the message is one line."""


_TOKEN = re.compile(r"\s*(?:([A-Za-z0-9][A-Za-z0-9_.+-]*)|(.))", re.ASCII)


def _tokens(text: str) -> Iterator[str]:
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:  # trailing spaces
            return
        position = match.end()
        name, mark = match.groups()
        if name is not None:
            yield name
        elif mark is not None and not mark.isspace():
            yield mark


@lru_cache(maxsize=512)
def parse(text: str) -> Expr:
    """The constraint `text` as an Expr; ConstraintError naming what is wrong.

    Cached: a queue's jobs share a few constraints, and the planner reads each once per
    pool, the submit check once per job."""
    if len(text) > MAX_TEXT:
        raise ConstraintError(f"longer than {MAX_TEXT} characters. {USAGE}")
    tokens = list(_tokens(text))
    if not tokens:
        raise ConstraintError(f"empty. {USAGE}")
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def any_of(closing: str | None) -> Expr:
        parts = [all_of(closing)]
        while peek() == "|":
            take()
            parts.append(all_of(closing))
        return parts[0] if len(parts) == 1 else ("|", tuple(parts))

    def all_of(closing: str | None) -> Expr:
        parts = [one(closing)]
        while peek() == "&":
            take()
            parts.append(one(closing))
        return parts[0] if len(parts) == 1 else ("&", tuple(parts))

    def one(closing: str | None) -> Expr:
        token = peek()
        if token is None:
            raise ConstraintError(f"{text!r} ends where a feature name should be. {USAGE}")
        take()
        if token in ("(", "["):
            end = ")" if token == "(" else "]"
            inner = any_of(end)
            if peek() != end:
                raise ConstraintError(f"{text!r}: {token} is never closed by {end}. {USAGE}")
            take()
            return inner
        if token == "*" or (peek() == "*"):
            raise ConstraintError(
                f"{text!r}: counts of nodes (feature*N) are for jobs on several nodes; a "
                "gbatch job runs on one. Drop the *N"
            )
        if token == "!":
            raise ConstraintError(f"{text!r}: ! (NOT) is not supported here. {USAGE}")
        if token == ",":
            raise ConstraintError(f"{text!r}: join features with & (all) or | (any). {USAGE}")
        if not FEATURE_RE.fullmatch(token):
            raise ConstraintError(f"{text!r}: {token!r} is not a feature name. {USAGE}")
        return token.lower()

    expr = any_of(None)
    if position < len(tokens):
        extra = tokens[position]
        hint = (
            "join features with & (all) or | (any)"
            if extra not in (")", "]")
            else f"{extra} closes nothing"
        )
        raise ConstraintError(f"{text!r}: {hint}. {USAGE}")
    return expr


def text_of(expr: Expr) -> str:
    """The constraint as gbatch writes it back: names, & and |, brackets where needed."""
    if isinstance(expr, str):
        return expr
    op, parts = expr
    return op.join(
        f"({text_of(p)})" if op == "&" and not isinstance(p, str) and p[0] == "|" else text_of(p)
        for p in parts
    )


def normalize(text: str) -> str:
    """`text` checked and written back (`A100 | h100` -> `a100|h100`); ConstraintError."""
    return text_of(parse(text))


def satisfied(expr: Expr, features: Collection[str]) -> bool:
    """Whether a node with `features` (lowercase) satisfies `expr`."""
    if isinstance(expr, str):
        return expr in features
    op, parts = expr
    if op == "&":
        return all(satisfied(p, features) for p in parts)
    return any(satisfied(p, features) for p in parts)


def names(expr: Expr) -> tuple[str, ...]:
    """The feature names `expr` mentions, in order, each once."""
    if isinstance(expr, str):
        return (expr,)
    seen: dict[str, None] = {}
    for part in expr[1]:
        seen.update(dict.fromkeys(names(part)))
    return tuple(seen)


def check_feature(value: object) -> str:
    """A node feature as an inventory lists it, lowercased; ValueError if it is none."""
    if not isinstance(value, str) or not FEATURE_RE.fullmatch(value):
        raise ValueError(f"{value!r} is not a feature name")
    return value.lower()
