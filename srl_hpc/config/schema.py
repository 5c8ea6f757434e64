"""The experiment schema: frozen dataclasses, one per YAML section. Every field does something.

Choices (precision, backend, transport, placement, algorithm) are `Literal` types: the loader checks a
value against the type itself, so the list of allowed values exists once, here. `algorithm` is one of
several dataclasses, chosen by its `name` key. `check()` methods hold the rules a type cannot say;
the loader (srl_hpc.config.loader) attaches YAML key paths and lines to their problems.
"""
from __future__ import annotations

import importlib.util
import ipaddress
import os
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from srl_hpc.algorithm_spec import spec

Precision = Literal["fp32", "bf16"]
EnvBackend = Literal["auto", "sync", "vector", "envpool"]
InferenceTransport = Literal["auto", "zmq", "shm"]
Placement = Literal["srl", "impala", "seed"]
Recurrence = Literal["none", "gru", "lstm"]
ActionSquash = Literal["clip", "tanh"]
ContainerRuntime = Literal["apptainer", "singularity", "pyxis"]
OpponentRule = Literal["none", "latest", "uniform", "pfsp"]


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
        problems = _check_counts(self, ("frame_skip", "screen_size", "frame_stack"))
        if self.noop_max < 0:
            problems.append(("noop_max", f"must be >= 0, got {self.noop_max}"))
        return problems


@dataclass(frozen=True)
class EnvConfig:
    # any gymnasium id (srl_hpc registers its own under "srl_hpc/"), or "package.module:factory", a callable
    # that takes `kwargs` and returns a gymnasium.Env
    id: str = "CartPole-v1"
    kwargs: dict = field(default_factory=dict)  # passed to gymnasium.make
    atari: Optional[AtariConfig] = None  # set (even to {}) for ALE/* ids: standard preprocessing
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
        problems = _check_counts(self, ("rnn_size",))
        if self.name not in BUILTIN_MODELS and ":" not in self.name:
            problems.append(("name", f"unknown model {self.name!r}; choose one of {list(BUILTIN_MODELS)} "
                                     "or give 'package.module:Class'"))
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            problems.append(("hidden_sizes", "must be a non-empty list of positive integers"))
        if self.kwargs and ":" not in self.name:
            problems.append(("kwargs", "only a user's model (name 'package.module:Class') takes kwargs"))
        if self.separate_critic and ":" in self.name:
            problems.append(("separate_critic", "applies to the built-in models only; "
                                                "a user's model has its own heads"))
        if self.rnn != "none" and ":" in self.name:
            problems.append(("rnn", "applies to the built-in models only"))
        if self.rnn != "none" and self.separate_critic:
            problems.append(("separate_critic", "a recurrent model's value reads its recurrent core: set it false"))
        return problems


BUILTIN_MODELS = ("mlp", "nature_cnn")


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
    max_policy_lag: Optional[int] = None  # segments older than this many versions are dropped (counted)

    def check(self) -> list[tuple[str, str]]:
        problems = _check_unit(self, ("gamma", "gae_lambda")) + _check_positive(self, ("lr", "clip_coef"))
        problems += _check_non_negative(self, ("value_coef", "entropy_coef", "max_grad_norm"))
        problems += _check_counts(self, ("epochs", "minibatches"))
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

    def check(self) -> list[tuple[str, str]]:
        problems = _check_unit(self, ("gamma", "epsilon", "priority_alpha", "priority_beta"))
        problems += _check_positive(self, ("lr", "max_grad_norm", "max_replay_ratio"))
        problems += _check_counts(self, ("n_step", "batch_size", "target_update_interval", "replay_capacity"))
        if self.epsilon_alpha < 0:
            problems.append(("epsilon_alpha", f"must be >= 0, got {self.epsilon_alpha}"))
        if self.learning_starts < self.batch_size:
            problems.append(("learning_starts",
                             f"must be >= batch_size ({self.batch_size}), got {self.learning_starts}"))
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


AlgorithmConfig = Union[PPOConfig, DQNConfig, MAPPOConfig, VDNConfig]  # chosen by `name`; the first is the default


@dataclass(frozen=True)
class ActorConfig:
    count: int = 2  # actor worker processes; the run's envs are count x ring_size
    ring_size: int = 8  # environments per actor worker, stepped round-robin
    inference_splits: int = 2  # the ring is cut into this many parts, one inference request each
    segment_length: int = 64  # steps per trajectory segment on the sample stream
    # how observations reach the inference server: "shm" (shared memory, same node only), "zmq" (in the
    # messages), "auto" (shm when the server is on the same node)
    inference_transport: InferenceTransport = "auto"
    # an actor that dies or hangs (no heartbeat for half of monitor.heartbeat_timeout) is replaced, at most
    # this many times per actor; once more and the run stops (checkpoint kept), naming the actor and why.
    # 0: no supervisor process per actor (half the processes, for runs with hundreds of actors); a lost
    # actor then stops the run when the controller misses its heartbeats (monitor.heartbeat_timeout)
    max_restarts: int = 3

    def check(self) -> list[tuple[str, str]]:
        problems = [(k, f"must be >= 1, got {getattr(self, k)}")
                    for k in ("count", "ring_size", "inference_splits", "segment_length") if getattr(self, k) < 1]
        if self.max_restarts < 0:
            problems.append(("max_restarts", f"must be >= 0, got {self.max_restarts}"))
        if not problems and self.ring_size % self.inference_splits:
            problems.append(("inference_splits",
                             f"must divide ring_size ({self.ring_size}), got {self.inference_splits}"))
        return problems


@dataclass(frozen=True)
class PolicyWorkerConfig:
    """Inference. Policy worker processes in the SRL placement; its settings (but count, which must then
    be 0) also apply to inference inside actors (impala) or on the trainer (seed)."""
    count: int = 1  # policy worker processes (per policy): >= 1 with placement "srl", at most actor.count; else 0
    max_batch: int = 256  # dynamic batching takes pending requests up to this many observations
    # "cpu", "cuda" (each CUDA worker of a node takes its next GPU) or "cuda:N"; impala: the actors' inference;
    # seed: must be trainer.device
    device: str = "cpu"
    torch_threads: int = 1  # torch.set_num_threads where inference runs (impala: each actor); see slurm.policy
    precision: Precision = "fp32"  # "bf16": inference with the weights in bf16 (CPUs with avx512_bf16/AMX, GPUs)

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("max_batch", "torch_threads")) + _check_device(self.device)
        if self.count < 0:
            problems.append(("count", f"must be >= 0, got {self.count}"))
        return problems


@dataclass(frozen=True)
class TrainerConfig:
    count: int = 1  # several: data-parallel training (torch DDP; gloo on CPU, nccl on GPU), in lockstep
    batch_segments: int = 16  # PPO: segments per training batch (batch frames = this x actor.segment_length)
    device: str = "cpu"  # "cpu", "cuda" (each CUDA worker of a node takes its next GPU) or "cuda:N"
    torch_threads: int = 1  # torch.set_num_threads of each trainer; slurm.trainer.cpus_per_task at least this
    prefetch: bool = True  # a thread assembles the next batch while the current one trains
    precision: Precision = "fp32"  # "bf16": forward passes under bf16 autocast; weights, optimizer and losses stay fp32
    train: bool = True  # false: consume and discard batches (measures sampling alone; weights never change)
    checkpoint_interval: float = 30.0  # seconds between checkpoints; one is always written at stop
    # the parameter database (RUN/parameters/): every this-many-th version is stored and tagged snapshot-N,
    # kept until untagged (opponents from the past, a policy's history); 0: no snapshots
    snapshot_every: int = 0
    # versions the database keeps that no tag names (each checkpoint's is tagged latest, the one before it
    # is not), newest first; older untagged ones are removed at each checkpoint
    keep_untagged: int = 2
    # flow control (on-policy): at most this many batches' worth of segments on their way to one trainer,
    # from all actors together; beyond it actors wait for leave to send, so policy lag and the frames in
    # queues stay bounded whatever the number of actors
    queue_batches: int = 2

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("count", "batch_segments", "torch_threads", "queue_batches"))
        problems += _check_non_negative(self, ("snapshot_every", "keep_untagged"))
        problems += _check_device(self.device)
        if self.checkpoint_interval <= 0:
            problems.append(("checkpoint_interval", f"must be > 0, got {self.checkpoint_interval}"))
        return problems


@dataclass(frozen=True)
class BufferConfig:
    """Replay buffer workers (off-policy algorithms): actors spread their segments over them."""
    count: int = 0  # buffer worker processes: >= 1 for dqn and vdn (at most actor.count), 0 for ppo and mappo
    # a buffer worker that dies or hangs is replaced (on the same ports, with an empty replay that the
    # actors refill), at most this many times per buffer; once more and the run stops, naming it and why
    max_restarts: int = 3

    def check(self) -> list[tuple[str, str]]:
        return [(k, f"must be >= 0, got {getattr(self, k)}") for k in ("count", "max_restarts") if getattr(self, k) < 0]


@dataclass(frozen=True)
class EvalConfig:
    """Evaluation workers: whole episodes with the newest published weights, for a score a researcher can
    report (training returns mix policy versions and exploration). With self-play (opponents.rule) they rate
    the stored snapshots instead: `episodes` games against each opponent a round, moves sampled (greedy does
    not apply), Elo in the parameter database and the traces (srl_hpc/handlers/rating.py)."""
    count: int = 0  # evaluation worker processes, each playing its own rounds; 0: no evaluation
    interval: float = 30.0  # seconds from the start of one evaluation round to the start of the next (at least)
    episodes: int = 10  # per round: one episode on each of this many envs, with seeds no actor uses
    # the most likely action (PPO: argmax of the logits; DQN: of the Q values); false: actions as the least
    # exploring actor chooses them (PPO: sampled; DQN: that actor's epsilon)
    greedy: bool = True

    def check(self) -> list[tuple[str, str]]:
        return _check_non_negative(self, ("count",)) + _check_counts(self, ("episodes",)) + \
            _check_positive(self, ("interval",))


MAX_WORKERS_PER_KIND = 100_000  # several times the paper's largest run (15k actor cores)


@dataclass(frozen=True)
class WorkersConfig:
    # where inference runs: "srl" policy workers of their own; "impala" inside each actor process;
    # "seed" on the trainer's worker and device
    placement: Placement = "srl"
    # the most workers any one worker sends each weight version to: with more subscribers (the impala
    # placement's every actor) they pass the weights on to each other in a tree (srl_hpc.graph, relay handlers)
    parameter_fanout: int = 16
    actor: ActorConfig = field(default_factory=ActorConfig)  # actor workers: they step the envs
    policy: PolicyWorkerConfig = field(default_factory=PolicyWorkerConfig)  # inference, wherever it runs
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # trainer workers: they update the model
    buffer: BufferConfig = field(default_factory=BufferConfig)  # replay buffer workers (dqn, vdn)
    eval: EvalConfig = field(default_factory=EvalConfig)  # evaluation workers (none by default)

    def check(self) -> list[tuple[str, str]]:
        if self.parameter_fanout < 2:
            return [("parameter_fanout", f"must be >= 2 (a tree that branches), got {self.parameter_fanout}")]
        for kind in ("actor", "policy", "trainer", "buffer", "eval"):
            if getattr(self, kind).count > MAX_WORKERS_PER_KIND:
                return [(f"{kind}.count", f"{getattr(self, kind).count:,} is more than one job can hold "
                                          f"(at most {MAX_WORKERS_PER_KIND:,} per kind)")]
        if self.placement == "srl" and self.policy.count < 1:
            return [("policy.count", "the srl placement needs at least one policy worker")]
        if self.placement != "srl" and self.policy.count != 0:
            return [("policy.count", f"must be 0 with placement {self.placement!r} (inference runs "
                                     f"{'inside the actors' if self.placement == 'impala' else 'on the trainer'})")]
        if self.placement == "seed" and self.policy.device != self.trainer.device:
            return [("policy.device", f"with placement 'seed' inference runs on the trainer's device "
                                      f"({self.trainer.device!r}); set the same or leave both")]
        for kind in ("policy", "buffer"):
            if getattr(self, kind).count > self.actor.count:
                return [(f"{kind}.count", f"{getattr(self, kind).count} {kind} workers for {self.actor.count} actor "
                                          "workers: some would get nothing")]
        return []


@dataclass(frozen=True)
class OpponentsConfig:
    """Self-play in a game of several seats (a turn-taking game such as srl_hpc.envs.connect_four:connect_four):
    the learner plays one seat of each env with the newest weights, a past version plays the others, and only
    the learner's seat is trained on (srl_hpc/opponents.py)."""
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

        problems = _check_positive(self, ("pfsp_power", "pool"))
        for name, share in self.fixed.items():
            if name not in FIXED_PLAYERS:
                problems.append((f"opponents.fixed.{name}", f"no fixed player {name!r} (players: "
                                 f"{', '.join(FIXED_PLAYERS)})"))
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
    one of its factors (explore). srl_hpc/population.py; the lineage goes to RUN/population/lineage.jsonl."""
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
        problems += _check_positive(self, ("interval",))
        if not 0.0 < self.fraction <= 0.5:
            problems.append(("fraction", f"must be in (0, 0.5] (the worst copy the best), got {self.fraction}"))
        problems += [(f"init.{key}", f"one value per member: {self.size} values, got {len(values)}")
                     for key, values in self.init.items() if len(values) != self.size]
        problems += [(f"explore.{key}", "at least one factor, each > 0")
                     for key, factors in self.explore.items() if not factors or min(factors) <= 0]
        return problems


@dataclass(frozen=True)
class StopConfig:
    env_frames: Optional[int] = None  # frames stepped by all actors
    wall_time: Optional[float] = None  # seconds
    target_return: Optional[float] = None  # mean return of the last `return_window` episodes
    return_window: int = 20  # the training mean return (target_return's, progress lines') is of this many episodes
    target_eval_return: Optional[float] = None  # mean return of an evaluation round (needs workers.eval.count >= 1)

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
    entity: Optional[str] = None  # the W&B user or team that owns the project; default: wandb's own default
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
    wandb: Optional[WandbConfig] = None  # e.g. {project: my-project}: the same scalars to Weights & Biases too

    def check(self) -> list[tuple[str, str]]:
        return [(k, f"must be > 0, got {getattr(self, k)}")
                for k in ("status_interval", "heartbeat_timeout") if getattr(self, k) <= 0]


@dataclass(frozen=True)
class SlurmGroupConfig:
    """Resources of one heterogeneous group: every task of the group gets the same."""
    partition: Optional[str] = None  # default: the cluster's default partition
    cpus_per_task: int = 1  # --cpus-per-task of each worker; the plan wants >= its workers.<group>.torch_threads
    mem_per_task: str = "1G"  # Slurm size syntax: 512M, 2G
    tasks_per_node: int = 1  # how many of the group's workers share a node (sets the node count)
    constraint: Optional[str] = None  # --constraint, e.g. a GPU model
    # GPUs asked per node; default: one per CUDA worker the plan puts on the node. Fewer makes workers share
    # a GPU, which the plan refuses unless share_gpu (SRL ran several policy workers on one GPU)
    gpus_per_node: Optional[int] = None
    share_gpu: bool = False  # true: CUDA workers may outnumber a node's GPUs and share them round-robin
    account: Optional[str] = None  # this group's own, instead of slurm.account (e.g. a GPU allocation)
    qos: Optional[str] = None  # this group's own --qos, instead of slurm.qos
    sbatch_options: tuple[str, ...] = ()  # "#SBATCH" options for this group only, e.g. ["--gpus-per-task=1"]

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("cpus_per_task", "tasks_per_node"))
        if parse_size_mb(self.mem_per_task) is None:
            problems.append(("mem_per_task", f"must be a size like 512M or 2G, got {self.mem_per_task!r}"))
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            problems.append(("gpus_per_node", f"must be >= 0, got {self.gpus_per_node}"))
        return problems + _check_options("sbatch_options", self.sbatch_options)


@dataclass(frozen=True)
class SweepResources:
    """A sweep: its members, as `srl-launch EXP.yaml` runs them here or (--slurm) as a submitit job array
    (the command line's --sweep, --sweep-set and --seeds replace these), and one node for each member's run."""
    # a grid: every combination of these keys' values ({algorithm.lr: [1.0e-3, 3.0e-4]}), each times `seeds`
    grid: dict[str, Any] = field(default_factory=dict)
    # or a list of configurations, each a mapping of keys to values ([{algorithm.lr: 1.0e-3, algorithm.epochs: 8}])
    sets: tuple[dict[str, Any], ...] = ()
    seeds: tuple[int, ...] = ()  # each configuration's seeds; none: the experiment's seed only
    partition: Optional[str] = None  # default: the cluster's default partition
    cpus: int = 4  # CPUs of each run (its array task's --cpus-per-task): all of its workers share them
    mem: str = "8G"  # memory of each run, in Slurm size syntax (512M, 2G)
    gpus: int = 0  # GPUs per run's node (0: none); the workers' device settings say which workers use them
    time: str = "01:00:00"  # each run's time limit, in Slurm time syntax (instead of slurm.time)

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("cpus",))
        if self.grid and self.sets:
            problems.append(("sets", "a grid and a list of configurations cannot be combined: write the grid's "
                                     "points as sets, or the list's keys as a grid"))
        problems += [(f"grid.{key}", f"must be a list of at least one value, got {values!r}")
                     for key, values in self.grid.items() if not isinstance(values, list) or not values]
        problems += [(f"sets[{i}]", "must map at least one key to its value") for i, one in enumerate(self.sets)
                     if not one]
        if len(set(self.seeds)) != len(self.seeds):
            problems.append(("seeds", f"must be distinct, got {list(self.seeds)}"))
        if self.gpus < 0:
            problems.append(("gpus", f"must be >= 0, got {self.gpus}"))
        if parse_size_mb(self.mem) is None:
            problems.append(("mem", f"must be a size like 512M or 2G, got {self.mem!r}"))
        if parse_minutes(self.time) is None:
            problems.append(("time", f"must be a Slurm time like 30, 1:00:00 or 1-00:00:00, got {self.time!r}"))
        return problems


@dataclass(frozen=True)
class RequeueConfig:
    """Long runs on clusters with time limits or preemption: `signal_seconds` before the limit Slurm signals
    the job, the run stops cleanly (the trainer checkpoints) and the job requeues itself, up to
    `max_requeues` times; a requeued job (also one requeued by `scontrol requeue` or preemption) resumes
    the same run directory from the checkpoint."""
    signal_seconds: int = 120  # seconds before the limit; raise it where stopping and checkpointing take longer
    # the job requeues itself at its time limit while it has been requeued (for any cause) fewer times than this
    max_requeues: int = 3

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("signal_seconds",))
        if self.max_requeues < 0:
            problems.append(("max_requeues", f"must be >= 0, got {self.max_requeues}"))
        return problems


@dataclass(frozen=True)
class ContainerConfig:
    """Every worker runs in this image: `apptainer exec` / `singularity exec` before python on each srun
    line (with --nv where the group has GPUs), or pyxis/enroot's `srun --container-image`."""
    image: str  # a .sif file or docker:// URI (apptainer, singularity); an enroot image or registry URI (pyxis)
    runtime: ContainerRuntime = "apptainer"  # the `exec` command before python, or "pyxis": srun's --container-image
    binds: tuple[str, ...] = ()  # "SRC[:DST]"; the run directory is bound by itself
    # more options for `exec` (e.g. ["--writable-tmpfs"]) or, with pyxis, for srun (["--container-writable"]);
    # not --cleanenv or --containall: each worker reads its SLURM_* and PMI* variables
    options: tuple[str, ...] = ()

    def check(self) -> list[tuple[str, str]]:
        problems = [("image", "must not be empty")] if not self.image.strip() else []
        if self.runtime != "pyxis":  # (srun's -e and -C are --error and --constraint)
            problems += [("options", f"{option!r} {_CLEAN_ENVIRONMENT[name]}") for option in self.options
                         if (name := _enabled(option)) in _CLEAN_ENVIRONMENT]
        return problems


def _enabled(option: str) -> str:
    """An option's name ('--cleanenv=true' -> '--cleanenv'); '' for one turned off ('--cleanenv=false')."""
    name, _, value = str(option).partition("=")
    return "" if value.lower() in ("false", "0") else name


_NO_SLURM_VARIABLES = ("starts every worker without the SLURM_* and PMI* variables it reads (SLURM_PROCID says "
                       "which worker it is; PMIx, its MPI rendezvous), so the run cannot start. Leave it out: "
                       "apptainer passes the job's environment on, slurm.env included; --env NAME=VALUE adds one")
_CLEAN_ENVIRONMENT = {"--cleanenv": _NO_SLURM_VARIABLES, "-e": f"(--cleanenv) {_NO_SLURM_VARIABLES}",
                      "--containall": f"implies --cleanenv, which {_NO_SLURM_VARIABLES}",
                      "-C": f"(--containall) implies --cleanenv, which {_NO_SLURM_VARIABLES}"}


@dataclass(frozen=True)
class SlurmConfig:
    """How `srl-launch --slurm` asks for resources: per het group (trainer with the controller, policy,
    buffer, actor, eval), and for sweeps."""
    time: str = "01:00:00"  # the job's --time, in Slurm time syntax: 30, 1:00:00, 1-00:00:00 (sweeps: sweep.time)
    account: Optional[str] = None  # --account of every group (unless the group has its own) and of sweeps
    qos: Optional[str] = None  # --qos of every group (unless the group has its own) and of sweeps
    # one per het group of srl_hpc.graph (a group is a field here):
    trainer: SlurmGroupConfig = field(default_factory=SlurmGroupConfig)  # the trainers and the controller
    # the controller's memory, added to the trainer group's per node; it takes no CPUs of the group's own (it
    # shares its first node's: srun --overcommit), so cpus_per_task and tasks_per_node count the trainers only
    controller_mem: str = "1G"
    policy: SlurmGroupConfig = field(default_factory=SlurmGroupConfig)  # the policy workers
    buffer: SlurmGroupConfig = field(default_factory=SlurmGroupConfig)  # the replay buffer workers
    actor: SlurmGroupConfig = field(default_factory=lambda: SlurmGroupConfig(tasks_per_node=8))  # the actor workers
    eval: SlurmGroupConfig = field(default_factory=SlurmGroupConfig)  # the evaluation workers
    sbatch_options: tuple[str, ...] = ()  # extra "#SBATCH" options for every group, e.g. ["--exclusive"]
    srun_options: tuple[str, ...] = ()  # extra options on every group's srun line, e.g. ["--cpu-bind=cores"]
    # hardware threads a task uses per core, on every group's #SBATCH and srun lines: 1 on nodes with SMT for
    # workers that want whole cores (Slurm counts each thread as a CPU: cpus_per_task 8 is 4 cores of 2 threads)
    threads_per_core: Optional[int] = None
    setup: tuple[str, ...] = ()  # shell lines the batch script runs first: module load, conda activate
    node_setup: tuple[str, ...] = ()  # shell lines run on every node before each worker starts
    env: dict = field(default_factory=dict)  # environment variables for every worker
    # python on the compute nodes (the image's, with a container); default: the one running srl-launch. Several
    # words are a command. With pyxis the batch script's own steps run on the host, with the one running srl-launch
    python: Optional[str] = None
    container: Optional[ContainerConfig] = None  # e.g. {image: train.sif}: run every worker in a container
    # the interface (ib0) or network (10.1.0.0/16) workers bind and advertise on, resolved on each node;
    # default: the address the node's hostname resolves to (refused if loopback)
    network: Optional[str] = None
    ports: Optional[str] = None  # "40000-40999": the ports workers bind (firewalled clusters); default: any free
    # srun --mpi: pmix, pmi2, cray_shasta... (checked against `srun --mpi=list` at submission); "none": the
    # workers meet through files in the run directory instead, and no MPI is loaded
    mpi: str = "pmix"
    # hetjob: one heterogeneous job, one srun over every group; jobs: one ordinary job per group (its own
    # partition, resources, account, qos), submitted and cancelled together, the workers meeting through files
    # (no MPI): for sites without het jobs or het steps (docs/slurm.md, Layouts)
    layout: Literal["hetjob", "jobs"] = "hetjob"
    template: Optional[str] = None  # a job template of your own (job_templates/README.md lists its variables)
    sweep: SweepResources = field(default_factory=SweepResources)  # resources of each run of `--seeds` with --slurm
    requeue: Optional[RequeueConfig] = None  # e.g. {signal_seconds: 120, max_requeues: 3}; off by default

    def check(self) -> list[tuple[str, str]]:
        problems = []
        minutes = parse_minutes(self.time)
        if minutes is None:
            problems.append(("time", f"must be a Slurm time like 30, 1:00:00 or 1-00:00:00, got {self.time!r}"))
        elif self.requeue and self.requeue.signal_seconds >= 60 * minutes:
            problems.append(("requeue.signal_seconds", f"{self.requeue.signal_seconds}s before the end of a "
                                                       f"{self.time} job leaves no time to run"))
        if parse_size_mb(self.controller_mem) is None:
            problems.append(("controller_mem", f"must be a size like 512M or 2G, got {self.controller_mem!r}"))
        sweep_minutes = parse_minutes(self.sweep.time)
        if self.requeue and sweep_minutes is not None and self.requeue.signal_seconds >= 60 * sweep_minutes:
            problems.append(("requeue.signal_seconds", f"{self.requeue.signal_seconds}s before the end of a "
                                                       f"{self.sweep.time} sweep member leaves no time to run"))
        problems += _check_options("sbatch_options", self.sbatch_options)
        problems += _check_options("srun_options", self.srun_options)
        if self.network is not None and "/" in self.network:
            try:
                ipaddress.ip_network(self.network, strict=False)
            except ValueError as e:
                problems.append(("network", f"not a network: {e}"))
        if self.ports is not None:
            try:
                parse_ports(self.ports)
            except ValueError as e:
                problems.append(("ports", str(e)))
        if self.template is not None and not os.path.isfile(os.path.expanduser(self.template)):
            problems.append(("template", f"no such file: {self.template}"))
        if not self.mpi.strip() or any(c.isspace() for c in self.mpi):
            problems.append(("mpi", f"must be one srun MPI plugin name (srun --mpi=list), got {self.mpi!r}"))
        if self.python is not None and not shlex.split(self.python):
            problems.append(("python", "must not be empty"))
        if self.threads_per_core is not None and self.threads_per_core < 1:
            problems.append(("threads_per_core", f"must be >= 1, got {self.threads_per_core}"))
        return problems


def _check_options(key: str, options) -> list[tuple[str, str]]:
    return [(key, f"each option must start with '-', got {o!r}") for o in options if not str(o).startswith("-")]


def parse_ports(ports: Optional[str]) -> Optional[tuple[int, int]]:
    """'40000-40999' -> (40000, 40999); None: any free port."""
    if ports is None:
        return None
    low, _, high = str(ports).partition("-")
    try:
        first, last = int(low), int(high or low)
    except ValueError:
        first, last = 0, -1
    if not 1024 <= first <= last <= 65535 or last - first < 15:
        raise ValueError(f"must be a range 'FIRST-LAST' of at least 16 ports within 1024-65535, got {ports!r}")
    return first, last


def parse_size_mb(text: str) -> Optional[int]:
    """'512M' -> 512, '2G' -> 2048, '1T' -> 1048576; a bare number is MB (as in Slurm)."""
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}
    text = str(text).strip().upper()
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "M")
    try:
        value = float(number) * units[unit]
    except ValueError:
        return None
    return int(value) if value > 0 else None


def parse_minutes(text: str) -> Optional[float]:
    """Slurm time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S -> minutes (None if not one of them)."""
    text = str(text).strip()
    days, has_days, rest = text.partition("-")
    if not has_days:
        days, rest = "0", text
    try:
        d, parts = int(days), [int(p) for p in rest.split(":")]
    except ValueError:
        return None
    if len(parts) > 3 or min([d, *parts]) < 0:
        return None
    if has_days:  # D-H, D-H:M, D-H:M:S
        h, m, s = (parts + [0, 0])[:3]
    else:  # M, M:S, H:M:S
        h, m, s = ([0] + parts + [0])[:3] if len(parts) < 3 else parts
    total = d * 1440 + h * 60 + m + s / 60
    return total if total > 0 else None


@dataclass(frozen=True)
class Experiment:
    name: str = "experiment"  # default: the file name without .yaml
    # seeds the initial weights and (offset per worker and attempt) every env and sampler; srl-launch --seed sets it
    seed: int = 1
    run_dir: Optional[str] = None  # default: runs/<name>-<timestamp>
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
            problems.append(("name", "must be non-empty and use only letters, digits, '-', '_', '.'; "
                                     f"got {self.name!r}"))
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
            problems.append(("model.separate_critic", f"{alg.name}'s model has no shared torso to separate a "
                                                      f"critic from (its head is {spec(alg).head})"))
        if self.model.rnn != "none" and not spec(alg).recurrent:
            problems.append(("model.rnn", f"{alg.name} does not train recurrent models (ppo and dqn do)"))
        if self.stop.target_eval_return is not None and workers.eval.count < 1:
            problems.append(("stop.target_eval_return", "needs evaluation workers: set workers.eval.count >= 1"))
        problems += self._check_policies()
        problems += self._check_opponents()
        problems += self._check_population()
        if isinstance(alg, DQNConfig):
            if workers.actor.segment_length <= alg.n_step:
                problems.append(("workers.actor.segment_length", f"must be > algorithm.n_step ({alg.n_step})"))
        return problems


    def _check_policies(self) -> list[tuple[str, str]]:
        """What named policies support so far: their own policy workers and trainers, on-policy, no evaluation."""
        if not self.policies:
            return []
        problems = [(f"policies.{name}", "must list at least one agent pattern")
                    for name, patterns in self.policies.items() if not patterns]
        problems += [(f"policies.{name}", "a policy's name is its parameter tag and file name: use only letters, "
                                          "digits, '-', '_'") for name in self.policies
                     if not name or not all(c.isalnum() or c in "-_" for c in name)]
        needs = {"workers.placement": (self.workers.placement != "srl", "policy workers of their own: set 'srl'"),
                 "workers.buffer.count": (spec(self.algorithm).replay, f"{self.algorithm.name} replays samples; "
                                          "several policies train on-policy algorithms only (ppo, mappo)"),
                 "workers.eval.count": (self.workers.eval.count > 0, "evaluation workers play one policy; set 0"),
                 "stop.target_return": (self.stop.target_return is not None, "one target for several policies' "
                                        "returns is ambiguous: stop by env_frames or wall_time")}
        problems += [(key, f"with policies set: {why}") for key, (bad, why) in needs.items() if bad]
        return problems


    def _check_opponents(self) -> list[tuple[str, str]]:
        """Self-play needs one policy whose past versions are stored and an on-policy algorithm (opponent seats'
        steps are left out of segments, not of a replay); its evaluation workers rate versions, not returns."""
        rule = self.opponents.rule
        if rule == "none":
            return [("opponents.fixed", "fixed players are opponents in self-play: set opponents.rule")] \
                if self.opponents.fixed else []
        needs = {"policies": (bool(self.policies), "one policy plays every seat; leave policies empty"),
                 "algorithm.name": (spec(self.algorithm).replay, f"{self.algorithm.name} replays samples; "
                                    "self-play trains on-policy algorithms (ppo)"),
                 "stop.target_eval_return": (self.stop.target_eval_return is not None, "evaluation workers "
                                             "rate versions (Elo) instead of returning a score"),
                 "workers.trainer.snapshot_every": (rule != "latest" and not self.workers.trainer.snapshot_every,
                                                    f"rule {rule!r} draws opponents from the stored snapshots: "
                                                    "set it >= 1")}
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
                    problems.append((f"population.{section}.{key}", f"not a number {self.algorithm.name} has: "
                                     f"use keys of the algorithm section such as lr, entropy_coef, clip_coef"))
        needs = {"algorithm.name": (self.algorithm.name != "ppo", "members train with ppo"),
                 "policies": (bool(self.policies), "every member is one policy of every agent; leave it empty"),
                 "opponents.rule": (self.opponents.rule != "none", "self-play and populations do not mix yet"),
                 "workers.placement": (self.workers.placement != "srl", "members have policy workers of their "
                                       "own: set 'srl'"),
                 "workers.trainer.count": (self.workers.trainer.count != 1, "one trainer per member (a copy "
                                           "replaces its weights between updates)"),
                 "workers.eval.count": (self.workers.eval.count > 0, "evaluation workers play one policy; set 0"),
                 "algorithm.anneal_lr": (getattr(self.algorithm, "anneal_lr", False), "explore changes the "
                                         "learning rate itself")}
        problems += [(key, f"with population.size set: {why}") for key, (bad, why) in needs.items() if bad]
        return problems


def _check_counts(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be >= 1, got {getattr(obj, k)}") for k in keys if getattr(obj, k) < 1]


def _check_unit(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be in [0, 1], got {getattr(obj, k)}") for k in keys if not 0.0 <= getattr(obj, k) <= 1.0]


def _check_positive(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be > 0, got {getattr(obj, k)}") for k in keys if getattr(obj, k) <= 0]


def _check_non_negative(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be >= 0, got {getattr(obj, k)}") for k in keys if getattr(obj, k) < 0]


def _check_device(device: str) -> list[tuple[str, str]]:
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not (kind == "cuda" and index.isdigit())):
        return [("device", f"must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")]
    return []


