"""A ring group: some of an actor's envs, stepped together. It asks for one batch of actions at a time,
records the policy version that chose each step, and cuts its trajectories into fixed-length segments
(its envs step together, so their segments align and travel as one message of shape (envs, T, ...)).
With a recurrent model it also keeps each env's recurrent state: sent with every request, replaced by the
reply's, zeroed where an episode begins, and stored at each segment's start (the trainer unrolls the
segment from it). The actor handler (actor.py) steps its groups in turn."""

from __future__ import annotations

from typing import cast

import numpy as np

from srl_hpc.algorithm_spec import HIDDEN
from srl_hpc.population.opponents import Seats
from srl_hpc.streams.contract import Contract


class RingGroup:
    """Envs that share one inference request (one vectorised env), and the segment they are filling.

    `advance(reply, version)` applies one reply: it completes the previous step with what the reply
    brings (with "next_values" in the segment, the bootstrap value of every step is the value of the
    state after it), steps the group with the reply's actions, and returns the observations of the next
    request. The envs auto-reset on the step after an episode ends, so a truncated episode's final
    observation is in the next request like any other, and the reset step itself is recorded with
    valid=False (consumers skip it). A segment holds the contract's fields (srl_hpc/streams/contract.py):
    observations as they travel (a Dict packed), actions as the policy chose them (the env gets
    `env_actions`). With a recurrent model, `hidden` is the state to send with the next request; with reward
    scaling, each step's discounted return (`gamma`) goes with it.
    """

    def __init__(
        self,
        envs,
        segment_length: int,
        seed: int,
        contract: Contract,
        first: tuple | None = None,
        gamma: float = 0.99,
        seats: Seats | None = None,
    ) -> None:
        self.envs = envs  # None for a team of TeamRows: the actor steps all teams' envs together
        self.T = segment_length
        self.contract = contract
        self.reply_names = [name for name, *_ in contract.reply_fields() if name != HIDDEN]
        obs, infos = envs.reset(seed=seed) if first is None else first  # first: a reset done by the actor
        self.obs = np.array(contract.obs.pack(obs))
        self.n = len(self.obs)
        self._present = infos.get("present")  # multi-agent rows: whose agents act in the next step (None: all)
        state_size = contract.state_size
        self.hidden = np.zeros((self.n, state_size), np.float32) if state_size else None
        self.gamma = gamma
        self._discounted = np.zeros(self.n, np.float32)  # each env's discounted return so far (reward scaling)
        self.segment = self._new_segment()
        self.t = 0
        self.actions: np.ndarray | None = None  # of the step being taken (act() to observe())
        self._valid: np.ndarray | None = None
        self._pending = False  # the step at t-1 still waits for its next values
        self._terminated = np.zeros(self.n, bool)
        self._resetting = np.zeros(self.n, bool)  # the next step of these envs is their auto-reset
        self.valid_steps = 0
        self.episode_return = np.zeros(self.n)
        self.episode_length = np.zeros(self.n, np.int64)
        self.finished_episodes: list[tuple[float, int]] = []
        self.seats = seats  # self-play: only the learner's rows are trained on and reported
        self.finished_games: list[tuple[int, int, float]] = []  # self-play: (opponent, learner's seat, its return)

    def _new_segment(self) -> dict[str, np.ndarray]:
        return self.contract.segment_arrays(self.n, self.T)

    def request_obs(self) -> np.ndarray:
        return self.obs

    @property
    def full(self) -> bool:
        """Every step of the segment is taken; the next reply brings the last one's bootstrap values."""
        return self._pending and self.t == self.T

    def bootstrap(self, reply: dict[str, np.ndarray]) -> dict | None:
        """Record the previous step's bootstrap values from `reply`; the segment if that finished it."""
        finished = None
        if "next_values" in self.segment:
            self.segment["next_values"][:, self.t - 1] = np.where(self._terminated, 0.0, reply["values"])
        if self.t == self.T:
            finished, self.segment, self.t = self.segment, self._new_segment(), 0
        self._pending = False
        return finished

    def advance(self, reply: dict[str, np.ndarray], version: int) -> tuple[np.ndarray, dict | None]:
        """Apply one reply and step the envs. Returns (next request's observations, a finished segment or None)."""
        finished = self.act(reply, version)
        self.observe(*self.envs.step(self.env_actions))
        return self.obs, finished

    def act(self, reply: dict[str, np.ndarray], version: int) -> dict | None:
        """The first half of a step: record what the reply decided (`self.actions` to step the envs with).
        Returns the segment the reply's bootstrap values finished, if any."""
        finished = self.bootstrap(reply) if self._pending else None
        t, seg = self.t, self.segment
        self._valid = ~self._resetting if self._present is None else ~self._resetting & self._present
        if self.seats is not None:
            self._valid &= self.seats.learner_rows()
        seg["obs"][:, t] = self.obs
        for name in self.reply_names:
            if name in seg:
                seg[name][:, t] = reply[name]
        seg["versions"][:, t] = version
        seg["valid"][:, t] = self._valid
        if self.hidden is not None:
            if t == 0:
                seg[HIDDEN][:] = self.hidden  # what this step's request carried
            self.hidden = np.array(reply[HIDDEN])  # (a copy: shared-memory replies are rewritten)
        self.actions = np.asarray(reply["actions"])
        if self.seats is not None and self.seats.pool.players:  # fixed players move instead of the policy
            self.actions = self.seats.fixed_moves(self.actions, self.obs, self.contract.obs.unpack)
        return finished

    @property
    def env_actions(self) -> np.ndarray:
        """The actions of the step being taken, as the env takes them (a Box sample into its bounds)."""
        assert self.actions is not None  # (act() comes first)
        return self.contract.action.to_env(self.actions)

    def observe(self, obs, rewards, terminated, truncated, infos) -> None:
        """The second half: what the envs returned for `self.actions`."""
        t, seg, valid = self.t, self.segment, self._valid
        assert valid is not None  # (act() comes first)
        self._present = infos.get("present")
        done = np.logical_or(terminated, truncated)
        seg["rewards"][:, t] = rewards
        seg["dones"][:, t] = done
        if "terminated" in seg:
            seg["terminated"][:, t] = terminated
        if "discounted_returns" in seg:
            self._discounted = self._discounted * self.gamma + rewards
            seg["discounted_returns"][:, t] = self._discounted
            self._discounted[done] = 0.0
        self.valid_steps += int(valid.sum())
        self.episode_return += rewards
        self.episode_length += valid
        if self.seats is None:
            for i in np.flatnonzero(done):
                self.finished_episodes.append((float(self.episode_return[i]), int(self.episode_length[i])))
        else:
            for i in np.flatnonzero(done & self.seats.learner_rows()):
                ret = float(self.episode_return[i])
                self.finished_episodes.append((ret, int(self.episode_length[i])))
                self.finished_games.append((*self.seats.episode_over(cast(int, i // self.seats.k), ret), ret))
        self.episode_return[done], self.episode_length[done] = 0.0, 0
        self._terminated, self._resetting = np.asarray(terminated, bool), done
        if self.hidden is not None:
            self.hidden[~valid] = 0.0  # that was an auto-reset: the next request is an episode's first
        self.obs = np.array(self.contract.obs.pack(obs))  # (a backend may step into the same buffer again)
        self.t += 1
        self._pending = True
