"""Start-up is a feature: each command imports what it uses and nothing else.

Every command is run in a fresh interpreter with no daemon to answer (the work up to the
request is done: parsing, checking, building the request), then its sys.modules is read.
bench/bench_startup.py times the same paths whole-process.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import gbatch
from gbatch.cli.commandlist import COMMANDS
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.protocol import listings

SOURCE = str(Path(gbatch.__file__).resolve().parents[1])

# paramiko stands for the whole SSH stack: it pulls cryptography, bcrypt, nacl and invoke.
HEAVY = {"textual", "paramiko", "yaml", "pynvml", "platformdirs", "cryptography"}
# The HTTP API's web stack and the tokens' JWT library: `gbatch api serve` and the
# daemon alone load them (prometheus_client: its /metrics, only when scraped).
HEAVY |= {"starlette", "uvicorn", "anyio", "jwt", "prometheus_client", "jinja2"}
# The daemon's side, and what only it reads (config.yaml and the site's policy).
HEAD_ONLY = {"gbatch.head", "gbatch.nodes", "gbatch.site.config", "gbatch.site.policy"}
# The planner's types (NodeView, Assignment, Plan): three dataclasses (1.7 ms) no command
# builds, out of gbatch/core/model.py.
HEAD_ONLY |= {"gbatch.core.plan"}
# What main() imports beyond what the interpreter had loaded at start (site, and in a
# virtual environment its import hooks), one name a line.
PROBE = """
import sys
before = set(sys.modules)
from gbatch.cli._main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("MODULES", *sorted(set(sys.modules) - before))
"""

# One everyday invocation of each command (no daemon: the request is built, then refused).
RUNS = {
    "sbatch": ["sbatch", "--wrap", "true"],
    "srun": ["srun", "-t", "5", "true"],
    "salloc": ["salloc", "-t", "5", "true"],
    "shell": ["shell", "1", "true"],
    "sattach": ["sattach", "1"],
    "port-forward": ["port-forward", "1", "8888"],
    "squeue": ["squeue"],
    "scancel": ["scancel", "1"],
    "sinfo": ["sinfo"],
    "sacct": ["sacct"],
    "sshare": ["sshare"],
    "sprio": ["sprio"],
    "seff": ["seff", "1"],
    "sreport": ["sreport"],
    "scontrol": ["scontrol", "show", "job", "1"],
    "logs": ["logs", "1"],
    "tui": ["tui"],  # refuses without a terminal, before textual is imported
    "node": ["node", "list"],
    "daemon": ["daemon", "status"],
    "api": ["api", "openapi"],
    "token": ["token", "--lifespan", "2h", "--scope", "read"],
    "cluster": ["cluster", "status"],
    "mcp": ["mcp", "serve"],  # stdin is empty: it answers nothing and ends
    "completion": ["completion", "bash"],
}
# Commands made from every command's parser: they import every command (but --help).
READS_EVERY_COMMAND = {"completion"}


def loaded_by(argv: list[str], home: object, *flags: str, home_is: str = "GBATCH_HOME") -> set[str]:
    """What `gbatch ARGV` imports; `flags`: the interpreter's (-S: without site, whose
    import hooks, an editable install's, load pathlib and re before gbatch starts).
    `home_is`: the variable `home` is given as (HOME: no GBATCH_HOME, the user's data
    dir under it)."""
    result = subprocess.run(
        [sys.executable, *flags, "-c", PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,  # `mcp serve` reads its client from stdin
        # The gbatch under test, not whichever one the interpreter has installed.
        env={home_is: str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCE},
    )
    listed = [line for line in result.stdout.splitlines() if line.startswith("MODULES")]
    assert listed, result.stderr
    return set(listed[-1].split()[1:])


def within(modules: set[str], packages: set[str]) -> list[str]:
    """The modules that are one of `packages` or inside one."""
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_every_command_has_an_invocation_here() -> None:
    assert set(RUNS) == set(COMMANDS)


@pytest.mark.parametrize("help_flag", [False, True], ids=["run", "help"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_command_imports_no_other_command_nor_a_heavy_library(
    tmp_path: object, command: str, help_flag: bool
) -> None:
    argv = [command, "--help"] if help_flag else RUNS[command]
    loaded = loaded_by(argv, tmp_path)
    others = {f"gbatch.cli.{name.replace('-', '_')}" for name in COMMANDS if name != command}
    if help_flag or command not in READS_EVERY_COMMAND:
        assert within(loaded, others) == [], f"gbatch {' '.join(argv)}: other commands"
    assert within(loaded, HEAVY) == [], f"gbatch {' '.join(argv)}: heavy libraries"
    assert within(loaded, HEAD_ONLY) == [], f"gbatch {' '.join(argv)}: the daemon's modules"


def test_help_imports_argparse_and_the_entry_point_alone(tmp_path: object) -> None:
    loaded = loaded_by(["--help"], tmp_path)
    gbatch = within(loaded, {"gbatch"})
    assert gbatch == [
        "gbatch",
        "gbatch.cli",
        "gbatch.cli._main",
        "gbatch.cli._parser",
        "gbatch.cli.commandlist",
    ]
    # No socket, no JSON, no files: nothing is sent and nothing is read. No textwrap:
    # the help lines wrap without it (_parser.split_help_lines), 80 columns here.
    unused = {"socket", "json", "pathlib", "dataclasses", "shutil", "textwrap"}
    assert within(loaded, unused) == []
    assert "typing" not in loaded  # a module for type checkers (2 ms)


# What a command's --help needs: its parser. Not the submit's builder (jobspec.submit, with
# dataclasses, inspect and ast: `sbatch --help` took 10 ms more from 50f1f92 on, when
# cli/sbatch.py imported it at start), the model, the client (socket, json) and the
# paths (pathlib, urllib.parse), which cli/context.py imports when a command runs.
NOT_FOR_HELP = {"gbatch.jobspec.submit", "dataclasses", "inspect", "ast", "gbatch.core.model"}
NOT_FOR_HELP |= {"gbatch.protocol.client", "gbatch.core.paths", "socket", "json", "pathlib"}
NOT_FOR_HELP |= {"typing"}  # only under TYPE_CHECKING in gbatch/cli (2 ms)
# What a command's parser itself reads (its choices, its defaults, a file's path):
HELP_READS = {
    "srun": {"gbatch.protocol.client", "gbatch.core.paths", "socket", "json", "pathlib"},
    "daemon": {"gbatch.protocol.client", "gbatch.core.paths", "socket", "json", "pathlib"},
    "api": {"socket", "json"},
    "port-forward": {"socket"},
    "completion": {"pathlib"},  # its shells' scripts, next to it
    "scontrol": {"gbatch.protocol.requests", "inspect", "ast", "typing"},  # UPDATE_KEYS
}
for _interactive in ("salloc", "shell", "sattach"):  # srun's step client
    HELP_READS[_interactive] = HELP_READS["srun"]


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_commands_help_imports_its_parser_and_not_what_running_it_needs(
    tmp_path: Path, command: str
) -> None:
    loaded = loaded_by([command, "--help"], tmp_path, "-S")  # -S: nothing loaded before
    assert within(loaded, NOT_FOR_HELP - HELP_READS.get(command, set())) == []


@pytest.mark.parametrize(
    "argv",
    [["sinfo"], ["sacct"], ["sbatch", "-H", "--gpus", "1", "--wrap", "true"], ["squeue", "-l"]],
)
def test_without_gbatch_home_a_command_finds_the_users_data_dir_without_platformdirs(
    tmp_path: Path, argv: list[str]
) -> None:
    """The default home (no GBATCH_HOME: the user's data dir, what most users run with)
    is found without importing platformdirs (7 ms): core/paths.user_data_dir."""
    loaded = loaded_by(argv, tmp_path, home_is="HOME")
    assert within(loaded, {"platformdirs"}) == []


@pytest.mark.parametrize(
    "argv", [["sacct"], ["scontrol", "show", "job", "1"], ["squeue", "-l"]], ids=" ".join
)
def test_a_listing_shows_the_default_qos_without_the_qos_rules(
    tmp_path: Path, argv: list[str]
) -> None:
    """The listings print `normal` for a job that names no QOS: the name is in
    core/constants.py, not core/qos.py with the limits it loads (~3 ms)."""
    loaded = loaded_by(argv, tmp_path)
    assert within(loaded, {"gbatch.core.qos", "gbatch.core.limits"}) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["sinfo"],
        ["sacct"],
        ["scontrol", "show", "job", "1"],
        ["sbatch", "-H", "--gpus", "1", "--wrap", "true"],
        ["sshare"],
        ["sprio"],
        ["seff", "1"],
        ["sreport"],
        ["logs", "1"],
    ],
    ids=" ".join,
)
def test_a_command_on_the_full_path_runs_without_typing(tmp_path: Path, argv: list[str]) -> None:
    """typing (2-3 ms) is for type checkers: the requests (requests.type_hints for the
    daemon's decoder), the codec, the renderers and the job-spec builder import it under
    TYPE_CHECKING alone. (No daemon answers: the command is built up to its request.)"""
    assert "typing" not in loaded_by(argv, tmp_path, "-S")  # -S: nothing loaded before


@pytest.mark.parametrize(
    "argv",
    [
        ["sinfo"],
        ["sacct"],
        ["scontrol", "show", "job", "1"],
        ["sshare"],
        ["sprio"],
        ["sreport"],
        ["logs", "1"],
    ],
    ids=" ".join,
)
def test_the_client_connects_without_socket_py_nor_pathlib(tmp_path: Path, argv: list[str]) -> None:
    """protocol/client.py speaks on _socket, socket.py's C core: socket.py's enums,
    selectors and makefile are ~2 ms of a start (client._Lines reads the replies). The
    socket's path is found without pathlib (with urllib.parse, ~3 ms): datadir.socket_file."""
    loaded = loaded_by(argv, tmp_path, "-S")  # -S: nothing loaded before
    assert "gbatch.protocol.client" in loaded
    assert within(loaded, {"socket", "selectors", "pathlib", "urllib"}) == []


# What squeue's everyday listing (gbatch/render/squeue_brief.py) must not import: the model's
# dataclasses and what they load (dataclasses, inspect), the request types and the Job
# decoders (requests, codec, listings), squeue's full renderer (render.squeue and its
# cells), and the job-id grammar (jobids, arrays) that needs the model.
NOT_EVERYDAY = {
    "dataclasses",
    "inspect",
    "gbatch.core.model",
    "gbatch.protocol.requests",
    "gbatch.protocol.codec",
    "gbatch.protocol.listings",
    "gbatch.render.cells",
    "gbatch.render.squeue",
}
NOT_EVERYDAY |= {"gbatch.core.jobids", "gbatch.core.arrays"}
# typing, a module for type checkers (2 ms): the entry point, the client and these two
# commands read it only under TYPE_CHECKING.
NOT_EVERYDAY |= {"typing"}


@contextlib.contextmanager
def answering_daemon(home: Path, reply: dict[str, object]) -> Iterator[list[bytes]]:
    """A stand-in gbatchd on home's socket that answers each request line with `reply`;
    yields the request lines it read."""
    heard: list[bytes] = []
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(home / "gbatchd.sock"))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed: the test is over
            with conn, conn.makefile("rb") as lines:
                for line in lines:
                    heard.append(line)
                    conn.sendall(json.dumps({"ok": True, **reply}).encode() + b"\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield heard
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(timeout=10)


def _listing(jobs: list[Job]) -> dict[str, object]:
    return {"columns": listings.jobs_to_columns(jobs), "now": 1_800_000_000.0}


def _job(job_id: int, spec: JobSpec) -> Job:
    return Job(
        id=job_id, uid=1000, user="alice", spec=spec, state=JobState.PENDING, submit_time=1.0
    )


def test_squeue_lists_a_queue_without_the_model_nor_its_formatter(tmp_path: Path) -> None:
    queue = [_job(i, JobSpec(name="train", command=("true",))) for i in (1, 2)]
    with answering_daemon(tmp_path, _listing(queue)) as heard:
        loaded = loaded_by(["squeue", "-u", "root", "-t", "PD"], tmp_path)
    assert heard, "squeue sent no request"
    assert within(loaded, NOT_EVERYDAY) == []
    # sbatch's spec, sshare's limits, sacct's and seff's GPU usage, the output files'
    # names, sprio's views; and shutil, which argparse loads for the terminal's width.
    unused = {
        "gbatch.jobspec.spec",
        "gbatch.core.limits",
        "gbatch.core.gpuusage",
        "gbatch.core.outputs",
    }
    assert within(loaded, unused | {"gbatch.core.views", "gbatch.jobspec.sweep", "shutil"}) == []


def test_sbatch_wrap_queues_without_the_model_nor_the_job_validation(tmp_path: Path) -> None:
    with answering_daemon(tmp_path, {"ids": [7]}) as heard:
        loaded = loaded_by(["sbatch", "-H", "--wrap", "true"], tmp_path)
    assert json.loads(heard[0])["op"] == "submit"
    batch = {
        "gbatch.jobspec.spec",
        "gbatch.jobspec.batchscript",
        "gbatch.jobspec.sweep",
        "gbatch.core.outputs",
    }
    assert within(loaded, NOT_EVERYDAY | batch | {"shlex"}) == []


# What the everyday command lines (gbatch/cli/everyday.py) do without: argparse, and the
# re, enum, functools and gettext it loads; pathlib (with urllib.parse and ipaddress),
# socket.py and json; gbatch's client and paths, which load them.
NOT_LEAN = {"argparse", "re", "enum", "functools", "gettext", "locale", "pathlib", "socket"}
NOT_LEAN |= {
    "json",
    "collections",
    "gbatch.protocol.client",
    "gbatch.core.paths",
    "gbatch.cli.exits",
}
NOT_LEAN |= {"gbatch.cli.squeue", "gbatch.cli.sbatch", "gbatch.cli.context", "typing"}
NOT_LEAN |= {"gbatch.cli.scancel", "gbatch.core.jobids", "gbatch.core.model"}


@pytest.mark.parametrize(
    "argv",
    [
        ["squeue"],
        ["squeue", "-u", "root", "--states=PD,R", "-h"],
        ["squeue", "-j5"],
        ["squeue", "--jobs", "12,13_4,14_[1-3]", "-t", "all"],
        ["sbatch", "--wrap", "true"],
        ["--debug", "sbatch", "-H", "--parsable", "--wrap=python train.py"],
        ["sbatch", "--gpus", "1", "--wrap", "sleep 0.5"],
        ["sbatch", "--gres=gpu:1", "-J", "x", "-p", "gpu", "--wrap", "true"],
        ["squeue", "-r", "-u", "root"],
        ["scancel", "12", "13_4,14_[1-3]"],
        ["scancel", "-u", "root", "-t", "PD", "--me"],
    ],
)
def test_everyday_command_lines_import_neither_argparse_nor_json_nor_pathlib(
    tmp_path: Path, argv: list[str]
) -> None:
    reply = _listing([]) if "squeue" in argv else {"ids": [7]}
    if "scancel" in argv:
        reply = {"results": [], "failed": 0, "done": 1}
    if "squeue" in argv and len(argv) > 1 and argv[1].startswith(("-j", "--jobs")):
        reply = _listing([_job(5, JobSpec(name="train", command=("true",)))])
    with answering_daemon(tmp_path, reply) as heard:
        loaded = loaded_by(argv, tmp_path, "-S")  # -S: nothing loaded before gbatch
    assert heard, f"gbatch {' '.join(argv)} sent no request"
    assert "gbatch.cli.everyday" in loaded
    assert within(loaded, NOT_LEAN) == []


def test_sbatch_takes_the_full_path_for_any_other_option(tmp_path: Path) -> None:
    with answering_daemon(tmp_path, {"ids": [7]}):
        loaded = loaded_by(["sbatch", "-H", "-w", "n1", "--wrap", "true"], tmp_path)
    assert {"gbatch.jobspec.spec", "gbatch.protocol.requests", "gbatch.core.model"} <= loaded


@pytest.mark.parametrize(
    "lines",
    [
        "#SBATCH -J train --gres=gpu:1\n#SBATCH -p gpu -c 4\n#SBATCH --parsable\n",
        "#SBATCH --gpus=a100:1 -t 1:00:00 --mem=16G\n#SBATCH -o logs/%x-%j.out -a 0-3\n",
    ],
    ids=["plain", "every-reader"],
)
def test_sbatch_queues_a_batch_script_on_the_everyday_path(tmp_path: Path, lines: str) -> None:
    """`sbatch job.sh ARG` with #SBATCH lines: no argparse, model, dataclasses, json,
    pathlib or socket; and with plain lines (names, counts) not even re."""
    (tmp_path / "logs").mkdir()
    script = tmp_path / "job.sh"
    lines = lines.replace("logs/", f"{tmp_path}/logs/")  # where `gbatch` runs: not here
    script.write_text(f"#!/bin/bash\n{lines}\npython train.py $1\n")
    with answering_daemon(tmp_path, {"ids": [7]}) as heard:
        loaded = loaded_by(["sbatch", str(script), "input.csv"], tmp_path, "-S")
    assert heard, "sbatch sent no request"
    assert json.loads(heard[0])["spec"]["command"][-1] == "input.csv"
    assert "gbatch.cli.everyday_sbatch" in loaded
    lean = NOT_LEAN - ({"re", "enum", "functools", "collections"} if "-t" in lines else set())
    assert within(loaded, lean | NOT_EVERYDAY | {"dataclasses", "shlex"}) == []


def test_squeue_folds_array_tasks_lean_and_takes_the_full_formatter_for_other_layouts(
    tmp_path: Path,
) -> None:
    task = _job(7, JobSpec(name="sweep", command=("true",), array_task=2, array_pos=0))
    with answering_daemon(tmp_path, _listing([task])):
        folded = loaded_by(["squeue", "-j", "7_2"], tmp_path)
        # The usual other layouts and orders are drawn lean too (issue 35) ...
        lean = [
            loaded_by(words, tmp_path)
            for words in (
                ["squeue", "-l"],
                ["squeue", "-o", "%.7i %.9T %R", "-S", "-t,i"],
                ["squeue", "-O", "JobID,State,TimeLeft", "--sort=-p"],
            )
        ]
        # ... but not letters a listing's columns do not hold (%C: whole specs).
        full = loaded_by(["squeue", "-o", "%i %C"], tmp_path)
    assert "gbatch.cli.everyday" in folded
    assert within(folded, NOT_LEAN | NOT_EVERYDAY) == []
    for loaded in lean:
        assert within(loaded, NOT_LEAN | NOT_EVERYDAY) == []
    assert {"gbatch.render.squeue", "gbatch.protocol.listings"} <= full


def test_each_command_in_the_list_is_a_module_whose_parser_shows_its_help_line() -> None:
    """`gbatch --help` lists the commands from commandlist.COMMANDS without importing
    them: each entry must name a module under gbatch/cli/ whose own sub-parser shows
    that same line (its HELP is read from the list, the one source)."""
    from gbatch.cli._parser import build_parser

    parser = build_parser(None, every=True)
    shown = {a.dest: a.help for a in parser._subparsers._group_actions[0]._choices_actions}  # type: ignore[union-attr]
    assert shown == COMMANDS


def test_the_model_every_command_imports_builds_no_planner_type() -> None:
    """NodeView, Assignment and Plan are the daemon's (gbatch/core/plan.py): each
    dataclass in gbatch/core/model.py is built (its methods exec'd) at every start."""
    from gbatch.core import model

    assert {"NodeView", "Assignment", "Plan"}.isdisjoint(vars(model))


def test_the_users_data_dir_is_found_with_os_and_sys_alone() -> None:
    """gbatch/core/datadir.py is a leaf (os, sys, core/constants) that the everyday
    lines (no pathlib) may use."""
    probe = (
        "import sys; b = set(sys.modules); import gbatch.core.datadir; print(*set(sys.modules) - b)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": SOURCE},
    )
    loaded = set(done.stdout.split())
    gbatch = ["gbatch", "gbatch.core", "gbatch.core.constants", "gbatch.core.datadir"]
    assert within(loaded, {"gbatch"}) == gbatch
    assert within(loaded, {"pathlib", "re", "platformdirs", "typing"}) == []
