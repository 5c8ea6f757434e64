"""What the rest of the system knows about an algorithm, without importing torch (actors never do): its
spec. It sits below the streams, whose message contracts are derived from it (srl_hpc/streams/contract.py),
and below the models and algorithms that implement it (srl_hpc/algorithms/). A spec says:
  - reply:   what the policy answers per observation (the inference stream's reply arrays);
  - segment: the per-step fields a segment carries beyond obs, actions, rewards, dones, valid, versions:
             reply fields, "next_values" (the value of the state after each step, filled from the next
             reply) or "terminated" (the env terminated rather than truncated);
  - explore: per-actor settings sent with every inference request (e.g. an epsilon);
  - head:    the model head it trains ("actor_critic": logits and value; "central_critic": the same, the
             value over every agent's observation of a multi-agent env; "q": action values);
  - replay:  off-policy with buffer workers between actors and trainers (srl_hpc.graph wires them);
  - team:    (replay) buffers store an env's agents' steps as one transition (obs (agents, ...), actions
             (agents,), the agents' mean reward), for value decomposition across agents;
  - recurrent: its trainer side trains recurrent models (model.rnn): segments then carry "hidden", the
             recurrent state each env's first step was chosen with, and `act` takes and returns it;
  - actions: the action spaces it can train (gymnasium space class names); `validate` refuses others;
  - observations: the observation spaces it can read ("Dict": one array per key, srl_hpc/streams/contract.py).
Settings of an algorithm's config that the trainers must know (its policy lag limit, the length of its
replayed sequences) they read through its spec's methods, not the config's fields.
A user's algorithm lives in their own module: a frozen config dataclass (a `name: str` field, its
hyper-parameters, an optional `check()`) with a class attribute `spec`, an AlgorithmSpec of this module,
named by dotted path in the YAML (examples/my_a2c.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AlgorithmSpec:
    implementation: str  # "module:Class"
    reply: tuple[tuple[str, str], ...]  # (name, numpy dtype) per observation
    segment: tuple[str, ...]
    head: str
    explore: Callable[[Any, int, int], dict] = lambda cfg, actor, actors: {}
    replay: bool = False  # off-policy: segments go to buffer workers, trainers take sampled batches from them
    recurrent: bool = False  # trains recurrent models
    team: bool = False  # replay items are an env's agents together (value decomposition), not one agent's steps
    actions: tuple[str, ...] = ("Discrete",)  # gymnasium action space classes it trains
    observations: tuple[str, ...] = ("Box",)  # gymnasium observation space classes it reads

    def load(self) -> Any:
        module, _, name = self.implementation.partition(":")
        return getattr(importlib.import_module(module), name)

    def max_policy_lag(self, cfg) -> int | None:
        """On-policy: how many versions older than the trainer's a segment may be before the trainer drops it
        (None: none is dropped)."""
        return getattr(cfg, "max_policy_lag", None)

    def n_step(self, cfg) -> int:
        """Replay: the steps of reward a stored transition's return sums before it bootstraps."""
        return getattr(cfg, "n_step", 1)

    def burn_in(self, cfg) -> bool:
        """Recurrent replay: whether a sequence is preceded by the segment before it, to warm the state up."""
        return bool(getattr(cfg, "burn_in", False))

    def dueling(self, cfg) -> bool:
        """A `q` head: separate state-value and advantage streams."""
        return bool(getattr(cfg, "dueling", False))

    def replay_sequence_steps(self, cfg, segment_length: int) -> int:
        """Recurrent replay: the steps of one replayed sequence, (a burn-in segment,) the trained segment and
        its n-step lookahead, as the buffers build them (srl_hpc.handlers.buffer.sequences)."""
        return segment_length * (2 if self.burn_in(cfg) else 1) + self.n_step(cfg)


SPECS = {
    "ppo": AlgorithmSpec(
        "srl_hpc.algorithms.ppo:PPO",
        reply=(("actions", "<i8"), ("logp", "<f4"), ("values", "<f4")),
        segment=("logp", "values", "next_values"),
        head="actor_critic",
        recurrent=True,
        actions=("Discrete", "MultiDiscrete", "Box"),
        observations=("Box", "Dict"),
    ),
    "mappo": AlgorithmSpec(
        "srl_hpc.algorithms.mappo:MAPPO",
        reply=(("actions", "<i8"), ("logp", "<f4"), ("values", "<f4")),
        segment=("logp", "values", "next_values"),
        head="central_critic",
    ),
    "dqn": AlgorithmSpec(
        "srl_hpc.algorithms.dqn:DQN",
        reply=(("actions", "<i8"),),
        segment=("terminated",),
        head="q",
        explore=lambda cfg, actor, actors: {"epsilon": cfg.actor_epsilon(actor, actors)},
        replay=True,
        recurrent=True,
    ),
    "vdn": AlgorithmSpec(
        "srl_hpc.algorithms.vdn:VDN",
        reply=(("actions", "<i8"),),
        segment=("terminated",),
        head="q",
        explore=lambda cfg, actor, actors: {"epsilon": cfg.actor_epsilon(actor, actors)},
        replay=True,
        team=True,
    ),
}


HIDDEN = "hidden"  # the recurrent state: in requests, replies and segments, (envs, model.state_size) float32


def reads_global_state(cfg) -> bool:
    """Whether an algorithm's model reads a multi-agent env's global state (a centralised critic): actors then
    append the env's own state, where it has one, to every row's observation."""
    return spec(cfg).head == "central_critic"


def spec(cfg) -> AlgorithmSpec:
    """The spec of an experiment's `algorithm` section: a shipped algorithm's by name; a user's algorithm
    (`name: "my_pkg.algos:MyConfig"`) is its config class, which carries its spec as a class attribute."""
    return type(cfg).spec if ":" in cfg.name else SPECS[cfg.name]
