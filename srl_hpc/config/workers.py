"""The `workers` section: how many workers of each kind a run has, and each kind's settings (rings, batching,
devices, precision, restarts)."""

from __future__ import annotations

from dataclasses import dataclass, field

from srl_hpc.config.checks import check_counts, check_device, check_non_negative, check_positive
from srl_hpc.config.choices import InferenceTransport, Placement, Precision


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
    # the run goes on without actors lost for good (silent past monitor.heartbeat_timeout and not replaced:
    # their host died or was cut off) while at least this share of its actors remain; 1.0: a lost actor stops
    # the run (checkpoint kept)
    min_alive: float = 0.5

    def check(self) -> list[tuple[str, str]]:
        problems = [
            (k, f"must be >= 1, got {getattr(self, k)}")
            for k in ("count", "ring_size", "inference_splits", "segment_length")
            if getattr(self, k) < 1
        ]
        if self.max_restarts < 0:
            problems.append(("max_restarts", f"must be >= 0, got {self.max_restarts}"))
        if not 0 < self.min_alive <= 1:
            problems.append(("min_alive", f"must be a share in (0, 1], got {self.min_alive}"))
        if not problems and self.ring_size % self.inference_splits:
            problems.append(
                ("inference_splits", f"must divide ring_size ({self.ring_size}), got {self.inference_splits}")
            )
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
    # a policy worker that dies or hangs is replaced on the same ports, at most this many times per worker; its
    # actors send their unanswered requests again, and it answers once it holds the newest published weights
    max_restarts: int = 3

    def check(self) -> list[tuple[str, str]]:
        return (
            check_counts(self, ("max_batch", "torch_threads"))
            + check_device(self.device)
            + check_non_negative(self, ("count", "max_restarts"))
        )


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
    # a lone trainer (count 1) that dies or hangs is replaced on the same ports from the last checkpoint, at most
    # this many times; training since that checkpoint is lost. Trainers in lockstep are not replaced
    max_restarts: int = 3

    def check(self) -> list[tuple[str, str]]:
        problems = check_counts(self, ("count", "batch_segments", "torch_threads", "queue_batches"))
        problems += check_non_negative(self, ("snapshot_every", "keep_untagged", "max_restarts"))
        problems += check_device(self.device)
        if self.checkpoint_interval <= 0:
            problems.append(("checkpoint_interval", f"must be > 0, got {self.checkpoint_interval}"))
        return problems


@dataclass(frozen=True)
class BufferConfig:
    """Replay buffer workers (off-policy algorithms): actors spread their segments over them."""

    count: int = 0  # buffer worker processes: >= 1 for dqn and vdn (at most actor.count), 0 for ppo and mappo
    # a buffer worker that dies or hangs is replaced (on the same ports, with its last saved replay, see
    # algorithm.checkpoint_replay_mb, or an empty one), at most this many times per buffer; once more and the
    # run stops, naming it and why
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
    # a dead or hung evaluation worker is replaced (its next round plays the newest weights; a rating worker
    # reads the games so far from the parameter database), at most this many times per worker
    max_restarts: int = 3

    def check(self) -> list[tuple[str, str]]:
        return (
            check_non_negative(self, ("count", "max_restarts"))
            + check_counts(self, ("episodes",))
            + check_positive(self, ("interval",))
        )


@dataclass(frozen=True)
class ControllerConfig:
    """The controller: one per run, beside the trainers. It saves what it has summed (RUN/controller.json) at each
    progress line, which is what a replacement starts from."""

    # a controller that dies or hangs is replaced on its ports, at most this many times; the workers wait for it
    # up to monitor.heartbeat_timeout. Episodes that ended after its last progress line are not in the
    # replacement's return window or episode count (frame counters are exact: workers report cumulative ones).
    # 0: no supervisor process for it; a lost controller then ends the run (workers stop at heartbeat_timeout)
    max_restarts: int = 3

    def check(self) -> list[tuple[str, str]]:
        return check_non_negative(self, ("max_restarts",))


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
    controller: ControllerConfig = field(default_factory=ControllerConfig)  # the one that watches and stops the run

    def check(self) -> list[tuple[str, str]]:
        if self.parameter_fanout < 2:
            return [("parameter_fanout", f"must be >= 2 (a tree that branches), got {self.parameter_fanout}")]
        for kind in ("actor", "policy", "trainer", "buffer", "eval"):
            if getattr(self, kind).count > MAX_WORKERS_PER_KIND:
                return [
                    (
                        f"{kind}.count",
                        f"{getattr(self, kind).count:,} is more than one job can hold "
                        f"(at most {MAX_WORKERS_PER_KIND:,} per kind)",
                    )
                ]
        if self.placement == "srl" and self.policy.count < 1:
            return [("policy.count", "the srl placement needs at least one policy worker")]
        if self.placement != "srl" and self.policy.count != 0:
            return [
                (
                    "policy.count",
                    f"must be 0 with placement {self.placement!r} (inference runs "
                    f"{'inside the actors' if self.placement == 'impala' else 'on the trainer'})",
                )
            ]
        if self.placement == "seed" and self.policy.device != self.trainer.device:
            return [
                (
                    "policy.device",
                    f"with placement 'seed' inference runs on the trainer's device "
                    f"({self.trainer.device!r}); set the same or leave both",
                )
            ]
        for kind in ("policy", "buffer"):
            if getattr(self, kind).count > self.actor.count:
                return [
                    (
                        f"{kind}.count",
                        f"{getattr(self, kind).count} {kind} workers for {self.actor.count} actor "
                        "workers: some would get nothing",
                    )
                ]
        return []
