"""`python -m srl_hpc.probe`: one task of `srl-launch doctor --probe`'s job, started by the very srun line a
worker of the experiment would be (same het group, CPUs, memory, container, node setup, environment), with
the worker's own arguments (with `slurm.layout: jobs`, its group's job's srun line and `--first-task`).
Instead of working it measures what the worker would meet on its node and writes it as JSON into the probe's
directory, where the launcher judges it (launcher/probe.py).

Why a job of its own: what a login node sees (its interfaces, limits, GPUs) is not what a task inside the
allocation sees; binding, limits propagation, GPU visibility and the network between het groups are only
known there.

Each task, in order (a phase that fails is recorded and the next ones still run):
  1. its facts: node, the address `slurm.network` picks (srl_hpc.services.network.resolve), the CPUs it is
     bound to, the GPUs it sees (and torch's UUIDs for them where torch sees CUDA), its open-files limits
     against what its worker would need (srl_hpc.services.limits) -> PROBE/probe/facts/<worker>.json;
  2. a ZMQ REP socket bound as a worker binds (its address, slurm.ports, the run's CURVE keys), then the
     workers' file rendezvous (FileBarrier + FileRendezvous, as under `slurm.mpi: none`);
  3. the first task of each group sends a request to every task of every other group and times the replies;
  4. the trainers of each policy join a gloo group through their first trainer's TCPStore (as the
     trainers' DDP does) and all-reduce; NCCL too where each of them sees a GPU of its own;
  5. once every group's pings are done (the REP sockets stay up until then): the results so far ->
     PROBE/probe/results/<worker>.json;
  6. with `--rendezvous mpi`: the workers' MPI rendezvous (MPI_Init and an allgather across every task of
     every group, as MpiRendezvous does), bounded in time, then the results again.
The first task writes summary.json at the end: the job script's srun guard then ends an srun that hangs
after the step (srl_hpc/srun_guard.py), and each group's watch of the jobs layout stops, as for a run.
"""
from __future__ import annotations

import argparse
import datetime
import faulthandler
import json
import os
import platform
import queue
import resource
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import zmq

from srl_hpc import config, graph as wiring
from srl_hpc.rundir import RunDir, file_stem, redirect_output, task_id_of
from srl_hpc.services import limits, network
from srl_hpc.services.rendezvous import FileBarrier, FileRendezvous, MpiRendezvous
from srl_hpc.streams import endpoints
from srl_hpc.streams.security import PrivateContext

PORT = "probe"  # the REP socket's entry in the rendezvous table's ports
BARRIER_TIMEOUT = 120.0  # seconds without a new arrival: the tasks start together under one srun
PING_TIMEOUT = 5.0  # seconds a task has to answer a ping
PING_BATCH = 256  # requests in flight at once from one pinger
SERVE_TIMEOUT = 180.0  # the longest a task keeps answering while pingers are still at work
COLLECTIVE_TIMEOUT = 60.0  # seconds for the trainers to form a group and all-reduce
MPI_BOUND = 90.0  # MPI_Init waits for every rank without a timeout of its own: past this the task exits
FINISH_TIMEOUT = 60.0  # how long the first task waits for the others' last results before summary.json
# what says which GPUs a task sees (the same as srl_hpc.models.GPU_VARIABLES, which imports torch)
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


@dataclass(frozen=True)
class ProbeDir:
    """Where a probe job's tasks write, under its run directory (PROBE/probe/...)."""
    root: Path

    @property
    def base(self) -> Path:
        return Path(self.root) / "probe"

    def facts(self, worker: str) -> Path:
        return self.base / "facts" / f"{file_stem(worker)}.json"

    def results(self, worker: str) -> Path:
        return self.base / "results" / f"{file_stem(worker)}.json"

    def pinged(self, group: str) -> Path:
        """Written by a group's pinger when it has pinged every other group: the others may stop answering."""
        return self.base / "pinged" / group

    @property
    def done(self) -> Path:
        """One empty file per task that has ended every phase (the launcher lists it, not N results files)."""
        return self.base / "done"

    @property
    def mpi_run(self) -> RunDir:
        """A run directory of its own for the MPI rendezvous' barrier (the file rendezvous used RUN's)."""
        return RunDir(self.base / "mpi")


def collect(root: Path, names: list[str]) -> dict:
    """What the tasks wrote: {"facts": {worker: ...}, "results": {worker: ...}} for the workers that wrote."""
    where = ProbeDir(Path(root))
    found: dict[str, dict] = {"facts": {}, "results": {}}
    for kind, path_of in (("facts", where.facts), ("results", where.results)):
        for name in names:
            try:
                found[kind][name] = json.loads(path_of(name).read_text())
            except (OSError, ValueError):
                continue
    return found


def write_json(path: Path, data: dict) -> None:
    """Atomically: the launcher may read while a task writes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()


# ------------------------------------------------------------------------------------------------ facts

def gpu_facts(want_torch: bool) -> dict:
    """The GPU variables this task has, and torch's view where it is wanted (trainers, CUDA workers, tasks
    that were given GPUs): whether it sees CUDA, and each visible device's name and UUID."""
    found: dict = {"env": {v: os.environ.get(v) for v in GPU_VARIABLES}, "torch": None}
    if not want_torch:
        return found
    try:
        import torch
    except Exception as e:  # noqa: BLE001  any import failure is a finding
        found["torch"] = {"error": f"torch does not import: {error_text(e)}"}
        return found
    view: dict = {"version": torch.__version__, "cuda_build": torch.version.cuda, "devices": []}
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                view["devices"].append({"index": i, "name": props.name, "uuid": str(props.uuid)})
        else:
            try:
                torch.cuda.init()
            except (AssertionError, RuntimeError) as e:  # torch's reason: no CUDA build, no driver, no GPU
                view["why_none"] = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    except Exception as e:  # noqa: BLE001
        view["error"] = error_text(e)
    found["torch"] = view
    return found


def gpu_pick(exp, graph: wiring.Graph, name: str, gpus: dict) -> dict | None:
    """For a worker on device cuda: which visible GPU it would take (srl_hpc.models.pick_gpu) and that GPU's
    identity, its UUID where torch sees it (else the node's GPU number Slurm gave); None for a CPU worker."""
    node = graph.worker(name)
    if not node.device.startswith("cuda"):
        return None
    view = gpus.get("torch") or {}
    devices = view.get("devices", [])
    if node.device != "cuda":  # "cuda:N": taken as named
        index = int(node.device.partition(":")[2])
    else:
        from srl_hpc.models import pick_gpu  # (imports torch: only CUDA workers get here)
        local_id = int(os.environ.get("SLURM_LOCALID", "0"))
        share = getattr(exp.slurm, node.group).share_gpu
        try:
            index = pick_gpu(name, graph.gpu_index(name, local_id), len(devices), share, os.environ,
                             view.get("why_none", view.get("error", "")))
        except RuntimeError as e:
            return {"error": str(e)}
    if index >= len(devices):
        return {"index": index, "error": f"{name} is on device {node.device}, but its task sees {len(devices)} GPU(s)"}
    return {"index": index, "uuid": devices[index]["uuid"], "name": devices[index]["name"]}


def measure(exp, graph: wiring.Graph, name: str) -> dict:
    """Everything phase 1 records about this task, and the address (None when it could not be chosen)."""
    node = graph.worker(name)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    gpus_given = any(os.environ.get(v) for v in GPU_VARIABLES)
    is_trainer = node.kind == "trainer"
    facts = {
        "worker": name, "group": node.group, "kind": node.kind, "device": node.device,
        "task": int(os.environ.get("SLURM_PROCID", "-1")), "local_id": int(os.environ.get("SLURM_LOCALID", "-1")),
        "node": os.environ.get("SLURMD_NODENAME", platform.node()), "hostname": socket.gethostname(),
        "pid": os.getpid(), "python": sys.executable, "python_version": platform.python_version(),
        "cpus": sorted(os.sched_getaffinity(0)), "node_cpus": os.cpu_count(),
        "nofile": {"soft": None if soft == unlimited else soft, "hard": None if hard == unlimited else hard,
                   "needed": limits.descriptors_needed(graph, name), "workers": len(graph.names)},
        "address": None, "address_error": None,
    }
    try:
        address = network.resolve(exp.slurm.network)
        facts["address"] = {"ip": address.ip, "interface": address.interface, "source": address.source,
                            "loopback": address.loopback}
    except network.NetworkError as e:
        facts["address_error"] = str(e)
    facts["gpus"] = gpu_facts(want_torch=gpus_given or is_trainer or node.device.startswith("cuda"))
    facts["gpu_pick"] = gpu_pick(exp, graph, name, facts["gpus"])
    return facts


# ---------------------------------------------------------------------------------------------- ZMQ pings

class Responder(threading.Thread):
    """The task's REP socket, in a thread of its own (it owns the socket): answers every request with the
    task's worker name until stopped."""

    def __init__(self, ctx: zmq.Context, name: str):
        super().__init__(name="probe-rep", daemon=True)
        self.ctx, self.me = ctx, name
        self.stop = threading.Event()
        self.port: queue.Queue = queue.Queue()
        self.answered = 0

    def run(self) -> None:
        sock = self.ctx.socket(zmq.REP)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            self.port.put(endpoints.bind(sock))
        except Exception as e:  # noqa: BLE001  reported by the main thread
            self.port.put(e)
            sock.close()
            return
        while not self.stop.is_set():
            if sock.poll(100):
                sock.recv()
                sock.send_string(self.me)
                self.answered += 1
        sock.close()


def ping_all(ctx: zmq.Context, table: dict, targets: list[str], timeout: float = PING_TIMEOUT) -> dict:
    """One request to each target's REP (at most PING_BATCH in flight): {target: {"ms": round trip}} or
    {target: {"error": why}}."""
    out: dict[str, dict] = {}
    for start in range(0, len(targets), PING_BATCH):
        pending: dict[zmq.Socket, tuple[str, float]] = {}
        poller = zmq.Poller()
        for target in targets[start:start + PING_BATCH]:
            entry = table.get(target, {})
            if PORT not in entry.get("ports", {}):
                out[target] = {"error": "it has no address (its own lines say why)"}
                continue
            sock = ctx.socket(zmq.REQ)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoints.address(table, target, PORT))
            pending[sock] = (target, time.monotonic())
            sock.send_string(target)
            poller.register(sock, zmq.POLLIN)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for sock, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                target, sent = pending.pop(sock)
                reply = sock.recv_string()
                out[target] = {"ms": (time.monotonic() - sent) * 1000} if reply == target else \
                    {"error": f"answered as {reply!r}"}
                poller.unregister(sock)
                sock.close()
        for sock, (target, _) in pending.items():
            out[target] = {"error": f"no reply within {timeout:g} s from {endpoints.address(table, target, PORT)}"}
            sock.close()
    return out


# ------------------------------------------------------------------------------------------ collectives

def all_reduce(graph: wiring.Graph, name: str, table: dict, store=None) -> dict:
    """This trainer's part in its policy's gloo all-reduce (and NCCL where every trainer of the policy sees a
    GPU): ranks are the policy's trainers in order, the first serves the TCPStore (`store`, bound before the
    rendezvous). Returns {"gloo": {...}, "nccl": {...} or None}."""
    import torch
    import torch.distributed as dist

    from srl_hpc.handlers.lockstep import ddp_backend

    peers = [w.name for w in graph.trainers(graph.worker(name).policy)]
    rank, size = peers.index(name), len(peers)
    out: dict = {"peers": peers, "rank": rank, "gloo": None, "nccl": None}
    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT)
    started = time.monotonic()
    try:
        if store is None:
            leader = table[peers[0]]
            if "ddp" not in leader.get("ports", {}):
                raise RuntimeError(f"{peers[0]} serves no store (its own lines say why)")
            store = dist.TCPStore(leader["host"], leader["ports"]["ddp"], None, False, timeout=timeout)
        dist.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=timeout)
        value = torch.tensor([float(rank + 1)])
        dist.all_reduce(value)
        expected = size * (size + 1) / 2
        out["gloo"] = {"seconds": time.monotonic() - started, "sum": value.item(), "expected": expected}
        if value.item() != expected:
            out["gloo"]["error"] = f"the sum is {value.item():g}, not {expected:g}"
    except Exception as e:  # noqa: BLE001
        out["gloo"] = {"error": error_text(e), "seconds": time.monotonic() - started}
        return out
    try:
        gpus = [table[p].get("gpu") for p in peers]
        if all(gpus):
            out["nccl"] = nccl_all_reduce(dist, torch, table[name]["gpu_index"], rank, size, ddp_backend(gpus), gpus)
    finally:
        dist.destroy_process_group()
    return out


def nccl_all_reduce(dist, torch, index: int, rank: int, size: int, backend: str, gpus: list[str]) -> dict:
    """NCCL across the policy's trainers, each on the GPU its worker would take; where two share one GPU,
    NCCL cannot run (two ranks on one device) and the trainers' DDP falls back to gloo: said, not tried."""
    if backend != "nccl":
        return {"skipped": f"trainers share a GPU ({', '.join(gpus)}): NCCL refuses two ranks on one device, and "
                           f"their DDP falls back to gloo"}
    started = time.monotonic()
    try:
        torch.cuda.set_device(index)
        group = dist.new_group(backend="nccl")
        value = torch.full((1,), float(rank + 1), device=f"cuda:{index}")
        dist.all_reduce(value, group=group)
        torch.cuda.synchronize()
        expected = size * (size + 1) / 2
        found = {"seconds": time.monotonic() - started, "sum": value.item(), "expected": expected}
        if value.item() != expected:
            found["error"] = f"the sum is {value.item():g}, not {expected:g}"
        return found
    except Exception as e:  # noqa: BLE001
        return {"error": error_text(e), "seconds": time.monotonic() - started}


# --------------------------------------------------------------------------------------------- the task

def wait_for(paths: list[Path], timeout: float) -> list[Path]:
    """Until every path exists (or `timeout` seconds): the ones still missing."""
    deadline = time.monotonic() + timeout
    while True:
        missing = [p for p in paths if not p.exists()]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(0.2)


def probe(exp, graph: wiring.Graph, name: str, run_dir: Path, mpi: bool) -> None:
    where = ProbeDir(run_dir)
    run = RunDir(run_dir)
    facts = measure(exp, graph, name)
    write_json(where.facts(name), facts)
    print(f"facts: {json.dumps(facts)}", flush=True)
    results: dict = {"worker": name, "rendezvous": None, "pings": None, "collective": None, "mpi": None}
    node = graph.worker(name)
    groups = [g for g, _ in graph.groups()]
    pinger = next(w.name for w in graph.workers if w.group == node.group) == name

    ctx = PrivateContext(run) if exp.curve else zmq.Context()
    responder, store = None, None
    entry: dict = {"worker": name, "host": None, "node": facts["node"], "ports": {},
                   "gpu": None, "gpu_index": None}
    if facts["address"] is not None:
        address = network.Address(facts["address"]["ip"], facts["address"]["interface"], facts["address"]["source"])
        os.environ.update(network.library_environment(address))  # gloo and NCCL on the chosen interface
        endpoints.configure(address.ip, config.parse_ports(exp.slurm.ports))
        entry["host"] = address.ip
        responder = Responder(ctx, name)
        responder.start()
        bound = responder.port.get(timeout=30)
        if isinstance(bound, Exception):
            results["bind_error"] = error_text(bound)
        else:
            entry["ports"][PORT] = bound
    pick = facts["gpu_pick"] or {}
    if pick.get("uuid"):
        entry["gpu"], entry["gpu_index"] = f"{facts['node']}/{pick['uuid']}", pick["index"]
    trainers = graph.trainers(node.policy) if node.kind == "trainer" else []
    if trainers and trainers[0].name == name and entry["host"] is not None:
        try:
            from srl_hpc.handlers.lockstep import _serve_store  # the trainers' own store, on slurm.ports

            store = _serve_store()
            entry["ports"]["ddp"] = store.port
        except Exception as e:  # noqa: BLE001
            results["store_error"] = error_text(e)

    table = None
    started = time.monotonic()
    try:
        barrier = FileBarrier(run, graph.names, name, timeout=BARRIER_TIMEOUT)
        table = FileRendezvous(run, len(graph.names), barrier=barrier).exchange(entry, graph.names)
        results["rendezvous"] = {"seconds": time.monotonic() - started}
    except Exception as e:  # noqa: BLE001
        results["rendezvous"] = {"error": error_text(e), "seconds": time.monotonic() - started}

    if table is not None:
        if pinger:
            others = [w.name for w in graph.workers if w.group != node.group]
            results["pings"] = ping_all(ctx, table, others)
            where.pinged(node.group).parent.mkdir(parents=True, exist_ok=True)
            where.pinged(node.group).touch()
        if trainers:
            try:
                results["collective"] = all_reduce(graph, name, table, store)
            except Exception as e:  # noqa: BLE001
                results["collective"] = {"gloo": {"error": error_text(e)}, "nccl": None}
        missing = wait_for([where.pinged(g) for g in groups], SERVE_TIMEOUT)
        if missing:
            results["pingers_missing"] = [p.name for p in missing]
    if responder is not None:
        results["answered"] = responder.answered
        responder.stop.set()
        responder.join(timeout=5)
    ctx.destroy(linger=0)
    write_json(where.results(name), results)

    if mpi and table is None:  # a task that never came would hold MPI_Init's fence until MPI_BOUND
        results["mpi"] = {"state": "failed", "error": "not tried: the file rendezvous before it failed"}
        write_json(where.results(name), results)
    elif mpi:
        results["mpi"] = {"state": "started"}
        write_json(where.results(name), results)
        results["mpi"] = mpi_rendezvous(where, graph, name, facts["node"])
        write_json(where.results(name), results)
    where.done.mkdir(parents=True, exist_ok=True)
    (where.done / file_stem(name)).touch()
    if name == graph.names[0]:  # the srun guard's cue (srl_hpc/srun_guard.py)
        wait_for([where.results(n) for n in graph.names], FINISH_TIMEOUT)
        write_json(run.summary, {"status": "succeeded", "probe": True})


def mpi_rendezvous(where: ProbeDir, graph: wiring.Graph, name: str, node: str) -> dict:
    """The workers' MPI rendezvous (MpiRendezvous: MPI_Init, a file barrier, one allgather, MPI_Finalize).
    MPI_Init has no timeout of its own: past MPI_BOUND seconds this process dumps its stack to its log and
    exits, and the launcher finds this phase "started" and never ended."""
    faulthandler.dump_traceback_later(MPI_BOUND, exit=True)
    started = time.monotonic()
    try:
        barrier = FileBarrier(where.mpi_run, graph.names, name, timeout=BARRIER_TIMEOUT)
        rendezvous = MpiRendezvous(barrier)
        from mpi4py import MPI

        library = MPI.Get_library_version().strip("\0 \n").splitlines()[0].strip()
        table = rendezvous.exchange({"worker": name, "node": node}, graph.names)
        return {"state": "done", "seconds": time.monotonic() - started, "library": library, "ranks": len(table)}
    except BaseException as e:  # noqa: BLE001  (an MPI abort is reported too, where it returns at all)
        return {"state": "failed", "error": error_text(e), "seconds": time.monotonic() - started}
    finally:
        faulthandler.cancel_dump_traceback_later()


def main(argv=None) -> int:
    """The worker's command line (launcher.render.worker_command), so that the probe job's srun lines are the
    run's with only the module changed."""
    parser = argparse.ArgumentParser(prog="python -m srl_hpc.probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True, type=Path, help="the probe's directory")
    parser.add_argument("--task-id", type=int, default=None, help="default: $SLURM_PROCID (+ --first-task)")
    parser.add_argument("--first-task", type=int, default=None, metavar="K",
                        help="slurm.layout: jobs: this group's job runs tasks K, K+1, ... (as the worker's)")
    parser.add_argument("--slurm", action="store_true", help="started by srun (as the workers are)")
    parser.add_argument("--rendezvous", choices=("file", "mpi"), default="file",
                        help="mpi: also try the workers' MPI rendezvous, last")
    parser.add_argument("--log-dir", type=Path, help="this task's output to LOG_DIR/<worker>.log")
    args = parser.parse_args(argv)
    task_id = task_id_of(args, os.environ)
    run = RunDir(args.run_dir)
    exp = config.load(run.experiment)
    graph = wiring.build(exp)
    name = graph.names[task_id]
    if args.log_dir:
        redirect_output(args.log_dir / f"{file_stem(name)}.log")
    print(f"probe task {task_id}: {name} of group {graph.worker(name).group}", flush=True)
    try:
        probe(exp, graph, name, args.run_dir, mpi=args.rendezvous == "mpi")
    except Exception:  # noqa: BLE001  the launcher finds what is missing; the log says why
        traceback.print_exc()
        return 1
    print("probe task done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
