"""Buffer handler: prioritised replay between actors and trainers (off-policy algorithms, Ape-X style).

Segments arrive on the sample stream. Each (actor, ring group) is one sequence of steps: the last n
steps of a segment are kept and put in front of the next one, so every step becomes an n-step
transition exactly once (replay.nstep_transitions). Transitions enter a PrioritizedReplay at the
highest priority so far. Once `learning_starts` are stored, the buffer samples batches and pushes them
to the trainers, at most `max_replay_ratio` transitions sampled per transition stored (actors faster
than the learner do not make it overfit a small replay); trainers send |TD error| priorities back.
The replay is saved beside the checkpoints (RUN/checkpoints/replay-<buffer>.npz, every
workers.trainer.checkpoint_interval and at stop) while its items fit in algorithm.checkpoint_replay_mb. A
resumed run's buffer worker, and the replacement of one that died (srl_hpc.worker.supervisor), start from
that snapshot (else empty): what was stored since it was written is lost. Batches and priorities carry the
incarnation that sampled them, so priorities meant for a lost replay are not applied to the new one's items.

With a recurrent model the items are sequences instead (recurrent DQN, R2D2-style): one env's segment
with the recurrent state the actor stored at its start, followed by the first n steps of the next segment
(its last steps' n-step future) and, with `algorithm.burn_in`, preceded by the segment before it (whose
stored state the trainer unrolls from, without gradients). A segment is stored once the next one arrives;
the first of a stream gets an all-invalid burn-in, after which the unroll zeroes the state, as the actor's
was zero then.

Frame accounting: every frame received is stored (as a transition, or a step of a sequence's segment) or
dropped at stop (the last n steps of each stream, or its last segment, which never got their n-step
future), and counted either way. Never imports torch.
"""

from __future__ import annotations

import collections
import os
import time

import numpy as np
import zmq

from srl_hpc.algorithm_spec import HIDDEN, spec
from srl_hpc.algorithms.replay import PrioritizedReplay, nstep_transitions
from srl_hpc.envs.backends import agent_count, spaces
from srl_hpc.handlers import POLL_MS, Handler
from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.contract import Contract, priorities_layout, segment_frames
from srl_hpc.streams.samples import SampleConsumer, SampleProducer, sender_key

SEQUENCE_FIELDS = ("obs", "actions", "rewards", "dones", "terminated", "valid", "versions")
REPLAYED_STEPS = ("obs", "actions", "rewards", "dones", "terminated", "valid")  # each step of a recurrent sequence
DRAIN_TIMEOUT = 20.0  # at stop: longest wait for the controller's "finish" while draining segments


def team_steps(seg: dict[str, np.ndarray], agents: int, actor: str) -> dict[str, np.ndarray]:
    """A segment's agent rows (E * agents, T, ...), env-major, as the steps of E teams (E, T, agents, ...): every
    agent's observation and action, the agents' mean reward; the team's episode ends when its agents' do."""
    valid = seg["valid"].reshape(-1, agents, seg["valid"].shape[1])
    if (valid.any(1) != valid.all(1)).any():
        raise ValueError(
            f"{actor}: an agent left its env while others played on; value decomposition needs every "
            "agent at every step"
        )

    def by_team(a: np.ndarray) -> np.ndarray:  # (E * agents, T, ...) -> (E, T, agents, ...)
        return np.swapaxes(a.reshape(-1, agents, *a.shape[1:]), 1, 2)

    return {
        "obs": by_team(seg["obs"]),
        "actions": by_team(seg["actions"]),
        "valid": valid.all(1),
        "rewards": by_team(seg["rewards"]).mean(-1),
        "dones": by_team(seg["dones"]).all(-1),
        "terminated": by_team(seg["terminated"]).all(-1),
        "versions": by_team(seg["versions"]).min(-1),
    }


def sequences(previous: dict | None, last: dict, following: dict, n: int, burn_in: bool) -> dict[str, np.ndarray]:
    """Replay items of a recurrent model, one per env of segment `last`: its steps, the first n of `following`
    (the n-step future of its last steps) and, with burn_in, `previous` before them (None before a stream's
    first segment: all invalid, after which the trainer's unroll zeroes the state, as the actor's was zero);
    `hidden`: the state the actor stored at the first step."""
    parts = [last, {k: following[k][:, :n] for k in REPLAYED_STEPS}]
    start = last
    if burn_in:
        start = previous if previous is not None else {HIDDEN: np.zeros_like(last[HIDDEN])}
        parts.insert(0, previous if previous is not None else {k: np.zeros_like(last[k]) for k in REPLAYED_STEPS})
    items = {k: np.concatenate([p[k] for p in parts], axis=1) for k in REPLAYED_STEPS}
    items[HIDDEN] = start[HIDDEN]
    return items


class BufferHandler(Handler):
    kind = "buffer"

    def __init__(self, worker) -> None:
        super().__init__(worker)
        self.cfg = self.exp.algorithm
        self.frames_per_step = self.exp.env.frames_per_step
        self.replay: PrioritizedReplay | None = None  # made when the first segment shows the observation shape
        # (sender, group) -> its last n steps; an actor's replacement begins a stream of its own
        self.tails: dict[tuple[str, int], dict[str, np.ndarray]] = {}
        self.frames_received = self.frames_consumed = self.frames_dropped = 0
        self.received_from: collections.Counter[str] = collections.Counter()  # sender_key -> frames
        self.batches_sent = 0
        self.priority_updates = 0  # transitions whose priority a trainer's TD error set
        self.priorities_stale = 0  # priority messages for a predecessor's replay (this worker was replaced)
        self.lags: list[int] = []
        self.version = 0  # newest policy version seen in a segment (the lag of stored data)
        index = self.graph.worker(self.name).index
        self.rng_seed = self.worker.seed * 7_919 + index
        self.spec = spec(self.exp.algorithm)
        self.n_step, self.burn_in = self.spec.n_step(self.cfg), self.spec.burn_in(self.cfg)
        self.team = agent_count(self.exp.env) if self.spec.team else 0  # agents per replay item
        self.state_size = self.exp.model.state_size  # a recurrent model: sequences, not transitions
        self.held: dict[
            tuple[str, int], tuple[dict | None, dict]
        ] = {}  # sequences: (sender, group) -> (previous, last)
        self.snapshot_path = worker.run_dir.replay_of(self.name)
        self._last_snapshot = time.monotonic()
        self._said_too_big = False
        if (worker.attempt > 1 or worker.incarnation > 0) and self.snapshot_path.exists():
            self._restore()

    def bind(self) -> dict[str, int]:
        contract = Contract.of(*spaces(self.exp.env), self.spec, self.exp)
        actors = [w.name for w in self.graph.hosts("actor")]
        self.samples = SampleConsumer(
            self.worker.ctx, contract.segment_layout(self.exp.workers.actor.segment_length, actors)
        )
        self.priorities = SampleConsumer(
            self.worker.ctx, priorities_layout(self.cfg.replay_capacity), high_water_mark=16
        )
        reuse = self.worker.ports  # a replacement's: its predecessor's ports
        return {
            "samples": self.samples.bind(reuse.get("samples")),
            "priorities": self.priorities.bind(reuse.get("priorities")),
        }

    def connect(self, table) -> None:
        self.batches = SampleProducer(
            self.worker.ctx,
            [endpoints.address(table, s.server, "replay") for s in self.graph.servers_for("replay", self.name)],
        )
        # made once (poll runs thousands of times a second): inputs only, and inputs + room to send a batch
        self._inputs, self._inputs_and_room = zmq.Poller(), zmq.Poller()
        for poller in (self._inputs, self._inputs_and_room):
            poller.register(self.samples.socket, zmq.POLLIN)
            poller.register(self.priorities.socket, zmq.POLLIN)
        self._inputs_and_room.register(self.batches.socket, zmq.POLLOUT)

    def poll(self, timeout_ms) -> None:
        """Wait for segments, priorities, or (when a batch may be sent) room on the replay stream."""
        t0 = time.perf_counter()
        poller = self._inputs if self._ratio_reached() else self._inputs_and_room
        ready = dict(poller.poll(timeout_ms))
        t1 = time.perf_counter()
        if self.samples.socket in ready:
            msg = self.samples.receive()
            while msg is not None:
                self._store(msg)
                msg = self.samples.receive()
        t2 = time.perf_counter()
        self._apply_priorities()
        t3 = time.perf_counter()
        sent = self.batches.socket in ready and self._send_batch()
        if time.monotonic() - self._last_snapshot > self.exp.workers.trainer.checkpoint_interval:
            self.save_replay()
        if ready:
            self.trace.record(
                "buffer_step",
                wait_seconds=t1 - t0,
                store_seconds=t2 - t1,
                priority_seconds=t3 - t2,
                sample_seconds=time.perf_counter() - t3,
                sent=int(sent),
                size=len(self.replay) if self.replay else 0,
            )

    def _store(self, msg: wire.Message) -> None:
        seg = msg.arrays
        frames = segment_frames(seg, self.frames_per_step)
        self.frames_received += frames
        sender = sender_key(msg.meta["actor"], msg.meta["incarnation"])
        self.received_from[sender] += frames
        self.version = max(self.version, int(seg["versions"].max()))
        key = (sender, msg.meta["group"])
        self.lags.append(self.version - int(seg["versions"].min()))
        if self.state_size:
            stored = self._store_sequences(key, seg)
            self.frames_consumed += stored * self.frames_per_step
            self.trace.record("segment", frames=frames, transitions=stored, lag=self.lags[-1])
            return
        tail = self.tails.get(key)
        steps = team_steps(seg, self.team, msg.meta["actor"]) if self.team else seg
        seq = {k: steps[k] if tail is None else np.concatenate([tail[k], steps[k]], axis=1) for k in SEQUENCE_FIELDS}
        n = self.n_step
        transitions = nstep_transitions(seq, n, self.cfg.gamma)
        self.tails[key] = {k: v[:, -n:].copy() for k, v in seq.items()}
        stored = len(transitions["actions"])
        if self.replay is None:
            self.replay = PrioritizedReplay(
                self.cfg.replay_capacity,
                {k: (v.shape[1:], v.dtype) for k, v in transitions.items()},
                alpha=self.cfg.priority_alpha,
                seed=self.rng_seed,
            )
        if stored:
            self.replay.add(transitions)
        self.frames_consumed += stored * max(1, self.team) * self.frames_per_step
        self.trace.record("segment", frames=frames, transitions=stored, lag=self.lags[-1])

    def _store_sequences(self, key: tuple[str, int], seg: dict[str, np.ndarray]) -> int:
        """Store the stream's previous segment as sequences, now that `seg` brings their lookahead; its valid
        steps (the frames it stores)."""
        previous, last = self.held.get(key, (None, None))
        self.held[key] = (last if self.burn_in else None, seg)  # the segment before: only burn-in reads it
        if last is None:  # the stream's first segment: stored when the next one arrives
            return 0
        items = sequences(previous, last, seg, self.n_step, self.burn_in)
        if self.replay is None:
            fields: dict[str, tuple[tuple[int, ...], np.dtype | str]] = {
                k: (v.shape[1:], v.dtype) for k, v in items.items()
            }
            self.replay = PrioritizedReplay(
                self.cfg.replay_capacity, fields, alpha=self.cfg.priority_alpha, seed=self.rng_seed
            )
        self.replay.add(items)
        return int(last["valid"].sum())

    def _apply_priorities(self) -> None:
        msg = self.priorities.receive()
        while msg is not None:
            if msg.meta["incarnation"] != self.worker.incarnation:
                self.priorities_stale += 1
                msg = self.priorities.receive()
                continue
            if self.replay is None or int(msg.arrays["indices"].max()) >= len(self.replay):
                self.priorities.malformed += 1  # not for an item this buffer has handed out
                msg = self.priorities.receive()
                continue
            self.replay.update_priorities(msg.arrays["indices"], msg.arrays["priorities"])
            self.priority_updates += len(msg.arrays["indices"])
            msg = self.priorities.receive()

    def _ratio_reached(self) -> bool:
        """No batch to send now: too little stored, or as many samples per stored transition as allowed."""
        if self.replay is None or len(self.replay) < self.cfg.learning_starts:
            return True
        return self.replay.sampled >= self.cfg.max_replay_ratio * self.replay.added

    def _send_batch(self) -> bool:
        if self._ratio_reached():
            return False
        assert self.replay is not None  # (no replay yet: the ratio counts as reached)
        indices, items, weights = self.replay.sample(self.cfg.batch_size, self.cfg.priority_beta)
        msg = wire.pack(
            "replay",
            {"buffer": self.name, "incarnation": self.worker.incarnation},
            {**items, "weights": weights, "indices": indices},
        )
        sent = self.batches.try_send(msg, 0)
        self.batches_sent += sent
        return sent

    def save_replay(self) -> None:
        """Replace the replay's snapshot (atomically) if it fits in algorithm.checkpoint_replay_mb; say once when
        it has outgrown that."""
        self._last_snapshot = time.monotonic()
        limit = self.cfg.checkpoint_replay_mb
        if self.replay is None or not len(self.replay) or not limit:
            return
        t0 = time.perf_counter()
        snapshot = self.replay.snapshot()
        size = sum(a.nbytes for a in snapshot.values())
        if size > limit * 2**20:
            if not self._said_too_big:
                print(
                    f"[{self.name}] replay not saved: its {size / 2**20:,.0f} MB are over "
                    f"algorithm.checkpoint_replay_mb ({limit:,}); a resumed run starts with an empty one",
                    flush=True,
                )
                self._said_too_big = True
            return
        self.snapshot_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.snapshot_path.with_name(f".{self.snapshot_path.name}.tmp")
        with open(tmp, "wb") as f:
            np.savez(f, **snapshot)  # type: ignore[arg-type]
        os.replace(tmp, self.snapshot_path)
        self.trace.record("replay_saved", items=len(self.replay), bytes=size, seconds=time.perf_counter() - t0)

    def _restore(self) -> None:
        """Start from the last snapshot; one that does not fit this run's replay is left, saying why."""
        with np.load(self.snapshot_path, allow_pickle=False) as f:
            snapshot = dict(f)
        try:
            self.replay = PrioritizedReplay.from_snapshot(
                snapshot, self.cfg.replay_capacity, alpha=self.cfg.priority_alpha, seed=self.rng_seed
            )
        except ValueError as e:
            print(f"[{self.name}] {self.snapshot_path} not restored ({e}): starting with an empty replay", flush=True)
            return
        print(f"[{self.name}] replay restored from {self.snapshot_path}: {len(self.replay):,} items", flush=True)
        self.trace.record("replay_restored", items=len(self.replay))

    def finish(self) -> None:
        """Keep receiving until the controller says every frame sent has arrived; the tails are dropped, counted."""
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while not self.worker.finish_requested and time.monotonic() < deadline:
            if self.samples.wait(POLL_MS // 2):
                msg = self.samples.receive()
                while msg is not None:
                    self._store(msg)
                    msg = self.samples.receive()
            self.worker.poll_commands()
            self.worker.maybe_heartbeat(interval=0.2)
        held = sum(int(t["valid"][:, -self.n_step :].sum()) for t in self.tails.values()) * max(1, self.team)
        held += sum(int(last["valid"].sum()) for _, last in self.held.values())
        self.frames_dropped += held * self.frames_per_step
        self.tails.clear()
        self.held.clear()
        self.save_replay()

    def queue_depths(self) -> dict[str, int]:
        return {"replay_size": len(self.replay) if self.replay else 0}

    def stats(self) -> dict:
        lags, self.lags = self.lags, []
        replay = self.replay
        return {
            "frames_received": self.frames_received,
            "received_from": dict(self.received_from),
            "frames_consumed": self.frames_consumed,
            "frames_dropped": self.frames_dropped,
            "transitions_stored": replay.added if replay else 0,
            "transitions_sampled": replay.sampled if replay else 0,
            "replay_batches": self.batches_sent,
            "priority_updates": self.priority_updates,
            "priorities_stale": self.priorities_stale,
            "malformed_dropped": self.samples.malformed + self.priorities.malformed,
            "lag_sum": int(np.sum(lags)) if lags else 0,
            "lag_count": len(lags),
        }
