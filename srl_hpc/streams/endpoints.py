"""Every endpoint name in one place: which worker binds which socket, and how others find its address.

A worker is named "kind/index" (e.g. "actor/3"). At start each worker binds its sockets on free ports,
publishes {worker, host, ports} through rendezvous, and connects to the addresses found here.
"""
from __future__ import annotations

CONTROLLER = "controller/0"

# port names, each bound by exactly one kind of worker
EVENTS = "events"        # controller PULL: heartbeats, stats, failures from every worker
COMMANDS = "commands"    # controller PUB: stop / finish broadcasts
INFERENCE = "inference"  # policy worker ROUTER: inference requests from actors
SAMPLES = "samples"      # trainer PULL: trajectory segments from actors
PARAMETERS = "parameters"  # trainer PUB: versioned weights for policy workers
DDP = "ddp"  # trainer/0's torch.distributed TCPStore, when there are several trainers

# who binds what: controller EVENTS + COMMANDS; trainers SAMPLES, trainer/0 also PARAMETERS (+ DDP with
# several trainers, + INFERENCE in the SEED-style placement); policy worker INFERENCE; actors nothing.


def worker_name(kind: str, index: int) -> str:
    return f"{kind}/{index}"


def parse_worker(name: str) -> tuple[str, int]:
    kind, _, index = name.partition("/")
    return kind, int(index)


def address(table: dict, worker: str, port_name: str) -> str:
    """tcp:// address of `port_name` bound by `worker`, from the rendezvous table."""
    entry = table[worker]
    return f"tcp://{entry['host']}:{entry['ports'][port_name]}"


def workers_of(table: dict, kind: str) -> list[str]:
    return sorted((w for w in table if parse_worker(w)[0] == kind), key=lambda w: parse_worker(w)[1])


def inference_server_for(actor_index: int, workers) -> str:
    """Who answers this actor's inference requests: policy workers spread evenly (SRL placement), or
    the trainer (SEED-style). IMPALA-style actors have no server."""
    if workers.placement == "seed":
        return "trainer/0"
    return worker_name("policy", actor_index % workers.policy.count)


def all_workers(exp) -> list[str]:
    """Every worker of an experiment, in task-id order: controller, trainers, policy workers, actors.

    Task N of a run (a local process, or SLURM_PROCID N of the one srun) hosts worker N of this list;
    the Slurm plan keeps each kind contiguous so het groups map to ranges of it.
    """
    w = exp.workers
    return ([CONTROLLER]
            + [worker_name("trainer", i) for i in range(w.trainer.count)]
            + [worker_name("policy", i) for i in range(w.policy.count)]
            + [worker_name("actor", i) for i in range(w.actor.count)])
