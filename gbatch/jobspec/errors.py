"""The refusals of a job file or option that cannot become a JobSpec or be submitted.

SpecError is every jobspec module's refusal, and the daemon's when it checks a submitted
spec again; BadSubmit is a whole submit's.
"""

from __future__ import annotations


class SpecError(Exception):
    """A job file or option that cannot become a JobSpec.

    `field` is the job-file key, the CLI option, or the file name; `message` is one
    line saying what is wrong and what to do. `str(err)` is `"<field>: <message>"`.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class BadSubmit(Exception):
    """A submit that cannot be queued: bad options, a bad job file or batch script.

    `message` is the one line to show: `gbatch sbatch`'s exit 2 (usage), the HTTP API's
    400, the MCP submit tool's refusal. Nothing was sent to the daemon.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
