"""Eval handler (workers.eval): whole episodes with the newest published weights, for a score a researcher can report.
Training returns mix many policy versions and exploration; an evaluation round plays one version, greedy by default,
on envs whose seeds no actor uses.

A round takes the newest weights (newer than the previous round's, or for the replacement of a worker that died,
newer than its model's own), resets `episodes` envs, plays each env's first episode (a multi-agent env's: each
agent's) to its end and reports every (version, return, length) to the controller, which shows them in the progress
line, metrics.csv, TensorBoard and summary.json, and may stop the run on them (stop.target_eval_return). A round
starts `interval` seconds after the previous one started, or when it ends if it took longer; in between the worker
waits on the parameter stream, using no CPU. Weights that come during a round wait for the next one (only the newest
is kept: a Pong model is 6.5 MB a version).

A round whose mean return beats the one of the version tagged `best` in the parameter database stores the weights it
played there and moves `best` to them, with its mean return: `srl-launch enjoy RUN --tag best` plays it, and a
resumed run keeps comparing against it. (Two evaluation workers ending rounds in the same instant may both move the
tag; the later one wins, even if its return is the lower.)"""

from __future__ import annotations

import time

import numpy as np
import torch

from srl_hpc.algorithm_spec import HIDDEN, reads_global_state, spec
from srl_hpc.algorithms.watching import watching_policy
from srl_hpc.envs.backends import first_seed, make_env_group, spaces
from srl_hpc.handlers import Handler
from srl_hpc.handlers.policy import InferenceEngine
from srl_hpc.models.building import build_model
from srl_hpc.models.devices import resolve_device
from srl_hpc.services import parameter_db
from srl_hpc.services.parameter_db import ParameterDB
from srl_hpc.services.parameters import ParameterSubscriber
from srl_hpc.streams import endpoints, wire
from srl_hpc.streams.contract import Contract

SEED_OFFSET = 2**30  # evaluation seeds sit this far above the actors' (seed * 1_000_003 + actor envs)


class EvalHandler(Handler):
    kind = "eval"

    def __init__(self, worker) -> None:
        super().__init__(worker)
        exp, self.cfg = self.exp, self.exp.workers.eval
        torch.set_num_threads(1)
        index = self.graph.worker(self.name).index
        act, explore = watching_policy(exp.algorithm, exp.workers.actor.count, self.cfg.greedy)
        n = self.cfg.episodes
        obs_space, action_space = spaces(exp.env, global_state=reads_global_state(exp.algorithm))
        device = resolve_device(self.graph.worker(self.name).device, worker.gpu_index, worker.may_share_gpu, self.name)
        self.seed = SEED_OFFSET + worker.seed * 1_000_003 + index * 100_000
        self.contract = Contract.of(obs_space, action_space, spec(exp.algorithm), exp)
        self.engine = InferenceEngine(build_model(exp, obs_space, action_space), act, device, self.seed)
        if worker.attempt > 1:
            self.engine.resume(worker.run_dir.checkpoint)
        self.envs = make_env_group(exp.env, n, first_seed(self.seed, n), reads_global_state(exp.algorithm))
        self.rows = self.envs.num_envs  # an episode per env; a multi-agent env's: one per agent
        self.explore = {k: np.full(self.rows, v, np.float32) for k, v in explore.items()}
        self.rounds = 0
        # a replacement (incarnation > 0) waits for weights newer than its model's own (untrained, or the
        # checkpoint's): its predecessor has evaluated those
        self.evaluated_version = self.engine.version if worker.incarnation else -1
        self.next_round_at = 0.0
        self.playing = False
        self.newest: wire.Message | None = None  # the newest weights received and not loaded yet
        # the weights of the version being evaluated, as published
        self.playing_arrays: dict[str, np.ndarray] | None = None
        self.history = ParameterDB(worker.run_dir.parameters_of(""))
        self.finished: list[list[float]] = []  # [version, return, length] of complete rounds, until reported

    def connect(self, table) -> None:
        (stream,) = self.graph.servers_for("parameters", self.name)
        self.parameters = ParameterSubscriber.connect(
            self.worker.ctx, endpoints.address(table, stream.server, "parameters")
        )

    def poll(self, timeout_ms) -> None:
        self.newest = self.parameters.poll_newest() or self.newest  # drained every time: nothing piles up
        if self.playing:
            self._step()
            return
        wait = self.next_round_at - time.monotonic()
        if wait > 0:
            time.sleep(min(wait, timeout_ms / 1000))
            return
        if self.newest is not None:
            self.engine.load(self.newest, self.trace)
            self.playing_arrays, self.newest = self.newest.arrays, None
        if self.engine.version <= self.evaluated_version:  # nothing new to evaluate: wait for the next weights
            self.parameters.socket.poll(timeout_ms)
            return
        self._begin()

    def _begin(self) -> None:
        n = self.cfg.episodes
        self.obs = self.contract.obs.pack(self.envs.reset(seed=first_seed(self.seed + self.rounds * n, n))[0])
        self.returns, self.lengths = np.zeros(self.rows), np.zeros(self.rows, np.int64)
        state_size = self.exp.model.state_size
        self.hidden = np.zeros((self.rows, state_size), np.float32) if state_size else None
        self.done = np.zeros(self.rows, bool)
        self.version = self.evaluated_version = self.engine.version
        self.started = time.monotonic()
        self.next_round_at = self.started + self.cfg.interval
        self.playing = True

    def _step(self) -> None:
        out = self.engine.infer(self.obs, self.explore, self.hidden)
        self.hidden = out.get(HIDDEN)  # a recurrent model's next state (each env plays one episode a round)
        obs, rewards, terminated, truncated, _ = self.envs.step(self.contract.action.to_env(out["actions"]))
        self.obs = self.contract.obs.pack(obs)
        playing = ~self.done  # an env past its episode has auto-reset: what it does now is not counted
        self.returns[playing] += rewards[playing]
        self.lengths[playing] += 1
        self.done |= playing & (terminated | truncated)
        if self.done.all():
            self.playing = False
            self.rounds += 1
            self.finished += [[self.version, float(r), int(n)] for r, n in zip(self.returns, self.lengths)]
            self.trace.record(
                "eval_round",
                version=self.version,
                mean_return=float(self.returns.mean()),
                mean_length=float(self.lengths.mean()),
                seconds=time.monotonic() - self.started,
            )
            self._tag_if_best(float(self.returns.mean()))

    def _tag_if_best(self, mean_return: float) -> None:
        best = self.history.tags().get(parameter_db.BEST, {}).get("mean_return")  # (none: a user's own tag)
        if self.playing_arrays is None or (best is not None and best >= mean_return):
            return  # (no arrays: the round played the checkpoint's weights, which the database holds as latest)
        self.history.put(self.version, self.playing_arrays)
        self.history.tag(parameter_db.BEST, self.version, mean_return=mean_return, worker=self.name)

    def close(self) -> None:
        self.envs.close()

    def stats(self) -> dict:
        finished, self.finished = self.finished, []
        return {"eval_rounds": self.rounds, "eval_episodes": finished}
