"""Signals as scancel's users name them, and which of a job's processes one reaches.

`scancel -s USR1` (or SIGUSR1, usr1, 10) sends a signal without cancelling. As in Slurm,
where it goes depends on the options: to the job's steps alone by default (its batch
shell is left out, so a script that waits on its command is not interrupted), to the
batch shell alone with -b/--batch, to the batch shell with its children and every step
with --full; a step id (`N.M`) names one step. Pure values only.
"""

from __future__ import annotations

import signal as signals
from dataclasses import dataclass

SIGNAL_USAGE = "Give a signal name or number, e.g. USR1, SIGUSR1, TERM or 10"


class SignalNameError(ValueError):
    """Text that names no signal; the message names it and says what to write."""


def parse_signal_name(text: str) -> int:
    """The number of the signal `text` names: USR1, SIGUSR1, usr1 or 10.

    SignalNameError for anything else (a number no signal has included)."""
    value = text.strip()
    try:
        if value.isascii() and value.isdigit():
            return int(signals.Signals(int(value)))
        name = value.upper()
        if not name.isascii() or not name.replace("+", "").replace("_", "").isalnum():
            raise KeyError(name)
        return int(signals.Signals[name if name.startswith("SIG") else "SIG" + name])
    except (KeyError, ValueError):
        shown = repr(value if len(value) <= 20 else value[:20] + "...")
        raise SignalNameError(f"{shown} is not a signal. {SIGNAL_USAGE}") from None


def signal_label(signum: int) -> str:
    """`USR1` for 10: a signal's name as scancel prints it, without SIG."""
    try:
        return signals.Signals(signum).name.removeprefix("SIG")
    except ValueError:
        return str(signum)


@dataclass(frozen=True)
class SignalTarget:
    """Which of a run's processes a signal reaches.

    `batch`: the batch shell's process group (the shell and the commands it started);
    `shell_only`: the batch shell's own process alone; `steps`: the steps with these
    ids (None: every step of the run, () none).
    """

    batch: bool = False
    shell_only: bool = False
    steps: tuple[int, ...] | None = None

    @property
    def every_step(self) -> bool:
        return self.steps is None


# The whole run: its batch shell and children and every step (--full; the loop's stops).
WHOLE_RUN = SignalTarget(batch=True, steps=None)
# scancel -s alone: the steps, not the batch shell (Slurm's default).
ALL_STEPS = SignalTarget(steps=None)
# scancel -b: the batch shell alone, not its children nor any step.
BATCH_SHELL = SignalTarget(shell_only=True, steps=())
# scancel -s SIG N.batch: the batch step (the shell and its children), no other step.
BATCH_STEP = SignalTarget(batch=True, steps=())


def one_step(step_id: int) -> SignalTarget:
    """The step `step_id` alone (`scancel N.M`)."""
    return SignalTarget(steps=(step_id,))
