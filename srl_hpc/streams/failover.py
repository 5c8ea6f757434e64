"""Requests that do not wait for a replaced policy worker: while an actor's policy worker is away, another
policy worker of the same policy answers them.

Policy workers keep no state (a recurrent model's state travels with each request), so any of a policy's
policy workers can answer any request. An actor sends to its own policy worker (`primary`, over shared
memory or ZMQ); when that one goes away, the requests it held and every new request go over ZMQ to another
policy worker of the policy (the client to it is made the first time it is needed), until the primary's
replacement is there. Each request is waited for where it went, so none is answered twice and none waits for
a server that will never answer it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from srl_hpc.streams import wire
from srl_hpc.streams.inference import InferenceClient, ShmInferenceClient


class FailoverClient:
    """The send/wait interface of an inference client, over `primary` and, while it is lost, the client that
    `connect_other()` makes to another policy worker of the same policy."""

    def __init__(
        self, primary: InferenceClient | ShmInferenceClient, connect_other: Callable[[], InferenceClient]
    ) -> None:
        self.primary = primary
        self.connect_other = connect_other
        self.other: InferenceClient | None = None
        self.rerouted = 0  # requests a lost primary held, sent to the other policy worker
        self._holder: dict[int, InferenceClient | ShmInferenceClient] = {}  # group -> where its request went

    @property
    def resent(self) -> int:
        """Requests sent again to a replacement."""
        return self.primary.resent + (self.other.resent if self.other is not None else 0)

    def send(self, group: int, obs: np.ndarray, meta: dict | None = None, hidden: np.ndarray | None = None) -> None:
        client = self._route()
        client.send(group, obs, meta, hidden)
        self._holder[group] = client

    def wait(self, group: int, timeout_ms: int) -> wire.Message | None:
        self._route()
        return self._holder[group].wait(group, timeout_ms)

    def close(self) -> None:
        if isinstance(self.primary, ShmInferenceClient):
            self.primary.close()

    def _route(self) -> InferenceClient | ShmInferenceClient:
        """Where a new request goes: the primary, unless it is lost and another policy worker is reachable
        (which then takes the requests the primary held)."""
        if not self.primary.is_lost():
            return self.primary
        if self.other is None:
            self.other = self.connect_other()
        if self.other.is_lost():  # that one is away too: wait for the primary's replacement
            return self.primary
        for group, (obs, meta, hidden) in self.primary.take_unanswered().items():
            self.other.send(group, obs, meta, hidden)
            self._holder[group] = self.other
            self.rerouted += 1
        return self.other
