"""Slurm batch scripts read as Slurm reads them: a #! line, #SBATCH lines up to the
first command, the script run whole by its interpreter."""

from __future__ import annotations

import subprocess

import pytest

from gbatch.jobspec.batchscript import ScriptError, looks_like_script, parse_script

SCRIPT = """#!/bin/bash
# a comment before the directives
#SBATCH --job-name=train   # an inline comment
#SBATCH --gres=gpu:2 -t 1:00:00

#SBATCHx --ignored (not a directive)
#SBATCH -D "/data/my runs"
echo "$0 $1 $2"
#SBATCH --gpus=8
"""


def test_directives_are_read_up_to_the_first_command() -> None:
    script = parse_script(SCRIPT, "job.sh")
    assert [(d.line, d.words) for d in script.directives] == [
        (3, ("--job-name=train",)),
        (4, ("--gres=gpu:2", "-t", "1:00:00")),
        (7, ("-D", "/data/my runs")),
    ]
    assert script.interpreter == ("/bin/bash",)


def test_a_shell_script_runs_whole_with_its_name_and_arguments() -> None:
    argv = parse_script(SCRIPT, "job.sh").command(["one", "two words"])
    assert argv == ["/bin/bash", "-c", SCRIPT, "job.sh", "one", "two words"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert done.stdout == "job.sh one two words\n"


@pytest.mark.parametrize(
    ("first", "argv_head", "name_passed"),
    [
        ("#!/usr/bin/env python3", ["/usr/bin/env", "python3", "-c"], False),
        ("#!/usr/bin/python3.11", ["/usr/bin/python3.11", "-c"], False),
        ("#!/bin/bash -l", ["/bin/bash", "-l", "-c"], True),
        ("#!/usr/bin/env perl", ["/usr/bin/env", "perl", "-e"], False),
        ("#!/bin/sh", ["/bin/sh", "-c"], True),
    ],
)
def test_each_interpreter_gets_the_program_its_own_way(
    first: str, argv_head: list[str], name_passed: bool
) -> None:
    text = f"{first}\necho hi\n"
    argv = parse_script(text, "s").command(["a"])
    assert argv == [*argv_head, text, *(["s"] if name_passed else []), "a"]


def test_a_python_script_sees_its_arguments_as_sys_argv() -> None:
    text = "#!/usr/bin/env python3\nimport sys\nprint(sys.argv[1:])\n"
    done = subprocess.run(
        parse_script(text, "p.py").command(["a", "b"]), capture_output=True, text=True, check=True
    )
    assert done.stdout == "['a', 'b']\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("echo hi\n", "job.sh:1: this does not look like a batch script: the first line must"),
        ("#!\necho\n", "job.sh:1: #! names no interpreter"),
        ("#!/usr/bin/fish\necho\n", "job.sh:1: #!/usr/bin/fish: gbatch runs batch scripts of"),
        ("#!/bin/bash\n\n#SBATCH -J 'open\n", "job.sh:3: #SBATCH: No closing quotation"),
        ("#!/bin/bash\necho \0\n", "job.sh:1: the script holds a NUL byte"),
    ],
)
def test_a_script_gbatch_cannot_run_is_one_line_with_its_line_number(
    text: str, message: str
) -> None:
    with pytest.raises(ScriptError) as caught:
        parse_script(text, "job.sh")
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


def test_a_script_is_told_from_a_yaml_job_file_by_its_first_line() -> None:
    assert looks_like_script("#!/bin/bash\n")
    assert looks_like_script("#SBATCH -J x\n")
    assert looks_like_script("\ufeff#!/bin/sh\n")
    assert looks_like_script("hostname\n#SBATCH -J x\n")  # refused then: no #! line
    assert looks_like_script("hostname\n", "run.slurm")
    assert not looks_like_script("# a job file\nname: x\n", "job.yaml")
    assert not looks_like_script("name: x\n")
    # #SBATCH counts at a line's start only: indented, it is a job file's `script:`.
    assert not looks_like_script("name: x\nscript: |\n  #SBATCH -J x\n  echo hi\n")
    assert not looks_like_script("command: echo '#SBATCH -J x'\n")
    assert not looks_like_script("\ufeff#SBATCH -J x\n")  # as before: the BOM is the line's
    assert not looks_like_script("\n#!/bin/bash\n")  # the first line only
    assert looks_like_script("a: 1\r\n#SBATCH -J x\r\n")


def test_a_job_files_script_without_a_shebang_runs_under_bash_from_its_first_line() -> None:
    script = parse_script(
        "#SBATCH -J x\necho hi\n", "job.yaml script", name="job.yaml", default_shell=True
    )
    assert script.interpreter == ("/bin/bash",)
    assert [d.line for d in script.directives] == [1]
    assert script.location == "job.yaml script"
    assert script.command(["a"]) == ["/bin/bash", "-c", script.text, "job.yaml", "a"]


def test_an_indented_sbatch_line_is_a_yaml_files_not_a_scripts() -> None:
    assert not looks_like_script("script: |\n  #SBATCH -J x\n  true\n", "job.yaml")
    assert looks_like_script("#SBATCH -J x\ntrue\n", "job")
