"""Drive a completion script the way each shell does, for the unit and integration tiers.

bash: the script is sourced and its function called with COMP_WORDS and COMP_CWORD as
bash's readline sets them (it splits `--partition=gp` into `--partition`, `=`, `gp`).
zsh: an interactive zsh on a pseudo-terminal (zsh/zpty) with compinit loaded and a Tab
typed; compadd is wrapped to print what it is given. fish: `complete -C LINE`, fish's
own way of asking for a line's completions.

Each returns (candidates, what the shell printed on stderr or the terminal besides).
zsh and fish: `.ci/setup-terminal.sh` installs them; without one, its tests skip
locally and fail with CI=true.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

TIMEOUT_S = 30

# An interactive zsh on a pty with the script argv[1] loaded, asked to complete each
# further argument in turn: what compadd was given for each is printed between two
# CAPTURE-END lines, then CAPTURE-NEXT.
ZSH_CAPTURE = r"""
zmodload zsh/zpty || exit 3
zpty z zsh -f -i
zpty -w z "PROMPT=; unsetopt zle_bracketed_paste 2>/dev/null"
zpty -w z "source ${(q)0:h}/setup.zsh ${(q)1}"
local line request
integer on
repeat 200; do
    zpty -r z line || exit 4
    [[ $line == *CAPTURE-READY* ]] && break
done
for request in "${@[2,-1]}"; do
    zpty -n -w z "$request"$'\t'
    on=0
    while zpty -r z line; do
        line=${line//$'\r'/}
        line=${line%$'\n'}
        if [[ $line == *CAPTURE-END* ]]; then
            (( on )) && break
            on=1
            continue
        fi
        (( on )) && print -r -- $line
    done
    print -r -- CAPTURE-NEXT
    zpty -n -w z $'\C-u'
done
zpty -d z
"""
ZSH_SETUP = r"""
if [[ $1:t == _gbatch ]]; then  # a function file: loaded from $fpath on first use
    fpath=($1:h $fpath)
    autoload -U compinit && compinit -u -D
else
    autoload -U compinit && compinit -u -D
    source $1
fi
capture-mark() { print -r -- CAPTURE-END }
# compsys empties compprefuncs and comppostfuncs after each completion: set them anew.
capture-complete() {
    compprefuncs=(capture-mark)
    comppostfuncs=(capture-mark)
    zle complete-word
}
zle -N capture-complete
bindkey '^I' capture-complete
zstyle ':completion:*' list-grouped false
zstyle ':completion:*' insert-tab false
compadd() {
    # Calls that only ask (-O, -A, -D) are compsys's own bookkeeping.
    if [[ ${@[1,(i)(-|--)]} == *-(O|A|D)\ * ]]; then
        builtin compadd "$@"
        return
    fi
    local -a hits
    builtin compadd -A hits "$@"
    (( $#hits )) || return 1
    print -rl -- $hits
    builtin compadd "$@"
}
print CAPTURE-READY
"""


def require_shell(name: str) -> str:
    """The shell's path; a skip without it locally, a failure in CI."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed; run .ci/setup-terminal.sh as root"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


def bash_words(line: str) -> list[str]:
    """COMP_WORDS as bash's readline makes them of `line` (the cursor at its end):
    split at spaces, and at `=` (COMP_WORDBREAKS), which becomes a word of its own."""
    words: list[str] = []
    for word in line.split(" "):
        words += [part for part in re.split(r"(=)", word) if part] or [""]
    return words


def complete_bash(script: Path, line: str, env: dict[str, str]) -> tuple[list[str], str]:
    """What `_gbatch` puts in COMPREPLY for `line`, and its stderr."""
    program = (
        'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); '
        'COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; _gbatch; '
        '(( ${#COMPREPLY[@]} )) && printf "%s\\n" "${COMPREPLY[@]}"; true'
    )
    bash = require_shell("bash")
    done = subprocess.run(
        [bash, "--norc", "--noprofile", "-c", program, "bash", str(script), *bash_words(line)],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
        cwd=env.get("HOME"),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines(), done.stderr


def complete_zsh(script: Path, line: str, env: dict[str, str]) -> tuple[list[str], str]:
    """What zsh's completion offers for `line` after a Tab (each once), and anything
    else it printed on the terminal meanwhile (""), from the pty."""
    return complete_zsh_lines(script, [line], env)[0]


def complete_zsh_lines(
    script: Path, lines: list[str], env: dict[str, str]
) -> list[tuple[list[str], str]]:
    """complete_zsh of each line, in one zsh (compinit takes a while). A script named
    `_gbatch` is found on $fpath, as compinit finds a completion function; any other
    is sourced."""
    work = Path(env["HOME"])
    (work / "capture.zsh").write_text(ZSH_CAPTURE)
    (work / "setup.zsh").write_text(ZSH_SETUP)
    zsh = require_shell("zsh")
    done = subprocess.run(
        [zsh, "-f", str(work / "capture.zsh"), str(script), *lines],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S + len(lines),
        cwd=work,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shown = done.stdout.split("CAPTURE-NEXT\n")
    assert len(shown) == len(lines) + 1, done.stdout
    # Anything zsh printed on the terminal (an error) is among the lines: no stderr.
    return [(list(dict.fromkeys(text.splitlines())), done.stderr) for text in shown[:-1]]


def complete_fish(script: Path, line: str, env: dict[str, str]) -> tuple[list[str], str]:
    """What fish's `complete -C` offers for `line` (without descriptions), and stderr."""
    fish = require_shell("fish")
    done = subprocess.run(
        [fish, "--no-config", "-c", 'source $argv[1]; complete -C"$argv[2]"', str(script), line],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT_S,
        cwd=env.get("HOME"),
    )
    assert done.returncode == 0, done.stderr
    return [row.split("\t")[0] for row in done.stdout.splitlines()], done.stderr


COMPLETERS = {"bash": complete_bash, "zsh": complete_zsh, "fish": complete_fish}


def complete_lines(
    shell: str, script: Path, lines: list[str], env: dict[str, str]
) -> list[tuple[list[str], str]]:
    """The shell's candidates for each line, and what else it printed."""
    if shell == "zsh":
        return complete_zsh_lines(script, lines, env)
    return [COMPLETERS[shell](script, line, env) for line in lines]


def items(candidates: list[str]) -> set[str]:
    """Candidates as the value each completes: the shells differ in what they put
    before it (`--partition=`, `=`, a comma list's items so far, a directory)."""
    return {re.split(r"[=,/]", candidate.rstrip("/"))[-1] for candidate in candidates}
