"""Experiment -> Graph: the workers of a run, the task handlers each hosts, and the streams between them.

This is the one wiring function. Everything else reads the graph: the generic worker builds its
handlers and finds its peers from it, the local launcher starts one process per worker, the Slurm plan
turns its het groups into a job, the controller knows who produces and who drains frames, and
srl-trace knows which activities a worker's trace holds. A placement is a rewrite of which worker
hosts the policy handler:

  srl     policy handlers in policy workers of their own; actors reach them over the inference stream
  impala  a policy handler inside every actor worker (inference stream transport "inline")
  seed    the policy handler inside trainer/0's worker, serving the actors over the inference stream

Several policies (the experiment's `policies`, srl placement) are that graph once per policy, side by side:
each policy's trainers and policy workers carry its name (WorkerNode.policy), its weights go from its first
trainer to its own policy workers, and every actor is a client of one policy worker and every trainer of
each policy (it plays whole envs, all agents of every policy).

A population (population-based training) is that graph once per member (member-0, member-1, ...), actors
included: a member's actors (WorkerNode.policy) act and send segments for it alone. The controller's worker
also hosts the population manager, which reads every member's weights and sends a copying member's trainer
its new weights and hyper-parameters (stream "population").

Pure: no sockets, no torch; `srl-launch graph EXP.yaml` prints it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from srl_hpc.config import Experiment
from srl_hpc.population import pbt

CONTROLLER = "controller/0"
# het groups in task-id order; each group is a field of the experiment's `slurm` section
GROUPS = ("trainer", "policy", "buffer", "actor", "eval")
# kinds whose lost state the run rebuilds by itself: env episodes, requests in flight (their actors send them
# again), training since the last checkpoint (a lone trainer's), a replay (from its last snapshot), evaluation
# rounds (a rating worker's games are in the parameter database)
RESTARTABLE = ("actor", "policy", "trainer", "buffer", "eval", "controller")


def restart_budget(exp, worker: str) -> int | None:
    """How many times `worker` may be replaced; None: it is not supervised (trainers in lockstep, whose process
    group cannot take a stranger in; or a budget of 0, where a supervisor that can never restart it would only
    double the run's processes)."""
    kind = worker.partition("/")[0]
    if kind not in RESTARTABLE or (kind == "trainer" and exp.workers.trainer.count > 1):
        return None
    return getattr(exp.workers, kind).max_restarts or None


@dataclass(frozen=True)
class WorkerNode:
    name: str  # "kind/index", e.g. "actor/3"
    handlers: tuple[str, ...]  # task handler kinds this worker hosts (srl_hpc/handlers), the first runs its loop
    group: str  # the Slurm het group it runs in
    device: str  # "cpu", "cuda" or "cuda:N": what its torch work runs on (GPUs are planned per task)
    policy: str = ""  # with named policies (experiment `policies`): the one a trainer trains or a policy worker serves

    @property
    def kind(self) -> str:
        return self.name.partition("/")[0]

    @property
    def index(self) -> int:
        return int(self.name.partition("/")[2])


@dataclass(frozen=True)
class Stream:
    """One server and its clients. The server binds the stream's port (named after `kind`); clients connect.

    kinds: inference (actor -> policy requests and replies), samples (actor -> trainer segments, or actor ->
    buffer with replay), replay (buffer -> trainer sampled batches), priorities (trainer -> buffer new
    priorities), credits (trainer -> actor leave to send a segment, on-policy flow control), parameters
    (trainer -> policy versioned weights; through relays when there are more than parameter_fanout
    subscribers), control (worker heartbeats up,
    controller commands down). Evaluation workers subscribe to the parameters like policy handlers."""

    kind: str
    server: str
    clients: tuple[str, ...]
    transport: str  # "inline" (same worker), "zmq", or "shm" / "auto" (inference: shared memory on one node)


@dataclass(frozen=True)
class Graph:
    workers: tuple[WorkerNode, ...]  # task-id order: task N of a run hosts workers[N]; groups are contiguous
    streams: tuple[Stream, ...]

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.workers]

    def worker(self, name: str) -> WorkerNode:
        for w in self.workers:
            if w.name == name:
                return w
        raise KeyError(f"no worker {name!r} in this run's graph")

    def groups(self) -> list[tuple[str, list[WorkerNode]]]:
        """(het group, its workers) in task-id order, groups without workers left out."""
        return [
            (g, [w for w in self.workers if w.group == g]) for g in GROUPS if any(w.group == g for w in self.workers)
        ]

    def served_by(self, kind: str, server: str) -> Stream | None:
        """The stream of this kind that `server` binds, if any."""
        return next((s for s in self.streams if s.kind == kind and s.server == server), None)

    def servers_for(self, kind: str, client: str) -> list[Stream]:
        """The streams of this kind that `client` connects to."""
        return [s for s in self.streams if s.kind == kind and client in s.clients]

    def hosts(self, handler: str) -> list[WorkerNode]:
        return [w for w in self.workers if handler in w.handlers]

    def policies(self) -> list[str]:
        """The run's policies in order: their names (or a population's members), or [""] for the one policy of
        every agent."""
        return list(dict.fromkeys(w.policy for w in self.workers if w.kind == "trainer"))

    def acted_for(self, actor: str) -> list[str]:
        """The policies an actor acts for: its member's in a population, else every policy."""
        own = self.worker(actor).policy
        return [own] if own else self.policies()

    def trainers(self, policy: str) -> list[WorkerNode]:
        """A policy's trainers, in rank order; the first publishes its weights and writes its checkpoint."""
        return [w for w in self.workers if w.kind == "trainer" and w.policy == policy]

    def gpu_index(self, name: str, local_id: int | None) -> int:
        """A worker on device "cuda": its index among its node's CUDA workers, the number of them before it
        (srl_hpc.models.devices.pick_gpu turns it into a device its task sees). Under Slurm a het group's tasks fill
        each node in order, so those are among the `local_id` (SLURM_LOCALID) tasks of its group before it;
        in local mode (None) all share one node."""
        position = self.names.index(name)
        before: Sequence[WorkerNode]
        if local_id is None:
            before = self.workers[:position]
        else:
            group = [w for w in self.workers if w.group == self.workers[position].group]
            i = group.index(self.workers[position])
            before = group[max(0, i - local_id) : i]
        return sum(w.device == "cuda" for w in before)

    def drains(self, name: str) -> bool:
        """A worker that consumes a sample stream: at stop it keeps receiving until every frame sent has arrived."""
        return self.served_by("samples", name) is not None


def build(exp: Experiment) -> Graph:
    w = exp.workers
    # several policies: each has workers.trainer.count trainers, policy.count policy workers
    policies = list(exp.policies) or pbt.members(exp.population.size) or [""]
    trainers = {
        p: [f"trainer/{i}" for i in range(k * w.trainer.count, (k + 1) * w.trainer.count)]
        for k, p in enumerate(policies)
    }
    servers = {
        p: [f"policy/{i}" for i in range(k * w.policy.count, (k + 1) * w.policy.count)] for k, p in enumerate(policies)
    }
    buffers = [f"buffer/{i}" for i in range(w.buffer.count)]
    if exp.population.size:  # each member has workers.actor.count actors of its own
        acting = {
            p: [f"actor/{i}" for i in range(k * w.actor.count, (k + 1) * w.actor.count)] for k, p in enumerate(policies)
        }
    else:
        acting = {p: [f"actor/{i}" for i in range(w.actor.count)] for p in policies}
    actors = list(dict.fromkeys(a for p in policies for a in acting[p]))
    member_of = {a: p for p in policies for a in acting[p]} if exp.population.size else {}
    evaluators = [f"eval/{i}" for i in range(w.eval.count)]

    actor_handlers = ("actor", "policy") if w.placement == "impala" else ("actor",)
    trainer0_handlers = ("trainer", "policy") if w.placement == "seed" else ("trainer",)
    controller = ("controller", "population") if exp.population.size else ("controller",)
    workers = [WorkerNode(CONTROLLER, controller, "trainer", "cpu")]
    workers += [
        WorkerNode(t, trainer0_handlers if t == "trainer/0" else ("trainer",), "trainer", w.trainer.device, p)
        for p in policies
        for t in trainers[p]
    ]
    workers += [WorkerNode(s, ("policy",), "policy", w.policy.device, p) for p in policies for s in servers[p]]
    workers += [WorkerNode(b, ("buffer",), "buffer", "cpu") for b in buffers]
    workers += [
        WorkerNode(
            a, actor_handlers, "actor", w.policy.device if w.placement == "impala" else "cpu", member_of.get(a, "")
        )
        for a in actors
    ]
    evaluation = "rating" if exp.opponents.rule != "none" else "eval"  # self-play: versions rated against each other
    workers += [WorkerNode(e, (evaluation,), "eval", "cpu") for e in evaluators]

    streams = []
    for p in policies:  # an actor acts for every policy (a member's for its own): one of its servers each
        if w.placement == "srl":  # actors spread evenly over the policy workers
            streams += [
                Stream(
                    "inference",
                    s,
                    tuple(a for i, a in enumerate(acting[p]) if i % len(servers[p]) == k),
                    w.actor.inference_transport,
                )
                for k, s in enumerate(servers[p])
            ]
        elif w.placement == "seed":
            streams.append(Stream("inference", trainers[p][0], tuple(acting[p]), w.actor.inference_transport))
        else:
            streams += [Stream("inference", a, (a,), "inline") for a in acting[p]]
    if buffers:  # off-policy: actors spread over the buffers; every buffer feeds every trainer
        every = trainers[""]
        streams += [
            Stream("samples", b, tuple(a for i, a in enumerate(actors) if i % len(buffers) == k), "zmq")
            for k, b in enumerate(buffers)
        ]
        streams += [Stream("replay", t, tuple(buffers), "zmq") for t in every]
        streams += [Stream("priorities", b, tuple(every), "zmq") for b in buffers]
    else:  # any actor to any of a policy's trainers, each segment with the leave of the trainer it goes to
        streams += [Stream("samples", t, tuple(acting[p]), "zmq") for p in policies for t in trainers[p]]
        streams += [Stream("credits", t, tuple(acting[p]), "zmq") for p in policies for t in trainers[p]]
    relays = set()
    for p in policies:
        root = trainers[p][0]
        subscribers = tuple(n.name for n in workers if "policy" in n.handlers and n.policy == p)
        if w.placement == "seed":  # trainer/0's own policy handler reads the weights in-process
            streams.append(Stream("parameters", root, subscribers, "inline"))
            subscribers = ()
        tree = parameter_tree(root, subscribers, w.parameter_fanout)
        readers = tuple(evaluators) if evaluation == "eval" else ()  # (raters read stored versions instead)
        readers += (CONTROLLER,) if exp.population.size else ()  # the population manager copies members' weights
        if tree[0][1] or readers:  # evaluators (a few) take the weights from trainer/0 itself
            streams.append(Stream("parameters", root, tree[0][1] + readers, "zmq"))
        streams += [Stream("parameters", relay, children, "zmq") for relay, children in tree[1:]]
        relays |= {relay for relay, _ in tree[1:]}
    if exp.population.size:  # the manager sends a copying member's trainer its new weights and hyper-parameters
        streams += [Stream("population", trainers[p][0], (CONTROLLER,), "zmq") for p in policies]
    workers = [replace(n, handlers=n.handlers + ("relay",)) if n.name in relays else n for n in workers]
    streams.append(Stream("control", CONTROLLER, tuple(n.name for n in workers[1:]), "zmq"))
    return Graph(tuple(workers), tuple(streams))


def parameter_tree(root: str, subscribers: tuple[str, ...], fanout: int) -> list[tuple[str, tuple[str, ...]]]:
    """(sender, receivers) of each weight version, root first, so that no sender has more than `fanout`
    receivers: the root sends to the first `fanout` subscribers, subscriber k to subscribers
    (k+1)*fanout .. (k+2)*fanout-1. Depth grows as log(N) while what the root sends stays bounded."""
    tree = [(root, subscribers[:fanout])]
    for k, relay in enumerate(subscribers):
        children = subscribers[(k + 1) * fanout : (k + 2) * fanout]
        if not children:
            break
        tree.append((relay, children))
    return tree


def describe(graph: Graph) -> str:
    """The graph as text: workers by het group with their handlers, then each stream."""
    lines = ["workers (task id, name, handlers, device), by het group:"]
    task = 0
    for group, members in graph.groups():
        lines.append(f"  group {group}:")
        for node in members:
            policy = f"  policy {node.policy}" if node.policy else ""
            lines.append(f"    {task:>4}  {node.name:<14} {'+'.join(node.handlers):<18} {node.device}{policy}")
            task += 1
    lines.append("streams (kind: server <- clients [transport]):")
    for s in graph.streams:
        lines.append(f"  {s.kind:<10} {s.server:<14} <- {', '.join(compact(s.clients)) or '-'} [{s.transport}]")
    return "\n".join(lines)


def compact(names) -> list[str]:
    """('actor/0', 'actor/1', 'actor/2', 'policy/0') -> ['actor/0-2', 'policy/0'] for readable listings."""
    out: list[str]
    runs: list[list[str | int]]
    out, runs = [], []
    for name in names:
        kind, _, index = name.partition("/")
        if runs and runs[-1][0] == kind and runs[-1][2] == int(index) - 1:
            runs[-1][2] = int(index)
        else:
            runs.append([kind, int(index), int(index)])
    for kind, lo, hi in runs:
        out.append(f"{kind}/{lo}" if lo == hi else f"{kind}/{lo}-{hi}")
    return out
