"""Actor handler: an environment ring that feeds the inference and sample streams. Never imports torch
(unless its worker also hosts the policy handler: the IMPALA-style placement).

The ring's environments are cut into `inference_splits` groups. Each group has one inference request in
flight at a time; while group k waits for its actions, the actor steps the groups whose actions have
arrived. A group (RingGroup, ring.py) records the policy version of every step, cuts its trajectories
into segments and, with a recurrent model, keeps each env's recurrent state.

With several policies each ring group's envs are TeamRows: every policy has its own rows (its agents), its
own request per group to one of its policy workers and its own segments to its trainers (a PolicyLink
each); the envs step once every policy's reply for the group is in.
"""

from __future__ import annotations

import logging
import time
from typing import cast

import numpy as np

from srl_hpc.algorithm_spec import reads_global_state, spec
from srl_hpc.envs.agents import AgentRows
from srl_hpc.envs.backends import first_seed, make_env, make_env_group, make_env_teams, resolve_backend, spaces
from srl_hpc.handlers import Handler
from srl_hpc.handlers.ring import RingGroup
from srl_hpc.population.opponents import OpponentPool, Seats
from srl_hpc.services.parameter_db import ParameterDB
from srl_hpc.streams import endpoints, inference, unix, wire
from srl_hpc.streams.contract import Contract, segment_frames
from srl_hpc.streams.credits import GatedProducer
from srl_hpc.streams.failover import FailoverClient
from srl_hpc.streams.inference import InferenceClient, InlineInferenceClient, ShmInferenceClient
from srl_hpc.streams.samples import SampleProducer
from srl_hpc.streams.shm import shm_name

# one per policy an actor acts for
PolicyClient = InferenceClient | ShmInferenceClient | InlineInferenceClient | FailoverClient


class PolicyLink:
    """What an actor keeps per policy: its ring groups' rows of that policy, the inference stream to one of its
    policy workers, and the sample stream to its trainers. One link, holding every row, without `policies`."""

    def __init__(self, name: str, groups: list[RingGroup]) -> None:
        self.name = name  # "" for the one policy of every agent
        self.groups = groups
        self.inference: PolicyClient | None = None  # (set by connect)
        self.samples: GatedProducer | SampleProducer | None = None  # (set by connect)


class ActorHandler(Handler):
    kind = "actor"

    def __init__(self, worker) -> None:
        super().__init__(worker)
        a, exp = self.exp.workers.actor, self.exp
        self.spec = spec(exp.algorithm)
        index = self.graph.worker(self.name).index
        seed = first_seed(worker.seed * 1_000_003 + index * a.ring_size, a.ring_size)
        per_group = a.ring_size // a.inference_splits
        self.state_size = exp.model.state_size
        gamma = getattr(exp.algorithm, "gamma", 0.99)
        logging.getLogger(__name__).info(
            "%d envs of %s, env.backend %s: %s", a.ring_size, exp.env.id, exp.env.backend, resolve_backend(exp.env)
        )  # what auto picked
        acted_for = self.graph.acted_for(self.name)
        self.contracts = [
            Contract.of(*spaces(exp.env, exp.policies, policy, reads_global_state(exp.algorithm)), self.spec, exp)
            for policy in acted_for
        ]
        self.team_rows = []  # per ring group, with `policies`: the envs every policy's rows step in
        pool = None  # self-play: the past versions opponents are drawn from
        if exp.opponents.rule != "none":
            pool = OpponentPool(
                ParameterDB(worker.run_dir.parameters_of("")),
                exp.opponents.rule,
                np.random.default_rng(seed),
                exp.opponents.pfsp_power,
                exp.opponents.pool,
                exp.opponents.fixed,
                make_env(exp.env) if exp.opponents.fixed else None,
            )
        groups = []  # per ring group: one RingGroup per policy
        for g in range(a.inference_splits):
            group_seed = seed + g * per_group
            if exp.policies:
                rows = make_env_teams(exp.env, per_group, exp.policies, reads_global_state(exp.algorithm))
                self.team_rows.append(rows)
                groups.append(
                    [
                        RingGroup(None, a.segment_length, group_seed, self.contracts[p], first, gamma)
                        for p, first in enumerate(rows.reset(seed=group_seed))
                    ]
                )
            else:
                envs = make_env_group(exp.env, per_group, group_seed, reads_global_state(exp.algorithm))
                seats = None if pool is None else Seats(per_group, cast(AgentRows, envs).k, pool, first=index + g)
                groups.append(
                    [RingGroup(envs, a.segment_length, group_seed, self.contracts[0], gamma=gamma, seats=seats)]
                )
        self.links = [PolicyLink(name, [gs[p] for gs in groups]) for p, name in enumerate(acted_for)]
        # episodes are reported per policy (the controller's index) with several policies or in a population
        self.policy_index = (
            [self.graph.policies().index(name) for name in acted_for] if exp.policies or exp.population.size else None
        )
        self.explore = self.spec.explore(exp.algorithm, index, a.count)  # sent with every inference request
        self.next_group = 0
        self.frames_per_step = exp.env.frames_per_step  # Atari: agent steps x frame skip
        self.frames_sent = 0
        self.frames_discarded = 0  # filled segments that could not be sent before stop
        self.episodes = 0
        self._returns: list[tuple] = []  # (return, length), with `policies` (policy index, return, length)
        self._unsent: list[tuple] = []  # packed segments waiting for a consumer to take them (back-pressure)
        self._parked: set[int] = set()  # groups whose next requests wait for leave
        self._replies: dict[int, list] = {}  # group -> the replies in so far (one per policy)
        self._leave_wait_since: float | None = None  # since when every group has waited for leave
        self._segments = [0] * a.inference_splits  # per group: the number of the segment being filled

    def connect(self, table) -> None:
        for link in self.links:
            (stream,) = [
                s
                for s in self.graph.servers_for("inference", self.name)
                if self.graph.worker(s.server).policy == link.name
            ]
            if stream.transport == "inline":
                link.inference = InlineInferenceClient(self.worker.handlers["policy"].serve_inline)
            else:
                link.inference = self._with_failover(table, stream.server, self._client(table, stream, link))
            servers = [
                s.server
                for s in self.graph.servers_for("samples", self.name)
                if self.graph.worker(s.server).policy == link.name
            ]
            if self.graph.servers_for("credits", self.name):  # trainers: each segment with its trainer's leave
                link.samples = GatedProducer(
                    self.worker.ctx,
                    self.name,
                    [(endpoints.address(table, t, "samples"), endpoints.address(table, t, "credits")) for t in servers],
                )
            else:  # buffers: any of them, as fast as they take it
                link.samples = SampleProducer(
                    self.worker.ctx, [endpoints.address(table, b, "samples") for b in servers]
                )

    def _client(self, table: dict, stream, link: PolicyLink) -> InferenceClient | ShmInferenceClient:
        same_node = endpoints.same_node(table, stream.server, self.name)
        if stream.transport == "shm" and not same_node:
            raise RuntimeError("inference_transport 'shm' needs the inference server on this node; it is not")
        if stream.transport == "zmq" or not same_node:
            address = endpoints.address(table, stream.server, "inference")
            return InferenceClient(inference.connect(self.worker.ctx, address))
        obs = link.groups[0].obs
        segment = self.name + (f"-{link.name}" if link.name else "")  # one shared-memory segment per policy
        contract = link.groups[0].contract
        return ShmInferenceClient(
            unix.socket_path(self.worker.run_dir.root, stream.server),
            len(link.groups),
            len(obs),
            obs.shape[1:],
            obs.dtype,
            contract.reply_fields(),
            name=shm_name(self.worker.run_dir.root, segment, self.worker.incarnation),
            # a replacement may start while its policy worker is being replaced too: it then connects later
            server_may_be_away=self.worker.incarnation > 0,
        )

    def _with_failover(
        self, table: dict, server: str, client: InferenceClient | ShmInferenceClient
    ) -> InferenceClient | ShmInferenceClient | FailoverClient:
        """With other policy workers of the same policy, one of them answers while `server` is away
        (streams/failover.py): the next one after it, so that the actors of a lost one spread over the rest."""
        policy = self.graph.worker(server).policy
        others = [w.name for w in self.graph.workers if w.kind == "policy" and w.policy == policy]
        if len(others) < 2:
            return client
        other = others[(others.index(server) + 1) % len(others)]
        address = endpoints.address(table, other, "inference")
        return FailoverClient(client, lambda: InferenceClient(inference.connect(self.worker.ctx, address)))

    def close(self) -> None:
        for link in self.links:
            if isinstance(link.inference, (ShmInferenceClient, FailoverClient)):
                link.inference.close()
            for group in link.groups:
                if group.envs is not None:
                    group.envs.close()
        for rows in self.team_rows:
            rows.close()

    def start(self) -> None:
        n = self.exp.workers.actor.inference_splits
        self._sent_at = [time.perf_counter()] * n
        self._filling_since = [time.perf_counter()] * n  # when each group's segment began
        self._waiting_since: float | None = None  # when the ring started waiting for the current group
        for g in range(n):
            self._parked.add(g)
            self._unpark(g, 0)

    def _has_leave(self, g: int, segment: int, timeout_ms: int) -> bool:
        """Whether group g's segment number `segment` may be sent, for every policy (flow control)."""
        return all(
            cast("GatedProducer | SampleProducer", link.samples).reserve((g, segment), timeout_ms)
            for link in self.links
        )

    def _unpark(self, g: int, timeout_ms: int) -> bool:
        """Send group g's parked requests once its next segments have leave to be sent (flow control)."""
        if not self._has_leave(g, self._segments[g], timeout_ms):
            return False
        self._parked.discard(g)
        for link in self.links:
            assert link.inference is not None  # (connect comes first)
            link.inference.send(g, link.groups[g].request_obs(), self._meta(link.groups[g]), link.groups[g].hidden)
        self._sent_at[g] = self._filling_since[g] = time.perf_counter()
        return True

    def _next_stepping(self, g: int) -> int:
        """The first group after g, round the ring, that is not parked."""
        n = len(self._sent_at)
        return next(h % n for h in range(g + 1, g + n) if h % n not in self._parked)

    def _meta(self, group: RingGroup) -> dict:
        """A request's settings: exploration, and with self-play the version each row asks for."""
        return self.explore if group.seats is None else {**self.explore, "opponents": group.seats.versions()}

    def poll(self, timeout_ms) -> None:
        if self._unsent:  # a consumer was busy: retry before stepping on
            self._push(timeout_ms)
            return
        g = self.next_group
        if g in self._parked:
            # A group without leave is passed over while another group can step: a group that holds leave
            # must go on to fill its segment, whose arrival is what frees the trainer's next grant (with
            # fewer grants than ring groups, a ring that stood still here would wait for itself). Only when
            # every group waits for leave does the actor wait, and the trace counts that time.
            everyone = len(self._parked) == len(self._sent_at)
            if everyone and self._leave_wait_since is None:
                self._leave_wait_since = time.perf_counter()
            if self._unpark(g, timeout_ms if everyone else 0):
                if self._leave_wait_since is not None:
                    self.trace.record("leave", wait_seconds=time.perf_counter() - self._leave_wait_since)
                    self._leave_wait_since = None
                return
            if everyone:
                return
            g = self.next_group = self._next_stepping(g)
        if self._waiting_since is None:
            self._waiting_since = time.perf_counter()
        replies = self._replies.setdefault(g, [])
        while len(replies) < len(self.links):
            reply = cast(PolicyClient, self.links[len(replies)].inference).wait(g, timeout_ms)
            if reply is None:
                return  # a policy handler is busy or gone; the worker checks commands and heartbeats
            replies.append(reply)
        del self._replies[g]
        t0, self._waiting_since = self._waiting_since, None
        t1 = time.perf_counter()
        groups = [link.groups[g] for link in self.links]
        self.next_group = (g + 1) % len(self._sent_at)
        if groups[0].full and not self._has_leave(g, self._segments[g] + 1, 0):
            # No leave yet for the group's next segment: this reply only finishes the segment (bootstrap
            # values), which goes now; the first step's actions are asked for again once leave comes, so
            # that they are the policy's of then, not of before the wait.
            self._send_segments(
                g, cast(list[dict], [group.bootstrap(reply.arrays) for group, reply in zip(groups, replies)])
            )
            self._parked.add(g)
            return
        if self.team_rows:
            segments = [group.act(reply.arrays, reply.meta["version"]) for group, reply in zip(groups, replies)]
            for group, result in zip(groups, self.team_rows[g].step([group.env_actions for group in groups])):
                group.observe(*result)
        else:
            segments = [groups[0].advance(replies[0].arrays, replies[0].meta["version"])[1]]
        t2 = time.perf_counter()
        link: PolicyLink | int
        for link, group in zip(self.links, groups):
            assert link.inference is not None  # (connect comes first)
            link.inference.send(g, group.obs, self._meta(group), group.hidden)
        t3 = time.perf_counter()
        # request_seconds: sending the next request; with the inline transport, the inference itself
        self.trace.record(
            "env_step",
            group=g,
            envs=groups[0].n,
            step_seconds=t2 - t1,
            request_seconds=t3 - t2,
            wait_seconds=t1 - t0,
            inference_latency=t1 - self._sent_at[g],
        )
        self._sent_at[g] = t3
        for link, group in enumerate(groups):
            for ret, length in group.finished_episodes:
                if self.policy_index is not None:
                    p = self.policy_index[link]
                    self.trace.record("episode", episode_return=ret, length=length, policy=p)
                    self._returns.append((p, ret, length))
                else:
                    self.trace.record("episode", episode_return=ret, length=length)
                    self._returns.append((ret, length))
            self.episodes += len(group.finished_episodes)
            group.finished_episodes = []
            for opponent, seat, ret in group.finished_games:
                self.trace.record("game", opponent=opponent, seat=seat, learner_return=ret)
            group.finished_games = []
        if segments[0] is not None:
            self._send_segments(g, cast(list[dict], segments))  # (all finished, taking the same steps)

    def _send_segments(self, g: int, segments: list[dict]) -> None:
        """Group g's segments (one per policy, all of the same steps) to their policies' consumers."""
        now = time.perf_counter()
        for link, segment in zip(self.links, segments):
            frames = segment_frames(segment, self.frames_per_step)
            # (actor, group): one stream of steps; fill_seconds: how long the segment took to fill (a trainer
            # sizes its flow-control window by it), from its first request to now
            meta = {
                "actor": self.name,
                "incarnation": self.worker.incarnation,
                "group": g,
                "frames": frames,
                "fill_seconds": now - self._filling_since[g],
            }
            self._unsent.append((link, frames, wire.pack("segment", meta, segment), now, (g, self._segments[g])))
        self._filling_since[g] = now  # the next segment begins with this reply's actions (or when leave comes)
        self._segments[g] += 1
        self._push(0)

    def _push(self, timeout_ms: int) -> None:
        while self._unsent:
            link, frames, msg, since, key = self._unsent[0]
            if not link.samples.try_send(msg, timeout_ms, key=key):  # with the leave reserved when it began
                return
            self.frames_sent += frames
            self.trace.record("segment", frames=frames, send_wait=time.perf_counter() - since)
            self._unsent.pop(0)

    def finish(self) -> None:
        self.frames_discarded += sum(frames for _, frames, *_ in self._unsent)  # never taken before the stop
        self._unsent = []

    @property
    def env_frames(self) -> int:
        return sum(group.valid_steps for link in self.links for group in link.groups) * self.frames_per_step

    def queue_depths(self) -> dict[str, int]:
        return {"unsent_segments": len(self._unsent)}

    def stats(self) -> dict:
        returns, self._returns = self._returns, []
        return {
            "env_frames": self.env_frames,
            "frames_sent": self.frames_sent,
            "frames_discarded": self.frames_discarded,
            "episodes": self.episodes,
            # requests sent again to a policy worker's replacement, or to another policy worker meanwhile
            "requests_resent": sum(cast(PolicyClient, link.inference).resent for link in self.links),
            "requests_rerouted": sum(
                link.inference.rerouted for link in self.links if isinstance(link.inference, FailoverClient)
            ),
            ("returns" if self.policy_index is None else "policy_returns"): returns,
        }
