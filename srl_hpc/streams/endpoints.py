"""Every endpoint name in one place: the ports a worker binds, and how others find their addresses.

At start each worker binds its ports on free port numbers, publishes {worker, host, node, ports} through
rendezvous, and connects to the addresses found here. A stream's port is named after its kind
(srl_hpc.graph.Stream.kind: "inference", "samples", "parameters"); the controller binds two more.
"""

from __future__ import annotations

import zmq

from srl_hpc.streams.security import PrivateContext

EVENTS = "events"  # controller PULL: heartbeats, stats, failures from every worker
COMMANDS = "commands"  # controller PUB: stop / finish broadcasts
DDP = "ddp"  # trainer/0's torch.distributed TCPStore, when there are several trainers


def address(table: dict, worker: str, port: str) -> str:
    """tcp:// address of `port` bound by `worker`, from the rendezvous table."""
    entry = table[worker]
    return f"tcp://{entry['host']}:{entry['ports'][port]}"


def same_node(table: dict, a: str, b: str) -> bool:
    return table[a]["node"] == table[b]["node"]


class _Binding:
    """Where this process binds: the address it advertises (set once by the worker, from slurm.network under
    Slurm), and the port range it may use (slurm.ports; None: any free port)."""

    host = "*"
    ports: tuple[int, int] | None = None


def configure(host: str, ports: tuple[int, int] | None) -> None:
    _Binding.host, _Binding.ports = host, ports


def free_port_numbers() -> range | None:
    """The port numbers this process may bind (None: any); for servers that take a number, not a socket."""
    return None if _Binding.ports is None else range(_Binding.ports[0], _Binding.ports[1] + 1)


def bind(sock: zmq.Socket, port: int | None = None) -> int:
    """Bind on `port` (a replaced worker's) or a free port of the configured range, on the configured address;
    returns the port. A socket of a CURVE context (every run's: srl_hpc.streams.security) serves with the
    run's key, and a worker's context counts what it refuses."""
    if sock.mechanism == zmq.CURVE:
        sock.curve_server = True
        if isinstance(sock.context, PrivateContext):
            sock.context.watch(sock)
    if port is None and _Binding.ports is None:
        return sock.bind_to_random_port(f"tcp://{_Binding.host}")  # the system picks a free port
    if port is None:
        assert _Binding.ports is not None  # (returned above otherwise)
        low, high = _Binding.ports
        try:
            return sock.bind_to_random_port(f"tcp://{_Binding.host}", min_port=low, max_port=high + 1, max_tries=1000)
        except zmq.ZMQBindError:
            raise RuntimeError(f"no free port in slurm.ports {low}-{high} on {_Binding.host}") from None
    sock.bind(f"tcp://{_Binding.host}:{port}")
    return port
