"""`gbatch completion bash|zsh|fish`: each script, loaded in its real shell, completes
what the parsers define (commands, every option, choices, files) and what gbatch
answers (partitions, nodes, your job ids) from a stand-in `gbatch` on PATH; with no
daemon it offers nothing and prints nothing. tests/integration/test_shell_help.py asks
a real daemon, from a fresh install."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest
from shellcomplete import COMPLETERS, bash_words, complete_bash, complete_lines, items

from gbatch.cli import completion
from gbatch.cli._parser import COMMANDS, build_parser

SHELLS = list(COMPLETERS)
# The stand-in answers the three questions the scripts ask, as gbatch would: one line
# per job (its array's id, then its own: a pending array's tasks in brackets), one per
# partition and state, one per node.
ANSWERING = """#!/bin/sh
case "$*" in
"squeue --me -h -o %A %i") printf '12 12\\n13 13_[1-3]\\n14 14_2\\n' ;;
"sinfo -h -o %R") printf 'gpu\\ngpu\\ncpu\\n' ;;
"sinfo -h -N -o %N") printf 'node01\\nnode02\\n' ;;
*) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""
NO_DAEMON = """#!/bin/sh
echo "gbatch: error: no gbatch daemon answers at /nowhere. Start one" >&2
exit 3
"""
JOBS = {"12", "13", "14", "14_2"}


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser(None, every=True)
    found = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(found.choices)


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("scripts")
    made = {}
    for shell in SHELLS:
        made[shell] = folder / f"gbatch.{shell}"
        made[shell].write_text(completion.script(shell))
    return made


def _home(tmp_path: Path, stand_in: str) -> dict[str, str]:
    """An environment whose `gbatch` is `stand_in`, with a home in tmp_path holding a
    job script and a data directory to complete."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gbatch = bin_dir / "gbatch"
    gbatch.write_text(stand_in)
    gbatch.chmod(0o755)
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "job.sh").write_text("#!/bin/sh\ntrue\n")
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(home), "TERM": "dumb"}


@pytest.fixture
def answering(tmp_path: Path) -> dict[str, str]:
    return _home(tmp_path, ANSWERING)


Complete = Callable[[dict[str, set[str]]], dict[str, set[str]]]


@pytest.fixture(params=SHELLS)
def complete(
    request: pytest.FixtureRequest, scripts: dict[str, Path], answering: dict[str, str]
) -> Complete:
    """complete({LINE: expected}): {LINE: the values the shell offers for LINE's last
    word}, the lines asked in one go; the shell printed nothing else."""
    shell = request.param

    def run(expected: dict[str, set[str]]) -> dict[str, set[str]]:
        lines = list(expected)
        found = {}
        for line, (candidates, noise) in zip(
            lines, complete_lines(shell, scripts[shell], lines, answering), strict=True
        ):
            assert noise == "", f"{shell}: {line!r} printed {noise!r}"
            found[line] = items(candidates)
        return found

    return run


def _offered(complete: Complete, expected: dict[str, set[str]]) -> None:
    assert complete(expected) == expected


def test_the_command_word_completes_to_every_command(complete: Complete) -> None:
    _offered(
        complete,
        {"gbatch ": set(COMMANDS), "gbatch sb": {"sbatch"}, "gbatch --debug sq": {"squeue"}},
    )


def test_each_command_completes_every_option_its_parser_defines(complete: Complete) -> None:
    expected = {}
    for name, parser in _subparsers().items():
        # What --help lists: an option hidden from it (sbatch's --exclusive=user) is not offered.
        flags = {
            flag
            for action in parser._actions
            if action.help != argparse.SUPPRESS
            for flag in action.option_strings
        }
        expected[f"gbatch {name} --"] = {flag for flag in flags if flag.startswith("--")}
    _offered(complete, expected)


def test_fixed_choices_complete(complete: Complete) -> None:
    _offered(
        complete,
        {
            "gbatch scontrol ": {
                "show",
                "hold",
                "release",
                "requeue",
                "update",
                "create",
                "delete",
            },
            "gbatch scontrol show ": {"job", "node", "partition"},
            "gbatch daemon st": {"start", "stop", "status"},
            "gbatch completion ": {"bash", "zsh", "fish"},
        },
    )


def test_job_ids_are_the_users_own_with_an_arrays_id_for_its_pending_tasks(
    complete: Complete,
) -> None:
    _offered(
        complete,
        {
            "gbatch scancel ": JOBS,
            "gbatch scontrol show job ": JOBS,
            "gbatch seff 1": JOBS,
            "gbatch squeue -j 14_": {"14_2"},
            "gbatch scontrol hold 12,14_": {"14_2"},  # a comma list's next item
        },
    )


def test_partitions_and_nodes_come_from_sinfo(complete: Complete) -> None:
    _offered(
        complete,
        {
            "gbatch squeue -p ": {"gpu", "cpu"},
            "gbatch sbatch --partition=g": {"gpu"},
            "gbatch sinfo -p gpu,c": {"cpu"},
            "gbatch scontrol show partition ": {"gpu", "cpu"},
            "gbatch node drain ": {"node01", "node02"},
            "gbatch squeue --nodelist node0": {"node01", "node02"},
        },
    )


def test_files_where_a_file_is_asked_for_and_nothing_for_free_text(complete: Complete) -> None:
    _offered(
        complete,
        {
            "gbatch sbatch jo": {"job.sh"},
            "gbatch sbatch -D da": {"data"},
            "gbatch sbatch -o jo": {"job.sh"},
            "gbatch sbatch --time ": set(),
            "gbatch sbatch job.sh --part": set(),  # after a script, its own words
        },
    )
    # squeue takes no arguments (zsh offers the options instead: no files either).
    assert "job.sh" not in complete({"gbatch squeue ": set()})["gbatch squeue "]
    assert "--partition" in complete({"gbatch sbatch --part": set()})["gbatch sbatch --part"]


@pytest.mark.parametrize("shell", SHELLS)
def test_with_no_daemon_there_are_no_candidates_and_nothing_is_printed(
    tmp_path: Path, scripts: dict[str, Path], shell: str
) -> None:
    env = _home(tmp_path, NO_DAEMON)
    lines = ["gbatch scancel ", "gbatch squeue -p ", "gbatch node drain "]
    assert complete_lines(shell, scripts[shell], lines, env) == [([], "")] * len(lines)


def test_bash_asks_the_gbatch_being_completed_when_named_by_its_path(
    tmp_path: Path, scripts: dict[str, Path]
) -> None:
    env = _home(tmp_path, ANSWERING)
    stand_in = Path(env["PATH"].split(":")[0]) / "gbatch"
    env["PATH"] = "/usr/bin:/bin"  # no gbatch there
    candidates, _ = complete_bash(scripts["bash"], f"{stand_in} scancel ", env)
    assert set(candidates) == JOBS


def test_zsh_loads_the_script_from_fpath_as_a_completion_function(tmp_path: Path) -> None:
    """`gbatch completion zsh > DIR/_gbatch` with DIR on $fpath: compinit finds it."""
    env = _home(tmp_path, ANSWERING)
    function = tmp_path / "functions" / "_gbatch"
    function.parent.mkdir()
    function.write_text(completion.script("zsh"))
    lines = ["gbatch sb", "gbatch scancel "]
    found = complete_lines("zsh", function, lines, env)
    assert [items(candidates) for candidates, _ in found] == [{"sbatch"}, JOBS]


def test_bash_words_split_as_readline_splits_them() -> None:
    assert bash_words("gbatch squeue --partition=gp") == [
        "gbatch",
        "squeue",
        "--partition",
        "=",
        "gp",
    ]
    assert bash_words("gbatch squeue --partition=") == ["gbatch", "squeue", "--partition", "="]
    assert bash_words("gbatch ") == ["gbatch", ""]


def test_scontrols_words_are_actions_its_parser_takes() -> None:
    """The scripts know scontrol's grammar after its action (show's subjects, the
    actions that take job ids): those actions must be the parser's."""
    actions = next(a for a in _subparsers()["scontrol"]._actions if a.dest == "action")
    assert {"show", "hold", "release", "requeue"} <= set(actions.choices or ())


def test_the_dynamic_questions_are_command_lines_gbatch_takes() -> None:
    """`squeue --me -h -o '%A %i'`, `sinfo -h -o %R`, `sinfo -h -N -o %N`: every
    script asks these, and gbatch's parsers read them."""
    for words in (
        ["squeue", "--me", "-h", "-o", "%A %i"],
        ["sinfo", "-h", "-o", "%R"],
        ["sinfo", "-h", "-N", "-o", "%N"],
    ):
        args = build_parser(words[0]).parse_args(words)
        assert args.noheader
    for shell in SHELLS:
        text = completion.script(shell)
        assert "squeue --me -h -o '%A %i'" in text and "sinfo -h -N -o '%N'" in text, shell


def test_the_docs_show_the_lines_completions_help_shows() -> None:
    shown = (Path(__file__).resolve().parents[2] / "docs" / "shell.md").read_text()
    for line in completion.EPILOG.splitlines():
        if "gbatch completion" in line:
            command = line.split(":  ")[-1].split("#")[0].strip()
            assert command in shown, command


def test_completion_help_says_how_to_load_each_shells_script(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser("completion").parse_args(["completion", "--help"])
    shown = capsys.readouterr().out
    assert "source <(gbatch completion bash)" in shown
    assert "gbatch completion fish | source" in shown
    assert "docs/shell.md" in shown
