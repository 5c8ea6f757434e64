"""The `algorithm` section: one frozen dataclass per shipped algorithm, chosen by its `name` key, with the
algorithm's hyper-parameters (its implementation: srl_hpc/algorithms/<name>.py)."""

# mypy: disable-error-code="assignment"
# (a subclass narrows `name` to its own Literal, by which the loader picks the class; a `type: ignore` on that line
# would become part of its comment, which documents the key in docs/)

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from srl_hpc.config.checks import check_counts, check_non_negative, check_positive, check_unit


@dataclass(frozen=True)
class PPOConfig:
    """PPO (clipped surrogate, GAE): srl_hpc/algorithms/ppo.py. Actors send segments to the trainers."""

    name: Literal["ppo"] = "ppo"  # selects PPO; `--set algorithm.name=X` switches to X's defaults
    gamma: float = 0.99  # discount per agent step, in GAE and in the discounted returns scale_rewards divides by
    gae_lambda: float = 0.95  # GAE's lambda: 1 gives Monte-Carlo returns (less bias), 0 one-step TD (less variance)
    lr: float = 2.5e-4  # Adam's learning rate (eps 1e-5)
    anneal_lr: bool = False  # linear decay to 0 over stop.env_frames
    clip_coef: float = 0.2  # the probability ratio's clip range, [1 - clip_coef, 1 + clip_coef]
    value_coef: float = 0.5  # weight of the value loss (half the squared error) in the loss
    entropy_coef: float = 0.01  # weight of the entropy bonus subtracted from the loss: raise it for more exploration
    max_grad_norm: float = 0.5  # each SGD step's gradient is clipped to this global L2 norm
    epochs: int = 4  # passes over each batch
    minibatches: int = 4  # SGD steps per pass: the shuffled batch cut into this many (recurrent: whole segments)
    normalize_advantages: bool = True  # per minibatch: to mean 0 and standard deviation 1
    # the value loss of the standard continuous-control recipe: a new value may not leave the old by more
    # than clip_coef unpenalised
    clip_value_loss: bool = False
    # observations normalised by their running mean and variance, kept by the trainer in the model's weights
    # (so every policy and evaluation worker normalises the same way); Box and Dict vector entries, not images
    normalize_observations: bool = False
    # rewards divided by the running standard deviation of the discounted return (actors send it per step)
    scale_rewards: bool = False
    max_policy_lag: int | None = None  # segments older than this many versions are dropped (counted)

    def check(self) -> list[tuple[str, str]]:
        problems = check_unit(self, ("gamma", "gae_lambda")) + check_positive(self, ("lr", "clip_coef"))
        problems += check_non_negative(self, ("value_coef", "entropy_coef", "max_grad_norm"))
        problems += check_counts(self, ("epochs", "minibatches"))
        if self.max_policy_lag is not None and self.max_policy_lag < 0:
            problems.append(("max_policy_lag", f"must be >= 0, got {self.max_policy_lag}"))
        return problems


@dataclass(frozen=True)
class DQNConfig:
    """Ape-X DQN: srl_hpc/algorithms/dqn.py. Actors send segments to buffer workers (prioritised replay,
    n-step returns); buffers send sampled batches to the trainers, trainers send TD-error priorities back."""

    name: Literal["dqn"] = "dqn"  # selects Ape-X DQN; `--set algorithm.name=X` switches to X's defaults
    gamma: float = 0.99  # discount per agent step, in the n-step returns and their bootstrap
    n_step: int = 3  # steps of reward summed before bootstrapping from the target network (< segment_length)
    lr: float = 2.5e-4  # Adam's learning rate (eps 1.5e-4)
    batch_size: int = 256  # transitions per update
    double: bool = True  # double Q-learning: the online net picks the next action, the target net values it
    dueling: bool = True  # value + advantage heads
    target_update_interval: int = 500  # updates between target-network copies
    max_grad_norm: float = 10.0  # each update's gradient is clipped to this global L2 norm
    replay_capacity: int = 100_000  # transitions per buffer worker
    learning_starts: int = 2_000  # transitions a buffer holds before it sends batches
    priority_alpha: float = 0.6  # items are sampled in proportion to (|TD error| + 1e-6) ** this; 0: uniformly
    priority_beta: float = 0.4  # importance-sampling exponent
    epsilon: float = 0.4  # Ape-X: actor i of N explores with epsilon ** (1 + epsilon_alpha * i / (N - 1))
    epsilon_alpha: float = 7.0  # how far the actors' epsilons spread (see epsilon); 0: every actor uses epsilon
    max_replay_ratio: float = 8.0  # transitions trained per transition stored; buffers wait above it
    # with a recurrent model (model.rnn), where replay items are sequences (an env's segment, so batch_size,
    # replay_capacity and learning_starts count sequences): unroll the segment before each one first, from the
    # state the actors stored, without gradients, so training starts from the current network's state
    burn_in: bool = True
    # a buffer worker saves its replay beside the checkpoints (every workers.trainer.checkpoint_interval and at stop)
    # when the stored items fit in this many MB, and a resumed run or a replaced buffer worker starts from it; 0: never
    checkpoint_replay_mb: int = 1024

    def check(self) -> list[tuple[str, str]]:
        problems = check_unit(self, ("gamma", "epsilon", "priority_alpha", "priority_beta"))
        problems += check_positive(self, ("lr", "max_grad_norm", "max_replay_ratio"))
        problems += check_counts(self, ("n_step", "batch_size", "target_update_interval", "replay_capacity"))
        if self.checkpoint_replay_mb < 0:
            problems.append(("checkpoint_replay_mb", f"must be >= 0 (0: never saved), got {self.checkpoint_replay_mb}"))
        if self.epsilon_alpha < 0:
            problems.append(("epsilon_alpha", f"must be >= 0, got {self.epsilon_alpha}"))
        if self.learning_starts < self.batch_size:
            problems.append(
                ("learning_starts", f"must be >= batch_size ({self.batch_size}), got {self.learning_starts}")
            )
        if self.learning_starts > self.replay_capacity:
            problems.append(("learning_starts", f"must be <= replay_capacity ({self.replay_capacity})"))
        return problems

    def actor_epsilon(self, actor: int, actors: int) -> float:
        """The Ape-X schedule: a fixed exploration rate per actor, from epsilon (actor 0) down to epsilon^(1+alpha)."""
        return self.epsilon ** (1 + self.epsilon_alpha * actor / max(1, actors - 1))


@dataclass(frozen=True)
class MAPPOConfig(PPOConfig):
    """MAPPO (srl_hpc/algorithms/mappo.py): PPO's objective and settings, one policy for every agent of a
    multi-agent env, its value over the env's global state (every agent's observation)."""

    name: Literal["mappo"] = "mappo"  # selects MAPPO; `--set algorithm.name=X` switches to X's defaults

    def check(self) -> list[tuple[str, str]]:
        problems = super().check()
        if self.normalize_observations:  # (its centralised critic's torsos keep no statistics)
            problems.append(("normalize_observations", "is PPO's only; mappo does not normalise observations"))
        return problems


@dataclass(frozen=True)
class VDNConfig(DQNConfig):
    """VDN (srl_hpc/algorithms/vdn.py): Ape-X DQN's replay, settings and exploration, with the team's value
    the sum of its agents' (a multi-agent env whose agents all play every step)."""

    name: Literal["vdn"] = "vdn"  # selects VDN; `--set algorithm.name=X` switches to X's defaults


AlgorithmConfig = PPOConfig | DQNConfig | MAPPOConfig | VDNConfig  # chosen by `name`; the first is the default
