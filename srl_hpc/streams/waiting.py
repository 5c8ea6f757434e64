"""Draining a ZMQ socket without blocking, on hot loops.

Every serving loop (a policy worker's inference server, its weight subscriber, the controller's commands)
looks for waiting messages once per turn, and mostly finds none. Asking the socket (ZMQ_EVENTS) costs
less than a non-blocking receive that raises zmq.Again (docs/benchmarks.md), and a policy worker's turn
asks three times for each batch it serves.
"""

from __future__ import annotations

from collections.abc import Iterator

import zmq


def waiting(socket: zmq.Socket, copy: bool = False) -> Iterator[list]:
    """The frames of each message waiting on `socket`, until none is left; never blocks."""
    while socket.get(zmq.EVENTS) & zmq.POLLIN:  # type: ignore[arg-type, operator]
        try:
            yield socket.recv_multipart(zmq.NOBLOCK, copy=copy)
        except zmq.Again:  # (the events said readable; a receive can still find nothing, e.g. a peer gone)
            return
