"""Slurm batch scripts: `gbatch sbatch job.sh [args...]` (or the script on stdin).

A script is kept whole and run by the interpreter of its `#!` line, given the text
with `-c` (or `-e`): the job never reads the file again, so changing it after submit
changes nothing, as with Slurm. Its `#SBATCH` lines, up to the first command (Slurm's
rule), are options for gbatch's own sbatch parser; the command line wins over them.
Pure: the CLI reads the file, gbatch/jobspec/submit.py parses the options.
"""

from __future__ import annotations

import posixpath

from gbatch.jobspec.optvalues import FrozenValue

DIRECTIVE = "#SBATCH"
# How each interpreter takes a program as an argument: the flag, and whether the next
# argument is the program's name ($0) before its arguments (shells) or not.
_INTERPRETERS: dict[str, tuple[str, bool]] = {
    **{shell: ("-c", True) for shell in ("sh", "bash", "dash", "zsh", "ksh")},
    "python": ("-c", False),
    "python3": ("-c", False),
    "perl": ("-e", False),
    "Rscript": ("-e", False),
}


class ScriptError(Exception):
    """A script gbatch will not queue: `str()` is one line, with its line number."""

    def __init__(self, where: str, line: int, message: str) -> None:
        super().__init__(f"{where}:{line}: {message}")
        self.line = line


class Directive(FrozenValue):
    """The words of one `#SBATCH` line, and where it is."""

    __slots__ = ("line", "words")
    line: int
    words: tuple[str, ...]

    def __init__(self, line: int, words: tuple[str, ...]) -> None:
        object.__setattr__(self, "line", line)
        object.__setattr__(self, "words", words)


class BatchScript(FrozenValue):
    __slots__ = ("directives", "interpreter", "name", "text", "where")
    text: str
    name: str  # $0 of a shell script: the file's name, or "sbatch" for stdin
    directives: tuple[Directive, ...]
    interpreter: tuple[str, ...]  # the #! line's words
    where: str  # how errors name it, when not by `name`: a job file's script ("")

    def __init__(
        self,
        text: str,
        name: str,
        directives: tuple[Directive, ...],
        interpreter: tuple[str, ...],
        where: str = "",
    ) -> None:
        fields = {"text": text, "name": name, "directives": directives}
        fields |= {"interpreter": interpreter, "where": where}
        for field, value in fields.items():
            object.__setattr__(self, field, value)

    @property
    def location(self) -> str:
        return self.where or self.name

    def command(self, args: list[str]) -> list[str]:
        """The argv that runs the script with `args` as $1... (sys.argv[1:] in Python)."""
        flag, takes_name = _INTERPRETERS[_interpreter_kind(self.interpreter)]
        return [*self.interpreter, flag, self.text, *([self.name] if takes_name else []), *args]


SCRIPT_SUFFIXES = (".sh", ".bash", ".slurm", ".sbatch", ".job")


def looks_like_script(text: str, name: str = "") -> bool:
    """Whether `text` is a batch script rather than a YAML job file.

    It is when its first line is `#!`, a line starts with `#SBATCH` (unindented), or
    its name ends like a script's (job.sh, run.slurm, ...).
    """
    if text.lstrip("\ufeff").startswith("#!") or name.endswith(SCRIPT_SUFFIXES):
        return True
    # At the start of a line: an indented one is a YAML job file's `script:`. Found in
    # the text whole, not line by line (a list of its lines and a test of each).
    return text.startswith(DIRECTIVE) or "\n" + DIRECTIVE in text


def parse_script(
    text: str, where: str, *, name: str | None = None, default_shell: bool = False
) -> BatchScript:
    """The script `text` with its interpreter and `#SBATCH` directives read.

    ScriptError for a script without a `#!` line (run by /bin/bash instead with
    `default_shell`: a job file's `script:`), an interpreter gbatch cannot hand a program
    to, a directive that is not words (an unclosed quote), or a NUL byte. `where` names
    the script in errors; `name` is its $0 (default: `where`).
    """
    if "\0" in text:
        raise ScriptError(where, 1, "the script holds a NUL byte. Save it as text")
    lines = text.split("\n")
    first = lines[0].lstrip("\ufeff")
    if default_shell and not first.startswith("#!"):
        return BatchScript(text, name or where, _directives(where, lines, 1), ("/bin/bash",), where)
    if not first.startswith("#!"):
        raise ScriptError(
            where,
            1,
            "this does not look like a batch script: the first line must start with #! "
            "and the interpreter's path, e.g. #!/bin/bash",
        )
    interpreter = tuple(first[2:].split())
    if not interpreter:
        raise ScriptError(where, 1, "#! names no interpreter. Write e.g. #!/bin/bash")
    if _interpreter_kind(interpreter) not in _INTERPRETERS:
        raise ScriptError(
            where,
            1,
            f"#!{first[2:].strip()}: gbatch runs batch scripts of "
            f"{', '.join(sorted(_INTERPRETERS))}. Use one of them, or --wrap",
        )
    return BatchScript(text, name or where, _directives(where, lines, 2), interpreter, where)


def _directives(where: str, lines: list[str], first: int) -> tuple[Directive, ...]:
    """The #SBATCH lines of `lines` from line number `first` up to the first command."""
    directives = []
    for number, line in enumerate(lines[first - 1 :], start=first):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break  # the first command ends the header, as in Slurm
        if not stripped.startswith(DIRECTIVE):
            continue
        rest = stripped[len(DIRECTIVE) :]
        if rest and not rest[0].isspace():
            continue  # "#SBATCHx" is a comment, as in Slurm
        words = _words(rest, where, number)
        if words:
            directives.append(Directive(number, tuple(words)))
    return tuple(directives)


# The characters of a directive that shlex splits as str.split() does: printable ASCII
# but its quotes, escape and comment sign, and the blanks shlex splits on.
_PLAIN = frozenset(chr(code) for code in range(0x20, 0x7F)) - set("'\"\\#") | {"\t", "\r"}


def _words(rest: str, where: str, number: int) -> list[str]:
    """shlex.split(rest, comments=True): a line's words as a POSIX shell splits them.

    A line of plain words (most #SBATCH lines) is split without shlex (and the re it
    loads); one with a quote, a backslash or a comment is shlex's."""
    if all(char in _PLAIN for char in rest):
        return rest.split()
    import shlex

    try:
        return shlex.split(rest, comments=True)
    except ValueError as err:
        raise ScriptError(where, number, f"{DIRECTIVE}: {err}. Close the quote") from None


def _interpreter_kind(interpreter: tuple[str, ...]) -> str:
    """The interpreter's name: `#!/usr/bin/env python3 -u` and `#!/usr/bin/python3.11`
    are python3's."""
    program = interpreter[0]
    if posixpath.basename(program) == "env" and interpreter[1:]:
        program = interpreter[1]
    name = posixpath.basename(program)
    if name.startswith("python3.") and name[len("python3.") :].isdigit():
        return "python3"
    return name
