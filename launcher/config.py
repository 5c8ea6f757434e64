"""Experiment files: YAML -> frozen, validated dataclasses.

Every problem in a file is collected and reported together, each naming its key path and YAML line,
before any process starts. Every field below does something; unknown keys are errors.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml


class ConfigError(ValueError):
    """All problems of one experiment file; str() lists one per line as 'FILE:LINE: key.path: message'."""

    def __init__(self, source: str, problems: list[tuple[str, Optional[int], str]]):
        self.source = source
        self.problems = sorted(problems, key=lambda p: (p[1] is None, p[1] or 0))
        lines = [f"{source}:{line if line else '?'}: {path or '<top>'}: {msg}" for path, line, msg in self.problems]
        super().__init__(f"{len(problems)} problem(s) in {source}:\n" + "\n".join(lines))


# ----------------------------------------------------------------------------------------------- schema

@dataclass(frozen=True)
class AtariConfig:
    """The standard Atari pipeline (ale-py): frame skip with max-pooling, grayscale resize, frame stack."""
    frame_skip: int = 4  # a training "frame" count is agent steps x frame_skip
    screen_size: int = 84
    frame_stack: int = 4
    noop_max: int = 30
    terminal_on_life_loss: bool = False

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("frame_skip", "screen_size", "frame_stack"))
        if self.noop_max < 0:
            problems.append(("noop_max", f"must be >= 0, got {self.noop_max}"))
        return problems


@dataclass(frozen=True)
class EnvConfig:
    id: str = "CartPole-v1"  # any gymnasium id; srl_hpc registers its own test envs under "srl_hpc/"
    kwargs: dict = field(default_factory=dict)  # passed to gymnasium.make
    atari: Optional[AtariConfig] = None  # set (even to {}) for ALE/* ids: standard preprocessing
    backend: str = "auto"  # how an actor steps its envs: auto | sync | vector | envpool (srl_hpc/api/env.py)

    def check(self) -> list[tuple[str, str]]:
        if self.backend not in ENV_BACKENDS:
            return [("backend", f"unknown backend {self.backend!r}; choose one of {list(ENV_BACKENDS)}")]
        return []

    @property
    def frames_per_step(self) -> int:
        return self.atari.frame_skip if self.atari else 1


@dataclass(frozen=True)
class PolicyConfig:
    model: str = "mlp"  # "mlp" for vector observations, "nature_cnn" for stacked Atari frames
    hidden_sizes: tuple[int, ...] = (64, 64)  # mlp only

    def check(self) -> list[tuple[str, str]]:
        problems = []
        if self.model not in MODELS:
            problems.append(("model", f"unknown model {self.model!r}; choose one of {sorted(MODELS)}"))
        if not self.hidden_sizes or any(h <= 0 for h in self.hidden_sizes):
            problems.append(("hidden_sizes", "must be a non-empty list of positive integers"))
        return problems


MODELS = ("mlp", "nature_cnn")
ENV_BACKENDS = ("auto", "sync", "vector", "envpool")


@dataclass(frozen=True)
class AlgorithmConfig:
    """PPO (clipped surrogate, GAE); the only algorithm so far."""
    name: str = "ppo"
    gamma: float = 0.99
    gae_lambda: float = 0.95
    lr: float = 2.5e-4
    anneal_lr: bool = False  # linear decay to 0 over stop.env_frames
    clip_coef: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    max_grad_norm: float = 0.5
    epochs: int = 4
    minibatches: int = 4
    normalize_advantages: bool = True
    max_policy_lag: Optional[int] = None  # segments older than this many versions are dropped (counted)

    def check(self) -> list[tuple[str, str]]:
        problems = []
        if self.name != "ppo":
            problems.append(("name", f"unknown algorithm {self.name!r}; choose one of ['ppo']"))
        for key in ("gamma", "gae_lambda"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                problems.append((key, f"must be in [0, 1], got {getattr(self, key)}"))
        for key in ("lr", "clip_coef"):
            if getattr(self, key) <= 0:
                problems.append((key, f"must be > 0, got {getattr(self, key)}"))
        for key in ("value_coef", "entropy_coef", "max_grad_norm"):
            if getattr(self, key) < 0:
                problems.append((key, f"must be >= 0, got {getattr(self, key)}"))
        for key in ("epochs", "minibatches"):
            if getattr(self, key) < 1:
                problems.append((key, f"must be >= 1, got {getattr(self, key)}"))
        if self.max_policy_lag is not None and self.max_policy_lag < 0:
            problems.append(("max_policy_lag", f"must be >= 0, got {self.max_policy_lag}"))
        return problems


@dataclass(frozen=True)
class ActorConfig:
    count: int = 2
    ring_size: int = 8  # environments per actor worker, stepped round-robin
    inference_splits: int = 2  # the ring is cut into this many parts, one inference request each
    segment_length: int = 64  # steps per trajectory segment on the sample stream
    # how observations reach the inference server: "shm" (shared memory, same node only), "zmq" (in the
    # messages), "auto" (shm when the server is on the same node)
    inference_transport: str = "auto"

    def check(self) -> list[tuple[str, str]]:
        problems = [(k, f"must be >= 1, got {getattr(self, k)}")
                    for k in ("count", "ring_size", "inference_splits", "segment_length") if getattr(self, k) < 1]
        if self.inference_transport not in ("auto", "zmq", "shm"):
            problems.append(("inference_transport", f"must be auto, zmq or shm, got {self.inference_transport!r}"))
        if not problems and self.ring_size % self.inference_splits:
            problems.append(("inference_splits", f"must divide ring_size ({self.ring_size}), got {self.inference_splits}"))
        return problems


@dataclass(frozen=True)
class PolicyWorkerConfig:
    """Inference. Policy worker processes in the SRL placement; its settings (but count, which must then
    be 0) also apply to inference inside actors (impala) or on the trainer (seed)."""
    count: int = 1
    max_batch: int = 256  # dynamic batching takes pending requests up to this many observations
    device: str = "cpu"
    torch_threads: int = 1
    precision: str = "fp32"  # "bf16": inference with the weights in bf16 (CPUs with avx512_bf16/AMX, GPUs)

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("max_batch", "torch_threads")) + _check_device(self.device)
        problems += _check_precision(self.precision)
        if self.count < 0:
            problems.append(("count", f"must be >= 0, got {self.count}"))
        return problems


@dataclass(frozen=True)
class TrainerConfig:
    count: int = 1  # several: data-parallel PPO (torch DDP; gloo on CPU, nccl on GPU), in lockstep
    batch_segments: int = 16  # segments per training batch (batch frames = this x actor.segment_length)
    device: str = "cpu"
    torch_threads: int = 1
    prefetch: bool = True  # a thread assembles the next batch while the current one trains
    precision: str = "fp32"  # "bf16": forward passes under bf16 autocast; weights, optimizer and losses stay fp32
    train: bool = True  # false: consume and discard batches (measures sampling alone; weights never change)
    checkpoint_interval: float = 30.0  # seconds between checkpoints; one is always written at stop

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("count", "batch_segments", "torch_threads")) + _check_device(self.device)
        problems += _check_precision(self.precision)
        if self.checkpoint_interval <= 0:
            problems.append(("checkpoint_interval", f"must be > 0, got {self.checkpoint_interval}"))
        return problems


PLACEMENTS = ("srl", "impala", "seed")


@dataclass(frozen=True)
class WorkersConfig:
    # where inference runs: "srl" policy workers of their own; "impala" inside each actor process;
    # "seed" on the trainer's worker and device
    placement: str = "srl"
    actor: ActorConfig = field(default_factory=ActorConfig)
    policy: PolicyWorkerConfig = field(default_factory=PolicyWorkerConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    def check(self) -> list[tuple[str, str]]:
        if self.placement not in PLACEMENTS:
            return [("placement", f"unknown placement {self.placement!r}; choose one of {list(PLACEMENTS)}")]
        if self.placement == "srl" and self.policy.count < 1:
            return [("policy.count", "the srl placement needs at least one policy worker")]
        if self.placement != "srl" and self.policy.count != 0:
            return [("policy.count", f"must be 0 with placement {self.placement!r} (inference runs "
                                     f"{'inside the actors' if self.placement == 'impala' else 'on the trainer'})")]
        if self.placement == "seed" and self.policy.device != self.trainer.device:
            return [("policy.device", f"with placement 'seed' inference runs on the trainer's device "
                                      f"({self.trainer.device!r}); set the same or leave both")]
        if self.policy.count > self.actor.count:
            return [("policy.count", f"{self.policy.count} policy workers for {self.actor.count} actor workers: "
                                     "some would get no requests")]
        return []


@dataclass(frozen=True)
class StopConfig:
    env_frames: Optional[int] = None  # frames stepped by all actors
    wall_time: Optional[float] = None  # seconds
    target_return: Optional[float] = None  # mean return of the last `return_window` episodes
    return_window: int = 20

    def check(self) -> list[tuple[str, str]]:
        problems = []
        if self.env_frames is None and self.wall_time is None and self.target_return is None:
            problems.append(("", "set at least one of env_frames, wall_time, target_return"))
        if self.env_frames is not None and self.env_frames <= 0:
            problems.append(("env_frames", f"must be > 0, got {self.env_frames}"))
        if self.wall_time is not None and self.wall_time <= 0:
            problems.append(("wall_time", f"must be > 0, got {self.wall_time}"))
        if self.return_window < 1:
            problems.append(("return_window", f"must be >= 1, got {self.return_window}"))
        return problems


@dataclass(frozen=True)
class MonitorConfig:
    status_interval: float = 5.0  # seconds between progress lines (and metrics.csv rows)
    heartbeat_timeout: float = 60.0  # a worker silent this long is declared dead and the run stops
    trace: bool = True  # every worker records events to RUN/traces/<worker>.h5 (see srl-trace)

    def check(self) -> list[tuple[str, str]]:
        return [(k, f"must be > 0, got {getattr(self, k)}")
                for k in ("status_interval", "heartbeat_timeout") if getattr(self, k) <= 0]


@dataclass(frozen=True)
class SlurmGroupConfig:
    """Resources of one heterogeneous group: every task of the group gets the same."""
    partition: Optional[str] = None  # default: the cluster's default partition
    cpus_per_task: int = 1
    mem_per_task: str = "1G"  # Slurm size syntax: 512M, 2G
    tasks_per_node: int = 1  # how many of the group's workers share a node (sets the node count)
    constraint: Optional[str] = None  # --constraint, e.g. a GPU model

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("cpus_per_task", "tasks_per_node"))
        if parse_size_mb(self.mem_per_task) is None:
            problems.append(("mem_per_task", f"must be a size like 512M or 2G, got {self.mem_per_task!r}"))
        return problems


@dataclass(frozen=True)
class SweepResources:
    """One node for one whole run of a sweep (submitit job array, each task a local-mode run)."""
    partition: Optional[str] = None
    cpus: int = 4
    mem: str = "8G"
    gpus: int = 0
    time: str = "01:00:00"

    def check(self) -> list[tuple[str, str]]:
        problems = _check_counts(self, ("cpus",))
        if self.gpus < 0:
            problems.append(("gpus", f"must be >= 0, got {self.gpus}"))
        if parse_size_mb(self.mem) is None:
            problems.append(("mem", f"must be a size like 512M or 2G, got {self.mem!r}"))
        if parse_minutes(self.time) is None:
            problems.append(("time", f"must be a Slurm time like 30, 1:00:00 or 1-00:00:00, got {self.time!r}"))
        return problems


@dataclass(frozen=True)
class SlurmConfig:
    """How `srl-launch --slurm` asks for resources. Groups: trainer (with the controller), policy, actor."""
    time: str = "01:00:00"
    account: Optional[str] = None
    qos: Optional[str] = None
    trainer: SlurmGroupConfig = field(default_factory=SlurmGroupConfig)
    policy: SlurmGroupConfig = field(default_factory=SlurmGroupConfig)
    actor: SlurmGroupConfig = field(default_factory=lambda: SlurmGroupConfig(tasks_per_node=8))
    sbatch_options: tuple[str, ...] = ()  # extra "#SBATCH" options for every group, e.g. ["--exclusive"]
    setup: tuple[str, ...] = ()  # shell lines run before the workers start: module load, source venv/bin/activate
    env: dict = field(default_factory=dict)  # environment variables for every worker
    python: Optional[str] = None  # python on the compute nodes; default: the one running srl-launch
    sweep: SweepResources = field(default_factory=SweepResources)

    def check(self) -> list[tuple[str, str]]:
        problems = []
        if parse_minutes(self.time) is None:
            problems.append(("time", f"must be a Slurm time like 30, 1:00:00 or 1-00:00:00, got {self.time!r}"))
        for option in self.sbatch_options:
            if not option.startswith("--"):
                problems.append(("sbatch_options", f"each option must start with '--', got {option!r}"))
        return problems


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
    seed: int = 1
    run_dir: Optional[str] = None  # default: runs/<name>-<timestamp>
    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    workers: WorkersConfig = field(default_factory=WorkersConfig)
    stop: StopConfig = field(default_factory=StopConfig)
    monitor: MonitorConfig = field(default_factory=MonitorConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)

    def check(self) -> list[tuple[str, str]]:
        problems = []
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            problems.append(("name", f"must be non-empty and use only letters, digits, '-', '_', '.'; got {self.name!r}"))
        if self.algorithm.anneal_lr and self.stop.env_frames is None:
            problems.append(("algorithm.anneal_lr", "needs stop.env_frames (the horizon to anneal over)"))
        frames = self.workers.trainer.batch_segments * self.workers.actor.segment_length
        if frames < self.algorithm.minibatches:
            problems.append(("algorithm.minibatches", f"{self.algorithm.minibatches} minibatches of a {frames}-frame batch"))
        return problems


def _check_counts(obj, keys) -> list[tuple[str, str]]:
    return [(k, f"must be >= 1, got {getattr(obj, k)}") for k in keys if getattr(obj, k) < 1]


def _check_precision(precision: str) -> list[tuple[str, str]]:
    if precision not in ("fp32", "bf16"):
        return [("precision", f"unknown precision {precision!r}; choose 'fp32' or 'bf16'")]
    return []


def _check_device(device: str) -> list[tuple[str, str]]:
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and not (kind == "cuda" and index.isdigit())):
        return [("device", f"must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")]
    return []


# ----------------------------------------------------------------------------------------------- loading

def load(path: str | Path) -> Experiment:
    """Read and validate an experiment file; raises ConfigError listing every problem."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(str(path), [("", None, f"cannot read: {e.strerror}")]) from None
    return loads(text, source=str(path))


def loads(text: str, source: str = "<string>") -> Experiment:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise ConfigError(source, [("", mark.line + 1 if mark else None, f"invalid YAML: {getattr(e, 'problem', e)}")]) from None
    problems: list[tuple[str, Optional[int], str]] = []
    if node is None or not isinstance(node, yaml.MappingNode):
        raise ConfigError(source, [("", node.start_mark.line + 1 if node else None, "the file must be a mapping of sections")])
    lines: dict[str, int] = {}
    value = _to_python(node, "", lines, problems)
    if isinstance(value, dict) and "name" not in value and source.endswith((".yaml", ".yml")):
        value["name"] = Path(source).stem
    exp = _build(Experiment, value, "", lines, problems)
    if exp is not None:  # value checks too, so one run reports type and value problems together
        _collect_checks(exp, "", lines, problems)
    if problems:
        raise ConfigError(source, problems)
    return exp


def to_dict(exp: Experiment) -> dict:
    """Plain data (lists, dicts, scalars) for writing the resolved config back as YAML."""
    def plain(v):
        if dataclasses.is_dataclass(v):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return plain(exp)


def dump(exp: Experiment) -> str:
    return yaml.safe_dump(to_dict(exp), sort_keys=False)


def replace(exp: Experiment, **changes) -> Experiment:
    """A copy with top-level fields changed, validated again (e.g. seed or run_dir of one sweep member)."""
    new = dataclasses.replace(exp, **changes)
    problems: list = []
    _collect_checks(new, "", {}, problems)
    if problems:
        raise ConfigError("<replace>", problems)
    return new


def with_overrides(exp: Experiment, assignments: list[str]) -> Experiment:
    """Apply 'key.path=value' assignments (value in YAML syntax), e.g. 'workers.actor.ring_size=16'."""
    data = to_dict(exp)
    for assignment in assignments:
        key, sep, raw = assignment.partition("=")
        if not sep or not key:
            raise ConfigError("--set", [(assignment, None, "expected KEY.PATH=VALUE")])
        node, parts = data, key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError("--set", [(key, None, f"{part!r} is not a section")])
        node[parts[-1]] = yaml.safe_load(raw)
    try:
        return loads(yaml.safe_dump(data, sort_keys=False), source="--set")
    except ConfigError as e:  # lines of the regenerated YAML would mislead: the key path says it all
        raise ConfigError("--set", [(path, None, msg) for path, _, msg in e.problems]) from None


def _to_python(node, path, lines, problems):
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out = {}
        for key_node, value_node in node.value:
            key = key_node.value
            sub = f"{path}.{key}" if path else str(key)
            if key in out:
                problems.append((sub, key_node.start_mark.line + 1, "duplicate key"))
            out[key] = _to_python(value_node, sub, lines, problems)
            lines[sub] = key_node.start_mark.line + 1
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, f"{path}[{i}]", lines, problems) for i, v in enumerate(node.value)]
    return _SCALARS.construct_object(node)


_SCALARS = yaml.SafeLoader("")


def _build(cls, value, path, lines, problems):
    """Construct dataclass `cls` from plain data, recording type problems instead of raising."""
    if not isinstance(value, dict):
        problems.append((path, lines.get(path), f"must be a mapping, got {_kind(value)}"))
        return None
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key in value:
        if key not in names:
            sub = f"{path}.{key}" if path else str(key)
            problems.append((sub, lines.get(sub), f"unknown key; known keys here: {', '.join(sorted(names))}"))
    kwargs = {}
    for f in dataclasses.fields(cls):
        sub = f"{path}.{f.name}" if path else f.name
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                problems.append((sub, lines.get(path), "required key is missing"))
            continue
        converted = _convert(hints[f.name], value[f.name], sub, lines, problems)
        if converted is not _BAD:
            kwargs[f.name] = converted
    try:
        return cls(**kwargs)
    except TypeError:
        return None  # a missing required key, already reported


_BAD = object()


def _convert(tp, value, path, lines, problems):
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _convert(args[0], value, path, lines, problems)
    if dataclasses.is_dataclass(tp):
        built = _build(tp, value, path, lines, problems)
        return _BAD if built is None else built
    if origin is tuple:
        if not isinstance(value, list):
            problems.append((path, lines.get(path), f"must be a list, got {_kind(value)}"))
            return _BAD
        items = [_convert(typing.get_args(tp)[0], v, f"{path}[{i}]", lines, problems) for i, v in enumerate(value)]
        return _BAD if _BAD in items else tuple(items)
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            problems.append((path, lines.get(path), f"must be a mapping, got {_kind(value)}"))
            return _BAD
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, float) and value.is_integer() and abs(value) >= 1e3:
        return int(value)  # 1e6 frames is a natural way to write a count
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        problems.append((path, lines.get(path), f"must be {tp.__name__}, got {_kind(value)} {value!r}"))
        return _BAD
    return value


def _collect_checks(obj, path, lines, problems):
    """Run every nested dataclass's check() and attach the key path and line of each problem."""
    if hasattr(obj, "check"):
        for key, message in obj.check():
            sub = ".".join(p for p in (path, key) if p)
            line = lines.get(sub) or lines.get(sub.rsplit(".", 1)[0] if "." in sub else "") or lines.get(path)
            problems.append((sub, line, message))
    for f in dataclasses.fields(obj):
        child = getattr(obj, f.name)
        if dataclasses.is_dataclass(child):
            _collect_checks(child, f"{path}.{f.name}" if path else f.name, lines, problems)


def _kind(value) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)
