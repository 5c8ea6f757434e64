"""Plan (pure): an Experiment becomes one heterogeneous Slurm job, or one job per group (`slurm.layout: jobs`), as data.

The het groups are the graph's (srl_hpc.graph), in task-id order; each takes its resources from the
`slurm` section's field of the same name. Task N of the job's one `srun` hosts worker N of the graph, so
each group is a contiguous range of workers. The nodes of a group are set by its workers per node
(`tasks_per_node`), and its layout (which workers share a node) by
`layout`: Slurm fills the nodes in that order. A worker whose device is cuda gets a GPU of its own on
its node, unless the group says `share_gpu`. The controller rides in the trainer group without CPUs of its
own: the allocation is sized for the trainers, `slurm.controller_mem` is added to the group's memory, and the
group's srun starts one task more than it asked for (--overcommit), which Slurm puts on its first node.
`check_fits` compares a plan with facts about a cluster (from `sinfo`) and names what does not fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from srl_hpc import graph as wiring
from srl_hpc.config import Experiment, parse_size_mb
from srl_hpc.config.slurm import ContainerConfig


class PlanError(ValueError):
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("the job does not fit the cluster:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class HetGroup:
    name: str
    workers: tuple[str, ...]
    partition: str | None
    nodes: int
    cpus_per_task: int
    mem_mb: int  # per node
    gpus_per_node: int
    constraint: str | None
    account: str | None = None
    qos: str | None = None
    sbatch_options: tuple[str, ...] = ()
    overcommit: bool = False  # --overcommit: more tasks than CPUs; Slurm then takes no --ntasks-per-node
    rider: str | None = None  # the controller, first of the group's workers: a task without CPUs of its own

    @property
    def ntasks(self) -> int:
        """The tasks the group's srun starts, the rider included."""
        return len(self.workers)

    @property
    def only_actors(self) -> bool:
        """Every worker of the group is an actor: a run goes on without some of them (workers.actor.min_alive)."""
        return all(w.startswith("actor/") for w in self.workers)

    @property
    def allocated_tasks(self) -> int:
        """The tasks the group's allocation is sized for (sbatch --ntasks): its workers but the rider."""
        return self.ntasks - (self.rider is not None)

    @property
    def tasks_per_node(self) -> int:
        """The most allocated tasks a node of the group holds (the first nodes hold that many)."""
        return math.ceil(self.allocated_tasks / self.nodes)

    @property
    def layout(self) -> list[tuple[str, ...]]:
        """The workers on each node, in node order: every node gets one, then the rest fill the nodes in
        order up to tasks_per_node. That is how Slurm fills an allocation asked for with --nodes, --ntasks
        and --ntasks-per-node as the most per node; srun then places tasks in order (block). The rider is one
        task more than the allocation holds: srun (--overcommit) adds it to the first node."""
        counts = [1] * self.nodes
        rest = self.allocated_tasks - self.nodes
        for k in range(self.nodes):
            extra = min(rest, self.tasks_per_node - 1)
            counts[k] += extra
            rest -= extra
        counts[0] += self.rider is not None
        starts = [sum(counts[:k]) for k in range(self.nodes)]
        return [self.workers[a : a + n] for a, n in zip(starts, counts)]


@dataclass(frozen=True)
class Plan:
    experiment: str
    job_name: str
    run_dir: str
    python: str  # the workers' (slurm.python, else launcher_python)
    launcher_python: str  # the one running srl-launch: with pyxis, the batch script's own steps run on the host
    time: str
    account: str | None
    qos: str | None
    groups: tuple[HetGroup, ...]
    sbatch_options: tuple[str, ...]
    setup: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    requeue: tuple[int, int] | None = None  # (signal_seconds, max_requeues)
    mpi: str = "pmix"
    srun_options: tuple[str, ...] = ()
    node_setup: tuple[str, ...] = ()
    container: ContainerConfig | None = None
    template: str | None = None
    threads_per_core: int | None = None
    layout: str = "hetjob"  # slurm.layout: one het job, or one ordinary job per group ("jobs")

    @property
    def ntasks(self) -> int:
        return sum(g.ntasks for g in self.groups)

    def first_task(self, group: HetGroup) -> int:
        """The task id of the group's first worker: in the jobs layout each group's srun counts its tasks from
        0, and the worker adds this to SLURM_PROCID (`--first-task`)."""
        return sum(g.ntasks for g in self.groups[: self.groups.index(group)])


def make_plan(exp: Experiment, run_dir: str, python: str) -> Plan:
    if not exp.curve:
        raise PlanError(
            [
                "curve: false is for measuring its cost on a machine of your own; on a cluster every "
                "node can reach the run's ports, so a Slurm run keeps its sockets private"
            ]
        )
    s = exp.slurm
    graph = wiring.build(exp)
    groups, problems = [], []
    for name, members in graph.groups():
        res = getattr(s, name)
        rider = wiring.CONTROLLER if members[0].name == wiring.CONTROLLER else None
        placed = len(members) - (rider is not None)
        nodes = max(1, math.ceil(placed / res.tasks_per_node))
        mem_mb = math.ceil(placed / nodes) * parse_size_mb(res.mem_per_task) + (
            parse_size_mb(s.controller_mem) if rider else 0
        )
        group = HetGroup(
            name,
            tuple(w.name for w in members),
            res.partition,
            nodes,
            res.cpus_per_task,
            mem_mb,
            0,
            res.constraint,
            res.account,
            res.qos,
            res.sbatch_options,
            any(o in ("--overcommit", "-O") for o in (*s.sbatch_options, *res.sbatch_options)),
            rider,
        )
        cuda = [[w for w in node if graph.worker(w).device.startswith("cuda")] for node in group.layout]
        most = max(len(c) for c in cuda)
        gpus = most if res.gpus_per_node is None else res.gpus_per_node
        crowded = [(k, c) for k, c in enumerate(cuda) if len(c) > gpus]
        if crowded and not res.share_gpu:
            k, c = crowded[0]
            problems.append(
                f"het group '{name}': node {k + 1} of {nodes} would hold {len(c)} CUDA workers "
                f"({', '.join(c)}) on {gpus} GPU(s) (slurm.{name}.gpus_per_node): they would share "
                f"a GPU. Set slurm.{name}.tasks_per_node to at most {gpus} (more nodes), or "
                f"slurm.{name}.share_gpu: true if they may share"
            )
        groups.append(replace(group, gpus_per_node=gpus))
        threads = getattr(getattr(exp.workers, name), "torch_threads", 1)
        if threads > res.cpus_per_task:
            problems.append(
                f"het group '{name}': workers.{name}.torch_threads is {threads} but "
                f"slurm.{name}.cpus_per_task is {res.cpus_per_task}: where Slurm binds tasks to their "
                f"CPUs the threads would share them; ask for as many CPUs as threads"
            )
    if s.layout == "jobs" and s.requeue:
        problems.append(
            "slurm.requeue needs slurm.layout: hetjob: with slurm.layout: jobs each group is a job of "
            "its own, and one requeued alone would meet none of the others; remove slurm.requeue (resume "
            "with `srl-launch resume RUN`) or set slurm.layout: hetjob"
        )
    if problems:
        raise PlanError(problems)
    return Plan(
        experiment=exp.name,
        job_name=f"srl-{exp.name}",
        run_dir=run_dir,
        python=s.python or python,
        launcher_python=python,
        time=s.time,
        account=s.account,
        qos=s.qos,
        groups=tuple(groups),
        sbatch_options=s.sbatch_options,
        setup=s.setup,
        env=tuple(sorted((str(k), str(v)) for k, v in s.env.items())),
        requeue=(s.requeue.signal_seconds, s.requeue.max_requeues) if s.requeue else None,
        mpi=s.mpi,
        srun_options=s.srun_options,
        node_setup=s.node_setup,
        container=s.container,
        template=s.template,
        threads_per_core=s.threads_per_core,
        layout=s.layout,
    )


# ----------------------------------------------------------------------------------------------- cluster facts


@dataclass(frozen=True)
class Node:
    name: str
    partitions: tuple[str, ...]
    cpus: int
    mem_mb: int
    gpus: int


@dataclass(frozen=True)
class ClusterFacts:
    nodes: tuple[Node, ...]
    default_partition: str | None

    def partition_nodes(self, partition: str | None) -> list[Node]:
        name = partition or self.default_partition
        return [n for n in self.nodes if name in n.partitions]


def parse_sinfo(text: str) -> ClusterFacts:
    """Facts from `sinfo -h -N -o '%N|%P|%c|%m|%G'` (one line per node and partition)."""
    by_node: dict[str, dict] = {}
    default = None
    for line in text.splitlines():
        if not line.strip():
            continue
        name, partition, cpus, mem, gres = line.strip().split("|")
        if partition.endswith("*"):
            partition = default = partition[:-1]
        node = by_node.setdefault(
            name, {"partitions": [], "cpus": int(cpus), "mem": int(mem.rstrip("+")), "gpus": _gpus_in_gres(gres)}
        )
        node["partitions"].append(partition)
    nodes = tuple(Node(n, tuple(v["partitions"]), v["cpus"], v["mem"], v["gpus"]) for n, v in sorted(by_node.items()))
    return ClusterFacts(nodes, default)


def _gpus_in_gres(gres: str) -> int:
    """'gpu:2', 'gpu:a100:4(S:0-1)', 'gpu:2,shard:8' -> GPU count; '(null)' -> 0."""
    total = 0
    for item in gres.split(","):
        fields = item.split("(")[0].split(":")
        if fields[0] == "gpu" and len(fields) >= 2 and fields[-1].isdigit():
            total += int(fields[-1])
    return total


def check_fits(plan: Plan, cluster: ClusterFacts) -> None:
    """Raise PlanError naming each group and resource that no node (or not enough nodes) can provide."""
    problems = []
    used_nodes: set[str] = set()
    for g in plan.groups:
        nodes = cluster.partition_nodes(g.partition)
        label = f"het group '{g.name}' ({g.ntasks} tasks on {g.nodes} node(s))"
        where = f"partition '{g.partition or cluster.default_partition}'"
        if not nodes:
            problems.append(f"{label}: {where} does not exist or has no nodes")
            continue
        used_nodes |= {n.name for n in nodes}
        wants = {
            "CPUs": g.cpus_per_task if g.overcommit else g.tasks_per_node * g.cpus_per_task,
            "MB of memory": g.mem_mb,
            "GPUs": g.gpus_per_node,
        }
        have = {
            "CPUs": max(n.cpus for n in nodes),
            "MB of memory": max(n.mem_mb for n in nodes),
            "GPUs": max(n.gpus for n in nodes),
        }
        for resource, amount in wants.items():
            if amount > have[resource]:
                problems.append(
                    f"{label}: needs {amount} {resource} per node; the largest node in {where} has {have[resource]}"
                )
        big_enough = [
            n
            for n in nodes
            if all(have_n >= wants[r] for r, have_n in (("CPUs", n.cpus), ("MB of memory", n.mem_mb), ("GPUs", n.gpus)))
        ]
        if big_enough and g.nodes > len(big_enough):
            problems.append(f"{label}: needs {g.nodes} nodes; {where} has {len(big_enough)} that fit")
    total = sum(g.nodes for g in plan.groups)
    if not problems and plan.layout == "hetjob" and total > len(used_nodes):  # separate jobs may share nodes
        problems.append(
            f"the het groups need {total} distinct nodes (Slurm gives each group its own); "
            f"their partitions have {len(used_nodes)}"
        )
    if problems:
        raise PlanError(problems)
