"""Relay handler: passes weight versions on, so that no worker sends each version to more than
`workers.parameter_fanout` others (srl_hpc.graph.parameter_tree). With the impala placement every actor
needs the weights: trainer/0 sends each version to a few actors, which pass it to a few more each.

A relay takes every tag from its parent, keeps the newest version of each, and publishes it to its
children through a parameter publisher of its own (which also repeats it for children that connect late);
the policy handler beside it reads that publisher in-process.
"""

from __future__ import annotations

import zmq

from srl_hpc.handlers import Handler
from srl_hpc.services.parameters import ParameterPublisher, ParameterSubscriber
from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.waiting import waiting


class RelayHandler(Handler):
    kind = "relay"

    def __init__(self, worker) -> None:
        super().__init__(worker)
        self.publisher: ParameterPublisher | None = None
        self.upstream: zmq.Socket | None = None
        self.versions: dict[str, int] = {}  # tag -> newest version passed on
        self.malformed = 0

    def bind(self) -> dict[str, int]:
        # a replacement (relays live in actors, which are replaced) binds its predecessor's port: children know it
        self.publisher, port = ParameterPublisher.bind(self.worker.ctx, self.worker.ports.get("parameters"))
        return {"parameters": port}

    def connect(self, table) -> None:
        (parent,) = [s for s in self.graph.servers_for("parameters", self.name) if s.server != self.name]
        # every tag (the empty prefix): children may follow any
        self.upstream = ParameterSubscriber.connect(
            self.worker.ctx, endpoints.address(table, parent.server, "parameters"), tag=""
        ).socket

    def poll(self, timeout_ms) -> None:
        assert self.upstream is not None and self.publisher is not None  # (connect and bind come first)
        if self.upstream.poll(timeout_ms, zmq.POLLIN):
            newest: dict[str, wire.Message] = {}
            for frames in waiting(self.upstream):
                try:
                    msg = wire.unpack(frames[1:])
                    tag, version = msg.meta["tag"], msg.meta["version"]
                except (wire.WireError, KeyError):
                    self.malformed += 1
                    continue
                held = newest.get(tag)
                if version > self.versions.get(tag, -1) and (held is None or version > held.meta["version"]):
                    newest[tag] = msg  # older versions still queued are skipped, as subscribers skip them
            for tag, msg in newest.items():
                self.versions[tag] = msg.meta["version"]
                self.publisher.publish(msg.meta["version"], msg.arrays, tags=(tag,))
        self.publisher.maybe_republish()

    def stats(self) -> dict:
        assert self.publisher is not None  # (bind comes first)
        return {"relayed_bytes_sent": self.publisher.bytes_sent, "malformed_dropped": self.malformed}
