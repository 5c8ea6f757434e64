"""The experiment schema: frozen dataclasses, one per YAML section. Every field does something.

Choices (precision, backend, transport, placement) are `Literal` types (choices.py): the loader checks a
value against the type itself. `algorithm` is one of several dataclasses (algorithms.py), chosen by its
`name` key; `workers` (workers.py) and `slurm` (slurm.py) have modules of their own. `check()` methods
hold the rules a type cannot say; the loader (srl_hpc.config.loader) attaches YAML key paths and lines to
their problems.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Literal

from srl_hpc.algorithm_spec import spec
from srl_hpc.config.algorithms import AlgorithmConfig, DQNConfig, PPOConfig
from srl_hpc.config.checks import check_counts, check_positive
from srl_hpc.config.choices import ActionSquash, EnvBackend, OpponentRule, Recurrence
from srl_hpc.config.slurm import SlurmConfig
from srl_hpc.config.workers import WorkersConfig

# ----------------------------------------------------------------------------------------------- schema


@dataclass(frozen=True)
class AtariConfig:
    """The standard Atari pipeline (ale-py): frame skip with max-pooling, grayscale resize, frame stack."""

    frame_skip: int = 4  # a training "frame" count is agent steps x frame_skip
    screen_size: int = 84  # pixels: frames are resized to screen_size x screen_size grayscale
    frame_stack: int = 4  # the last this many frames make one observation (what the policy sees of motion)
    noop_max: int = 30  # at most this many random no-op actions after each reset (varied starts)
    terminal_on_life_loss: bool = False  # true: an episode ends at each lost life, not only at game over

    def check(self) -> list[tuple[str, str]]:
        problems = check_counts(self, ("frame_skip", "screen_size", "frame_stack"))
        if self.noop_max < 0:
            problems.append(("noop_max", f"must be >= 0, got {self.noop_max}"))
        return problems


@dataclass(frozen=True)
class EnvConfig:
    # any gymnasium id (srl_hpc registers its own under "srl_hpc/"), or "package.module:factory", a callable
    # that takes `kwargs` and returns a gymnasium.Env
    id: str = "CartPole-v1"
    kwargs: dict = field(default_factory=dict)  # passed to gymnasium.make
    atari: AtariConfig | None = None  # set (even to {}) for ALE/* ids: standard preprocessing
    backend: EnvBackend = "auto"  # how an actor steps its envs (srl_hpc/envs/backends.py)
    # the env's info carries the legal actions ("action_mask", as gymnasium's Taxi): they join the observation
    # as a Dict key, so the policy masks the others (srl_hpc/envs/action_masks.py; the sync backend)
    action_mask_from_info: bool = False

    @property
    def frames_per_step(self) -> int:
        return self.atari.frame_skip if self.atari else 1


@dataclass(frozen=True)
class ModelConfig:
    """The network: a built-in torso ("mlp" for vector observations, "nature_cnn" for stacked Atari frames)
    under the head the algorithm needs, or "package.module:Class", a user's nn.Module (srl_hpc/models)."""

    # "mlp", "nature_cnn", or a user's "package.module:Class", built as Class(obs_space, action_space, **kwargs)
    name: str = "mlp"
    hidden_sizes: tuple[int, ...] = (64, 64)  # mlp only
    # actor-critic heads: the value over a torso of its own. Where returns are large (Acrobot's -500) the
    # value loss otherwise swamps the policy's share of a shared torso's clipped gradient
    separate_critic: bool = False
    kwargs: dict = field(default_factory=dict)  # a user's model only: passed to its constructor
    # a recurrent core between torso and heads, for tasks one observation does not tell (its state travels
    # with the inference requests and is stored at segment starts: srl_hpc/models)
    rnn: Recurrence = "none"
    rnn_size: int = 64  # units of the GRU or LSTM cell (model.rnn); an LSTM's state per env is twice this
    # Box actions: the policy samples a Gaussian; the env gets the sample clipped to its bounds, or squashed
    # by tanh and rescaled into them (srl_hpc/streams/contract.py). Either way the trainer scores the sample
    action_squash: ActionSquash = "clip"
    log_std_init: float = 0.0  # Box actions, built-in models: the Gaussian's log-std before training (0: std 1)

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per env: 0 (feed-forward), the GRU's hidden, the LSTM's hidden and cell."""
        return {"none": 0, "gru": self.rnn_size, "lstm": 2 * self.rnn_size}[self.rnn]

    def check(self) -> list[tuple[str, str]]:
        problems = check_counts(self, ("rnn_size",))
        if self.name not in BUILTIN_MODELS and ":" not in self.name:
            problems.append(
                (
                    "name",
                    f"unknown model {self.name!r}; choose one of {list(BUILTIN_MODELS)} or give 'package.module:Class'",
                )
            )
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            problems.append(("hidden_sizes", "must be a non-empty list of positive integers"))
        if self.kwargs and ":" not in self.name:
            problems.append(("kwargs", "only a user's model (name 'package.module:Class') takes kwargs"))
        if self.separate_critic and ":" in self.name:
            problems.append(
                ("separate_critic", "applies to the built-in models only; a user's model has its own heads")
            )
        if self.rnn != "none" and ":" in self.name:
            problems.append(("rnn", "applies to the built-in models only"))
        if self.rnn != "none" and self.separate_critic:
            problems.append(("separate_critic", "a recurrent model's value reads its recurrent core: set it false"))
        return problems


BUILTIN_MODELS = ("mlp", "nature_cnn")


@dataclass(frozen=True)
class OpponentsConfig:
    """Self-play in a game of several seats (a turn-taking game such as srl_hpc.envs.connect_four:connect_four):
    the learner plays one seat of each env with the newest weights, a past version plays the others, and only
    the learner's seat is trained on (srl_hpc/population/opponents.py)."""

    # who plays the other seats, chosen per episode: "latest" the newest weights, "uniform" any stored
    # snapshot, "pfsp" snapshots the learner scores worst against most often; "none": no self-play
    rule: OpponentRule = "none"
    pfsp_power: float = 2.0  # pfsp: a snapshot's weight is (1 - the learner's score against it) ** this
    # uniform, pfsp: opponents are drawn from the newest this many snapshots, each kept loaded in the policy
    # workers (a larger pool costs their memory, and a forward pass per version in a batch)
    pool: int = 8
    # fixed players (srl_hpc/envs/fixed_players.py: random, one-ply) among the opponents, each with its share of the
    # games, e.g. {one-ply: 0.25}; the rule draws the rest
    fixed: dict[str, float] = field(default_factory=dict)

    def check(self) -> list[tuple[str, str]]:
        from srl_hpc.envs.fixed_players import FIXED_PLAYERS

        problems = check_positive(self, ("pfsp_power", "pool"))
        for name, share in self.fixed.items():
            if name not in FIXED_PLAYERS:
                problems.append(
                    (f"opponents.fixed.{name}", f"no fixed player {name!r} (players: {', '.join(FIXED_PLAYERS)})")
                )
            elif not 0 < share <= 1:
                problems.append((f"opponents.fixed.{name}", f"a share of the games, in (0, 1]; got {share}"))
        if sum(self.fixed.values()) > 1:
            problems.append(("opponents.fixed", f"the shares add up to {sum(self.fixed.values()):g}, more than 1"))
        return problems


@dataclass(frozen=True)
class PopulationConfig:
    """Population-based training: `size` members, each a PPO policy with its own actors, policy workers and
    trainer, trained side by side in one run. Every `interval` seconds a population manager beside the
    controller ranks the members by their mean training return; each of the worst `fraction` copies the
    weights and hyper-parameters of one of the best `fraction` (exploit) and multiplies each `explore` key by
    one of its factors (explore). srl_hpc/population/pbt.py; the lineage goes to RUN/population/lineage.jsonl."""

    size: int = 0  # members (named member-0 .. member-{size-1}); 0: no population
    # seconds between rounds; a member takes part once it has ended stop.return_window episodes since its last copy
    interval: float = 30.0
    fraction: float = 0.25  # the worst this fraction of the ranked members copy the best this fraction (at least one)
    # algorithm keys -> one starting value per member ({lr: [1e-4, 3e-4, 1e-3, 3e-3]}); members share the others
    init: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # algorithm keys -> factors, one drawn at random per copy ({lr: [0.8, 1.25]}): what explore changes
    explore: dict[str, tuple[float, ...]] = field(default_factory=dict)

    def check(self) -> list[tuple[str, str]]:
        if not self.size:
            return [(k, "needs population.size >= 2") for k in ("init", "explore") if getattr(self, k)]
        problems = [] if self.size >= 2 else [("size", f"a population needs at least 2 members, got {self.size}")]
        problems += check_positive(self, ("interval",))
        if not 0.0 < self.fraction <= 0.5:
            problems.append(("fraction", f"must be in (0, 0.5] (the worst copy the best), got {self.fraction}"))
        problems += [
            (f"init.{key}", f"one value per member: {self.size} values, got {len(values)}")
            for key, values in self.init.items()
            if len(values) != self.size
        ]
        problems += [
            (f"explore.{key}", "at least one factor, each > 0")
            for key, factors in self.explore.items()
            if not factors or min(factors) <= 0
        ]
        return problems


@dataclass(frozen=True)
class StopConfig:
    env_frames: int | None = None  # frames stepped by all actors
    wall_time: float | None = None  # seconds
    target_return: float | None = None  # mean return of the last `return_window` episodes
    return_window: int = 20  # the training mean return (target_return's, progress lines') is of this many episodes
    target_eval_return: float | None = None  # mean return of an evaluation round (needs workers.eval.count >= 1)

    def check(self) -> list[tuple[str, str]]:
        problems = []
        if (self.env_frames, self.wall_time, self.target_return, self.target_eval_return) == (None,) * 4:
            problems.append(("", "set at least one of env_frames, wall_time, target_return, target_eval_return"))
        if self.env_frames is not None and self.env_frames <= 0:
            problems.append(("env_frames", f"must be > 0, got {self.env_frames}"))
        if self.wall_time is not None and self.wall_time <= 0:
            problems.append(("wall_time", f"must be > 0, got {self.wall_time}"))
        if self.return_window < 1:
            problems.append(("return_window", f"must be >= 1, got {self.return_window}"))
        return problems


@dataclass(frozen=True)
class WandbConfig:
    """Weights & Biases, beside TensorBoard: the same scalars, in a W&B run (offline by default: `wandb sync
    RUN/wandb/offline-run-*` uploads it later, e.g. from a login node when compute nodes have no internet)."""

    project: str  # the W&B project the run logs to
    entity: str | None = None  # the W&B user or team that owns the project; default: wandb's own default
    # "offline": written under RUN/wandb/ for a later `wandb sync`; "online": uploaded as the run goes
    # (the controller's node needs internet access)
    mode: Literal["offline", "online"] = "offline"

    def check(self) -> list[tuple[str, str]]:
        if importlib.util.find_spec("wandb") is None:
            return [("", "needs the wandb package on every node (pip install wandb); or leave monitor.wandb out")]
        return [] if self.project else [("project", "must be a W&B project name")]


@dataclass(frozen=True)
class MonitorConfig:
    status_interval: float = 5.0  # seconds between progress lines (and metrics.csv rows)
    # seconds: a worker silent this long is declared dead and the run stops (a hung actor is replaced at half)
    heartbeat_timeout: float = 60.0
    trace: bool = True  # every worker records events to RUN/traces/<worker>.h5 (see srl-trace)
    tensorboard: bool = True  # the controller writes every progress line's scalars to RUN/tb/ (tensorboard --logdir)
    wandb: WandbConfig | None = None  # e.g. {project: my-project}: the same scalars to Weights & Biases too

    def check(self) -> list[tuple[str, str]]:
        return [
            (k, f"must be > 0, got {getattr(self, k)}")
            for k in ("status_interval", "heartbeat_timeout")
            if getattr(self, k) <= 0
        ]


@dataclass(frozen=True)
class Experiment:
    name: str = "experiment"  # default: the file name without .yaml
    # seeds the initial weights and (offset per worker and attempt) every env and sampler; srl-launch --seed sets it
    seed: int = 1
    run_dir: str | None = None  # default: runs/<name>-<timestamp>
    # every socket encrypted and authenticated with the run's CURVE keys; off only to measure its cost on
    # a machine of your own (a Slurm run's ports are reachable from every node, so --slurm refuses it off)
    curve: bool = True
    env: EnvConfig = field(default_factory=EnvConfig)  # the environment the actors and evaluation workers step
    # several policies in one run (a multi-agent env): name -> the agents it acts for, as fnmatch patterns
    # of the env's agent names ({predator: ["adversary_*"], prey: ["agent_*"]}); every agent must match
    # exactly one. Each policy has its own workers.policy.count policy workers, workers.trainer.count
    # trainers, checkpoint and parameter tag (its name). Empty: one policy acts for every agent.
    policies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    opponents: OpponentsConfig = field(default_factory=OpponentsConfig)  # self-play against past versions
    population: PopulationConfig = field(default_factory=PopulationConfig)  # population-based training (PBT)
    model: ModelConfig = field(default_factory=ModelConfig)  # the network that acts and trains
    algorithm: AlgorithmConfig = field(default_factory=PPOConfig)  # what trains it, chosen by algorithm.name
    workers: WorkersConfig = field(default_factory=WorkersConfig)  # how many workers of each kind, and how they run
    stop: StopConfig = field(default_factory=StopConfig)  # when the run ends: the first of the set conditions met
    monitor: MonitorConfig = field(default_factory=MonitorConfig)  # progress output, failure detection, metrics
    slurm: SlurmConfig = field(default_factory=SlurmConfig)  # what srl-launch --slurm asks of Slurm

    def check(self) -> list[tuple[str, str]]:
        problems = []
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            problems.append(
                ("name", f"must be non-empty and use only letters, digits, '-', '_', '.'; got {self.name!r}")
            )
        alg, workers = self.algorithm, self.workers
        if isinstance(alg, PPOConfig):
            if alg.anneal_lr and self.stop.env_frames is None:
                problems.append(("algorithm.anneal_lr", "needs stop.env_frames (the horizon to anneal over)"))
            frames = workers.trainer.batch_segments * workers.actor.segment_length
            if frames < alg.minibatches:
                problems.append(("algorithm.minibatches", f"{alg.minibatches} minibatches of a {frames}-frame batch"))
        if spec(alg).replay and workers.buffer.count < 1:
            problems.append(("workers.buffer.count", f"{alg.name} needs at least one buffer worker (its replay)"))
        if not spec(alg).replay and workers.buffer.count:
            problems.append(("workers.buffer.count", f"{alg.name} is on-policy: segments go to the trainers; set 0"))
        if self.model.separate_critic and spec(alg).head != "actor_critic":
            problems.append(
                (
                    "model.separate_critic",
                    f"{alg.name}'s model has no shared torso to separate a critic from (its head is {spec(alg).head})",
                )
            )
        if self.model.rnn != "none" and not spec(alg).recurrent:
            problems.append(("model.rnn", f"{alg.name} does not train recurrent models (ppo and dqn do)"))
        if self.stop.target_eval_return is not None and workers.eval.count < 1:
            problems.append(("stop.target_eval_return", "needs evaluation workers: set workers.eval.count >= 1"))
        problems += self._check_policies()
        problems += self._check_opponents()
        problems += self._check_population()
        if isinstance(alg, DQNConfig) and workers.actor.segment_length <= alg.n_step:
            problems.append(("workers.actor.segment_length", f"must be > algorithm.n_step ({alg.n_step})"))
        return problems

    def _check_policies(self) -> list[tuple[str, str]]:
        """What named policies support so far: their own policy workers and trainers, on-policy, no evaluation."""
        if not self.policies:
            return []
        problems = [
            (f"policies.{name}", "must list at least one agent pattern")
            for name, patterns in self.policies.items()
            if not patterns
        ]
        problems += [
            (
                f"policies.{name}",
                "a policy's name is its parameter tag and file name: use only letters, digits, '-', '_'",
            )
            for name in self.policies
            if not name or not all(c.isalnum() or c in "-_" for c in name)
        ]
        needs = {
            "workers.placement": (self.workers.placement != "srl", "policy workers of their own: set 'srl'"),
            "workers.buffer.count": (
                spec(self.algorithm).replay,
                f"{self.algorithm.name} replays samples; several policies train on-policy algorithms only (ppo, mappo)",
            ),
            "workers.eval.count": (self.workers.eval.count > 0, "evaluation workers play one policy; set 0"),
            "stop.target_return": (
                self.stop.target_return is not None,
                "one target for several policies' returns is ambiguous: stop by env_frames or wall_time",
            ),
        }
        problems += [(key, f"with policies set: {why}") for key, (bad, why) in needs.items() if bad]
        return problems

    def _check_opponents(self) -> list[tuple[str, str]]:
        """Self-play needs one policy whose past versions are stored and an on-policy algorithm (opponent seats'
        steps are left out of segments, not of a replay); its evaluation workers rate versions, not returns."""
        rule = self.opponents.rule
        if rule == "none":
            return (
                [("opponents.fixed", "fixed players are opponents in self-play: set opponents.rule")]
                if self.opponents.fixed
                else []
            )
        needs = {
            "policies": (bool(self.policies), "one policy plays every seat; leave policies empty"),
            "algorithm.name": (
                spec(self.algorithm).replay,
                f"{self.algorithm.name} replays samples; self-play trains on-policy algorithms (ppo)",
            ),
            "stop.target_eval_return": (
                self.stop.target_eval_return is not None,
                "evaluation workers rate versions (Elo) instead of returning a score",
            ),
            "workers.trainer.snapshot_every": (
                rule != "latest" and not self.workers.trainer.snapshot_every,
                f"rule {rule!r} draws opponents from the stored snapshots: set it >= 1",
            ),
        }
        return [(key, f"with opponents.rule {rule!r}: {why}") for key, (bad, why) in needs.items() if bad]

    def _check_population(self) -> list[tuple[str, str]]:
        """PBT copies one member's PPO weights into another's trainer: one trainer and policy workers of its
        own per member, keys the algorithm reads at every update."""
        population = self.population
        if not population.size:
            return []
        problems = []
        for section in ("init", "explore"):
            for key in getattr(population, section):
                value = getattr(self.algorithm, key, None)
                if isinstance(value, bool) or not isinstance(value, float):
                    problems.append(
                        (
                            f"population.{section}.{key}",
                            f"not a number {self.algorithm.name} has: "
                            f"use keys of the algorithm section such as lr, entropy_coef, clip_coef",
                        )
                    )
        needs = {
            "algorithm.name": (self.algorithm.name != "ppo", "members train with ppo"),
            "policies": (bool(self.policies), "every member is one policy of every agent; leave it empty"),
            "opponents.rule": (self.opponents.rule != "none", "self-play and populations do not mix yet"),
            "workers.placement": (
                self.workers.placement != "srl",
                "members have policy workers of their own: set 'srl'",
            ),
            "workers.trainer.count": (
                self.workers.trainer.count != 1,
                "one trainer per member (a copy replaces its weights between updates)",
            ),
            "workers.eval.count": (self.workers.eval.count > 0, "evaluation workers play one policy; set 0"),
            "algorithm.anneal_lr": (
                getattr(self.algorithm, "anneal_lr", False),
                "explore changes the learning rate itself",
            ),
        }
        problems += [(key, f"with population.size set: {why}") for key, (bad, why) in needs.items() if bad]
        return problems
