"""One probe task, its phases in order (srl_hpc/probe/__init__.py lists them); `python -m srl_hpc.probe` runs
main()."""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import time
import traceback
from pathlib import Path

import zmq

from srl_hpc import config
from srl_hpc import graph as wiring
from srl_hpc.probe import (
    BARRIER_TIMEOUT,
    FINISH_TIMEOUT,
    MPI_BOUND,
    PORT,
    SERVE_TIMEOUT,
    ProbeDir,
    error_text,
    write_json,
)
from srl_hpc.probe.facts import measure
from srl_hpc.probe.network import Responder, all_reduce, ping_all
from srl_hpc.rundir import RunDir, file_stem, redirect_output, task_id_of
from srl_hpc.services import network
from srl_hpc.services.rendezvous import FileBarrier, FileRendezvous, MpiRendezvous
from srl_hpc.streams import endpoints
from srl_hpc.streams.security import PrivateContext


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
    entry: dict = {"worker": name, "host": None, "node": facts["node"], "ports": {}, "gpu": None, "gpu_index": None}
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
    parser.add_argument(
        "--first-task",
        type=int,
        default=None,
        metavar="K",
        help="slurm.layout: jobs: this group's job runs tasks K, K+1, ... (as the worker's)",
    )
    parser.add_argument("--slurm", action="store_true", help="started by srun (as the workers are)")
    parser.add_argument(
        "--rendezvous", choices=("file", "mpi"), default="file", help="mpi: also try the workers' MPI rendezvous, last"
    )
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
