"""What every command gets: where gbatch lives and a connection to the daemon."""

from __future__ import annotations

import os
import pwd
from functools import cached_property

from gbatch.cli.everyday import print_failures as print_failures  # where the commands find it
from gbatch.cli.everyday import split_list as split_list

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from gbatch.core.jobids import Forms, JobTarget
    from gbatch.core.paths import Paths
    from gbatch.protocol.client import Client

# The paths (pathlib) and the client (json) are imported when a command runs, not with
# this module: every command imports it, and `gbatch CMD --help` uses neither.


class Context:
    def __init__(self) -> None:
        from gbatch.core.datadir import socket_file

        # The daemon's socket without pathlib (~3 ms) where it is plain (datadir.socket_file);
        # else the paths now, as ever (which raise here for a home they cannot find).
        self._socket = socket_file(os.environ)
        if self._socket is None:
            self.paths  # noqa: B018  # resolved now: its errors where they always were

    @cached_property
    def paths(self) -> Paths:
        """The calling user's gbatch files (core/paths.resolve_paths)."""
        from gbatch.core.paths import resolve_paths

        return resolve_paths(os.environ)

    @cached_property
    def client(self) -> Client:
        from gbatch.protocol.client import Client

        return Client(self.paths.socket if self._socket is None else self._socket)

    @cached_property
    def me(self) -> str:
        try:
            return pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            return str(os.getuid())


def parse_ids(values: list[str] | None, what: str, forms: Forms | None = None) -> list[str] | None:
    """Job ids as given, checked and written back in canonical form; None when none were given.

    Ids as given: `-j 12,13_2 -j 20_[1-3]`, or JOBID arguments. They are checked by the
    one grammar of gbatch/core/jobids.py for the forms the command takes (`forms`, every
    form by default) and written back in canonical form for the daemon (which checks
    them again). `what` names the command's option or argument in the error (exit 2):
    `gbatch squeue: error: -j/--jobs: '4_5x' is not a job id. Give N, N_K, ...`.
    """
    if not values:
        return None  # before the imports: gbatch.core.jobids loads the model (start-up)
    from gbatch.cli.exits import CliError, Exit
    from gbatch.core.jobids import ANY, JobIdError, parse_job_ids

    try:
        return [str(t) for value in values for t in parse_job_ids(value, forms or ANY)]
    except JobIdError as err:
        raise CliError(f"{what}: {err}", Exit.USAGE) from err


def parse_job(text: str, what: str, forms: Forms | None = None) -> JobTarget:
    """One job, `N` or `N_K` unless `forms` says otherwise; exit 2 for anything else.

    `N` or `N_K` is what logs, seff and scontrol show job take; `forms` (one job) may
    say otherwise. The error names `what` and the forms taken.
    """
    from gbatch.cli.exits import CliError, Exit
    from gbatch.core.jobids import ONE, JobIdError, parse_one_job

    try:
        return parse_one_job(text, forms or ONE)
    except JobIdError as err:
        raise CliError(f"{what}: {err}", Exit.USAGE) from err
