"""Another user's API request during a slowloris on the HTTP API over TLS (issue 29).

Run: `.venv/bin/python bench/bench_slowloris.py [--server KIND] [--checkout DIR]
[--count 300] [--interval 4] [--seconds 30] [--quick]`, as root (the token is minted for
`nobody`, as bench_api.py does) or as a user (for themselves).

One daemon in a temp GBATCH_HOME, an API server with a self-signed certificate on
127.0.0.1, and a token. First 20 authenticated `GET /api/v1/nodes`, each on a fresh TLS
connection (the figure without attack); then tests/slowloris.py opens COUNT TLS
connections from 127.0.0.1 that send a header line every INTERVAL seconds and never end
their request head, and while they are held the same request is made every 0.5 s:
its status and its time, and what became of the slow connections (refused at once,
closed by the server after how long, still open).

The server (`--server`):
  gbatch       `gbatch api serve --tls-cert --tls-key` of the checkout (default this one;
               `--checkout /work/main` for main's)
  uvicorn-h11  the same app under uvicorn with h11 in place of httptools, main's settings
               (limit_concurrency=256, timeout_keep_alive=5)
  hypercorn    the same app under hypercorn (read_timeout=5, keep_alive_timeout=5,
               ssl_handshake_timeout=5)
  granian      the same app under granian (one worker, http1 header read timeout 5 s)
hypercorn and granian are not gbatch's dependencies: put them on the path with
`--checkout .:/tmp/extra-site` (`pip install --target /tmp/extra-site hypercorn granian`).
"""

from __future__ import annotations

import argparse
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common import GBATCH, REPO, load_average, machine_note, median, percentile, quick_help

sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from bench_api import checkout_daemon, checkout_env, mint

SLOWLORIS = REPO / "tests" / "slowloris.py"
# The app under another server: run with `python -c`, the socket path and the
# certificate's files as argv, printing the port once it listens.
# One user's share lifted, as `gbatch api serve` below: this measures the server.
_MAKE_APP = (
    "from pathlib import Path; from gbatch.api.app import make_app; "
    "from gbatch.api.ratelimit import RateLimits; "
    "app = make_app(Path(SOCKET), limits=RateLimits(rate=1e6, burst=1e6))"
)
_APP = "import sys; " + _MAKE_APP.replace("SOCKET", "sys.argv[1]") + "; cert, key = sys.argv[2:4]; "
RUNNERS = {
    "uvicorn-h11": _APP + "import uvicorn; from gbatch.cli.api import make_listener; "
    "s = make_listener('127.0.0.1', 0); print('port', s.getsockname()[1], flush=True); "
    "uvicorn.Server(uvicorn.Config(app, ssl_certfile=cert, ssl_keyfile=key, http='h11', "
    "log_config=None, access_log=False, limit_concurrency=256, timeout_keep_alive=5, "
    "loop='auto')).run(sockets=[s])",
    "hypercorn": _APP + "import asyncio, socket; from hypercorn.config import Config; "
    "from hypercorn.asyncio import serve; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
    "port = s.getsockname()[1]; s.close(); c = Config(); c.bind = [f'127.0.0.1:{port}']; "
    "c.certfile, c.keyfile = cert, key; c.read_timeout = 5; c.keep_alive_timeout = 5; "
    "c.ssl_handshake_timeout = 5; c.accesslog = None; print('port', port, flush=True); "
    "asyncio.run(serve(app, c))",
}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def server(kind: str, home: Path, checkout: str, cert: Path, key: Path) -> Iterator[int]:
    """The API under `kind` on a free port of 127.0.0.1: its port."""
    env = checkout_env(home, checkout)
    socket_path = str(home / "gbatchd.sock")
    if kind == "gbatch":
        argv = [
            *(str(GBATCH), "api", "serve", "--listen", "127.0.0.1:0"),
            *("--tls-cert", str(cert), "--tls-key", str(key)),
            *("--user-rate", "1000000", "--user-burst", "1000000"),
        ]
    elif kind == "granian":
        port = free_port()
        factory = Path(tempfile.mkdtemp(prefix="granian-app-")) / "granian_app.py"
        factory.write_text(_MAKE_APP.replace("SOCKET", repr(socket_path)).replace("; ", "\n"))
        env["PYTHONPATH"] = f"{factory.parent}{os.pathsep}{env['PYTHONPATH']}"
        argv = [
            *(sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1"),
            *("--port", str(port), "--workers", "1", "--ssl-certificate", str(cert)),
            *("--ssl-keyfile", str(key), "--http", "1", "--no-ws", "--log-level", "error"),
            *("--http1-header-read-timeout", "5000", "granian_app:app"),
        ]
    else:
        argv = [sys.executable, "-c", RUNNERS[kind], socket_path, str(cert), str(key)]
    process = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        if kind == "granian":
            wait_listening(port)
        else:
            assert process.stdout is not None
            said = process.stdout.readline()
            if kind == "gbatch":
                port = int(said.split("https://127.0.0.1:")[1].split("/")[0])
            else:
                port = int(said.split()[1])
                wait_listening(port)  # printed before it listens
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_listening(port: int) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {port}")


def self_signed(directory: Path) -> tuple[Path, Path]:
    from test_notifications import self_signed as make

    return make(directory)


def ask(port: int, token: str, context: ssl.SSLContext) -> tuple[int, float]:
    """One authenticated GET /api/v1/nodes on a fresh connection: (status, seconds)."""
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/api/v1/nodes", headers={"Authorization": f"Bearer {token}"}
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=30, context=context) as reply:
            reply.read()
            status = reply.status
    except urllib.error.HTTPError as err:
        status = err.code
    except (urllib.error.URLError, OSError):
        status = 0
    return status, time.monotonic() - started


def summary(what: str, samples: list[tuple[int, float]]) -> None:
    times = [t * 1000 for _, t in samples]
    statuses: dict[int, int] = {}
    for status, _ in samples:
        statuses[status] = statuses.get(status, 0) + 1
    print(
        f"{what}: {len(samples)} requests, statuses {statuses}, median {median(times):.1f} ms, "
        f"p90 {percentile(times, 0.9):.1f} ms, max {max(times):.1f} ms",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--server", default="gbatch", choices=("gbatch", *RUNNERS, "granian"))
    parser.add_argument("--checkout", default=str(REPO))
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--interval", type=float, default=4.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument(
        "--reconnect",
        action="store_true",
        help="the attacker opens each closed connection again at once (a sustained attack)",
    )
    parser.add_argument(
        "--source",
        default="127.0.0.1",
        help="the attacker's address (default the one the measured requests come from)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=quick_help("3 requests unattacked, 10 slow connections for 4 s"),
    )
    args = parser.parse_args()
    unattacked = 20
    if args.quick:
        args.count, args.interval, args.seconds, unattacked = 10, 1.0, 4.0, 3
    checkout = os.pathsep.join(str(Path(p).resolve()) for p in args.checkout.split(os.pathsep))
    print(f"{machine_note()}; server {args.server}, code {checkout}", flush=True)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with checkout_daemon(checkout, 2) as home:
        cert, key = self_signed(home)
        token = mint(home, checkout)
        with server(args.server, home, checkout, cert, key) as port:
            summary("no attack", [ask(port, token, context) for _ in range(unattacked)])
            attacker = subprocess.Popen(
                [
                    *(sys.executable, str(SLOWLORIS), "127.0.0.1", str(port), str(args.count)),
                    *(str(args.interval), str(args.seconds), "--tls", "--source", args.source),
                    *(("--reconnect",) if args.reconnect else ()),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert attacker.stdout is not None
            started = time.monotonic()
            ready = attacker.stdout.readline().strip()
            print(f"attack {ready} after {time.monotonic() - started:.1f} s", flush=True)
            during: list[tuple[int, float]] = []
            stop = threading.Event()
            while attacker.poll() is None and time.monotonic() - started < args.seconds - 2:
                during.append(ask(port, token, context))
                stop.wait(0.5)
            tally = attacker.stdout.readline().strip()
            attacker.wait(timeout=args.seconds + 60)
            summary(f"during {args.count} slow connections", during)
            print(f"the slow connections: {tally}", flush=True)
            print(f"load {load_average()}", flush=True)


if __name__ == "__main__":
    main()
