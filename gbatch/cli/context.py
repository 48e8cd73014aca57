"""What every command gets: where gbatch lives and a connection to the daemon."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Callable
from functools import cached_property
from typing import Any

from gbatch.client import Client
from gbatch.config import Paths, resolve_paths


class Context:
    def __init__(self) -> None:
        self.paths: Paths = resolve_paths(os.environ)

    @cached_property
    def client(self) -> Client:
        return Client(self.paths.socket)

    @cached_property
    def me(self) -> str:
        try:
            return pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            return str(os.getuid())


def split_list(values: list[str] | None) -> list[str] | None:
    """Slurm lists: `-u a,b -u c` -> [a, b, c]; None when not given."""
    if not values:
        return None
    return [item for value in values for item in value.split(",") if item]


def parse_ids(values: list[str] | None) -> list[int] | None:
    from gbatch.cli.exits import CliError, Exit

    items = split_list(values)
    if items is None:
        return None
    try:
        return [int(item) for item in items]
    except ValueError as err:
        raise CliError(f"{values}: job ids are numbers, e.g. -j 12,13", Exit.USAGE) from err


def parse_targets(values: list[str] | None) -> tuple[list[int], list[str]]:
    """Job ids and FIRST-LAST ranges (an array, as `sbatch --array` printed it):
    `12 13,20-511` -> ([12, 13], ["20-511"]). The daemon reads a range's jobs itself, so
    a range of 500,000 jobs is a few bytes on the socket."""
    from gbatch.cli.exits import CliError, Exit

    ids: list[int] = []
    ranges: list[str] = []
    for item in split_list(values) or []:
        first, dash, last = item.partition("-")
        if dash and first.isdigit() and last.isdigit() and 0 < int(first) <= int(last):
            ranges.append(f"{int(first)}-{int(last)}")
        elif item.isdigit():
            ids.append(int(item))
        else:
            raise CliError(
                f"{item!r} is not a job id. Use ids or ranges, e.g. 12,13 or 12-511", Exit.USAGE
            )
    return ids, ranges


def print_failures(
    command: str, reply: dict[str, Any], line: Callable[[dict[str, Any]], str]
) -> bool:
    """Print one `gbatch <command>: error: ...` line per failure a bulk reply lists (and
    how many more it only counted); True when anything failed."""
    listed = reply["results"]
    for failure in listed:
        print(f"gbatch {command}: error: {line(failure)}", file=sys.stderr)
    more = int(reply.get("failed", len(listed))) - len(listed)
    if more > 0:
        print(f"gbatch {command}: error: and {more:,} more jobs failed", file=sys.stderr)
    return bool(listed) or more > 0
