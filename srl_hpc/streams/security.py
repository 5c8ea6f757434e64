"""Private runs: every ZMQ socket of a run speaks CURVE with the run's own key pair.

The launcher makes one key pair per run into RUN/keys/ (directory 0700, file 0600: only the run's owner
reads it, on the shared file system of a cluster). Every worker loads it into its ZMQ context as the
default for new sockets, so each socket is a CURVE client of the run's key; a socket that binds becomes
a CURVE server with the same key (srl_hpc.streams.endpoints.bind). A client without the run's keys cannot
complete the handshake with any port of the run: nothing it sends reaches a worker. A worker's context
(PrivateContext) watches its bound sockets and counts those refused handshakes, reported as the
`handshakes_refused` counter (each reconnect attempt of a foreign client is one more).
"""

from __future__ import annotations

import json
import os

import zmq
from zmq.utils.monitor import recv_monitor_message

from srl_hpc.rundir import RunDir

HANDSHAKE_FAILURES = (
    zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


def write_run_keys(run: RunDir) -> None:
    """A fresh key pair for the run (kept if the run already has one: a resumed run keeps its keys)."""
    if run.keys.exists():
        return
    run.keys.parent.mkdir(mode=0o700, exist_ok=True)
    os.chmod(run.keys.parent, 0o700)
    public, secret = zmq.curve_keypair()
    fd = os.open(run.keys, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"public": public.decode(), "secret": secret.decode()}, f)


def secure_context(ctx: zmq.Context, run: RunDir) -> None:
    """Make every socket this context creates from now on a CURVE client of the run's key."""
    keys = json.loads(run.keys.read_text())
    public, secret = keys["public"].encode(), keys["secret"].encode()
    ctx.curve_publickey = public
    ctx.curve_secretkey = secret
    ctx.curve_serverkey = public


class PrivateContext(zmq.Context):
    """A worker's ZMQ context in a private run: CURVE with the run's keys on every socket, and a count of
    the handshakes its bound sockets refused. Monitors are read by the thread that calls
    handshakes_refused() (the worker's main loop, with its heartbeats)."""

    _monitors: list | None = None  # declared: pyzmq takes an unknown attribute of a Context for a socket option
    _refused: int = 0

    def __init__(self, run: RunDir) -> None:
        super().__init__()
        self._monitors = []
        self._refused = 0
        secure_context(self, run)

    def watch(self, sock: zmq.Socket) -> None:
        """Count the handshakes `sock` (a bound CURVE server) refuses."""
        assert self._monitors is not None  # (set in __init__)
        self._monitors.append(sock.get_monitor_socket(HANDSHAKE_FAILURES))

    def handshakes_refused(self) -> int:
        assert self._monitors is not None  # (set in __init__)
        for monitor in self._monitors:
            while monitor.poll(0):
                if recv_monitor_message(monitor)["event"] & HANDSHAKE_FAILURES:
                    self._refused += 1
        return self._refused
