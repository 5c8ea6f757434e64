"""Trainer handler: batches in, algorithm updates, versioned weights out, checkpoints on disk.

Where batches come from is the graph's (batch_sources.py): on-policy, a BatchAssembler pulls segments from
the sample stream, drops those older than the algorithm's policy lag limit, and turns `batch_segments` of
them into training tensors (GAE included); every frame received is consumed by an update or counted as
dropped, and the controller checks the totals against what the actors sent. Off-policy, a ReplayReceiver
takes sampled batches from the buffer workers, and the update's new priorities go back to the buffer that
sent the batch. With `prefetch` on, the source runs in its own thread (prefetch.py), so the next batch is
ready while the current one trains. With several trainers they train one model data-parallel, in
lockstep (lockstep.py); trainer/0 publishes and checkpoints (srl_hpc/rundir/checkpoint.py), and keeps the policy's
parameter database (services/parameter_db.py): each checkpoint's version tagged `latest`, every
`snapshot_every`-th version tagged `snapshot-N`, at most `keep_untagged` other versions. In a population
(population-based training) a member's trainer starts with its member's hyper-parameters and, between two
updates, takes the copies the population manager sends it: another member's weights and new
hyper-parameters (srl_hpc/population/pbt.py).
"""

from __future__ import annotations

import dataclasses
import time

import torch
import zmq

from srl_hpc.algorithm_spec import reads_global_state, spec
from srl_hpc.envs.backends import agent_count, spaces
from srl_hpc.handlers import POLL_MS, Handler
from srl_hpc.handlers.batch_sources import BatchAssembler, ReplayReceiver
from srl_hpc.handlers.lockstep import Lockstep
from srl_hpc.handlers.prefetch import DeviceCopy, Prefetcher
from srl_hpc.models.building import build_model
from srl_hpc.models.devices import resolve_device
from srl_hpc.models.weights import load_arrays, parameter_checksum, state_arrays
from srl_hpc.population.pbt import starting_values
from srl_hpc.rundir.checkpoint import Checkpoint
from srl_hpc.services import parameter_db
from srl_hpc.services.parameter_db import ParameterDB
from srl_hpc.services.parameters import LATEST, ParameterPublisher
from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.contract import Contract
from srl_hpc.streams.credits import CreditLedger
from srl_hpc.streams.samples import SampleConsumer, SampleProducer


class LossMeans:
    """The mean of each loss over the updates since the last report (the last report's again when none came
    since): what TensorBoard and the summary show, smoother than one update's."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._count = 0
        self._last: dict[str, float] = {}

    def add(self, losses: dict[str, float]) -> None:
        for k, v in losses.items():
            self._sums[k] = self._sums.get(k, 0.0) + v
        self._count += 1

    def report(self) -> dict[str, float]:
        if self._count:
            self._last = {k: round(v / self._count, 6) for k, v in self._sums.items()}
            self._sums, self._count = {}, 0
        return self._last


class TrainerHandler(Handler):
    kind = "trainer"

    def __init__(self, worker) -> None:
        super().__init__(worker)
        exp, cfg = self.exp, self.exp.workers.trainer
        torch.set_num_threads(cfg.torch_threads)
        self.cfg = cfg
        self.policy = self.graph.worker(self.name).policy  # with several policies, the one it trains
        peers = [w.name for w in self.graph.trainers(self.policy)]  # data-parallel with these, by rank
        self.device = resolve_device(
            self.graph.worker(self.name).device, worker.gpu_index, worker.may_share_gpu, self.name
        )
        obs_space, action_space = spaces(exp.env, exp.policies, self.policy, reads_global_state(exp.algorithm))
        self.model = build_model(exp, obs_space, action_space, self.policy).to(self.device)
        self.spec = spec(exp.algorithm)
        self.contract = Contract.of(obs_space, action_space, self.spec, exp)
        algorithm = exp.algorithm
        if exp.population.size:  # a member: its own starting hyper-parameters
            algorithm = dataclasses.replace(algorithm, **starting_values(exp.population, algorithm, self.policy))
        self.algorithm = self.spec.load()(
            self.model, algorithm, self.device, bf16=cfg.precision == "bf16", total_frames=exp.stop.env_frames
        )
        agents = getattr(self.model, "agents", 1)  # a centralised critic sees whole envs: batches must hold them
        if cfg.batch_segments % agents:
            raise ValueError(
                f"workers.trainer.batch_segments ({cfg.batch_segments}) must be a multiple of the env's "
                f"{agents} agents: {exp.algorithm.name}'s value reads whole envs"
            )
        self.leader = peers.index(self.name) == 0  # publishes weights (under the policy's tag) and writes checkpoints
        self.tags = (self.policy or LATEST,)
        self.checkpoint = Checkpoint(worker.run_dir.checkpoint_of(self.policy))
        self.history = ParameterDB(worker.run_dir.parameters_of(self.policy))
        self.lockstep = Lockstep(self.name, peers, self.device) if len(peers) > 1 else None
        self._held_batch: dict | None = None  # in lockstep: a batch waiting for the others to have one too
        self._all_ready = False
        self.prefetch: Prefetcher | None = None
        self.copy = DeviceCopy(self.device) if self.device.type == "cuda" else None
        self.version = 0
        self.frames_consumed = 0
        self.transitions_trained = 0
        self.train_seconds = 0.0
        self.wait_seconds = 0.0
        self.losses = LossMeans()  # the heartbeats' losses: means over the updates since the previous one
        self._last_checkpoint = time.monotonic()
        self._ready_since: float | None = None
        self._oldest_version = 0  # on-policy samples of older versions are dropped
        self._counted_before = (0, 0)  # a replacement's (frames, transitions): its predecessor reported those
        if worker.attempt > 1 or worker.incarnation > 0:
            self._resume()
        if worker.incarnation > 0:
            self._replace()

    def _resume(self) -> None:
        """A resumed run (attempt > 1) or a replaced trainer continues from the checkpoint: weights, optimizer
        state, version and counters; every trainer reads the same file, so data-parallel trainers start
        identical."""
        if not self.checkpoint.exists():  # requeued or replaced before the first checkpoint: nothing to resume
            print(f"[{self.name}] no checkpoint yet: training from scratch", flush=True)
            return
        counters = self.checkpoint.restore(self.model, self.algorithm, self.device)
        if self.leader and counters["parameter_index"] is not None:
            self.history.restore(counters["parameter_index"])
        self.version, self.frames_consumed = counters["version"], counters["frames_consumed"]
        self.transitions_trained = counters["transitions_trained"]
        print(
            f"[{self.name}] resumed from {self.checkpoint.path}: version {self.version}, {self.frames_consumed:,} "
            f"frames trained",
            flush=True,
        )

    def _replace(self) -> None:
        """A replacement trains on from the checkpoint, whose version may be older than the last its predecessor
        published (kept for it): the restored weights are then published as the version after that one, and
        on-policy samples of older versions are dropped (counted), those of the lost versions among them."""
        self._counted_before = (self.frames_consumed, self.transitions_trained)
        published = self.worker.kept.get("version", 0)
        if published > self.version:
            print(
                f"[{self.name}] versions {self.version + 1}-{published} were lost with its predecessor: the "
                f"checkpoint's weights (version {self.version}) go on as version {published + 1}",
                flush=True,
            )
            self.version = published + 1
            self._oldest_version = self.version

    def bind(self) -> dict[str, int]:
        ports = {}
        reuse = self.worker.ports  # a replacement's: its predecessor's, which every peer knows
        self.source: ReplayReceiver | BatchAssembler
        self.credits: CreditLedger | None = None  # (on-policy: the actors' leave to fill segments)
        prepare = self._prepare if self.cfg.train else (lambda batch: None)
        exp, actor = self.exp, self.exp.workers.actor
        if self.graph.served_by("replay", self.name):
            buffers = list(self.graph.served_by("replay", self.name).clients)
            team = agent_count(exp.env) if self.spec.team else 0
            sequence = None
            if exp.model.state_size:  # recurrent: sequences of (burn-in,) a segment and the n-step lookahead
                sequence = (self.spec.replay_sequence_steps(exp.algorithm, actor.segment_length), exp.model.state_size)
            batches = SampleConsumer(
                self.worker.ctx, self.contract.replay_layout(buffers, team, sequence), high_water_mark=2
            )
            ports["replay"] = batches.bind(reuse.get("replay"))
            self.source = ReplayReceiver(batches, prepare)
        else:
            actors = [w.name for w in self.graph.hosts("actor")]
            samples = SampleConsumer(self.worker.ctx, self.contract.segment_layout(actor.segment_length, actors))
            ports["samples"] = samples.bind(reuse.get("samples"))
            per_message = actor.ring_size // actor.inference_splits  # env segments in one actor message
            window = self.cfg.queue_batches * -(-self.cfg.batch_segments // per_message)
            credits = self.credits = CreditLedger(self.worker.ctx, window, actors)
            ports["credits"] = credits.bind(reuse.get("credits"))
            self.source = BatchAssembler(
                samples,
                credits,
                self.contract.segment_fields(),
                self.cfg.batch_segments,
                self.spec.max_policy_lag(exp.algorithm),
                prepare,
                lambda: self.version,
                self.trace,
                exp.env.frames_per_step,
            )
            self.source.oldest_version = self._oldest_version
        if self.leader:
            self.publisher, ports["parameters"] = ParameterPublisher.bind(self.worker.ctx, reuse.get("parameters"))
        self.copies: zmq.Socket | None = None  # a population member's: the manager's copies come in here
        if self.graph.served_by("population", self.name):
            self.copies = self.worker.ctx.socket(zmq.PULL)
            self.copies.setsockopt(zmq.LINGER, 0)
            ports["population"] = endpoints.bind(self.copies, reuse.get("population"))
        if self.lockstep is not None:
            ports.update(self.lockstep.bind())
        return ports

    def connect(self, table) -> None:
        self.feedback = {
            s.server: SampleProducer(self.worker.ctx, [endpoints.address(table, s.server, "priorities")])
            for s in self.graph.servers_for("priorities", self.name)
        }
        if self.lockstep is not None:  # the algorithm trains through the DDP wrapper
            self.algorithm.model = self.lockstep.connect(table, self.model)

    def start(self) -> None:
        self._ready_since = time.perf_counter()
        if self.leader:
            self.publisher.publish(self.version, state_arrays(self.model), self.tags)
            self.worker.keep(version=self.version)
        if self.cfg.prefetch:
            self.prefetch = Prefetcher(self.source)
            self.prefetch.start()

    def _prepare(self, segments: dict) -> dict:
        """The algorithm's tensors, on the trainer's device."""
        tensors = self.algorithm.prepare(segments)
        return tensors if self.copy is None else self.copy.to_device(tensors)

    def _next_batch(self, timeout_ms: int) -> dict | None:
        return self.source.poll(timeout_ms) if self.prefetch is None else self.prefetch.next(timeout_ms)

    def keep_running(self, stop_requested: bool) -> bool:
        """In lockstep: one all-reduce decides for every trainer whether to stop and whether to train now."""
        if self.lockstep is None:
            return not stop_requested
        if self._held_batch is None:
            t0 = time.perf_counter()
            self._held_batch = self._next_batch(POLL_MS)
            self.wait_seconds += time.perf_counter() - t0
        keep_running, self._all_ready = self.lockstep.agree(not stop_requested, self._held_batch is not None)
        return keep_running

    def poll(self, timeout_ms) -> None:
        t0 = time.perf_counter()
        if self.lockstep is not None:
            batch, self._held_batch = (self._held_batch, None) if self._all_ready else (None, self._held_batch)
        else:
            batch = self._next_batch(timeout_ms)
        t1 = time.perf_counter()
        self.wait_seconds += t1 - t0
        if self.leader:
            self.publisher.maybe_republish()
        if self.copies is not None:
            self._take_copy()
        if batch is None:
            return
        assert self._ready_since is not None  # (set in start)
        t0 = self._ready_since  # the wait counts from the end of the previous training step
        if not self.cfg.train:  # sampling-only: the batch is consumed and discarded
            self.frames_consumed += batch["frames"]
            self._ready_since = time.perf_counter()
            self.source.trained(t1 - t0, 0.0)
            return
        tensors = batch["tensors"] if self.copy is None else self.copy.wait(batch["tensors"])
        losses, feedback = self.algorithm.update(tensors, self.frames_consumed)
        self.losses.add(losses)
        if "source" in batch:  # new priorities for the buffer that sampled this batch
            arrays = {"indices": batch["indices"], **feedback}
            self.feedback[batch["source"]].try_send(
                wire.pack("priorities", {"incarnation": batch["incarnation"]}, arrays), POLL_MS
            )
        t2 = time.perf_counter()
        self.frames_consumed += batch["frames"]
        self.transitions_trained += batch.get("transitions", 0)
        self.version += 1
        if self.leader:
            arrays = state_arrays(self.model)
            self.publisher.publish(self.version, arrays, self.tags)
            self.worker.keep(version=self.version)
            if self.cfg.snapshot_every and self.version % self.cfg.snapshot_every == 0:
                self.history.put(self.version, arrays)
                self.history.tag(parameter_db.snapshot_tag(self.version), self.version)
        t3 = time.perf_counter()
        self.train_seconds += t3 - t1
        self._ready_since = t3
        self.source.trained(t1 - t0, t2 - t1)
        self.trace.record(
            "train_step",
            wait_seconds=t1 - t0,
            compute_seconds=t2 - t1,
            publish_seconds=t3 - t2,
            frames=batch["frames"],
            version=self.version,
            **losses,
        )
        if self.leader and time.monotonic() - self._last_checkpoint > self.cfg.checkpoint_interval:
            self.save_checkpoint()

    def _take_copy(self) -> bool:
        """A population member copying another (exploit and explore): the other's weights, trained from now on
        with the new hyper-parameters, published as the next version. False when no copy was waiting."""
        assert self.copies is not None  # (called with copies only)
        try:
            msg = wire.unpack(self.copies.recv_multipart(zmq.NOBLOCK))
        except zmq.Again:
            return False
        load_arrays(self.model, msg.arrays)
        self.algorithm.restart(msg.meta["values"])
        self.version += 1
        assert isinstance(self.source, BatchAssembler)  # (population members train with ppo: on-policy)
        self.source.oldest_version = self.version  # what its actors played with the old weights is not trained on
        self.publisher.publish(self.version, state_arrays(self.model), self.tags)
        self.worker.keep(version=self.version)
        self.trace.record(
            "copy",
            round=msg.meta["round"],
            source_version=msg.meta["source_version"],
            version=self.version,
            checksum=parameter_checksum(self.model),
            **{f"new_{k}": v for k, v in msg.meta["values"].items()},
        )
        print(
            f"[{self.name}] population round {msg.meta['round']}: version {self.version} is "
            f"{msg.meta['source']}'s version {msg.meta['source_version']}, trained with {msg.meta['values']}",
            flush=True,
        )
        return True

    def finish(self) -> None:
        """Checkpoint first (nothing is lost if the drain is cut short), then account for in-flight frames:
        keep receiving (and dropping, counted) until the controller says every frame sent has arrived."""
        for batch in self.prefetch.stop() if self.prefetch is not None else []:
            self._drop(batch)
        if self._held_batch is not None:
            self._drop(self._held_batch)
            self._held_batch = None
        while self.copies is not None and self._take_copy():  # sent before the stop: in the checkpoint too
            pass
        self.trace.record("final_parameters", version=self.version, checksum=parameter_checksum(self.model))
        if self.leader:
            self.save_checkpoint()
        self.source.drain(self.worker)

    def _drop(self, batch: dict) -> None:
        """A batch that will not be trained (at stop): its frames are counted as dropped."""
        if batch["frames"]:
            assert isinstance(self.source, BatchAssembler)  # (replay batches carry no frames)
            self.trace.record("dropped_at_stop", frames=batch["frames"])
            self.source.frames_dropped += batch["frames"]

    def close(self) -> None:
        if self.lockstep is not None:
            self.lockstep.close()
        if self.copies is not None:
            self.copies.close(0)

    def save_checkpoint(self) -> None:
        """The checkpoint's version goes into the parameter database first, tagged latest, so that the index
        the checkpoint keeps names it."""
        if not self.history.has(self.version):
            self.history.put(self.version, state_arrays(self.model))
        self.history.tag(parameter_db.LATEST, self.version)
        self.history.collect(self.cfg.keep_untagged)
        self.checkpoint.save(
            self.model,
            self.algorithm,
            self.version,
            self.frames_consumed,
            self.transitions_trained,
            self.worker.attempt,
            self.history.index(),
        )
        self._last_checkpoint = time.monotonic()

    def queue_depths(self) -> dict[str, int]:
        return {
            "ready_batches": self.prefetch.ready() if self.prefetch is not None else 0,
            "held_segments": self.source.held_segments,
        }

    def peers_lost(self, workers: frozenset[str]) -> None:
        if self.credits is not None:
            self.credits.lost = workers  # (read where the ledger is served, whichever thread that is)

    def stats(self) -> dict:
        out = {
            "version": self.version,
            "train_seconds": round(self.train_seconds, 3),
            "malformed_dropped": self.source.malformed(),
            "wait_seconds": round(self.wait_seconds, 3),
            "losses": self.losses.report(),
        }
        if self.leader:  # what weight fan-out costs: bytes leaving this worker per version published
            out.update(
                parameter_bytes_sent=self.publisher.bytes_sent, parameter_versions_sent=self.publisher.versions_sent
            )
        frames, transitions = (
            self.frames_consumed - self._counted_before[0],
            self.transitions_trained - self._counted_before[1],
        )
        if isinstance(self.source, ReplayReceiver):
            return {**out, "transitions_trained": transitions}
        return {**out, "frames_consumed": frames, **self.source.stats()}
