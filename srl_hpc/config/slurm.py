"""The experiment's `slurm` section: resources per het group, the job's layout, MPI, network, containers,
accounting, requeue and sweeps: what Slurm is asked for, not how the run trains (schema.py)."""

from __future__ import annotations

import ipaddress
import os
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

from srl_hpc.config.checks import check_counts

ContainerRuntime = Literal["apptainer", "singularity", "pyxis"]


@dataclass(frozen=True)
class SlurmGroupConfig:
    """Resources of one heterogeneous group: every task of the group gets the same."""

    partition: str | None = None  # default: the cluster's default partition
    cpus_per_task: int = 1  # --cpus-per-task of each worker; the plan wants >= its workers.<group>.torch_threads
    mem_per_task: str = "1G"  # Slurm size syntax: 512M, 2G
    tasks_per_node: int = 1  # how many of the group's workers share a node (sets the node count)
    constraint: str | None = None  # --constraint, e.g. a GPU model
    # GPUs asked per node; default: one per CUDA worker the plan puts on the node. Fewer makes workers share
    # a GPU, which the plan refuses unless share_gpu (SRL ran several policy workers on one GPU)
    gpus_per_node: int | None = None
    share_gpu: bool = False  # true: CUDA workers may outnumber a node's GPUs and share them round-robin
    account: str | None = None  # this group's own, instead of slurm.account (e.g. a GPU allocation)
    qos: str | None = None  # this group's own --qos, instead of slurm.qos
    sbatch_options: tuple[str, ...] = ()  # "#SBATCH" options for this group only, e.g. ["--gpus-per-task=1"]

    def check(self) -> list[tuple[str, str]]:
        problems = check_counts(self, ("cpus_per_task", "tasks_per_node"))
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
    partition: str | None = None  # default: the cluster's default partition
    cpus: int = 4  # CPUs of each run (its array task's --cpus-per-task): all of its workers share them
    mem: str = "8G"  # memory of each run, in Slurm size syntax (512M, 2G)
    gpus: int = 0  # GPUs per run's node (0: none); the workers' device settings say which workers use them
    time: str = "01:00:00"  # each run's time limit, in Slurm time syntax (instead of slurm.time)

    def check(self) -> list[tuple[str, str]]:
        problems = check_counts(self, ("cpus",))
        if self.grid and self.sets:
            problems.append(
                (
                    "sets",
                    "a grid and a list of configurations cannot be combined: write the grid's "
                    "points as sets, or the list's keys as a grid",
                )
            )
        problems += [
            (f"grid.{key}", f"must be a list of at least one value, got {values!r}")
            for key, values in self.grid.items()
            if not isinstance(values, list) or not values
        ]
        problems += [
            (f"sets[{i}]", "must map at least one key to its value") for i, one in enumerate(self.sets) if not one
        ]
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
        problems = check_counts(self, ("signal_seconds",))
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
            problems += [
                ("options", f"{option!r} {_CLEAN_ENVIRONMENT[name]}")
                for option in self.options
                if (name := _enabled(option)) in _CLEAN_ENVIRONMENT
            ]
        return problems


def _enabled(option: str) -> str:
    """An option's name ('--cleanenv=true' -> '--cleanenv'); '' for one turned off ('--cleanenv=false')."""
    name, _, value = str(option).partition("=")
    return "" if value.lower() in ("false", "0") else name


_NO_SLURM_VARIABLES = (
    "starts every worker without the SLURM_* and PMI* variables it reads (SLURM_PROCID says "
    "which worker it is; PMIx, its MPI rendezvous), so the run cannot start. Leave it out: "
    "apptainer passes the job's environment on, slurm.env included; --env NAME=VALUE adds one"
)
_CLEAN_ENVIRONMENT = {
    "--cleanenv": _NO_SLURM_VARIABLES,
    "-e": f"(--cleanenv) {_NO_SLURM_VARIABLES}",
    "--containall": f"implies --cleanenv, which {_NO_SLURM_VARIABLES}",
    "-C": f"(--containall) implies --cleanenv, which {_NO_SLURM_VARIABLES}",
}


@dataclass(frozen=True)
class SlurmConfig:
    """How `srl-launch --slurm` asks for resources: per het group (trainer with the controller, policy,
    buffer, actor, eval), and for sweeps."""

    time: str = "01:00:00"  # the job's --time, in Slurm time syntax: 30, 1:00:00, 1-00:00:00 (sweeps: sweep.time)
    account: str | None = None  # --account of every group (unless the group has its own) and of sweeps
    qos: str | None = None  # --qos of every group (unless the group has its own) and of sweeps
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
    threads_per_core: int | None = None
    setup: tuple[str, ...] = ()  # shell lines the batch script runs first: module load, conda activate
    node_setup: tuple[str, ...] = ()  # shell lines run on every node before each worker starts
    env: dict = field(default_factory=dict)  # environment variables for every worker
    # python on the compute nodes (the image's, with a container); default: the one running srl-launch. Several
    # words are a command. With pyxis the batch script's own steps run on the host, with the one running srl-launch
    python: str | None = None
    container: ContainerConfig | None = None  # e.g. {image: train.sif}: run every worker in a container
    # the interface (ib0) or network (10.1.0.0/16) workers bind and advertise on, resolved on each node;
    # default: the address the node's hostname resolves to (refused if loopback)
    network: str | None = None
    ports: str | None = None  # "40000-40999": the ports workers bind (firewalled clusters); default: any free
    # srun --mpi: pmix, pmi2, cray_shasta... (checked against `srun --mpi=list` at submission); "none": the
    # workers meet through files in the run directory instead, and no MPI is loaded
    mpi: str = "pmix"
    # hetjob: one heterogeneous job, one srun over every group; jobs: one ordinary job per group (its own
    # partition, resources, account, qos), submitted and cancelled together, the workers meeting through files
    # (no MPI): for sites without het jobs or het steps (docs/slurm.md, Layouts)
    layout: Literal["hetjob", "jobs"] = "hetjob"
    template: str | None = None  # a job template of your own (job_templates/README.md lists its variables)
    sweep: SweepResources = field(default_factory=SweepResources)  # resources of each run of `--seeds` with --slurm
    requeue: RequeueConfig | None = None  # e.g. {signal_seconds: 120, max_requeues: 3}; off by default

    def check(self) -> list[tuple[str, str]]:
        problems = []
        minutes = parse_minutes(self.time)
        if minutes is None:
            problems.append(("time", f"must be a Slurm time like 30, 1:00:00 or 1-00:00:00, got {self.time!r}"))
        elif self.requeue and self.requeue.signal_seconds >= 60 * minutes:
            problems.append(
                (
                    "requeue.signal_seconds",
                    f"{self.requeue.signal_seconds}s before the end of a {self.time} job leaves no time to run",
                )
            )
        if parse_size_mb(self.controller_mem) is None:
            problems.append(("controller_mem", f"must be a size like 512M or 2G, got {self.controller_mem!r}"))
        sweep_minutes = parse_minutes(self.sweep.time)
        if self.requeue and sweep_minutes is not None and self.requeue.signal_seconds >= 60 * sweep_minutes:
            problems.append(
                (
                    "requeue.signal_seconds",
                    f"{self.requeue.signal_seconds}s before the end of a "
                    f"{self.sweep.time} sweep member leaves no time to run",
                )
            )
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


def parse_ports(ports: str | None) -> tuple[int, int] | None:
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


def parse_size_mb(text: str) -> int | None:
    """'512M' -> 512, '2G' -> 2048, '1T' -> 1048576; a bare number is MB (as in Slurm)."""
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2}
    text = str(text).strip().upper()
    number, unit = (text[:-1], text[-1]) if text and text[-1] in units else (text, "M")
    try:
        value = float(number) * units[unit]
    except ValueError:
        return None
    return int(value) if value > 0 else None


def parse_minutes(text: str) -> float | None:
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
