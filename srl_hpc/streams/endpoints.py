"""Every endpoint name in one place: the ports a worker binds, and how others find their addresses.

At start each worker binds its ports on free port numbers, publishes {worker, host, node, ports} through
rendezvous, and connects to the addresses found here. A stream's port is named after its kind
(srl_hpc.graph.Stream.kind: "inference", "samples", "parameters"); the controller binds two more.
"""
from __future__ import annotations

import zmq

from srl_hpc.streams.security import PrivateContext

EVENTS = "events"        # controller PULL: heartbeats, stats, failures from every worker
COMMANDS = "commands"    # controller PUB: stop / finish broadcasts
DDP = "ddp"  # trainer/0's torch.distributed TCPStore, when there are several trainers


def address(table: dict, worker: str, port: str) -> str:
    """tcp:// address of `port` bound by `worker`, from the rendezvous table."""
    entry = table[worker]
    return f"tcp://{entry['host']}:{entry['ports'][port]}"


def same_node(table: dict, a: str, b: str) -> bool:
    return table[a]["node"] == table[b]["node"]


def bind(sock: zmq.Socket, port: int | None = None) -> int:
    """Bind on `port` (a replaced worker's) or a free port of every interface; returns the port. A socket of
    a CURVE context (every run's: srl_hpc.streams.security) serves with the run's key, and a worker's
    context counts what it refuses."""
    if sock.mechanism == zmq.CURVE:
        sock.curve_server = True
        if isinstance(sock.context, PrivateContext):
            sock.context.watch(sock)
    if port is None:
        return sock.bind_to_random_port("tcp://*")
    sock.bind(f"tcp://*:{port}")
    return port
