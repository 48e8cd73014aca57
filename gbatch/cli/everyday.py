"""`gbatch squeue`, `gbatch scancel` and `gbatch sbatch`, as most calls write them, on a fast path.

They run without argparse, pathlib, socket or json: with the re, enum, functools and
gettext those load, they were most of these commands' start (bench/bench_startup.py).

everyday() reads a command line only where it reads it exactly as argparse would:
squeue's filters and flags (-u, --me, -j, -n, -p, -w, -t, -a, -h, -r) and layouts (-o,
-O, -l, -S: where render/squeue_layouts draws them), scancel's job ids (no step) with its
filters (-u, --me, -t, -n, -p, -w) and -s of a common name, -b or --full, and sbatch's
`--wrap CMD` or `SCRIPT [ARG...]` with the options people type (-G/--gpus,
--gres=gpu[:TYPE][:N], -t, -J, -p, -q, -o, -e, -c, --mem, -a, -d, -D, -H, --parsable, -Q;
the same in the script's #SBATCH lines: gbatch/cli/everyday_sbatch.py), each option's
value in the next word (one that does not begin with '-'), after '=', or joined to a
short option (`-j5`). Anything else (another option, two options in one word, a value
that begins with '-', gbatch's own options but --debug) is left to argparse
(gbatch/cli/_parser.py), which says what is wrong as ever.
What is read runs as the full path does (squeue.run, scancel.run, sbatch.run with
build_submit's readers) and declines (returns None, before sending) whatever that would
refuse, so that its messages stay the full path's: an unknown user, a job id the grammar
(gbatch/core/jobids.py) refuses, a value an option's reader refuses, a script that is not
a plain file of text, no daemon at the socket. After a request is sent, the client's
errors are raised as gbatch.protocol.client raises them, and squeue -j's "Invalid job id
specified" as squeue's. tests/unit/test_cli_everyday.py and test_sbatch_everyday.py hold
both paths to the same requests, output and errors.
"""

from __future__ import annotations

import os
import sys

# read_options: the words of a line as argparse reads them (a module of its own, which
# everyday_sbatch.py reads too).
from gbatch.cli.everyday_words import read_options
from gbatch.core.constants import (
    CLIENT_TIMEOUT_S,
    MAX_ID_DIGITS,
    MAX_ID_TEXT,
    MAX_REQUEST_BYTES,
)

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Exchange = Callable[[dict[str, Any]], dict[str, Any] | None]

# Each everyday form's options, as squeue's and sbatch's parsers define them: a flag's
# dest, and the dest of an option that takes a value (append: every value, in order).
SQUEUE_FLAGS = {"--me": "me", "-a": "all", "--all": "all", "-h": "noheader"}
SQUEUE_FLAGS |= {"--noheader": "noheader", "-r": "array", "--array": "array"}
SQUEUE_VALUES = {"-u": "user", "--user": "user", "-n": "name", "--name": "name"}
SQUEUE_VALUES |= {"-p": "partition", "--partition": "partition", "-w": "nodelist"}
SQUEUE_VALUES |= {"--nodelist": "nodelist", "-t": "states", "--states": "states"}
SQUEUE_VALUES |= {"-j": "jobs", "--jobs": "jobs"}
SCANCEL_FLAGS = {"--me": "me"}
SCANCEL_VALUES = {"-u": "user", "--user": "user", "-t": "state", "--state": "state"}
SCANCEL_VALUES |= {"-n": "name", "--name": "name", "--jobname": "name", "-p": "partition"}
SCANCEL_VALUES |= {"--partition": "partition", "-w": "nodelist", "--nodelist": "nodelist"}


def everyday(words: list[str]) -> tuple[str, bool, Callable[[], int | None]] | None:
    """(prog, --debug given, the command's run) for an everyday command line; None for others.

    run() returns the exit status, or None to decline (no connection was made):
    argparse's path then runs the same line.
    """
    debug = words[:1] == ["--debug"]
    line = words[1:] if debug else words
    command, rest = (line[0], line[1:]) if line else ("", [])
    if command == "squeue":
        values = read_squeue(rest)
        if values is not None:
            return "gbatch squeue", debug, lambda: run_squeue(values, exchange)
    elif command == "sbatch":
        from gbatch.cli.everyday_sbatch import sbatch_run  # its options: everyday_sbatch.py

        run = sbatch_run(rest, exchange)
        if run is not None:
            return "gbatch sbatch", debug, run
    elif command == "scancel":
        values = read_options(rest, SCANCEL_FLAGS, SCANCEL_VALUES, positional="ids")
        if values is not None:
            return "gbatch scancel", debug, lambda: run_scancel(values, exchange)
    return None


def split_list(values: list[str] | None) -> list[str] | None:
    """Slurm lists: `-u a,b -u c` -> [a, b, c]; None when not given."""
    if not values:
        return None
    return [item for value in values for item in value.split(",") if item]


def node_list(values: list[str] | None, option: str = "-w/--nodelist") -> list[str] | None:
    """-w's host lists as Slurm reads them; None when not given.

    `-w gpu[01-02],cpu7 -w n9` -> gpu01, gpu02, cpu7, n9. CliError (usage) naming
    `option` for a bad list."""
    if not values:
        return None
    if not any("[" in value or "]" in value for value in values):
        return split_list(values)
    from gbatch.cli.exits import CliError, Exit
    from gbatch.core.hostlist import expand  # deferred: a bracket is rare (start-up)

    names: list[str] = []
    for value in values:
        try:
            names.extend(expand(value.strip(",")))
        except ValueError as err:
            raise CliError(
                f"{option}: {err}. Give node names or a host list, e.g. gpu[01-02],cpu7",
                Exit.USAGE,
            ) from err
    return names


def job_ids(values: list[str]) -> list[str] | None:
    """squeue's `-j` values as context.parse_ids reads them, each item in canonical form.

    The same grammar as gbatch.core.jobids' (every form), read without re or the model;
    the items keep their order (`-j 12,13_4 -j 20_[1-3,5-5]` -> [12, 13_4, 20_[1-3,5]];
    `4_5` is task 5 of array 4, never job 45). None for any text that is not a list of
    job ids as the grammar writes them: parse_ids says what is wrong with it, as ever.
    """
    ids: list[str] = []
    for value in values:
        if len(value) > MAX_ID_TEXT:
            return None
        at = 0
        while True:
            job, at = _number(value, at)
            if job is None or job == "0":  # ids start at 1
                return None
            mark = value[at : at + 1]
            if mark == "-":  # FIRST-LAST
                last, at = _number(value, at + 1)
                if last is None or int(last) < int(job):
                    return None
                ids.append(f"{job}-{last}")
            elif mark == "_" and value[at + 1 : at + 2] == "[":  # N_[K-M,J]
                spans, at = _spans(value, at + 2)
                if spans is None:
                    return None
                single = len(spans) == 1 and "-" not in spans[0]
                ids.append(f"{job}_{spans[0]}" if single else f"{job}_[{','.join(spans)}]")
            elif mark == "_":  # N_K
                task, at = _number(value, at + 1)
                if task is None:
                    return None
                ids.append(f"{job}_{task}")
            else:
                ids.append(job)
            if at == len(value):
                break
            if value[at] != ",":
                return None
            at += 1
    return ids


def _number(text: str, at: int) -> tuple[str | None, int]:
    """The number jobids.NUMBER matches at `at` (canonical decimal, 1 to 18 digits, no
    leading zero) and where it ends; None where there is none, or a longer run of digits
    (which the grammar refuses)."""
    end = at
    while end < len(text) and text[end] in "0123456789":
        end += 1
    number = text[at:end]
    if not number or len(number) > MAX_ID_DIGITS or (number[0] == "0" and len(number) > 1):
        return None, at
    return number, end


def _spans(text: str, at: int) -> tuple[list[str] | None, int]:
    """The task spans `K-M,J` from `at` up to and past their `]`, each as the grammar
    writes it back (`3-3` is `3`); None for any other text, or a span that runs
    backwards."""
    spans: list[str] = []
    while True:
        first, at = _number(text, at)
        if first is None:
            return None, at
        span = first
        if text[at : at + 1] == "-":
            last, at = _number(text, at + 1)
            if last is None or int(last) < int(first):
                return None, at
            span = first if last == first else f"{first}-{last}"
        spans.append(span)
        mark = text[at : at + 1]
        at += 1
        if mark == "]":
            return spans, at
        if mark != ",":
            return None, at


def user_name() -> str:
    """The calling user's name (their uid when the system knows no name)."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


# squeue's other layouts and orders (issue 35): where squeue_layouts draws every letter
# and key asked for, as the everyday filters are read (not with -r; squeue._format's
# order: -o, else -O, else -l's layout).
SQUEUE_LAYOUT_FLAGS = {"-l": "long", "--long": "long"}
SQUEUE_LAYOUT_VALUES = {"-o": "format", "--format": "format", "-O": "fields"}
SQUEUE_LAYOUT_VALUES |= {"--Format": "fields", "-S": "sort", "--sort": "sort"}


def join_option_values(argv: list[str]) -> list[str]:
    """squeue's words after its command name, with `-S VALUE` joined into `--sort=VALUE`.

    `--sort VALUE` too. Slurm's getopt takes the next word as -S's value even when it
    starts with '-' (`squeue -S -t,i`), where argparse would read `-t,i` as an option.
    """
    out: list[str] = []
    words = iter(argv)
    for word in words:
        if word == "--":
            out.append(word)
            out.extend(words)
            break
        value = next(words, None) if word in ("-S", "--sort") else None
        out.append(word if value is None else f"--sort={value}")
    return out


def read_squeue(words: list[str]) -> dict[str, Any] | None:
    """squeue's words read as argparse reads them after _main's join_option_values; None for others.

    `--sort=VALUE` may hold a value that begins with '-' (`-S -t,i`), which argparse
    reads as the value it is (not `--`): such a word is read as any other, its value
    put back after (a stand-in no argument can hold, a NUL, while read_options reads)."""
    joined = join_option_values(words)
    held: dict[str, str] = {}
    for at, word in enumerate(joined):
        option, equals, value = word.partition("=")
        if option == "--sort" and equals and value[:1] == "-" and value != "--":
            held[f"\0{at}"] = value
            joined[at] = f"--sort=\0{at}"
    values = read_options(
        joined, SQUEUE_FLAGS | SQUEUE_LAYOUT_FLAGS, SQUEUE_VALUES | SQUEUE_LAYOUT_VALUES
    )
    if values is not None and "sort" in values:
        values["sort"] = [held.get(value, value) for value in values["sort"]]
    return values


def run_squeue(values: dict[str, Any], send: Exchange) -> int | None:
    """squeue.run for its everyday options: the same request, the same table.

    -o, -O, -l and -S too, where squeue_layouts draws every letter and key asked for
    (squeue_layouts.LETTERS, SORT_KEYS), without -r; it declines the others."""
    layout = _squeue_layout(values)
    if layout is None:
        return None
    from gbatch.core.accounts import user_exists

    users = split_list(values.get("user")) or ([user_name()] if values.get("me") else [])
    if not all(map(user_exists, users)):  # squeue._check_user's error to give
        return None
    jobs = job_ids(values["jobs"]) if "jobs" in values else []
    if jobs is None:
        return None
    states = split_list(values.get("states")) or []
    history = "all" in (s.lower() for s in states)
    from gbatch.render.squeue_brief import format_default, list_jobs

    request = list_jobs(
        users=tuple(users),
        jobs=tuple(jobs),
        states=() if history else tuple(states),
        history=history,
        brief=True,
        columns=True,
        names=tuple(split_list(values.get("name")) or ()),
        partitions=tuple(split_list(values.get("partition")) or ()),
        nodes=tuple(split_list(values.get("nodelist")) or ()),
        starts=False,
    )
    reply = send(request)
    if reply is None:
        return None
    header = not values.get("noheader")
    if layout == ():
        out = format_default(
            reply["columns"], reply["now"], header=header, expand=bool(values.get("array"))
        )
    else:
        from gbatch.render.squeue_layouts import format_table

        out = format_table(reply["columns"], reply["now"], *layout, header=header)
    if jobs and not reply["columns"]["id"] and not _check_jobs_exist(jobs, send):
        return None  # no connection made the second time: the full path's to say
    if values.get("long") and header:
        import time

        # Slurm's date line (its ctime form), in the daemon's clock, as squeue._show's.
        out = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(reply["now"])) + "\n" + out
    sys.stdout.write(out)
    return 0


def _squeue_layout(values: dict[str, Any]) -> tuple[Any, ...] | None:
    """squeue's layout and order: () for Slurm's default (squeue_brief.format_default),
    (parts, keys) for format_table; None where render.squeue is to draw them."""
    fmt = values["format"][-1] if "format" in values else None
    fields = values["fields"][-1] if "fields" in values else None
    sort = values["sort"][-1] if "sort" in values else None
    if fmt is None and fields is None and sort is None and not values.get("long"):
        return ()
    if values.get("array"):
        return None  # one row per task in another layout: render.squeue's
    from gbatch.core.constants import SQUEUE_DEFAULT_FORMAT, SQUEUE_DEFAULT_SORT
    from gbatch.render import squeue_layouts

    if fmt is None and fields is not None:  # -o wins over -O, as squeue._format
        fmt = squeue_layouts.fields_format(fields)
        if fmt is None:
            return None
    if fmt is None and values.get("long"):
        from gbatch.core.constants import SQUEUE_LONG_FORMAT

        fmt = SQUEUE_LONG_FORMAT
    parts = squeue_layouts.parse_format(fmt if fmt is not None else SQUEUE_DEFAULT_FORMAT)
    keys = squeue_layouts.parse_sort(sort if sort is not None else SQUEUE_DEFAULT_SORT)
    if parts is None or keys is None:
        return None
    return parts, keys


# scancel -s, -b and --full (issue 35). -s's names read here (with or without SIG, any
# case): the common ones, each one that core.signals.parse_signal_name reads too; a
# number or another name is its to read.
SCANCEL_FLAGS |= {"-b": "batch", "--batch": "batch", "-f": "full", "--full": "full"}
SCANCEL_VALUES |= {"-s": "signal", "--signal": "signal"}
SIGNAL_NAMES = frozenset(
    {"HUP", "INT", "QUIT", "ABRT", "KILL", "USR1", "USR2", "TERM", "CONT", "STOP", "TSTP"}
)


def run_scancel(values: dict[str, Any], send: Exchange) -> int | None:
    """scancel.run for job ids (no steps) and its filters: the same request, lines, status.

    With -s SIG of a common name (SIGNAL_NAMES), -b or --full (not both); None declines,
    as everyday's run()."""
    words = values.get("ids", [])
    if any("." in word for word in words):  # a step: split_steps' grammar to read
        return None
    signal = values["signal"][-1] if "signal" in values else None
    if signal is not None and not _common_signal(signal):
        return None  # parse_signal_name's to read (or refuse)
    if values.get("batch") and values.get("full"):
        return None  # scancel's usage error to give
    jobs = job_ids(words) if words else []
    if jobs is None:
        return None
    users = split_list(values.get("user")) or ([user_name()] if values.get("me") else [])
    states = split_list(values.get("state")) or []
    names = split_list(values.get("name")) or []
    partitions = split_list(values.get("partition")) or []
    nodes = node_list(values.get("nodelist")) or []
    if not (jobs or users or states or names or partitions or nodes):
        return None  # scancel's usage error to give
    request: dict[str, Any] = {
        "op": "cancel",
        "jobs": jobs,
        "users": users,
        "states": states,
        "names": names,
        "partitions": partitions,
        "nodes": nodes,
    }
    if signal is not None:
        request["signal"] = signal
    if values.get("batch"):
        request["batch"] = True
    if values.get("full"):
        request["full"] = True
    reply = send(request)
    if reply is None:
        return None
    return 1 if print_failures("scancel", reply, scancel_failure_line) else 0


def _common_signal(text: str) -> bool:
    """Whether `text` names one of SIGNAL_NAMES as parse_signal_name reads names."""
    name = text.strip().upper()
    return name.isascii() and name.removeprefix("SIG") in SIGNAL_NAMES


def scancel_failure_line(failure: dict[str, Any]) -> str:
    """Slurm's line for one failure: `Kill job error on job (step) id ID: ERROR`."""
    target = str(failure["id"])
    kind = "job step id" if "." in target else "job id"
    return f"Kill job error on {kind} {target}: {failure['error']}"


def print_failures(
    command: str, reply: dict[str, Any], line: Callable[[dict[str, Any]], str]
) -> bool:
    """Print one `gbatch <command>: error: ...` line per failure a bulk reply lists.

    A last line says how many more it only counted, if any. True when anything failed.
    """
    listed = reply["results"]
    for failure in listed:
        print(f"gbatch {command}: error: {line(failure)}", file=sys.stderr)
    more = int(reply.get("failed", len(listed))) - len(listed)
    if more > 0:
        print(f"gbatch {command}: error: and {more:,} more jobs failed", file=sys.stderr)
    return bool(listed) or more > 0


def _check_jobs_exist(jobs: list[str], send: Exchange) -> bool:
    """squeue._check_jobs_exist, for -j and an empty listing: Slurm's error (exit 1)
    when none of `jobs` exists in any state; True when one does (the listing's filters
    left it out: the empty table is the answer). False: no connection was made."""
    from gbatch.render.squeue_brief import list_jobs

    known = send(list_jobs(jobs=tuple(jobs), history=True, brief=True))
    if known is None:
        return False
    if not known["jobs"]:
        from gbatch.cli.exits import CliError, Exit

        raise CliError(f"Invalid job id specified: {','.join(jobs)}", Exit.FAILED)
    return True


def exchange(request: dict[str, Any]) -> dict[str, Any] | None:
    """Send `request` to gbatchd and return its reply; None when no connection was made.

    The same as Client(resolve_paths(os.environ).socket).send(request), on one
    connection made without socket.py or json. None means nothing was sent: the full
    path connects again, and waits out a busy daemon or says why it could not.
    """
    from gbatch.core.datadir import socket_file  # the user's data dir too: no GBATCH_HOME

    path = socket_file(os.environ)
    if path is None:
        return None
    from _socket import AF_UNIX, SOCK_STREAM, socket

    from gbatch.protocol.jsonline import dumps, loads

    payload = dumps(request).encode() + b"\n"
    if len(payload) > MAX_REQUEST_BYTES + 1:
        return None  # the client's own refusal
    sock = socket(AF_UNIX, SOCK_STREAM)
    try:
        sock.settimeout(CLIENT_TIMEOUT_S)
        try:
            sock.connect(path)
        except OSError:
            return None
        line = _reply_line(sock, payload)
    finally:
        sock.close()
    reply: dict[str, Any] = loads(line)
    if not reply.pop("ok", False):
        from gbatch.protocol.client import _refusal

        raise _refusal(reply)
    return reply


def _reply_line(sock: Any, payload: bytes) -> bytes:
    """Client._exchange's send and read, and its errors, once connected."""
    try:
        try:
            sock.sendall(payload)
        except (BrokenPipeError, ConnectionResetError) as err:
            # gbatchd may answer before it has read the whole request (one it will not
            # serve) and close: that answer is waiting to be read.
            line = _read_line(sock)
            if not line:
                raise err from None
        else:
            line = _read_line(sock)
    except TimeoutError as err:
        from gbatch.protocol.client import ReplyTimeout

        raise ReplyTimeout(_socket_file(), CLIENT_TIMEOUT_S) from err
    except OSError as err:
        from gbatch.protocol.client import DaemonUnavailable

        raise DaemonUnavailable(_socket_file(), f"connection lost: {err}") from err
    if not line:
        from gbatch.protocol.client import DaemonUnavailable

        raise DaemonUnavailable(_socket_file(), "the daemon closed the connection")
    if not line.endswith(b"\n"):  # gbatchd ends every reply's line
        from gbatch.protocol.client import DaemonUnavailable

        raise DaemonUnavailable(
            _socket_file(), "the daemon closed the connection before its reply's end"
        )
    return line


def _read_line(sock: Any) -> bytes:
    """Up to and with the first newline, or all until the daemon closes (readline's)."""
    chunks: list[bytes] = []
    while True:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[: end + 1])
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _socket_file() -> Any:
    """The socket as the client names it in its errors (a Path)."""
    from gbatch.core.paths import resolve_paths

    return resolve_paths(os.environ).socket
