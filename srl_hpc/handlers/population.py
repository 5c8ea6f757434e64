"""Population manager handler: population-based training's rounds, beside the controller.

It runs in the controller's worker (in a thread of its own) and reads the controller's scores of each
member (`ControllerHandler.scores`: the mean return of its last window of episodes). It follows every
member's newest weights on the parameter stream, as a policy worker does. Every `population.interval`
seconds, Population (srl_hpc/population/pbt.py) decides which members copy which. Each copy goes to the copying
member's trainer over the "population" stream: the source's newest weights and the new hyper-parameters.
The trainer applies it between two updates. Each copy is appended to RUN/population/lineage.jsonl and to
the trace table `copy`. A resumed run replays the lineage, so the members' hyper-parameters carry on.
"""

from __future__ import annotations

import json
import logging
import os
import time

import numpy as np
import zmq

from srl_hpc.handlers import Handler
from srl_hpc.population.pbt import Copy, Population
from srl_hpc.services.parameters import ParameterSubscriber, arrays_checksum
from srl_hpc.streams import endpoints, wire


class PopulationHandler(Handler):
    kind = "population"

    def __init__(self, worker) -> None:
        super().__init__(worker)
        exp = self.exp
        self.controller = worker.handlers["controller"]  # built before it, in the same worker
        self.population = Population(
            exp.population,
            exp.algorithm,
            exp.stop.return_window,
            np.random.default_rng(worker.seed + 104_729 * worker.attempt),
        )
        self.lineage = worker.run_dir.lineage
        if (worker.attempt > 1 or worker.incarnation) and self.lineage.exists():  # resumed, or replaced
            self.population.replay([json.loads(line) for line in self.lineage.read_text().splitlines() if line])
        self.members = self.population.members
        self.newest: dict[str, wire.Message] = {}  # member -> its newest weights
        self.t0 = time.monotonic()

    def connect(self, table) -> None:
        self.weights, self.directives = {}, {}
        for member in self.members:
            trainer = self.graph.trainers(member)[0].name
            self.weights[member] = ParameterSubscriber.connect(
                self.worker.ctx, endpoints.address(table, trainer, "parameters"), member
            )
            sock = self.worker.ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoints.address(table, trainer, "population"))
            self.directives[member] = sock

    def start(self) -> None:
        self.t0 = time.monotonic()

    def poll(self, timeout_ms) -> None:
        for member, subscriber in self.weights.items():
            msg = subscriber.poll_newest()
            if msg is not None:
                self.newest[member] = msg
        now = time.monotonic() - self.t0
        stopping = self.controller.outcome is not None  # no copy the trainers might stop before taking
        if stopping or len(self.newest) < len(self.members) or not self.population.due(now):
            time.sleep(min(timeout_ms, 50) / 1000)
            return
        for copy in self.population.round(now, self.controller.scores):
            self._send(copy, now)

    def _send(self, copy: Copy, now: float) -> None:
        """The source's newest weights and the new hyper-parameters to the target's trainer; the lineage."""
        weights = self.newest[copy.source]
        version = weights.meta["version"]
        meta = {"round": copy.round, "source": copy.source, "source_version": version, "values": copy.values}
        try:
            self.directives[copy.target].send_multipart(wire.pack("copy", meta, weights.arrays), zmq.NOBLOCK)
        except zmq.Again:  # its trainer is gone (the run is failing): nothing copied, nothing recorded
            logging.getLogger(__name__).warning(
                "round %d: %s's trainer takes nothing; no copy", copy.round, copy.target
            )
            return
        checksum = arrays_checksum(weights.arrays)  # the target's trace shows the same once it has loaded them
        record = {
            "round": copy.round,
            "time": round(self.controller.totals.elapsed(time.monotonic()), 2),
            "target": copy.target,
            "source": copy.source,
            "source_version": version,
            "checksum": checksum,
            "values": copy.values,
            "previous": copy.previous,
            "scores": copy.scores,
        }
        self.lineage.parent.mkdir(exist_ok=True)
        with open(self.lineage, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
        index = self.members.index
        self.trace.record(
            "copy",
            round=copy.round,
            target=index(copy.target),
            source=index(copy.source),
            source_version=version,
            checksum=checksum,
            target_score=copy.scores[copy.target],
            source_score=copy.scores[copy.source],
            **{f"new_{k}": v for k, v in copy.values.items()},
        )
        changes = ", ".join(f"{k} {copy.previous[k]:.3g} -> {v:.3g}" for k, v in copy.values.items())
        self.controller.console.line(
            f"population round {copy.round}: {copy.target} ({copy.scores[copy.target]:.1f}) copies {copy.source} "
            f"({copy.scores[copy.source]:.1f}, version {version}){': ' + changes if changes else ''}"
        )

    def close(self) -> None:
        for sock in self.directives.values():
            sock.close(0)
