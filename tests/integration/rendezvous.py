"""The rendezvous the fleet tests of jobs across nodes run.

Both kinds: a job file's runs on every node (test_fleet_multinode.py) and srun's tasks
across a job's nodes (test_fleet_step_tasks.py).
"""

from __future__ import annotations

# The hosts share this machine's docker engine: their containers on the host's network
# reach the first node at this machine's loopback (on real hosts: its fabric address).
ACROSS = {"peer_address": "127.0.0.1", "multinode_network": "host"}

# Rank 0 listens on MASTER_PORT, the others connect to MASTER_ADDR:MASTER_PORT and send
# their RANK; rank 0 sends back the sum. Each prints what it got. FAIL_RANK fails that
# rank with FAIL_CODE (default 1); FLOOD_RANK prints FLOOD_LINES lines; HANG waits after.
ALLREDUCE = """\
import os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if os.environ.get("FAIL_RANK") == str(rank):
    print(f"rank {rank} fails", flush=True)
    sys.exit(int(os.environ.get("FAIL_CODE", "1")))
if rank == 0:
    server = socket.create_server(("", port))
    peers = [server.accept()[0] for _ in range(world - 1)]
    total = rank + sum(int(p.makefile().readline()) for p in peers)
    for p in peers:
        p.sendall(f"{total}\\n".encode())
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    conn.sendall(f"{rank}\\n".encode())
    total = int(conn.makefile().readline())
print(f"rank {rank} of {world}: sum {total}", flush=True)
if os.environ.get("FLOOD_RANK") == str(rank):
    for _ in range(int(os.environ["FLOOD_LINES"])):
        print("f" * 99)
    sys.stdout.flush()
if os.environ.get("HANG"):
    time.sleep(600)
"""
