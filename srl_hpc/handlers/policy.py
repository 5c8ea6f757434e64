"""Policy handler: batched action selection with the newest published weights.

Where it runs is the placement (srl_hpc.graph): a policy worker of its own serving actors over the
inference stream (SRL), trainer/0's worker serving them from a thread (SEED-style), or inside each actor
answering its requests inline (IMPALA-style). Served over a socket it does dynamic batching: every
pending request up to `max_batch` observations, one forward pass, each actor answered with its slice
and the policy version; new weights are taken between batches, never waited for.

With self-play (opponents.rule) a request names, per row, the version to act with: the newest for the
learner's seats, a stored one (from the run's parameter database) for its opponents'. Stored versions are
loaded on first use and the least recently used dropped beyond twice the opponents' pool (the actors each
draw from the newest `opponents.pool` snapshots, and look for new ones at their own times).
"""

from __future__ import annotations

import collections
import logging
import time
from pathlib import Path

import numpy as np
import torch

from srl_hpc.algorithm_spec import reads_global_state, spec
from srl_hpc.envs.backends import spaces
from srl_hpc.handlers import Handler
from srl_hpc.models.building import build_model
from srl_hpc.models.devices import resolve_device
from srl_hpc.models.normalization import exact_statistics
from srl_hpc.models.weights import load_arrays
from srl_hpc.population.opponents import NEWEST
from srl_hpc.rundir.checkpoint import Checkpoint
from srl_hpc.services.parameter_db import ParameterDB, VersionNotFound
from srl_hpc.services.parameters import LATEST, InlineSubscriber, ParameterSubscriber
from srl_hpc.streams import endpoints, unix
from srl_hpc.streams.contract import Contract
from srl_hpc.streams.inference import InferenceServer

PULL_INTERVAL = 0.005  # seconds between looks for newer weights


class InferenceEngine:
    """One model that chooses actions for a batch of observations, by its algorithm's `act`."""

    def __init__(self, model: torch.nn.Module, act, device: torch.device, seed: int, bf16: bool = False) -> None:
        # bf16: weights converted once (published fp32 weights are converted as they load), rather than by
        # autocast on every call, which gains less (docs/benchmarks.md)
        self.model = exact_statistics(model.to(device, torch.bfloat16 if bf16 else torch.float32)).eval()
        self.act = act
        self.device = device
        self.version = 0  # the seed-identical initial weights are version 0 everywhere
        self._pulled_at = float("-inf")
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def infer(
        self, obs: np.ndarray, explore: dict[str, np.ndarray], hidden: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """The algorithm's reply arrays; `hidden`: a recurrent model's state per observation (the reply has the
        next)."""
        state = () if hidden is None else (torch.from_numpy(hidden).to(self.device),)
        with torch.inference_mode():
            out = self.act(
                self.model,
                torch.from_numpy(obs).to(self.device),
                {k: torch.from_numpy(v).to(self.device) for k, v in explore.items()},
                self.generator,
                *state,
            )
        return {k: v.cpu().numpy() for k, v in out.items()}

    def pull(self, subscriber, trace=None) -> None:
        """Take the newest published weights, if any; never waits. Looks at most every PULL_INTERVAL: a
        policy worker serves thousands of batches a second, a trainer publishes tens of versions."""
        t0 = time.perf_counter()
        if t0 - self._pulled_at < PULL_INTERVAL:
            return
        self._pulled_at = t0
        newest = subscriber.poll_newest()
        if newest is not None and newest.meta["version"] > self.version:
            self.load(newest, trace, t0)

    def resume(self, path: Path) -> None:
        """A resumed run (attempt > 1) acts with its checkpoint's weights from the first request: the seed's
        initial weights (version 0) would act at random until the trainer's first publication, and an
        evaluation round would score them as the run's newest policy."""
        checkpoint = Checkpoint(path)
        if checkpoint.exists():
            self.version = checkpoint.load_weights(self.model)

    def load(self, params, trace=None, t0: float | None = None) -> None:
        """Load a parameter-service message's weights (recorded in the trace, timed from t0)."""
        t0 = time.perf_counter() if t0 is None else t0
        load_arrays(self.model, params.arrays)
        if trace is not None:
            trace.record(
                "param_pull",
                version=params.meta["version"],
                seconds=time.perf_counter() - t0,
                lag=params.meta["version"] - self.version,
            )
        self.version = params.meta["version"]


class PolicyHandler(Handler):
    kind = "policy"

    def __init__(self, worker) -> None:
        super().__init__(worker)
        exp, cfg = self.exp, self.exp.workers.policy
        torch.set_num_threads(cfg.torch_threads)
        algorithm = spec(exp.algorithm)
        self.explore_keys = tuple(algorithm.explore(exp.algorithm, 0, 1))
        index = self.graph.worker(self.name).index
        device = resolve_device(self.graph.worker(self.name).device, worker.gpu_index, worker.may_share_gpu, self.name)
        self.policy = self.graph.worker(self.name).policy  # with several policies, the one it serves
        obs_space, action_space = spaces(exp.env, exp.policies, self.policy, reads_global_state(exp.algorithm))
        self.contract = Contract.of(obs_space, action_space, algorithm, exp)
        seed, bf16 = worker.seed + 7919 * (index + 1), cfg.precision == "bf16"
        self.engine = InferenceEngine(
            build_model(exp, obs_space, action_space, self.policy), algorithm.load().act, device, seed, bf16=bf16
        )
        self.stored = StoredEngines(
            ParameterDB(worker.run_dir.parameters_of(self.policy)),
            lambda: InferenceEngine(
                build_model(exp, obs_space, action_space, self.policy), algorithm.load().act, device, seed, bf16=bf16
            ),
            self.trace,
            capacity=2 * exp.opponents.pool,
        )
        if worker.attempt > 1:
            self.engine.resume(worker.run_dir.checkpoint_of(self.policy))
        self.max_batch = cfg.max_batch
        self.stream = self.graph.served_by("inference", self.name)
        self.active = self.stream is not None and self.stream.transport != "inline"
        self.server: InferenceServer | None = None
        self.rows = 0
        # a replacement answers nothing until it holds the newest published weights: its predecessor's
        # actors acted with those, and the trainer would drop samples of older ones
        self.weights_due = worker.incarnation > 0

    def bind(self) -> dict[str, int]:
        if not self.active:
            return {}
        local = unix.socket_path(self.worker.run_dir.root, self.name) if self.stream.transport != "zmq" else None
        self.server, port = InferenceServer.bind(
            self.worker.ctx,
            self.contract.obs.shape,
            self.explore_keys,
            self.contract.reply_fields(),
            local_path=local,
            port=self.worker.ports.get("inference"),  # a replacement's: its predecessor's, which the actors know
        )
        return {"inference": port}

    def connect(self, table) -> None:
        (stream,) = [s for s in self.graph.servers_for("parameters", self.name)]
        tag = self.policy or LATEST  # its policy's weights
        self.parameters: InlineSubscriber | ParameterSubscriber
        if "relay" in self.worker.handlers:  # the relay beside us passes the weights on: read what it has
            self.parameters = InlineSubscriber(self.worker.handlers["relay"].publisher, tag)
        elif stream.transport == "inline":  # the trainer hosted beside us publishes
            self.parameters = InlineSubscriber(self.worker.handlers["trainer"].publisher, tag)
        else:
            address = endpoints.address(table, stream.server, "parameters")
            self.parameters = ParameterSubscriber.connect(self.worker.ctx, address, tag)

    def poll(self, timeout_ms) -> None:
        """Dynamic batching: answer every pending request (up to max_batch observations) with one forward pass."""
        assert self.server is not None  # (polled when active, and bound)
        if self.weights_due:
            newest = self.parameters.wait_newest(timeout_ms)  # (the trainer publishes again every few seconds)
            if newest is None:
                return
            self.engine.load(newest, self.trace)
            self.weights_due = False
        self.engine.pull(self.parameters, self.trace)
        batch = self.server.poll_batch(self.max_batch, timeout_ms)
        if not batch:
            return
        queue_wait = time.monotonic() - min(r.received_at for r in batch)
        t0 = time.perf_counter()
        if len(batch) == 1:  # (most batches on a busy CPU: requests seldom arrive together)
            obs, hidden = batch[0].obs, batch[0].hidden
        else:
            obs = np.concatenate([r.obs for r in batch])
            hidden = np.concatenate([r.hidden for r in batch]) if batch[0].hidden is not None else None
        explore = {
            k: np.concatenate([np.full(len(r.obs), r.meta[k], np.float32) for r in batch]) for k in self.explore_keys
        }
        versions = None
        if any("opponents" in r.meta for r in batch):
            versions = np.concatenate(
                [np.asarray(r.meta.get("opponents", [NEWEST] * len(r.obs)), np.int64) for r in batch]
            )
        out = self._infer(obs, explore, hidden, versions)
        t1 = time.perf_counter()
        meta, start = {"version": self.engine.version}, 0
        for req in batch:
            end = start + len(req.obs)
            self.server.reply(req, meta, out if len(batch) == 1 else {k: v[start:end] for k, v in out.items()})
            start = end
        self.trace.record(
            "inference",
            requests=len(batch),
            batch_size=len(obs),
            queue_wait=queue_wait,
            compute_seconds=t1 - t0,
            reply_seconds=time.perf_counter() - t1,
            version=self.engine.version,
        )
        self.rows += len(obs)

    def _infer(
        self, obs: np.ndarray, explore: dict, hidden: np.ndarray | None, versions: np.ndarray | None
    ) -> dict[str, np.ndarray]:
        """The reply arrays for a batch; with `versions`, each row's from the engine of its version."""
        if versions is None or (versions == NEWEST).all():
            return self.engine.infer(obs, explore, hidden)
        out = {}
        for version in np.unique(versions):
            rows = np.flatnonzero(versions == version)
            engine = (
                None if version in (NEWEST, self.engine.version) else self.stored.engine(int(version))
            ) or self.engine
            part = engine.infer(
                obs[rows], {k: v[rows] for k, v in explore.items()}, None if hidden is None else hidden[rows]
            )
            for name, values in part.items():
                if name not in out:
                    out[name] = np.empty((len(obs), *values.shape[1:]), values.dtype)
                out[name][rows] = values
        return out

    def serve_inline(self, obs: np.ndarray, meta: dict, hidden: np.ndarray | None) -> tuple[dict[str, np.ndarray], int]:
        """The inline transport: answer one request of this worker's actor at once."""
        self.engine.pull(self.parameters, self.trace)
        t0 = time.perf_counter()
        versions = np.asarray(meta["opponents"], np.int64) if "opponents" in meta else None
        out = self._infer(obs, {k: np.full(len(obs), meta[k], np.float32) for k in self.explore_keys}, hidden, versions)
        self.trace.record(
            "inference",
            requests=1,
            batch_size=len(obs),
            queue_wait=0.0,
            compute_seconds=time.perf_counter() - t0,
            reply_seconds=0.0,
            version=self.engine.version,
        )
        self.rows += len(obs)
        return out, self.engine.version

    def close(self) -> None:
        if self.server is not None:
            self.server.close()

    def queue_depths(self) -> dict[str, int]:
        return {"held_requests": self.server.held()} if self.server else {}

    def stats(self) -> dict:
        return {
            "rows": self.rows,
            "policy_version": self.engine.version,
            "malformed_dropped": self.server.malformed if self.server else 0,
        }


class StoredEngines:
    """Engines of versions from the parameter database (self-play opponents), loaded on first use; the least
    recently used is dropped beyond `capacity`. A version no longer stored (untagged and collected since
    the actor chose it) is played by the newest weights' engine instead, with a warning."""

    def __init__(self, db: ParameterDB, new_engine, trace, capacity: int) -> None:
        self.db, self.new_engine, self.trace, self.capacity = db, new_engine, trace, capacity
        self.engines: collections.OrderedDict[int, InferenceEngine | None] = collections.OrderedDict()

    def engine(self, version: int) -> InferenceEngine | None:
        """The engine of stored `version`; None if it is not stored."""
        if version in self.engines:
            self.engines.move_to_end(version)
            return self.engines[version]
        t0 = time.perf_counter()
        try:
            _, arrays = self.db.get(version)
        except VersionNotFound as e:
            logging.getLogger(__name__).warning("opponent version %d: %s; the newest weights play it", version, e)
            engine = None
        else:
            engine = self.new_engine()
            load_arrays(engine.model, arrays)
            engine.version = version
            self.trace.record("opponent_load", version=version, seconds=time.perf_counter() - t0)
        self.engines[version] = engine
        if len(self.engines) > self.capacity:
            self.engines.popitem(last=False)
        return engine
