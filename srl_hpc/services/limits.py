"""Descriptors and ZMQ sockets a worker needs, planned from the run's graph, and the open-files limit raised
to meet them.

A server holds one connection (one descriptor) per client, so the controller, a trainer and a policy
worker need descriptors in proportion to the workers they serve; clusters commonly give users a soft
`RLIMIT_NOFILE` of 1024 with a higher hard limit. Every worker raises its soft limit to the hard one at
start, and a run whose largest need is over the hard limit is refused before it starts, naming the limit,
the worker and the count (docs/limits.md tabulates the needs as functions of N). `graph` is the run's
srl_hpc.graph.Graph (read for its streams; not imported: services sit below the graph).
"""

from __future__ import annotations

import resource

# The interpreter, torch and its thread pools, the trace and log files, ZMQ's I/O threads, and a margin.
BASE_DESCRIPTORS = 64
# Descriptors per peer on either end of a stream: a shared-memory inference client holds a Unix socket and
# its mapped segments besides its ZMQ connection; the control stream is two sockets (events up, commands
# down). Every other stream is one TCP connection per peer.
DESCRIPTORS_PER_PEER = {"inference": 3, "control": 2}
# ZMQ sockets per end of a stream; libzmq caps the sockets of one context (ZMQ_MAX_SOCKETS, 1023 by
# default), not their connections. An actor's gated sample stream is a PUSH and a DEALER per trainer.
SOCKETS_PER_END = {"control": 2, "samples": 2}
# A client that watches its connection to the server, to learn that a replacement took the server's place:
# a monitor, two more sockets (a descriptor each) on the client's end
MONITORED = ("inference", "credits")


class LimitError(RuntimeError):
    pass


def descriptors_needed(graph, name: str) -> int:
    """File descriptors worker `name` holds once connected: its base, plus one (or a few) per peer of each
    stream it serves or connects to."""
    total = BASE_DESCRIPTORS
    for s in graph.streams:
        per_peer = DESCRIPTORS_PER_PEER.get(s.kind, 1)
        if s.server == name:
            total += per_peer * sum(c != name for c in s.clients)
        elif name in s.clients:
            total += per_peer + (2 if s.kind in MONITORED else 0)
    return total


def sockets_needed(graph, name: str) -> int:
    """ZMQ sockets worker `name` opens: a few per stream it serves, one or two per server it connects to."""
    total = 0
    for s in graph.streams:
        if s.server == name or name in s.clients:
            total += SOCKETS_PER_END.get(s.kind, 1)
        if name in s.clients and s.server != name and s.kind in MONITORED:
            total += 2
    return total


def largest_need(graph) -> tuple[str, int]:
    """The worker that needs the most descriptors, and how many."""
    return max(((n, descriptors_needed(graph, n)) for n in graph.names), key=lambda item: item[1])


def raise_open_files(needed: int, who: str, workers: int) -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (children inherit it); refuse if even the
    hard limit is under `needed`. Returns the (soft, hard) limits now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise LimitError(too_few_files(who, needed, workers, hard))
    return soft, hard


def too_few_files(who: str, needed: int, workers: int, hard: int) -> str:
    return (
        f"{who} needs about {needed} open files in a run of {workers} workers, but the hard open-files "
        f"limit (RLIMIT_NOFILE, `ulimit -Hn`) is {hard} here. Raise it where the run starts (on a cluster: "
        f"its admins, or PropagateResourceLimits in slurm.conf with a higher limit at submission), or give "
        f"each server fewer clients (more policy workers or trainers): docs/limits.md"
    )
