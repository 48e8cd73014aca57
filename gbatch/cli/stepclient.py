"""What srun, salloc and shell share: an allocation queued and waited for, a step attached.

A step is asked for on a connection of its own (requests.OpenStep); once gbatchd has
answered, the connection carries the step's frames (gbatch/core/stepframes.py): this
terminal's keys, size changes and signals out, the step's output and exit status in.
With --pty the terminal is put in raw mode for the step's life (every key, Ctrl-C and
Ctrl-Z included, goes to the step's own terminal, which turns them into signals there)
and given back as it was however the step ends.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import selectors
import signal
import socket
import sys
import time

from gbatch.cli.exits import CliError, Exit
from gbatch.core import stepframes as frames
from gbatch.protocol.client import DaemonUnavailable, RequestFailed, request_line

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from gbatch.cli.context import Context

# How long srun waits for a gbatchd that stopped answering (a restart) before giving up.
DAEMON_BACK_SECONDS = 60.0
# One AwaitAllocation's wait; asked again until the allocation runs. The first is short:
# a job that starts at once is not said to wait.
AWAIT_SECONDS = 10.0
FIRST_WAIT = 1.0
# srun -I without seconds: the longest wait for the first planning pass to look at it.
IMMEDIATE_CAP = 10.0
# How often a step whose GPUs other steps hold asks again (Slurm's srun retries too).
STEP_RETRY_SECONDS = 1.0
# Options of sbatch that srun and salloc do not take (their job is interactive).
NOT_INTERACTIVE = {
    "wrap": "--wrap",
    "array": "--array",
    "param": "--param",
    "name_template": "--name-template",
    "wait": "-W/--wait",
    "hold": "-H/--hold",
    "output": "-o/--output",
    "error": "-e/--error",
    "open_mode": "--open-mode",
    "begin": "-b/--begin",
    "dependency": "-d/--dependency",
}
# Signals srun passes on to the step (Slurm's srun forwards them to its tasks).
FORWARDED = (
    signal.SIGINT,
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def add_interactive_options(p: argparse.ArgumentParser) -> None:
    """sbatch's job options, and what srun and salloc add to them."""
    from gbatch.jobspec.sbatchopts import add_job_options

    add_job_options(p)
    p.add_argument(
        "--pty",
        action="store_true",
        help="give CMD a pseudo-terminal: line editing, colours, full-screen programs; "
        "window size followed; Ctrl-C and Ctrl-Z go to CMD",
    )
    p.add_argument(
        "-I",
        "--immediate",
        nargs="?",
        const="0",
        metavar="SECONDS",
        help="give up (and cancel the job) unless the allocation starts within SECONDS "
        "(without: unless the first scheduling pass starts it)",
    )


def step_ask(args: argparse.Namespace, command: list[str]) -> dict[str, Any]:
    """What a step inside a job asks of it: -G/--gres, -c, --mem, --overlap.

    OpenStep's gpus, cpus, mem_mb (None where not given) and overlap, read by sbatch's
    grammar (one line naming a bad option, exit 2)."""
    from gbatch.jobspec.errors import BadSubmit
    from gbatch.jobspec.submit import build_submit

    gpus_given = args.gpus is not None or args.gres is not None
    mem_given = any(
        getattr(args, k, None) is not None for k in ("mem", "mem_per_gpu", "mem_per_cpu")
    )
    ask: dict[str, Any] = {"overlap": bool(getattr(args, "overlap", False))}
    if not (gpus_given or args.cpus is not None or mem_given):
        return ask
    parsed = argparse.Namespace(**vars(args))
    parsed.wrap, parsed.file, parsed.script_args, parsed.test_only = list(command), None, [], False
    try:
        _built, spec, _script, _lines = build_submit(
            parsed, lambda: (None, None), submit_dir=os.getcwd(), environ=os.environ
        )
    except BadSubmit as err:
        raise CliError(err.message, Exit.USAGE) from err
    ask["gpus"] = spec.gpus if gpus_given else None
    ask["cpus"] = spec.cpus
    ask["mem_mb"] = spec.memory_mb if mem_given else None
    return ask


def add_task_options(p: argparse.ArgumentParser) -> None:
    """srun's options for a step's tasks inside a job across nodes (-l, -K, -w).

    -N/-n/--ntasks-per-node are sbatch's (add_job_options); -w is added here only where
    those do not have it already."""
    taken = set(option_strings(p))
    if "-w" not in taken:
        p.add_argument(
            "-w",
            "--nodelist",
            metavar="NODES",
            help="inside a job: run the step's tasks on these of its nodes (gpu[01-02])",
        )
    p.add_argument(
        "-l",
        "--label",
        action="store_true",
        help="prefix each line of output with its task's rank (`0: `), as Slurm's srun -l",
    )
    p.add_argument(
        "-K",
        "--kill-on-bad-exit",
        dest="kill_on_bad_exit",
        nargs="?",
        const="1",
        metavar="0|1",
        help="inside a job: a task that fails stops the step's other tasks (1, the default "
        "here); 0 lets them run on",
    )


def option_strings(p: argparse.ArgumentParser) -> list[str]:
    return [flag for action in p._actions for flag in action.option_strings]


def step_tasks(args: argparse.Namespace) -> dict[str, Any]:
    """OpenStep's fields for the step's tasks (-N, -n, --ntasks-per-node, -w, -l, -K).

    One line naming a bad value, exit 2."""
    fields: dict[str, Any] = {}
    for dest, flag in (
        ("nodes", "-N/--nodes"),
        ("ntasks", "-n/--ntasks"),
        ("ntasks_per_node", "--ntasks-per-node"),
    ):
        value = getattr(args, dest, None)
        if value is not None:
            fields[dest] = _count(str(value), flag)
    nodelist = getattr(args, "nodelist", None)
    if nodelist:
        from gbatch.core import hostlist

        names: list[str] = []
        for part in nodelist if isinstance(nodelist, list) else [nodelist]:
            try:
                names += hostlist.expand(str(part))
            except ValueError as err:
                raise CliError(f"-w/--nodelist: {err}", Exit.USAGE) from err
        fields["nodelist"] = tuple(names)
    # SLURM_LABELIO (Slurm's srun reads it as -l): a script may label every srun's lines.
    if getattr(args, "label", False) or os.environ.get("SLURM_LABELIO", "") not in ("", "0"):
        fields["label"] = True
    kill = getattr(args, "kill_on_bad_exit", None)
    if kill is not None:
        if kill not in ("0", "1"):
            raise CliError(
                f"-K/--kill-on-bad-exit: {kill!r} is not 0 or 1. Give -K0 to let the "
                "other tasks run on, -K1 (the default) to stop them",
                Exit.USAGE,
            )
        fields["kill_on_bad_exit"] = kill == "1"
    return fields


def _count(text: str, flag: str) -> int:
    """-N's and -n's number (Slurm's MIN-MAX taken as MIN); exit 2 for anything else."""
    first = text.strip().partition("-")[0]
    if not first.isdigit() or int(first) < 1:
        raise CliError(f"{flag}: {text!r} is not a positive number, e.g. 2", Exit.USAGE)
    return int(first)


def immediate_seconds(text: str | None) -> float | None:
    """-I's seconds (0: the first pass), or None without -I; exit 2 for a bad value."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 86400:
        raise CliError(f"-I/--immediate: {text!r} is not a number of seconds", Exit.USAGE)
    return seconds


def say(prog: str, message: str) -> None:
    """One of Slurm's informational lines (`srun: job 12 queued and waiting for resources`)."""
    print(f"{prog}: {message}", file=sys.stderr, flush=True)


def refuse_batch_options(prog: str, args: argparse.Namespace) -> None:
    """Refuse (exit 2) the sbatch options that mean nothing for an interactive job."""
    for dest, flag in NOT_INTERACTIVE.items():
        if getattr(args, dest, None) not in (None, False, []):
            raise CliError(
                f"{flag} is an option of sbatch, not of {prog}. Queue a batch job with "
                f"gbatch sbatch {flag} ...",
                Exit.USAGE,
            )


def queue_allocation(
    ctx: Context, args: argparse.Namespace, command: list[str], kind: str, name: str
) -> int:
    """Queue an srun/salloc allocation of `args`' resources for `command`; its job id.

    The request is sbatch's (jobspec.submit.build_submit: the same options, the same
    checks, one line naming a bad one), marked interactive: its run holds the resources
    while the steps run `command`, and it is never requeued or retried."""
    from gbatch.jobspec.errors import BadSubmit
    from gbatch.jobspec.submit import build_submit
    from gbatch.protocol import requests

    args.wrap = list(command)
    args.file = None
    args.script_args = []
    args.test_only = False
    if args.requeue is None:
        args.requeue = False  # a client's job: starting it over without the client is no use
    try:
        built, _spec, _script, _lines = build_submit(
            args,
            lambda: (None, None),
            submit_dir=os.getcwd(),
            environ=os.environ,
            default_name=name,
        )
    except BadSubmit as err:
        raise CliError(err.message, Exit.USAGE) from err
    fields = built.fields()
    fields["spec"] = {**fields["spec"], "interactive": kind}
    reply = ctx.client.call(requests.Submit(**fields))
    return int(reply["ids"][0])


def wait_for_allocation(ctx: Context, job_id: int, prog: str, immediate: float | None) -> None:
    """Wait until `job_id` runs, saying so as Slurm's srun does; CliError if it ended.

    `immediate` (srun -I): fail, cancelling the job, unless it runs within that many
    seconds; 0: unless the first planning pass that looks at it starts it. Ctrl-C
    cancels it too: nobody would use it."""
    from gbatch.protocol import requests

    waited = False
    deadline = None if immediate is None else time.monotonic() + (immediate or IMMEDIATE_CAP)
    try:
        while True:
            if deadline is not None:
                seconds = max(0.0, deadline - time.monotonic())
            else:
                seconds = AWAIT_SECONDS if waited else FIRST_WAIT
            request = requests.AwaitAllocation(job=job_id, seconds=seconds, planned=immediate == 0)
            reply = _ask_patiently(ctx, prog, request)
            state = reply["state"]
            if state == "RUNNING":
                if waited:
                    say(prog, f"job {job_id} has been allocated resources")
                return
            if state not in ("PENDING", "CONFIGURING"):
                why = f": {reply['reason']}" if reply.get("reason") else ""
                raise CliError(
                    f"job {job_id} ended before it was allocated ({state}{why})", Exit.FAILED
                )
            if deadline is not None and (
                time.monotonic() >= deadline or (immediate == 0 and reply.get("reason"))
            ):
                _cancel(ctx, job_id)
                raise CliError(
                    "Unable to allocate resources: Requested nodes are busy (job "
                    f"{job_id}: {reply.get('reason') or 'not started'}; cancelled)",
                    Exit.FAILED,
                )
            if not waited:
                waited = True
                say(prog, f"job {job_id} queued and waiting for resources")
    except KeyboardInterrupt:
        _cancel(ctx, job_id)
        say(prog, f"Job allocation {job_id} has been revoked.")
        raise


def _ask_patiently(ctx: Context, prog: str, request: Any) -> dict[str, Any]:
    """ctx.client.call(request), tried again while gbatchd does not answer (a restart),
    up to DAEMON_BACK_SECONDS."""
    since: float | None = None
    while True:
        try:
            return ctx.client.call(request)
        except DaemonUnavailable:
            ctx.client.close()
            now = time.monotonic()
            if since is None:
                since = now
                say(prog, f"gbatchd does not answer; waiting up to {DAEMON_BACK_SECONDS:g} s")
            elif now - since > DAEMON_BACK_SECONDS:
                raise
            time.sleep(1.0)


def _cancel(ctx: Context, job_id: int) -> None:
    from gbatch.protocol import requests

    with contextlib.suppress(DaemonUnavailable, RequestFailed, OSError):
        ctx.client.call(requests.Cancel(ids=(job_id,)))


def step_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What srun sends of its environment for the step (Slurm's --export=ALL)."""
    from gbatch.core.submitenv import filter_submit_env

    return filter_submit_env(environ)


def login_shell() -> str:
    """The user's login shell: passwd's, else $SHELL, else /bin/sh.

    $SHELL serves an account whose passwd shell logs nobody in (nologin, false)."""
    import pwd

    try:
        shell = pwd.getpwuid(os.getuid()).pw_shell
    except KeyError:
        shell = ""
    if not shell or shell.endswith(("/nologin", "/false")):
        shell = os.environ.get("SHELL", "") or "/bin/sh"
    return shell


def terminal_size() -> tuple[int, int]:
    """(rows, cols) of this terminal, 24 x 80 when none."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            size = os.get_terminal_size(fd)
            return size.lines, size.columns
    return 24, 80


def run_step(
    ctx: Context,
    prog: str,
    job_id: int,
    argv: list[str],
    *,
    pty: bool,
    interactive: bool = False,
    task: int | None = None,
    here: bool = True,
    ask: Mapping[str, Any] | None = None,
) -> int:
    """Run `argv` as a step of `job_id`, attached to this terminal; its exit status.

    With `task`, of that task of array `job_id` (N_K). `here`: the step starts in this
    directory; else in the job's own (gbatch shell: where its files are). `ask`: its
    own share of the job (step_ask); while the GPUs it asks are held by the job's other
    steps it waits, saying so once as Slurm's srun does."""
    from gbatch.protocol import requests

    rows, cols = terminal_size()
    request = requests.OpenStep(
        job=job_id,
        argv=tuple(argv),
        env=step_environment(os.environ),
        cwd=os.getcwd() if here else None,
        pty=pty,
        rows=rows,
        cols=cols,
        interactive=interactive,
        task=task,
        **(ask or {}),
    )
    waited = False
    while True:
        sock, leftover, reply = open_connection(ctx, request)
        if "busy" not in reply:
            break
        sock.close()
        if not waited:
            waited = True
            say(
                prog, f"Job {job_id} step creation temporarily disabled, retrying ({reply['busy']})"
            )
        time.sleep(STEP_RETRY_SECONDS)
    if waited:
        say(prog, f"Step created for StepId={reply['label']}")
    with sock:
        attached = Attached(sock, pty, prog, reply["label"], reply.get("node") or "")
        # A step of several tasks: gbatchd's fan-out says which task failed, in Slurm's words.
        attached.says_failures = "tasks" in reply
        return attached.run(leftover)


def open_connection(ctx: Context, request: Any) -> tuple[socket.socket, bytes, dict[str, Any]]:
    """A connection of its own carrying `request`, and gbatchd's answer.

    (the socket, what came after the answer's line, the answer's fields). RequestFailed
    for a refusal.

    The line is read without a buffered reader: what follows it is the step's."""
    from gbatch.protocol import requests
    from gbatch.protocol.client import reply_fields

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(ctx.paths.socket))
    except (FileNotFoundError, ConnectionRefusedError) as err:
        sock.close()
        raise DaemonUnavailable(ctx.paths.socket, err.strerror or str(err)) from err
    except PermissionError as err:
        sock.close()
        from gbatch.protocol.client import SocketPermissionDenied

        raise SocketPermissionDenied(ctx.paths.socket) from err
    try:
        sock.sendall(request_line(requests.encode_request(request)))
        received = b""
        while b"\n" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                raise DaemonUnavailable(ctx.paths.socket, "the daemon closed the connection")
            received += chunk
    except BaseException:
        sock.close()
        raise
    line, _, rest = received.partition(b"\n")
    try:
        reply = reply_fields(line)
    except RequestFailed:
        sock.close()
        raise
    except json.JSONDecodeError as err:
        sock.close()
        raise DaemonUnavailable(ctx.paths.socket, f"a reply that is not JSON: {err}") from err
    return sock, rest, reply


class Attached:
    """This terminal attached to a step: the relay loop and the terminal's state."""

    def __init__(
        self, sock: socket.socket, pty: bool, prog: str, label: str, node: str = ""
    ) -> None:
        self.sock = sock
        self.pty = pty
        self.prog = prog
        self.label = label
        self.node = node
        self.reader = frames.FrameReader(frames.TO_CLIENT)
        self.outgoing = bytearray()
        self.result: tuple[int, int] | None = None
        self.stdin_open = True
        self.says_failures = False

    def run(self, leftover: bytes) -> int:
        raw = self.pty and os.isatty(0)
        saved = None
        if raw:
            import termios
            import tty

            saved = termios.tcgetattr(0)
            tty.setraw(0)
        wake_read, wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old_wakeup = signal.set_wakeup_fd(wake_write)
        handled = [signal.SIGWINCH, *FORWARDED]
        old_handlers = {sig: signal.signal(sig, self._noted) for sig in handled}
        self.pending_signals: list[int] = []
        try:
            self._received(leftover)
            self._loop(wake_read)
        finally:
            signal.set_wakeup_fd(old_wakeup)
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
            os.close(wake_read)
            os.close(wake_write)
            if saved is not None:
                import termios

                termios.tcsetattr(0, termios.TCSAFLUSH, saved)
        if self.result is None:
            say(self.prog, f"error: the connection to step {self.label} was lost")
            return 255
        code, signum = self.result
        if self.prog == "srun" and (code or signum) and not self.says_failures:
            # Slurm's srun says so of a task that failed, on its stderr.
            what = signal.strsignal(signum) if signum else f"Exited with exit code {code}"
            say("srun", f"error: {self.node}: task 0: {what}")
        return frames.exit_status(code, signum)

    def _noted(self, signum: int, _frame: object) -> None:
        self.pending_signals.append(signum)

    def _loop(self, wake: int) -> None:
        selector = selectors.DefaultSelector()
        self.sock.setblocking(False)
        stdin_registered = False
        try:
            selector.register(self.sock, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            try:
                selector.register(0, selectors.EVENT_READ)
                stdin_registered = True
            except (ValueError, OSError, PermissionError):
                self._end_stdin()  # no stdin to read (closed, or a file epoll refuses)
            while self.result is None:
                events = selectors.EVENT_READ | (selectors.EVENT_WRITE if self.outgoing else 0)
                selector.modify(self.sock, events)
                for key, mask in selector.select():
                    if key.fileobj == wake:
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake, 4096)
                    elif key.fileobj == 0:
                        if not self._from_stdin():
                            selector.unregister(0)
                            stdin_registered = False
                    else:
                        if mask & selectors.EVENT_WRITE:
                            self._flush()
                        if mask & selectors.EVENT_READ and not self._from_step():
                            return
                self._signals()
        finally:
            if stdin_registered:
                with contextlib.suppress(KeyError, ValueError):
                    selector.unregister(0)
            selector.close()

    def _signals(self) -> None:
        pending, self.pending_signals = self.pending_signals, []
        for signum in pending:
            if signum == signal.SIGWINCH:
                self._send(frames.resize_frame(*terminal_size()))
            else:
                self._send(frames.signal_frame(signum))
        self._flush()

    def _from_stdin(self) -> bool:
        try:
            data = os.read(0, 65536)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            self._end_stdin()
            return False
        for piece in frames.data_frames(frames.STDIN, data):
            self._send(piece)
        self._flush()
        return True

    def _end_stdin(self) -> None:
        if self.stdin_open:
            self.stdin_open = False
            self._send(frames.frame(frames.STDIN_EOF))
            self._flush()

    def _send(self, data: bytes) -> None:
        self.outgoing += data

    def _flush(self) -> None:
        while self.outgoing:
            try:
                sent = self.sock.send(self.outgoing)
            except BlockingIOError:
                return
            except OSError:
                self.outgoing.clear()  # the step's side is gone: its EXIT or EOF tells
                return
            del self.outgoing[:sent]

    def _from_step(self) -> bool:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return True
        except OSError:
            data = b""
        if not data:
            return False
        return self._received(data)

    def _received(self, data: bytes) -> bool:
        try:
            received = self.reader.feed(data)
        except frames.FrameError as err:
            say(self.prog, f"error: step {self.label} sent what is not a frame ({err})")
            return False
        for kind, payload in received:
            if kind == frames.STDOUT:
                _write_all(1, payload)
            elif kind == frames.STDERR:
                _write_all(2, payload)
            elif kind == frames.ERROR:
                _write_all(2, f"{self.prog}: error: ".encode() + payload + b"\r\n"[self._nl() :])
            elif kind == frames.EXIT:
                self.result = frames.read_exit(payload)
                return False
        return True

    def _nl(self) -> int:
        """Where a line break starts: \\r\\n on a raw terminal, \\n elsewhere."""
        return 0 if self.pty and os.isatty(0) else 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except BrokenPipeError:
            return
        view = view[written:]


# -- gbatch shell and sattach --------------------------------------------------------

# The login shell where the job has it, else sh: a container's image may lack bash.
_SHELL_OR_SH = 'command -v "$0" >/dev/null 2>&1 && exec "$0"; exec /bin/sh'


def add_shell_parser(commands: Any, name: str, help_line: str) -> None:
    """The sub-command `name` of gbatch shell's kind (shell, and sattach, Slurm's name)."""
    p = commands.add_parser(
        name,
        help=help_line,
        description=help_line + ". It runs CMD (default: your login shell, or sh where the "
        "job's container lacks it) as a new step of your running job N, on its node with "
        "its GPUs, in its working directory (its container's, for a container job), with "
        "a terminal of its own when this one is a terminal. Leaving it ends that step "
        "only: the job runs on. Exits with CMD's status.",
        epilog=f"example: gbatch {name} 12\n"
        f"         gbatch {name} 12_3 nvidia-smi     # task 3 of array 12\n"
        f"         gbatch {name} 12 tail -n 20 train.log",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("job", metavar="N", help="your running job: N, or N_K for an array's task")
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="CMD [ARG...]",
        help="what to run instead of a shell, and its arguments",
    )
    p.set_defaults(run=run_shell, prog=name)


def run_shell(args: argparse.Namespace, ctx: Context) -> int:
    """gbatch shell N [CMD...] (and sattach): CMD or a shell as a step of job N, attached."""
    from gbatch.cli.context import parse_job

    text = args.job.strip()
    if "." in text:
        job, _, step = text.partition(".")
        raise CliError(
            f"{text}: gbatch {args.prog} opens a new shell in a job, and cannot attach to "
            f"step {step}'s input and output. Run gbatch {args.prog} {job} for a shell in "
            f"it, or gbatch logs -f {job} for its output",
            Exit.USAGE,
        )
    target = parse_job(text, f"{args.prog}: N")
    command = list(args.cmd)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        command = ["/bin/sh", "-c", _SHELL_OR_SH, login_shell()]
    return run_step(
        ctx,
        args.prog,
        target.job,
        command,
        pty=sys.stdin.isatty(),
        task=target.single_task,
        here=False,
    )
