"""Trainer handler: segments in, algorithm updates, versioned weights out, checkpoints on disk.

With several trainers, each takes its share of the sample stream and they train one model data-parallel
(torch DDP): before every update they agree, in one tiny all-reduce, that each holds a batch and none is
stopping, so they all run the same updates and all stop together. trainer/0 publishes and checkpoints.

Where batches come from is the graph's: on-policy, a BatchAssembler pulls segments from the sample
stream, drops those older than `max_policy_lag` versions, and turns `batch_segments` of them into
training tensors (GAE included); every frame received is consumed by an update or counted as dropped,
and the controller checks the totals against what the actors sent. Off-policy, a ReplayReceiver takes
sampled batches from the buffer workers, and the update's new priorities go back to the buffer that
sent the batch. With `prefetch` on, the source runs in its own thread, so the next batch is ready while
the current one trains.
"""
from __future__ import annotations

import datetime
import os
import queue
import random
import socket
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
import zmq
from torch.nn.parallel import DistributedDataParallel

from srl_hpc.algorithms import reads_global_state, spec
from srl_hpc.envs.backends import agent_count, spaces
from srl_hpc.handlers import Handler
from srl_hpc.models import build_model, parameter_checksum, resolve_device, state_arrays
from srl_hpc.services.parameters import LATEST, ParameterPublisher
from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.contract import Contract, segment_frames
from srl_hpc.streams.credits import CreditLedger
from srl_hpc.streams.samples import SampleConsumer, SampleProducer
from srl_hpc.worker import POLL_MS

DDP_TIMEOUT = datetime.timedelta(seconds=120)  # trainers joining, and any one collective
DRAIN_TIMEOUT = 20.0  # at stop: longest wait for the controller's "finish" while draining segments


class BatchAssembler:
    """Segments -> training batches of exactly `batch_segments` env segments. Counts every frame."""

    def __init__(self, samples: SampleConsumer, credits: CreditLedger, fields: tuple[str, ...], batch_segments: int,
                 max_lag: int | None, prepare, current_version, trace, frames_per_step: int = 1):
        self.samples = samples
        self.credits = credits
        self.poller = zmq.Poller()
        self.poller.register(samples.socket, zmq.POLLIN)
        self.poller.register(credits.socket, zmq.POLLIN)
        self.fields = fields
        self.frames_per_step = frames_per_step
        self.trace = trace
        self.batch_segments = batch_segments
        self.max_lag = max_lag
        self.prepare = prepare
        self.current_version = current_version  # callable: the trainer's version now
        self.frames_received = 0
        self.frames_dropped = 0
        self.lags: list[int] = []  # policy lag of each accepted segment, read and cleared by stats
        self._parts: list[dict] = []
        self.held_segments = 0

    def poll(self, timeout_ms: int) -> dict | None:
        """Receive what is pending (waiting at most timeout_ms for the first message); a batch when one is full.
        Leave to send more is granted only here, so a trainer that is not receiving lets nothing more come."""
        if self.held_segments < self.batch_segments:
            self.credits.serve()
            if self.poller.poll(timeout_ms):
                while self.held_segments < self.batch_segments:
                    msg = self.samples.receive()
                    if msg is None:
                        break
                    self._accept(msg)
                self.credits.serve()
        if self.held_segments < self.batch_segments:
            return None
        return self._cut()

    def _accept(self, msg) -> None:
        seg = msg.arrays
        frames = segment_frames(seg, self.frames_per_step)
        self.frames_received += frames
        self.credits.used(msg.meta["actor"], msg.meta["fill_seconds"])
        lag = self.current_version() - int(seg["versions"].min())
        dropped = self.max_lag is not None and lag > self.max_lag
        self.trace.record("segment", frames=frames, lag=lag, dropped=dropped, actor=int(msg.meta["actor"].partition("/")[2]))
        if dropped:
            self.frames_dropped += frames
            return
        self.lags.append(lag)
        self._parts.append({k: seg[k] for k in self.fields})
        self.held_segments += seg["rewards"].shape[0]

    def _cut(self) -> dict:
        joined = {k: np.concatenate([p[k] for p in self._parts]) for k in self.fields}
        n = self.batch_segments
        batch = {k: v[:n] for k, v in joined.items()}
        rest = {k: v[n:] for k, v in joined.items()}
        self.held_segments -= n
        self._parts = [rest] if self.held_segments else []
        return {"tensors": self.prepare(batch), "frames": segment_frames(batch, self.frames_per_step)}

    def drop_pending(self) -> None:
        """At stop: whatever is held (a partial batch) is dropped, counted."""
        frames = sum(segment_frames(p, self.frames_per_step) for p in self._parts)
        if frames:
            self.trace.record("dropped_at_stop", frames=frames)
        self.frames_dropped += frames
        self._parts, self.held_segments = [], 0


class ReplayReceiver:
    """Sampled batches from buffer workers -> training batches (the buffers count the frames)."""

    def __init__(self, batches: SampleConsumer, prepare):
        self.batches = batches
        self.prepare = prepare
        self.held_segments = 0  # (nothing is assembled here)

    def poll(self, timeout_ms: int) -> dict | None:
        if not self.batches.wait(timeout_ms):
            return None
        msg = self.batches.receive()
        if msg is None:
            return None
        a = msg.arrays
        return {"tensors": self.prepare(a), "frames": 0, "transitions": len(a["actions"]),
                "source": msg.meta["buffer"], "incarnation": msg.meta["incarnation"], "indices": np.array(a["indices"])}


class LossMeans:
    """The mean of each loss over the updates since the last report (the last report's again when none came
    since): what TensorBoard and the summary show, smoother than one update's."""

    def __init__(self):
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


def _serve_store() -> dist.TCPStore:
    """trainer/0's TCPStore, on a port of slurm.ports when the run has a range."""
    numbers = endpoints.free_port_numbers()
    if numbers is None:
        return dist.TCPStore("0.0.0.0", 0, None, True, timeout=DDP_TIMEOUT, wait_for_workers=False)
    for port in random.sample(numbers, min(len(numbers), 100)):
        try:
            return dist.TCPStore("0.0.0.0", port, None, True, timeout=DDP_TIMEOUT, wait_for_workers=False)
        except RuntimeError:  # taken
            continue
    raise RuntimeError(f"no free port for the trainers' TCPStore in slurm.ports {numbers.start}-{numbers.stop - 1}")


def ddp_backend(gpus: list[str]) -> str:
    """NCCL between GPUs, one per trainer; gloo where two trainers landed on one GPU (a node with fewer GPUs
    than trainers, as on a one-GPU workstation): NCCL refuses two ranks on one device."""
    return "nccl" if len(set(gpus)) == len(gpus) else "gloo"


class TrainerHandler(Handler):
    kind = "trainer"

    def __init__(self, worker):
        super().__init__(worker)
        exp, cfg = self.exp, self.exp.workers.trainer
        torch.set_num_threads(cfg.torch_threads)
        self.cfg = cfg
        self.policy = self.graph.worker(self.name).policy  # with several policies, the one it trains
        self.peers = [w.name for w in self.graph.trainers(self.policy)]  # data-parallel with these, by rank
        self.rank = self.peers.index(self.name)
        self.device = resolve_device(self.graph.worker(self.name).device, worker.gpu_index, worker.may_share_gpu)
        self.obs_space, self.action_space = spaces(exp.env, exp.policies, self.policy, reads_global_state(exp.algorithm))
        self.model = build_model(exp, self.obs_space, self.action_space, self.policy).to(self.device)
        self.spec = spec(exp.algorithm)
        self.contract = Contract.of(self.obs_space, self.action_space, self.spec, exp)
        self.algorithm = self.spec.load()(self.model, exp.algorithm, self.device, bf16=cfg.precision == "bf16",
                                          total_frames=exp.stop.env_frames)
        agents = getattr(self.model, "agents", 1)  # a centralised critic sees whole envs: batches must hold them
        if cfg.batch_segments % agents:
            raise ValueError(f"workers.trainer.batch_segments ({cfg.batch_segments}) must be a multiple of the env's "
                             f"{agents} agents: {exp.algorithm.name}'s value reads whole envs")
        self.leader = self.rank == 0  # publishes weights (under the policy's tag) and writes checkpoints
        self.tags = (self.policy or LATEST,)
        self.checkpoint = worker.run_dir.checkpoint_of(self.policy)
        self.distributed = len(self.peers) > 1
        self._held_batch = None  # distributed: a batch waiting for the others to have one too
        self._all_ready = False
        self.version = 0
        self.frames_consumed = 0
        self.transitions_trained = 0
        self.train_seconds = 0.0
        self.wait_seconds = 0.0
        self.losses = LossMeans()  # the heartbeats' losses: means over the updates since the previous one
        self._last_checkpoint = time.monotonic()
        self._ready_since = None
        self._batches: queue.Queue = queue.Queue(maxsize=1)  # the next batch, assembled while one trains
        self._taken = threading.Event()  # the next batch was taken: the pre-fetch thread may assemble another
        self._thread_stop = threading.Event()
        self._thread = None
        self._thread_error: BaseException | None = None
        self._copy_stream = None  # CUDA only: host-to-device copies of pre-fetched batches
        if worker.attempt > 1:
            self._resume()

    def _resume(self):
        """A resumed run (attempt > 1) continues from the checkpoint: weights, optimizer state, version and
        counters; every trainer reads the same file, so data-parallel trainers start identical."""
        path = self.checkpoint
        if not path.exists():  # requeued before the first checkpoint: nothing to resume
            print(f"[{self.name}] attempt {self.worker.attempt}, but no checkpoint yet: training from scratch",
                  flush=True)
            return
        state = torch.load(path, map_location=self.device)
        self.model.load_state_dict(state["model"])
        self.algorithm.load_state_dict(state)
        self.version, self.frames_consumed = state["version"], state["frames_consumed"]
        self.transitions_trained = state["transitions_trained"]
        torch.set_rng_state(state["rng"].cpu())
        print(f"[{self.name}] resumed from {path}: version {self.version}, {self.frames_consumed:,} frames trained",
              flush=True)

    def bind(self):
        ports = {}
        prepare = self._prepare if self.cfg.train else (lambda batch: None)
        if self.graph.served_by("replay", self.name):
            buffers = list(self.graph.served_by("replay", self.name).clients)
            team = agent_count(self.exp.env) if self.spec.team else 0
            sequence = None
            if self.exp.model.state_size:  # recurrent: sequences of (burn-in,) a segment and the n-step lookahead
                alg, segment = self.exp.algorithm, self.exp.workers.actor.segment_length
                sequence = (segment * (2 if alg.burn_in else 1) + alg.n_step, self.exp.model.state_size)
            self.consumer = SampleConsumer(self.worker.ctx, self.contract.replay_layout(buffers, team, sequence),
                                           high_water_mark=2)
            ports["replay"] = self.consumer.bind()
            self.credits = None  # the buffers take what the actors send
            self.source = ReplayReceiver(self.consumer, prepare)
        else:
            actors = [w.name for w in self.graph.hosts("actor")]
            self.consumer = SampleConsumer(self.worker.ctx, self.contract.segment_layout(
                self.exp.workers.actor.segment_length, actors))
            ports["samples"] = self.consumer.bind()
            a = self.exp.workers.actor
            per_message = a.ring_size // a.inference_splits  # env segments in one actor message
            window = self.cfg.queue_batches * -(-self.cfg.batch_segments // per_message)
            self.credits = CreditLedger(self.worker.ctx, window, actors)
            ports["credits"] = self.credits.bind()
            self.source = BatchAssembler(self.consumer, self.credits, self.contract.segment_fields(), self.cfg.batch_segments,
                                         getattr(self.exp.algorithm, "max_policy_lag", None), prepare, lambda: self.version, self.trace,
                                         self.exp.env.frames_per_step)
        if self.leader:
            self.publisher, ports["parameters"] = ParameterPublisher.bind(self.worker.ctx)
        if self.distributed and self.leader:
            self._store = _serve_store()
            ports[endpoints.DDP] = self._store.port
        return ports

    def connect(self, table):
        self.feedback = {s.server: SampleProducer(self.worker.ctx, [endpoints.address(table, s.server, "priorities")])
                         for s in self.graph.servers_for("priorities", self.name)}
        if not self.distributed:
            return
        leader = self.peers[0]
        store = self._store if self.leader else dist.TCPStore(table[leader]["host"], table[leader]["ports"][endpoints.DDP],
                                                              None, False, timeout=DDP_TIMEOUT)
        backend = self._ddp_backend(store)
        dist.init_process_group(backend, store=store, rank=self.rank, world_size=len(self.peers), timeout=DDP_TIMEOUT)
        # the algorithm trains through the DDP wrapper: gradients are averaged across trainers in backward()
        self.algorithm.model = DistributedDataParallel(self.model, device_ids=[self.device] if self.device.type == "cuda" else None)

    def _ddp_backend(self, store) -> str:
        if self.device.type != "cuda":
            return "gloo"
        store.set(f"gpu/{self.rank}", f"{socket.gethostname()}/{torch.cuda.get_device_properties(self.device).uuid}")
        gpus = [store.get(f"gpu/{i}").decode() for i in range(len(self.peers))]
        backend = ddp_backend(gpus)
        if backend == "gloo":
            print(f"[{self.name}] trainers share a GPU ({', '.join(gpus)}): NCCL cannot run two ranks on one "
                  f"device, so DDP uses gloo (slower); give each trainer its own GPU for NCCL", flush=True)
        return backend

    def start(self):
        self._ready_since = time.perf_counter()
        if self.leader:
            self.publisher.publish(self.version, state_arrays(self.model), self.tags)
        if self.cfg.prefetch:
            self._thread = threading.Thread(target=self._prefetch_loop, name="prefetch", daemon=True)
            self._thread.start()

    def _prepare(self, segments: dict) -> dict:
        """The algorithm's tensors, on the trainer's device. On a GPU the copy comes from pinned memory on a
        side stream, so with pre-fetch on it overlaps the update running on the main stream."""
        tensors = self.algorithm.prepare(segments)
        if self.device.type != "cuda":
            return tensors
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(self._copy_stream):
            tensors = {k: t.pin_memory().to(self.device, non_blocking=True) for k, t in tensors.items()}
            ready = torch.cuda.Event()
            ready.record(self._copy_stream)
        return {**tensors, "_ready": ready}

    def _prefetch_loop(self):
        """The next batch is assembled while the current one trains, and no further: the one after waits
        until the next is taken (its segments wait at the actors, unfilled, not here going stale)."""
        try:
            while not self._thread_stop.is_set():
                if self._batches.full():
                    self._taken.wait(POLL_MS / 1000)
                    self._taken.clear()
                    continue
                batch = self.source.poll(POLL_MS)
                if batch is not None:
                    self._batches.put(batch)  # never blocks: only this thread puts, and the queue had room
        except BaseException as e:  # surfaced by poll() in the main thread
            self._thread_error = e

    def _next_batch(self, timeout_ms: int) -> dict | None:
        if self._thread_error is not None:
            raise RuntimeError("the trainer's pre-fetch thread failed") from self._thread_error
        if self._thread is None:
            return self.source.poll(timeout_ms)
        try:
            batch = self._batches.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            return None
        self._taken.set()
        return batch

    def keep_running(self, stop_requested: bool) -> bool:
        """Distributed: one all-reduce decides for every trainer whether to stop and whether to train now."""
        if not self.distributed:
            return not stop_requested
        if self._held_batch is None:
            t0 = time.perf_counter()
            self._held_batch = self._next_batch(POLL_MS)
            self.wait_seconds += time.perf_counter() - t0
        flags = torch.tensor([int(not stop_requested), int(self._held_batch is not None)],
                             device=self.device if self.device.type == "cuda" else "cpu")
        dist.all_reduce(flags, op=dist.ReduceOp.MIN)
        self._all_ready = bool(flags[1])
        return bool(flags[0])

    def poll(self, timeout_ms):
        t0 = time.perf_counter()
        if self.distributed:
            batch, self._held_batch = (self._held_batch, None) if self._all_ready else (None, self._held_batch)
        else:
            batch = self._next_batch(timeout_ms)
        t1 = time.perf_counter()
        self.wait_seconds += t1 - t0
        if self.leader:
            self.publisher.maybe_republish()
        if batch is None:
            return
        t0 = self._ready_since  # the wait counts from the end of the previous training step
        if not self.cfg.train:  # sampling-only: the batch is consumed and discarded
            self.frames_consumed += batch["frames"]
            self._ready_since = time.perf_counter()
            if self.credits is not None:
                self.credits.trained(t1 - t0, 0.0)
            return
        tensors = batch["tensors"]
        ready = tensors.pop("_ready", None)
        if ready is not None:  # the side-stream copy must finish before the update reads the batch
            main = torch.cuda.current_stream(self.device)
            main.wait_event(ready)
            for t in tensors.values():
                t.record_stream(main)  # the allocator must not hand this memory to the next copy too early
        losses, feedback = self.algorithm.update(tensors, self.frames_consumed)
        self.losses.add(losses)
        if "source" in batch:  # new priorities for the buffer that sampled this batch
            self.feedback[batch["source"]].try_send(
                wire.pack("priorities", {"incarnation": batch["incarnation"]}, {"indices": batch["indices"], **feedback}),
                POLL_MS)
        t2 = time.perf_counter()
        self.frames_consumed += batch["frames"]
        self.transitions_trained += batch.get("transitions", 0)
        self.version += 1
        if self.leader:
            self.publisher.publish(self.version, state_arrays(self.model), self.tags)
        t3 = time.perf_counter()
        self.train_seconds += t3 - t1
        self._ready_since = t3
        if self.credits is not None:  # flow control: a trainer kept waiting lets more be filled at once
            self.credits.trained(t1 - t0, t2 - t1)
        self.trace.record("train_step", wait_seconds=t1 - t0, compute_seconds=t2 - t1, publish_seconds=t3 - t2,
                          frames=batch["frames"], version=self.version, **losses)
        if self.leader and time.monotonic() - self._last_checkpoint > self.cfg.checkpoint_interval:
            self.save_checkpoint()

    def finish(self):
        """Checkpoint first (nothing is lost if the drain is cut short), then account for in-flight frames:
        keep receiving (and dropping, counted) until the controller says every frame sent has arrived."""
        self._thread_stop.set()
        if self._thread is not None:
            self._thread.join()
            while not self._batches.empty():
                self._drop(self._batches.get())
        if self._held_batch is not None:
            self._drop(self._held_batch)
            self._held_batch = None
        self.trace.record("final_parameters", version=self.version, checksum=parameter_checksum(self.model))
        if self.leader:
            self.save_checkpoint()
        assembler = self.source
        if not isinstance(assembler, BatchAssembler):
            return  # sampled batches are copies: the buffers keep the frames and their accounting
        assembler.drop_pending()
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while not self.worker.finish_requested and time.monotonic() < deadline:
            assembler.batch_segments = 1 << 62  # receive everything, never cut a batch
            assembler.poll(POLL_MS // 2)
            assembler.drop_pending()
            self.worker.poll_commands()
            self.worker.maybe_heartbeat(interval=0.2)

    def _drop(self, batch: dict) -> None:
        """A batch that will not be trained (at stop): its frames are counted as dropped."""
        if batch["frames"]:
            self.trace.record("dropped_at_stop", frames=batch["frames"])
            self.source.frames_dropped += batch["frames"]

    def close(self):
        if self.distributed and dist.is_initialized():
            dist.destroy_process_group()

    def save_checkpoint(self):
        path = self.checkpoint
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"version": self.version, "frames_consumed": self.frames_consumed,
                    "transitions_trained": self.transitions_trained, "attempt": self.worker.attempt,
                    "rng": torch.get_rng_state(), "model": self.model.state_dict(), **self.algorithm.state_dict()}, tmp)
        os.replace(tmp, path)  # a reader never sees a half-written checkpoint
        self._last_checkpoint = time.monotonic()

    def queue_depths(self):
        return {"ready_batches": self._batches.qsize(), "held_segments": self.source.held_segments}

    def stats(self):
        out = {"version": self.version, "train_seconds": round(self.train_seconds, 3),
               "malformed_dropped": self.consumer.malformed + (self.credits.malformed if self.credits else 0),
               "wait_seconds": round(self.wait_seconds, 3), "losses": self.losses.report()}
        if self.leader:  # what weight fan-out costs: bytes leaving this worker per version published
            out.update(parameter_bytes_sent=self.publisher.bytes_sent, parameter_versions_sent=self.publisher.versions_sent)
        if isinstance(self.source, ReplayReceiver):
            return {**out, "transitions_trained": self.transitions_trained}
        lags, self.source.lags = self.source.lags, []
        return {**out, "frames_received": self.source.frames_received, "frames_consumed": self.frames_consumed,
                "frames_dropped": self.source.frames_dropped, "lag_sum": int(np.sum(lags)) if lags else 0,
                "lag_count": len(lags)}
