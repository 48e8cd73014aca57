"""What every command gets: where gbatch lives and a connection to the daemon."""

from __future__ import annotations

import os
import pwd
from functools import cached_property

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
