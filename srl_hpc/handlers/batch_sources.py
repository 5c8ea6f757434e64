"""Where a trainer's batches come from (the graph says which): segments from the actors, assembled and
checked for policy lag (on-policy), or batches the buffer workers sampled (off-policy)."""

from __future__ import annotations

import collections
import time

import numpy as np
import zmq

from srl_hpc.handlers import POLL_MS
from srl_hpc.streams.contract import segment_frames
from srl_hpc.streams.credits import CreditLedger
from srl_hpc.streams.samples import SampleConsumer, sender_key

DRAIN_TIMEOUT = 20.0  # at stop: longest wait for the controller's "finish" while draining segments


class BatchAssembler:
    """Segments -> training batches of exactly `batch_segments` env segments. Counts every frame."""

    def __init__(
        self,
        samples: SampleConsumer,
        credits: CreditLedger,
        fields: tuple[str, ...],
        batch_segments: int,
        max_lag: int | None,
        prepare,
        current_version,
        trace,
        frames_per_step: int = 1,
    ) -> None:
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
        # segments acted by an earlier version are another policy's (a population member that copied another
        # at this version): dropped, counted, like those beyond max_lag
        self.oldest_version = 0
        self.frames_received = 0
        self.received_from: collections.Counter[str] = collections.Counter()  # sender_key -> frames
        self.frames_dropped = 0
        self.lags: list[int] = []  # policy lag of each accepted segment, read and cleared by stats()
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
        self.received_from[sender_key(msg.meta["actor"], msg.meta["incarnation"])] += frames
        self.credits.used(msg.meta["actor"], msg.meta["fill_seconds"])
        lag = self.current_version() - int(seg["versions"].min())
        dropped = (self.max_lag is not None and lag > self.max_lag) or int(seg["versions"].min()) < self.oldest_version
        actor = int(msg.meta["actor"].partition("/")[2])
        self.trace.record("segment", frames=frames, lag=lag, dropped=dropped, actor=actor)
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

    def trained(self, wait_seconds: float, compute_seconds: float) -> None:
        """Flow control: a trainer kept waiting lets more be filled at once."""
        self.credits.trained(wait_seconds, compute_seconds)

    def malformed(self) -> int:
        return self.samples.malformed + self.credits.malformed

    def stats(self) -> dict:
        """Frames received and dropped, and the policy lag of the segments accepted since the last call."""
        lags, self.lags = self.lags, []
        return {
            "frames_received": self.frames_received,
            "received_from": dict(self.received_from),
            "frames_dropped": self.frames_dropped,
            "lag_sum": int(np.sum(lags)) if lags else 0,
            "lag_count": len(lags),
        }

    def drain(self, worker) -> None:
        """At stop, after the checkpoint: account for in-flight frames, receiving (and dropping, counted)
        until the controller says every frame sent has arrived."""
        self.drop_pending()
        self.batch_segments = 1 << 62  # receive everything, never cut a batch
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while not worker.finish_requested and time.monotonic() < deadline:
            self.poll(POLL_MS // 2)
            self.drop_pending()
            worker.poll_commands()
            worker.maybe_heartbeat(interval=0.2)


class ReplayReceiver:
    """Sampled batches from buffer workers -> training batches (the buffers count the frames)."""

    def __init__(self, batches: SampleConsumer, prepare) -> None:
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
        return {
            "tensors": self.prepare(a),
            "frames": 0,
            "transitions": len(a["actions"]),
            "source": msg.meta["buffer"],
            "incarnation": msg.meta["incarnation"],
            "indices": np.array(a["indices"]),
        }

    def trained(self, wait_seconds: float, compute_seconds: float) -> None:
        """(The buffers pace the actors.)"""

    def malformed(self) -> int:
        return self.batches.malformed

    def drain(self, worker) -> None:
        """At stop: nothing to account for, sampled batches are copies (the buffers keep the frames)."""
