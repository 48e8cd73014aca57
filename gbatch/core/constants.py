"""The one home of every constant that the start-up fast path shares with the full path.

`gbatch squeue` and `gbatch sbatch --wrap` (gbatch/cli/everyday.py,
gbatch/render/squeue_brief.py, gbatch/protocol/jsonline.py) run without the model, the
spec, the request types or pathlib; the modules that define what these values mean
(model, jobids, paths, spec, the protocol's client and decoder, squeue's renderer) read
them from here too, so each value is written once. This module imports nothing: any
path may load it for free. It sits in core/, the lowest layer, because core's own
modules (model, jobids, paths) read it.
"""

# -- the socket protocol ------------------------------------------------------------

MAX_REQUEST_BYTES = 4 * 1024 * 1024
"""The longest request line gbatchd reads (its newline not counted). A submit made of a
job file at its 1 MiB limit (spec.MAX_FILE_BYTES) with --wrap and --secret-env at
their 64 KiB and an exported environment at its 128 KiB takes under 3 MiB in plain
text (JSON writes a newline or a quote in two bytes; tests/unit/test_request_limits.py
builds one); only non-ASCII text written to the limits comes near 4 MiB (a \\u escape
is up to three times its UTF-8 bytes). The client refuses a larger request before sending it."""

CLIENT_TIMEOUT_S = 30.0
"""How long a command waits for gbatchd's reply by default (protocol.client.Client)."""

SYSTEM_SOCKET = "/run/gbatch/gbatchd.sock"
"""Where a system-wide gbatchd (deploy/systemd/gbatchd.service) listens: clients with no
GBATCH_SOCKET or GBATCH_HOME use it when it exists (paths.SYSTEM_SOCKET is its Path)."""

# -- jobs ---------------------------------------------------------------------------

MAX_COMMAND_BYTES = 64 * 1024
"""The largest command a job may run: its argv's UTF-8 bytes, one NUL after each."""

MAX_ID_DIGITS = 18
"""The most digits of a number in a job id (jobids' grammar): it fits SQLite's int64."""

MAX_ID_TEXT = 64 * 1024
"""The longest text of job ids read at once: a few thousand ids; past this, name a
range or an array."""

NORMAL_QOS = "normal"
"""The QOS of a job that names none (gbatch/core/qos.py's NORMAL): sacct's and scontrol's
listings show it without importing the QOS rules and the limits they load."""

IMPLICIT_PARTITION = "gpu"
"""The partition of a fleet whose inventory names none (and of the embedded node), and
what squeue shows for jobs queued before partitions existed."""

STATE_CODES = {
    "PENDING": "PD",
    "CONFIGURING": "CF",
    "RUNNING": "R",
    "COMPLETING": "CG",
    "COMPLETED": "CD",
    "FAILED": "F",
    "CANCELLED": "CA",
    "TIMEOUT": "TO",
    "NODE_FAIL": "NF",
    "OUT_OF_MEMORY": "OOM",
    "PREEMPTED": "PR",
}
"""Each job state (model.JobState's value) and Slurm's compact code for it, as squeue's
ST column prints it."""

REASON_STATES = frozenset({"PENDING", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED"})
"""The job states whose squeue NODELIST(REASON) cell is the (reason), not the node
(Slurm's squeue print.c)."""

# -- squeue -------------------------------------------------------------------------

SQUEUE_DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
"""squeue's `-o` layout when none is asked for (Slurm's)."""

SQUEUE_SORT_KEYS = "ijuUtTPpQSVelLMDNBCm"
"""squeue -S's keys (Slurm's src/squeue/sort.c), in the order its help lists them."""

SQUEUE_DEFAULT_SORT = "P,t,-p"
"""Slurm's default order: partition, then state (CF, CG, PD, R: pending before
running), then priority, highest first."""

SQUEUE_FULL_SPEC_LETTERS = frozenset("CmkEoZ")
"""squeue `-o` letters whose values are not in a listing's brief spec: asking for one
makes squeue fetch whole specs (a larger reply)."""

SQUEUE_START_LETTERS = frozenset("Se")
"""squeue `-o` letters that read expected starts (ListJobs' `starts`)."""

SQUEUE_LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"
"""squeue -l's layout (Slurm's)."""

SQUEUE_FIELDS = {
    "jobid": "i",
    "partition": "P",
    "qos": "q",
    "name": "j",
    "username": "u",
    "userid": "U",
    "state": "T",
    "statecompact": "t",
    "timeused": "M",
    "timelimit": "l",
    "timeleft": "L",
    "numnodes": "D",
    "nodelist": "N",
    "reason": "r",
    "reasonlist": "R",
    "tres-per-node": "b",
    "gres": "b",
    "numcpus": "C",
    "minmemory": "m",
    "submittime": "V",
    "starttime": "S",
    "endtime": "e",
    "priority": "p",
    "prioritylong": "Q",
    "command": "o",
    "workdir": "Z",
    "comment": "k",
    "dependency": "E",
    "schednodes": "Y",
    "feature": "f",
    "reservation": "v",
}
"""squeue -O/--Format: Slurm's long field names (any case) -> the `-o` letter."""

SQUEUE_FIELD_WIDTH = 20
"""-O's default column width (Slurm's)."""

FORMAT_MAX_WIDTH = 1000
"""The widest column a squeue, sacct or sinfo format may ask for."""
